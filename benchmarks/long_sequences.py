"""Memory and time of the packed update's attention at long sequences: dense mask vs segments.

    python benchmarks/long_sequences.py                      # both tables, ~3-4 minutes
    python benchmarks/long_sequences.py --only long --tokens 1024 2048 4096 8192 16384
    python benchmarks/long_sequences.py --only short          # the crossover at short widths

`long`: one packed micro-batch of T tokens (T in --tokens): a shared-prompt unit [prompt of 256
| completion | completion], the two completions (T - 256) / 2 tokens each, one sequence of width
T, through `packed_completion_logprobs` forward and backward (the packed update's pass) of the
embedded base model (the default run's: 2 layers, hidden 128, 8 heads of 32, fp32), once with
the dense [1, 1, T, T] mask (`attention="dense"`) and once without (`"segments"`). Every point
runs in a fresh subprocess (with a timeout, --timeout): after a small warm-up pass, its resident
memory is read (psutil) and the kernel's peak-RSS counter reset (/proc/self/clear_refs), then
one pass is timed and the peak read back (VmHWM; `ru_maxrss`, the whole process's peak, where
/proc is missing); "peak growth" = peak - resident before the pass: what the pass itself
needed.

`short`: the crossover. Rows like the default run's (prompts of 8 tokens, --prompt, x G = 8,
completions uniform in [max/6, max]; 16 prompts at max 32, fewer for longer maxima so that every
point has ~2.5k completion tokens) for completion maxima 32 ... 512, packed as the trainer packs
them (token budget 2048, shared prompts, the model's pair cost), forward + backward of every
micro-batch by each method, least of --repeats per micro-batch; in-process, time only. Each
point also gives the segment rows' (query, key) pairs over the dense masks' (`pairs_ratio`),
what `packed_attention=auto` picks for its micro-batches, and the time of that pick.

Both run on one thread (torch.set_num_threads(1)), as the update measurements of
docs/training-speed.md, so that a shared 2-core machine's other work disturbs them less.

Prints one JSON object per point, then one summary JSON object as its last line.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import time

PROMPT = 256


def _model(shape: str = "embedded"):
    """The embedded base model, or (`smollm2`) a random 2-layer Llama with SmolLM2-135M's layer
    shape (hidden 576, MLP 1536, 9 query heads of 64 sharing 3 key/value heads)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr.models.embedded import embedded_model_path

    if shape == "embedded":
        model = LlamaForCausalLM.from_pretrained(embedded_model_path("base"), dtype=torch.float32)
    else:
        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=77,
            hidden_size=576,
            intermediate_size=1536,
            num_hidden_layers=2,
            num_attention_heads=9,
            num_key_value_heads=3,
            head_dim=64,
            tie_word_embeddings=True,
        )
        model = LlamaForCausalLM(config)
    return model.train()


def _pass(model, packed, method: str) -> None:
    from rlvr.forward.packing import packed_completion_logprobs

    lp, _ = packed_completion_logprobs(model, packed, attention=method, chunk_size=1024)
    lp.sum().backward()
    model.zero_grad(set_to_none=True)


def _unit(tokens: int, vocab: int):
    """One sequence of `tokens`: [prompt | completion | completion], the prompt shared."""
    import torch

    from rlvr.forward.packing import pack_rows

    g = torch.Generator().manual_seed(tokens)
    prompt = torch.randint(3, vocab, (PROMPT,), generator=g)
    half = (tokens - PROMPT) // 2
    completions = [
        torch.randint(3, vocab, (n,), generator=g) for n in (half, tokens - PROMPT - half)
    ]
    return pack_rows([prompt, prompt], completions, [[(0, 1)]])


def _reset_peak() -> bool:
    """Reset the kernel's peak resident size of this process (VmHWM), Linux >= 4.0."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_bytes() -> int:
    """VmHWM (the peak resident size since the last reset), or ru_maxrss without /proc."""
    try:
        with open("/proc/self/status") as f:
            status = f.read()
        return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024
    except (OSError, AttributeError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def point(tokens: int, method: str, shape: str) -> dict:
    """One long point, in this process (run by the parent in a fresh subprocess)."""
    import psutil
    import torch

    model = _model(shape)
    _pass(model, _unit(2 * PROMPT, model.config.vocab_size), method)  # warm-up: kernels, pools
    packed = _unit(tokens, model.config.vocab_size)
    before = psutil.Process().memory_info().rss
    reset = _reset_peak()
    start = time.perf_counter()
    _pass(model, packed, method)
    seconds = time.perf_counter() - start
    peak = _peak_bytes()
    return {
        "tokens": tokens,
        "method": method,
        "shape": list(packed.input_ids.shape),
        "seconds": round(seconds, 3),
        "peak_growth_mib": round((peak - before) / 2**20, 1),
        "peak_mib": round(peak / 2**20, 1),
        "peak_of": "the pass" if reset else "the process",
        "threads": torch.get_num_threads(),
    }


def run_long(tokens: list[int], methods: list[str], timeout: float, shape: str) -> list[dict]:
    results = []
    for t in tokens:
        for method in methods:
            cmd = [sys.executable, __file__, "--point", str(t), method, "--shape", shape]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                row = {"tokens": t, "method": method, "error": f"timeout after {timeout:.0f} s"}
            else:
                lines = done.stdout.strip().splitlines()
                if done.returncode == 0 and lines:
                    row = json.loads(lines[-1])
                else:
                    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                    row = {
                        "tokens": t,
                        "method": method,
                        "error": f"exit {done.returncode}: {tail}",
                    }
            print(json.dumps(row), flush=True)
            results.append(row)
    return results


def run_short(
    maxima: list[int], methods: list[str], repeats: int, shape: str, prompt_tokens: int = 8
) -> list[dict]:
    import torch

    from rlvr.forward.packing import attention_pair_cost, packed_micro_batches
    from rlvr.forward.segment_attention import attention_method, segment_pairs

    model = _model(shape)
    vocab = model.config.vocab_size
    results = []
    for top in maxima:
        g = torch.Generator().manual_seed(top)
        prompts, completions = [], []
        for _ in range(max(1, 16 * 32 // top)):  # ~2.5k completion tokens whatever the length
            prompt = torch.randint(3, vocab, (prompt_tokens,), generator=g)
            for _ in range(8):
                prompts.append(prompt)
                n = int(torch.randint(max(1, top // 6), top + 1, (1,), generator=g))
                completions.append(torch.randint(3, vocab, (n,), generator=g))
        packs = packed_micro_batches(
            prompts,
            completions,
            range(len(prompts)),
            token_budget=2048,
            max_rows=64,
            share_prompts=True,
            pair_cost=attention_pair_cost(model),
        )
        # per micro-batch and method, the least of the repeats: on a shared machine the other
        # processes only add time
        times = [{m: float("inf") for m in methods} for _ in packs]
        for r in range(repeats + 1):  # the first round is a warm-up
            for method in methods:
                for k, packed in enumerate(packs):
                    start = time.perf_counter()
                    _pass(model, packed, method)
                    if r:
                        times[k][method] = min(times[k][method], time.perf_counter() - start)
        auto = [attention_method("auto", p.segment_ids, p.parent_ids) for p in packs]
        pairs = sum(segment_pairs(p.segment_ids, p.parent_ids) for p in packs)
        row = {
            "prompt_tokens": prompt_tokens,
            "completion_max": top,
            "shapes": sorted({tuple(p.input_ids.shape) for p in packs}, key=lambda s: -s[1]),
            # the segment rows' (query, key) pairs over the dense masks' S * W^2
            "pairs_ratio": round(
                pairs / sum(p.input_ids.numel() * p.input_ids.shape[1] for p in packs), 3
            ),
            **{f"{m}_seconds": round(sum(t[m] for t in times), 4) for m in methods},
            "auto": sorted(set(auto)),
        }
        if set(auto) <= set(methods):
            row["auto_seconds"] = round(sum(t[a] for t, a in zip(times, auto)), 4)
        print(json.dumps(row), flush=True)
        results.append(row)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=["long", "short"], default=None)
    parser.add_argument("--tokens", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--methods", nargs="+", default=["dense", "segments"])
    parser.add_argument("--maxima", type=int, nargs="+", default=[32, 64, 128, 256, 512])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds per long point")
    parser.add_argument("--shape", choices=["embedded", "smollm2"], default="embedded")
    parser.add_argument(
        "--prompt", type=int, default=8, help="short: prompt tokens (8, the default run's)"
    )
    parser.add_argument("--point", nargs=2, metavar=("TOKENS", "METHOD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    if args.point:
        print(json.dumps(point(int(args.point[0]), args.point[1], args.shape)))
        return
    summary: dict = {"shape": args.shape}
    if args.only in (None, "short"):
        summary["short"] = run_short(
            args.maxima, args.methods, args.repeats, args.shape, args.prompt
        )
    if args.only in (None, "long"):
        summary["long"] = run_long(args.tokens, args.methods, args.timeout, args.shape)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
