"""Measure the embedded-tools base model on held-out multiplication problems.

    python scripts/measure_embedded_tools.py [--model DIR] [--problems 500] [--k 8] [--record]

The tool is emulated, not sandboxed (`tools_corpus.emulated_tool`): generation stops at
`</python>`; when the code is `print(x*y)` the observation `<output>{x*y}\\n</output>` is
appended (empty output for any other code) and generation continues, at most 2 calls.

Reports what makes the model a useful tool-use miniature:
- greedy: accuracy, tool-call fraction, and how often a direct answer is the carry-dropped
  product (the systematic error);
- temperature 1 (k samples a problem, no top-k/top-p): pass@1, pass@k, the fraction of
  completions that start with `<python>` and how it varies across problems (the per-problem
  count's variance over the binomial variance: ~1 when the decision ignores the problem, and
  the fraction on the problems with the smallest and largest products), accuracy of direct and
  tool completions, and for tool completions how often the code is exactly `print(a*b)` and the
  answer copies the output of the last call;
- the same tool figures with `<python>` forced (greedy and temperature 1): the headroom RL can
  reach by calling the tool more often;
- mean model-written tokens (EOS included, observation excluded) of each kind.
With --rl-steps N it also runs N steps of a minimal on-policy GRPO from the base model (verifier
reward, group-normalised advantages, sequence log-likelihood loss on the model's own tokens:
observations masked) and re-measures, a cheap check that RL has headroom.
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

from rlvr.data.tasks.multiplication import MultiplicationTask, tool_code
from rlvr.models.embedded import embedded_model_path
from rlvr.models.embedded.tools_corpus import Transcript, complete_with_tool, operands
from rlvr.rewards.exact import OUTPUT_CLOSE, OUTPUT_OPEN, PYTHON_OPEN, exact_answer_reward


def answer_copies_output(transcript: Transcript) -> bool:
    """The text after the last observation is exactly what that observation printed."""
    text = transcript.text
    start = text.rfind(OUTPUT_OPEN)
    end = text.rfind(OUTPUT_CLOSE)
    if start < 0 or end < start:
        return False
    printed = text[start + len(OUTPUT_OPEN) : end].strip()
    return bool(printed) and text[end + len(OUTPUT_CLOSE) :].strip() == printed


def mean_or_none(xs) -> float | None:
    xs = list(xs)
    return round(statistics.fmean(xs), 4) if xs else None


def tool_figures(rows: list[tuple[int, Transcript, float]], samples: list[dict]) -> dict:
    """Over completions that call the tool: code right, answer copied, accuracy, length."""
    calls = [(p, t, r) for p, t, r in rows if t.codes]
    return {
        "code_right": mean_or_none(
            t.codes[0] == tool_code(*operands(samples[p])) for p, t, _ in calls
        ),
        "one_call": mean_or_none(len(t.codes) == 1 for _, t, _ in calls),
        "answer_copies_output": mean_or_none(answer_copies_output(t) for _, t, _ in calls),
        "accuracy": mean_or_none(r for *_, r in calls),
        "mean_model_tokens": mean_or_none(t.model_tokens for _, t, _ in calls),
    }


def decode_all(model, tokenizer, samples, n, temperature, prefix="", batch=250):
    """(problem index, transcript, reward) for n completions of every sample."""
    rows = []
    for i in range(0, len(samples), batch):
        chunk = samples[i : i + batch]
        prompts = [s["prompt"] for s in chunk for _ in range(n)]
        outs = complete_with_tool(model, tokenizer, prompts, prefix=prefix, temperature=temperature)
        for j, t in enumerate(outs):
            p = i + j // n
            rows.append((p, t, exact_answer_reward(t.text, samples[p])))
    return rows


def measure(model, tokenizer, task: MultiplicationTask, samples: list[dict], k: int) -> dict:
    model.eval()
    greedy = decode_all(model, tokenizer, samples, 1, 0.0)
    t1 = decode_all(model, tokenizer, samples, k, 1.0)
    forced_greedy = decode_all(model, tokenizer, samples, 1, 0.0, PYTHON_OPEN)
    forced_t1 = decode_all(model, tokenizer, samples, 1, 1.0, PYTHON_OPEN)

    greedy_direct = [(p, t) for p, t, _ in greedy if not t.codes]
    starts_tool = [t.text.lstrip().startswith(PYTHON_OPEN) for _, t, _ in t1]
    per_problem = [0] * len(samples)
    for (p, _, _), s in zip(t1, starts_tool):
        per_problem[p] += s
    rate = statistics.fmean(starts_tool)
    binomial_var = k * rate * (1 - rate)
    by_product = sorted(range(len(samples)), key=lambda p: int(samples[p]["answer"]))
    half = len(samples) // 2
    passed: dict[int, float] = {}
    for p, _, r in t1:
        passed[p] = max(passed.get(p, 0.0), r)
    direct_t1 = [(p, t, r) for p, t, r in t1 if not t.codes]
    return {
        "problems": len(samples),
        "k": k,
        "greedy_accuracy": statistics.fmean(r for *_, r in greedy),
        "greedy_tool_fraction": statistics.fmean(bool(t.codes) for _, t, _ in greedy),
        "greedy_direct_is_carry_dropped": mean_or_none(
            t.text.strip() == task.direct_completion(*operands(samples[p]))
            for p, t in greedy_direct
        ),
        "t1_pass@1": statistics.fmean(r for *_, r in t1),
        f"t1_pass@{k}": statistics.fmean(passed.values()),
        "t1_tool_start_fraction": rate,
        "t1_tool_any_fraction": statistics.fmean(bool(t.codes) for _, t, _ in t1),
        "t1_tool_start_dispersion": (
            round(statistics.pvariance(per_problem) / binomial_var, 3) if binomial_var else None
        ),
        "t1_tool_start_fraction_small_products": statistics.fmean(
            per_problem[p] / k for p in by_product[:half]
        ),
        "t1_tool_start_fraction_large_products": statistics.fmean(
            per_problem[p] / k for p in by_product[half:]
        ),
        "t1_accuracy_direct": mean_or_none(r for *_, r in direct_t1),
        "t1_finished": statistics.fmean(t.finished for _, t, _ in t1),
        "t1_tool": tool_figures(t1, samples),
        "forced_tool_greedy": tool_figures(forced_greedy, samples),
        "forced_tool_t1": tool_figures(forced_t1, samples),
        "mean_model_tokens_direct": mean_or_none(t.model_tokens for _, t, _ in direct_t1),
        "example_direct": direct_t1[0][1].text if direct_t1 else None,
        "example_tool": next((t.text for _, t, _ in t1 if t.codes), None),
    }


def grpo_check(model, tokenizer, task, steps, prompts_per_step=16, group=8, lr=1e-4, seed=0):
    """Minimal on-policy GRPO: A = (r - mean_group) / (std_group + 1e-4), loss = -A * log p(y).

    log p(y) sums over the tokens the model wrote (observations masked). One gradient step per
    batch (ratio = 1), token-mean loss, no KL. Returns the log.
    """
    rng = random.Random(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    log = []
    for step in range(steps):
        samples = [task.sample_train(rng) for _ in range(prompts_per_step)]
        model.eval()
        prompts = [s["prompt"] for s in samples for _ in range(group)]
        outs = complete_with_tool(model, tokenizer, prompts, temperature=1.0)
        rewards = torch.tensor(
            [exact_answer_reward(t.text, samples[j // group]) for j, t in enumerate(outs)]
        ).view(prompts_per_step, group)
        adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)
        adv = adv.flatten()
        seqs, masks = [], []
        for prompt, t in zip(prompts, outs):
            p = tokenizer.encode(prompt)
            seqs.append(p + t.token_ids)
            masks.append([0] * len(p) + t.model_mask)
        width = max(map(len, seqs))
        ids = torch.tensor([s + [tokenizer.pad_token_id] * (width - len(s)) for s in seqs])
        mask = torch.tensor([m + [0] * (width - len(m)) for m in masks], dtype=torch.float)
        model.train()
        logits = model(input_ids=ids).logits  # right padding: no real token sees it
        logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
        m = mask[:, 1:]
        loss = -(adv[:, None] * logp * m).sum() / m.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        tool = statistics.fmean(bool(t.codes) for t in outs)
        log.append({"step": step + 1, "reward": rewards.mean().item(), "tool_fraction": tool})
        if (step + 1) % 10 == 0:
            print(f"  grpo step {step + 1}: reward {rewards.mean():.3f} tool {tool:.2f}")
    model.eval()
    return log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="default: embedded-tools")
    parser.add_argument("--problems", type=int, default=500)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rl-steps", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--record", action="store_true", help="store the metrics in the model's build_info.json"
    )
    args = parser.parse_args()
    if args.record and args.rl_steps:
        parser.error("--record stores the base model's metrics: run it without --rl-steps")
    torch.set_num_threads(2)
    torch.manual_seed(args.seed)
    path = args.model or embedded_model_path("tools")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    task = MultiplicationTask(seed=args.seed)
    samples = task.heldout(args.problems)
    start = time.perf_counter()
    metrics = measure(model, tokenizer, task, samples, args.k)
    seconds = time.perf_counter() - start
    print(json.dumps(metrics, indent=2), f"\n({seconds:.0f}s)", flush=True)
    report = {"base": metrics}
    if args.rl_steps:
        start = time.perf_counter()
        report["grpo_log"] = grpo_check(model, tokenizer, task, args.rl_steps, seed=args.seed)
        report["after_grpo"] = measure(model, tokenizer, task, samples, args.k)
        report["grpo_seconds"] = round(time.perf_counter() - start, 1)
        print(json.dumps(report["after_grpo"], indent=2), f"\n({report['grpo_seconds']}s)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.record:
        info_path = path / "build_info.json"
        info = json.loads(info_path.read_text())
        info["base_metrics"] = {k: v for k, v in metrics.items() if "example" not in k}
        info["base_metrics_command"] = (
            f"scripts/measure_embedded_tools.py --problems {args.problems} --k {args.k} "
            f"--seed {args.seed}"
        )
        info_path.write_text(json.dumps(info, indent=2) + "\n")


if __name__ == "__main__":
    main()
