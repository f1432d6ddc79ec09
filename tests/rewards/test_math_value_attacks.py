"""The red team's third round against what the math verifier reads inside an answer and how it
compares values (rlvr.rewards.math and its notation, value_forms, value_units): each
attack is a `\\boxed{}` answer pinned at reward 0 against its gold in both readings, and each
reading the defences must keep is pinned at 1. FINDINGS are the red team's (each scored 1 before
the fix), ATTACKS are variations that scored 1 before the fix, GUARDS variations that already
scored 0 and must stay there."""

import time

import pytest

pytest.importorskip("math_verify")

from rlvr.rewards.math import MathVerifier  # noqa: E402
from rlvr.rewards.math.notation import (  # noqa: E402
    drop_plain_unit,
    read_notation,
    relation_pieces,
    words_of,
)
from rlvr.rewards.math.value_forms import percent_ok, proven_zero  # noqa: E402
from rlvr.rewards.math.value_units import known_word  # noqa: E402


@pytest.fixture(scope="module")
def strict():
    v = MathVerifier(timeout_s=10.0)
    yield v
    v.close()


@pytest.fixture(scope="module")
def lenient():
    v = MathVerifier(timeout_s=10.0, lenient=True)
    yield v
    v.close()


def _id(case):
    return repr(case)[:60]


def _boxed(answer):
    return "\\boxed{" + answer + "}"


# (boxed answer, gold): reported by the red team, each scored 1 before the fix; reward 0.0
FINDINGS = [
    ("5\\cdot 1_3", "12_3"),
    ("5 \\times 1_3", "12_3"),
    ("5 + 0_3", "12_3"),
    ("1_3 \\cdot 5", "12_3"),
    ("\\frac{5}{1_3}", "12_3"),
    ("5^{1_3}", "12_3"),
    ("(5)_{10}\\cdot 1_3", "12_3"),
    ("x = 4 = 3", "x=3"),
    ("x = 3 \\lor x = 4", "4"),
    ("x=3 \\lor x=4", "x=4"),
    ("1 < x < 2", "\\{1, 2\\}"),
    ("1 < x < 2", "1,2"),
    ("1 < x < 2", "(1,2)"),
    ("[5,5]", "x=5"),
    ("\\{5\\}", "x=5"),
    ("5\\text{k}", "5"),
    ("5\\text{ mil}", "5"),
    ("5\\text{ millones}", "5"),
    ("5\\text{ish}", "5"),
    ("5\\text{-ish}", "5"),
    ("5+10^{-45}\\pi", "5"),
    ("5 + e^{-200}", "5"),
    ("5\\%\\%", "5"),
    ("\\%5", "5"),
    ("5 \\text{ per mille}", "5"),
]

# (boxed answer, gold): variations that scored 1 before the fix; reward 0.0
ATTACKS = [
    ("11_3+1_3", "12_3"),
    ("2\\cdot 1_3 + 3", "12_3"),
    ("12_3 \\cdot 1", "12_3"),
    ("12_3+0", "12_3"),
    ("1_3 \\cdot 5_{10}", "12_3"),
    ("12_3 - 0", "12_3"),
    ("12_{3} \\cdot 1_{3}", "12_3"),
    ("|12_3|", "12_3"),
    ("12_3^{1}", "12_3"),
    ("1010_2 = 10", "1010_2"),
    ("12_3 = 5_{10}", "12_3"),
    ("\\sqrt{12_3^2}", "12_3"),
    ("x = 3 = 4 = 3", "x=3"),
    ("x=3=4", "x = 4"),
    ("y = 3 = 4", "y=4"),
    ("y = 7 = 2x+1", "y=2x+1"),
    ("x=5 \\vee x=4", "x=3 \\vee x=4"),
    ("x = 5+5+1 = 7 = 11", "x = 11"),
    ("z = 3+3 = 2", "z = 1 + 1 = 2"),
    ("5 \\approx 6", "5 \\approx 7"),
    ("x \\approx 5 \\approx 6", "x \\approx 5"),
    ("5", "x \\approx 5"),
    ("x \\in (1,2)", "\\{1,2\\}"),
    ("x \\in (1,2)", "(1,2)"),
    ("5 \\text{ environ}", "5"),
    ("5 \\text{ ungefähr}", "5"),
    ("5 \\text{ aprox}", "5"),
    ("5 \\text{ cca}", "5"),
    ("5 \\text{ o más}", "5"),
    ("5 \\text{ M}", "5"),
    ("5 \\text{ K}", "5"),
    ("5 \\text{ B}", "5"),
    ("5 \\text{ bn}", "5"),
    ("5\\text{ mn}", "5"),
    ("5 \\text{ lakh}", "5"),
    ("5 \\text{ crore}", "5"),
    ("5 \\text{ gross}", "5"),
    ("5\\text{ score}", "5"),
    ("5 \\text{ ca.}", "5"),
    ("5 \\text{ nope}", "5"),
    ("5 \\text{ Mio}", "5"),
    ("5 \\text{ Mrd}", "5"),
    ("5 \\text{ tausend}", "5"),
    ("5 \\text{ quarters}", "5"),
    ("5 \\text{ x}", "5"),
    ("5 \\text{ raised}", "5"),
    ("5 \\text{ (rounded)}", "5"),
    ("5 \\text{ (final)}", "5"),
    ("5 \\text{ tops}", "5"),
    ("5 \\text{ max}", "5"),
    ("5 \\text{ plus}", "5"),
    ("5 \\text{ ou plus}", "5"),
    ("5 \\text{ или больше}", "5"),
    ("5 \\text{ 个}", "5"),
    ("5 \\text{ oder so}", "5"),
    ("5 \\text{ х}", "5"),
    ("5 \\text{ cm\u200b}", "5"),
    ("5 \\text{ widgets}", "5"),
    ("\\text{falsch} = 5", "5"),
    ("5 \\mathrm{ mil}", "5"),
    ("5 \\textsf{ mil}", "5"),
    ("5\\,\\text{m}/\\text{mil}", "5"),
    ("5 increase", "5"),
    ("5 decrease", "5"),
    ("5 gain", "5"),
    ("5 o", "5"),
    ("2c", "2"),
    ("x+2c", "x+2d"),
    ("2ab", "2"),
    ("3h", "3"),
    ("5+e^{-1000}", "5"),
    ("\\pi+e^{-500}", "\\pi"),
    ("5 + 10^{-45}\\sqrt2", "5"),
    ("\\sqrt{25+10^{-1000}}", "5"),
    ("\\sqrt{25+10^{-100}}", "5"),
    ("5\\cos(10^{-30})", "5"),
    ("5 + \\sin(10^{-50})", "5"),
    ("\\ln(e^{5} + e^{-100})", "5"),
    ("5^{1+10^{-50}}", "5"),
    ("\\pi+e^{-10^{6}}", "\\pi"),
    ("%5", "5"),
    ("5%%", "5"),
    ("5 \\text{ permille}", "5"),
    ("5\\ldots", "5"),
]

# (boxed answer, gold): variations that scored 0 before and must stay at 0
GUARDS = [
    ("x = 3 = 4", "x=3"),
    ("x=3=y", "x=3"),
    ("3 = x = 4", "x=3"),
    ("x = 3, y = 4", "x = 3"),
    ("x=3 \\text{ and } x=4", "x=3"),
    ("x = 3 \\lor x = 4", "x=3"),
    ("x = 3 \\implies 4", "x=3"),
    ("x \\in \\{3, 4\\}", "x=3"),
    ("x=3 \\vee x=4", "x=3"),
    ("x = 3 \\wedge x = 4", "x=3"),
    ("x = 3 \\land x = 4", "x=3"),
    ("x = 3 \\Rightarrow x = 4", "x=3"),
    ("x = 3 \\therefore 4", "3"),
    ("\\forall x, x = 3", "3"),
    ("x=3 \\iff x=4", "x=3"),
    ("(4.9999, 5.0001)", "5"),
    ("[5,5]", "5"),
    ("x \\ge 5 \\text{ and } x \\le 5", "5"),
    ("x > 0", "x = 5"),
    ("\\{5\\} \\cup \\emptyset", "5"),
    ("[1,2]", "\\{1,2\\}"),
    ("1 \\le x \\le 2", "\\{1,2\\}"),
    ("x \\in [5,5]", "x=5"),
    ("x\\ge5 \\wedge x \\le 5", "\\{5\\}"),
    ("\\emptyset", "5"),
    ("(-\\infty,\\infty)", "5"),
    ("5 \\text{ o } 6", "5"),
    ("5 \\text{ oder } 6", "5"),
    ("5 \\text{ ou } 6", "5"),
    ("5 \\text{ или } 6", "5"),
    ("5 \\text{ 或 } 6", "5"),
    ("5\\text{ thousand}", "5"),
    ("\\text{not } 5", "5"),
    ("\\text{nicht } 5", "5"),
    ("\\text{no } 5", "5"),
    ("\\text{at most } 5", "5"),
    ("\\text{hasta } 5", "5"),
    ("5\\text{ or so}", "5"),
    ("5 \\text{ (wrong)}", "5"),
    ("5 \\text{ incorrect}", "5"),
    ("5\\text{?}", "5"),
    ("5 \\text{ give or take}", "5"),
    ("\\text{wrong} = 5", "5"),
    ("5 millones", "5"),
    ("5 widgets", "5"),
    ("5 + 10^{-100}", "5"),
    ("5+\\frac{1}{10^{50}}", "5"),
    ("\\pi + 10^{-45}", "\\pi"),
    ("\\sqrt{2}+10^{-60}", "\\sqrt{2}"),
    ("\\pi + \\frac{1}{10^{60}}", "\\pi"),
    ("5.000000000000000000001", "5"),
    ("5 \\text{ percent percent}", "5"),
    ("5\\%5", "5"),
    ("5\\%\\cdot 100", "5"),
    ("500\\%", "5"),
    ("5\\%", "0.05"),
    ("5\\dots", "5"),
    ("5\\cdots", "5"),
    ("1, 2, 3, \\ldots", "1,2,3"),
    ("0x5", "5"),
    ("\\lim_{n\\to\\infty} 5", "5"),
    ("5 \\bmod 7", "5"),
    ("\\pm 5", "5"),
    ("\\infty - \\infty", "5"),
    ("0/0", "5"),
    ("\\text{undefined}", "5"),
    ("5 \\mid 10", "5"),
]

# (boxed answer, gold): readings the defences keep; reward 1.0
KEEP = [
    ("12_3", "12_3"),
    ("(12)_3", "12_3"),
    ("012_3", "12_3"),
    ("-12_3", "-12_3"),
    ("+12_3", "12_3"),
    ("n = 12_3", "12_3"),
    ("12_3, 21_3", "12_3, 21_3"),
    ("5_{10}", "5"),
    ("5", "5_{10}"),
    ("x = 3", "x=3"),
    ("x = 2+1 = 3", "x=3"),
    ("3", "x=3"),
    ("x = 3 = 3", "x=3"),
    ("x = \\frac{6}{2} = 3", "x=3"),
    ("y = 2x+1 = 1+2x", "y=2x+1"),
    ("z = 2", "z = 1 + 1 = 2"),
    ("5 = 5", "5"),
    ("x = 2+3 = 5", "5"),
    ("x=3 \\vee x=4", "x=3 \\vee x=4"),
    ("x \\approx 5", "x \\approx 5"),
    ("x ≈ 5", "x \\approx 5"),
    ("(1,2)", "(1,2)"),
    ("\\{1,2\\}", "1,2"),
    ("1,2", "\\{1,2\\}"),
    ("(2, 1)", "\\{1,2\\}"),
    ("x \\in \\{1, 2\\}", "\\{1,2\\}"),
    ("(1, 2)", "1 < x < 2"),
    ("x > 1", "(1, \\infty)"),
    ("(1,\\infty)", "x > 1"),
    ("x \\le 5", "(-\\infty, 5]"),
    ("[5,5]", "\\{5\\}"),
    ("\\{1,2\\} \\cup \\{3\\}", "\\{1,2,3\\}"),
    ("x \\in [-2,7]", "-2 \\le x \\le 7"),
    ("5 \\text{ cm}", "5"),
    ("5\\text{ apples}", "5"),
    ("5 \\text{ cm}^2", "5"),
    ("5\\,\\text{m}/\\text{s}", "5"),
    ("\\text{Area} = 5", "5"),
    ("5 \\text{ dollars}", "5"),
    ("5\\text{ people}", "5"),
    ("5 \\text{ degrees}", "5"),
    ("5\\text{ km}", "5"),
    ("5 \\text{ meters}", "5"),
    ("5 \\text{ square units}", "5"),
    ("5 \\text{ m}^2", "5"),
    ("5 \\text{ km/h}", "5"),
    ("5 \\text{ miles per hour}", "5"),
    ("5 \\text{ USD}", "5"),
    ("5\\text{€}", "5"),
    ("5 \\text{ (exact)}", "5"),
    ("5 \\text{ min}", "5"),
    ("5 \\text{ times}", "5"),
    ("5 \\text{ inches}", "5"),
    ("5 \\text{ candies}", "5"),
    ("5 \\text{ Meters}", "5"),
    ("5 \\text{ μm}", "5"),
    ("5 \\text{ °C}", "5"),
    ("\\text{Answer} = 5", "5"),
    ("\\text{Total} = 5", "5"),
    ("\\text{Area} = 5 \\text{ cm}^2", "5"),
    ("\\text{number of apples} = 5", "5"),
    ("5 \\mathrm{~cm}", "5"),
    ("5\\mathrm{cm}", "5"),
    ("5 \\text{ widgets}", "5 \\text{ widgets}"),
    ("5 widgets", "5 widgets"),
    ("5 \\text{ widgets}", "$5$ widgets"),
    ("300 \\text{ K}", "300 K"),
    ("5 \\text{ cm}", "5 \\text{ cm}"),
    ("5 cm", "5"),
    ("5 apples", "5"),
    ("5 hours", "5"),
    ("\\frac{1}{2} hours", "1/2"),
    ("2c", "2c"),
    ("x+2c", "x+2c"),
    ("\\frac{\\sqrt6-\\sqrt2}{4}", "\\sin(\\pi/12)"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
    ("3", "\\log_2 8"),
    ("\\sqrt{8}", "2\\sqrt2"),
    ("1+\\sqrt2", "\\sqrt{3+2\\sqrt2}"),
    ("3", "\\frac{\\ln 8}{\\ln 2}"),
    ("\\frac12", "\\cos(\\pi/7)+\\cos(3\\pi/7)+\\cos(5\\pi/7)"),
    ("\\sqrt{2}+\\sqrt{3}", "\\sqrt{5+2\\sqrt6}"),
    (
        "\\frac{\\sqrt{\\sqrt{11}+\\sqrt{194}}}{2\\sqrt{33}+15}",
        "\\frac{\\sqrt{\\sqrt{11}+\\sqrt{194}}}{15+2\\sqrt{33}}",
    ),
    ("\\sqrt{2}\\cdot\\sqrt{2}", "2"),
    ("(\\sqrt2+1)(\\sqrt2-1)", "1"),
    ("\\cos(\\pi/3)", "1/2"),
    ("e^{\\ln 5}", "5"),
    ("\\frac{\\pi}{4}", "\\arctan 1"),
    ("\\sin^2(1)+\\cos^2(1)", "1"),
    ("\\pi", "\\pi"),
    ("e", "2.718281828"),
    ("\\pi+10^{-45}", "3.14159265358979"),
    ("4.9999999", "5.0"),
    ("5.0", "5"),
    ("5\\%", "5"),
    ("5 \\%", "5"),
    ("5 \\text{\\%}", "5"),
    ("5\\%", "5\\%"),
    ("50", "50\\%"),
    ("\\frac{1}{2}\\%", "1/2"),
    ("5 \\text{ percent}", "5"),
    ("(5\\%)", "5"),
    ("5\\%, 6\\%", "5, 6"),
    ("\\lfloor 5.9 \\rfloor", "5"),
    ("|{-5}|", "5"),
    ("5!", "120"),
    ("\\text{5}", "5"),
    ("\\mathbf{5}", "5"),
    ("x", "x"),
    ("\\frac{5}{1}", "5"),
    ("\\text{undefined}", "\\text{undefined}"),
    ("--5", "5"),
    ("\\sqrt{25}", "5"),
    ("1, 2, 3, \\ldots", "1, 2, 3, \\ldots"),
    ("3\\sqrt{2} cm", "3\\sqrt2"),
    ("5\\ cm", "5"),
    ("x = \\frac{1}{2} hours", "1/2"),
    ("3 \\text{ red marbles}", "3"),
    ("\\frac{3}{4} \\text{ of the cake}", "3/4"),
    ("5 \\text{ different ways}", "5"),
    ("5 \\ge x", "x \\le 5"),
]


@pytest.mark.parametrize(("answer", "gold"), FINDINGS, ids=_id)
def test_reported_findings_score_zero(strict, lenient, answer, gold):
    assert strict(_boxed(answer), {"answer": gold}) == 0.0
    assert lenient(_boxed(answer), {"answer": gold}) == 0.0


@pytest.mark.parametrize(("answer", "gold"), ATTACKS + GUARDS, ids=_id)
def test_attacks_score_zero(strict, lenient, answer, gold):
    assert strict(_boxed(answer), {"answer": gold}) == 0.0
    assert lenient(_boxed(answer), {"answer": gold}) == 0.0


@pytest.mark.parametrize(("answer", "gold"), KEEP, ids=_id)
def test_legitimate_answers_score_one(strict, lenient, answer, gold):
    assert strict(_boxed(answer), {"answer": gold}) == 1.0
    assert lenient(_boxed(answer), {"answer": gold}) == 1.0


def test_every_side_of_a_chain_is_compared():
    """`x = 4 = 3` states 4 and 3; math-verify compared only its first and last side."""
    v = MathVerifier(isolate=False)
    assert v(_boxed("x = 4 = 3"), {"answer": "x = 3"}) == 0.0
    assert v(_boxed("x = 1 + 2 = 3"), {"answer": "x = 3"}) == 1.0
    assert v(_boxed("x = 3"), {"answer": "x = 3"}) == 1.0
    assert v(_boxed("y = 3"), {"answer": "x = 3"}) == 0.0


def test_percent_signs_end_a_number():
    assert percent_ok("5\\%") and percent_ok("\\frac12\\%") and percent_ok("(5\\%), 6\\%")
    assert percent_ok("5 \\text{\\%}") and percent_ok("5 percent")
    assert not percent_ok("\\%5") and not percent_ok("5\\%\\%") and not percent_ok("5\\%6")
    assert not percent_ok("x\\%") and not percent_ok("5 \\text{ percent percent}")


def test_unit_words_are_a_vocabulary():
    extra = frozenset({"widgets", "k"})
    assert known_word("cm", frozenset()) and known_word("Meters", frozenset())
    assert known_word("candies", frozenset()) and known_word("inches", frozenset())
    assert known_word("widgets", extra) and known_word("K", extra)
    for word in ("k", "K", "M", "B", "T", "mil", "mn", "bn", "thousand", "ish", "o", "environ"):
        assert not known_word(word, frozenset()), word
    assert known_word("Area", frozenset(), label=True)
    assert not known_word("falsch", frozenset(), label=True)


def test_plain_units_follow_a_bare_number():
    assert drop_plain_unit("5 cm") == "5"
    assert drop_plain_unit("\\frac{1}{2} hours") == "\\frac{1}{2}"
    assert drop_plain_unit("5 x") == "5 x"  # one letter: a product
    assert drop_plain_unit("x + 2 m") == "x + 2 m"  # not a bare number: a variable
    assert drop_plain_unit("5 thousand") is None
    assert drop_plain_unit("5 widgets") is None


def test_a_golds_words_are_its_text_not_its_variables():
    assert words_of("300 K") == {"k"} and words_of("$125$ miles") == {"miles"}
    assert words_of("5 \\text{ widgets}") == {"widgets"}
    assert words_of("x \\le 5") == frozenset() and words_of("2c") == frozenset()
    assert words_of("5 \\text{ or more}") == frozenset()  # hedge words are never known


def test_relations_split_at_brace_depth_zero():
    assert relation_pieces("x \\approx 5") == (["x", "5"], ["approx"])
    assert relation_pieces("\\lim_{x \\to 0} f(x)") == (["\\lim_{x \\to 0} f(x)"], [])
    assert relation_pieces("5") == (["5"], [])


def test_irrational_equality_needs_a_proof():
    from sympy import E, Rational, exp, pi, sqrt

    assert not proven_zero(pi / 10**45)
    assert not proven_zero(sqrt(25 + Rational(1, 10**1000)) - 5)
    assert not proven_zero(exp(-200))
    assert proven_zero(sqrt(8) - 2 * sqrt(2))
    assert proven_zero(sqrt(3 + 2 * sqrt(2)) - 1 - sqrt(2))
    assert proven_zero(exp(1) - E)


def test_ordinary_checks_stay_fast(strict):
    """The proof of an identity replaces a 40-digit agreement; it must not make checks slow."""
    cases = [
        ("\\frac{\\sqrt6-\\sqrt2}{4}", "\\sin(\\pi/12)"),
        ("1+\\sqrt2", "\\sqrt{3+2\\sqrt2}"),
        ("\\frac12", "\\cos(\\pi/7)+\\cos(3\\pi/7)+\\cos(5\\pi/7)"),
        ("\\sqrt{25+10^{-1000}}", "5"),
        ("5+e^{-200}", "5"),
    ]
    strict(_boxed("1"), {"answer": "1"})  # the worker started
    for answer, gold in cases:
        start = time.monotonic()
        strict(_boxed(answer), {"answer": gold})
        assert time.monotonic() - start < 3.0, answer


@pytest.mark.parametrize(
    "text",
    [
        "5" + " " * 100_000 + "\\%",
        "5\\%" * 30_000,
        "x \\approx " * 20_000,
        "5 " + "a-" * 50_000 + "1",
        "5 \\text{" + "cm " * 30_000 + "}",
        "{" * 50_000 + "x \\approx 5",
        "5" + "\\ " * 50_000 + "cm",
        "5 " + "a " * 50_000,
        "\\pi" * 30_000 + " cm",
    ],
    ids=lambda t: repr(t[:20]),
)
def test_long_inputs_are_read_in_linear_time(text):
    start = time.monotonic()
    percent_ok(text)
    relation_pieces(text)
    drop_plain_unit(text)
    read_notation(text)
    assert time.monotonic() - start < 2.0
