"""Prime Intellect's `verifiers` environments (0.4, `verifiers.v1`) behind rlvr's protocol:
`environment.name=verifiers:ENV_ID` (docs/environments/verifiers.md).

ENV_ID names what verifiers' own loader takes as a taskset id (an installed environment
package exporting its `Taskset`, and optionally its `Env`, through `__all__`), a dotted module
'pkg.module' or a file 'path/file.py' that does the same, or a module with a
`load_environment(**settings)` returning a `vf.Env`. `environment.args` are the taskset's
config fields (`--env.taskset.*` in verifiers' CLI: `num_tasks=200`, `task={...}`), or the
keyword arguments of that `load_environment`.

What maps to what:

    the taskset's tasks          -> rows ("prompt": the task's prompt, as a string or chat
                                    messages with its system prompt; "answer" when the task
                                    data has one; "vf_task": the task data), data.task=environment
    Env.run(task, agents)        -> the episode, played turn by turn (verifiers_rollout.py):
                                    each interaction.turn(message) is an observation, a chat
                                    message of its role (a plain model gets the text on a new line)
    AgentConfig.max_turns, @stop -> when the episode stops asking the model; capped at
                                    environment.max_turns
    @vf.reward(weight), @metric  -> StepResult.reward = trace.reward (the weighted sum), each
                                    reward's score and each metric as env/<name>

The library is imported here only (the `verifiers` extra), and the environment is loaded once
per factory; every row gets a fresh episode on a task rebuilt from its row.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlvr.environments.adapters.verifiers_rollout import Episode, EventLoopThread
from rlvr.environments.base import StepResult
from rlvr.errors import ConfigError

INFINITE_ROWS = 1000  # the rows an infinite (procedural) taskset gives data.task=environment


def factory(ref: str, env: Any, settings: dict) -> VerifiersEnvironments:
    """The environments of the verifiers environment `ref` (module docstring), loaded and
    checked here: a one-line ConfigError naming environment.name when it cannot be."""
    loaded = load_verifiers_env(ref, settings)
    return VerifiersEnvironments(loaded, ref, env)


def _where(ref: str) -> str:
    return f"environment.name: verifiers:{ref}"


def _message(error: BaseException) -> str:
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= 400 else text[:397] + "..."


def load_verifiers_env(ref: str, settings: Mapping[str, Any]) -> Any:
    """The `vf.Env` that `ref` names, made with `settings` (module docstring)."""
    try:
        import verifiers.v1 as vf
    except ImportError as e:
        raise ConfigError(
            f"{_where(ref)} needs the verifiers library (>= 0.4): pip install 'rlvr[verifiers]' "
            f"({_message(e)})"
        ) from None
    taskset_id, module = _resolve(ref)
    loader = getattr(module, "load_environment", None) if module is not None else None
    try:
        if callable(loader) and loader is not vf.load_environment:
            loaded = loader(**settings)
            if not isinstance(loaded, vf.Env):
                raise TypeError(
                    f"load_environment() returned {type(loaded).__name__}, not a vf.Env"
                )
            return loaded
        config = vf.resolve_env_config({"taskset": {**settings, "id": taskset_id}})
        return vf.load_environment(config)
    except Exception as e:
        raise ConfigError(f"{_where(ref)} could not be loaded: {_message(e)}") from None


def _resolve(ref: str) -> tuple[str, Any]:
    """(the taskset id verifiers' loader imports, the module when rlvr imported it). A file or
    a dotted module is imported here and registered under an id verifiers' loader accepts (a
    lower-case name without dots); an installed id is left to verifiers (which also strips a
    hub id's 'owner/' and '@version')."""
    if not ref.strip():
        raise ConfigError(f"{_where(ref)}: no environment named")
    if ref.endswith(".py"):
        path = Path(ref)
        if not path.is_file():
            raise ConfigError(f"{_where(ref)}: file {ref!r} not found")
        alias = _alias(str(path.resolve()))
        if alias not in sys.modules:
            spec = importlib.util.spec_from_file_location(alias, path)
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            sys.modules[alias] = module  # pydantic resolves the file's annotations through it
            folder = str(path.resolve().parent)
            sys.path.insert(0, folder)  # the file may import a module beside it
            try:
                spec.loader.exec_module(module)  # type: ignore[union-attr]
            except Exception as e:
                del sys.modules[alias]
                raise ConfigError(
                    f"{_where(ref)}: {ref!r} failed to import: {_message(e)}"
                ) from None
            finally:
                if folder in sys.path:
                    sys.path.remove(folder)
        return alias, sys.modules[alias]
    if "." in ref and "/" not in ref and "@" not in ref:
        try:
            module = importlib.import_module(ref)
        except Exception as e:
            raise ConfigError(
                f"{_where(ref)}: cannot import module {ref!r}: {_message(e)}"
            ) from None
        alias = _alias(ref)
        sys.modules.setdefault(alias, module)
        return alias, module
    try:
        import verifiers.v1 as vf

        return ref, vf.import_taskset(ref)
    except Exception as e:
        raise ConfigError(f"{_where(ref)}: unknown environment: {_message(e)}") from None


def _alias(name: str) -> str:
    stem = re.sub(r"[^0-9a-z_]", "_", Path(name).stem.lower() if name.endswith(".py") else name)
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    return f"rlvr_verifiers_{stem}_{digest}"


class VerifiersEnvironments:
    """A function making one rlvr environment per row for the loaded verifiers env `loaded`,
    with `rows(split)` (the taskset's tasks as rows) and `stop` (none: a model turn ends at
    EOS, as a chat turn does)."""

    stop: tuple[str, ...] = ()

    def __init__(self, loaded: Any, ref: str, env: Any) -> None:
        self.env, self.ref = loaded, ref
        self.task_cls = type(loaded.taskset).task_type()
        self.role, spec = _one_role(loaded, ref)
        _check_supported(loaded, self.task_cls, ref)
        limit = min(spec.max_turns or env.max_turns, env.max_turns)
        self.spec = spec.model_copy(update={"max_turns": limit})
        self.start_timeout_s = env.timeout_s + 1.0
        self.runner = EventLoopThread()
        self._rows: list[dict] | None = None

    def __call__(self) -> VerifiersEnvironment:
        return VerifiersEnvironment(self)

    def rows(self, split: str) -> list[dict] | None:
        """The taskset's tasks as rows for "train" (the first INFINITE_ROWS of an infinite
        one); None for "eval": verifiers tasksets have no held-out split of their own, so
        rlvr holds out data.eval_fraction of them."""
        if split != "train":
            return None
        if self._rows is None:
            taskset = self.env.taskset
            tasks = taskset if taskset.bounded else taskset.take(INFINITE_ROWS)
            self._rows = [task_row(task, self.ref) for task in tasks]
        return self._rows

    def task_of(self, sample: Mapping[str, Any]) -> Any:
        """The task a row came from: its task data ("vf_task"), else the sample's own fields
        (a row of another data source: its prompt, answer and whatever the data type has)."""
        data_cls = self.task_cls.data_type()
        data = sample.get("vf_task")
        if not isinstance(data, Mapping):
            data = {k: sample[k] for k in data_cls.model_fields if k in sample and k != "idx"}
            data["prompt"] = sample.get("prompt_messages") or sample.get("prompt")
            if sample.get("system"):
                data.setdefault("system_prompt", sample["system"])
        return self.task_cls(data_cls.model_validate(dict(data)), self.env.config.taskset.task)


def _one_role(loaded: Any, ref: str) -> tuple[str, Any]:
    from verifiers.v1.configs.agent import agent_config_fields

    roles = agent_config_fields(loaded.config)
    if len(roles) != 1:
        raise ConfigError(
            f"{_where(ref)}: its env declares {len(roles)} agent roles ({', '.join(roles)}); "
            "rlvr trains environments with one (the policy's)"
        )
    return next(iter(roles.items()))


def _check_supported(loaded: Any, task_cls: Any, ref: str) -> None:
    """What rlvr's in-process episode cannot honour, refused before any weights load."""
    config = loaded.taskset.config
    problem = None
    if getattr(task_cls, "NEEDS_CONTAINER", False):
        problem = f"its task {task_cls.__name__} needs a container runtime"
    elif loaded.taskset.toolsets(config) or task_cls.toolsets(config.task):
        problem = "it gives the model tools (MCP toolsets)"
    elif any(hasattr(fn, "intercept") for k in task_cls.__mro__ for fn in vars(k).values()):
        problem = "its task rewrites turns (@vf.intercept), which would break token-exactness"
    if problem:
        raise ConfigError(
            f"{_where(ref)}: not supported: {problem} (docs/environments/verifiers.md)"
        )


def task_row(task: Any, ref: str) -> dict:
    """One task as an rlvr row: "prompt" (a string, or chat messages when there is a system
    prompt or more than one message), "answer" (the task data's, when it is a string or a
    number), "id", and "vf_task" (the task data, to rebuild the task from)."""
    data = task.data
    if data.prompt is None:
        raise ConfigError(
            f"{_where(ref)}: task {data.idx} has no prompt (the env's user opens the "
            "conversation); rlvr needs a prompt for the model's first turn"
        )
    messages = [_plain(m, ref) for m in _prompt_messages(data)]
    single = len(messages) == 1 and messages[0]["role"] == "user"
    row: dict[str, Any] = {
        "prompt": messages[0]["content"] if single else messages,
        "vf_task": data.model_dump(mode="json", exclude_defaults=True),
    }
    answer = getattr(data, "answer", None)
    if isinstance(answer, (str, int, float)) and not isinstance(answer, bool):
        row["answer"] = str(answer)
    if data.id:
        row["id"] = data.id
    return row


def _prompt_messages(data: Any) -> list:
    from verifiers.v1.types import SystemMessage, UserMessage

    system = [SystemMessage(content=data.system_prompt)] if data.system_prompt else []
    if isinstance(data.prompt, str):
        return [*system, UserMessage(content=data.prompt)]
    return [*system, *data.prompt]


def _plain(message: Any, ref: str) -> dict[str, str]:
    content = message.content
    if not isinstance(content, (str, type(None))):
        if any(getattr(part, "type", "text") != "text" for part in content):
            raise ConfigError(f"{_where(ref)}: a prompt holds images; rlvr takes text only")
        content = "\n".join(part.text for part in content)
    return {"role": message.role, "content": content or ""}


class VerifiersEnvironment:
    """One row's episode as rlvr's Environment: `reset` starts it and checks that its first
    model turn is on the row's prompt, `step` hands it the model's turn and returns what the
    env says next, or, when the episode ends, its score."""

    def __init__(self, source: VerifiersEnvironments) -> None:
        self.source = source
        self.episode: Episode | None = None

    def reset(self, sample: Mapping[str, Any]) -> None:
        source = self.source
        task = source.task_of(sample)
        self.episode = Episode(source.runner, source.env, source.role, source.spec, task)
        weakref.finalize(self, self.episode.cancel)  # a row cut off leaves no coroutine
        kind, value = self.episode.wait(timeout=source.start_timeout_s)
        if kind == "end":
            raise RuntimeError("the verifiers episode ended before the model's first turn")
        shown, conversation = value
        expected = _row_prompt(sample)
        got = [_plain(m, source.ref) for m in conversation]
        if shown or got != expected:
            raise RuntimeError(
                f"the verifiers env's first model turn is on {got!r}, not on the row's prompt "
                f"{expected!r} (the environment must see what the model sees: no "
                "data.prompt_template or data.fewshot with a verifiers environment)"
            )
        return None

    def step(self, text: str) -> StepResult:
        if self.episode is None:
            raise RuntimeError("step() before reset()")
        self.episode.answer(text)
        kind, value = self.episode.wait()
        if kind == "turn":
            role, observation = _observation(value[0])
            # 0 until the episode is scored: a row the rollout cuts off keeps 0
            return StepResult(observation=observation, role=role, reward=0.0)
        return StepResult(reward=float(value.reward), done=True, metrics=trace_metrics(value))


def _row_prompt(sample: Mapping[str, Any]) -> list[dict[str, str]]:
    """The messages rlvr encoded the row's prompt from (rlvr.data.messages)."""
    if sample.get("prompt_messages"):
        return [dict(m) for m in sample["prompt_messages"]]
    system = [{"role": "system", "content": sample["system"]}] if sample.get("system") else []
    return [*system, {"role": "user", "content": str(sample.get("prompt", ""))}]


def _observation(messages: list) -> tuple[str, str]:
    """(role, text) of the messages a turn shows the model: one message, or several of one
    role joined by blank lines (rlvr inserts one message per turn)."""
    from verifiers.v1.types import content_text

    roles = {m.role for m in messages}
    if len(roles) != 1:
        raise ValueError(
            f"the verifiers env showed the model messages of roles {sorted(roles)} in one "
            "turn; rlvr inserts one message (one role) per turn"
        )
    return roles.pop(), "\n\n".join(content_text(m.content) for m in messages)


def trace_metrics(trace: Any) -> dict[str, float]:
    """env/<name> figures of a scored trace: each reward's score (unweighted), then each
    metric; signals that did not run (None) are left out."""
    out = {name: r.score for name, r in trace.rewards.items() if r is not None}
    for name, value in trace.metrics.items():
        if value is not None:
            out.setdefault(name, value)
    return out
