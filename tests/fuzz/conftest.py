"""Shared pieces of the fuzz suite (tests/fuzz, docs/reliability.md "Fuzzing").

Every fuzz target runs a fixed number of generated cases (`derandomize=True`: the same cases on
every machine, so a failure in CI reproduces locally) and accepts exactly two outcomes: a valid
result, or a `rlvr.errors.UserError` whose message is one line. Any other exception is a bug.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("hypothesis")

from hypothesis.configuration import set_hypothesis_home_dir  # noqa: E402

# Hypothesis writes its example database and failure patches under .hypothesis/ in the working
# directory; keep them out of the checkout.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "rlvr-fuzz-hypothesis")


@pytest.fixture(scope="session")
def fuzz_dir() -> Iterator[Path]:
    """A directory for the files the fuzz cases write (session-scoped: hypothesis reruns a test
    body many times inside one function call, so per-test fixtures would be shared anyway)."""
    with tempfile.TemporaryDirectory(prefix="rlvr-fuzz-") as d:
        yield Path(d)
