"""Countdown verifier: does the completion's expression use the given numbers and hit the target?

Reward 1.0 iff the completion's final expression uses every number of `sample["numbers"]`
exactly once (as a multiset: a number listed twice must be used twice), combines them only with
binary + - * / and parentheses, and evaluates exactly (fractions.Fraction) to `sample["target"]`;
otherwise 0.0. Intermediate values may be fractions: (4/3)*(6) is 8.

Where the expression is read from (`final_answer_text`, shared with the reasoning-gym verifier):
1. Everything up to the last `</think>` is reasoning and ignored; a `<think>` that is not
   closed (a trace cut at the token limit) means no answer.
2. If the rest has `<answer>...</answer>` tags, the content of the one tag pair is the answer;
   several pairs, nested or unbalanced tags mean no answer.
3. Otherwise the whole rest, stripped of surrounding whitespace, is the answer.
The expression may be followed by `= N` when N is the target (`44+19+35 = 98`).

The verifier is a security boundary, so model text is never eval'ed. Before parsing, the text
must be at most `max_chars` characters of ASCII digits, + - * / ( ) and spaces only, with
parentheses nested at most `max_depth` deep: names, calls, attributes, `_`, `.`, `e`, `j` and
non-ASCII digits are rejected by this character check. `ast.parse` then builds the tree, and
only int literals and BinOp(+, -, *, /) nodes are accepted: `**` (power), `//`, `%`, unary
minus or plus, floats (2.5), exponents (1e3) and booleans score 0. The multiset of literals is
compared with the given numbers *before* any arithmetic, so a huge literal or a reused number
never reaches the evaluator; division by zero scores 0.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, cast

from rlvr.errors import DataError
from rlvr.markup import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN
from rlvr.rewards.base import Score

_ALLOWED = re.compile(r"[0-9+\-*/() ]*")
_TRAILING_TARGET = re.compile(r"^(.*?)\s*=\s*([0-9]+)\s*$", re.DOTALL)
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


def final_answer_text(completion: str) -> str | None:
    """The answer part of a completion (rules 1-3 in the module docstring), or None."""
    close = completion.rfind(THINK_CLOSE)
    rest = completion[close + len(THINK_CLOSE) :] if close >= 0 else completion
    if THINK_OPEN in rest:
        return None
    opens, closes = rest.count(ANSWER_OPEN), rest.count(ANSWER_CLOSE)
    if opens or closes:
        start, end = rest.find(ANSWER_OPEN), rest.find(ANSWER_CLOSE)
        if opens != 1 or closes != 1 or end < start:
            return None
        rest = rest[start + len(ANSWER_OPEN) : end]
    return rest.strip()


def parse_expression(text: str, max_chars: int = 256, max_depth: int = 16) -> ast.expr:
    """The validated syntax tree of a countdown expression; ValueError says why it is not one.

    Only ASCII int literals joined by binary + - * / (and parentheses) pass."""
    if len(text) > max_chars:
        raise ValueError(f"expression longer than {max_chars} characters")
    if not text.strip():
        raise ValueError("empty expression")
    if not _ALLOWED.fullmatch(text):
        bad = next(c for c in text if not _ALLOWED.fullmatch(c))
        raise ValueError(f"character {bad!r} is not allowed")
    depth = 0
    for c in text:
        depth += (c == "(") - (c == ")")
        if depth > max_depth:
            raise ValueError(f"parentheses nested deeper than {max_depth}")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ValueError("not a valid expression") from None
    _check_nodes(tree)
    return tree


def _check_nodes(node: ast.expr) -> None:
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _OPS:
            raise ValueError(f"operator {type(node.op).__name__} is not allowed")
        _check_nodes(node.left)
        _check_nodes(node.right)
    elif isinstance(node, ast.Constant):
        if type(node.value) is not int:
            raise ValueError(f"literal {node.value!r} is not an integer")
    else:
        raise ValueError(f"{type(node).__name__} is not allowed (only numbers and + - * /)")


def literals(tree: ast.expr) -> list[int]:
    """The integer literals of a validated tree, left to right."""
    if isinstance(tree, ast.BinOp):
        return literals(tree.left) + literals(tree.right)
    return [tree.value]  # type: ignore[attr-defined]


def _apply(op: ast.operator, left: Fraction, right: Fraction) -> Fraction:
    if isinstance(op, ast.Add):
        return left + right
    if isinstance(op, ast.Sub):
        return left - right
    if isinstance(op, ast.Mult):
        return left * right
    return left / right  # ZeroDivisionError for a zero divisor


def evaluate(tree: ast.expr) -> Fraction:
    """The exact value of a validated tree; ZeroDivisionError on division by zero."""
    if isinstance(tree, ast.Constant):
        return Fraction(cast(int, tree.value))  # validated: int literals only
    return _apply(tree.op, evaluate(tree.left), evaluate(tree.right))  # type: ignore[attr-defined]


def steps(tree: ast.expr) -> list[str]:
    """The binary operations of a validated tree in evaluation order (left subtree, right
    subtree, then the node), as `a<op>b=c` strings; a non-integer value is written `(p/q)`."""
    out: list[str] = []

    def walk(node: ast.expr) -> Fraction:
        if isinstance(node, ast.Constant):
            return Fraction(cast(int, node.value))
        left, right = walk(node.left), walk(node.right)  # type: ignore[attr-defined]
        value = _apply(node.op, left, right)  # type: ignore[attr-defined]
        out.append(f"{_show(left)}{_OPS[type(node.op)]}{_show(right)}={_show(value)}")  # type: ignore[attr-defined]
        return value

    walk(tree)
    return out


def _show(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"({x.numerator}/{x.denominator})"


def _problem(sample: Mapping[str, Any]) -> tuple[list[int], int]:
    numbers, target = sample.get("numbers"), sample.get("target")
    if not isinstance(numbers, list) or not all(type(n) is int for n in numbers) or not numbers:
        raise DataError(
            f"countdown verifier: sample field 'numbers' must be a non-empty list of integers, "
            f"got {numbers!r} (samples of data.task=countdown have it)"
        )
    if type(target) is not int:
        raise DataError(
            f"countdown verifier: sample field 'target' must be an integer, got {target!r}"
        )
    return numbers, target


class CountdownVerifier:
    """`(completion, sample) -> 1.0 | 0.0` for countdown problems (rules in the module doc)."""

    def __init__(self, max_chars: int = 256, max_depth: int = 16) -> None:
        self.max_chars = max_chars
        self.max_depth = max_depth

    def score(self, completion: str, sample: Mapping[str, Any]) -> Score:
        numbers, target = _problem(sample)
        text = final_answer_text(completion)
        if text is None:
            return Score(0.0, "no answer (unclosed <think> or bad <answer> tags)")
        if len(text) > self.max_chars:  # before the regex below touches it
            return Score(0.0, f"answer longer than {self.max_chars} characters")
        m = _TRAILING_TARGET.fullmatch(text)
        if m:
            if int(m.group(2)) != target:
                return Score(0.0, f"claims = {m.group(2)[:20]}, target is {target}")
            text = m.group(1)
        try:
            tree = parse_expression(text, self.max_chars, self.max_depth)
        except ValueError as e:
            return Score(0.0, f"{e}: {text[:60]!r}")
        used = literals(tree)
        if Counter(used) != Counter(numbers):
            return Score(0.0, f"uses {sorted(used)}, must use each of {sorted(numbers)} once")
        try:
            value = evaluate(tree)
        except ZeroDivisionError:
            return Score(0.0, f"division by zero: {text}")
        shown = f"{text} = {_show(value)}"
        return Score(1.0 if value == target else 0.0, shown)

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> float:
        return self.score(completion, sample).reward


# "countdown" in the registry; "rlvr.rewards.countdown:countdown_reward" as a spec.
countdown_reward = CountdownVerifier()
