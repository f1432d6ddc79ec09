"""benchmarks/vs_trl.py: the formulas behind each ratio, the shared settings both libraries get,
one-line errors, and (slow) one end-to-end run on a tiny random model."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import _rlvr_peer  # noqa: E402
import _vs_trl_common as common  # noqa: E402
import vs_trl  # noqa: E402

RATIOS = (
    "step_speedup_vs_trl",
    "rollout_speedup_vs_generate",
    "train_mfu",
    "time_to_accuracy_speedup_vs_trl",
)


def _args(*argv: str) -> argparse.Namespace:
    return vs_trl.build_parser().parse_args(list(argv))


# -- settings ---------------------------------------------------------------------------------


def test_overrides_build_the_shared_config_and_strings_survive_yaml(tiny_model_dir):
    from rlvr.config import load_config

    args = _args("--prompt-template", "Q: {prompt} Reply with 'Answer: <n>'.", "--prompts", "3")
    cfg = load_config(None, vs_trl.step_overrides(args, str(tiny_model_dir)))
    assert cfg.data.prompt_template == "Q: {prompt} Reply with 'Answer: <n>'."
    assert cfg.model.name_or_path == str(tiny_model_dir)
    assert (cfg.rollout.prompts_per_step, cfg.rollout.group_size) == (3, 4)
    assert cfg.rollout.max_new_tokens == 64 and cfg.rollout.temperature == 1.0
    assert cfg.algorithm.loss_aggregation == "token_mean" and cfg.algorithm.kl_coef == 0.0
    assert cfg.training.steps == 1 + 3  # warm-up + measured
    assert not cfg.eval.before and not cfg.eval.after and cfg.eval.size == 0


def test_tta_overrides_keep_rlvr_defaults_for_the_embedded_task():
    from rlvr.config import load_config

    cfg = load_config(None, vs_trl.tta_overrides(_args()))
    assert cfg.model.name_or_path == "embedded" and cfg.data.task == "addition"
    assert (cfg.rollout.prompts_per_step, cfg.rollout.group_size) == (16, 8)
    assert cfg.optimizer.lr == 1e-4 and cfg.optimizer.warmup_steps == 5
    assert cfg.algorithm.loss_aggregation == "seq_mean_token_mean"
    assert cfg.eval.size == 100 and cfg.eval.every == 5


def test_trl_trains_on_exactly_the_prompts_rlvr_draws(tiny_model_dir):
    from rlvr.config import load_config
    from rlvr.training.grpo import GRPOTrainer

    args = _args("--task", "addition", "--verifier", "exact_answer", "--max-new-tokens", "2")
    cfg = load_config(None, vs_trl.step_overrides(args, str(tiny_model_dir)))
    trainer = GRPOTrainer(cfg, Path("unused"), progress=False, log=lambda _m: None)
    first = trainer.collect().samples[:: cfg.rollout.group_size]
    second = trainer.collect().samples[:: cfg.rollout.group_size]
    assert common.prompt_stream(cfg, 4) == list(first) + list(second)


def test_trl_reward_function_scores_like_the_rlvr_verifier(tmp_path):
    from rlvr.errors import UserError

    reward = common.trl_reward_function("exact_answer")
    sample = json.dumps({"prompt": "1+2=", "answer": "3"})
    plain = reward(completions=["3", "<think>1+2+0=03</think>3", "4"], sample=[sample] * 3)
    assert plain == [1.0, 1.0, 0.0]
    chat = reward(completions=[[{"role": "assistant", "content": "3"}]], sample=[sample])
    assert chat == [1.0]
    broken = json.dumps({"prompt": "1+2=", "answer": "three"})  # bad data stops, as in rlvr
    with pytest.raises(UserError):
        reward(completions=["3"], sample=[broken])
    # a verifier bug or a non-finite reward gives 0, as rlvr's Scorer does
    code = "def score(completion, sample):\n    return {'nan': float('nan')}[completion]\n"
    (tmp_path / "flaky.py").write_text(code)
    flaky = common.trl_reward_function(f"{tmp_path / 'flaky.py'}:score")
    assert flaky(completions=["nan", "KeyError"], sample=[sample] * 2) == [0.0, 0.0]


def test_the_rollout_phase_decodes_as_many_rows_together_as_the_batch_it_names(
    tiny_llama, char_tokenizer
):
    """The guard of the 16-sequence figure (issue 35): a trainer's engine decodes the rows of
    one step together (max_batch_size 8 for the benchmark's 2 prompts x G=4), so a 16-row
    call inside `concurrent` must run its first decode forward over all 16 rows (and 8
    outside it, the waves the figure once measured by mistake). Counts rows, times nothing."""
    from rlvr.rollout import FastEngine, SamplingParams

    engine = FastEngine(tiny_llama, char_tokenizer, max_batch_size=8)
    widths: list[int] = []
    decode = engine._decode
    engine._decode = lambda tokens, *a: (widths.append(tokens.shape[0]), decode(tokens, *a))[1]
    prompts = [char_tokenizer.encode(p) for p in ("1+2=", "33+4=", "a", "hello")]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=6)
    engine.generate(prompts, 4, sampling, torch.Generator().manual_seed(0))
    assert widths[0] == 8  # the step's rows
    widths.clear()
    with _rlvr_peer.concurrent(engine, 16):
        engine.generate(prompts, 4, sampling, torch.Generator().manual_seed(0))
    assert widths[0] == 16 and engine.max_batch_size == 8


def test_generate_tokens_count_up_to_and_including_the_first_eos():
    prompt_width, eos = 2, 9
    out = torch.tensor(
        [
            [5, 5, 1, 9, 9, 9],  # EOS second: 2 tokens, the padding after it not counted
            [5, 5, 1, 2, 3, 4],  # no EOS: all 4
            [0, 5, 9, 9, 9, 9],  # EOS first: 1
        ]
    )
    assert _rlvr_peer._generate_tokens(out, prompt_width, [eos], 4) == 2 + 4 + 1


def test_matmul_peak_is_a_positive_rate_with_its_settings():
    peak = common.matmul_peak_gflops(size=64, seconds=0.01, threads=1)
    assert peak["gflops"] > 0 and peak["size"] == 64 and peak["trials"] >= 3
    assert peak["threads"] == 1


# -- the ratios -------------------------------------------------------------------------------


def _rlvr_result(reached: bool = True) -> dict:
    return {
        "step": {
            "step_time_s": [2.0, 1.0, 3.0],
            "time_update_s": [0.5, 0.5, 1.0],
            "update_tokens": [{"prompt_tokens": 100, "completion_tokens": 50}] * 3,
            "update_positions": [120] * 3,  # shared prompts: fewer positions than row tokens
            "num_parameters": 1000,
            "ppo_epochs": 1,
            "peak_rss_mib": 500.0,
        },
        "rollout": {
            "by_batch": {"8": {"speedup": 3.5}, "16": {"speedup": 4.0}},
        },
    }


def _trl_runs() -> dict:
    return {
        "off": {"step": {"step_time_s": [8.0, 9.0, 10.0], "peak_rss_mib": 800.0}},
        "on": {"step": {"step_time_s": [6.0, 7.0, 50.0], "peak_rss_mib": 600.0}},
    }


def _tta(seconds: list[float | None], trained: list[float]) -> list[dict]:
    return [
        {"reached": s is not None, "seconds": s, "steps": 35 if s else None, "trained_s": t}
        for s, t in zip(seconds, trained, strict=True)
    ]


def _tta_runs(rlvr_reached: bool = True, trl_reached: bool = True) -> dict:
    # two runs per library; TRL's second did not reach the threshold unless trl_reached
    return {
        "rlvr": _tta([9.0, 11.0] if rlvr_reached else [None, None], [30.0, 50.0]),
        "trl": _tta([40.0, 60.0 if trl_reached else None], [40.0, 100.0]),
    }


def test_summary_computes_each_ratio_from_its_raw_measurements():
    peak = {"gflops": 0.001}  # 1 MFLOP/s keeps the numbers readable
    out = vs_trl.summarize(_args(), _rlvr_result(), _trl_runs(), peak, [8, 16], _tta_runs())
    # medians: rlvr 2.0 s; TRL off 9.0 s, on 7.0 s -> the faster (on) is the one compared
    assert out["trl_gradient_checkpointing"] == "on"
    assert out["step_speedup_vs_trl"] == pytest.approx(7.0 / 2.0)
    assert out["peak_memory_mib"]["rlvr"] == 500.0 and out["peak_memory_mib"]["trl"] == 600.0
    # 6 * 1000 params * 120 positions run * 3 steps / 2.0 s of update / 1e6 FLOP/s
    assert out["train_mfu"] == pytest.approx(6 * 1000 * 120 * 3 / 2.0 / 1e6)
    # counting every row's own prompt: 150 tokens per step
    assert out["train_mfu_row_tokens"] == pytest.approx(6 * 1000 * 150 * 3 / 2.0 / 1e6)
    assert out["rollout_speedup_vs_generate"] == 3.5 and out["rollout_batch"] == 8
    assert out["rollout_speedup_vs_generate_by_batch"] == {"8": 3.5, "16": 4.0}
    # the mean over each library's runs: TRL (40 + 60) / 2, rlvr (9 + 11) / 2
    assert out["time_to_accuracy_speedup_vs_trl"] == pytest.approx(50.0 / 10.0)
    assert len(out["raw"]["tta"]["rlvr"]["runs"]) == 2 and out["raw"]["tta"]["trl"]["steps"] == [
        35,
        35,
    ]
    assert out["raw"]["step"]["trl_median_step_s_by_gradient_checkpointing"] == {
        "off": 9.0,
        "on": 7.0,
    }


def test_time_to_accuracy_not_reached_is_reported_not_invented():
    runs = _tta_runs(trl_reached=False)
    out = vs_trl.summarize(_args(), _rlvr_result(), _trl_runs(), None, [8], runs)
    assert out["time_to_accuracy_speedup_vs_trl"] is None
    assert out["time_to_accuracy"]["trl"] == "not reached"  # one of its runs did not
    # TRL trained 70 s on average without reaching it every time; rlvr needed 10 s: >= 7x
    assert out["time_to_accuracy_speedup_vs_trl_lower_bound"] == pytest.approx(7.0)
    runs = _tta_runs(rlvr_reached=False, trl_reached=False)
    neither = vs_trl.summarize(_args(), _rlvr_result(), _trl_runs(), None, [8], runs)
    assert neither["time_to_accuracy_speedup_vs_trl"] is None
    assert "time_to_accuracy_speedup_vs_trl_lower_bound" not in neither


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "/no/such/model.gguf"], "--model /no/such/model.gguf: not found"),
        (["--rollout-batches", "8,6"], "--rollout-batches: each must be a positive multiple"),
        (["--parts", "step,speed"], "--parts: expected a comma-separated subset"),
        (["--rlvr", "rollout.engine"], "--rlvr rollout.engine: expected KEY=VALUE"),
        (["--tta-threshold", "80"], "--tta-threshold: expected an accuracy in [0, 1]"),
        (["--model", "embedded", "--rlvr", "rollout.enigne=fast"], "did you mean"),
    ],
)
def test_bad_options_give_one_line_errors(argv, message, capsys):
    assert vs_trl.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vs_trl: error: ") and message in err[0]


# -- end to end --------------------------------------------------------------------------------


@pytest.mark.slow
def test_benchmark_runs_end_to_end_on_a_tiny_model(tiny_model_dir, tmp_path):
    pytest.importorskip("trl", reason="the peer: pip install 'rlvr[bench]' (in the test extra)")
    model = str(tiny_model_dir)
    cmd = [sys.executable, str(BENCH / "vs_trl.py"), "--model", model, "--task", "addition"]
    cmd += ["--verifier", "exact_answer", "--steps", "2", "--warmup", "0"]
    cmd += ["--max-new-tokens", "6", "--rollout-batches", "4,8", "--trl-gradient-checkpointing"]
    cmd += ["off", "--tta-model", model, "--tta-threshold", "0", "--tta-every", "1"]
    cmd += ["--tta-max-steps", "2", "--tta-prompts", "2", "--tta-group-size", "4"]
    cmd += ["--tta-eval-size", "4", "--tta-max-new-tokens", "6", "--threads", "1"]
    cmd += ["--tta-repeats", "1"]
    cmd += ["--matmul-size", "128", "--matmul-seconds", "0.05", "--work-dir", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in RATIOS:
        assert isinstance(result[key], float) and math.isfinite(result[key]) and result[key] > 0
    assert set(result["rollout_speedup_vs_generate_by_batch"]) == {"4", "8"}
    assert result["rollout_batch"] == 8
    assert {"torch", "transformers", "trl", "rlvr"} <= set(result["versions"])
    mem = result["peak_memory_mib"]
    assert mem["rlvr"] > 0 and mem["trl"] > 0
    raw = result["raw"]
    assert len(raw["step"]["rlvr"]["step_time_s"]) == 2
    assert len(raw["step"]["trl"]["off"]["step_time_s"]) == 2
    assert all(u["completion_tokens"] > 0 for u in raw["step"]["rlvr"]["update_tokens"])
    assert raw["matmul_peak"]["gflops"] > 0
    assert raw["tta"]["rlvr"]["reached"] and raw["tta"]["trl"]["reached"]
    assert result["settings"]["group_size"] == 4 and result["settings"]["rlvr_extra"] == []


def test_trl_bf16_runs_are_labelled_and_the_fastest_precision_is_reported():
    import copy

    runs = _trl_runs()
    fastest = min(runs, key=lambda label: vs_trl.median(runs[label]["step"]["step_time_s"]))
    bf16 = copy.deepcopy(runs[fastest])
    bf16["step"]["step_time_s"] = [t / 2 for t in bf16["step"]["step_time_s"]]
    bf16["step"]["precision"] = "bf16"
    runs[vs_trl.trl_variant(fastest, "bf16")] = bf16
    out = vs_trl.summarize(_args(), _rlvr_result(), runs, None, [8], _tta_runs())
    assert out["trl_precision"] == "bf16" and out["trl_gradient_checkpointing"] == fastest
    assert vs_trl.trl_variant("off", "fp32") == "off"
    assert vs_trl.trl_precisions("both") == ["fp32", "bf16"]
    assert vs_trl.trl_precisions("fp32") == ["fp32"]
    assert vs_trl.trl_precisions("auto")[0] == "fp32"


def test_an_rlvr_baseline_in_the_same_run_gives_rlvrs_speedup_over_it():
    import copy

    args = _args("--rlvr-baseline", "model.precision=fp32")
    baseline = copy.deepcopy(_rlvr_result())
    baseline["step"]["step_time_s"] = [5.0, 4.0, 6.0]  # median 5.0 against rlvr's 2.0
    out = vs_trl.summarize(args, _rlvr_result(), _trl_runs(), None, [8], _tta_runs(), baseline)
    assert out["step_speedup_vs_rlvr_baseline"] == pytest.approx(5.0 / 2.0)
    assert out["raw"]["step_baseline"]["overrides"] == ["model.precision=fp32"]
    assert "step_speedup_vs_rlvr_baseline" not in vs_trl.summarize(
        _args(), _rlvr_result(), _trl_runs(), None, [8], _tta_runs()
    )
