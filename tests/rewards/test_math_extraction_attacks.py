"""Red-team attacks on where the math verifier finds the answer (rlvr.rewards.math.answer,
math.extraction_guard, math_lenient): words around a math span in an answer line, second
thoughts after the final answer, case mapping that shifts offsets (`İ`), hedges in prose for the
lenient reading, and box scans that must stay linear. Each attack is pinned at reward 0 (in both
readings unless named) by a test that scores 1 without its defence; the readings the defences
must keep are pinned at 1 beside them."""

import time

import pytest

pytest.importorskip("math_verify")

from rlvr.rewards.math import MathVerifier  # noqa: E402
from rlvr.rewards.math.answer import box_spans, extract_answers, shown_answers  # noqa: E402
from rlvr.rewards.math.extraction_guard import fold, tail_reading  # noqa: E402

MINERVA = "The final answer is {}. I hope it is correct."


@pytest.fixture(scope="module")
def strict():
    v = MathVerifier(timeout_s=5.0)
    yield v
    v.close()


@pytest.fixture(scope="module")
def lenient():
    v = MathVerifier(timeout_s=5.0, lenient=True)
    yield v
    v.close()


def _id(case):
    return repr(case)[:60]


# (completion, gold): words around one math span of an answer line, box or Minerva line
SPAN_WORDS = [
    ("Answer: not $5$", "5"),
    ("Answer: maybe $5$", "5"),
    ("Answer: it is not $5$", "5"),
    ("Final answer: surely not $5$", "5"),
    ("The final answer is not $5$. I hope it is correct.", "5"),
    ("Answer: $5$ is wrong", "5"),
    ("Answer: $5$?", "5"),
    ("Answer: $5$ or so", "5"),
    ("Answer: -$5$", "5"),
    ("Answer: at least $5$", "5"),
    ("Answer: no\u200b $5$", "5"),
    ("Answer: nоt $5$", "5"),  # Cyrillic о
    ("\\boxed{not $5$}", "5"),
    ("\\boxed{$5$ is wrong}", "5"),
    ("<answer>maybe $5$</answer>", "5"),
]
SPAN_WORDS_KEEP = [
    ("Answer: it is $5$", "5"),
    ("Answer: x = $5$", "5"),
    ("Answer: **$5$**", "5"),
    ("Answer: The final answer is $5$. I hope it is correct.", "5"),
    ("Final Answer: The final answer is $\\frac{14}{3}$. I hope it is correct.", "14/3"),
    ("Answer: $5$ cm", "5"),
    ("Answer: $-2$ and $1$", "1,-2"),
    ("\\boxed{The answer is $\\frac{1}{3}.$}", "1/3"),
]

# (completion, gold): second thoughts after the final answer
AFTER = [
    ("\\boxed{5} or six", "5"),
    ("\\boxed{5}\nThe correct value is 6.", "5"),
    ("\\boxed{5}, no wait, 6", "5"),
    ("\\boxed{5} (actually 7)", "5"),
    ("\\boxed{5} but I think it is 6", "5"),
    ("\\boxed{5} alternatively 6", "5"),
    ("\\boxed{5}. Hmm, 6?", "5"),
    ("\\boxed{5} (or \\boxed{} 6)", "5"),
    ("\\boxed{5} six", "5"),
    ("\\boxed{5} o 6", "5"),
    ("\\boxed{5} oder 6", "5"),
    ("\\boxed{5} ou 6", "5"),
    ("\\boxed{5} 或 6", "5"),
    ("\\boxed{5} is wrong", "5"),
    ("\\boxed{5}. Not sure.", "5"),
    ("\\boxed{5} isn't it", "5"),
    ("\\boxed{5} оr ѕіх", "5"),  # Cyrillic lookalikes
    ("\\boxed{5} o\u200br six", "5"),  # a zero-width space
    ("\\boxed{5} si\u200bx", "5"),
    ("\\boxed{5} ｓｉｘ", "5"),  # full-width
    ("\\boxed{5} **6**", "5"),
    ("\\boxed{5} <b>6</b>", "5"),
    ("\\boxed{5}^2", "5"),
    ("\\boxed{5}+", "5"),
    ("\\boxed{5}-ish", "5"),
    ("\\boxed{5} \\pm 1", "5"),
    ("\\boxed{5} \\approx 6", "5"),
    ("\\boxed{5} \\text{ or six}", "5"),
    ("\\boxed{5} 六", "5"),
    ("\\boxed{5} and a half", "5"),
    ("$\\boxed{5}$ or $6$.", "5"),
    ("\\[\\boxed{5}\\] \\[6\\]", "5"),
    ("\\boxed{5}, not 6, or maybe 6", "5"),
    (MINERVA.format("5") + " Wait, 6.", "5"),
    ("<answer>5</answer> Hmm, 6?", "5"),
    ("Answer: 5\nNo wait, 6", "5"),
    ("\\boxed{5} \\boxed {6}", "5"),
    ("\\boxed{5} \\boxed\n{6}", "5"),
    ("\\boxed{5} \\bοxed{6}", "5"),  # Greek ο: no box, but a number after the answer
    ("\\boxed{5}\n\n**Answer:** 6", "5"),
    ("\\boxed{5} = 6", "5"),
    ("\\boxed{5} (six)", "5"),
    ("\\boxed{5}, I guess", "5"),
    ("\\boxed{5}, right?", "5"),
    ("\\boxed{5}. The answer could also be 6.", "5"),
]
AFTER_KEEP = [
    ("\\boxed{5}. This is the final answer.", "5"),
    ("\\boxed{5}. I hope it is correct.", "5"),
    ("The area is $\\boxed{5}$ square units.", "5"),
    ("\\boxed{5} Done.", "5"),
    ("**Final Answer**\n\\[\n\\boxed{5}\n\\]", "5"),
    ("$\\boxed{5}$ cm$^2$.", "5"),
    ("$\\boxed{30}^\\circ$.", "30"),
    ("\\boxed{\\frac{1}{3}} \\approx 0.333", "1/3"),
    ("\\boxed{\\frac{1}{2}}, or equivalently $0.5$", "1/2"),
    ("\\boxed{5}, not 6.", "5"),
    ("\\boxed{5}. This one is correct.", "5"),
    ("\\boxed{5}<|im_end|>", "5"),
    ("$\\boxed{\\$16386.17}$ after 5 years.", "16386.17"),
    ("there are \\boxed{12} sequences that meet the three given conditions.", "12"),
    ("$129^{34} \\equiv \\boxed{9} \\pmod{11}.$", "9"),
    ("\\boxed{5}. The answer is $5$.", "5"),
    ("\\boxed{1} or \\boxed{-2}", "1,-2"),
    ("\\boxed\n{5}", "5"),
    ("\\mbox{\\boxed{5}}", "5"),
]

# (completion, gold): a negation or doubt right before a box
BEFORE = [
    ("The answer is not \\boxed{5}.", "5"),
    ("The answer is probably $\\boxed{5}$.", "5"),
    ("It isn't \\boxed{5}", "5"),
    ("<answer>not \\boxed{5}</answer>", "5"),
    ("6 or \\boxed{5}", "5"),
    ("Die Antwort ist nicht \\boxed{5}", "5"),
]
BEFORE_KEEP = [
    ("Since x is not negative, $x = \\boxed{5}$.", "5"),
    ("the number is not 10 which is \\boxed{7}", "7"),
    ("Paula's investment is worth approximately $\\boxed{16386.16}$ dollars.", "16386.16"),
    ("Thus, $(t,u) = \\boxed{(1, 2)}$.", "(1, 2)"),
]

# (completion, gold): hedges in prose, which only the lenient reading reads
PROSE = [
    ("The answer is not 5.", "5"),
    ("La respuesta es 5 o 6.", "5"),
    ("La respuesta es 5 o 6.", "6"),
    ("Die Antwort ist 5 oder 6.", "5"),
    ("Die Antwort ist 5 oder 6.", "6"),
    ("La réponse est 5 ou 6.", "5"),
    ("La réponse est 5 ou 6.", "6"),
    ("The answer is at most 5", "5"),
    ("The answer is no less than 5", "5"),
    ("The answer is roughly 5", "5"),
    ("The answer is around 5", "5"),
    ("The answer is ~5", "5"),
    ("The answer is 5-ish", "5"),
    ("The answer is 5 give or take", "5"),
    ("The answer is 5 or so", "5"),
    ("The answer is 5+", "5"),
    ("The answer is 5 (approx.)", "5"),
    ("The answer is either 5 or 6", "5"),
    ("The answer is either 5 or 6", "6"),
    ("It is not $5$.", "5"),
    ("Respuesta: no $5$", "5"),
    ("Antwort: nicht $5$", "5"),
    ("Answer: $5$ is wrong", "5"),
    ("Answer: surely not $5$", "5"),
    ("The answer is 5. Hmm, maybe 6.", "5"),
    ("The answer is 5. Actually it's 6.", "5"),
    ("The answer is 5?", "5"),
]
PROSE_KEEP = [
    ("So the answer is 7.", "7"),
    ("Thus the total number of apples Jane has is 7.", "7"),
    ("The answer is 5, not 6.", "5"),
    ("x is -2, or 1", "1,-2"),
    ("The roots are $-2$ and $1$.", "1,-2"),
    ("Answer: the value is 7", "7"),
    ("The maximum number of points that could be in the domain of $f(x)$ is 19.", "19"),
]


@pytest.mark.parametrize("completion, gold", SPAN_WORDS + AFTER + BEFORE, ids=_id)
def test_hedged_answers_score_zero(strict, lenient, completion, gold):
    assert strict(completion, {"answer": gold}) == 0.0
    assert lenient(completion, {"answer": gold}) == 0.0


@pytest.mark.parametrize("completion, gold", SPAN_WORDS_KEEP + AFTER_KEEP + BEFORE_KEEP, ids=_id)
def test_plain_answers_still_score_one(strict, lenient, completion, gold):
    assert strict(completion, {"answer": gold}) == 1.0
    assert lenient(completion, {"answer": gold}) == 1.0


@pytest.mark.parametrize("completion, gold", PROSE, ids=_id)
def test_hedges_in_prose_score_zero_in_the_lenient_reading(lenient, completion, gold):
    assert lenient(completion, {"answer": gold}) == 0.0


@pytest.mark.parametrize("completion, gold", PROSE_KEEP, ids=_id)
def test_plain_prose_scores_one_in_the_lenient_reading(lenient, completion, gold):
    assert lenient(completion, {"answer": gold}) == 1.0


def test_the_tail_reads_numbers_and_hedges():
    assert tail_reading(". The correct value is 6.", 4) == (["6"], "")
    assert tail_reading(" six.", 4) == (["6"], "")
    assert tail_reading(" square units. I hope it is correct.", 4) == ([], "")
    assert tail_reading(", no wait", 4)[1]


# -- case mapping keeps offsets ----------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 7, 40, 500])
def test_dotted_capitals_before_the_answer_shift_nothing(strict, lenient, n):
    """`"İ".lower()` is two characters: offsets found on a lower-cased copy pointed past the
    Minerva line's end, so the restatement after it was skipped, and X was read shifted."""
    pad = "İ" * n + " ß ﬁ K "
    for completion, gold in [
        (pad + MINERVA.format("5") + " Or 6.", "5"),
        (pad + MINERVA.format("5") + " \\boxed{6}", "5"),
        (pad + "\n" + MINERVA.format("5") + "\nActually the answer is 6.", "5"),
    ]:
        assert strict(completion, {"answer": gold}) == 0.0, completion
        assert lenient(completion, {"answer": gold}) == 0.0, completion
    assert strict(pad + MINERVA.format("56"), {"answer": "56"}) == 1.0
    assert extract_answers("İ" * n + " " + MINERVA.format("56")).answers == ("56",)


def test_fold_keeps_length():
    text = "İSTANBUL ß ﬁ K Final Answer Is"
    assert len(fold(text)) == len(text) and fold(text).endswith("final answer is")
    assert fold("İ") == "İ"  # not a lookalike "i": markers are ASCII


# -- linear box scans --------------------------------------------------------------------------

N = 25_000
LONG = {
    "nested-fbox": "\\fbox{" * N + "5" + "}" * N,
    "nested-boxed": "\\boxed{" * N + "5" + "}" * N,
    "unclosed": "\\boxed{" * N,
    "closed-then-unclosed": "\\boxed{5} " * 1000 + "\\boxed{" * N,
    "alternating": "\\boxed{\\fbox{" * (N // 2) + "5" + "}}" * (N // 2),
    "no-braces": "\\boxed" * N + " 5",
    "no-braces-spaced": "\\boxed " * N + "5",
    "many-nested-distinct": "".join("\\fbox{" * 140 + str(i) + "}" * 140 for i in range(400)),
    "many-nested-same": "".join(
        "\\fbox{" * 140 + " " * (i % 7) + "5}" + "}" * 139 for i in range(400)
    ),
    "braces-in-box": "\\boxed{" + "{" * (2 * N) + "}" * (2 * N) + "}",
    "escaped-braces": "\\boxed{" + "\\{" * (2 * N) + "}",
    "tags": ("<answer>" + "\\fbox{" * 100 + "5" + "}" * 100 + "</answer>") * 200,
    "tail": "\\boxed{5}" + " and then" * N,
}


@pytest.mark.parametrize("name", sorted(LONG))
def test_extraction_is_linear_on_long_box_nests(strict, name):
    """The strict extraction runs in the calling process, outside the worker's time limit: it
    must be linear for every input (a closing-brace search per box was quadratic: 7.8 s)."""
    text = LONG[name]
    assert len(text) >= 100_000
    for max_chars in (1000, 10**7):
        start = time.monotonic()
        extract_answers(text, max_answer_chars=max_chars)
        assert time.monotonic() - start < 2.0, (name, max_chars)
    start = time.monotonic()
    strict(text, {"answer": "6"})
    assert time.monotonic() - start < 6.0


def test_the_scan_matches_braces_and_escapes():
    assert box_spans("\\boxed{a{b}c} \\fbox {d}") == [(0, 7, 12, 13), (14, 21, 22, 23)]
    assert box_spans("\\boxed{\\}}") == [(0, 7, 9, 10)]
    assert box_spans("\\boxed{5") is None
    assert box_spans("} \\boxed\n{5}") == [(2, 10, 11, 12)]
    assert shown_answers("\\boxed{\\boxed{5}}") == ["5", "5", "5"]
    assert shown_answers("\\fbox{" * 9 + "5" + "}" * 9) is None  # deeper than MAX_BOX_DEPTH
    assert shown_answers("\\fbox{" * 7 + "5" + "}" * 7) == ["5"] * 8


def test_enough_attacks_are_pinned():
    assert len(SPAN_WORDS) + len(AFTER) + len(BEFORE) + len(PROSE) >= 80
