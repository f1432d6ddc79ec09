"""The Python API (issue 36): `rlvr.train`, `rlvr.evaluate`, `GRPOTrainer` from a notebook, with
the run-directory rules of `rlvr train` and no progress bars when asked for none."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import rlvr
from rlvr.config import load_config
from rlvr.errors import UserError
from rlvr.training.grpo import GRPOTrainer

TINY = {
    "training": {"steps": 2},
    "rollout": {"prompts_per_step": 2, "group_size": 4, "max_new_tokens": 16},
    "eval": {"size": 4, "t1_samples": 1},
    "optimizer.warmup_steps": 0,
    "logging.samples_every": 0,
}
ROWS = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(10) for b in range(6)]


def contains_answer(completion: str, sample: dict) -> float:
    return float(sample["answer"] in completion)


def test_import_rlvr_is_light_and_exposes_the_main_names():
    code = (
        "import sys, rlvr\n"
        "names = [rlvr.train, rlvr.evaluate, rlvr.load_config, rlvr.Config]\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
        "assert rlvr.GRPOTrainer.__name__ == 'GRPOTrainer' and rlvr.TrainResult\n"
        "assert {'train', 'evaluate', 'GRPOTrainer', 'load_config'} <= set(dir(rlvr))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        rlvr.nope  # noqa: B018


def test_train_takes_a_lambda_and_rows_and_returns_every_steps_metrics(tmp_path, capfd):
    run = tmp_path / "nb"
    result = rlvr.train(
        TINY,
        reward_funcs=[lambda completion, sample: float(sample["answer"] in completion)],
        dataset=ROWS,
        output_dir=run,
        progress=False,
        log=lambda _line: None,
    )
    assert result.run_dir == run
    assert [row["step"] for row in result.metrics] == [1, 2]
    assert result.history("reward_mean") == [row["reward_mean"] for row in result.metrics]
    assert result.summary["steps"] == 2 and "accuracy" in result.summary["eval_after"]
    on_disk = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in on_disk] == [0, 1, 2]  # step 0: the evaluation before training
    recorded = load_config(run / "config.yaml", note=lambda _line: None)
    assert recorded.data.task == "dataset"
    assert recorded.data.path == str((run / "dataset.jsonl").resolve())
    assert len((run / "dataset.jsonl").read_text().splitlines()) == len(ROWS)
    assert (run / "final" / "model.safetensors").is_file()
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "Writing model shards" not in err and "it/s" not in err

    metrics = rlvr.evaluate(
        TINY, model=run, reward_funcs=contains_answer, dataset=ROWS, log=lambda _line: None
    )
    assert metrics["accuracy"] == result.summary["eval_after"]["accuracy"]


def test_train_refuses_an_earlier_run_unless_overwrite_and_leaves_it_intact(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(UserError, match=r"already holds a run \(metrics.jsonl\)"):
        rlvr.train(TINY, dataset=ROWS, output_dir=run, log=lambda _line: None)
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl"]  # no dataset.jsonl either
    result = rlvr.train(
        {**TINY, "eval.size": 0}, overwrite=True, output_dir=run, progress=False, log=print
    )
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2 == len(result.metrics)


def test_a_failed_start_leaves_no_run_directory(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(UserError, match="model.name_or_path"):
        rlvr.train(
            TINY,
            model={"name_or_path": str(tmp_path / "missing")},
            dataset=ROWS,
            output_dir=run,
            log=lambda _line: None,
        )
    assert not run.exists()


def test_grpo_trainer_checks_its_run_directory_before_the_model_and_creates_it(tmp_path):
    cfg = load_config(tree={"training": {"steps": 1}, "eval": {"size": 0}})
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "config.yaml").write_text("{}\n")
    with pytest.raises(UserError, match="already holds a run"):
        GRPOTrainer(cfg, earlier, progress=False, log=lambda _m: None)
    with pytest.raises(UserError, match="no checkpoint to continue from"):
        GRPOTrainer(cfg, earlier, resume=True, log=lambda _m: None, allow_config_change=True)

    run = tmp_path / "deep" / "run"  # neither it nor its parent exists
    trainer = GRPOTrainer(cfg, run, progress=False, log=lambda _m: None)
    assert not run.exists()  # a trainer that is only built leaves nothing on disk
    result = trainer.train()
    assert (run / "config.yaml").is_file() and len(result.metrics) == 1
    assert bool(trainer.evaluate) is False  # eval.size=0: no held-out problems


def test_a_config_object_edited_in_python_and_sections_as_keywords(tmp_path):
    cfg = rlvr.load_config(None, ["training.steps=1"])
    cfg.reward.verifier = contains_answer
    built = rlvr.build_config(cfg, eval={"size": 0}, rollout={"group_size": 2})
    assert built.reward.verifier is contains_answer
    assert (built.training.steps, built.eval.size, built.rollout.group_size) == (1, 0, 2)
    with pytest.raises(UserError, match="rollout.group_size: must be >= 1"):
        rlvr.build_config(rollout={"group_size": 0})
    with pytest.raises(UserError, match="reward_weights: 1 weights for 2 reward functions"):
        rlvr.build_config(reward_funcs=[contains_answer, contains_answer], reward_weights=[1.0])
    weighted = rlvr.build_config(reward_funcs=[contains_answer], reward_weights=[0.5])
    assert weighted.reward.verifier == [(contains_answer, 0.5)]
    with pytest.raises(UserError, match="did you mean 'rollout.group_size'"):
        rlvr.build_config({"rollout.num_generations": 4})
    assert rlvr.build_config({"num_generations": 4}, log=lambda _l: None).rollout.group_size == 4


def test_a_bad_dataset_row_is_named(tmp_path):
    with pytest.raises(UserError, match="dataset row 2: expected a dict"):
        rlvr.train(TINY, dataset=[ROWS[0], "3+4="], output_dir=tmp_path / "r")
    assert not (tmp_path / "r").exists()
