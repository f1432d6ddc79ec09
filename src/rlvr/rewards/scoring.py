"""`Scorer`: the verifier applied to a step's completions, with failures contained and counted.

    rewards, failures = Scorer(verifier, pool)(texts, samples)
    records = scorer.pop_failures()            # one `Failure` per failed completion

In this process (`pool=None`) or in a `VerifierPool` (`reward.workers > 0`), under the one
policy for failing user code (rlvr.rewards.base): a verifier that raises, returns anything but
a finite real number (`checked_reward`: None, "1.0", a list, NaN), crashes its worker or times
out gives reward 0, is counted in `failures` and leaves a `Failure` record (error line,
traceback, row, sample id); one bad sample must not kill a long run. A ConfigError (a missing
optional dependency, bad settings, a sandbox that cannot start) or KeyboardInterrupt stops the
run. Any other UserError a verifier raises (a DataError for a malformed sample) is that
completion's failure.

A composite verifier ('math:1.0,format:0.1') also reports each component's unweighted reward,
appended to `components[name]` in sample order over the completions that scored, so the
trainer can log reward/<name>; in process the reward is `CompositeVerifier.weighted_sum` of
those components. A failing component fails its completion, and the record names it.

A TRL-shaped component (rlvr.rewards.batched) is called once per call of the Scorer in this
process (with the completions' token ids when given): if that call raises or returns a list of
the wrong length, every completion of the call fails with its record; a wrong item fails its
completion only; a None item leaves the component out of that completion (and of
`components[name]`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from rlvr.rewards.base import (
    Failure,
    Verifier,
    checked_reward,
    contained,
    first_tracebacks,
    sample_id,
)
from rlvr.rewards.compose import CompositeVerifier, batched_rewards
from rlvr.rewards.judge import prefetch

if TYPE_CHECKING:
    from rlvr.rewards.pool import VerifierPool


class Scorer:
    """Applies the verifier to every completion, in this process or in a worker pool."""

    def __init__(
        self,
        verifier: Verifier,
        pool: VerifierPool | None = None,
        routes: Mapping[str, Scorer] | None = None,
    ) -> None:
        self.verifier = verifier
        self.pool = pool
        # a sample whose "reward_route" names one of these is scored by that scorer instead
        # (data.mix_path's prompts: reward.mix_verifier; rlvr.data.mix)
        self.routes = dict(routes or {})
        self.components: dict[str, list[float]] = {}
        self.failures: list[Failure] = []

    def __call__(
        self,
        texts: list[str],
        samples: list[Mapping[str, Any]],
        *,
        first_row: int = 0,
        indices: Sequence[int] | None = None,
        completion_ids: Sequence[Any] | None = None,
        skip: Sequence[bool] | None = None,
    ) -> tuple[list[float], int]:
        """(reward per completion, number of failures); raises ValueError on unequal lengths.

        Each failure's record is appended to `failures` with `row` = first_row + its position
        and `sample_id` from its sample, else `indices[position]` (default: the row); of the
        records of one error (`Failure.key`) only the first keeps its traceback.
        `completion_ids`: each completion's token ids (ints, or a tensor: its tolist()), for
        TRL-shaped functions. `skip[i]`: completion i is not scored (its environment gave
        its reward, which replaces the verifier's): reward 0, no failure, no component value.
        A sample whose `reward_route` is one of `routes` is scored by that route's scorer: its
        failures and components are gathered here, numbered as if this scorer had scored it."""
        if len(texts) != len(samples):
            raise ValueError(f"{len(texts)} completions for {len(samples)} samples")
        routed = [s.get("reward_route") for s in samples] if self.routes else []
        if any(r in self.routes for r in routed):
            return self._routed(texts, samples, first_row, indices, completion_ids, skip, routed)
        return self._score(texts, samples, first_row, indices, completion_ids, skip)

    def _score(
        self,
        texts: list[str],
        samples: list[Mapping[str, Any]],
        first_row: int = 0,
        indices: Sequence[int] | None = None,
        completion_ids: Sequence[Any] | None = None,
        skip: Sequence[bool] | None = None,
    ) -> tuple[list[float], int]:
        """`__call__` with this scorer's own verifier for every row."""
        if skip is not None and any(skip):
            return self._some(texts, samples, first_row, indices, completion_ids, skip)
        if not self.batched:
            completion_ids = None  # nothing reads them: not sent to workers
        elif completion_ids is not None:  # tensors (a RolloutBatch's) as plain lists of ints
            completion_ids = [
                ids.tolist() if hasattr(ids, "tolist") else list(ids) for ids in completion_ids
            ]
        if self.pool is not None:
            scores, components, failed = self.pool.score_with_failures(
                texts, samples, completion_ids
            )
            for name, values in components.items():
                self.components.setdefault(name, []).extend(values)
            rewards = list(scores.rewards)
        else:
            rewards, failed = self._in_process(texts, samples, completion_ids)
        where = list(indices) if indices is not None else None
        for f in first_tracebacks(failed):
            index = where[f.row] if where is not None else first_row + f.row
            sid = sample_id(samples[f.row], index)
            self.failures.append(replace(f, row=first_row + f.row, sample_id=sid))
        return rewards, len(failed)

    def _some(
        self,
        texts: list[str],
        samples: list[Mapping[str, Any]],
        first_row: int,
        indices: Sequence[int] | None,
        completion_ids: Sequence[Any] | None,
        skip: Sequence[bool],
    ) -> tuple[list[float], int]:
        """`__call__` of the completions not skipped, their failures numbered as if all were
        scored; the skipped ones 0."""
        keep = [i for i, s in enumerate(skip) if not s]
        where = list(indices) if indices is not None else [first_row + i for i in range(len(texts))]
        before = len(self.failures)
        scored, failed = self._score(
            [texts[i] for i in keep],
            [samples[i] for i in keep],
            indices=[where[i] for i in keep],
            completion_ids=[completion_ids[i] for i in keep]
            if completion_ids is not None
            else None,
        )
        for j in range(before, len(self.failures)):
            self.failures[j] = replace(self.failures[j], row=first_row + keep[self.failures[j].row])
        rewards = [0.0] * len(texts)
        for i, reward in zip(keep, scored):
            rewards[i] = reward
        return rewards, failed

    def _routed(
        self,
        texts: list[str],
        samples: list[Mapping[str, Any]],
        first_row: int,
        indices: Sequence[int] | None,
        completion_ids: Sequence[Any] | None,
        skip: Sequence[bool] | None,
        routed: list[Any],
    ) -> tuple[list[float], int]:
        """The rows of each route by its scorer, the others by this one (the routed rows
        skipped here); rewards in row order, failures numbered by row."""
        skipped = list(skip) if skip is not None else [False] * len(texts)
        own = [s or r in self.routes for s, r in zip(skipped, routed)]
        rewards, failed = self._score(texts, samples, first_row, indices, completion_ids, own)
        where = list(indices) if indices is not None else [first_row + i for i in range(len(texts))]
        for name, scorer in self.routes.items():
            rows = [i for i, r in enumerate(routed) if r == name and not skipped[i]]
            if not rows:
                continue
            scored, n = scorer(
                [texts[i] for i in rows],
                [samples[i] for i in rows],
                indices=[where[i] for i in rows],
                completion_ids=[completion_ids[i] for i in rows]
                if completion_ids is not None
                else None,
            )
            for i, reward in zip(rows, scored):
                rewards[i] = reward
            failed += n
            for f in scorer.pop_failures():
                self.failures.append(replace(f, row=first_row + rows[f.row]))
            for key, values in scorer.pop_components().items():
                self.components.setdefault(key, []).extend(values)
        return rewards, failed

    @property
    def batched(self) -> bool:
        """Whether the verifier has a TRL-shaped component (called once per batch)."""
        return isinstance(self.verifier, CompositeVerifier) and bool(self.verifier.batched())

    def _in_process(
        self,
        texts: list[str],
        samples: list[Mapping[str, Any]],
        completion_ids: Sequence[Sequence[int]] | None = None,
    ) -> tuple[list[float], list[Failure]]:
        composite = self.verifier if isinstance(self.verifier, CompositeVerifier) else None
        batch: dict[str, list[Any]] = {}
        whole: Failure | None = None  # a batched component's call failed: every row does
        if composite is not None and texts:
            given, whole = contained(
                partial(batched_rewards, composite, texts, samples, completion_ids), "verifier"
            )
            batch = given or {}
        if whole is None:  # an LLM judge asks about the whole batch at once (rewards/judge)
            prefetch(self.verifier, texts, samples)
        rewards, failed = [], []
        for i, (text, sample) in enumerate(zip(texts, samples)):
            if whole is not None:
                rewards.append(0.0)
                failed.append(replace(whole, row=i))
                continue
            if composite is not None:
                values = {name: v[i] for name, v in batch.items()}
                parts, failure = contained(
                    partial(_composite_parts, composite, text, sample, values), "verifier"
                )
                for name, value in (parts or {}).items():
                    self.components.setdefault(name, []).append(value)
                r = composite.weighted_sum(parts) if parts is not None else 0.0
            else:
                reward, failure = contained(
                    partial(_reward, self.verifier, text, sample), "verifier"
                )
                r = 0.0 if reward is None else reward
            if failure is not None:
                r = 0.0
                failed.append(replace(failure, row=i))
            rewards.append(r)
        return rewards, failed

    def pop_components(self) -> dict[str, list[float]]:
        """The components gathered since the last call, and start afresh."""
        out, self.components = self.components, {}
        return out

    def pop_failures(self) -> list[Failure]:
        """The failure records gathered since the last call, and start afresh."""
        out, self.failures = self.failures, []
        return out


def _reward(verifier: Verifier, text: str, sample: Mapping[str, Any]) -> float:
    """The verifier's reward; raises when it is not a finite real number."""
    return checked_reward(verifier(text, sample))


def _composite_parts(
    composite: CompositeVerifier,
    text: str,
    sample: Mapping[str, Any],
    batch_values: Mapping[str, Any],
) -> dict[str, float]:
    """Each component's reward; raises when one fails or their weighted sum is not finite."""
    parts = composite.score_components(text, sample, batch_values)
    checked_reward(composite.weighted_sum(parts), "the composite verifier")
    return parts
