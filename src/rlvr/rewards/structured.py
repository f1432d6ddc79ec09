"""What the structured-output verifiers (`json_schema`, `regex`) share: where the answer is, and
a check run under a wall-clock limit in a killable worker process.

Answer: the text after the last `</think>` (as the math verifier reads it: a chat template may
open the `<think>` in the prompt); a `<think>` left open after it (a trace cut at the token
limit) means no answer.

Time limit: matching a regex, or validating against a schema whose `pattern` keywords are
regexes, can backtrack for hours on a crafted string inside one C call of `re`, which no
signal interrupts. So the check runs in a `WorkerProcess` (isolation/workers.py) that is
SIGKILLed and replaced when it overruns `timeout_s`, as the math verifier's checks do; the
answer then scores 0. Inside a VerifierPool worker, which is itself killed on timeout,
`for_worker()` copies run the check inline.

Visible text: `is_visible` is what the verifiers count as content, so that an answer or a
reasoning block made of invisible characters is empty, and a format value with one in it is
malformed (see the function).
"""

from __future__ import annotations

import threading
import unicodedata
from typing import Any

from rlvr.errors import ConfigError
from rlvr.markup import THINK_CLOSE, THINK_OPEN

ASCII_SPACE = " \t\r\n"  # the whitespace around an answer that is stripped, and nothing else

# Letters and symbols that render as blank space: Hangul fillers, the braille blank.
_BLANK_GRAPHICS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def is_visible(c: str) -> bool:
    """Whether the character `c` shows as a mark of its own: a letter, number, punctuation or
    symbol (Unicode categories L, N, P, S), but not one that renders blank. Not visible:
    whitespace and separators (Z), controls, format characters such as U+200B and U+FEFF,
    private-use and unassigned code points (C), and combining marks (M), which show only on a
    visible base character."""
    return unicodedata.category(c)[0] in "LNPS" and c not in _BLANK_GRAPHICS


def has_visible(text: str) -> bool:
    """Whether `text` holds at least one visible character (`is_visible`)."""
    return any(is_visible(c) for c in text)


def after_reasoning(completion: str) -> str | None:
    """The text after the reasoning, or None when the reasoning is not closed."""
    tail = completion.rpartition(THINK_CLOSE)[2]
    return None if THINK_OPEN in tail else tail


class CheckTimeout(Exception):
    """The check ran past its limit; its worker was killed."""


class IsolatedCheck:
    """`factory(arg)(payload)` in a worker process killed after `timeout_s` (CheckTimeout), or
    inline when `isolate` is False. `factory` is a 'module:function' name. A worker that
    crashes (a stack or memory blow-up on crafted input) or raises gives `on_crash`."""

    def __init__(
        self, factory: str, arg: Any, timeout_s: float, *, isolate: bool = True, on_crash: Any
    ) -> None:
        if timeout_s <= 0:
            raise ConfigError(f"{factory}: timeout_s must be > 0, got {timeout_s}")
        self.factory, self.arg, self.timeout_s = factory, arg, timeout_s
        self.isolate, self.on_crash = isolate, on_crash
        self._worker: Any = None
        self._inline: Any = None
        self._lock = threading.Lock()

    def __call__(self, payload: Any) -> Any:
        from rlvr.isolation.workers import (
            WorkerCrashed,
            WorkerError,
            WorkerProcess,
            WorkerSetupError,
            WorkerTimeout,
            _load_callable,
        )

        if not self.isolate:
            if self._inline is None:
                self._inline = _load_callable(self.factory)(self.arg)
            return self._inline(payload)
        with self._lock:  # one worker, one check at a time; threads queue here
            if self._worker is None:
                self._worker = WorkerProcess(self.factory, self.arg)
            try:
                return self._worker.call(payload, self.timeout_s)
            except WorkerTimeout as e:
                raise CheckTimeout(str(e)) from None
            except WorkerSetupError as e:
                self._worker = None
                raise ConfigError(str(e)) from None
            except (WorkerCrashed, WorkerError):
                return self.on_crash

    def inline(self) -> IsolatedCheck:
        return IsolatedCheck(
            self.factory, self.arg, self.timeout_s, isolate=False, on_crash=self.on_crash
        )

    def close(self) -> None:
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
