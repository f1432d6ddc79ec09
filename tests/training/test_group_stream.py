"""rollout.async_unit=group: the free-running generator streams groups; a step trains on the
groups that finished first, none more than K updates stale (rlvr.training.streaming)."""

from __future__ import annotations

import json
import shutil
import time

import pytest
import torch

from rlvr.config import load_config
from rlvr.errors import ConfigError
from rlvr.training.collect import informative_groups
from rlvr.training.grpo import GRPOTrainer, ScoredRollouts

TINY = [
    "rollout.prompts_per_step=4",
    "rollout.group_size=4",
    "eval.size=0",
    "logging.samples_every=1",
    "optimizer.lr=3e-3",
    "optimizer.warmup_steps=0",
    "optimizer.max_grad_norm=0",
]
GROUP = ["rollout.async_mode=free", "rollout.partial_rollouts=true", "rollout.async_unit=group"]


def trainer(tmp_path, name: str, *overrides: str, resume: bool = False) -> GRPOTrainer:
    run = tmp_path / name
    run.mkdir(exist_ok=True)
    cfg = load_config(None, [*TINY, *GROUP, *overrides])
    return GRPOTrainer(cfg, run, progress=False, log=lambda _m: None, resume=resume)


def metrics(run_dir) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("step", 0) >= 1 and "loss" in r]


def watch(t: GRPOTrainer) -> list[tuple[int, ScoredRollouts]]:
    seen: list[tuple[int, ScoredRollouts]] = []
    update = t.update
    t.update = lambda scored: (seen.append((t.step, scored)), update(scored))[1]
    return seen


@pytest.mark.parametrize("slow", ["generator", "learner"])
def test_no_trained_token_is_more_than_k_updates_stale(tmp_path, slow):
    """Every token of every step is checked against the learner's version, whichever side is
    slower; each batch is prompts_per_step whole groups, and the metrics agree with them."""
    k = 2
    t = trainer(tmp_path, slow, "training.steps=8", f"rollout.max_staleness={k}")
    if slow == "generator":
        decode = t.engine._decode
        t.engine._decode = lambda *a: (time.sleep(0.004), decode(*a))[1]
    else:
        update = t.update
        t.update = lambda scored: (time.sleep(0.15), update(scored))[1]
    seen = watch(t)
    t.train()
    rows = metrics(tmp_path / slow)
    assert len(seen) == 8 == len(rows)
    for (step, scored), row in zip(seen, rows, strict=True):
        batch, learner = scored.batch, step - 1
        assert len(batch) == 16 and batch.group_ids.tolist() == [
            j for j in range(4) for _ in "abcd"
        ]
        assert all(s is scored.samples[4 * (i // 4)] for i, s in enumerate(scored.samples))
        assert batch.versions is not None
        tokens = torch.cat(batch.versions)
        assert tokens.numel() == sum(batch.completion_lengths)
        assert (learner - tokens).max() <= k and (tokens <= learner).all()
        assert (
            int(tokens.min()) == scored.version
            and row["rollout_staleness"] == learner - scored.version
        )
        for v in batch.versions:
            assert (v[1:] >= v[:-1]).all()
        mean = float((learner - tokens.double()).mean())
        assert row["rollout_staleness_token_mean"] == pytest.approx(mean)
    if slow == "learner":  # the buffer ran ahead
        assert max(r["rollout_staleness"] for r in rows) == k
        assert max(r["rollout_buffer_depth"] for r in rows) >= 4
    assert sum(r["rollout_weight_switches"] for r in rows) >= 1


def test_dynamic_sampling_drops_constant_groups_as_they_arrive(tmp_path):
    t = trainer(
        tmp_path,
        "dapo",
        "training.steps=4",
        "rollout.max_staleness=2",
        "algorithm.dynamic_sampling=true",
        "algorithm.max_sampling_rounds=50",
    )
    seen = watch(t)
    t.train()
    rows = metrics(tmp_path / "dapo")
    assert rows[-1]["rollout_filtered_groups"] > 0  # an untrained model solves few: all-0 groups
    for _, scored in seen:  # never the cap: every trained group is informative
        assert len(informative_groups(scored.rewards.tolist(), 4)) == 4 == scored.groups_kept


def test_resume_trains_first_on_the_groups_ready_at_the_checkpoint(tmp_path):
    opts = ("training.steps=4", "rollout.max_staleness=2", "checkpoint.every=2")
    opts = (*opts, "checkpoint.keep_last=2")
    full = trainer(tmp_path, "full", *opts)
    full.train()
    state = torch.load(
        tmp_path / "full" / "checkpoints" / "step-2" / "trainer_state.pt", weights_only=False
    )
    ready = state["pending"]
    assert ready and all(len(group.batch) == 4 for group in ready)
    shutil.copytree(tmp_path / "full", tmp_path / "cut")
    shutil.rmtree(tmp_path / "cut" / "checkpoints" / "step-4")
    shutil.rmtree(tmp_path / "cut" / "final")
    resumed = trainer(tmp_path, "cut", *opts, resume=True)
    seen = watch(resumed)
    resumed.train()
    step, first = seen[0]
    assert step == 3
    oldest = sorted(ready, key=lambda group: group.version)[: min(4, len(ready))]
    texts = set(first.batch.completion_text)
    kept = [g for g in oldest if step - 1 - g.version <= 2]
    assert kept and all(set(g.batch.completion_text) <= texts for g in kept)
    assert [r["step"] for r in metrics(tmp_path / "cut")] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("overrides", "needs"),
    [
        (["rollout.max_staleness=2", "rollout.async_mode=deterministic"], "async_mode=free"),
        (["rollout.async_mode=free"], "async_mode=free with max_staleness > 0"),
        (["rollout.max_staleness=2", "rollout.partial_rollouts=false"], "partial_rollouts=true"),
        (["rollout.max_staleness=2", "rollout.engine=hf"], "rollout.engine=fast"),
        (["rollout.max_staleness=2", "distributed.ray=true"], "one process"),
        (["rollout.max_staleness=2", "environment.name=python"], "single-turn"),
    ],
)
def test_what_streaming_groups_needs_is_said_in_one_line(overrides, needs):
    with pytest.raises(ConfigError, match=f"rollout.async_unit=group: needs .*{needs}") as err:
        load_config(None, [*TINY, *GROUP, *overrides])
    assert "\n" not in str(err.value)
