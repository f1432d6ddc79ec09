"""Math verifier: strict final-answer extraction + HF math-verify equivalence, hardened.

Reward 1.0 iff the completion states a final answer and every final answer it states is
mathematically equal to the gold `sample["answer"]`; else 0.0. Under RL any leniency is found and
farmed, so each rule below errs towards 0.

Extraction (in the calling process; string scans and regexes, linear time):
1. Reasoning is dropped: everything up to the last `</think>` is ignored, and an unclosed
   `<think>` (a truncated trace) means no answer. An answer written only inside the think block
   does not count.
2. `<answer>...</answer>` tags: each tag's content is an answer, or the `\\boxed{}` contents inside
   it if it has any. Unbalanced or nested tags mean no answer.
3. `\\boxed{...}` / `\\fbox{...}` anywhere else (nested braces are matched; `\\boxed 5` takes the
   run of non-space characters after it). An unclosed box means no answer.
4. Only if there is no tag and no box: lines matching `answer_pattern` (default: "Answer: ...",
   "Final answer: ...", case-insensitive); set it to None to turn this off.
All answers found by 2-4 must match the gold. Hedging (`\\boxed{1} or \\boxed{2}`, two tags with
different answers) therefore scores 0, while repeating one answer in two forms does not.
No answer, an empty answer, more than `max_answers` distinct answers, an answer longer than
`max_answer_chars`, one with a non-ASCII digit (full-width `５`, Arabic-Indic `٥`, mathematical
bold `𝟓`), or one holding several math spans (`$5$ or $6$`) scores 0. Markdown bold, a final
period and `$...$` / `\\(...\\)` around the whole answer are dropped.

Equivalence (in a worker process, see below): both sides are normalised, parsed by math-verify's
LaTeX parser (a gold in plain text like "1/2" or "sqrt(2)" is parsed the same way, because
math-verify skips a gold that is not inside `$...$`) and compared by `math_verify.verify` with two
hardenings:
- Numbers compare exactly. math-verify compares numbers after rounding to 6 decimals and chops
  tiny differences, so it accepts 1/2006! = 1/2004! and 1/2^99 = 1/2^98; here both sides become
  exact rationals (a decimal means the rational it spells: 0.5 = 1/2, 0.333 = 333/1000) and
  must be equal. Irrational values must agree to 40 significant digits at 50-digit precision.
  Only where the gold is a decimal may the prediction differ, by `float_rel_tol` relative
  (default 1e-6): gold 2.718281828 accepts e, gold 3.14 rejects pi, gold pi rejects 3.14159265,
  gold 1/3 rejects 0.333333, gold 0.333 rejects 1/3.
- Answer forms: when the gold is a single value, a predicted list, set, tuple or interval scores 0
  ("1, 2", "{5}", "1 or 2"), and a predicted equation only counts if it is `x = value` or a
  chain whose every side equals the gold ("x = 2+3 = 5" yes; "3 = 5", "x = 3 = 5" no).
Normalisation, applied to both sides: a percent sign is dropped (gold "50%" matches "50" and
"50\\%", not 0.5: the number asked for is the count of percent); a number written with thousands
separators ("1,000", "1{,}000", "1\\,000") is that number, so a gold "1,000" is 1000, never
the list (1, 0); `**` is `^`; plain `pi`, `sqrt`, `inf`, π, ∞, √ become LaTeX; "1e-3" is
1 × 10^-3; a gold or answer that is only words ("Monday") is text, compared case-insensitively.

Asymmetric on purpose (the gold is the reference): the decimal tolerance follows the gold; a gold
equation `x = 5` accepts `5`, but a gold `5` accepts `x = 5` only as an assignment; a gold
inequality/interval and a predicted interval/inequality are compared as sets; a gold set accepts
its elements in any order (even written as a tuple), a gold tuple or point needs the order.

Time limits are enforced from outside: parsing and comparing run in a worker process that is
SIGKILLed when it passes `timeout_s` and replaced (see rewards/workers.py). A pathological answer
(`5^{5^{5^{5^5}}}`, `(10^{100})!`) scores 0 after at most `timeout_s` plus the kill. In a
VerifierPool the pool's worker is itself killed on timeout, so checks run inline there.
Model text is never eval'ed or exec'ed: it only reaches a LaTeX grammar and sympy.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any

from rlvr.errors import ConfigError, DataError
from rlvr.rewards.base import Score

# Greedy `(.+)$`, not a lazy group before `[ \t]*$`: a lazy one is quadratic on a long line.
DEFAULT_ANSWER_PATTERN = r"(?im)^[ \t]*(?:\*\*)?(?:final[ \t]+)?answer(?:\*\*)?[ \t]*:(.+)$"
_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BOX_TOKEN = re.compile(r"[^\s$]*")
_MATH_DELIMITER = re.compile(r"(?<!\\)\$|\\[()\[\]]")
TAG_OPEN, TAG_CLOSE = "<answer>", "</answer>"
THINK_CLOSE, THINK_OPEN = "</think>", "<think>"


# -- extraction (calling process) ----------------------------------------------------------------


@dataclass(frozen=True)
class Extraction:
    """The distinct final answers of a completion, or why it has none (`problem`)."""

    answers: tuple[str, ...] = ()
    problem: str = ""


def boxed_contents(text: str) -> list[str] | None:
    """Contents of every top-level `\\boxed`/`\\fbox` in `text`; None if one is not closed."""
    out, end = [], 0
    for m in _BOX.finditer(text):
        if m.start() < end:  # a box nested in the previous one is part of its content
            continue
        i = m.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == "{":
            depth, j = 0, i
            while j < len(text):
                c = text[j]
                if c == "\\":
                    j += 2
                    continue
                if c == "{":
                    depth += 1
                elif c == "}":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            else:
                return None
            out.append(text[i + 1 : j])
            end = j + 1
        else:
            token = _BOX_TOKEN.match(text, i).group(0)  # type: ignore[union-attr]
            out.append(token)
            end = i + len(token)
    return out


def answer_tags(text: str) -> list[str] | None:
    """Contents of the `<answer>` tags of `text`; None if they are unbalanced or nested.

    A scan with str.find, not a lazy regex, which is quadratic on many unclosed tags."""
    out, pos = [], 0
    while True:
        opened, closed = text.find(TAG_OPEN, pos), text.find(TAG_CLOSE, pos)
        if opened < 0:
            return out if closed < 0 else None
        end = text.find(TAG_CLOSE, opened + len(TAG_OPEN))
        if closed < opened or end < 0:
            return None
        content = text[opened + len(TAG_OPEN) : end]
        if TAG_OPEN in content:
            return None
        out.append(content)
        pos = end + len(TAG_CLOSE)


def _outside_tags(text: str) -> str:
    out, pos = [], 0
    while (opened := text.find(TAG_OPEN, pos)) >= 0:
        out.append(text[pos:opened])
        pos = text.find(TAG_CLOSE, opened) + len(TAG_CLOSE)
    return " ".join(out + [text[pos:]])


def _clean(answer: str) -> str:
    """Whitespace collapsed; markdown bold, a final period, $...$ / \\(...\\) and a box
    around the whole answer removed."""
    s = re.sub(r"\s+", " ", answer).strip()
    s = s.removeprefix("**").removesuffix("**").strip().rstrip(".").strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
            s = s[len(left) : len(s) - len(right)].strip().rstrip(".").strip()
    inner = boxed_contents(s)
    if inner and len(inner) == 1 and re.fullmatch(r"\\(?:boxed|fbox)\s*\{.*\}", s, re.DOTALL):
        return _clean(inner[0])
    return s


def extract_answers(
    completion: str,
    answer_pattern: str | None = DEFAULT_ANSWER_PATTERN,
    max_answers: int = 4,
    max_answer_chars: int = 1000,
) -> Extraction:
    """The final answers of a completion (rules in the module docstring)."""
    close = completion.rfind(THINK_CLOSE)
    region = completion[close + len(THINK_CLOSE) :] if close >= 0 else completion
    if THINK_OPEN in region:
        return Extraction(problem="unclosed <think>")
    raw: list[str] = []
    tags = answer_tags(region)
    if tags is None:
        return Extraction(problem="unbalanced <answer> tags")
    for content in tags:
        boxes = boxed_contents(content)
        if boxes is None:
            return Extraction(problem="unclosed \\boxed")
        raw.extend(boxes if boxes else [content])
    boxes = boxed_contents(_outside_tags(region) if tags else region)
    if boxes is None:
        return Extraction(problem="unclosed \\boxed")
    raw.extend(boxes)
    if not raw and not tags and answer_pattern:
        raw.extend(m.group(1) for m in re.finditer(answer_pattern, region))
    if not raw:
        return Extraction(problem="no final answer")
    # Length first: cleaning recurses into nested boxes, so only bounded text reaches it.
    if any(len(a) > max_answer_chars for a in raw):
        return Extraction(problem=f"answer longer than {max_answer_chars} characters")
    answers = tuple(dict.fromkeys(_clean(a) for a in raw))
    if "" in answers:
        return Extraction(answers, "empty answer")
    if len(answers) > max_answers:
        return Extraction(answers[:max_answers], f"{len(answers)} different answers")
    for a in answers:
        if any(unicodedata.category(c) == "Nd" and not c.isascii() for c in a):
            return Extraction(answers, "non-ASCII digit")
        if _MATH_DELIMITER.search(a):  # "$5$ or $6$": several expressions in one answer
            return Extraction(answers, "several expressions in one answer")
    return Extraction(answers)


# -- equivalence (worker process) ----------------------------------------------------------------

_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:(?:,|\{,\}|\\,|\\ |\\!| |\u2009)\d{3})+(?:\.\d+)?")
_SCIENTIFIC = re.compile(r"([+-]?\d+(?:\.\d+)?)[eE]([+-]?\d+)")
_WORDS = re.compile(r"[A-Za-z]{3,}(?: [A-Za-z]+)*")
_PLAIN = [
    (re.compile(r"\*\*"), "^"),
    (re.compile(r"(?<![\\A-Za-z])sqrt\s*\(([^()]*)\)"), r"\\sqrt{\1}"),
    (re.compile(r"(?<![\\A-Za-z])sqrt(?![A-Za-z])"), r"\\sqrt"),
    (re.compile(r"(?<![\\A-Za-z])pi(?![A-Za-z])"), r"\\pi"),
    (re.compile(r"(?<![\\A-Za-z])(?:infinity|inf)(?![A-Za-z])"), r"\\infty"),
]
_UNICODE = {
    "π": "\\pi ",
    "∞": "\\infty ",
    "√": "\\sqrt ",
    "−": "-",
    "×": "\\times ",
    "·": "\\cdot ",
}
_UNICODE.update({"≤": "\\le ", "≥": "\\ge ", "≠": "\\ne "})
_PLAIN_WORDS = {"sqrt", "pi", "inf", "infinity", "sin", "cos", "tan", "log", "ln", "exp"}


def normalize(text: str) -> str:
    """Notation-only rewriting applied to gold and prediction alike (rules in the docstring)."""
    s = _clean(text)
    s = s.replace("\\%", "").replace("%", "").strip()
    for k, v in _UNICODE.items():
        s = s.replace(k, v)
    if _THOUSANDS.fullmatch(s):
        s = re.sub(r"\{,\}|\\,|\\ |\\!|[, \u2009]", "", s)
    if m := _SCIENTIFIC.fullmatch(s):
        return f"{m.group(1)}\\times 10^{{{m.group(2)}}}"
    if _WORDS.fullmatch(s) and s.lower() not in _PLAIN_WORDS:
        return f"\\text{{{s}}}"
    for pattern, repl in _PLAIN:
        s = pattern.sub(repl, s)
    return s.strip()


def _parse(latex: str) -> Any:
    """The first sympy object math-verify's LaTeX parser gets from `latex`, or None."""
    from math_verify import LatexExtractionConfig, parse

    if not latex:
        return None
    parsed = parse(
        f"${latex}$",
        [LatexExtractionConfig()],
        fallback_mode="no_fallback",
        extraction_mode="first_match",
        parsing_timeout=None,  # our limit is the worker kill; signals would fight it
    )
    return parsed[0] if parsed and not isinstance(parsed[0], str) else None


@lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> tuple[Any, str]:
    boxes = boxed_contents(gold)
    if boxes and len(boxes) == 1:
        gold = boxes[0]
    text = normalize(gold)
    return _parse(text), text


def _is_collection(x: Any) -> bool:
    from sympy import MatrixBase, Set, Tuple

    return isinstance(x, (Set, Tuple, MatrixBase))


def _is_relation(x: Any) -> bool:
    from math_verify.grader import is_relation

    return is_relation(x)


def _prediction_sides(gold: Any, pred: Any) -> list[Any] | None:
    """What must equal a single-valued gold: the prediction, or every non-variable side of a
    predicted equation chain; None when the prediction's form cannot be one value."""
    from math_verify.grader import is_equation
    from sympy import Symbol

    if _is_relation(gold) or _is_collection(gold):
        return [pred]
    if _is_collection(pred):
        return None
    if not _is_relation(pred):
        return [pred]
    if not is_equation(pred):
        return None
    relations = list(getattr(pred, "_unsorted_args", None) or [pred])
    sides = []
    for k, rel in enumerate(relations):
        for side in (rel.lhs, rel.rhs):
            if k == 0 and side is rel.lhs and isinstance(side, Symbol):
                continue  # the assigned variable of `x = ...`
            if not any(side == s for s in sides):
                sides.append(side)
    if any(_is_collection(s) or _is_relation(s) for s in sides):
        return None
    return sides


def _exact(x: Any) -> Any:
    """Replace every Float by the rational its decimal digits spell (0.1 -> 1/10)."""
    from sympy import Float, Rational

    floats = x.atoms(Float)
    return x.xreplace({f: Rational(str(f)) for f in floats}) if floats else x


def strict_numeric_eq(
    gold: Any, pred: Any, float_rounding: int, numeric_precision: int, *, rel_tol: float
) -> bool:
    """Drop-in for math_verify.grader.sympy_numeric_eq with exact number semantics.

    Expressions with free symbols return False here so that math-verify's exact symbolic test
    (simplify(gold - pred) == 0) decides; math-verify's own version chops small differences.
    """
    from sympy import Basic, Float, MatrixBase, nan, oo, zoo

    if isinstance(gold, MatrixBase) and isinstance(pred, MatrixBase):
        return gold.shape == pred.shape and all(
            strict_numeric_eq(a, b, float_rounding, numeric_precision, rel_tol=rel_tol)
            for a, b in zip(gold, pred)
        )
    if not (isinstance(gold, Basic) and isinstance(pred, Basic)):
        return False
    if gold.free_symbols or pred.free_symbols:
        return False
    decimal_gold = bool(gold.atoms(Float))
    g, p = _exact(gold), _exact(pred)
    if any(x.has(oo, -oo, zoo, nan) for x in (g, p)):
        return g == p
    diff = g - p
    if diff.is_Rational:
        return diff == 0 or (decimal_gold and abs(diff) <= rel_tol * abs(g))
    d, gv, pv = (abs(x.evalf(50)) for x in (diff, g, p))
    if not all(v.is_number and v.is_finite for v in (d, gv, pv)):
        return False
    if decimal_gold:
        return bool(d <= rel_tol * gv)
    return bool(d <= 1e-40 * max(gv, pv)) or d == 0


@contextlib.contextmanager
def _strict_numbers(rel_tol: float) -> Iterator[None]:
    """Swap math-verify's numeric comparison (used for every element, endpoint and relation
    side) for strict_numeric_eq while one check runs."""
    from math_verify import grader

    original = grader.sympy_numeric_eq
    grader.sympy_numeric_eq = partial(strict_numeric_eq, rel_tol=rel_tol)
    try:
        yield
    finally:
        grader.sympy_numeric_eq = original


_GRADER_LOCK = threading.Lock()


def check_equivalence(answer: str, gold: str, float_rel_tol: float = 1e-6) -> bool:
    """True iff the extracted `answer` equals `gold` under this module's rules.

    Runs inline with no time limit: call it through MathVerifier (or a VerifierPool) unless the
    inputs are trusted.
    """
    from math_verify import verify

    gold_expr, gold_text = _parse_gold(str(gold))
    pred_text = normalize(answer)
    if gold_expr is None:  # a gold math-verify cannot parse: compare the normalised text
        return bool(pred_text) and _compact(pred_text) == _compact(gold_text)
    pred = _parse(pred_text)
    if pred is None:
        return False
    sides = _prediction_sides(gold_expr, pred)
    if sides is None:
        return False
    with _GRADER_LOCK, _strict_numbers(float_rel_tol):
        return all(
            verify(gold_expr, side, timeout_seconds=None, allow_set_relation_comp=True)
            for side in sides
        )


def _compact(s: str) -> str:
    return re.sub(r"\s+", "", s).lower()


def _require_math_verify() -> None:
    try:
        from math_verify import grader
    except ImportError:
        raise ImportError(
            "the math verifier needs math-verify: pip install 'math-verify>=0.8,<0.10'"
        ) from None
    if not callable(getattr(grader, "sympy_numeric_eq", None)):  # the function we harden
        raise ImportError("this math-verify version is unsupported; use >=0.8,<0.10")
    # math-verify warns once per process that its signal timeout is off: ours is the kill.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    logging.getLogger("latex2sympy2_extended").setLevel(logging.ERROR)


def _checker_handler(float_rel_tol: float):  # noqa: ANN202 - worker factory, see pool.py
    """Worker-side factory: (answers, gold) -> (all match, index of the first mismatch or -1)."""
    _require_math_verify()

    def handle(payload: tuple[tuple[str, ...], str]) -> tuple[bool, int]:
        answers, gold = payload
        for k, answer in enumerate(answers):
            if not check_equivalence(answer, gold, float_rel_tol):
                return False, k
        return True, -1

    return handle


# -- the verifier --------------------------------------------------------------------------------


class MathVerifier:
    """`(completion, sample) -> 1.0 | 0.0` against `sample["answer"]`; see the module docstring.

    timeout_s: wall-clock limit of one equivalence check (parse + compare of all answers of one
        completion), enforced by killing the worker process.
    answer_pattern: regex whose group 1 is the answer on an "Answer:" line (None: off).
    float_rel_tol: relative tolerance, used only where the gold is a decimal number.
    max_answers / max_answer_chars: more distinct answers / longer ones score 0.
    isolate: run checks in a killable worker process (False: inline, no time limit; for code
        that is itself inside a killable worker, like VerifierPool).
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        answer_pattern: str | None = DEFAULT_ANSWER_PATTERN,
        float_rel_tol: float = 1e-6,
        max_answers: int = 4,
        max_answer_chars: int = 1000,
        isolate: bool = True,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"MathVerifier: timeout_s must be > 0, got {timeout_s}")
        if answer_pattern is not None:
            re.compile(answer_pattern)
        self.timeout_s = timeout_s
        self.answer_pattern = answer_pattern
        self.float_rel_tol = float_rel_tol
        self.max_answers = max_answers
        self.max_answer_chars = max_answer_chars
        self.isolate = isolate
        self._worker: Any = None
        self._lock = threading.Lock()
        self._inline: Any = None

    def extract(self, completion: str) -> Extraction:
        return extract_answers(
            completion, self.answer_pattern, self.max_answers, self.max_answer_chars
        )

    def score(self, completion: str, sample: Mapping[str, Any]) -> Score:
        gold = sample.get("answer")
        if gold is None or isinstance(gold, bool) or not isinstance(gold, (str, int, float)):
            what = "is missing" if gold is None else f"is a {type(gold).__name__}"
            raise DataError(
                f"math verifier: sample {str(sample.get('id', '?'))[:80]!r}: field 'answer' "
                f"{what} (expected the reference answer as a string or number)"
            )
        gold = str(gold)
        found = self.extract(completion)
        shown = " | ".join(found.answers)
        if found.problem:
            return Score(0.0, f"{found.problem}: {shown}" if shown else found.problem)
        try:
            ok, bad = self._check(found.answers, gold)
        except TimeoutError as e:
            return Score(0.0, f"{e}: {shown}")
        if ok:
            return Score(1.0, shown)
        if len(found.answers) > 1:
            return Score(0.0, f"{shown} (wrong: {found.answers[bad]})")
        return Score(0.0, shown)

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> float:
        return self.score(completion, sample).reward

    def _check(self, answers: tuple[str, ...], gold: str) -> tuple[bool, int]:
        if not self.isolate:
            if self._inline is None:
                self._inline = _checker_handler(self.float_rel_tol)
            return self._inline((answers, gold))
        from rlvr.rewards.workers import (
            WorkerCrashed,
            WorkerError,
            WorkerProcess,
            WorkerSetupError,
            WorkerTimeout,
        )

        with self._lock:  # one worker, one check at a time; threads queue here
            if self._worker is None:
                self._worker = WorkerProcess(f"{__name__}:_checker_handler", self.float_rel_tol)
            try:
                return self._worker.call((answers, gold), self.timeout_s)
            except WorkerTimeout as e:
                raise TimeoutError(str(e)) from None
            except WorkerSetupError as e:
                self._worker = None
                raise ConfigError(f"math verifier: {e}") from None
            except (WorkerCrashed, WorkerError):
                # sympy blowing the stack or memory on a crafted answer: not a match
                return False, 0

    def for_worker(self) -> MathVerifier:
        """An inline copy for use inside a worker process that is itself killed on timeout."""
        _require_math_verify()
        return MathVerifier(
            self.timeout_s,
            self.answer_pattern,
            self.float_rel_tol,
            self.max_answers,
            self.max_answer_chars,
            isolate=False,
        )

    def close(self) -> None:
        """Stop the worker process (a later check starts a new one)."""
        with self._lock:
            if self._worker is not None:
                self._worker.close()
                self._worker = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_worker=None, _lock=None, _inline=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


# The default instance: "math" in the registry, "rlvr.rewards.math:math_reward" as a spec. Its
# worker process starts on the first check.
math_reward = MathVerifier()
