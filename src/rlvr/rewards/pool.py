"""Score a batch of completions in N worker processes, each sample under a wall-clock limit.

`VerifierPool(spec, workers, timeout_s)` resolves the verifier spec inside each worker
(`WorkerProcess`, see isolation/workers.py: why processes, the start method, how children die
with their parent) and hands samples to whichever worker is free. The policy for failing user
code is the in-process one (rlvr.rewards.base): a sample whose verifier raises (anything but a
ConfigError or KeyboardInterrupt, which the parent raises again: they stop the run), returns
anything but a finite number (`checked_reward`, in the worker), crashes its worker or overruns
`timeout_s` gets reward 0, a detail saying which, and is counted in `failures`; the worker is
killed if needed and replaced. Each failure also comes back as a `Failure` record with the
worker's traceback (`score_with_failures`).

A composite verifier ('math:1.0,format:0.1') also returns each component's unweighted reward, so
the trainer logs reward/<name> with a pool as it does in-process. A TRL-shaped function
(rlvr.rewards.batched) is called in the worker on one completion at a time (lists of one, with
its `completion_ids` when the caller passes them), under the same per-sample limit. A function
given from Python reaches the workers pickled (rlvr.rewards.spec.worker_spec).
"""

from __future__ import annotations

import os
import pickle
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from multiprocessing.connection import wait
from typing import Any, NamedTuple

from rlvr.errors import ConfigError
from rlvr.isolation.workers import (
    DETAIL_MAX_CHARS,
    WorkerCrashed,
    WorkerError,
    WorkerProcess,
    WorkerSetupError,
    mp_context,
    short_error,
)
from rlvr.rewards.base import (
    Failure,
    Score,
    checked_reward,
    failure_of,
    failure_without_traceback,
    score_with_detail,
    stops_the_run,
)
from rlvr.rewards.compose import CompositeVerifier, batched_rewards, build_verifier
from rlvr.rewards.spec import describe_spec, worker_spec


class Reply(NamedTuple):
    """One sample's score: reward, detail, each component's reward (composites, when it
    scored), the failure (None: it scored), and `stop`: (exception type, message) of what
    stops the run (a ConfigError, KeyboardInterrupt), raised again by the pool's parent."""

    reward: float
    detail: str
    parts: dict[str, float] | None
    failure: Failure | None = None
    stop: tuple[str, str] | None = None


class BatchScores(NamedTuple):
    rewards: list[float]
    failures: int
    details: list[str]


def score_one(
    verifier: Any,
    completion: str,
    sample: Mapping[str, Any],
    completion_ids: Sequence[int] | None = None,
) -> Reply:
    """One sample scored under the failure policy (rlvr.rewards.base): the reward checked, a
    failure recorded with reward 0 and detail 'error: Type: message'; what stops the run is
    raised. The pool's workers and `rlvr verify --workers 0` score with this. A TRL-shaped
    component is called on this one completion (with its `completion_ids` when given)."""

    def score() -> tuple[Score, dict[str, float] | None]:
        if isinstance(verifier, CompositeVerifier):
            ids = None if completion_ids is None else [completion_ids]
            given = batched_rewards(verifier, [completion], [sample], ids)
            values = {name: v[0] for name, v in given.items()}
            total, parts = verifier.score_with_components(completion, sample, values)
            return Score(
                checked_reward(total.reward, "the composite verifier"), total.detail
            ), parts
        return score_with_detail(verifier, completion, sample), None

    try:
        result, parts = score()
    except BaseException as e:  # noqa: BLE001 - the policy: one sample fails, the run goes on
        if stops_the_run(e):
            raise
        failure = failure_of(e, "verifier")
        return Reply(0.0, f"error: {failure.error}"[:DETAIL_MAX_CHARS], None, failure)
    return Reply(result.reward, str(result.detail)[:DETAIL_MAX_CHARS], parts)


def _verifier_handler(spec: str | bytes) -> Callable[[tuple[Any, ...]], Reply]:
    """Worker-side factory: resolve the spec and return (completion, sample[, ids]) -> Reply."""
    if isinstance(spec, bytes):
        try:
            spec = pickle.loads(spec)
        except Exception as e:  # noqa: BLE001 - a function this process cannot import
            raise ConfigError(
                f"reward.verifier: a worker process cannot load the function ({short_error(e)}); "
                "use reward.workers=0, or a function in a module the workers can import"
            ) from None
    verifier = build_verifier(spec)
    # A verifier that isolates its own checks in a subprocess (MathVerifier) can run them inline
    # here, since this worker is itself killed on timeout.
    for_worker = getattr(verifier, "for_worker", None)
    if callable(for_worker):
        verifier = for_worker()

    def handle(payload: tuple[Any, ...]) -> Reply:
        try:
            return score_one(verifier, *payload)
        except BaseException as e:  # noqa: BLE001 - score_one raises only what stops the run
            if not stops_the_run(e):
                raise
            return Reply(0.0, "", None, stop=(type(e).__name__, str(e)))

    return handle


class VerifierPool:
    """Score completions in `workers` processes, each with a per-sample wall-clock limit.

    `spec` is anything `rlvr.rewards.compose.build_verifier` takes: a registry name ("math"),
    'module:function', 'path/file.py:function', or a weighted sum "math:1.0,format:0.1". It is
    resolved inside each worker, so user verifiers need not be picklable (samples must be); a
    function or list of them set from Python is pickled (a lambda is a ConfigError here).

    A sample whose verifier raises, returns anything but a finite number, crashes its worker
    (segfault, os._exit) or runs past `timeout_s` gets reward 0 and is counted in `failures`; a
    killed or dead worker is replaced. A ConfigError or KeyboardInterrupt from the verifier is
    raised in the caller: it stops the run, as in process. The limit is measured from when a
    ready worker receives the sample, so a replacement's start-up never eats into the next
    sample's time.
    """

    def __init__(self, spec: Any, workers: int | None = None, timeout_s: float = 10.0) -> None:
        if timeout_s <= 0:
            raise ConfigError(f"VerifierPool: timeout_s must be > 0, got {timeout_s}")
        n = workers if workers is not None else (os.cpu_count() or 1)
        if n < 1:
            raise ConfigError(f"VerifierPool: workers must be >= 1, got {n}")
        self.spec, self.timeout_s = worker_spec(spec), timeout_s
        self.label = describe_spec(spec)
        ctx = mp_context()
        self._workers = [
            WorkerProcess(f"{__name__}:_verifier_handler", self.spec, ctx) for _ in range(n)
        ]
        try:
            for w in self._workers:
                w.start()
            for w in self._workers:
                w.wait_ready()
        except WorkerSetupError as e:
            self.close()
            raise self._setup_error(e) from None
        except WorkerCrashed as e:
            self.close()
            raise ConfigError(f"reward.verifier '{self.label}': {e}") from None

    def _setup_error(self, e: WorkerSetupError) -> ConfigError:
        message = str(e)
        if not message.startswith("reward."):
            message = f"reward.verifier '{self.label}': {message}"
        return ConfigError(message)

    @property
    def workers(self) -> int:
        return len(self._workers)

    @property
    def pids(self) -> list[int]:
        """Process ids of the running workers (they change when one is replaced)."""
        return [w.process.pid for w in self._workers if w.process is not None]

    def score_batch(
        self, completions: Sequence[str], samples: Sequence[Mapping[str, Any]]
    ) -> BatchScores:
        """Rewards aligned with `completions`; raises ValueError if the two lengths differ."""
        return self.score_batch_with_components(completions, samples)[0]

    def score_batch_with_components(
        self, completions: Sequence[str], samples: Sequence[Mapping[str, Any]]
    ) -> tuple[BatchScores, dict[str, list[float]]]:
        """`score_batch`, and for a composite verifier each component's unweighted rewards by
        name, in sample order, over the samples that scored (a failed one has none)."""
        scores, components, _ = self.score_with_failures(completions, samples)
        return scores, components

    def score_with_failures(
        self,
        completions: Sequence[str],
        samples: Sequence[Mapping[str, Any]],
        completion_ids: Sequence[Sequence[int]] | None = None,
    ) -> tuple[BatchScores, dict[str, list[float]], list[Failure]]:
        """`score_batch_with_components`, and the record of each failed sample in sample order
        (`row`: its index in `completions`; the traceback is the worker's). A ConfigError or
        KeyboardInterrupt raised by the verifier in a worker is raised here. `completion_ids`
        (token ids per completion) reach TRL-shaped functions."""
        if len(completions) != len(samples):
            raise ValueError(
                f"score_batch: {len(completions)} completions but {len(samples)} samples"
            )
        n = len(completions)
        rewards, details = [0.0] * n, [""] * n
        parts: list[dict[str, float] | None] = [None] * n
        failed: dict[int, Failure] = {}
        pending = deque(range(n))
        busy: dict[WorkerProcess, tuple[int, float]] = {}  # worker -> (sample index, deadline)

        def fail(i: int, failure: Failure, detail: str | None = None) -> None:
            failed[i] = replace(failure, row=i)
            rewards[i] = 0.0
            details[i] = (detail or f"error: {failure.error}")[:DETAIL_MAX_CHARS]

        while pending or busy:
            for w in self._workers:
                if not pending or w in busy or not w.ready:
                    continue
                i = pending.popleft()
                try:
                    payload: tuple[Any, ...] = (completions[i], samples[i])
                    if completion_ids is not None:
                        payload += (list(completion_ids[i]),)
                    w.send(payload)
                except (BrokenPipeError, ConnectionResetError):  # died while idle: retry elsewhere
                    pending.appendleft(i)
                    w.restart()
                    continue
                except Exception as e:  # noqa: BLE001 - an unpicklable sample fails alone
                    fail(i, failure_of(e, "verifier"), f"error: {short_error(e)}")
                    continue
                busy[w] = (i, time.monotonic() + self.timeout_s)
            starting = [w for w in self._workers if not w.ready]
            waitables: list[Any] = [w.conn for w in busy] + [w.process.sentinel for w in busy]
            waitables += [w.conn for w in starting]
            if not waitables:  # pragma: no cover - every worker is busy or starting
                continue
            next_deadline = min((d for _, d in busy.values()), default=None)
            timeout = None if next_deadline is None else max(0.0, next_deadline - time.monotonic())
            ready = set(wait(waitables, timeout))
            for w in starting:
                if w.conn in ready:
                    try:
                        w.handle_ready_message()
                    except WorkerSetupError as e:
                        self.close()
                        raise self._setup_error(e) from None
                    except WorkerCrashed:
                        w.start()
            now = time.monotonic()
            for w, (i, deadline) in list(busy.items()):
                if w.conn in ready or w.process.sentinel in ready:
                    del busy[w]
                    # A reply written just before the worker died is still in the pipe.
                    try:
                        reply = Reply(*w.receive())
                    except WorkerError as e:  # raised outside the handler's own containment
                        failure = failure_without_traceback("verifier", str(e))
                        fail(i, replace(failure, traceback=e.traceback))
                        continue
                    except WorkerCrashed as e:
                        fail(
                            i, failure_without_traceback("verifier", f"WorkerCrashed: {e}"), str(e)
                        )
                        continue
                    if reply.stop is not None:
                        self._stop(busy, *reply.stop)
                    rewards[i], details[i], parts[i] = reply.reward, reply.detail, reply.parts
                    if reply.failure is not None:
                        fail(i, reply.failure, reply.detail)
                elif now >= deadline:
                    del busy[w]
                    w.restart()
                    message = f"timeout after {self.timeout_s:g} s"
                    fail(
                        i,
                        failure_without_traceback("verifier", f"WorkerTimeout: {message}"),
                        message,
                    )
        components: dict[str, list[float]] = {}
        for sample_parts in parts:
            for name, value in (sample_parts or {}).items():
                components.setdefault(name, []).append(value)
        records = [failed[i] for i in sorted(failed)]
        return BatchScores(rewards, len(records), details), components, records

    def _stop(self, busy: Mapping[WorkerProcess, Any], kind: str, message: str) -> None:
        """A worker's verifier raised what stops the run: the calls still running are
        abandoned (their workers replaced, so the pool stays usable) and it is raised here."""
        for w in busy:
            w.restart()
        if kind == "KeyboardInterrupt":
            raise KeyboardInterrupt(message)
        raise ConfigError(message)

    def close(self) -> None:
        for w in self._workers:
            w.close()

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
