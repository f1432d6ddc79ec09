"""The trainer's LLM judges (rlvr.training.judge_server): `reward.judge_*` written into the spec,
`judge:serve` served in-process from a model rlvr loads, and a real tiny GRPO run scored by the
embedded model as its judge."""

from __future__ import annotations

import json
import socket

import pytest

from rlvr.config import load_config
from rlvr.errors import ConfigError
from rlvr.rewards.exact import exact_answer_reward
from rlvr.rewards.judge.spec import parse_judge, split_judge_weight
from rlvr.training import judge_server
from rlvr.training.grpo import GRPOTrainer
from rlvr.training.judge_server import start_judges

TINY = [
    "rollout.prompts_per_step=2",
    "rollout.group_size=4",
    "rollout.max_new_tokens=16",
    "training.steps=2",
    "eval.size=2",
    "eval.t1_samples=1",
    "logging.samples_every=1",
    "logging.progress=false",
    "checkpoint.save_final=false",
]


def _refuses(url: str) -> bool:
    host, port = url.removeprefix("http://").removesuffix("/v1").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return True
    return False


def test_judge_serve_and_a_judge_serve_item_come_together():
    with pytest.raises(ConfigError, match="judge:serve needs reward.judge_serve=MODEL"):
        start_judges(load_config(None, ["reward.verifier=judge:serve"]))
    with pytest.raises(ConfigError, match="reward.verifier has no judge:serve item"):
        start_judges(load_config(None, ["reward.judge_serve=embedded"]))


def test_no_judge_starts_nothing_and_keeps_the_config():
    cfg = load_config(None, [])
    judges, same = start_judges(cfg)
    assert same is cfg and judges.server is None and judges.answers(exact_answer_reward) is None


def test_the_configs_settings_reach_each_judge_item_and_the_recorded_spec_is_untouched(tmp_path):
    rubric = tmp_path / "rubric.txt"
    rubric.write_text("Grade: {completion}")
    spec = "judge:http://127.0.0.1:8000/v1:0.5,judge:http://127.0.0.1:9000/v1#model=other,math"
    cfg = load_config(
        None,
        [
            f"reward.verifier={spec}",
            "reward.judge_model=grader",
            "reward.judge_timeout_s=5",
            f"reward.judge_rubric={rubric}",
        ],
    )
    judges, resolved = start_judges(cfg, log=lambda _: None)
    assert judges.server is None and cfg.reward.verifier == spec  # the config as written
    first, second, last = resolved.reward.verifier.split(",")
    item, weight = split_judge_weight(first)
    assert weight == 0.5 and last == "math"
    assert parse_judge(item)[1] == {"model": "grader", "rubric": str(rubric), "timeout_s": "5.0"}
    assert parse_judge(second)[1]["model"] == "other"  # the item's own setting wins


def test_a_bad_rubric_fails_before_the_judges_model_loads(tmp_path, monkeypatch):
    def no_server(*args, **kwargs):
        raise AssertionError("the judge's model was loaded")

    monkeypatch.setattr(judge_server, "Server", no_server)
    rubric = tmp_path / "rubric.txt"
    rubric.write_text("Grade {prompt}")
    cfg = load_config(
        None,
        [
            "reward.verifier=judge:serve",
            "reward.judge_serve=embedded",
            f"reward.judge_rubric={rubric}",
        ],
    )
    with pytest.raises(ConfigError, match=f"{rubric} has no {{completion}} placeholder"):
        start_judges(cfg)


def test_a_tiny_grpo_run_scored_by_the_embedded_model_as_its_judge(tmp_path):
    """The embedded model (3-digit addition) judges with the rubric '{completion}+100=': its
    answer, a number, is the score out of 2000. Every step's samples carry the judge's answer,
    each reward is 0.5 x answer / 2000 + exact_answer (a composite), a judge answer that is no
    number or is cut at judge_max_tokens is a counted failure, and the server stops at the end."""
    rubric = tmp_path / "rubric.txt"
    rubric.write_text("{completion}+100=")
    cfg = load_config(
        None,
        [
            *TINY,
            "reward.verifier=judge:serve:0.5,exact_answer:1.0",
            "reward.judge_serve=embedded",
            f"reward.judge_rubric={rubric}",
            "reward.judge_format=number",
            "reward.judge_max_score=2000",
            "reward.judge_max_tokens=6",
        ],
    )
    trainer = GRPOTrainer(cfg, tmp_path / "run", progress=False, log=lambda _: None)
    url = trainer.judges.url
    assert url is not None and url.startswith("http://127.0.0.1:")
    result = trainer.train()
    assert trainer.judges.server is None and _refuses(url)  # closed by the loop's finally

    steps = [row for row in result.metrics if "reward_mean" in row]
    assert len(steps) == 2 and all("reward/judge:serve_mean" in row for row in steps)
    judged = 0
    for step in (1, 2):
        rows = [json.loads(x) for x in (result.run_dir / f"samples/step-{step}.jsonl").open()]
        for row in rows:
            answer = row["judge"]["judge:serve"]  # every completion was put to the judge
            if answer.strip().isdigit() and int(answer) <= 2000:
                exact = exact_answer_reward(row["completion"], {"answer": row["answer"]})
                assert row["reward"] == pytest.approx(0.5 * int(answer) / 2000 + exact)
                judged += 1
            else:
                assert row["reward"] == 0.0
    assert judged > 0
    failures = sum(row["verifier_failures"] for row in steps)
    assert failures == 2 * 8 - judged
    if failures:
        errors = [json.loads(x) for x in (result.run_dir / "errors.jsonl").open()]
        assert {e["component"] for e in errors} == {"judge:serve"}
    assert "judge:serve" in (result.run_dir / "config.yaml").read_text()  # as written
