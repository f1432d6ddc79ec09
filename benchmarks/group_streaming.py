"""Streaming groups vs batch after batch, on a long-tailed length distribution: tokens/s.

    python benchmarks/group_streaming.py [--model DIR [--gguf-file F]] [--prompts 16]
                                         [--group 8] [--batches 6] [--max-new-tokens 128]
                                         [--repeats 3] [--json out.json]

The same rows two ways, in this process, with the fast engine and max_batch_size = one batch's
rows (prompts x group):
  batches  `generate` on one batch after another (what rollout.async_unit=batch does): each
           batch waits for its longest row, its slots idling in the tail
  stream   one `FastEngine.stream` call over all the prompts, a new prompt taken whenever a
           group's slots free up (what rollout.async_unit=group does)
Rows are keyed by their index over the run in both (generate gets first_row), so both draw the
same random numbers and only the schedule differs: the completions are the same but where the
rows decoded together change a logit's fp32 rounding enough to flip a draw
(`identical_completions` says how many were). Prints completion tokens/s of each (median of
--repeats, interleaved), their ratio, the length distribution (median, p90, max) and how many
decode forwards each needed, as one JSON line. Sampling at
temperature 1 from the base model gives the long tail (lengths 1 to max_new_tokens).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.models.embedded import embedded_model_path
from rlvr.rollout import FastEngine, RolloutBatch, SamplingParams


def addition_prompts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.randint(100, 999)}+{rng.randint(100, 999)}=" for _ in range(count)]


class Supply:
    """GroupRequests over a fixed list of prompts."""

    def __init__(self, prompts: list[list[int]]) -> None:
        self.prompts, self.next = prompts, 0
        self.groups: dict[int, RolloutBatch] = {}

    def take(self, limit: int, wait: bool) -> list[list[int]]:
        out = self.prompts[self.next : self.next + limit]
        self.next += len(out)
        return out

    def done(self, index: int, batch: RolloutBatch) -> None:
        self.groups[index] = batch


class Counting:
    """Wraps the engine's decode step to count forwards."""

    def __init__(self, step) -> None:
        self.step, self.calls = step, 0

    def __call__(self, *args):
        self.calls += 1
        return self.step(*args)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a model directory (default: the embedded model)")
    parser.add_argument("--gguf-file")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per batch")
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt", default="", help="one prompt text for every row")
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    path = args.model or str(embedded_model_path())
    kw = {"gguf_file": args.gguf_file} if args.gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(path, **kw)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kw).eval()
    n, per = args.group, args.prompts
    engine = FastEngine(model, tokenizer, max_batch_size=per * n)
    counter = Counting(engine._decode)
    engine._decode = counter
    texts = (
        [args.prompt] * (per * args.batches)
        if args.prompt
        else addition_prompts(per * args.batches, 0)
    )
    prompts = [tokenizer(t)["input_ids"] for t in texts]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)

    def batches() -> tuple[list[str], list[int]]:
        out: list[str] = []
        lengths: list[int] = []
        gen = torch.Generator().manual_seed(1)
        seed_state = gen.get_state()
        for b in range(args.batches):
            gen.set_state(seed_state)  # one seed for the run: rows keyed by their index
            batch = engine.generate(prompts[b * per : (b + 1) * per], n, sampling, gen, b * per * n)
            out += batch.completion_text
            lengths += batch.completion_lengths
        return out, lengths

    def stream() -> tuple[list[str], list[int]]:
        supply = Supply(prompts)
        engine.stream(supply, n, sampling, torch.Generator().manual_seed(1))
        groups = [supply.groups[i] for i in sorted(supply.groups)]
        return [t for g in groups for t in g.completion_text], [
            x for g in groups for x in g.completion_lengths
        ]

    times: dict[str, list[float]] = {"batches": [], "stream": []}
    forwards: dict[str, int] = {}
    results: dict[str, list[str]] = {}
    lengths: dict[str, list[int]] = {}
    for repeat in range(args.repeats + 1):  # the first is a warm-up
        for name, run in (("batches", batches), ("stream", stream)):
            counter.calls = 0
            t0 = time.perf_counter()
            results[name], lengths[name] = run()
            elapsed = time.perf_counter() - t0
            forwards[name] = counter.calls
            if repeat:
                times[name].append(elapsed)
    same = sum(a == b for a, b in zip(results["batches"], results["stream"], strict=True))
    tokens = {name: sum(lengths[name]) for name in lengths}
    every = lengths["stream"]
    report = {
        "model": args.model or "embedded",
        "rows": len(every),
        "rows_decoded_together": per * n,
        "max_new_tokens": args.max_new_tokens,
        "length_median": statistics.median(every),
        "length_p90": sorted(every)[int(0.9 * (len(every) - 1))],
        "length_max": max(every),
        "identical_completions": same / len(every),
        "decode_forwards": forwards,
    }
    for name, seconds in times.items():
        report[f"{name}_tok_s"] = tokens[name] / statistics.median(seconds)
    report["stream_vs_batches"] = report["stream_tok_s"] / report["batches_tok_s"]
    text = json.dumps(report)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
