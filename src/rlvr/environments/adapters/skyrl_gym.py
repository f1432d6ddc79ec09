"""SkyRL-Gym environments behind rlvr's environment protocol: `environment.name=skyrl-gym:ENV_ID`
(docs/environments/skyrl-gym.md).

ENV_ID is an id in skyrl_gym's registry: a built-in (gsm8k, gsm8k_multi_turn, aime, search,
text2sql, lcb, searchcode) or one a user module registers with `skyrl_gym.register` when it is
imported, named in front of the id: `skyrl-gym:my_envs:multiply` or
`skyrl-gym:path/envs.py:multiply` (rlvr.environments.adapters.registering). `environment.args`
become the environment's `env_config` (an omegaconf DictConfig, as SkyRL-Train passes its
`environment.skyrl_gym.<env_class>` section).

Each rollout row gets its own environment, made as SkyRL-Train's generator makes one:

    env = skyrl_gym.make(ENV_ID, env_config=<environment.args>, extras=<the row's fields>)
    conversation, metadata = env.init(<the row's prompt as chat messages>)
    out = env.step(<the model's turn>)       # {observations, reward, done, metadata}

The row's extras are every field of the sample but its prompt (a dataset's `reward_spec`,
`extra_info`, `data_source`... columns as they are), with `reward_spec = {"method": "rule",
"ground_truth": sample["answer"]}` when the sample has an answer and no reward_spec, and
`max_turns` = environment.max_turns (SkyRL-Train's generator sets it too). The row's reward is
the sum of its steps' rewards (the undiscounted return GRPO scores a trajectory by); the
observation messages are the next observation, their role rendered by the model's chat template
(plain text without one, as SkyRL-Train's non-conversation mode appends their contents); the
numbers in each step's metadata, and `get_metrics()` when the episode is done, are the row's
`env/<name>` metrics. `postprocessed_action` is ignored: rlvr trains the tokens it sampled.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from typing import Any

from rlvr.environments.adapters.registering import import_registrations
from rlvr.environments.base import Environment, StepResult
from rlvr.errors import ConfigError

# What a probe environment is made with at factory time: the fields every addition/dataset
# row has. A constructor failing on them is a config error; one asserting a field a real row
# must bring (text2sql's db_id) is left to the rows.
_PROBE_SAMPLE = {"id": "probe", "prompt": "1+1=", "answer": "2"}
_ROW_FIELD_ERRORS = (AssertionError, KeyError)


def factory(ref: str, env: Any, settings: dict[str, Any]) -> Callable[[], Environment]:
    """A function making one SkyRLGymEnvironment per row for `skyrl-gym:REF` (REF: 'ENV_ID',
    'MODULE:ENV_ID' or 'path/file.py:ENV_ID'); `settings` (environment.args) are its
    env_config. An unknown id, an entry point that cannot load and a constructor that raises
    on a plain row are one-line ConfigErrors here, before any weights load."""
    skyrl_gym = _library()
    env_id = import_registrations(ref, "skyrl-gym")
    where = f"environment.name: skyrl-gym:{ref}"
    if env_id not in skyrl_gym.registry:
        known = ", ".join(sorted(skyrl_gym.registry))
        raise ConfigError(
            f"{where}: skyrl_gym has no environment {env_id!r} (registered: {known}); a "
            f"module that registers it is named as skyrl-gym:MODULE:{env_id}"
        )
    max_turns = int(env.max_turns)

    def make() -> SkyRLGymEnvironment:
        return SkyRLGymEnvironment(env_id, settings, max_turns)

    try:
        make().make_env(_PROBE_SAMPLE)
    except _ROW_FIELD_ERRORS:
        pass  # it needs fields of a real row; a row without them fails alone
    except Exception as e:
        message = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        raise ConfigError(
            f"{where} could not be made with environment.args={_args(settings)}: {message}"
        ) from e
    return make


class SkyRLGymEnvironment:
    """One row's skyrl-gym environment behind rlvr's protocol (module docstring)."""

    def __init__(self, env_id: str, settings: Mapping[str, Any], max_turns: int) -> None:
        self.env_id, self.settings, self.max_turns = env_id, dict(settings), max_turns
        self.env: Any = None
        self.total = 0.0
        self.pending: dict[str, float] = {}  # init's metadata, reported with the first step

    def make_env(self, sample: Mapping[str, Any]) -> Any:
        from omegaconf import OmegaConf  # a dependency of skyrl-gym

        return _library().make(
            self.env_id,
            env_config=OmegaConf.create(copy.deepcopy(self.settings)),
            extras=row_extras(sample, self.max_turns),
        )

    def reset(self, sample: Mapping[str, Any]) -> str | None:
        self.env = self.make_env(sample)
        self.total = 0.0
        prompt = prompt_messages(sample)
        conversation, metadata = self.env.init(copy.deepcopy(prompt))
        self.pending = numbers(metadata)
        added = appended_messages(prompt, conversation, self.env_id)
        return "".join(str(m.get("content") or "") for m in added) or None

    def step(self, text: str) -> StepResult:
        out = self.env.step(text)
        self.total += float(out["reward"] or 0.0)
        metrics, self.pending = {**self.pending, **numbers(out.get("metadata"))}, {}
        if out["done"]:
            metrics.update(numbers(self.env.get_metrics()))
            self.env.close()
            return StepResult(reward=self.total, done=True, metrics=metrics)
        observation, role = observation_text(out.get("observations") or [])
        # (no messages and not done: the model goes on at once, as in SkyRL-Train)
        return StepResult(observation=observation, role=role, reward=self.total, metrics=metrics)


def row_extras(sample: Mapping[str, Any], max_turns: int) -> dict[str, Any]:
    """The `extras` a skyrl-gym environment is made with for the row of `sample` (a copy: the
    rows of a group share one sample)."""
    extras = {
        k: copy.deepcopy(v) for k, v in sample.items() if k not in ("prompt", "prompt_messages")
    }
    if "reward_spec" not in extras and sample.get("answer") is not None:
        extras["reward_spec"] = {"method": "rule", "ground_truth": str(sample["answer"])}
    extras["max_turns"] = max_turns
    return extras


def prompt_messages(sample: Mapping[str, Any]) -> list[dict[str, str]]:
    """The row's prompt as the chat messages `init` takes: a conversational row's own messages,
    else its system message (when it has one) and the prompt as the user's message."""
    messages = sample.get("prompt_messages")
    if isinstance(messages, list) and messages:
        return [dict(m) for m in messages]
    out = [{"role": "system", "content": str(sample["system"])}] if sample.get("system") else []
    return [*out, {"role": "user", "content": str(sample.get("prompt", ""))}]


def appended_messages(prompt: list[dict], conversation: Any, env_id: str) -> list[Mapping]:
    """The messages `init` added after the prompt's. rlvr has encoded the prompt already, so
    an init that rewrites it (adds a system prompt before it) cannot be followed: ValueError,
    which fails the row."""
    if not isinstance(conversation, list) or conversation[: len(prompt)] != prompt:
        raise ValueError(
            f"skyrl-gym {env_id!r}: init() changed the prompt's messages; rlvr shows the row's "
            f"prompt as it is and takes only messages appended after it "
            f"(docs/environments/skyrl-gym.md)"
        )
    return [m for m in conversation[len(prompt) :] if isinstance(m, Mapping)]


def observation_text(messages: list[Any]) -> tuple[str, str | None]:
    """(text, role) of a step's observation messages: their contents in order, as one message
    of the first one's role ('' and None for no message)."""
    messages = [m for m in messages if isinstance(m, Mapping)]
    if not messages:
        return "", None
    text = "".join(str(m.get("content") or "") for m in messages)
    return text, str(messages[0].get("role") or "user")


def numbers(metadata: Any) -> dict[str, float]:
    """The finite real numbers (bools as 0/1) of a metadata mapping; the rest (strings, lists,
    None) are for logs, not metrics."""
    if not isinstance(metadata, Mapping):
        return {}
    out = {}
    for name, value in metadata.items():
        if isinstance(name, str) and name and isinstance(value, (bool, int, float)):
            if math.isfinite(float(value)):
                out[name] = float(value)
    return out


def _args(settings: Mapping[str, Any]) -> str:
    return "[" + ",".join(f"{k}={v}" for k, v in settings.items()) + "]"


def _library() -> Any:
    try:
        import skyrl_gym
    except ImportError:
        raise ConfigError(
            "environment.name: skyrl-gym environments need the skyrl-gym package; "
            "pip install 'rlvr[skyrl-gym]'"
        ) from None
    return skyrl_gym
