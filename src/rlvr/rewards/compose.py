"""Weighted sums of verifiers, and batch/async adapters around the per-sample signature.

    reward = sum_i weight_i * verifier_i(completion, sample)

A spec "math:1.0,format:0.1" builds one: comma-separated items NAME[:WEIGHT], where NAME is
anything `get_verifier` resolves (a built-in name, 'module:function', 'file.py:function') and
WEIGHT (default 1.0) is recognised because it parses as a number, which a Python function
name cannot. `score_components` returns each verifier's unweighted reward under its name, so the
trainer can log reward/math and reward/format separately (their mean and std), not just the sum.
A component that raises or returns anything but a finite number fails the whole completion: the
exception leaves marked with the component's name (`rlvr.rewards.base.mark_component`), so the
failure's record names it.

The batch adapters never broadcast: completions and samples of different lengths are a bug
upstream, and a ValueError naming both lengths is raised.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from rlvr.errors import ConfigError
from rlvr.rewards.base import (
    Score,
    Verifier,
    checked_reward,
    mark_component,
    score_with_detail,
    stops_the_run,
)

T = TypeVar("T")


class CompositeVerifier:
    """Weighted sum of named verifiers: `CompositeVerifier({"math": (math_reward, 1.0), ...})`."""

    def __init__(self, components: Mapping[str, tuple[Verifier, float]]) -> None:
        if not components:
            raise ConfigError("reward.verifier: a composite verifier needs at least one component")
        self.components = {name: (v, float(w)) for name, (v, w) in components.items()}

    @classmethod
    def from_spec(cls, spec: str) -> CompositeVerifier:
        from rlvr.rewards.registry import get_verifier

        components: dict[str, tuple[Verifier, float]] = {}
        for item in (part.strip() for part in spec.split(",")):
            name, weight = _split_weight(item)
            if not name:
                raise ConfigError(f"reward.verifier: empty item in '{spec}'")
            if not math.isfinite(weight):
                raise ConfigError(f"reward.verifier: weight of '{name}' must be finite in '{spec}'")
            if name in components:
                raise ConfigError(f"reward.verifier: '{name}' appears twice in '{spec}'")
            components[name] = (get_verifier(name), weight)
        return cls(components)

    def score_components(self, completion: str, sample: Mapping[str, Any]) -> dict[str, float]:
        """Each component's unweighted reward, by name, each checked (`checked_reward`); the
        first component that fails raises, marked with its name."""
        return {
            name: _component(name, _checked_call, v, completion, sample, name)
            for name, (v, _) in self.components.items()
        }

    def weighted_sum(self, parts: Mapping[str, float]) -> float:
        """sum_i weight_i * parts[name_i], in component order: the reward of `__call__` and of
        the trainer's Scorer (one expression, so both give the same float)."""
        return sum(w * parts[name] for name, (_, w) in self.components.items())

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> float:
        return self.weighted_sum(self.score_components(completion, sample))

    def score(self, completion: str, sample: Mapping[str, Any]) -> Score:
        return self.score_with_components(completion, sample)[0]

    def score_with_components(
        self, completion: str, sample: Mapping[str, Any]
    ) -> tuple[Score, dict[str, float]]:
        """`score` and each component's unweighted reward by name, from one call of each.

        The total is accumulated left to right (what a VerifierPool worker has always returned);
        on Python >= 3.12, whose sum() of floats is compensated, it can differ from
        `weighted_sum` in the last bit."""
        total, details, parts = 0.0, [], {}
        for name, (v, w) in self.components.items():
            s = _component(name, score_with_detail, v, completion, sample, _who(name))
            total += w * s.reward
            parts[name] = float(s.reward)
            details.append(f"{name}={s.reward:g}" + (f" ({s.detail})" if s.detail else ""))
        return Score(total, "; ".join(details)), parts

    def for_worker(self) -> CompositeVerifier:
        """Components that isolate themselves in a subprocess run inline (see pool.py)."""
        return CompositeVerifier(
            {
                name: (getattr(v, "for_worker", lambda v=v: v)(), w)
                for name, (v, w) in self.components.items()
            }
        )


def _who(name: str) -> str:
    return f"the verifier '{name}'"


def _checked_call(v: Verifier, completion: str, sample: Mapping[str, Any], name: str) -> float:
    return checked_reward(v(completion, sample), _who(name))


def _component(name: str, fn: Callable[..., T], *args: Any) -> T:
    """fn(*args), an exception from it marked as component `name`'s (unless it stops the run)."""
    try:
        return fn(*args)
    except BaseException as e:
        if not stops_the_run(e):
            mark_component(e, name)
        raise


def _split_weight(item: str) -> tuple[str, float]:
    name, sep, last = item.rpartition(":")
    if sep:
        try:
            return name.strip(), float(last)
        except ValueError:
            pass
    return item.strip(), 1.0


def is_composite_spec(spec: str) -> bool:
    """True for "a,b" or "name:WEIGHT" specs, False for a single name or 'module:function'."""
    return "," in spec or _split_weight(spec)[0] != spec.strip()


def build_verifier(spec: str) -> Verifier:
    """A verifier from a single spec (via the registry) or a weighted sum "math:1.0,format:0.1"."""
    from rlvr.rewards.registry import get_verifier

    if is_composite_spec(spec):
        return CompositeVerifier.from_spec(spec)
    return get_verifier(spec)


def _check_lengths(completions: Sequence[str], samples: Sequence[Mapping[str, Any]]) -> None:
    if len(completions) != len(samples):
        raise ValueError(f"score_batch: {len(completions)} completions but {len(samples)} samples")


def score_batch(
    verifier: Verifier, completions: Sequence[str], samples: Sequence[Mapping[str, Any]]
) -> list[float]:
    """[verifier(c, s) for each pair], in order, in this process; each reward checked
    (`checked_reward`: a wrong return value raises, as any exception of the verifier does)."""
    _check_lengths(completions, samples)
    return [checked_reward(verifier(c, s)) for c, s in zip(completions, samples)]


async def score_async(verifier: Verifier, completion: str, sample: Mapping[str, Any]) -> float:
    """Await a blocking verifier without blocking the event loop (runs in a thread)."""
    return checked_reward(await asyncio.to_thread(verifier, completion, sample))


async def score_batch_async(
    verifier: Verifier,
    completions: Sequence[str],
    samples: Sequence[Mapping[str, Any]],
    max_concurrency: int = 8,
) -> list[float]:
    """score_async over a batch with at most `max_concurrency` calls in flight; in order."""
    _check_lengths(completions, samples)
    gate = asyncio.Semaphore(max_concurrency)

    async def one(c: str, s: Mapping[str, Any]) -> float:
        async with gate:
            return await score_async(verifier, c, s)

    return list(await asyncio.gather(*(one(c, s) for c, s in zip(completions, samples))))
