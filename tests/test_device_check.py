"""The GPU check script (scripts/device_check.sh) end to end as a CPU dry run: the quick stages
only (the environment probe and a two-step default `rlvr train`), the JSON line at the end."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "device_check.sh"
STAGES = [
    "install",
    "environment",
    "cuda_tests",
    "train_default",
    "smollm2_fast",
    "smollm2_vllm",
    "rollout_speed",
    "vs_trl",
]


@pytest.mark.slow
def test_cpu_dry_run_prints_one_json_line_with_every_stage(tmp_path):
    out = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    env.update(PYTHON=sys.executable, DEVICE_CHECK_WORK=str(tmp_path / "work"))
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--cpu", "--stages", "train_default", "--out", str(out)],
        cwd=tmp_path,  # the script finds the repository itself
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = proc.stdout.strip().splitlines()[-1]
    result = json.loads(line)
    assert json.loads(out.read_text()) == result
    assert result["mode"] == "cpu-dry-run" and result["ok"] is True
    assert list(result["stages"]) == STAGES
    for name, stage in result["stages"].items():
        assert stage["status"] in {"ok", "failed", "timeout", "skipped"}, name
        assert isinstance(stage["seconds"], float), name
    stages = result["stages"]
    assert stages["install"]["status"] == "skipped"
    assert stages["environment"]["status"] == "ok"
    assert stages["environment"]["torch"]
    for name in ("cuda_tests", "smollm2_fast", "smollm2_vllm", "rollout_speed", "vs_trl"):
        assert stages[name] == {"status": "skipped", "reason": "not selected", "seconds": 0.0}
    train = stages["train_default"]
    assert train["status"] == "ok" and train["steps"] == 2
    assert train["median_step_s"] > 0 and train["train_wall_seconds"] > 0
    assert train["eval_before"]["n"] == 8 and 0.0 <= train["eval_after"]["accuracy"] <= 1.0
    assert (tmp_path / "work" / "train_default" / "summary.json").is_file()
