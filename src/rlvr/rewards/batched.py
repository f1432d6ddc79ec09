"""TRL-shaped reward functions, used as they are: one call per batch, keyword lists in, a list out.

    def accuracy_reward(completions, ground_truth, **kwargs) -> list[float | None]
    def format_reward(completions, **kwargs) -> list[float | None]

A function is TRL-shaped when its signature names a `completions` parameter or takes nothing but
`**kwargs` (a per-sample verifier takes `(completion, sample)` positionally), or when its spec
says so (`trl:rewards.py:accuracy_reward`, rlvr.rewards.compose). It is called with keyword
lists, one item per completion, as TRL's GRPOTrainer calls it:

- `prompts`: each sample's prompt (its chat messages, `prompt_messages`, for a conversational
  row; rlvr.data.datasets);
- `completions`: the completion texts; for a conversational row `[{"role": "assistant",
  "content": text}]`;
- `completion_ids`: the completion's token ids, where the scorer has them (training in this
  process or in a verifier pool); absent otherwise (`rlvr verify`);
- every other key of the samples under its own name (the dataset's columns, `answer`, `id`,
  ...; a sample lacking a key others have gives None there). A key named like one of the three
  above is not passed: the trainer's lists win. TRL's `trainer_state` is not passed.

What it returns: a list (or tuple, or anything with `.tolist()`) of one value per completion.
None means "not scored by this function" (TRL's NaN): it adds nothing to the completion's reward
and is left out of `reward/<name>` (a completion every function skipped gets 0.0, TRL's nansum);
any other value must be a finite real number (`checked_reward`). A function that raises, or
returns a list of the wrong length or not a list, fails every completion of the call; a wrong
item fails its completion only; each failure record names the function (`mark_component`).

The columns a function names (parameters other than prompts, completions, completion_ids and
trainer_state, without a default) are its `needs`: rlvr.data checks every dataset row has them
before training starts.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlvr.rewards.base import checked_reward, return_error

TRAINER_ARGS = ("prompts", "completions", "completion_ids")
_NOT_COLUMNS = (*TRAINER_ARGS, "trainer_state")
# rlvr's own keys that are not columns of the row: passed as `prompts` or not at all
_NOT_PASSED = ("prompt", "prompt_messages")


def _parameters(fn: Any) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin or C callable without a signature
        return None


def is_trl_shaped(fn: Any) -> bool:
    """True when `fn`'s signature names `completions`, or takes only **kwargs."""
    params = _parameters(fn)
    if params is None:
        return False
    if any(p.name == "completions" and p.kind != p.VAR_KEYWORD for p in params):
        return True
    return bool(params) and all(p.kind == p.VAR_KEYWORD for p in params)


def function_name(fn: Any) -> str:
    """The name a function's metrics go under (`reward/<name>`): its __name__ (a callable
    object's class name)."""
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


class BatchedReward:
    """A TRL-shaped function `fn`, called once per batch (`rewards`) under its `name`."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or function_name(fn)
        params = _parameters(fn) or []
        self.needs = tuple(
            p.name
            for p in params
            if p.name not in _NOT_COLUMNS
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.default is p.empty
        )

    def __repr__(self) -> str:
        return f"BatchedReward({self.name})"

    def rewards(
        self,
        completions: Sequence[str],
        samples: Sequence[Mapping[str, Any]],
        completion_ids: Sequence[Sequence[int]] | None = None,
    ) -> list[Any]:
        """One call of the function over the batch: its list, one value per completion, each
        still unchecked (`item`). Raises what the function raises, and TypeError when it
        returns anything but a list of len(completions) values."""
        n = len(completions)
        kwargs = trl_arguments(completions, samples, completion_ids)
        value = self.fn(**kwargs)
        values = value.tolist() if hasattr(value, "tolist") else value
        if not isinstance(values, (list, tuple)) or len(values) != n:
            raise return_error(
                value, f"the verifier '{self.name}'", f"a list of {n} numbers or None"
            )
        return list(values)

    def item(self, value: Any) -> float | None:
        """One completion's value from `rewards`: None (skipped) or its checked reward."""
        if value is None:
            return None
        return checked_reward(value, f"the verifier '{self.name}'", field="for a completion")

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> float | None:
        """The function on a batch of one (a verifier pool's worker scores one at a time)."""
        return self.item(self.rewards([completion], [sample])[0])


def trl_arguments(
    completions: Sequence[str],
    samples: Sequence[Mapping[str, Any]],
    completion_ids: Sequence[Sequence[int]] | None = None,
) -> dict[str, list[Any]]:
    """The keyword lists a TRL reward function is called with (module docstring)."""
    if len(completions) != len(samples):
        raise ValueError(f"{len(completions)} completions for {len(samples)} samples")
    kwargs: dict[str, list[Any]] = {
        "prompts": [s.get("prompt_messages") or s.get("prompt") for s in samples],
        "completions": [
            [{"role": "assistant", "content": text}] if s.get("prompt_messages") else text
            for text, s in zip(completions, samples)
        ],
    }
    if completion_ids is not None:
        kwargs["completion_ids"] = [list(ids) for ids in completion_ids]
    keys: dict[str, None] = {}
    for s in samples:
        keys.update(dict.fromkeys(k for k in s if k not in _NOT_PASSED and k not in TRAINER_ARGS))
    for key in keys:
        kwargs[key] = [s.get(key) for s in samples]
    return kwargs
