"""A short version of the default run: the embedded base model learns to reason.

The full default (`rlvr train`, 60 steps, 200 held-out problems) is measured in
docs/embedded-model.md; this test runs a shorter schedule on fewer problems so the suite stays
fast, and still asserts the behaviour: accuracy, reasoning and length all rise.
"""

import json

import pytest

from rlvr.cli import main


@pytest.mark.slow
def test_default_run_teaches_the_embedded_model_to_reason(tmp_path):
    run = tmp_path / "run"
    rc = main(
        [
            "train",
            "--quiet",
            "--output-dir",
            str(run),
            "training.steps=25",
            "eval.size=100",
            "eval.every=0",
            "eval.t1_samples=2",
        ]
    )
    assert rc == 0
    summary = json.loads((run / "summary.json").read_text())
    before, after = summary["eval_before"], summary["eval_after"]
    assert before["accuracy"] <= 0.4
    assert before["reasoning_fraction"] <= 0.2
    assert after["accuracy"] >= before["accuracy"] + 0.2
    assert after["reasoning_fraction"] >= before["reasoning_fraction"] + 0.2
    assert after["mean_length"] > before["mean_length"]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 25
    assert (run / "final" / "config.json").is_file()
