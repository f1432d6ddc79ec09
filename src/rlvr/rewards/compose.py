"""Weighted sums of verifiers, and batch/async adapters around the per-sample signature.

    reward = sum_i weight_i * verifier_i(completion, sample)      (over the components that scored)

A spec "math:1.0,format:0.1" builds one: comma-separated items [trl:]NAME[:WEIGHT], where NAME is
anything `get_verifier` resolves (a built-in name, 'module:function', 'file.py:function') and
WEIGHT (default 1.0) is recognised because it parses as a number, which a Python function
name cannot. `trl:` declares a TRL-shaped batched function (rlvr.rewards.batched), which is also
detected from its signature without it: `trl:rewards.py:accuracy_reward:1.0,
trl:rewards.py:format_reward:0.2`. From Python, `reward.verifier` may also be a function
(per-sample or TRL-shaped) or a list of functions, names and (function, weight) pairs
(`build_verifier`). `score_components` returns each verifier's unweighted reward under its name,
so the trainer can log reward/math and reward/format separately (their mean and std), not just
the sum. A component's name is its spec item ('math', 'my.py:score'), except for a TRL-shaped
function and a function given from Python, named by its __name__ ('accuracy_reward'), as TRL
logs them. A TRL function that returns None for a completion is left out of that completion's
sum and of its `reward/<name>`. A component that raises or returns anything but a finite number
fails the whole completion: the exception leaves marked with the component's name
(`rlvr.rewards.base.mark_component`), so the failure's record names it.

A spec item may also name a component that this package cannot build, because building it
loads a model: `rm:PATH`, a learned reward model (rlvr.reward_model). The caller that can
passes a resolver, `build_verifier(spec, resolve=resolve)`: `resolve(item)` returns the
component of an item it knows (named by the item, weighted like any other) and None for the
rest, which resolve as usual; without one an `rm:` item is a ConfigError (the registry's).
The weight is still the last `:NUMBER` of an item (`rm:/runs/rm/final:1.0`), so a path whose
last `:`-separated part is a number needs an explicit weight after it, and no path may hold a
comma.

The batch adapters never broadcast: completions and samples of different lengths are a bug
upstream, and a ValueError naming both lengths is raised.
"""

from __future__ import annotations

import asyncio
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from rlvr.errors import ConfigError
from rlvr.rewards.base import (
    Score,
    Verifier,
    checked_reward,
    describe_value,
    mark_component,
    score_with_detail,
    stops_the_run,
)
from rlvr.rewards.batched import BatchedReward, function_name, is_trl_shaped
from rlvr.rewards.judge.spec import is_judge, judge_name, split_judge_weight
from rlvr.rewards.spec import TRL_PREFIX, worker_spec

T = TypeVar("T")
Component = Any  # a Verifier, or a BatchedReward (rlvr.rewards.batched)
# A spec item -> its component, or None for an item that is not of the resolver's kind.
Resolver = Callable[[str], Any]


class CompositeVerifier:
    """Weighted sum of named verifiers: `CompositeVerifier({"math": (math_reward, 1.0), ...})`.

    A component may be a `BatchedReward` (a TRL-shaped function): `batched_rewards` calls each
    such component once over a batch, and `score_components` takes its value for one completion
    from there (without one, it calls the function on that completion alone)."""

    def __init__(self, components: Mapping[str, tuple[Component, float]]) -> None:
        if not components:
            raise ConfigError("reward.verifier: a composite verifier needs at least one component")
        self.components = {name: (v, float(w)) for name, (v, w) in components.items()}

    @classmethod
    def from_spec(cls, spec: str, resolve: Resolver | None = None) -> CompositeVerifier:
        """The weighted sum a spec "a:1.0,b:0.1" names (`resolve`: as for `build_verifier`)."""
        items = []
        for item in (part.strip() for part in spec.split(",")):
            target, weight = _split_weight(item)
            if not target:
                raise ConfigError(f"reward.verifier: empty item in '{spec}'")
            items.append((target, weight))
        return _from_items(items, spec, resolve)

    @property
    def needs(self) -> dict[str, str]:
        """{sample key: the component that needs it}, over the components that say (`needs`)."""
        out: dict[str, str] = {}
        for name, (v, _) in self.components.items():
            for key in verifier_needs(v, name):
                out.setdefault(key, name)
        return out

    def batched(self) -> dict[str, BatchedReward]:
        return {n: v for n, (v, _) in self.components.items() if isinstance(v, BatchedReward)}

    def score_components(
        self,
        completion: str,
        sample: Mapping[str, Any],
        batch_values: Mapping[str, Any] | None = None,
    ) -> dict[str, float]:
        """Each component's unweighted reward, by name, each checked (`checked_reward`); a TRL
        function's None leaves its name out. `batch_values`: this completion's raw value of
        each batched component (`batched_rewards`). The first component that fails raises,
        marked with its name."""
        parts = {}
        for name, (v, _) in self.components.items():
            value = _component(name, _checked_call, v, completion, sample, name, batch_values)
            if value is not None:
                parts[name] = value
        return parts

    def weighted_sum(self, parts: Mapping[str, float]) -> float:
        """sum_i weight_i * parts[name_i], in component order, over the components in `parts`
        (a skipped TRL one is not): the reward of `__call__` and of the trainer's Scorer (one
        expression, so both give the same float)."""
        return sum(w * parts[name] for name, (_, w) in self.components.items() if name in parts)

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> float:
        return self.weighted_sum(self.score_components(completion, sample))

    def score(self, completion: str, sample: Mapping[str, Any]) -> Score:
        return self.score_with_components(completion, sample)[0]

    def score_with_components(
        self,
        completion: str,
        sample: Mapping[str, Any],
        batch_values: Mapping[str, Any] | None = None,
    ) -> tuple[Score, dict[str, float]]:
        """`score` and each component's unweighted reward by name, from one call of each
        (`batch_values`: as for `score_components`).

        The total is accumulated left to right (what a VerifierPool worker has always returned);
        on Python >= 3.12, whose sum() of floats is compensated, it can differ from
        `weighted_sum` in the last bit."""
        total, details, parts = 0.0, [], {}
        for name, (v, w) in self.components.items():
            if isinstance(v, BatchedReward):
                value = _component(name, _checked_call, v, completion, sample, name, batch_values)
                if value is None:
                    details.append(f"{name}=skipped")
                    continue
                s = Score(value)
            else:
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


def batched_rewards(
    composite: CompositeVerifier,
    completions: Sequence[str],
    samples: Sequence[Mapping[str, Any]],
    completion_ids: Sequence[Sequence[int]] | None = None,
) -> dict[str, list[Any]]:
    """Each batched component's raw values over the batch, from one call each, in component
    order; the first that fails raises, marked with its name (it fails the whole batch)."""
    return {
        name: _component(name, v.rewards, completions, samples, completion_ids)
        for name, v in composite.batched().items()
    }


def _who(name: str) -> str:
    return f"the verifier '{name}'"


def _checked_call(
    v: Component,
    completion: str,
    sample: Mapping[str, Any],
    name: str,
    batch_values: Mapping[str, Any] | None = None,
) -> float | None:
    if isinstance(v, BatchedReward):
        if batch_values is not None and name in batch_values:
            return v.item(batch_values[name])
        return v(completion, sample)
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
    if is_judge(item):  # judge:http://127.0.0.1:8000: a port is no weight (rewards/judge/spec)
        return split_judge_weight(item)
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


def as_component(fn: Any) -> Component:
    """A function as a component: a `BatchedReward` when it is TRL-shaped, else itself."""
    if isinstance(fn, (BatchedReward, CompositeVerifier)) or not is_trl_shaped(fn):
        return fn
    return BatchedReward(fn)


def _resolve(target: Any, where: str, resolve: Resolver | None = None) -> tuple[str, Component]:
    """(component name, component) of one item: a spec string (offered to `resolve` first) or a
    callable."""
    from rlvr.rewards.registry import get_verifier

    if isinstance(target, str) and resolve is not None:
        found = resolve(target)
        if found is not None:
            return target, as_component(found)
    if isinstance(target, str):
        if target.startswith(TRL_PREFIX) and ":" in target[len(TRL_PREFIX) :]:
            fn = get_verifier(target[len(TRL_PREFIX) :])
            return function_name(fn), BatchedReward(fn)
        v = as_component(get_verifier(target))
        if is_judge(target):  # named without its settings: reward/judge:http://h:8000/v1_mean
            return judge_name(target), v
        return (v.name if isinstance(v, BatchedReward) else target), v
    if callable(target):
        return function_name(target), as_component(target)
    raise ConfigError(
        f"{where}: expected a function, a verifier name or a (function, weight) pair, "
        f"got {describe_value(target)}"
    )


def _from_items(
    items: Sequence[tuple[Any, Any]], spec: str, resolve: Resolver | None = None
) -> CompositeVerifier:
    components: dict[str, tuple[Component, float]] = {}
    for i, (target, weight) in enumerate(items):
        where = f"reward.verifier[{i}]" if spec == "" else "reward.verifier"
        name, v = _resolve(target, where, resolve)
        shown = f" in '{spec}'" if spec else ""
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
            raise ConfigError(f"{where}: weight of '{name}' must be a number, got {weight!r}")
        if not math.isfinite(weight):
            raise ConfigError(f"reward.verifier: weight of '{name}' must be finite{shown}")
        if name in components:
            raise ConfigError(f"reward.verifier: '{name}' appears twice{shown}")
        components[name] = (v, float(weight))
    return CompositeVerifier(components)


def build_verifier(spec: Any, *, workers: int = 0, resolve: Resolver | None = None) -> Verifier:
    """The verifier `reward.verifier` names: a single spec (via the registry), a weighted sum
    "math:1.0,format:0.1", or from Python a function or a list of functions, specs and
    (function, weight) pairs. A TRL-shaped function, alone, is a one-component sum (so its
    reward/<name> is logged). With `workers` > 0 the spec must also reach worker processes
    (`rlvr.rewards.spec.worker_spec`): a ConfigError now otherwise.

    `resolve(item)`: the component of a spec item this package cannot build (`rm:PATH`, a
    learned reward model), None for any other item (module docstring). Such a component lives
    in the caller's process, so it cannot go with `workers` > 0: a ConfigError."""
    if workers > 0:
        worker_spec(spec)
        resolve = _in_this_process(resolve)
    if isinstance(spec, str):
        if is_composite_spec(spec):
            return CompositeVerifier.from_spec(spec, resolve)
        name, v = _resolve(spec, "reward.verifier", resolve)
    elif isinstance(spec, (list, tuple)):
        items = [
            tuple(item)
            if isinstance(item, (list, tuple)) and len(item) == 2
            else _split_weight(item)  # "format:0.1": a spec item, its weight after a colon
            if isinstance(item, str)
            else (item, 1.0)
            for item in spec
        ]
        return _from_items(items, "", resolve)
    else:
        name, v = _resolve(spec, "reward.verifier", resolve)
    if isinstance(v, BatchedReward):
        return CompositeVerifier({name: (v, 1.0)})
    return v


def _in_this_process(resolve: Resolver | None) -> Resolver | None:
    """`resolve`, refusing the items it builds: they cannot reach worker processes."""
    if resolve is None:
        return None

    def refuse(target: str) -> Any:
        if resolve(target) is not None:
            raise ConfigError(
                f"reward.workers: '{target}' is scored in the trainer process, and worker "
                "processes cannot build it; set reward.workers=0"
            )
        return None

    return refuse


def verifier_needs(verifier: Any, name: str | None = None) -> dict[str, str]:
    """{sample key: the verifier that needs it} for a verifier that says what it reads (a
    composite's components, a TRL function's named columns, `needs` on a verifier object, the
    built-ins that read the reference answer); {} for one that does not say."""
    if isinstance(verifier, CompositeVerifier):
        return verifier.needs
    from rlvr.rewards.registry import builtin_needs

    keys = getattr(verifier, "needs", None)
    if not isinstance(keys, (tuple, list)):
        return {k: name or who for k, who in builtin_needs(verifier).items()}
    who = name or getattr(verifier, "name", None) or function_name(verifier)
    return {str(k): who for k in keys}


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
