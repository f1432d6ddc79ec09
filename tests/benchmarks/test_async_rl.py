"""benchmarks/async_rl.py runs and reports what it says, on a tiny run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "async_rl.py"


@pytest.mark.slow
def test_sync_and_k_step_runs_are_reported_side_by_side(tmp_path):
    out = tmp_path / "async.json"
    tiny = ["rollout.prompts_per_step=2", "rollout.group_size=2", "eval.size=4"]
    args = ["--staleness", "0", "2", "--units", "batch", "group", "--steps", "3"]
    args += ["--json", str(out)]
    args += [x for o in tiny for x in ("--set", o)]
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report == json.loads(proc.stdout.splitlines()[-1])
    sync, stale = report["runs"]["K=0"], report["runs"]["K=2"]
    assert sync["staleness_max"] == 0 and sync["mismatch_kl_max"] == 0.0
    assert stale["staleness_max"] == 2  # steps 1, 2, 3: staleness 0, 1, 2
    assert 0 < sync["learner_idle_fraction"] < 1  # on-policy the learner waits for every rollout
    group = report["runs"]["K=2,group"]  # free-running in groups: staleness depends on timing
    assert set(report["runs"]) == {"K=0", "K=2", "K=2,group"} and group["staleness_max"] <= 2
    for run in (sync, stale, group):
        assert 0 <= run["generator_idle_fraction"] <= 1
        assert run["train_s"] <= run["wall_s"] and run["tokens_per_s_trained"] > 0
        assert set(run["eval_after"]) == {"accuracy", "pass1_t1", "reasoning_fraction"}
    assert report["speedup_vs_sync"]["K=0"] == 1.0
