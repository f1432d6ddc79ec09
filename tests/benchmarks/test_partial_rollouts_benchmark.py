"""benchmarks/partial_rollouts.py runs and reports what it says, on one pair of versions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "partial_rollouts.py"


@pytest.mark.slow
def test_keep_and_recompute_are_compared_on_the_tokens_after_a_switch(tmp_path):
    out = tmp_path / "partial.json"
    args = ["--pairs", "1", "--switch-at", "4", "--json", str(out)]
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report == json.loads(proc.stdout.splitlines()[-1])
    (result,) = report["results"]
    assert result["pair"] == [1, 2] and result["switch_at_forward"] == 4
    assert result["rows_switched"] > 0 and result["tokens_after_switch"] >= result["rows_switched"]
    assert result["kl_keep_vs_recompute"] >= 0 and result["kl_one_update"] >= 0
    assert 0 < result["recompute_s"] < result["generate_s"] * 10
