"""The strict math verifier reads the answers real models write (issue 24): math spans inside an
answer line or box, trailing punctuation, percent words, several values in separate boxes, no
thousands group after a leading zero, a decimal comma against a one-decimal gold. Each
acceptance is pinned next to the defence that must still hold (a test that fails if the defence
were missing)."""

import pytest

pytest.importorskip("math_verify")

from rlvr.rewards.math import MathVerifier, check_answers, normalize  # noqa: E402
from rlvr.rewards.math.answer import clean_answer, extract_answers, math_spans  # noqa: E402

MINERVA = "Final Answer: The final answer is $\\frac{14}{3}$. I hope it is correct."


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(timeout_s=5.0)
    yield v
    v.close()


def _id(case):
    return repr(case)[:60]


# (completion, gold): reward 1.0
READ = [
    # one math span in an answer line or box is the answer
    (MINERVA, "14/3"),
    ("Answer: the value is $x = 5$", "5"),
    ("\\boxed{The answer is $\\frac{1}{3}.$}", "1/3"),
    ("<answer>It is $\\frac{1}{3}$.</answer>", "\\frac13"),
    ("Final Answer: The final answer is $14 {, }916$. I hope it is correct.", "14916"),
    ("Final answer: \\(7\\)", "7"),
    # Minerva's closing line is the answer, also after boxed intermediate results
    ("\\boxed{200}, then \\boxed{255}. " + MINERVA.replace("\\frac{14}{3}", "10,455"), "10455"),
    ("The final answer is 5. I hope it is correct.", "5"),
    ("The final answer is $\\boxed{5}$. I hope it is correct.", "5"),
    ("Answer: $$12$$", "12"),
    # trailing punctuation is not part of the answer
    ("\\boxed{\\frac{1}{3},}", "1/3"),
    ("\\boxed{\\frac{1}{3} .}", "1/3"),
    ("\\boxed{5.}", "5"),
    ("Answer: 5;", "5"),
    ("\\boxed{5!}", "120"),
    # percent words and abbreviations mean the percent sign
    ("\\boxed{28 percent}", "28\\%"),
    ("\\boxed{28 pct}", "28\\%"),
    ("\\boxed{28 percentage}", "28\\%"),
    ("\\boxed{28\\text{ percent}}", "28%"),
    ("\\boxed{28 Percent}", "28"),
    ("\\boxed{28}", "28 percent"),
    # a gold of several values, the values in separate boxes or tags
    ("The roots are \\boxed{-2} and \\boxed{1}.", "1,-2"),
    ("\\boxed{1} \\boxed{-2}", "\\{1,-2\\}"),
    ("<answer>1</answer> <answer>-2</answer>", "-2, 1"),
    ("<answer>1</answer><answer>-2</answer>", "1,-2"),
    ("\\boxed{1+\\sqrt{19}}, \\boxed{1-\\sqrt{19}}", "1 \\pm \\sqrt{19}"),
    ("Answer: $-2$ and $1$", "1,-2"),
    ("\\boxed{12 $ and $13}", "12, 13"),
    # "0,111" is not 111; math-verify's parser reads it as 0.111
    ("\\boxed{0,111}", "0.111"),
    # against a gold that is one decimal, a decimal comma is that decimal
    ("\\boxed{2,74}", "2.74"),
    ("\\boxed{2{,}74}", "2.74"),
    ("\\boxed{1000,99}", "1000.99"),
    ("\\boxed{-0,5}", "-0.5"),
    ("\\boxed{1,22}", "$1.22$"),
    ("\\boxed{1,0000}", "1.0"),
    # a gold that is one math span among words is that span
    ("\\boxed{125}", "$125$ miles"),
]
# (completion, gold): the defences beside them, reward 0.0
REJECT = [
    # two different spans are two answers; math around a span makes it unreadable
    ("Final Answer: The final answer is $5$ or $6$. I hope it is correct.", "5"),
    ("Final Answer: The final answer is $5$ or $6$. I hope it is correct.", "6"),
    ("\\boxed{The answer is $\\frac{1}{3}$ or $\\frac{1}{2}$}", "1/3"),
    # a Minerva line is one answer among the tags' and its own kind
    (
        "The final answer is 5. I hope it is correct.\n"
        "The final answer is 6. I hope it is correct.",
        "6",
    ),
    ("<answer>5</answer> The final answer is 6. I hope it is correct.", "6"),
    ("\\boxed{6} The final answer is 5. I hope it is correct.", "6"),
    ("The final answer is 6 or 5. I hope it is correct.", "5"),
    ("The final answer is \\boxed{5} or \\boxed{6}. I hope it is correct.", "6"),
    ("<think>The final answer is 5. I hope it is correct.</think>", "5"),
    ("Answer: $5$ or 6", "5"),
    ("Answer: $5$ or 6", "6"),
    ("Final Answer: The largest $n$ is 34.", "34"),
    ("Answer: $5", "5"),
    ("Answer: $5$ $", "5"),
    ("Answer: \\(5$", "5"),
    ("\\boxed{$\\frac{14}{3}$ \\frac{1}{2}}", "14/3"),
    # punctuation: an ellipsis and what a stripped mark would expose still count
    ("\\boxed{1, 2, 3, ...}", "1, 2, 3"),
    ("\\boxed{2^{10}.}", "2"),
    ("The answer is \\boxed{1/3.}", "1"),
    ("\\boxed{5!}", "5"),
    # percent: the count of percent, not the fraction; a word alone is no number
    ("\\boxed{28 percent}", "0.28"),
    ("\\boxed{28 percent}", "\\frac{28}{100}"),
    ("\\boxed{percent}", "28\\%"),
    ("\\boxed{28 percentile}", "28"),
    # several values: all of them, no more, and only for a gold of several values
    ("\\boxed{1}", "1,-2"),
    ("\\boxed{1} \\boxed{1}", "1,-2"),
    ("\\boxed{1} \\boxed{-2} \\boxed{3}", "1,-2"),
    ("\\boxed{1} \\boxed{\\{1,-2\\}}", "1,-2"),
    ("\\boxed{1} \\boxed{-2}", "(1,-2)"),
    ("\\boxed{1} or \\boxed{-2}", "1"),
    ("\\boxed{12 $ and $13}", "12"),
    ("\\boxed{12 $ or $13}", "13"),
    # a leading zero group is never a thousands group
    ("\\boxed{111}", "0,111"),
    ("\\boxed{0,111}", "111"),
    ("\\boxed{111}", "0{,}111"),
    ("\\boxed{0{,}111}", "111"),
    # a decimal comma only against a one-decimal gold, and only that decimal
    ("\\boxed{1.22}", "1,22"),
    ("\\boxed{2,75}", "2.74"),
    ("\\boxed{2,740}", "2.74"),
    ("\\boxed{2, 74}", "2.74"),
    ("\\boxed{2,7,4}", "2.74"),
    ("\\boxed{2,74}", "274"),
    ("\\boxed{2,74}", "2"),
    ("\\boxed{2,74}", "74"),
    ("\\boxed{2,74}", "2.74, 5"),
    ("\\boxed{-2,74}", "2.74"),
    ("\\boxed{2,74} or \\boxed{3,74}", "2.74"),
]


@pytest.mark.parametrize("completion, gold", READ, ids=_id)
def test_answers_as_models_write_them_score_one(verifier, completion, gold):
    assert verifier(completion, {"answer": gold}) == 1.0


@pytest.mark.parametrize("completion, gold", REJECT, ids=_id)
def test_the_defences_beside_them_score_zero(verifier, completion, gold):
    assert verifier(completion, {"answer": gold}) == 0.0


def test_a_minerva_line_reads_its_one_span():
    assert extract_answers(MINERVA).answers == ("\\frac{14}{3}",)
    hedged = extract_answers("Answer: $5$ or $6$")
    assert hedged.answers == ("5", "6") and not hedged.problem


@pytest.mark.parametrize(
    "text, expected",
    [
        ("$5$ or $6$", (["5", "6"], ["or"])),
        ("a $$x$$ b \\(y\\) c \\[z\\]", (["x", "y", "z"], ["a", "b", "c"])),
        ("\\$5 and \\$6", ([], ["\\$5", "and", "\\$6"])),
        ("$5", None),
        ("$5\\)", None),
        ("\\)5\\(", None),
    ],
)
def test_math_spans_pair_their_delimiters(text, expected):
    found = math_spans(text)
    assert (found and (found[0], found[1].split())) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("\\frac{1}{3},", "\\frac{1}{3}"),
        ("5.", "5"),
        ("$\\frac13.$", "\\frac13"),
        ("1, 2, ...", "1, 2, ..."),
        ("5\\,", "5\\,"),
        ("5!", "5!"),
    ],
)
def test_one_final_punctuation_mark_is_dropped(text, expected):
    assert clean_answer(text) == expected


def test_percent_words_need_a_number_before_them():
    assert normalize("28 percent") == normalize("28\\%") == "28"
    assert normalize("percent") == "\\text{percent}"


def test_several_values_must_be_exactly_the_gold_values():
    assert check_answers(("-2", "1"), "1,-2") == (True, -1)
    assert check_answers(("x = -2", "x = 1"), "1,-2") == (True, -1)
    assert check_answers(("-2", "1", "1.0"), "1,-2") == (True, -1)  # 1.0 is 1
    assert check_answers(("-2", "2"), "1,-2")[0] is False
    assert check_answers(("-2", "1"), "-2")[0] is False
