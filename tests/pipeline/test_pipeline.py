"""Pipelines: parsing and checking, stage outputs feeding later stages, resume, the table."""

import json
from pathlib import Path

import pytest
import yaml

from rlvr.cli import main
from rlvr.errors import ConfigError
from rlvr.pipeline.spec import parse_pipeline, recipe_names, resolve_pipeline_file
from rlvr.training.grpo import GRPOTrainer

VERIFIER = """
def digit_fraction(completion, sample):
    return sum(c.isdigit() for c in completion[:6]) / 6
"""

GRPO_SMALL = {
    "rollout.prompts_per_step": 2,
    "rollout.group_size": 4,
    "rollout.max_new_tokens": 4,
    "optimizer.warmup_steps": 0,
    "logging.samples_every": 0,
}


def _pipeline(tmp_path: Path, model_dir: Path, rl2_steps: int = 4) -> Path:
    verifier = tmp_path / "digits.py"
    verifier.write_text(VERIFIER)
    tree = {
        "name": "tiny",
        "models": {"base": str(model_dir)},
        "task": {"task": "addition"},
        "reward": {"verifier": f"{verifier}:digit_fraction"},
        "eval": {"size": 4, "t1_samples": 1, "max_new_tokens": 4},
        "defaults": {"grpo": GRPO_SMALL},
        "stages": [
            {"name": "rl1", "kind": "grpo", "config": {"training.steps": 2}},
            {
                "name": "rl2",
                "kind": "grpo",
                "model": "rl1",
                "config": {"training": {"steps": rl2_steps}, "checkpoint.every": 2},
            },
        ],
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


class _Crash(Exception):
    pass


def test_interrupted_pipeline_skips_finished_stages_and_resumes_the_cut_one(
    tmp_path, tiny_model_dir, monkeypatch, capsys
):
    spec = _pipeline(tmp_path, tiny_model_dir)
    run = tmp_path / "run"
    real_update = GRPOTrainer.update
    calls = {"rl2": 0, "crashed": False}

    def crash_in_rl2(self, scored):
        if self.run_dir.name == "rl2":
            calls["rl2"] += 1
            if self.step == 3 and not calls["crashed"]:
                calls["crashed"] = True
                raise _Crash
        return real_update(self, scored)

    monkeypatch.setattr(GRPOTrainer, "update", crash_in_rl2)
    with pytest.raises(_Crash):
        main(["pipeline", str(spec), "--output-dir", str(run), "--debug"])
    assert (run / "stages/rl1/stage.json").is_file()
    assert not (run / "stages/rl2/stage.json").exists()
    assert (run / "stages/rl2/checkpoints/step-2/trainer_state.pt").is_file()
    rl1_mtime = (run / "stages/rl1/final/model.safetensors").stat().st_mtime_ns
    capsys.readouterr()

    assert main(["pipeline", str(spec), "--output-dir", str(run)]) == 0
    out = capsys.readouterr()
    assert "stage rl1 (grpo): done already, skipped" in out.err
    assert "stage rl2 (grpo): resuming" in out.err
    assert "resumed from checkpoint at step 2" in out.err
    assert (run / "stages/rl1/final/model.safetensors").stat().st_mtime_ns == rl1_mtime
    steps = [json.loads(x)["step"] for x in (run / "stages/rl2/metrics.jsonl").open()]
    assert steps == [1, 2, 3, 4]
    assert calls["rl2"] == 3 + 2  # steps 1-3 (crashing in 3), then 3-4 after resuming

    # rl2 started from rl1's model, and the table has a row per model and per model stage.
    cfg = yaml.safe_load((run / "stages/rl2/config.yaml").read_text())
    assert cfg["model"]["name_or_path"] == str(run / "stages/rl1/final")
    table = (run / "stages.md").read_text()
    assert [line.split("|")[1].strip() for line in table.splitlines()[2:]] == [
        "base",
        "rl1",
        "rl2",
    ]
    assert table.strip() in out.out
    result = json.loads((run / "pipeline.json").read_text())
    assert [r["stage"] for r in result["rows"]] == ["base", "rl1", "rl2"]
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in result["rows"])


def test_changing_a_stage_reruns_it_and_everything_after_it(tmp_path, tiny_model_dir, capsys):
    run = tmp_path / "run"
    spec = _pipeline(tmp_path, tiny_model_dir, rl2_steps=2)
    assert main(["pipeline", str(spec), "--output-dir", str(run), "--quiet"]) == 0
    assert main(["pipeline", str(spec), "--output-dir", str(run), "rl1.training.steps=1"]) == 0
    err = capsys.readouterr().err
    assert "stage rl1 (grpo): running" in err
    assert "stage rl2 (grpo): running" in err  # upstream changed, so rl2 reruns too
    assert (
        main(
            [
                "pipeline",
                str(spec),
                "--output-dir",
                str(run),
                "rl2.training.steps=1",
                "rl1.training.steps=1",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "stage rl1 (grpo): done already, skipped" in err
    assert "stage rl2 (grpo): running" in err


def _tree(**stages_and_more):
    tree = {"stages": [{"name": "a", "kind": "grpo"}]}
    tree.update(stages_and_more)
    return tree


@pytest.mark.parametrize(
    "tree, message",
    [
        ({"stages": []}, "stages: expected a non-empty list"),
        (_tree(stage=[1]), "unknown key 'stage'"),
        ({"stages": [{"name": "a", "kind": "rl"}]}, "kind: expected one of"),
        ({"stages": [{"name": "a b", "kind": "grpo"}]}, "name: expected an identifier"),
        ({"stages": [{"name": "a", "kind": "grpo"}, {"name": "a", "kind": "sft"}]}, "already used"),
        (
            {
                "stages": [
                    {"name": "a", "kind": "grpo", "model": "b"},
                    {"name": "b", "kind": "grpo"},
                ]
            },
            "'b' is not a model name",
        ),
        (
            {"stages": [{"name": "a", "kind": "grpo"}, {"name": "b", "kind": "sft", "data": "a"}]},
            "stage 'a' produces a model, not data",
        ),
        (
            {
                "stages": [
                    {"name": "s", "kind": "sample"},
                    {"name": "b", "kind": "grpo", "model": "s"},
                ]
            },
            "produces data, not a model",
        ),
        ({"stages": [{"name": "f", "kind": "filter"}]}, "a filter stage needs data"),
        (
            {
                "stages": [
                    {"name": "s", "kind": "sample"},
                    {"name": "b", "kind": "sft", "data": "s.best"},
                ]
            },
            "s.curriculum",
        ),
        (_tree(defaults={"rl": {}}), "defaults.rl: not a stage kind"),
        ({"stages": [{"name": "a", "kind": "grpo", "extra": 1}]}, "unknown key 'extra'"),
    ],
)
def test_bad_pipelines_are_one_line_errors(tree, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_pipeline(tree, "p.yaml")
    assert "\n" not in str(info.value)
    assert str(info.value).startswith("pipeline p.yaml")


def test_cli_errors_name_the_stage_and_key(tmp_path, tiny_model_dir, capsys):
    spec = _pipeline(tmp_path, tiny_model_dir)
    assert (
        main(["pipeline", str(spec), "--output-dir", str(tmp_path / "r"), "rl1.training.stepz=3"])
        == 2
    )
    err = capsys.readouterr().err
    assert "stage 'rl1'" in err and "training.stepz" in err and "training.steps" in err
    assert not (tmp_path / "r").exists()  # nothing ran, nothing written
    assert main(["pipeline", str(spec), "nope.key=1"]) == 2
    assert "no stage 'nope'" in capsys.readouterr().err
    assert main(["pipeline", "r2"]) == 2
    assert "not a built-in recipe" in capsys.readouterr().err
    assert main(["pipeline", "r1", "--model", "teacher=x"]) == 2
    assert "names no model 'teacher'" in capsys.readouterr().err


def test_builtin_recipes_parse_and_resolve_every_stage():
    from rlvr.pipeline.runner import Pipeline
    from rlvr.pipeline.spec import load_pipeline

    assert {"r1", "r1_zero", "distill"} <= set(recipe_names())
    for name in ("r1", "r1_zero", "distill"):
        spec = load_pipeline(resolve_pipeline_file(name))
        Pipeline(spec, Path("/nonexistent"))  # builds and validates every stage's config
    r1 = load_pipeline(resolve_pipeline_file("r1"))
    assert [s.kind for s in r1.stages] == ["sft", "grpo", "sample", "sft", "grpo"]


def test_a_filter_stage_refilters_existing_samples_without_a_model(tmp_path):
    from rlvr.config import load_config
    from rlvr.pipeline.stages import filter_schema, run_filter

    rows = [
        {
            "id": "p1",
            "prompt": "1+1=",
            "answer": "2",
            "completion": c,
            "reward": r,
            "num_tokens": n,
            "finish_reason": "eos",
        }
        for c, r, n in [("<think>1+1+0=02</think>2", 1.0, 9), ("2", 1.0, 1), ("3", 0.0, 1)]
    ]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config(None, ["filter.require_format=true"], schema=filter_schema())
    out = tmp_path / "out"
    out.mkdir()
    summary = run_filter(cfg, samples, out, lambda _m: None)
    kept = [json.loads(x) for x in (out / "kept.jsonl").read_text().splitlines()]
    assert [k["completion"] for k in kept] == ["<think>1+1+0=02</think>2"]  # verified + formatted
    assert summary["kept"] == 1 and summary["correct"] == 2
    with pytest.raises(ConfigError, match="filter.band_low"):
        load_config(None, ["filter.band_low=0.95"], schema=filter_schema())
