"""The built-in `python` tool: the model's code runs in the code verifier's sandbox.

Each call is a fresh program in a fresh bubblewrap sandbox (rlvr.isolation.sandbox): no network,
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

import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlvr.environments.base import StepResult
from rlvr.environments.formats import ToolFormat, tool_format
from rlvr.errors import ConfigError
from rlvr.isolation.sandbox import (
    RUNNER_FILE,
    RUNNER_PATH,
    CaseResult,
    Program,
    Sandbox,
    SandboxLimits,
)

_STDERR_LINES = 8  # traceback lines shown after a failed call
RUNNER_MARK = os.path.basename(RUNNER_PATH)  # the runner's file name, sandboxed or not
assert os.path.basename(RUNNER_FILE) == RUNNER_MARK


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
    """(observation text, failed, timed out) of one sandboxed run. A failed call shows its
    stdout (cut first, so the error always fits) and then the error: the traceback's last
    lines (the sandbox runner's own frames left out), its exit status, or its limit."""
    out = result.output.decode("utf-8", "replace")
    limit = settings.max_output_chars
    cpu_killed = result.signal == signal.SIGXCPU  # RLIMIT_CPU (ceil of timeout_s) came first
    if result.status == "timeout" or cpu_killed:
        error = f"TimeoutError: the program ran past its {settings.timeout_s:g} s limit\n"
        return _with_error(out, error, limit), True, True
    if result.status == "output_limit":
        return truncate(out, limit, flooded=True), True, False
    if result.status == "exited" and result.exit_code == 0:
        return truncate(out, limit), False, False
    # Every other ending is a failed call, whatever the sandbox reports: any signal number
    # (realtime ones have no name: shown by number), any exit code or none, any status.
    lines = [ln for ln in _without_runner_frames(result.stderr).splitlines() if ln.strip()]
    error = "\n".join(lines[-_STDERR_LINES:])
    if result.status == "crashed":
        error = error or "the program's sandbox ended before it finished"
    elif result.signal is not None:
        error = error or f"killed by signal {result.signal}"
    elif not error or result.exit_code not in (0, 1):
        status = "no exit status" if result.exit_code is None else f"exit status {result.exit_code}"
        error = (error + "\n" if error else "") + f"({status})"
    return _with_error(out, error + "\n", limit), True, False


def _with_error(out: str, error: str, limit: int) -> str:
    """stdout cut to leave room for the error, then the error (itself cut from the front)."""
    if len(error) > limit:
        error = "..." + error[-(limit - 3) :]
    return truncate(out, max(0, limit - len(error))) + error if out else error


def _without_runner_frames(stderr: str) -> str:
    """A traceback without the frames of the sandbox runner (every traceback starts in it)."""
    kept, skip_source = [], False
    for line in stderr.splitlines():
        if skip_source:
            skip_source = False
            if line.startswith("    "):
                continue
        if line.lstrip().startswith('File "') and RUNNER_MARK in line:
            skip_source = True
            continue
        kept.append(line)
    return "\n".join(kept)


def truncate(text: str, limit: int, flooded: bool = False) -> str:
    """`text` cut to `limit` characters with a marker; `flooded`: the program printed more
    than the sandbox reads, so the count is a lower bound."""
    if len(text) <= limit and not flooded:
        return text
    cut = max(0, len(text) - limit)
    more = "at least " if flooded else ""
    return f"{text[:limit]}\n...[output cut: {more}{cut} more characters]\n"
