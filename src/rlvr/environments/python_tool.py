"""The built-in `python` tool: the model's code runs in the code verifier's sandbox.

Each call is a fresh program in a fresh bubblewrap sandbox (rlvr.rewards.sandbox): no network,
no view of the host's files (so neither the run directory, nor the sample's hidden tests or
reference answer, which never leave this process), the standard library only, and per-call
limits on wall time, CPU, memory, processes, file size and output. Nothing carries over
between calls: a later call does not see an earlier call's variables (write the whole program
each time). The observation is what the program printed; on failure the tail of its stderr
(the traceback) follows; a call killed at its time limit says so; output over
`max_output_chars` is cut, with a marker saying how much was cut.

The sandbox is a security boundary: docs/guides/tools.md gives the threat model, and every
attack there has a test (tests/environments/test_python_tool.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlvr.environments.base import StepResult
from rlvr.environments.formats import ToolFormat, tool_format
from rlvr.errors import ConfigError
from rlvr.rewards.sandbox import CaseResult, Program, Sandbox, SandboxLimits

_STDERR_LINES = 8  # traceback lines shown after a failed call


@dataclass(frozen=True)
class PythonToolSettings:
    format: ToolFormat
    sandbox: Sandbox
    timeout_s: float
    max_output_chars: int


def python_tool_settings(
    format: str = "tags",
    timeout_s: float = 5.0,
    memory_mb: int = 256,
    max_output_chars: int = 1000,
    processes: int = 16,
) -> PythonToolSettings:
    """Checked settings of the python tool (environment.* keys)."""
    if timeout_s <= 0 or memory_mb < 32 or max_output_chars < 16 or processes < 1:
        raise ConfigError(
            "environment: the python tool needs timeout_s > 0, memory_mb >= 32, "
            f"max_output_chars >= 16 and processes >= 1 (got {timeout_s}, {memory_mb}, "
            f"{max_output_chars}, {processes})"
        )
    limits = SandboxLimits(
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        processes=processes,
        # a little more than is shown, so a cut is known; a flood stops at this many bytes
        output_bytes=4 * max_output_chars + 4096,
        tmpfs_mb=16,
    )
    return PythonToolSettings(tool_format(format), Sandbox(limits), timeout_s, max_output_chars)


class PythonTool:
    """One row's python tool (see the module docstring). `calls` counts the calls it ran."""

    def __init__(self, settings: PythonToolSettings) -> None:
        self.settings = settings
        self.calls = 0

    def reset(self, sample: Mapping[str, Any]) -> str | None:
        self.calls = 0
        return None

    def step(self, text: str) -> StepResult:
        code = self.settings.format.find_call(text)
        if code is None:  # the model answered: the row ends, the verifier scores it
            return StepResult(done=True)
        self.calls += 1
        t0 = time.perf_counter()
        result = self.settings.sandbox.run(Program(source=code, file_name="tool.py"), [""])[0]
        seconds = time.perf_counter() - t0
        output, error, timeout = describe(result, self.settings)
        return StepResult(
            observation=self.settings.format.render(output),
            role=self.settings.format.role,
            tool_call=True,
            tool_error=error,
            tool_timeout=timeout,
            tool_seconds=seconds,
        )


def describe(result: CaseResult, settings: PythonToolSettings) -> tuple[str, bool, bool]:
    """(observation text, failed, timed out) of one sandboxed run."""
    out = result.output.decode("utf-8", "replace")
    if result.status == "timeout":
        limit = f"{settings.timeout_s:g}"
        return f"TimeoutError: the program ran past its {limit} s limit\n", True, True
    if result.status == "output_limit":
        return truncate(out, settings.max_output_chars, flooded=True), True, False
    failed = result.status != "exited" or result.exit_code != 0
    if failed:
        tail = "\n".join(result.stderr.rstrip("\n").splitlines()[-_STDERR_LINES:])
        if result.status == "crashed":
            tail = tail or "the program's sandbox ended before it finished"
        elif result.signal is not None and not tail:
            tail = f"killed by signal {result.signal}"
        out = f"{out}{tail}\n" if tail else out
    return truncate(out, settings.max_output_chars), failed, False


def truncate(text: str, limit: int, flooded: bool = False) -> str:
    """`text` cut to `limit` characters with a marker; `flooded`: the program printed more
    than the sandbox reads, so the count is a lower bound."""
    if len(text) <= limit and not flooded:
        return text
    cut = max(0, len(text) - limit)
    more = "at least " if flooded else ""
    return f"{text[:limit]}\n...[output cut: {more}{cut} more characters]\n"
