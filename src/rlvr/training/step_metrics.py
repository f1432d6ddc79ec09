"""What a step's rollouts say, as metrics, and the audit file of its completions.

`rollout_metrics` gives the per-step reward, length, truncation, reasoning and group statistics
(docs/metrics.md); `write_samples` writes RUN_DIR/samples/step-N.jsonl, every completion of the
step with its reward and advantage, highest reward first.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rlvr.algorithms import group_stats
from rlvr.observe.metrics import percentile
from rlvr.rewards.exact import is_reasoning
from rlvr.rollout import ToolRecord
from rlvr.training.collect import ScoredRollouts


def rollout_metrics(scored: ScoredRollouts, dynamic_sampling_target: int = 0) -> dict[str, float]:
    """The step's rollout metrics; with dynamic sampling (its target of informative groups
    given) also how full the batch got and in how many rounds."""
    batch, rewards = scored.batch, scored.rewards
    lengths = batch.completion_lengths
    correct = [ln for ln, r in zip(lengths, rewards.tolist()) if r >= 1.0]
    wrong = [ln for ln, r in zip(lengths, rewards.tolist()) if r < 1.0]
    m: dict[str, float] = {
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std(unbiased=False)),
        "verifier_failures": scored.verifier_failures,
        "completion_length_mean": sum(lengths) / len(lengths),
        "completion_length_p95": percentile(lengths, 95),
        "completion_length_max": max(lengths),
        "completion_length_correct_mean": sum(correct) / len(correct) if correct else float("nan"),
        "completion_length_incorrect_mean": sum(wrong) / len(wrong) if wrong else float("nan"),
        "truncated_fraction": sum(batch.truncated) / len(batch),
        "reasoning_fraction": sum(is_reasoning(t) for t in batch.completion_text) / len(batch),
    }
    m.update({k: float(v) for k, v in group_stats(rewards, batch.group_ids).items()})
    for name, values in scored.components.items():
        t = torch.tensor(values)
        m[f"reward/{name}_mean"] = float(t.mean())
        m[f"reward/{name}_std"] = float(t.std(unbiased=False))
    if batch.tools is not None:
        m.update(tool_metrics(batch.tools))
    if dynamic_sampling_target:
        m["dynamic_sampling_fill_rate"] = scored.groups_kept / dynamic_sampling_target
        m["dynamic_sampling_rounds"] = scored.rounds
    return m


def tool_metrics(records: list[ToolRecord]) -> dict[str, float]:
    """Multi-turn rollouts: what the environments did this step (docs/metrics.md)."""
    n = len(records)
    calls = sum(r.calls for r in records)
    seconds = sum(r.seconds for r in records)
    return {
        "tool_calls_per_completion": calls / n,
        "tool_call_fraction": sum(r.calls > 0 for r in records) / n,
        "tool_calls": calls,
        "tool_errors": sum(r.errors for r in records),
        "tool_timeouts": sum(r.timeouts for r in records),
        "tool_error_fraction": sum(r.errors for r in records) / calls if calls else 0.0,
        "tool_timeout_fraction": sum(r.timeouts for r in records) / calls if calls else 0.0,
        "tool_seconds": seconds,
        "tool_seconds_per_call": seconds / calls if calls else 0.0,
        "turns_mean": sum(r.turns for r in records) / n,
    }


def write_samples(
    run_dir: Path, step: int, scored: ScoredRollouts, advantages: torch.Tensor
) -> None:
    """samples/step-N.jsonl: every completion of the step, highest reward first."""
    out = run_dir / "samples"
    out.mkdir(exist_ok=True)
    rows = []
    for i in range(len(scored.batch)):
        s = scored.samples[i]
        rows.append(
            {
                "step": step,
                "group": int(scored.batch.group_ids[i]),
                "prompt": s["prompt"],
                "completion": scored.batch.completion_text[i],
                "answer": s.get("answer"),
                "reward": float(scored.rewards[i]),
                "advantage": float(advantages[i]),
                "finish_reason": scored.batch.finish_reason[i],
            }
        )
        if scored.batch.tools is not None:  # the transcript, tool output marked as "env"
            record = scored.batch.tools[i]
            rows[-1]["tool_calls"] = record.calls
            rows[-1]["turns"] = record.turns
            rows[-1]["transcript"] = [{"from": who, "text": t} for who, t in record.transcript]
    rows.sort(key=lambda r: -r["reward"])
    with (out / f"step-{step}.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
