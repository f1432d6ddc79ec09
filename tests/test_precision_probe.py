"""Issue 35: model.precision=auto on a CPU is what a start-up probe measures faster (fp32 or
bf16-mixed), recorded in summary.json and precision.json, and kept by a resumed run. The
rules are tested with the timing replaced; one test times this machine for real."""

from __future__ import annotations

import json
import math
import time

import pytest
import torch
from transformers import LlamaConfig

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.errors import UserError
from rlvr.models import precision_probe
from rlvr.models.loading import resolve_precision
from rlvr.runs.run import PRECISION_FILE, run_precision
from rlvr.sft.config import SFTConfig
from rlvr.sft.trainer import run_sft
from rlvr.training.grpo import GRPOTrainer

CPU = torch.device("cpu")


def _no_timing(*_args):
    raise AssertionError("the probe timed something")


def _timing(fp32_s: float, bf16_s: float):
    """A time_layer that says fp32 takes `fp32_s` and bf16 `bf16_s`, remembering its calls."""
    calls = []

    def timed(*sizes):
        calls.append(sizes)
        return fp32_s, bf16_s

    timed.calls = calls
    return timed


@pytest.fixture
def probe_env(monkeypatch):
    """bf16 kernels present, RLVR_PRECISION_PROBE unset, and nothing timed unless a test says
    what the timing would measure."""
    monkeypatch.delenv(precision_probe.ENV, raising=False)
    monkeypatch.setattr(precision_probe, "bf16_kernels", lambda: True)
    monkeypatch.setattr(precision_probe, "time_layer", _no_timing)
    return monkeypatch


def _force_bf16_mixed(monkeypatch) -> None:
    """auto picks bf16-mixed (2x faster) even for the tiny models of these tests."""
    monkeypatch.setattr(precision_probe, "SMALL_HIDDEN", 0)
    monkeypatch.setattr(precision_probe, "time_layer", _timing(2.0, 1.0))


# --- the rules ----------------------------------------------------------------------------------


def test_bf16_mixed_needs_a_clear_margin(probe_env):
    fast = _timing(0.03, 0.02)  # exactly 1.5x
    probe_env.setattr(precision_probe, "time_layer", fast)
    found = precision_probe.probe(576, 1536, 192)
    assert (found.choice, found.ratio, found.fp32_s, found.bf16_s) == (
        "bf16-mixed",
        1.5,
        0.03,
        0.02,
    )
    assert found.reason == "bf16 1.5x fp32 on this CPU at hidden 576"
    assert fast.calls == [(576, 1536, 192)]
    probe_env.setattr(precision_probe, "time_layer", _timing(0.0299, 0.02))
    found = precision_probe.probe(576, 1536)
    assert found.choice == "fp32" and found.ratio == pytest.approx(1.495)
    assert found.reason == "bf16 1.5x fp32 on this CPU at hidden 576, under the 1.5x it takes"
    probe_env.setattr(precision_probe, "time_layer", _timing(0.01, 0.02))  # bf16 slower
    assert precision_probe.probe(576, 1536).choice == "fp32"


def test_large_layers_are_timed_scaled_down_in_proportion(probe_env):
    timed = _timing(0.03, 0.01)
    probe_env.setattr(precision_probe, "time_layer", timed)
    found = precision_probe.probe(2048, 8192, 512)  # Llama-3.2-1B's layer: 60M weights
    assert timed.calls == [(512, 2112, 128)]  # ~4M, as SmolLM2's 3.5M (timed as they are)
    assert found.reason == (
        "bf16 3.0x fp32 on this CPU at hidden 2048 (timed scaled down to hidden 512)"
    )
    assert precision_probe.timed_sizes(576, 1536, 192) == (576, 1536, 192)


def test_small_models_no_bf16_kernels_and_the_env_var_time_nothing(probe_env):
    small = precision_probe.probe(511, 2048)
    assert (small.choice, small.ratio, small.fp32_s, small.bf16_s) == ("fp32", None, None, None)
    assert small.reason == "hidden 511 < 512: bf16 does not pay"
    probe_env.setattr(precision_probe, "time_layer", _timing(2.0, 1.0))
    assert precision_probe.probe(512, 2048).choice == "bf16-mixed"  # 512 is probed
    probe_env.setattr(precision_probe, "time_layer", _no_timing)
    probe_env.setattr(precision_probe, "bf16_kernels", lambda: False)
    assert precision_probe.probe(4096, 11008).reason == "no bf16 kernels on this CPU"
    probe_env.setattr(precision_probe, "bf16_kernels", lambda: True)
    probe_env.setenv(precision_probe.ENV, "off")
    off = precision_probe.probe(4096, 11008)
    assert (off.choice, off.ratio, off.reason) == ("fp32", None, "RLVR_PRECISION_PROBE=off")
    probe_env.setenv(precision_probe.ENV, "sometimes")
    with pytest.raises(UserError, match="RLVR_PRECISION_PROBE: expected 'on' or 'off'"):
        precision_probe.probe(4096, 11008)


def test_auto_on_a_cpu_probes_the_models_own_layer_sizes(probe_env, tmp_path):
    LlamaConfig(
        hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3
    ).save_pretrained(tmp_path)  # SmolLM2-135M's layer; only config.json is read
    timed = _timing(0.03, 0.01)
    probe_env.setattr(precision_probe, "time_layer", timed)
    cfg = load_config(None, [f"model.name_or_path={tmp_path}"])
    precision = resolve_precision(cfg.model, CPU)
    assert timed.calls == [(576, 1536, 192)]
    assert (precision.name, precision.weights, precision.compute) == (
        "bf16-mixed",
        torch.float32,
        torch.bfloat16,
    )
    assert (
        precision.line()
        == "precision: auto -> bf16-mixed (bf16 3.0x fp32 on this CPU at hidden 576)"
    )
    assert precision.record() == {
        "precision": "bf16-mixed",
        "precision_probe": {
            "ratio": pytest.approx(3.0),
            "fp32_s": 0.03,
            "bf16_s": 0.01,
            "reason": "bf16 3.0x fp32 on this CPU at hidden 576",
        },
    }


def test_the_tiny_models_stay_fp32_without_timing(probe_env, tiny_model_dir):
    for name in (str(tiny_model_dir), "embedded", "embedded-small"):
        precision = resolve_precision(load_config(None, [f"model.name_or_path={name}"]).model, CPU)
        assert (precision.name, precision.compute) == ("fp32", None)
        assert precision.probe.reason.endswith("< 512: bf16 does not pay")
        assert precision.line() is None  # nothing measured: nothing logged


@pytest.mark.parametrize(
    ("precision", "dtype", "layout"),
    [
        ("fp32", "auto", "fp32"),
        ("bf16-mixed", "auto", "bf16-mixed"),
        ("bf16", "auto", "bf16"),
        ("auto", "float32", "fp32"),
        ("auto", "bfloat16", "bf16"),
        ("fp32", "bfloat16", "fp32"),
    ],
)
def test_an_explicit_precision_or_dtype_never_probes(probe_env, precision, dtype, layout):
    probe_env.setattr(precision_probe, "probe", _no_timing)
    cfg = load_config(None, [f"model.precision={precision}", f"model.dtype={dtype}"])
    resolved = resolve_precision(cfg.model, CPU)
    assert (resolved.name, resolved.probe) == (layout, None)
    assert resolved.record() == {"precision": layout}


def test_cuda_keeps_its_rule_without_probing(probe_env):
    probe_env.setattr(precision_probe, "probe", _no_timing)
    probe_env.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    resolved = resolve_precision(load_config().model, torch.device("cuda"))
    assert (resolved.name, resolved.probe) == ("bf16-mixed", None)


# --- resume -------------------------------------------------------------------------------------


def test_a_resume_takes_the_recorded_precision_and_never_probes(probe_env, tmp_path):
    probe_env.setattr(precision_probe, "probe", _no_timing)
    auto = load_config().model
    record = {
        "precision": "bf16-mixed",
        "precision_probe": {"ratio": 3.2, "fp32_s": 0.03, "bf16_s": 0.01, "reason": "measured"},
    }
    (tmp_path / PRECISION_FILE).write_text(json.dumps(record))
    resumed = run_precision(auto, CPU, tmp_path)
    assert (resumed.name, resumed.compute, resumed.record()) == (
        "bf16-mixed",
        torch.bfloat16,
        record,
    )
    # an explicit precision is the config's (changed with --allow-config-change)
    explicit = load_config(None, ["model.precision=fp32"]).model
    assert run_precision(explicit, CPU, tmp_path).name == "fp32"
    # a run directory older than the probe: auto was fp32 on a CPU, and stays so
    older = tmp_path / "older"
    older.mkdir()
    assert run_precision(auto, CPU, older).record() == {"precision": "fp32"}
    (tmp_path / PRECISION_FILE).write_text('{"precision": "fp8"}')
    with pytest.raises(UserError, match="expected a precision of fp32, bf16-mixed, bf16, fp16"):
        run_precision(auto, CPU, tmp_path)


RUN = [
    "training.steps=2",
    "rollout.prompts_per_step=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=8",
    "eval.size=0",
    "checkpoint.every=1",
    "checkpoint.save_final=false",
    "logging.samples_every=0",
]


class _Crash(Exception):
    pass


def test_rlvr_train_records_the_probe_and_a_resume_keeps_it(probe_env, tmp_path, capsys):
    # the embedded default (hidden 128): fp32 without timing, in summary.json and precision.json
    plain = tmp_path / "plain"
    assert main(["train", "--quiet", "--output-dir", str(plain), *RUN]) == 0
    summary = json.loads((plain / "summary.json").read_text())
    assert summary["precision"] == "fp32"
    assert summary["precision_probe"] == {
        "ratio": None,
        "fp32_s": None,
        "bf16_s": None,
        "reason": "hidden 128 < 512: bf16 does not pay",
    }
    assert json.loads((plain / PRECISION_FILE).read_text()) == {
        k: summary[k] for k in ("precision", "precision_probe")
    }
    # a probe that picks bf16-mixed; the run crashes in step 2, after its step-1 checkpoint
    _force_bf16_mixed(probe_env)
    cut = tmp_path / "cut"
    cut.mkdir()
    lines = []
    trainer = GRPOTrainer(load_config(None, RUN), cut, progress=False, log=lines.append)
    assert lines == ["precision: auto -> bf16-mixed (bf16 2.0x fp32 on this CPU at hidden 128)"]
    assert trainer.policy.compute_dtype == torch.bfloat16
    real_update = trainer.update

    def crash(scored):
        if trainer.step == 2:
            raise _Crash
        return real_update(scored)

    trainer.update = crash
    with pytest.raises(_Crash):
        trainer.train()
    # resumed where the probe would now choose fp32: the run keeps bf16-mixed, probing nothing
    probe_env.setattr(precision_probe, "time_layer", _no_timing)
    capsys.readouterr()
    assert main(["train", "--resume", "--output-dir", str(cut), *RUN]) == 0
    err = capsys.readouterr().err
    assert "precision: auto -> bf16-mixed (bf16 2.0x fp32 on this CPU at hidden 128)" in err
    summary = json.loads((cut / "summary.json").read_text())
    assert summary["resumed_from_step"] == 1
    assert summary["precision"] == "bf16-mixed" and summary["precision_probe"]["ratio"] == 2.0


def test_rlvr_sft_records_the_probe_and_a_resume_keeps_it(probe_env, tmp_path, tiny_model_dir):
    _force_bf16_mixed(probe_env)
    cfg = load_config(
        None,
        [
            f"model.name_or_path={tiny_model_dir}",
            "eval.size=0",
            "logging.progress=false",
            "data.num_examples=8",
            "training.batch_size=4",
            "checkpoint.every=1",
        ],
        schema=SFTConfig,
    )

    def stop_after_1(step, _metrics):
        raise _Crash

    run = tmp_path / "run"
    lines = []
    with pytest.raises(_Crash):
        run_sft(cfg, run, log=lines.append, progress=False, on_step=stop_after_1)
    assert "precision: auto -> bf16-mixed (bf16 2.0x fp32 on this CPU at hidden 32)" in lines
    assert json.loads((run / PRECISION_FILE).read_text())["precision"] == "bf16-mixed"
    probe_env.setattr(precision_probe, "time_layer", _no_timing)
    summary = run_sft(cfg, run, log=lambda _m: None, progress=False, resume=True)
    assert summary["resumed_from_step"] == 1
    assert summary["precision"] == "bf16-mixed" and summary["precision_probe"]["ratio"] == 2.0


# --- rlvr estimate, and the real probe ----------------------------------------------------------


def test_estimate_plans_what_the_probe_would_choose(probe_env, capsys):
    def report() -> tuple[str, str]:
        assert main(["estimate", "model.device=cpu"]) == 0
        lines = capsys.readouterr().out.splitlines()
        [precision] = [ln.split()[1] for ln in lines if ln.startswith("precision ")]
        return precision, lines[-1]

    assert report() == (
        "fp32",
        "(precision auto on a CPU: rlvr train probes at start-up; here hidden 128 < 512: bf16 "
        "does not pay)",
    )
    _force_bf16_mixed(probe_env)
    assert report()[0] == "bf16-mixed"


def test_the_probe_on_this_cpu_is_quick_and_finite(monkeypatch):
    monkeypatch.delenv(precision_probe.ENV, raising=False)
    threads = torch.get_num_threads()
    start = time.perf_counter()
    found = precision_probe.probe(576, 1536, 192)  # SmolLM2-135M's layer
    took = time.perf_counter() - start
    assert took < 1.5
    assert torch.get_num_threads() == threads  # timed on one thread, then restored
    if not precision_probe.bf16_kernels():
        assert found.ratio is None and found.choice == "fp32"
        return
    assert found.ratio is not None and math.isfinite(found.ratio) and found.ratio > 0
    assert found.choice in ("fp32", "bf16-mixed")
