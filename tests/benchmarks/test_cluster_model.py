"""benchmarks/cluster_model.py: each formula and schedule against a hand computation, and the
fit against a synthetic run directory in rlvr's format (no training run; pure arithmetic)."""

from __future__ import annotations

import importlib.util
import json
import random
import statistics
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _model():
    if str(REPO / "benchmarks") not in sys.path:  # cluster_model imports _cluster_sim from there
        sys.path.insert(0, str(REPO / "benchmarks"))
    path = REPO / "benchmarks" / "cluster_model.py"
    spec = importlib.util.spec_from_file_location("bench_cluster_model", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module's annotations
    spec.loader.exec_module(module)
    return module


cm = _model()
sim = sys.modules["_cluster_sim"]  # the simulation cluster_model imports


def run(lengths, costs, n=1, m=1, mode="sync", k=0, unit="batch", group_size=1, **cluster):
    work = sim.make_workload(lengths, group_size)
    return sim.simulate(work, costs, sim.Cluster(n, m, **cluster), sim.Schedule(mode, k, unit))


def test_generation_time_sums_the_decode_steps():
    # t=1: 1 + 2*2 = 5, t=2: 1 + 2*1 = 3, t=3: 1 + 2*1 = 3 -> 11
    literal = sum(1 + 2 * sum(x >= t for x in (1, 3)) for t in range(1, 4))
    assert literal == 11
    assert sim.generation_time([1, 3], a=1, b=2) == 11
    assert sim.generation_time([1, 3], a=1, b=2, p=0.5, prompt_tokens=4) == 13
    assert sim.generation_time([], a=1, b=2) == 0
    # a wave of groups (3,) and (1,), a = b = 1: (1,) leaves after t=1 (1 + 1*2 = 3), (3,)
    # at the end (3 + (1 + 1) + (1 + 1) = 7, = a*3 + b*4)
    assert sim.wave_offsets([(3,), (1,)], sim.Costs(a=1, b=1, c=0)) == [7, 3]
    assert sim.contiguous_shares(5, 2) == [(0, 2), (2, 5)]


def test_synchronous_step_is_generation_plus_sync_plus_update():
    costs = sim.Costs(a=1, b=2, c=0.5, d=1, w=3, score=0.25, mu=2)
    res = run([[1, 3], [1, 3]], costs)
    # generator: w 3 + gen 11 + score 2 * 0.25 = 14.5; learner: 0.5 * 2 * 4 + 1 = 5
    assert res.step_times == pytest.approx([19.5, 19.5])
    assert [r.wait for r in res.steps] == pytest.approx([14.5, 14.5])
    assert res.learner_idle_fraction == pytest.approx(1 - 10 / 39)
    assert res.generator_idle_fraction == pytest.approx(1 - 29 / 39)
    # two generators: shares (1,) -> 3 + 1 + 2 + 0.25 = 6.25 and (3,) -> 3 + 3 + 6 + 0.25 = 12.25
    two = run([[1, 3], [1, 3]], costs, n=2)
    assert two.step_times == pytest.approx([17.25, 17.25])
    assert two.generator_idle_fraction == pytest.approx(1 - (6.25 + 12.25) / 2 / 17.25)
    # four learners, r = 0.5 s per doubling: 0.5 * 2 * 4 / 4 + 1 + 0.5 * log2(4) = 3
    wide = sim.Costs(a=1, b=2, c=0.5, d=1, mu=2, allreduce=0.5)
    assert sim.learner_time(4, 4, wide) == pytest.approx(3.0)
    assert sim.learner_efficiency(4, 4, wide) == pytest.approx(1 / 2)


def test_k_step_deterministic_hides_a_faster_generation():
    costs = sim.Costs(a=0, b=0.5, c=1.5)  # a batch of one row of 2 tokens: gen 1 s, update 3 s
    res = run([[2]] * 8, costs, mode="deterministic", k=2)
    assert res.staleness == [0, 1, 2, 2, 2, 2, 2, 2]
    assert res.step_times == pytest.approx([4] + [3] * 7)  # first: wait 1 + update 3
    assert [r.wait for r in res.steps[1:]] == pytest.approx([0] * 7)
    assert res.learner_idle_fraction == pytest.approx(1 / 25)
    assert res.generator_idle_fraction == pytest.approx(1 - 8 / 25)
    longer = run([[2]] * 40, costs, mode="deterministic", k=2)
    assert longer.learner_idle_fraction == pytest.approx(1 / 121)  # -> 0
    out = sim.predict(1, 1, [[2]] * 8, costs, 2, "deterministic")
    assert out["step_time_s"] == pytest.approx(25 / 8) and out["staleness_max"] == 2
    assert out["speedup_vs_sync"] == pytest.approx(8 * 4 / 25)  # sync: 1 + 3 s a step
    assert out["dropped_batches"] == 0 and out["learner_idle_fraction"] == pytest.approx(1 / 25)
    # weights: batches 1..3 are all drawn from version 0, one sync; then one per batch
    synced = run([[2]] * 4, sim.Costs(a=0, b=0.5, c=1.5, w=0.5), mode="deterministic", k=2)
    assert synced.generator_busy == pytest.approx([0.5 + 4 * 1 + 0.5])


def test_free_running_stays_within_k_and_drops_nothing():
    # hand case, K = 1, gen 1 s, update 3 s: batch 2 is made during update 1, from version 0
    slow_learner = run([[2]] * 5, sim.Costs(a=0, b=0.5, c=1.5), mode="free", k=1)
    assert slow_learner.staleness == [0, 1, 1, 1, 1]
    assert slow_learner.step_times == pytest.approx([4, 3, 3, 3, 3])
    # K = 2, gen 3 s, update 1 s: a slow generator hands over batches 1 update old
    slow_generator = run([[2]] * 5, sim.Costs(a=0, b=1.5, c=0.5), mode="free", k=2)
    assert slow_generator.staleness == [0, 1, 1, 1, 1]
    assert slow_generator.learner_idle_fraction == pytest.approx(1 - 5 / 16)
    rng = random.Random(0)
    lengths = [[rng.randint(1, 30) for _ in range(6)] for _ in range(12)]
    for n in (1, 3):
        for k in (1, 2, 4):
            for c in (1e-4, 0.05):  # generation-bound, learner-bound
                res = run(lengths, sim.Costs(a=1e-3, b=1e-3, c=c), n=n, mode="free", k=k)
                assert max(res.staleness) <= k and res.dropped_batches == 0
                if c == 0.05:
                    assert max(res.staleness) == k  # a slow learner finds K batches waiting


def test_shared_placement_slows_both_sides_while_both_run():
    costs = sim.Costs(a=1, b=0, c=2)  # a batch: gen 1 s alone, update 2 s alone
    shared = run([[1]] * 3, costs, mode="deterministic", k=1, placement="shared", contention=2)
    # 0-1 gen alone; 1-3 both at half speed (gen done); 3-4 learner alone: update 1 ends at 4;
    # 4-6 both (batch 3 done), 6-7 learner alone; 7-9 update 3 alone
    assert [r.end for r in shared.steps] == pytest.approx([4, 7, 9])
    assert shared.generator_busy == pytest.approx([1 + 2 + 2])
    apart = run([[1]] * 3, costs, mode="deterministic", k=1, contention=2)
    assert [r.end for r in apart.steps] == pytest.approx([3, 5, 7])  # separate: no slowdown
    sync = run([[1]] * 3, costs, placement="shared", contention=2)
    assert sync.step_times == pytest.approx([3, 3, 3])  # never both busy


def test_group_level_free_mode_does_not_wait_for_a_long_group():
    costs = sim.Costs(a=0, b=1, c=1e-3)  # a group of one row of L tokens: L seconds
    lengths = [[100, 1], [1, 1]]  # B = 2 groups of G = 1; group 0 takes 100 s
    groups = run(lengths, costs, n=2, mode="free", k=2, unit="group")
    # generator 1 makes groups 1 (0-1) and 2 (1-2) while generator 0 makes group 0
    assert groups.steps[0].start == pytest.approx(2.0)
    assert groups.steps[1].ready_at == pytest.approx(100.0)  # the long group: step 2
    assert groups.staleness == [0, 1] and groups.dropped_groups == 0
    batches = run(lengths, costs, n=2, mode="free", k=2, unit="batch")
    assert batches.steps[0].start == pytest.approx(100.0)  # the batch waits for its slowest
    # in sync mode a batch is its own groups: the long one holds it back either way
    sync = run(lengths, costs, n=2, unit="group")
    assert sync.steps[0].start == pytest.approx(100.0)


TRUE = {"a": 2e-3, "b": 3e-4, "c": 1e-4, "d": 0.05, "w": 0.01, "score": 5e-4}
EVAL_S = 0.5


def metrics_row(step: int, ls: list[int], gen: float, score: float, wait: float, learner: float):
    """One training row of metrics.jsonl with the keys the model reads (docs/metrics.md)."""
    return {
        "step": step,
        "completion_length_mean": sum(ls) / len(ls),
        "completion_length_max": max(ls),
        "time_generate_s": gen,
        "time_score_s": score,
        "time_rollout_wait_s": wait,
        "time_update_s": 0.7 * learner,
        "tokens_per_s_rollout": sum(ls) / gen,
        "tokens_per_s_train": sum(ls) / (0.7 * learner),
        "step_time_s": wait + learner,
    }


def write_run(run_dir: Path, true: dict = TRUE, steps: int = 12, groups: int = 4, g: int = 2):
    """A synthetic synchronous run in rlvr's format, timed by the model's own formulas with
    the costs `true`; returns its lengths."""
    rng = random.Random(1)
    lengths = [[rng.randint(1, 40) for _ in range(groups * g)] for _ in range(steps)]
    rows = [{"step": 0, "eval_accuracy": 0.1}]
    (run_dir / "samples").mkdir(parents=True)
    for s, ls in enumerate(lengths, start=1):
        gen = sim.generation_time(ls, true["a"], true["b"])
        score = true["score"] * len(ls)
        wait = true["w"] + gen + score
        learner = true["c"] * sum(ls) + true["d"]
        row = metrics_row(s, ls, gen, score, wait, learner + (EVAL_S if s == 6 else 0.0))
        if s == 6:
            row["eval_accuracy"] = 0.5  # a periodic evaluation inside the step
        rows.append(row)
        if s % 5 == 0:
            samples = [
                {
                    "step": s,
                    "group": i // g,
                    "prompt": "1+2=",
                    "completion": "x" * (n - 1),  # the text, without its EOS token
                    "answer": "3",
                    "reward": rng.random(),
                    "advantage": 0.0,
                    "finish_reason": "eos",
                }
                for i, n in enumerate(ls)
            ]
            samples.sort(key=lambda r: -r["reward"])  # as write_samples orders them
            with (run_dir / "samples" / f"step-{s}.jsonl").open("w") as f:
                f.writelines(json.dumps(r) + "\n" for r in samples)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "summary.json").write_text(json.dumps({"wall_seconds": 1.0}))
    return lengths


def test_fit_recovers_the_costs_of_a_synthetic_run(tmp_path, capsys):
    lengths = write_run(tmp_path / "sync")
    rows = cm.load_rows(tmp_path / "sync")
    assert [r["step"] for r in rows] == list(range(1, 13))  # the step-0 evaluation is skipped
    costs, fit = cm.fit_costs(rows)
    for name, value in TRUE.items():
        assert getattr(costs, name) == pytest.approx(value, rel=1e-6), name
    assert costs.mu == pytest.approx(1.0) and fit["generation_fit"] == "a*max_len+b*tokens"
    assert fit["eval_rows"] == 1 and fit["eval_s"] == pytest.approx(EVAL_S)
    work = cm.run_workload(tmp_path / "sync", rows)
    assert work.group_size == 2
    for s in (5, 10):  # sampled steps: the lengths come back, group by group
        got, want = work.lengths[s - 1], lengths[s - 1]
        assert [sorted(got[i : i + 2]) for i in range(0, 8, 2)] == [
            sorted(want[i : i + 2]) for i in range(0, 8, 2)
        ]
    for got, want in zip(work.lengths, lengths):  # every step: count, total, longest
        assert (len(got), sum(got), max(got)) == (len(want), sum(want), max(want))
    # the sync run predicts itself; the CLI prints its JSON report last and writes it
    check = cm.validate(tmp_path / "sync", tmp_path / "sync")
    assert check["sync"]["relative_error"] == pytest.approx(0, abs=1e-9)
    out = tmp_path / "report.json"
    args = ["--sync-run", str(tmp_path / "sync"), "--async-run", str(tmp_path / "sync")]
    report = cm.main([*args, "--accelerators", "4", "--json", str(out)])
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert last == json.loads(out.read_text()) == json.loads(json.dumps(report))
    half = last["scale"]["4"]["half"]
    assert (half["sync"]["n_generators"], half["sync"]["m_learners"]) == (2, 2)
    best = last["scale"]["4"]["best"]
    assert best["async"]["step_time_s"] <= half["async"]["step_time_s"]


def test_lognormal_lengths_have_a_tenfold_tail():
    (lengths,) = sim.lognormal_lengths(1, 20000, median=50, max_new_tokens=10**6, seed=3)
    assert statistics.median(lengths) == pytest.approx(50, rel=0.05)
    p99 = sorted(lengths)[int(0.99 * len(lengths))]
    assert p99 / 50 == pytest.approx(10, rel=0.1)
    (clipped,) = sim.lognormal_lengths(1, 1000, median=50, max_new_tokens=64, seed=3)
    assert max(clipped) == 64 and min(clipped) >= 1


def test_validation_recovers_the_contention_of_a_simulated_async_run(tmp_path):
    """An async run 'measured' by the model itself (shared cores, contention 1.5, K = 2, the
    sync run's lengths): the matched contention gives it back and predicts the run exactly; the
    plain per-token ratio understates it (generation overlaps the update part of the time)."""
    true = {**TRUE, "w": 0.0, "score": 0.0}  # a synthetic time_generate_s holds neither
    lengths = write_run(tmp_path / "sync", true)
    costs = sim.Costs(a=true["a"], b=true["b"], c=true["c"], d=true["d"])
    shared = sim.Cluster(1, 1, "shared", 1.5)
    truth = sim.simulate(
        sim.make_workload(lengths, 2), costs, shared, sim.Schedule("deterministic", 2)
    )
    rows = [
        {
            **metrics_row(rec.step, ls, rec.generate_s, 0.0, rec.wait, rec.end - rec.start),
            "rollout_staleness": rec.staleness,
        }
        for rec, ls in zip(truth.steps, lengths)
    ]
    assert [r["step_time_s"] for r in rows] == pytest.approx(truth.step_times)
    async_dir = tmp_path / "async"
    async_dir.mkdir()
    (async_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = "rollout:\n  max_staleness: 2\n  async_mode: deterministic\n"
    (async_dir / "config.yaml").write_text(config)
    check = cm.validate(tmp_path / "sync", async_dir)
    assert abs(check["sync"]["relative_error"]) < 1e-9
    assert (check["async"]["mode"], check["async"]["staleness"]) == ("deterministic", 2)
    assert 1.0 < check["async"]["contention"] < 1.5
    assert check["async"]["relative_error"] < 0  # too little contention: predicted too fast
    matched = check["async_contention_matched"]
    assert matched["contention"] == pytest.approx(1.5, rel=1e-6)
    assert matched["relative_error"] == pytest.approx(0, abs=1e-6)
    assert matched["staleness_mean_predicted"] == matched["staleness_mean_measured"]
