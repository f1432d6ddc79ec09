"""One-step off-policy rollouts (rollout.off_policy_steps=1) with truncated importance sampling."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rlvr.config import load_config
from rlvr.forward.logprobs import make_token_batch
from rlvr.rollout import RolloutBatch
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


def trainer(tmp_path, name: str, *overrides: str) -> GRPOTrainer:
    run = tmp_path / name
    run.mkdir()
    cfg = load_config(None, [*TINY, *overrides])
    return GRPOTrainer(cfg, run, progress=False, log=lambda _m: None)


def completions(run_dir, step: int) -> list[tuple[int, str]]:
    rows = [
        json.loads(x) for x in (run_dir / "samples" / f"step-{step}.jsonl").read_text().splitlines()
    ]
    return sorted((r["group"], r["completion"]) for r in rows)


def texts(scored: ScoredRollouts) -> list[tuple[int, str]]:
    return sorted(zip(scored.batch.group_ids.tolist(), scored.batch.completion_text))


def test_each_batch_is_drawn_by_the_weights_of_one_update_before(tmp_path):
    """Step 2's batch of an off-policy run is what the initial weights draw for step 2 (it was
    generated while update 1 ran); an on-policy run draws step 2 from the updated weights."""
    off = trainer(tmp_path, "off", "training.steps=2", "rollout.off_policy_steps=1")
    off.train()
    rows = [json.loads(x) for x in (tmp_path / "off" / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout_staleness"] for r in rows] == [0, 1]
    for r in rows:
        assert 0.0 < r["tis_weight_mean"] <= 2.0 and 0.0 <= r["tis_clip_fraction"] <= 1.0

    frozen = trainer(tmp_path, "frozen", "training.steps=2")  # never updated: the initial weights
    frozen.step = 1
    assert texts(frozen.collect()) == completions(tmp_path / "off", 1)
    frozen.step = 2
    assert texts(frozen.collect()) == completions(tmp_path / "off", 2)

    on = trainer(tmp_path, "on", "training.steps=2")
    on.train()
    assert completions(tmp_path / "on", 1) == completions(tmp_path / "off", 1)
    assert completions(tmp_path / "on", 2) != completions(tmp_path / "off", 2)


@pytest.mark.parametrize(
    ("correction", "shift", "weight", "cut"),
    [
        ("tis", 0.0, 1.0, 0.0),
        ("tis", math.log(1.5), 1.5, 0.0),
        ("tis", math.log(3.0), 2.0, 1.0),  # truncated at the cap
        ("icepop", math.log(1.5), 1.5, 0.0),
        ("icepop", math.log(3.0), 0.0, 1.0),  # outside [1/2, 2]: every token masked
    ],
)
def test_token_corrections_scale_the_gradient(tmp_path, correction, shift, weight, cut):
    """Sampler log-probs lower than the learner's by log(c): every token's loss is weighted by
    min(c, tis_cap=2) (tis), or by c inside [1/2, 2] and 0 outside (icepop), so the gradient
    norm scales by that weight and the metrics report it."""
    t = trainer(
        tmp_path,
        f"{correction}{weight}",
        "rollout.off_policy_steps=1",
        "algorithm.tis_cap=2.0",
        f"algorithm.token_correction={correction}",
    )
    t.step = 1
    scored = t.collect()
    batch = scored.batch
    tokens = make_token_batch(batch.prompt_ids, batch.completion_ids, t.tokenizer.pad_token_id)
    learner = t.learner.logprobs(t.model, tokens)
    lengths = batch.completion_lengths

    def with_sampler_logprobs(offset: float) -> ScoredRollouts:
        rows = [learner[i, :n] - offset for i, n in enumerate(lengths)]
        fields = {k: getattr(batch, k) for k in ("prompt_ids", "completion_ids", "completion_text")}
        b = RolloutBatch(
            **fields,
            logprobs=rows,
            finish_reason=batch.finish_reason,
            prompt_index=batch.prompt_index,
        )
        return ScoredRollouts(b, scored.samples, scored.rewards, 0)

    assert float(scored.rewards.std()) > 0  # some signal, so the gradient is not zero
    state = {k: v.clone() for k, v in t.model.state_dict().items()}
    base, _ = t.update(with_sampler_logprobs(0.0))
    t.model.load_state_dict(state)
    t.learner.optimizer.state.clear()
    stats, _ = t.update(with_sampler_logprobs(shift))
    weight_key, cut_key = {
        "tis": ("tis_weight_mean", "tis_clip_fraction"),
        "icepop": ("icepop_weight_mean", "icepop_masked_fraction"),
    }[correction]
    assert stats[weight_key] == pytest.approx(weight, rel=1e-5)
    assert stats[cut_key] == pytest.approx(cut)
    assert stats["grad_norm"] == pytest.approx(weight * base["grad_norm"], rel=1e-4, abs=1e-8)
    # the mismatch KL of a constant shift c: the k3 estimate c - 1 - log c, exactly
    k = math.exp(shift)  # pi_learner / pi_sampler per token
    assert stats["rollout_mismatch_kl"] == pytest.approx(k - 1 - math.log(k), abs=1e-5)


def test_k_step_batches_are_drawn_by_the_weights_of_k_updates_before(tmp_path):
    """rollout.max_staleness=2: batches 1-3 are what the initial weights draw, batch 4 what the
    weights after update 1 draw (update 1 trains on batch 1, as on-policy), staleness 0,1,2,2."""
    stale = trainer(tmp_path, "k2", "training.steps=4", "rollout.max_staleness=2")
    stale.train()
    rows = [json.loads(x) for x in (tmp_path / "k2" / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout_staleness"] for r in rows] == [0, 1, 2, 2]
    assert all("rollout_mismatch_kl" in r for r in rows)

    frozen = trainer(tmp_path, "frozen", "training.steps=4")  # the initial weights
    for step in (1, 2, 3):
        frozen.step = step
        assert texts(frozen.collect()) == completions(tmp_path / "k2", step)

    once = trainer(tmp_path, "once", "training.steps=1")  # update 1 on batch 1, on-policy
    once.train()
    for step in (2, 3):  # the prompt and sampler RNGs advance as the K-step run's did
        once.collect(step)
    assert texts(once.collect(4)) == completions(tmp_path / "k2", 4)
    assert completions(tmp_path / "once", 1) == completions(tmp_path / "k2", 1)


def test_k_step_refuses_to_be_set_twice():
    from rlvr.errors import ConfigError

    with pytest.raises(ConfigError, match="set only rollout.max_staleness"):
        load_config(None, ["rollout.off_policy_steps=1", "rollout.max_staleness=3"])
    assert load_config(None, ["rollout.off_policy_steps=1"]).rollout.staleness == 1
    assert load_config(None, ["rollout.max_staleness=3"]).rollout.staleness == 3


@pytest.mark.parametrize(
    "schedule", [("rollout.off_policy_steps=1",), ("rollout.max_staleness=3",)], ids=["k1", "k3"]
)
def test_resume_continues_with_the_batches_generated_before_the_checkpoint(tmp_path, schedule):
    """The checkpoint holds the K already generated next batches: resuming from step 2 of a
    4-step off-policy run gives the uninterrupted run's metrics and weights exactly."""
    import shutil

    from safetensors.torch import load_file

    opts = ("training.steps=4", *schedule, "checkpoint.every=2")
    opts = (*opts, "checkpoint.deterministic=true", "checkpoint.keep_last=2")
    trainer(tmp_path, "full", *opts).train()
    shutil.copytree(tmp_path / "full", tmp_path / "cut")
    shutil.rmtree(tmp_path / "cut" / "checkpoints" / "step-4")
    shutil.rmtree(tmp_path / "cut" / "final")
    cfg = load_config(None, [*TINY, *opts])
    GRPOTrainer(cfg, tmp_path / "cut", progress=False, log=lambda _m: None, resume=True).train()
    full = (tmp_path / "full" / "metrics.jsonl").read_text()
    assert (tmp_path / "cut" / "metrics.jsonl").read_text() == full
    a = load_file(tmp_path / "full" / "final" / "model.safetensors")
    b = load_file(tmp_path / "cut" / "final" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_off_policy_default_run_reaches_the_target_accuracy(tmp_path):
    """The embedded default with one-step-stale rollouts still learns: greedy accuracy >= 0.9 on
    100 held-out problems (measured 1.000 on 200, like the on-policy run), weights logged."""
    from rlvr.cli import main

    run = tmp_path / "run"
    args = ["rollout.off_policy_steps=1", "eval.size=100", "eval.every=0", "eval.t1_samples=1"]
    assert main(["train", "--quiet", "--output-dir", str(run), *args]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["eval_before"]["accuracy"] <= 0.4
    assert summary["eval_after"]["accuracy"] >= 0.9
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 0  # the evaluation before training
    rows = rows[1:]
    assert all(abs(r["tis_weight_mean"] - 1.0) < 0.05 for r in rows)
    assert [r["rollout_staleness"] for r in rows[:2]] == [0, 1]


def test_free_running_batches_are_never_more_than_k_updates_stale(tmp_path):
    """rollout.async_mode=free: the generator thread runs on the newest weights it was handed;
    admission control keeps every batch (so every token of it) at most K updates stale."""
    t = trainer(
        tmp_path, "free", "training.steps=6", "rollout.max_staleness=2", "rollout.async_mode=free"
    )
    t.train()
    rows = [json.loads(x) for x in (tmp_path / "free" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert all(0 <= r["rollout_staleness"] <= 2 for r in rows)
    assert all(r["rollout_buffer_depth"] <= 2 for r in rows)
    assert rows[-1]["rollout_dropped_batches"] == 0
    assert rows[0]["rollout_staleness"] == 0  # the first batch: the initial weights, on-policy


def test_partial_rollouts_switch_weights_mid_batch_and_no_token_is_more_than_k_stale(tmp_path):
    """rollout.partial_rollouts: a slow generator (each decode forward takes 5 ms longer) is
    mid-batch whenever the learner publishes, takes the new weights at a token boundary, and
    tags each token with the version that sampled it. Every trained token is checked: at most
    K updates behind the learner, never older than its batch's oldest (the batch's version),
    versions non-decreasing along a completion; the metrics agree with the tokens."""
    import time

    k = 2
    t = trainer(
        tmp_path,
        "partial",
        "training.steps=6",
        f"rollout.max_staleness={k}",
        "rollout.async_mode=free",
        "rollout.partial_rollouts=true",
    )
    decode = t.engine._decode
    t.engine._decode = lambda *a: (time.sleep(0.005), decode(*a))[1]
    seen: list[tuple[int, ScoredRollouts]] = []
    update = t.update
    t.update = lambda scored: (seen.append((t.step, scored)), update(scored))[1]
    t.train()
    rows = [
        json.loads(x) for x in (tmp_path / "partial" / "metrics.jsonl").read_text().splitlines()
    ]
    assert len(seen) == 6 and sum(r["rollout_weight_switches"] for r in rows) >= 2
    mixed = 0
    for (step, scored), row in zip(seen, rows, strict=True):
        versions = scored.batch.versions
        assert versions is not None and len(versions) == len(scored.batch)
        learner = step - 1  # the updates the learner has made before this step's
        tokens = torch.cat(versions)
        assert tokens.numel() == sum(scored.batch.completion_lengths)
        assert int(tokens.min()) == scored.version  # the batch's staleness: its oldest token
        assert (learner - tokens).max() <= k and (tokens <= learner).all()
        for v in versions:
            assert (v[1:] >= v[:-1]).all()  # a row moves to newer weights only
        mixed += int(tokens.max() > tokens.min())
        mean = float((learner - tokens.double()).mean())
        assert row["rollout_staleness_token_mean"] == pytest.approx(mean)
        assert row["rollout_staleness"] == learner - scored.version
    assert mixed >= 1  # some batch was sampled by two versions


def test_deterministic_partial_rollouts_switch_once_at_a_fixed_token_and_rerun_identically(
    tmp_path,
):
    """async_mode=deterministic with partial rollouts: the batch of step s starts on version
    s-1-K and moves to the next at its 2nd decode forward, whatever the timing: two runs give
    the same batches; every token is tagged with one of those two versions, at most K behind
    the learner; the switch happens wherever the batch was stale at all."""
    k = 2
    opts = [
        "training.steps=5",
        f"rollout.max_staleness={k}",
        "rollout.partial_rollouts=true",
        "rollout.partial_switch_at=2",
        "checkpoint.deterministic=true",
    ]

    def run(name: str) -> list[tuple[int, ScoredRollouts]]:
        t = trainer(tmp_path, name, *opts)
        seen: list[tuple[int, ScoredRollouts]] = []
        update = t.update
        t.update = lambda scored: (seen.append((t.step, scored)), update(scored))[1]
        t.train()
        return seen

    first, second = run("a"), run("b")
    assert [texts(s) for _, s in first] == [texts(s) for _, s in second]
    for (step, scored), (_, again) in zip(first, second, strict=True):
        versions, start = scored.batch.versions, scored.version
        if versions is None:  # an on-policy batch (the first): nothing to switch to
            assert start == step - 1 and scored.weight_switches == 0
            continue
        assert all(torch.equal(a, b) for a, b in zip(versions, again.batch.versions))
        tokens = torch.cat(versions)
        assert set(tokens.tolist()) <= {start, start + 1} and step - 1 - start <= k
        # one switch when the batch is stale and a row was still going at the 2nd forward
        assert scored.weight_switches <= (1 if start + 1 <= step - 1 else 0)
        if scored.weight_switches:
            assert (tokens == start + 1).any()
        for v in versions:
            assert (v[1:] >= v[:-1]).all()
    assert sum(s.weight_switches for _, s in first) >= 3


@pytest.mark.slow
def test_a_slow_learner_finds_k_batches_waiting_and_a_slow_generator_fresh_ones(tmp_path):
    import time

    def run(name: str, slow: str) -> list[dict]:
        t = trainer(
            tmp_path,
            name,
            "training.steps=6",
            "rollout.max_staleness=2",
            "rollout.async_mode=free",
        )
        if slow == "learner":
            update = t.update
            t.update = lambda scored: (time.sleep(0.25), update(scored))[1]
        else:
            collect = t.collector.collect
            t.collector.collect = lambda step, feed=None: (time.sleep(0.25), collect(step, feed))[1]
        t.train()
        path = tmp_path / name / "metrics.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines()]

    learner_bound = run("slow-learner", "learner")
    assert max(r["rollout_staleness"] for r in learner_bound) == 2  # the buffer ran ahead
    assert all(r["rollout_staleness"] <= 2 for r in learner_bound)
    generator_bound = run("slow-generator", "generator")
    assert all(r["rollout_staleness"] <= 1 for r in generator_bound)  # taken as soon as made
    assert all(r["rollout_buffer_depth"] <= 1 for r in generator_bound)


def test_free_running_resume_trains_on_the_batches_ready_at_the_checkpoint(tmp_path):
    """Not deterministic, but nothing is lost: the checkpoint holds the ready batches, and the
    resumed run trains on them first."""
    import shutil

    opts = ("training.steps=4", "rollout.max_staleness=2", "rollout.async_mode=free")
    opts = (*opts, "checkpoint.every=2", "checkpoint.keep_last=2")
    trainer(tmp_path, "full", *opts).train()
    state = torch.load(
        tmp_path / "full" / "checkpoints" / "step-2" / "trainer_state.pt", weights_only=False
    )
    ready = state["pending"]
    assert 1 <= len(ready) <= 2
    shutil.copytree(tmp_path / "full", tmp_path / "cut")
    shutil.rmtree(tmp_path / "cut" / "checkpoints" / "step-4")
    shutil.rmtree(tmp_path / "cut" / "final")
    cfg = load_config(None, [*TINY, *opts])
    GRPOTrainer(cfg, tmp_path / "cut", progress=False, log=lambda _m: None, resume=True).train()
    assert completions(tmp_path / "cut", 3) == sorted(
        zip(ready[0].batch.group_ids.tolist(), ready[0].batch.completion_text)
    )
    rows = [json.loads(x) for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]


def test_under_torchrun_k_step_needs_the_deterministic_schedule():
    from rlvr.distributed.world import World
    from rlvr.errors import ConfigError
    from rlvr.runs.policy import check_policy_config

    two = World(rank=0, size=2)
    check_policy_config(load_config(None, ["rollout.max_staleness=2"]), two)  # DDP: fine
    with pytest.raises(ConfigError, match="rollout.async_mode=free: not supported under torchrun"):
        check_policy_config(
            load_config(None, ["rollout.max_staleness=2", "rollout.async_mode=free"]), two
        )
    fsdp = load_config(None, ["rollout.off_policy_steps=1", "distributed.strategy=fsdp"])
    check_policy_config(fsdp, two)  # FSDP: evaluation gathers into a whole copy of its own
