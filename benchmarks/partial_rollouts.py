"""Partial rollouts: keep the K/V cache at a weight switch, or recompute it? Measured.

    python benchmarks/partial_rollouts.py [--switch-at 8 24] [--pairs 1 4 8] [--json out.json]

Trains the embedded default for a few steps (checkpoint after every update), then, for each
pair of consecutive versions (v, v+1) in --pairs, generates one training batch (16 prompts x
8 rows, T=1, 64 new tokens) with the fast engine starting on v and switching to v+1 at decode
forward --switch-at (the engine's `WeightFeed`), keeping the K/V cache. For the tokens sampled
after the switch it compares the log-probs the engine recorded (v+1's weights over v's cached
keys and values: what was actually sampled from) with two full forward passes:

  kl_keep_vs_recompute  mean k3 estimate of KL(keep || v+1 recomputed) per token: the error
                        keeping the cache makes against a recompute
  kl_one_update         the same against v: how far one update moves the policy (the scale)
  recompute_s           one forward over every unfinished row's prompt + tokens so far with
                        v+1's weights (what recomputing the cache at the switch costs)
  generate_s            the whole call, for comparison

k3 = (r - 1) - log r with r = p_other / p_keep, averaged over tokens sampled from p_keep
(Schulman's unbiased, non-negative estimator). Both estimates are over the same tokens.

The recorded log-probs are what the tokens were sampled with, so the importance correction
(algorithm.token_correction) is exact against the behaviour policy either way; keeping the
cache only makes that behaviour a blend of v and v+1 for a few tokens after the switch.
Prints one JSON object as its last line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def train(run: Path, steps: int) -> None:
    cmd = [sys.executable, "-m", "rlvr", "train", f"training.steps={steps}", "eval.size=0"]
    cmd += ["checkpoint.every=1", f"checkpoint.keep_last={steps}", "--output-dir", str(run)]
    subprocess.run([*cmd, "--quiet"], check=True, capture_output=True)


def k3(logp_keep: torch.Tensor, logp_other: torch.Tensor) -> float:
    log_r = (logp_other - logp_keep).double()
    return float((log_r.exp() - 1 - log_r).mean())


def full_logprobs(model, prompt: torch.Tensor, completion: torch.Tensor) -> torch.Tensor:
    ids = torch.cat([prompt, completion])[None]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()[prompt.numel() - 1 : -1]
    return logits.log_softmax(-1).gather(1, completion[:, None])[:, 0]


class Switch:
    """WeightFeed: at forward `at`, copy `state` into `model`; records the unfinished rows'
    contexts at that moment through `on_switch`."""

    def __init__(self, model, state, at: int) -> None:
        self.model, self.state, self.at, self.polls, self.version = model, state, at, 0, 0

    def poll(self) -> bool:
        self.polls += 1
        if self.polls != self.at:
            return False
        self.model.load_state_dict(self.state)
        self.version = 1
        return True


def measure(run: Path, v: int, switch_at: int, prompts: list[torch.Tensor]) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.rollout import FastEngine, SamplingParams

    path = run / "checkpoints"
    old = AutoModelForCausalLM.from_pretrained(path / f"step-{v}").eval()
    new = AutoModelForCausalLM.from_pretrained(path / f"step-{v + 1}").eval()
    tokenizer = AutoTokenizer.from_pretrained(path / f"step-{v}")
    model = AutoModelForCausalLM.from_pretrained(path / f"step-{v}").eval()
    engine = FastEngine(model, tokenizer, max_batch_size=128)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=64)
    feed = Switch(model, new.state_dict(), switch_at)
    t0 = time.perf_counter()
    batch = engine.generate(prompts, 8, sampling, torch.Generator().manual_seed(v), feed=feed)
    generate_s = time.perf_counter() - t0
    keep, recomputed, before, contexts = [], [], [], []
    for row, versions in enumerate(batch.versions or []):
        after = versions == 1
        if not after.any():
            continue
        prompt, completion = batch.prompt_ids[row], batch.completion_ids[row]
        first = int(after.nonzero()[0])
        contexts.append(torch.cat([prompt, completion[:first]]))
        keep.append(batch.logprobs[row][after])
        recomputed.append(full_logprobs(new, prompt, completion)[after])
        before.append(full_logprobs(old, prompt, completion)[after])
    if not keep:
        return {"pair": [v, v + 1], "rows_switched": 0}
    width = max(c.numel() for c in contexts)
    padded = torch.full((len(contexts), width), tokenizer.pad_token_id or 0)
    for i, c in enumerate(contexts):
        padded[i, : c.numel()] = c
    t0 = time.perf_counter()
    with torch.no_grad():
        new(input_ids=padded, attention_mask=(padded != -1).long())
    recompute_s = time.perf_counter() - t0
    keep_t, new_t, old_t = torch.cat(keep), torch.cat(recomputed), torch.cat(before)
    return {
        "pair": [v, v + 1],
        "switch_at_forward": switch_at,
        "rows_switched": len(keep),
        "tokens_after_switch": int(keep_t.numel()),
        "kl_keep_vs_recompute": k3(keep_t, new_t),
        "kl_one_update": k3(keep_t, old_t),
        "max_abs_logprob_keep_vs_recompute": float((keep_t - new_t).abs().max()),
        "recompute_s": recompute_s,
        "generate_s": generate_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pairs", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--switch-at", type=int, nargs="+", default=[8, 24])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    import random

    from rlvr.config import load_config
    from rlvr.data.registry import build_task
    from rlvr.models.loading import load_tokenizer

    cfg = load_config(None, [])
    task = build_task(cfg.data)
    tokenizer = load_tokenizer(cfg.model.name_or_path)
    rng = random.Random(0)
    prompts = [torch.tensor(tokenizer.encode(task.sample_train(rng)["prompt"])) for _ in range(16)]
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        train(run, max(args.pairs) + 1)
        results = [measure(run, v, at, prompts) for v in args.pairs for at in args.switch_at]
    for r in results:
        print(
            f"v{r['pair'][0]}->v{r['pair'][1]} at forward {r.get('switch_at_forward')}: "
            f"{r['rows_switched']} rows, KL(keep||recompute) {r.get('kl_keep_vs_recompute', 0):.2e}"
            f" vs one update {r.get('kl_one_update', 0):.2e}; recompute "
            f"{r.get('recompute_s', 0):.3f} s of a {r.get('generate_s', 0):.3f} s call"
        )
    out = {"results": results}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
