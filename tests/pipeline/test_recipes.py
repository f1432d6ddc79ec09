"""The built-in recipes on the embedded default, end to end, as the docs report them.

r1 takes about 35 s and distill about 15 s on an idle 2-core CPU."""

import json

import pytest

from rlvr.cli import main


def _rows(run):
    result = json.loads((run / "pipeline.json").read_text())
    return {r["stage"]: r for r in result["rows"]}


@pytest.mark.slow
def test_r1_beats_the_base_and_the_cold_start_and_writes_the_stage_table(tmp_path, capsys):
    run = tmp_path / "r1"
    assert main(["pipeline", "r1", "--quiet", "--output-dir", str(run)]) == 0
    rows = _rows(run)
    assert list(rows) == ["base", "cold_start", "rl1", "sft", "rl2"]
    final = rows["rl2"]["accuracy"]
    assert final > rows["base"]["accuracy"] + 0.5
    assert final > rows["cold_start"]["accuracy"]
    table = (run / "stages.md").read_text()
    assert table.strip() in capsys.readouterr().out
    kept = (run / "stages/rejection/kept.jsonl").read_text().splitlines()
    assert len(kept) > 100  # the corpus the second SFT stage trained on


@pytest.mark.slow
def test_distill_makes_a_smaller_student_beat_its_starting_point(tmp_path):
    run = tmp_path / "distill"
    assert main(["distill", "--quiet", "--output-dir", str(run)]) == 0
    rows = _rows(run)
    assert rows["student"]["num_parameters"] * 3 < rows["teacher"]["num_parameters"]
    assert rows["student_sft"]["num_parameters"] == rows["student"]["num_parameters"]
    assert rows["student_sft"]["accuracy"] > rows["student"]["accuracy"] + 0.5
