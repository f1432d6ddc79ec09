"""The forms an answer's value may take against a gold, and when two values are proven equal.

The rules the math verifier (rlvr.rewards.math) applies around math-verify's comparison, each
because math-verify alone would accept a wrong answer:

- Percent (`percent_ok`): a percent sign, or the word percent, comes after a number and ends it
  (`50\\%`, `\\frac12\\%`, `5\\%, 6\\%`); `\\%5`, `5\\%\\%`, `5\\%6` are unreadable (normalisation
  drops every percent sign, so they would read 5).
- Bases (`based_form_ok`): against a gold written as numerals in bases (`12_3`, `-12_3`,
  `1010_2, 11_2`) the answer is such numerals too, optionally signed or assigned (`n = 12_3`),
  not an expression holding one: `5 \\cdot 1_3` is 5 but not written in base 3.
- Equation chains (`comparisons`): `a = b = c` states that every side is equal. Against a
  single value every side but an assigned variable must equal it; against any other gold the
  sides must equal each other and the chain is then compared (math-verify compares only its
  first and last side, so `x = 4 = 3` read as `x = 3`).
- Single values: a gold `x = 5` asks one value, like a gold `5`, so a set, interval or tuple
  (`\\{5\\}`, `[5, 5]`) does not match it.
- Inequalities are intervals: they never match a gold that is a set, a list, a tuple or the
  ambiguous `(a, b)` (a point or an open interval); `x \\in (1, 2)` neither. A gold interval
  with an infinite or closed end (`(-\\infty, 5]`, `[1, 2)`) still accepts `x \\le 5`.
- Proof of equality (`proven_zero`): a difference of irrational values is zero only when sympy
  proves it (exact rationals, simplification, or a minimal polynomial `x` for algebraic
  numbers); an evaluation that shows a nonzero digit disproves it. Agreement to many digits is
  no proof: `5 + 10^{-45}\\pi` and `5 + e^{-200}` are not 5.
"""

from __future__ import annotations

import re
from typing import Any

from rlvr.rewards.math.notation import numeral_skeleton

_PERCENT_TEXT = re.compile(
    r"\\(?:text|textnormal|textrm|mathrm|mbox)\s*\{\s*(?:per\s?cent(?:age)?|pct|\\?%)\s*\}"
    r"|(?<![A-Za-z])(?:per\s?cent(?:age)?|pct)(?![A-Za-z])",
    re.IGNORECASE,
)
_PERCENT = re.compile(r"\\?%")
_AFTER_PERCENT = (",", ";", ")", "]", "}", "\\}", "\\right", "\\rbrace", "\\text")
_NUMERAL_LIST = re.compile(r"(?:[A-Za-z]+=)?[+-]?#(?:,[+-]?#)*")


def percent_ok(answer: str) -> bool:
    """Whether every percent sign (or percent word) of `answer` follows a number and ends it."""
    s = _PERCENT_TEXT.sub("%", answer)
    for m in _PERCENT.finditer(s):
        i = m.start() - 1
        while i >= 0 and s[i] == " ":
            i -= 1
        if i < 0 or not (s[i].isdigit() or s[i] in "})]"):
            return False
        k = m.end()
        while k < len(s) and s[k] == " ":
            k += 1
        if k < len(s) and not s.startswith(_AFTER_PERCENT, k):
            return False
    return True


def based_form_ok(answer: str, gold: str) -> bool:
    """Whether `answer` has the form of a gold written in bases: numerals where the gold has
    numerals (a signed list, an assignment), else the gold's very form around them."""
    want, got = numeral_skeleton(gold), numeral_skeleton(answer)
    if _NUMERAL_LIST.fullmatch(want):
        return bool(_NUMERAL_LIST.fullmatch(got))
    return got == want


# -- forms of sympy values -----------------------------------------------------------------------


def _is_collection(x: Any) -> bool:
    from sympy import MatrixBase, Set, Tuple

    return isinstance(x, (Set, Tuple, MatrixBase))


def _relations(x: Any) -> list[Any]:
    return list(getattr(x, "_unsorted_args", None) or [x])


def chain_sides(pred: Any) -> list[Any]:
    """The sides of an equation or chain of equations, in order, each once."""
    sides: list[Any] = []
    for k, rel in enumerate(_relations(pred)):
        for side in (rel.lhs, rel.rhs) if k == 0 else (rel.rhs,):
            if not any(side == s for s in sides):
                sides.append(side)
    return sides


def _assignment(gold: Any) -> tuple[Any, Any] | None:
    """(variable, value) of a gold `x = value` (or a chain ending in the value) whose value is
    one value, not a set, tuple or relation; None for any other gold."""
    from math_verify.grader import is_equation, is_relation
    from sympy import Symbol

    if not is_equation(gold):
        return None
    rels = _relations(gold)
    var, value = rels[0].lhs, rels[-1].rhs
    if not isinstance(var, Symbol) or _is_collection(value) or is_relation(value):
        return None
    return var, value


def _ambiguous_pair(x: Any) -> bool:
    """`(a, b)` with finite ends: math-verify reads it as the open interval, the gold may be
    the point."""
    from sympy import Interval

    return (
        isinstance(x, Interval)
        and x.left_open
        and x.right_open
        and bool(x.start.is_finite and x.end.is_finite)
    )


def _interval_statement(pred: Any) -> bool:
    """An inequality, a chain of them, or `x \\in S` for a set S that is no finite set."""
    from math_verify.grader import is_equation, is_relation
    from sympy import Eq, FiniteSet, Set, Symbol

    if isinstance(pred, Eq) and isinstance(pred.lhs, Symbol) and isinstance(pred.rhs, Set):
        return not isinstance(pred.rhs, FiniteSet)
    return is_relation(pred) and not is_equation(pred)


def comparisons(gold: Any, pred: Any) -> list[tuple[Any, Any]] | None:
    """The (gold, prediction) pairs that must all be equal for `pred` to match `gold` (module
    docstring); None where the prediction's form cannot match."""
    from math_verify.grader import is_equation, is_relation
    from sympy import FiniteSet, Symbol, Tuple

    chain = is_equation(pred) and len(_relations(pred)) > 1
    if is_relation(gold) or _is_collection(gold):
        if _assignment(gold) is not None and _is_collection(pred):
            return None  # `\{5\}`, `[5, 5]` where `x = 5` is asked
        points = isinstance(gold, (FiniteSet, Tuple)) or _ambiguous_pair(gold)
        if points and _interval_statement(pred):
            return None  # an inequality is an interval, no point or set of points
        pairs = [(gold, pred)]
        if chain:  # the sides after an assigned variable must be equal to each other
            sides = chain_sides(pred)
            if len(sides) > 1 and isinstance(sides[0], Symbol):
                sides = sides[1:]
            pairs += [(sides[0], side) for side in sides[1:]]  # none for `x = x = x`
        return pairs
    if _is_collection(pred):
        return None
    if not is_relation(pred):
        return [(gold, pred)]
    if not is_equation(pred):
        return None
    sides = chain_sides(pred)
    if isinstance(sides[0], Symbol):
        sides = sides[1:]  # the assigned variable of `x = ...`
    if not sides or any(_is_collection(s) or is_relation(s) for s in sides):
        return None
    return [(gold, side) for side in sides]


# -- proof of equality ---------------------------------------------------------------------------

_CERTIFY_DIGITS = 30
_MAX_WORKING_DIGITS = 400  # evalf's working precision while it looks for a nonzero digit


def proven_zero(diff: Any) -> bool:
    """Whether the constant sympy expression `diff` (no free symbols, not rational) is proven
    to be 0. An evaluation that certifies digits of it disproves it at once; where no digit can
    be certified (it cancels to every working precision) zero must be proven: simplification
    or, for algebraic numbers, a minimal polynomial `x`. A tiny term an answer adds (`e^{-200}`)
    is never lost: it either shows in the evaluation or keeps the proof from succeeding."""
    from sympy import Symbol, minimal_polynomial, simplify

    try:  # the parser leaves terms unevaluated: `(15 + 2\sqrt{33})` and `(2\sqrt{33} + 15)`
        diff = diff.doit()
    except Exception:
        pass
    if diff.is_Rational:
        return diff == 0
    try:
        value = diff.evalf(_CERTIFY_DIGITS, strict=True, maxn=_MAX_WORKING_DIGITS)
        if value != 0:
            return False
    except Exception:  # PrecisionExhausted: no digit found, perhaps zero; or not evaluable
        pass
    x = Symbol("x")
    try:  # fast for algebraic numbers, where simplify can take seconds
        return minimal_polynomial(diff, x) == x
    except Exception:  # not algebraic (pi, e, logarithms) or beyond sympy
        pass
    try:
        return simplify(diff) == 0
    except Exception:
        return False
