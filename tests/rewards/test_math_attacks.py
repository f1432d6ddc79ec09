"""Red-team answers against the math verifier: each attack is pinned at reward 0 in both readings
(`math`, `math_lenient`) by a test that would score 1 if its defence were missing, and each
reading the defences must keep is pinned at 1 beside them. FINDINGS are the answers the red team
reported scoring 1 against the named gold; every one of them scored 1 before the fix."""

import pytest

pytest.importorskip("math_verify")

from rlvr.rewards.math import MathVerifier, normalize  # noqa: E402

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


# (completion, gold): reported by the red team, each scored 1 before the fix; reward 0.0
FINDINGS = [
    ("\\boxed{5 \\text{ (or 6)}}", "5"),
    ("\\boxed{5 \\text{; or 6}}", "5"),
    ("\\boxed{5 \\text{, though } 6 \\text{ is also possible}}", "5"),
    ("\\boxed{5 \\approx 6}", "5"),
    ("\\boxed{\\text{6 } \\boxed{5}}", "5"),
    ("\\boxed{1010_{10}}", "1010_2"),
    ("\\boxed{1010_{3}}", "1010_2"),
    ("\\boxed{12}", "12_3"),
]

# (completion, gold): attacks beyond the report, reward 0.0 in both readings
ATTACKS = [
    # text in a box that names another value, or hedges, is a hedge
    ("\\boxed{5 \\text{ or } 6}", "5"),
    ("\\boxed{5 \\text{ or } 6}", "6"),
    ("\\fbox{5 \\text{ or } 6}", "5"),
    ("\\boxed{5 \\text{ possibly}}", "5"),
    ("\\boxed{5 \\text{ maybe}}", "5"),
    ("\\boxed{5 \\text{ either}}", "5"),
    ("\\boxed{5 \\text{ also}}", "5"),
    ("\\boxed{5 \\text{ (perhaps)}}", "5"),
    ("\\boxed{5 \\text{ (approx.)}}", "5"),
    ("\\boxed{5 \\text{ or more}}", "5"),
    ("\\boxed{5 \\text{ at least}}", "5"),
    ("\\boxed{\\text{at least } 5}", "5"),
    ("\\boxed{5 \\text{ (not 6)}}", "5"),
    ("\\boxed{5 \\text{ (6?)}}", "5"),
    ("\\boxed{5 \\text{?}}", "5"),
    ("\\boxed{5 \\text{ six}}", "5"),
    ("\\boxed{5 \\text{ or six}}", "5"),
    ("\\boxed{5 \\text{ or } \\text{six}}", "5"),
    ("\\boxed{5 \\text{ 或六}}", "5"),
    ("\\boxed{5 \\text{ and a half}}", "5"),
    ("\\boxed{5 \\text{ dozen}}", "5"),
    ("\\boxed{5 \\text{ million}}", "5"),
    ("\\boxed{5 \\text{ squared}}", "5"),
    ("\\boxed{5 \\text{ or}}", "5"),
    ("\\boxed{\\text{or } 5}", "5"),
    ("\\boxed{5 \\textbf{ (or 6)}}", "5"),
    ("\\boxed{5 \\textit{ or 6}}", "5"),
    ("\\boxed{5 \\textnormal{ (or 6)}}", "5"),
    ("\\boxed{5 \\mathrm{ (or 6)}}", "5"),
    ("\\boxed{5 \\mathbf{ or 6}}", "5"),
    ("\\boxed{5 \\mbox{ (or 6)}}", "5"),
    ("\\boxed{5 \\text { (or 6)}}", "5"),
    ("\\boxed{5 \\text{{ or 6}}}", "5"),
    ("\\boxed{5 \\text{ (or }6\\text{)}}", "5"),
    ("\\boxed{5 \\text{(}6\\text{)}}", "5"),
    ("\\boxed{5 \\text{\\textbf{or} 6}}", "5"),
    ("\\boxed{5 \\text 6}", "5"),
    ("\\boxed{\\text{5}\\text{ maybe}}", "5"),
    ("\\boxed{\\text{5 or 6}}", "5"),
    ("\\boxed{5\\mathrm{i}}", "5"),
    ("\\boxed{2\\mathrm{e}}", "2"),
    ("\\boxed{5 \\text{ e}}", "5"),
    # math after text is not a unit: math-verify dropped the text and everything after it
    ("\\boxed{5 \\text{ cm} + \\frac{1}{2}}", "5"),
    ("\\boxed{5 \\text{ cm} + {6}}", "5"),
    ("\\boxed{5 \\text{ m} \\cdot \\frac{1}{2}}", "5"),
    ("\\boxed{5 \\text{ cm} \\times 3 \\text{ cm}}", "5"),
    ("\\boxed{5\\text{cm}6\\text{mm}}", "5"),
    ("\\boxed{5 \\text{ or 6}^2}", "5"),
    # the same hedge words outside \text{}
    ("\\boxed{5 less}", "5"),
    ("\\boxed{5 maybe}", "5"),
    ("\\boxed{at least 5}", "5"),
    ("\\boxed{\\pi less}", "\\pi"),
    ("\\boxed{5 \\lor 6}", "5"),
    # relations other than equality never match a value
    ("\\boxed{x \\approx 5}", "5"),
    ("\\boxed{5 ≈ 6}", "5"),
    ("\\boxed{x ≈ 5}", "5"),
    ("\\boxed{x ≃ 5}", "5"),
    ("\\boxed{x ≅ 5}", "5"),
    ("\\boxed{x ≡ 5}", "5"),
    ("\\boxed{x ~= 5}", "5"),
    ("\\boxed{x \\~= 5}", "5"),
    ("\\boxed{x \\equiv 5}", "5"),
    ("\\boxed{x \\equiv 5 \\pmod{7}}", "5"),
    ("\\boxed{5 \\sim 6}", "5"),
    ("\\boxed{5 \\simeq 6}", "5"),
    ("\\boxed{5 \\cong 6}", "5"),
    ("\\boxed{5 \\propto 6}", "5"),
    ("\\boxed{5 \\equiv 6}", "5"),
    ("\\boxed{5 \\ll 6}", "5"),
    ("\\boxed{5 \\gtrsim 6}", "5"),
    ("\\boxed{x \\lesssim 5}", "5"),
    ("\\boxed{x := 5}", "5"),
    ("\\boxed{x \\to 5}", "5"),
    ("\\boxed{5 \\neq 6}", "5"),
    ("\\boxed{5 \\ne 6}", "5"),
    ("\\boxed{5 \\not= 6}", "5"),
    ("\\boxed{5 ≠ 6}", "5"),
    ("\\boxed{5 < 6}", "5"),
    ("\\boxed{5 > 4}", "5"),
    ("\\boxed{5 \\le 6}", "5"),
    ("\\boxed{5 \\leq 6}", "5"),
    ("\\boxed{5 ≤ 6}", "5"),
    ("\\boxed{5 \\ge 4}", "5"),
    ("\\boxed{5 \\geq 4}", "5"),
    ("\\boxed{5 \\le 5}", "5"),
    ("\\boxed{x \\approx 5}", "x = 5"),
    ("\\boxed{x \\equiv 5}", "x = 5"),
    ("\\boxed{x \\ge 5}", "x = 5"),
    ("\\boxed{x \\ne 6}", "x = 5"),
    ("\\boxed{x \\approx 5}", "x \\le 5"),
    # nested and several boxes are several answers
    ("\\boxed{5} \\boxed{6}", "5"),
    ("\\boxed{\\boxed{5} \\text{ or } 6}", "5"),
    ("\\boxed{\\boxed{5}\\boxed{6}}", "5"),
    ("\\boxed{6 \\fbox{5}}", "5"),
    ("\\boxed{6 \\boxed 5}", "5"),
    ("\\fbox{\\fbox{6} 5}", "5"),
    ("\\boxed{\\text{\\boxed{5} or 6}}", "5"),
    ("\\fbox{5 \\text{ (or 6)}}", "5"),
    # an answer restated after the last box, tag or answer line is an answer too
    ("\\boxed{5} Actually the answer is 6", "5"),
    ("\\boxed{5}\nAnswer: 6", "5"),
    ("\\boxed{5} or 6", "5"),
    ("\\boxed{5}, or maybe $6$.", "5"),
    ("\\boxed{5}. The answer is \\(6\\).", "5"),
    ("<answer>5</answer> The answer is 6.", "5"),
    ("Answer: 5\nActually, the answer is 6", "5"),
    (MINERVA.format("5") + " \\boxed{6}", "5"),
    (MINERVA.format("5") + " Or 6.", "5"),
    # content hidden, struck out or drawn over
    ("\\boxed{5 \\phantom{6}}", "5"),
    ("\\boxed{\\phantom{6}5}", "5"),
    ("\\boxed{5 \\color{white}{6}}", "5"),
    ("\\boxed{{\\color{white} 6} 5}", "5"),
    ("\\boxed{\\textcolor{white}{6} 5}", "5"),
    ("\\boxed{5 \\cancel{6}}", "5"),
    ("\\boxed{\\sout{6} 5}", "5"),
    ("\\boxed{\\overset{6}{5}}", "5"),
    ("\\boxed{\\underset{6}{5}}", "5"),
    ("\\boxed{\\stackrel{6}{5}}", "5"),
    ("\\boxed{x \\overset{?}{=} 5}", "5"),
    ("\\boxed{\\llap{6}5}", "5"),
    ("\\boxed{5 \\tag{6}}", "5"),
    ("\\boxed{5 \\hspace{6pt}}", "5"),
    ("\\boxed{{\\rm or} 5}", "5"),
    # lists, sets, intervals, percent against a single value
    ("\\boxed{5 \\pm 1}", "5"),
    ("\\boxed{5 / 6}", "5"),
    ("\\boxed{\\{5, 6\\}}", "5"),
    ("\\boxed{\\{5\\}}", "5"),
    ("\\boxed{[5, 6]}", "5"),
    ("\\boxed{[5, 5]}", "5"),
    ("\\boxed{500\\%}", "5"),
    ("\\boxed{5\\%}", "0.05"),
    ("\\boxed{\\text{five}}", "5"),
    # base subscripts are bases, and the gold's base is the one asked for
    ("\\boxed{5}", "12_3"),
    ("\\boxed{10}", "1010_2"),
    ("\\boxed{1010}", "1010_2"),
    ("\\boxed{1010_2}", "10"),
    ("\\boxed{11_4}", "12_3"),
    ("\\boxed{5_6}", "5"),
    ("\\boxed{1.5_{7}}", "1.5"),
    ("\\boxed{12_2}", "12"),
    ("\\boxed{12_2}", "4"),
    ("\\boxed{1100_2}", "12_2"),
    ("\\boxed{12_2}", "12_2"),
    ("\\boxed{5_{x}}", "5"),
    ("\\boxed{10_{two}}", "10"),
    ("\\boxed{1010_10}", "1010_{10}"),
    ("\\boxed{1_{1}}", "1"),
    ("\\boxed{2A_{3}}", "2A"),
]

# (completion, gold): readings the defences keep, reward 1.0 in both readings
KEEP = [
    # words that name no other value are units, at the end of the answer
    ("\\boxed{5 \\text{ cm}}", "5"),
    ("\\boxed{5\\text{ apples}}", "5"),
    ("\\boxed{5 \\text{ cm}^2}", "5"),
    ("\\boxed{5\\,\\text{m}/\\text{s}}", "5"),
    ("\\boxed{5 \\mathrm{cm}^2}", "5"),
    ("\\boxed{5 \\text{ units}^{2}}", "5"),
    ("\\boxed{5 \\text{ degrees}}", "5"),
    ("\\boxed{5 \\text{ times}}", "5"),
    ("\\boxed{5 \\text{ (exact)}}", "5"),
    ("\\boxed{15\\mbox{ cm}^2}", "15"),
    ("\\boxed{125\\textnormal{ miles}}", "125"),
    ("\\boxed{\\frac{1}{3} \\textbf{meters}}", "1/3"),
    ("\\boxed{x = 5 \\text{ cm}}", "5"),
    ("\\boxed{5 \\text{ cm}}", "5 \\text{ cm}"),
    ("\\boxed{\\text{Area} = 5}", "5"),
    ("\\boxed{5^\\circ}", "5"),
    ("\\boxed{\\$5}", "5"),
    ("\\boxed{5\\%}", "5"),
    ("\\boxed{\\text{5}}", "5"),
    ("\\boxed{\\text{Monday}}", "Monday"),
    ("\\boxed{\\text{(C)}}", "C"),
    ("\\boxed{\\text{not possible}}", "not possible"),
    ("\\boxed{\\mathrm{e}^2}", "e^2"),
    # "and"/"or" alone between values: a list, which a gold of several values takes
    ("\\boxed{12 \\text{ and } 13}", "12, 13"),
    ("\\boxed{1 \\text{ or } 2}", "\\{1, 2\\}"),
    ("\\boxed{5 \\pm 1}", "4, 6"),
    # a box inside a box states the same answer again
    ("\\boxed{\\boxed{5}}", "5"),
    ("\\boxed{x = \\boxed{5}}", "5"),
    ("\\text{\\boxed{5}}", "5"),
    ("\\boxed 5", "5"),
    ("\\fbox{5}", "5"),
    ("\\boxed{5} \\boxed{5}", "5"),
    # restating the same answer, or words after the box
    ("\\boxed{5}. The answer is $5$.", "5"),
    ("\\boxed{5}\n\nAnswer: 5 apples", "5"),
    ("\\boxed{5}. This answer is correct.", "5"),
    ("\\boxed{5}, not 6.", "5"),
    ("\\boxed{\\frac{1}{2}}, or equivalently $0.5$", "1/2"),
    ("<answer>5</answer> so the answer is 5", "5"),
    ("\\boxed{\\frac{1}{3}} \\approx 0.333", "1/3"),
    # relations against a gold that is itself that relation
    ("\\boxed{x \\le 5}", "x \\le 5"),
    ("\\boxed{5 \\ge x}", "x \\le 5"),
    ("\\boxed{(-\\infty, 5]}", "x \\le 5"),
    ("\\boxed{x \\neq 5}", "x \\ne 5"),
    ("\\boxed{x ≠ 5}", "x \\ne 5"),
    ("\\boxed{x \\not= 5}", "x \\ne 5"),
    ("\\boxed{x \\approx 5}", "x \\approx 5"),
    ("\\boxed{x = 5}", "5"),
    ("\\boxed{5/6}", "5/6"),
    ("\\boxed{5 / 6}", "5/6"),
    # base numerals, in the gold's base
    ("\\boxed{1010_2}", "1010_2"),
    ("\\boxed{(1010)_2}", "1010_2"),
    ("\\boxed{1010_{(2)}}", "1010_2"),
    ("\\boxed{12_{3}}", "12_3"),
    ("\\boxed{012_3}", "12_3"),
    ("\\boxed{204_5}", "204_5"),
    ("\\boxed{2A_{16}}", "2A_{16}"),
    ("\\boxed{1010}", "1010_{10}"),
    ("\\boxed{1010_{10}}", "1010"),
    ("\\boxed{0.1_2}", "0.1_2"),
    ("\\boxed{x_1 + x_2}", "x_2 + x_1"),
    ("\\boxed{a_{12}}", "a_{12}"),
    ("\\boxed{\\log_2 8}", "3"),
    ("\\boxed{2x_3}", "2x_3"),
]

# (completion, gold): hedges in prose, which only the lenient reading reads; reward 0.0
LENIENT_ATTACKS = [
    ("The answer is 10_2", "10"),
    ("The answer is 10_2.", "2"),
    ("The answer is 5 (or 6).", "5"),
    ("The answer is 5, though 6 is also possible.", "5"),
    ("The answer is 5, or maybe 6.", "5"),
    ("The answer is 5 or possibly 6.", "5"),
    ("The answer is 5; alternatively 6.", "5"),
    ("The answer is 5 but 6 also works", "5"),
    ("The answer is 5 \\approx 6", "5"),
    ("The answer is 5 ≈ 6", "5"),
    ("It is $5 \\approx 6$", "5"),
    ("The answer is $5 \\text{ (or 6)}$.", "5"),
    ("The answer is approximately 5", "5"),
    ("The answer is about 5", "5"),
    ("The answer is at least 5", "5"),
    ("The answer is 5 or more", "5"),
    ("The value is roughly $5$.", "5"),
    ("The answer is x \\approx 5", "5"),
]

# (completion, gold): prose the lenient reading still reads; reward 1.0
LENIENT_KEEP = [
    ("So the answer is 7.", "7"),
    ("The roots are $-2$ and $1$.", "1,-2"),
    ("The answer is 5, not 6.", "5"),
    ("The answer is 12_3.", "12_3"),
    ("The answer is $5 \\text{ cm}$.", "5"),
    ("Therefore $x \\geq 5$ is the solution.", "x \\ge 5"),
]


@pytest.mark.parametrize("completion, gold", FINDINGS, ids=_id)
def test_reported_findings_score_zero(strict, lenient, completion, gold):
    assert strict(completion, {"answer": gold}) == 0.0
    assert lenient(completion, {"answer": gold}) == 0.0


@pytest.mark.parametrize("completion, gold", ATTACKS, ids=_id)
def test_attacks_score_zero(strict, lenient, completion, gold):
    assert strict(completion, {"answer": gold}) == 0.0
    assert lenient(completion, {"answer": gold}) == 0.0


@pytest.mark.parametrize("completion, gold", KEEP, ids=_id)
def test_legitimate_readings_score_one(strict, lenient, completion, gold):
    assert strict(completion, {"answer": gold}) == 1.0
    assert lenient(completion, {"answer": gold}) == 1.0


@pytest.mark.parametrize("completion, gold", LENIENT_ATTACKS, ids=_id)
def test_prose_hedges_score_zero_in_the_lenient_reading(lenient, completion, gold):
    assert lenient(completion, {"answer": gold}) == 0.0


@pytest.mark.parametrize("completion, gold", LENIENT_KEEP, ids=_id)
def test_plain_prose_answers_still_score_one_in_the_lenient_reading(lenient, completion, gold):
    assert lenient(completion, {"answer": gold}) == 1.0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1010_2", "10"),
        ("1010_{10}", "1010"),
        ("12_3", "5"),
        ("(12)_3", "5"),
        ("12_{(3)}", "5"),
        ("-101_2", "-5"),
        ("2A_{16}", "42"),
        ("0.1_2", "\\frac{1}{2}"),
        ("4_5\\times2_5", "4\\times2"),
        ("x_1", "x_1"),
        ("2x_3", "2x_3"),
        ("\\log_2 8", "\\log_2 8"),
        ("12_2", ""),  # no digit 2 in base 2: unreadable
        ("5_{37}", ""),  # no base 37
        ("5_{x}", ""),
        ("12_10", ""),  # the subscript is the digit 1, as TeX sets it
    ],
)
def test_base_subscripts_are_read_as_bases(text, expected):
    assert normalize(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("5 \\text{ cm}^2", "5"),
        ("5\\,\\text{m}/\\text{s}", "5"),
        ("12 \\text{ and } 13", "12 ,  13"),
        ("\\text{Area} = 5", "\\text{Area} = 5"),
        ("\\text{Monday}", "\\text{Monday}"),
        ("5 \\text{ (or 6)}", ""),
        ("5 \\text{ cm} + 1", ""),
        ("5 \\phantom{6}", ""),
    ],
)
def test_text_groups_are_units_lists_labels_or_hedges(text, expected):
    assert normalize(text) == expected


def test_nested_boxes_are_several_answers():
    from rlvr.rewards.math.answer import extract_answers, shown_answers

    assert shown_answers("\\text{6 } \\boxed{5}") == ["\\text{6 } 5", "5"]
    assert shown_answers("\\boxed{\\boxed{5}}") == ["5", "5", "5"]
    assert shown_answers("6 \\boxed 5") == ["6 5", "5"]
    assert shown_answers("\\boxed{5") is None
    assert extract_answers("\\boxed{\\boxed{5}}").answers == ("5",)
    assert extract_answers("\\boxed{\\text{6 } \\boxed{5}}").answers == ("\\text{6 } 5", "5")


def test_restatements_after_the_last_marker_are_answers():
    from rlvr.rewards.math.answer import extract_answers

    assert extract_answers("\\boxed{5} Actually the answer is 6.").answers == ("5", "6")
    assert extract_answers("The answer is 6, so \\boxed{5}").answers == ("5",)
    assert extract_answers("\\boxed{5}. The answer is correct.").answers == ("5",)
    assert extract_answers("\\boxed{5}, the answer is $(1, 2)$").answers == ("5", "(1, 2)")


def test_relations_are_named_for_the_gold_check():
    from rlvr.rewards.math.notation import loose_relations, map_relations

    assert loose_relations(map_relations("x ≈ 5 \\equiv 6")) == {"approx", "equiv"}
    assert loose_relations(map_relations("x ~= 5")) == {"approx"}
    assert loose_relations("x \\le 5, x \\ne 6, x = 7, x \\in [1, 2]") == frozenset()
    assert map_relations("x \\not= 5").split() == ["x", "\\ne", "5"]


def test_enough_attacks_are_pinned():
    assert len(FINDINGS) + len(ATTACKS) + len(LENIENT_ATTACKS) >= 150
    assert len(KEEP) + len(LENIENT_KEEP) >= 60
