"""benchmarks/verifiers_env.py trains the verifiers example and reports summary.json's figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "verifiers_env.py"


@pytest.mark.slow
def test_the_report_reads_the_held_out_figures_before_and_after(tmp_path):
    pytest.importorskip("verifiers.v1")
    out = tmp_path / "report.json"
    args = ["--steps", "1", "--eval-size", "4", "--json", str(out), "eval.t1_samples=1"]
    args += ["rollout.prompts_per_step=2", "rollout.group_size=4"]
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report == json.loads(proc.stdout.splitlines()[-1])
    assert report["steps"] == 1 and report["wall_s"] > 0
    for when in ("before", "after"):
        assert 0.0 <= report[when]["accuracy"] <= 1.0
        assert report[when]["turns_mean_greedy"] >= 1.0
    gain = 100 * (report["after"]["accuracy"] - report["before"]["accuracy"])
    assert report["gain_points"] == pytest.approx(gain, abs=0.06)
