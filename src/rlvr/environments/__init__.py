"""Environments of multi-turn rollouts: the protocol, the built-in python tool, the tool-call
formats (docs/guides/tools.md). Plain Python, no torch."""

from rlvr.environments.base import Environment, StepResult
from rlvr.environments.formats import FORMATS, PYTHON_TOOL_SCHEMA, ToolFormat, tool_format
from rlvr.environments.registry import environment_factory, environment_from_config

__all__ = [
    "FORMATS",
    "PYTHON_TOOL_SCHEMA",
    "Environment",
    "StepResult",
    "ToolFormat",
    "environment_factory",
    "environment_from_config",
    "tool_format",
]
