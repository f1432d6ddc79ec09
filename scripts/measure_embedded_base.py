"""Measure the embedded base model on held-out addition problems.

    python scripts/measure_embedded_base.py [--model DIR] [--problems 500] [--rl-steps 150]

Reports what makes the model a useful R1-Zero miniature:
- greedy accuracy (low: direct answers drop carries);
- temperature-1 pass@1 and pass@k, and the fraction of samples that start `<think>`;
- accuracy once a completion is forced to start with `<think>` (greedy and temperature 1),
  the headroom RL can reach by reasoning more often;
- mean completion length (tokens, EOS included) of direct vs reasoning completions.
With --rl-steps N it also runs N steps of a minimal on-policy GRPO (verifier reward, group-
normalised advantages, sequence log-likelihood loss) from the base model and re-measures, a
cheap check that RL has headroom. --json writes the metrics to a file.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.data.tasks.addition import THINK_OPEN, AdditionTask, carry_dropped_sum
from rlvr.models.embedded import embedded_model_path
from rlvr.rewards.exact import exact_answer_reward, is_reasoning


def sample_completions(model, tokenizer, prompts, n, temperature, prefix="", max_new_tokens=48):
    """n completions per prompt: (text, token ids incl. EOS, stopped at EOS) triples.

    `prefix` is appended to every prompt (e.g. "<think>") and counted as part of the completion.
    temperature 0 = greedy. All prompts of one AdditionTask share a length, so no padding.
    """
    ids = torch.tensor([tokenizer.encode(p + prefix) for p in prompts])
    kwargs = {"do_sample": False}
    if temperature > 0:
        kwargs = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            num_return_sequences=n,
            **kwargs,
        )
    results = []
    eos = tokenizer.eos_token_id
    for row in out[:, ids.shape[1] :].tolist():
        stopped = eos in row
        row = row[: row.index(eos) + 1] if stopped else row
        text = prefix + tokenizer.decode(row, skip_special_tokens=True)
        prefix_ids = tokenizer.encode(prefix) if prefix else []
        results.append((text, prefix_ids + row, stopped))
    return results


def measure(model, tokenizer, samples, k=8, batch=100) -> dict:
    model.eval()
    rows = {"greedy": [], "t1": [], "think_greedy": [], "think_t1": []}
    for i in range(0, len(samples), batch):
        chunk = samples[i : i + batch]
        prompts = [s["prompt"] for s in chunk]
        for name, n, temp, prefix in [
            ("greedy", 1, 0.0, ""),
            ("t1", k, 1.0, ""),
            ("think_greedy", 1, 0.0, THINK_OPEN),
            ("think_t1", 1, 1.0, THINK_OPEN),
        ]:
            outs = sample_completions(model, tokenizer, prompts, n, temp, prefix)
            for j, (text, completion_ids, _) in enumerate(outs):
                reward = exact_answer_reward(text, chunk[j // n])
                rows[name].append((j // n + i, reward, text, len(completion_ids)))

    def acc(name):
        return statistics.fmean(r[1] for r in rows[name])

    t1 = rows["t1"]
    by_problem: dict[int, list[float]] = {}
    for p, r, _, _ in t1:
        by_problem.setdefault(p, []).append(r)
    reasoning = [r for r in t1 if is_reasoning(r[2])]
    direct = [r for r in t1 if not is_reasoning(r[2])]

    def mean_or_none(xs):
        return round(statistics.fmean(xs), 4) if xs else None

    def carry_dropped(sample):
        a, b = (int(x) for x in sample["prompt"].rstrip("=").split("+"))
        return carry_dropped_sum(a, b, len(str(a)))

    greedy_direct = [r for r in rows["greedy"] if not is_reasoning(r[2])]
    return {
        "problems": len(samples),
        "greedy_accuracy": acc("greedy"),
        "greedy_think_fraction": statistics.fmean(is_reasoning(r[2]) for r in rows["greedy"]),
        # how systematic the base error is: greedy direct answers that are exactly carry-dropped
        "greedy_direct_is_carry_dropped": mean_or_none(
            [r[2].strip() == carry_dropped(samples[r[0]]) for r in greedy_direct]
        ),
        "t1_pass@1": acc("t1"),
        f"t1_pass@{k}": statistics.fmean(max(v) for v in by_problem.values()),
        "t1_think_fraction": len(reasoning) / len(t1),
        "t1_accuracy_direct": mean_or_none([r[1] for r in direct]),
        "t1_accuracy_reasoning": mean_or_none([r[1] for r in reasoning]),
        "forced_think_greedy_accuracy": acc("think_greedy"),
        "forced_think_t1_accuracy": acc("think_t1"),
        "mean_length_direct_tokens": mean_or_none([r[3] for r in direct]),
        "mean_length_reasoning_tokens": mean_or_none([r[3] for r in reasoning]),
        "mean_length_forced_think_tokens": mean_or_none([r[3] for r in rows["think_greedy"]]),
        "example_direct": direct[0][2] if direct else None,
        "example_reasoning": reasoning[0][2] if reasoning else None,
    }


def grpo_check(model, tokenizer, task, steps, prompts_per_step=16, group=8, lr=1e-4, seed=0):
    """Minimal on-policy GRPO: A = (r - mean_group) / (std_group + 1e-4), loss = -A * log p(y).

    One gradient step per batch (ratio = 1), token-mean loss, no KL. Returns the log.
    """
    rng = random.Random(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    log = []
    for step in range(steps):
        samples = [task.sample_train(rng) for _ in range(prompts_per_step)]
        model.eval()
        outs = sample_completions(model, tokenizer, [s["prompt"] for s in samples], group, 1.0)
        rewards = torch.tensor(
            [exact_answer_reward(text, samples[j // group]) for j, (text, *_) in enumerate(outs)]
        ).view(prompts_per_step, group)
        adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)
        adv = adv.flatten()
        seqs, masks = [], []
        for j, (_, completion_ids, _) in enumerate(outs):
            p = tokenizer.encode(samples[j // group]["prompt"])
            seqs.append(p + completion_ids)
            masks.append([0] * len(p) + [1] * len(completion_ids))
        width = max(map(len, seqs))
        ids = torch.tensor([s + [tokenizer.pad_token_id] * (width - len(s)) for s in seqs])
        mask = torch.tensor([m + [0] * (width - len(m)) for m in masks], dtype=torch.float)
        model.train()
        # right padding only: causal attention never lets a real token see the padding
        logits = model(input_ids=ids).logits
        logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
        m = mask[:, 1:]
        loss = -(adv[:, None] * logp * m).sum() / m.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        think = statistics.fmean(is_reasoning(t) for t, *_ in outs)
        log.append({"step": step + 1, "reward": rewards.mean().item(), "think_fraction": think})
        if (step + 1) % 10 == 0:
            print(f"  grpo step {step + 1}: reward {rewards.mean():.3f} think {think:.2f}")
    model.eval()
    return log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="default: the embedded model")
    parser.add_argument("--problems", type=int, default=500)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rl-steps", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--record",
        action="store_true",
        help="store the base metrics in the model's build_info.json",
    )
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(args.seed)
    path = args.model or embedded_model_path()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    info = json.loads((path / "build_info.json").read_text())
    task = AdditionTask(digits=info["build_config"]["digits"], seed=args.seed)
    samples = task.heldout(args.problems)
    start = time.perf_counter()
    metrics = {"base": measure(model, tokenizer, samples, k=args.k)}
    print(json.dumps(metrics, indent=2), f"\n({time.perf_counter() - start:.0f}s)", flush=True)
    if args.rl_steps:
        start = time.perf_counter()
        metrics["grpo_log"] = grpo_check(model, tokenizer, task, args.rl_steps, seed=args.seed)
        metrics["after_grpo"] = measure(model, tokenizer, samples, k=args.k)
        metrics["grpo_seconds"] = round(time.perf_counter() - start, 1)
        print(json.dumps(metrics["after_grpo"], indent=2), f"\n({metrics['grpo_seconds']}s)")
    if args.json:
        args.json.write_text(json.dumps(metrics, indent=2) + "\n")
    if args.record:
        info["base_metrics"] = {k: v for k, v in metrics["base"].items() if "example" not in k}
        info["base_metrics_command"] = (
            f"scripts/measure_embedded_base.py --problems {args.problems}"
        )
        if args.rl_steps:
            info["grpo_check"] = {
                "steps": args.rl_steps,
                "seconds": metrics["grpo_seconds"],
                "after": {k: v for k, v in metrics["after_grpo"].items() if "example" not in k},
            }
        (path / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")


if __name__ == "__main__":
    main()
