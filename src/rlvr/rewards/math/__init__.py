"""Math verifier: strict final-answer extraction + HF math-verify equivalence, hardened.

Reward 1.0 iff the completion states a final answer and every final answer it states is
mathematically equal to the gold `sample["answer"]`; else 0.0. Under RL any leniency is found and
farmed, so each rule below errs towards 0.

Extraction (in the calling process, rlvr.rewards.math.answer): the answers are read from
`<answer>` tags, `\\boxed{}`/`\\fbox{}`, or, without either, "Answer: ..." lines, after the last
`</think>`; a tag, box or line whose content holds math delimiters is read as its math spans
("The final answer is $\\frac{14}{3}$. I hope it is correct." reads 14/3). Every answer found
must match, so hedging (`\\boxed{1} or \\boxed{2}`, `$1$ or $2$`) scores 0, and so does a box
inside a box or an answer restated after the last marker with another value (`\\boxed{5}
Actually the answer is 6`). The lenient reading
(`MathVerifier(lenient=True)`, "math_lenient") also reads a completion without any marker: there
math-verify's own extraction picks the final answer (rlvr.rewards.math.lenient), in the worker.

Equivalence (in a worker process, see below): both sides are normalised, parsed by math-verify's
LaTeX parser (a gold in plain text like "1/2" or "sqrt(2)" is parsed the same way, because
math-verify skips a gold that is not inside `$...$`) and compared by `math_verify.verify` with two
hardenings:
- Numbers compare exactly. math-verify compares numbers after rounding to 6 decimals and chops
  tiny differences, so it accepts 1/2006! = 1/2004! and 1/2^99 = 1/2^98; here both sides become
  exact rationals (a decimal means the rational it spells: 0.5 = 1/2, 0.333 = 333/1000) and
  must be equal. Irrational values are equal only where sympy proves their difference zero
  (rlvr.rewards.math.value_forms.proven_zero): agreement to many digits is no proof.
  Only where the gold is a decimal may the prediction differ, by `float_rel_tol` relative
  (default 1e-6): gold 2.718281828 accepts e, gold 3.14 rejects pi, gold pi rejects 3.14159265,
  gold 1/3 rejects 0.333333, gold 0.333 rejects 1/3.
- Answer forms (rlvr.rewards.math.value_forms): when the gold is a single value (`5`, `x = 5`),
  a predicted list, set, tuple or interval scores 0 ("1, 2", "{5}", "[5, 5]", "1 or 2"); every
  side of an equation chain must equal the gold ("x = 2+3 = 5" yes; "3 = 5", "x = 4 = 3" no);
  an inequality never matches a set, list, tuple or the pair `(a, b)`; a percent sign ends a
  number; against a gold in bases the answer is numerals in those bases, not an expression.
- Several answers for a gold of several values: when the gold is a set of two or more values
  ("1, -2", "\\{1,-2\\}", "1 \\pm \\sqrt{2}"), answers that are each one value and together are
  exactly those values (`\\boxed{-2} and \\boxed{1}`) match it; one value less or more does not.
- Relations and bases the gold does not hold: `\\approx`, `\\sim`, `\\equiv`, `\\cong`, `\\propto`
  and the other relations math-verify cannot compare (it keeps one side of `\\approx`, reads
  `\\equiv` as `=`) match only a gold that holds them; numerals must be in the gold's bases (gold
  `1010_2` rejects `10`, the number a conversion starts from). Notation is read first, on both
  sides (rlvr.rewards.math.notation): a hedge in text (`5 \\text{ (or 6)}`), text between math
  and hidden content are unreadable, known units at the end are dropped, `1010_2` is 10.
Normalisation, applied to both sides: a percent sign, and the words "percent", "percentage",
"pct" after a number, are dropped (gold "50%" matches "50", "50\\%" and "50 percent", not 0.5:
the number asked for is the count of percent); a number written with thousands separators
("1,000", "1{,}000", "1\\,000") is that number, so a gold "1,000" is 1000, never the list (1, 0),
but a leading zero group is never a thousands group: "0,111" is not 111 (math-verify's LaTeX
parser reads it as the decimal 0.111, the one reading it gives a comma there; "1,22" and "0,11"
are pairs); `**` is `^`; plain `pi`, `sqrt`, `inf`, π, ∞, √ become LaTeX; "1e-3" is 1 × 10^-3; a
gold or answer that is only words ("Monday") is text, compared case-insensitively. A gold that
is one math span among words (`$125$ miles`) is that span.

Asymmetric on purpose (the gold is the reference): the decimal tolerance follows the gold; where
the gold is one decimal written with a point, an answer `2,74` is the decimal 2.74 (a decimal
comma: a pair could not match such a gold), but a gold `1,22` is always the pair; a gold
equation `x = 5` accepts `5`, but a gold `5` accepts `x = 5` only as an assignment; a gold
inequality/interval and a predicted interval/inequality are compared as sets; a gold set accepts
its elements in any order (even written as a tuple), a gold tuple or point needs the order.

Time limits are enforced from outside: parsing and comparing run in a worker process that is
SIGKILLed when it passes `timeout_s` and replaced (see isolation/workers.py). A pathological answer
(`5^{5^{5^{5^5}}}`, `(10^{100})!`) scores 0 after at most `timeout_s` plus the kill. In a
VerifierPool the pool's worker is itself killed on timeout, so checks run inline there.
Model text is never eval'ed or exec'ed: it only reaches regexes, a LaTeX grammar and sympy.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Iterator, Mapping
from functools import lru_cache, partial
from typing import Any, NamedTuple

from rlvr.errors import ConfigError, DataError
from rlvr.rewards.base import Score
from rlvr.rewards.math.answer import (
    DEFAULT_ANSWER_PATTERN,
    Extraction,
    boxed_contents,
    clean_answer,
    extract_answers,
    final_region,
    math_spans,
    normalize,
    read_decimal_comma,
)
from rlvr.rewards.math.notation import (
    gold_words_known,
    loose_relations,
    numeral_bases,
    relation_pieces,
    words_of,
)
from rlvr.rewards.math.value_forms import based_form_ok, comparisons, percent_ok, proven_zero

__all__ = [
    "DEFAULT_ANSWER_PATTERN",
    "Extraction",
    "MathVerifier",
    "boxed_contents",
    "check_answers",
    "check_equivalence",
    "extract_answers",
    "math_lenient_reward",
    "math_reward",
    "normalize",
]

# -- equivalence (worker process) ----------------------------------------------------------------

_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


# math-verify's normalisation, less its unit stripping, which reads `2c` as 2, `x + 2c` as
# x + 2 and `5 increase` as 5: rlvr.rewards.math.notation reads units before it parses.
_NORMALIZATION = dict(
    basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="all"
)


def _parse(latex: str) -> Any:
    """The first sympy object math-verify's LaTeX parser gets from `latex`, or None."""
    from latex2sympy2_extended.math_normalization import NormalizationConfig
    from math_verify import LatexExtractionConfig, parse

    if not latex:
        return None
    parsed = parse(
        f"${latex}$",
        [LatexExtractionConfig(normalization_config=NormalizationConfig(**_NORMALIZATION))],
        fallback_mode="no_fallback",
        extraction_mode="first_match",
        parsing_timeout=None,  # our limit is the worker kill; signals would fight it
    )
    return parsed[0] if parsed and not isinstance(parsed[0], str) else None


class _Gold(NamedTuple):
    """A gold as the comparison uses it: its sympy object (None if unreadable), normalised
    text, the bases other than 10 of its numerals, its text as written (for the form of based
    numerals) and its words (known as units and labels in the answers)."""

    expr: Any
    text: str
    bases: frozenset[int]
    written: str
    words: frozenset[str]


@lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> _Gold:
    """The gold read as `_Gold`. A gold with one box (a full solution) is read from it; one math
    span among words (`$125$ miles`) is that span."""
    boxes = boxed_contents(gold)
    if boxes and len(boxes) == 1:
        gold = boxes[0]
    words = words_of(gold)  # before a span is picked: the words of `$125$ miles` too
    found = math_spans(clean_answer(gold))
    if found and len(found[0]) == 1 and not re.search(r"[0-9\\]", found[1]):
        gold = found[0][0]
    written = clean_answer(gold)
    with gold_words_known(words):
        text = normalize(gold, reference=True)
    return _Gold(_parse(text), text, numeral_bases(written), written, words)


def _read_prediction(answer: str, gold: _Gold) -> str | None:
    """The normalised answer, or None where its form cannot match the gold: unreadable, a box
    left in it, a relation the gold does not hold, numerals in other bases than the gold's or
    in an expression, a percent sign that ends no number."""
    with gold_words_known(gold.words):
        text = read_decimal_comma(normalize(answer), gold.text)
    if not text or _BOX_COMMAND.search(text):
        return None
    if loose_relations(text) - loose_relations(gold.text):
        return None
    written = clean_answer(answer)
    if numeral_bases(written) != gold.bases or not percent_ok(written):
        return None
    if gold.bases and not based_form_ok(written, gold.written):
        return None
    return text


def _is_collection(x: Any) -> bool:
    from sympy import MatrixBase, Set, Tuple

    return isinstance(x, (Set, Tuple, MatrixBase))


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
    Irrational values are equal only where their difference is proven zero (proven_zero):
    agreement to many digits is no proof (`5 + 10^{-45}\\pi` is not 5).
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
    if not decimal_gold:
        return proven_zero(diff)
    d, gv = (abs(x.evalf(50)) for x in (diff, g))
    if not all(v.is_number and v.is_finite for v in (d, gv)):
        return False
    return bool(d <= rel_tol * gv)


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
    read = _parse_gold(str(gold))
    pred_text = _read_prediction(answer, read)
    if pred_text is None:
        return False
    gold_pieces, gold_relations = relation_pieces(read.text)
    if gold_relations:  # `x \\approx 5`: the same relations, compared side by side
        pieces, relations = relation_pieces(pred_text)
        return relations == gold_relations and all(
            (p == g == "") or (bool(p and g) and check_equivalence(p, g, float_rel_tol))
            for p, g in zip(pieces, gold_pieces)
        )
    if read.expr is None:  # a gold math-verify cannot parse: compare the normalised text
        return _compact(pred_text) == _compact(read.text)
    pred = _parse(pred_text)
    return pred is not None and _equal(read.expr, pred, float_rel_tol)


def _equal(gold: Any, pred: Any, float_rel_tol: float) -> bool:
    """Whether the parsed `pred` matches the parsed `gold`: its form can (comparisons, in
    rlvr.rewards.math.value_forms) and math-verify, with exact numbers, finds each pair equal."""
    from math_verify import verify

    pairs = comparisons(gold, pred)
    if pairs is None:
        return False
    with _GRADER_LOCK, _strict_numbers(float_rel_tol):
        return all(
            verify(g, p, timeout_seconds=None, allow_set_relation_comp=True) for g, p in pairs
        )


def check_answers(
    answers: tuple[str, ...], gold: str, float_rel_tol: float = 1e-6
) -> tuple[bool, int]:
    """(all answers match the gold, index of the first that does not or -1): every answer equals
    the gold, or the gold is a set of several values and the answers, one value each, are
    exactly those values. Inline, no time limit (see check_equivalence)."""
    bad = next(
        (k for k, a in enumerate(answers) if not check_equivalence(a, gold, float_rel_tol)), -1
    )
    if bad < 0 or (len(answers) > 1 and _values_of_gold(answers, gold, float_rel_tol)):
        return True, -1
    return False, bad


def _values_of_gold(answers: tuple[str, ...], gold: str, float_rel_tol: float) -> bool:
    """Whether the answers, each one value, are together the values of a gold set."""
    from sympy import FiniteSet

    read = _parse_gold(str(gold))
    gold_expr = read.expr
    if not isinstance(gold_expr, FiniteSet):
        return False
    matched: set[int] = set()
    for answer in answers:
        text = _read_prediction(answer, read)
        pred = _parse(text) if text else None
        if pred is None or _is_collection(pred):
            return False
        hits = [i for i, v in enumerate(gold_expr.args) if _equal(v, pred, float_rel_tol)]
        if not hits:
            return False
        matched.update(hits)
    return len(matched) == len(gold_expr.args)


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


def _lenient_checker_handler(float_rel_tol: float):  # noqa: ANN202 - worker factory
    return _checker_handler(float_rel_tol, lenient=True)


def _checker_handler(float_rel_tol: float, lenient: bool = False):  # noqa: ANN202 - see pool.py
    """Worker-side factory: (answers, gold, region) -> (all match, index of the first mismatch
    or -1, the answers, a problem). With `region` (the lenient reading of a completion that has
    no marker) the answers are first read from it (rlvr.rewards.math.lenient)."""
    _require_math_verify()
    if lenient:
        from rlvr.rewards.math.lenient import extraction_patterns, lenient_answers

        extraction_patterns()  # a math-verify without its extraction regexes fails here

    def handle(payload: tuple[tuple[str, ...], str, Any]) -> tuple[bool, int, tuple, str]:
        answers, gold, region = payload
        if region is not None:
            found = lenient_answers(*region)
            if found.problem:
                return False, -1, found.answers, found.problem
            answers = found.answers
        ok, bad = check_answers(answers, gold, float_rel_tol)
        return ok, bad, answers, ""

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
    lenient: also read a completion that has no box, tag or answer line: math-verify's
        extraction picks its final answer, in the worker (rlvr.rewards.math.lenient). For
        evaluating models never taught the answer format, not for RL rewards.
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        answer_pattern: str | None = DEFAULT_ANSWER_PATTERN,
        float_rel_tol: float = 1e-6,
        max_answers: int = 4,
        max_answer_chars: int = 1000,
        isolate: bool = True,
        lenient: bool = False,
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
        self.lenient = lenient
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
        if self.lenient:  # the worker reads the answers (rlvr.rewards.math.lenient)
            text = final_region(completion)
            if text is None:
                return Score(0.0, "unclosed <think>")
            found = Extraction()
            region = (text, self.answer_pattern, self.max_answers, self.max_answer_chars)
        else:
            found, region = self.extract(completion), None
        answers, problem = found.answers, found.problem
        if problem:
            shown = " | ".join(answers)
            return Score(0.0, f"{problem}: {shown}" if shown else problem)
        try:
            ok, bad, answers, problem = self._check(answers, gold, region)
        except TimeoutError as e:
            return Score(0.0, f"{e}: {' | '.join(answers)}".rstrip(": "))
        shown = " | ".join(answers)
        if problem:
            return Score(0.0, f"{problem}: {shown}" if shown else problem)
        if ok:
            return Score(1.0, shown)
        if len(answers) > 1 and bad >= 0:
            return Score(0.0, f"{shown} (wrong: {answers[bad]})")
        return Score(0.0, shown)

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> float:
        return self.score(completion, sample).reward

    def _check(
        self, answers: tuple[str, ...], gold: str, region: Any
    ) -> tuple[bool, int, tuple[str, ...], str]:
        if not self.isolate:
            if self._inline is None:
                self._inline = _checker_handler(self.float_rel_tol, self.lenient)
            return self._inline((answers, gold, region))
        from rlvr.isolation.workers import (
            WorkerCrashed,
            WorkerError,
            WorkerProcess,
            WorkerSetupError,
            WorkerTimeout,
        )

        with self._lock:  # one worker, one check at a time; threads queue here
            if self._worker is None:
                factory = "_lenient_checker_handler" if self.lenient else "_checker_handler"
                self._worker = WorkerProcess(f"{__name__}:{factory}", self.float_rel_tol)
            try:
                return self._worker.call((answers, gold, region), self.timeout_s)
            except WorkerTimeout as e:
                raise TimeoutError(str(e)) from None
            except WorkerSetupError as e:
                self._worker = None
                raise ConfigError(f"math verifier: {e}") from None
            except (WorkerCrashed, WorkerError):
                # sympy blowing the stack or memory on a crafted answer: not a match
                return False, -1, answers, ""

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
            lenient=self.lenient,
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
        self.__dict__.update({"lenient": False, **state})
        self._lock = threading.Lock()


# The default instances: "math" and "math_lenient" in the registry,
# "rlvr.rewards.math:math_reward" / ":math_lenient_reward" as specs. Each starts its worker
# process on its first check.
math_reward = MathVerifier()
math_lenient_reward = MathVerifier(lenient=True)
