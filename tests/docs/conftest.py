"""Lists the docs examples that were skipped (and why) at the end of the pytest run."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = [
        value
        for outcome in ("passed", "failed")
        for report in terminalreporter.stats.get(outcome, [])
        if report.when == "call"
        for name, value in report.user_properties
        if name == "docs_skipped"
    ]
    if skipped:
        terminalreporter.write_sep("=", f"docs examples skipped: {len(skipped)}")
        for line in skipped:
            terminalreporter.write_line(line)
