"""`rlvr sample`: end to end on the embedded model, config errors, the run directory."""

import contextlib
import io
import json
from collections import Counter
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.commands.sample import check_sample_dir
from rlvr.config import load_config
from rlvr.data.datasets import load_prompt_dataset
from rlvr.data.registry import build_task
from rlvr.data.tasks.addition import AdditionTask
from rlvr.errors import UserError
from rlvr.rewards.compose import build_verifier
from rlvr.sample.job import (
    SAMPLE_FILES,
    FilterSection,
    SampleConfig,
    _write_atomic,
    run_sample,
    select_prompts,
    write_filtered,
)

PROMPTS, K = 8, 8


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def embedded_run(tmp_path_factory):
    """One small `rlvr sample` of the embedded model on addition: (run dir, stdout)."""
    out = tmp_path_factory.mktemp("sample") / "run"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        rc = main(
            ["sample", f"sampling.num_prompts={PROMPTS}", f"sampling.k={K}", "--output-dir",
             str(out), "--quiet"]
        )  # fmt: skip
    assert rc == 0
    return out, stdout.getvalue()


def test_run_writes_every_file_and_prints_a_short_summary(embedded_run):
    out, stdout = embedded_run
    assert sorted(p.name for p in out.iterdir()) == sorted(SAMPLE_FILES)
    assert f"{PROMPTS} prompts x {K} = {PROMPTS * K} completions" in stdout
    assert "mean pass rate" in stdout and "band [0.1, 0.9]" in stdout and "kept" in stdout


def test_samples_hold_every_completion_with_its_score(embedded_run):
    out, _ = embedded_run
    samples = read_jsonl(out / "samples.jsonl")
    assert len(samples) == PROMPTS * K
    assert len({s["id"] for s in samples}) == PROMPTS
    verifier = build_verifier("exact_answer")
    for s in samples:
        assert {"id", "prompt", "answer", "source", "completion", "reward", "num_tokens"} <= set(s)
        assert s["finish_reason"] in ("eos", "stop", "length")
        assert s["reward"] == verifier(s["completion"], s)
    by_id = Counter(s["id"] for s in samples)
    assert set(by_id.values()) == {K}
    assert [s["sample_index"] for s in samples[:K]] == list(range(K))


def test_kept_rows_are_the_verified_completions_and_reverify_correct(embedded_run):
    out, _ = embedded_run
    kept = read_jsonl(out / "kept.jsonl")
    samples = read_jsonl(out / "samples.jsonl")
    assert kept, "the embedded model solves some problems at T=1"
    verifier = build_verifier("exact_answer")
    for row in kept:
        assert set(row) == {"prompt", "completion", "id", "answer", "source", "reward"}
        assert row["reward"] == 1.0
        assert verifier(row["completion"], row) == 1.0
    # Exactly the correct, untruncated completions, each distinct text once per prompt.
    expected, seen = [], set()
    for s in samples:
        key = (s["id"], " ".join(s["completion"].split()))
        if s["reward"] >= 1.0 and s["finish_reason"] != "length" and key not in seen:
            seen.add(key)
            expected.append((s["id"], s["completion"]))
    assert [(r["id"], r["completion"]) for r in kept] == expected


def test_summary_and_pass_rates_agree_with_the_samples(embedded_run):
    out, _ = embedded_run
    samples = read_jsonl(out / "samples.jsonl")
    rates = read_jsonl(out / "pass_rates.jsonl")
    summary = json.loads((out / "summary.json").read_text())
    correct = Counter(s["id"] for s in samples if s["reward"] >= 1.0)
    assert [r["id"] for r in rates] == list(dict.fromkeys(s["id"] for s in samples))
    for r in rates:
        assert (r["n"], r["correct"]) == (K, correct[r["id"]])
        assert r["pass_rate"] == correct[r["id"]] / K
    assert summary["prompts"] == PROMPTS and summary["completions"] == PROMPTS * K
    assert summary["kept"] + sum(summary["drops"].values()) == PROMPTS * K
    assert summary["mean_pass_rate"] == pytest.approx(sum(correct.values()) / (PROMPTS * K))
    assert sum(summary["pass_rate_histogram"]["counts"]) == PROMPTS
    assert summary["band_kept"] + summary["band_too_easy"] + summary["band_too_hard"] == PROMPTS
    assert summary["band_too_hard"] == sum(r["pass_rate"] < 0.1 for r in rates)
    assert (summary["band_low"], summary["band_high"]) == (0.1, 0.9)
    assert summary["seconds"] > 0 and summary["tokens_per_s"] > 0


def test_curriculum_is_the_in_band_prompts_and_loads_as_a_training_dataset(embedded_run):
    out, _ = embedded_run
    rates = read_jsonl(out / "pass_rates.jsonl")
    in_band = [r["id"] for r in rates if 0.1 <= r["pass_rate"] <= 0.9]
    assert in_band, "some prompts of the embedded model are neither always nor never solved"
    path = str(out / "curriculum.jsonl")
    dataset = load_prompt_dataset(path, eval_fraction=0.0)
    assert [s["id"] for s in dataset.train] == in_band
    task = AdditionTask()
    for s in dataset.train:
        a, b = (int(x) for x in s["prompt"].rstrip("=").split("+"))
        assert s["prompt"] == task.format_prompt(a, b) and s["answer"] == str(a + b)
    cfg = load_config(None, ["data.task=dataset", f"data.path={path}", "data.eval_fraction=0"])
    assert len(build_task(cfg.data).train) == len(in_band)


def test_write_filtered_refilters_samples_without_a_model(embedded_run, tmp_path):
    out, _ = embedded_run
    samples = read_jsonl(out / "samples.jsonl")
    flt = FilterSection(require_format=True, band_low=0.0, band_high=1.0)
    summary = write_filtered(samples, flt, tmp_path / "f", summary={"source_run": str(out)})
    kept = read_jsonl(tmp_path / "f" / "kept.jsonl")
    assert all(r["completion"].startswith("<think>") and r["reward"] == 1.0 for r in kept)
    assert summary == json.loads((tmp_path / "f" / "summary.json").read_text())
    assert summary["source_run"] == str(out) and summary["kept"] == len(kept)
    assert summary["band_kept"] == PROMPTS  # the band [0, 1] keeps every prompt
    assert len(read_jsonl(tmp_path / "f" / "curriculum.jsonl")) == PROMPTS
    reasons = summary["drops"]
    assert summary["kept"] + sum(reasons.values()) == len(samples)
    assert reasons["format"] == sum(
        s["reward"] >= 1.0 and not s["completion"].startswith("<think>") for s in samples
    )


def test_an_existing_run_is_refused_without_overwrite(embedded_run, capsys):
    out, _ = embedded_run
    before = (out / "summary.json").read_text()
    assert main(["sample", "sampling.num_prompts=1", "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "already holds a run" in err and "--overwrite" in err
    assert (out / "summary.json").read_text() == before
    assert check_sample_dir(str(out), overwrite=True) == out


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("sampling.k=0", "sampling.k: must be >= 1"),
        ("sampling.kk=3", "did you mean 'sampling.k'"),
        ("sampling.split=test", "sampling.split: expected one of train, heldout"),
        ("filter.band_low=0.95", "filter.band_low: must be <= filter.band_high"),
        ("filter.min_tokens=100", "filter.min_tokens: must be <= sampling.max_new_tokens"),
        ("filter.max_tokens=-1", "filter.max_tokens: must be >= 0"),
        ("reward.verifier=nope", "nope"),
        ("data.task=dataset", "data.path: required"),
        ("data.task=gym", "data.gym_name: required"),
    ],
)
def test_bad_config_is_one_line_and_exit_2_before_anything_is_written(
    override, message, tmp_path, capsys
):
    out = tmp_path / "run"
    assert main(["sample", override, "--output-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("rlvr: error:")
    assert message in err
    assert not out.exists()


def test_bad_yaml_key_names_the_file_section(tmp_path, capsys):
    config = tmp_path / "sample.yaml"
    config.write_text("sampling:\n  temprature: 0.7\n")
    assert main(["sample", "--config", str(config), "--output-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "unknown config key 'sampling.temprature'" in err
    assert "did you mean 'sampling.temperature'" in err


def test_defaults_sample_the_embedded_model_on_addition():
    cfg = load_config(None, [], schema=SampleConfig)
    assert (cfg.model.name_or_path, cfg.data.task, cfg.reward.verifier) == (
        "embedded",
        "addition",
        "exact_answer",
    )
    s = cfg.sampling
    assert (s.k, s.num_prompts, s.split, s.temperature, s.max_new_tokens) == (
        8,
        256,
        "train",
        1.0,
        64,
    )
    assert (s.max_batch_size, cfg.filter.band_low, cfg.filter.band_high) == (256, 0.1, 0.9)
    assert cfg.filter.rejection_options().min_reward == 1.0


def test_help_lists_the_sample_config_keys(capsys):
    with pytest.raises(SystemExit):
        main(["sample", "--help"])
    assert "sampling.k" in capsys.readouterr().out  # the keys by name; their defaults below
    with pytest.raises(SystemExit):
        main(["sample", "--help", "all"])
    text = capsys.readouterr().out
    assert "sampling.k = 8" in text and "filter.band_low = 0.1" in text


def test_heldout_split_on_a_dataset_is_deterministic_and_tiny_model_truncations_drop(
    tiny_model_dir, tmp_path
):
    data = tmp_path / "prompts.jsonl"
    rows = [{"id": f"p{i}", "prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(10)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = [
        f"model.name_or_path={tiny_model_dir}",
        "data.task=dataset",
        f"data.path={data}",
        "data.eval_fraction=0.3",
        "data.system_prompt=be brief",
        "sampling.split=heldout",
        "sampling.num_prompts=5",
        "sampling.k=2",
        "sampling.max_new_tokens=6",
    ]
    cfg = load_config(None, overrides, schema=SampleConfig)
    logs = []
    first = run_sample(cfg, tmp_path / "a", log=logs.append, progress=False)
    run_sample(cfg, tmp_path / "b", log=logs.append, progress=False)
    a = (tmp_path / "a" / "samples.jsonl").read_text()
    assert a == (tmp_path / "b" / "samples.jsonl").read_text()
    heldout = load_prompt_dataset(str(data), eval_fraction=0.3).heldout(3)
    samples = read_jsonl(tmp_path / "a" / "samples.jsonl")
    assert [s["id"] for s in samples[::2]] == [s["id"] for s in heldout]
    assert all(s["system"] == "be brief" for s in samples)
    assert any("holds out 3 prompts" in line for line in logs)
    truncated = sum(s["finish_reason"] == "length" for s in samples)
    assert first["truncated"] == truncated
    assert first["drops"]["truncated"] == sum(
        s["finish_reason"] == "length" and s["reward"] >= 1.0 for s in samples
    )
    assert not list((tmp_path / "a").glob(".*.tmp"))


def test_train_split_draws_distinct_prompts_and_stops_on_a_small_dataset(tmp_path):
    cfg = load_config(None, ["sampling.num_prompts=50"], schema=SampleConfig)
    prompts = select_prompts(AdditionTask(), cfg.sampling)
    assert len({p["id"] for p in prompts}) == 50
    assert select_prompts(AdditionTask(), cfg.sampling) == prompts
    data = tmp_path / "three.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+0="}) + "\n" for i in range(3)))
    logs = []
    few = select_prompts(
        load_prompt_dataset(str(data), eval_fraction=0.0), cfg.sampling, logs.append
    )
    assert sorted(p["prompt"] for p in few) == ["0+0=", "1+0=", "2+0="]
    assert "only 3 distinct training prompts" in logs[0]


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "kept.jsonl"
    target.write_text("old\n")

    def fail(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr("rlvr.sample.job.os.replace", fail)
    with pytest.raises(KeyboardInterrupt):
        _write_atomic(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["kept.jsonl"]


def test_a_heldout_request_beyond_the_task_is_a_config_error(tmp_path):
    cfg = load_config(
        None,
        ["data.digits=1", "sampling.split=heldout", "sampling.num_prompts=99"],
        schema=SampleConfig,
    )
    with pytest.raises(UserError, match="sampling.num_prompts"):
        select_prompts(build_task(cfg.data), cfg.sampling)
