"""The verifier interface, and the one policy for user code that fails on a completion.

A verifier is a plain function of (completion, sample) -> float. Verifiers import no torch and
no model, so they run in worker processes, in Ray actors, or from `rlvr verify` on a laptop.
Batch and async forms are adapters around this one signature. A verifier may also offer
`score(completion, sample) -> Score` with a short human-readable detail (the extracted answer,
the test results); `score_with_detail` uses it when present.

Failing user code (a verifier, a user environment) follows one policy wherever it runs (the
trainer's Scorer, the VerifierPool's workers, Ray reward actors, held-out evaluation, multi-turn
rollouts, `rlvr verify`):

- `stops_the_run`: a `ConfigError` (and its subclasses: a missing optional dependency, bad
  settings, a sandbox that cannot start) and `KeyboardInterrupt` stop the run. Every other
  exception (a `DataError` for a malformed sample, a bug, `SystemExit`, `GeneratorExit`) is the
  failure of the one completion it was scoring: reward 0, counted, and recorded as a `Failure`.
- `checked_reward`: a return value that is not a finite real number is a failure of the same
  kind, never coerced (`"1.0"` is no reward).
- `failure_of`: the record of one failure: the error line, the whole traceback, and the key
  that says which failures are the same error (`first_tracebacks` keeps one traceback per key).
"""

from __future__ import annotations

import math
import numbers
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from rlvr.errors import ConfigError

Verifier = Callable[[str, Mapping[str, Any]], float]
T = TypeVar("T")

ERROR_MAX_CHARS = 300  # a failure's error line, "Type: message"
_VALUE_MAX_CHARS = 60  # a wrong return value, as quoted in its error line
# Attributes set on an exception on its way out of rlvr code: the composite component it came
# from, and, for a wrong return value, the returned type (such a failure has no user frame).
_COMPONENT = "_rlvr_component"
_RETURNED = "_rlvr_returned"


@dataclass(frozen=True)
class Score:
    reward: float
    detail: str = ""


@dataclass(frozen=True)
class Failure:
    """One completion whose verifier or environment failed (it scored 0).

    kind: "verifier" or "environment". error: the exception's last line, "Type: message", at
    most ERROR_MAX_CHARS. traceback: the whole formatted traceback (None: no user frame to show,
    as for a wrong return value, a timeout or a crashed worker). key: what makes two failures
    the same error (see `failure_of`). row: the completion's row where it was scored; sample_id:
    the sample's `id`, else its `task_id`, else its index (`sample_id`). component: the
    composite verifier's component that failed, else None."""

    kind: str
    error: str
    traceback: str | None
    key: str
    row: int = 0
    sample_id: Any = None
    component: str | None = None


def stops_the_run(e: BaseException) -> bool:
    """True for what user code may raise to stop a run: a ConfigError (its subclasses too) or
    KeyboardInterrupt. Anything else is the failure of one completion."""
    return isinstance(e, (ConfigError, KeyboardInterrupt))


def describe_value(value: Any) -> str:
    """The type and a short repr of a wrong return value: "str '1.0'", "None", "list [1]"."""
    if value is None:
        return "None"
    if isinstance(value, int) and value.bit_length() > 64:  # repr of a huge int is slow or fails
        return f"int of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a user type whose repr raises
        text = "<unprintable>"
    text = " ".join(text.split())
    if len(text) > _VALUE_MAX_CHARS:
        text = text[: _VALUE_MAX_CHARS - 3] + "..."
    return f"{type(value).__name__} {text}"


def return_error(
    value: Any, source: str, expected: str, *, field: str = "", error: type = TypeError
) -> Exception:
    """The exception for a wrong return value: "<source> returned [<field> ]<value> (expected
    <expected>)", marked so that its failure carries no traceback and is keyed by the returned
    type (`failure_of`)."""
    said = f"{field} " if field else ""
    e = error(f"{source} returned {said}{describe_value(value)} (expected {expected})")
    setattr(e, _RETURNED, type(value).__name__)
    return e


def _is_numpy_bool(value: Any) -> bool:
    # numpy does not register its bool scalar as numbers.Real (its int and float scalars are)
    return type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool")


def checked_reward(value: Any, source: str = "the verifier", *, field: str = "") -> float:
    """float(value) when `value` is a real number (numbers.Real: bool, int, float, Fraction,
    numpy's numeric scalars; numpy's bool too) whose float is finite; a `Score` is checked by
    its reward. Anything else raises: TypeError for what is not a real number (None, a str,
    "1.0" included, a list, a tensor, a dict), ValueError for NaN, +-inf and an int too large
    for a float; the message names `source` (and `field`) and the value. The one check of every
    reward that user code returns."""
    if isinstance(value, Score) and not field:
        return checked_reward(value.reward, source, field="a Score whose reward is")
    if not isinstance(value, numbers.Real) and not _is_numpy_bool(value):
        raise return_error(value, source, "a finite number", field=field)
    try:
        reward = float(value)
    except OverflowError:
        raise return_error(
            value, source, "a finite number", field=field, error=ValueError
        ) from None
    if not math.isfinite(reward):
        raise return_error(value, source, "a finite number", field=field, error=ValueError)
    return reward


def score_with_detail(
    verifier: Any, completion: str, sample: Mapping[str, Any], source: str = "the verifier"
) -> Score:
    """Call `verifier.score` when it exists, else the plain signature with an empty detail; the
    reward checked (`checked_reward`, naming `source`)."""
    score = getattr(verifier, "score", None)
    if callable(score):
        result = score(completion, sample)
        detail = result.detail if isinstance(result, Score) else ""
        return Score(checked_reward(result, source), detail)
    return Score(checked_reward(verifier(completion, sample), source))


def mark_component(e: BaseException, name: str) -> None:
    """Record on `e` that the composite verifier's component `name` raised it (the innermost
    component wins)."""
    if getattr(e, _COMPONENT, None) is None:
        try:
            setattr(e, _COMPONENT, name)
        except AttributeError:  # pragma: no cover - an exception type without attributes
            pass


def error_line(e: BaseException) -> str:
    """ "Type: message" on one line (just "Type" without a message), at most ERROR_MAX_CHARS."""
    try:
        message = " ".join(str(e).split())
    except Exception:  # noqa: BLE001 - a user exception whose __str__ raises
        message = "<unprintable message>"
    line = f"{type(e).__name__}: {message}" if message else type(e).__name__
    return line[:ERROR_MAX_CHARS]


def failure_of(e: BaseException, kind: str) -> Failure:
    """The record of `e` failing a completion in the `kind` ("verifier" or "environment").

    Its key: kind + exception type + the innermost frame's file:line, so one bug on one line is
    one error however its messages vary; without a frame, kind + the error line. A wrong return
    value (`return_error`) has no traceback (no frame of the user's shows anything) and is keyed
    by kind + exception type + the returned type (and the component, in a composite)."""
    line = error_line(e)
    component = getattr(e, _COMPONENT, None)
    returned = getattr(e, _RETURNED, None)
    if returned is not None:
        key = f"{kind}|{type(e).__name__}|{component or ''}|returned {returned}"
        return Failure(kind, line, None, key, component=component)
    frames = traceback.extract_tb(e.__traceback__)
    if frames:
        key = f"{kind}|{type(e).__name__}|{frames[-1].filename}:{frames[-1].lineno}"
    else:
        key = f"{kind}|{line}"
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__)) if frames else None
    return Failure(kind, line, text, key, component=component)


def failure_without_traceback(kind: str, error: str, key: str | None = None) -> Failure:
    """The record of a failure that raised nothing here (a timeout, a crashed worker)."""
    line = error[:ERROR_MAX_CHARS]
    return Failure(kind, line, None, key or f"{kind}|{line}")


def contained(call: Callable[[], T], kind: str) -> tuple[T | None, Failure | None]:
    """(call(), None); or (None, its Failure) when it raised anything but what `stops_the_run`
    (that is raised again)."""
    try:
        return call(), None
    except BaseException as e:  # noqa: BLE001 - the policy: one completion fails, the run goes on
        if stops_the_run(e):
            raise
        return None, failure_of(e, kind)


def sample_id(sample: Mapping[str, Any], index: int) -> Any:
    """How a failure names its sample: the sample's `id`, else its `task_id`, else `index`."""
    for key in ("id", "task_id"):
        value = sample.get(key) if isinstance(sample, Mapping) else None
        if value is not None:
            return value
    return index


def first_tracebacks(failures: Iterable[Failure], seen: set[str] | None = None) -> list[Failure]:
    """`failures` in order, each traceback kept only on the first record of its key that is not
    in `seen` (the keys met are added to `seen` when it is given)."""
    seen = set() if seen is None else seen
    out = []
    for f in failures:
        if f.key in seen and f.traceback is not None:
            f = replace(f, traceback=None)
        seen.add(f.key)
        out.append(f)
    return out
