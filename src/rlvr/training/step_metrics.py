"""What a step's rollouts say, as metrics, and the audit files of its completions.

`rollout_metrics` gives the per-step reward, length, truncation, reasoning and group statistics
(docs/metrics.md); `write_samples` writes RUN_DIR/samples/step-N.jsonl, every completion of the
step with its reward and advantage, highest reward first; `ErrorLog` appends to
RUN_DIR/errors.jsonl the completions whose verifier or environment failed, in training and in
held-out evaluation (`error_rows`), and warns when most of a step's completions failed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from rlvr.algorithms import group_stats
from rlvr.observe.diagnostics import failure_warning
from rlvr.observe.metrics import JsonlWriter, percentile
from rlvr.reward_model.agreement import learned_reward_agreement
from rlvr.rewards.base import Failure, first_tracebacks
from rlvr.rewards.exact import is_reasoning
from rlvr.rollout import ToolRecord
from rlvr.rollout.multi_turn import environment_metrics
from rlvr.training.collect import ScoredRollouts

ERRORS_PER_STEP = 32  # errors.jsonl lines per step, phase and kind; the counts stay exact
FAILURE_KINDS = ("verifier", "environment")


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
    group_size = len(batch) // max(1, len(set(batch.group_ids.tolist())))
    m.update(  # a learned reward (rm:PATH) against the rule verifiers beside it
        learned_reward_agreement(
            scored.components, group_size, scored.completions, scored.verifier_failures
        )
    )
    if batch.tools is not None:
        m.update(tool_metrics(batch.tools))
        # over every round of the step, as verifier_failures
        m["environment_failures"] = sum(f.kind == "environment" for f in scored.errors)
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
        **environment_metrics(records),
    }


def write_samples(
    run_dir: Path,
    step: int,
    scored: ScoredRollouts,
    advantages: torch.Tensor,
    judged: Callable[[str, Mapping[str, Any]], dict[str, str]] | None = None,
) -> None:
    """samples/step-N.jsonl: every completion of the step, highest reward first; with an LLM
    judge (`judged`: rlvr.rewards.judge.judge_answers) its answers by judge name, "judge".
    A critic's
    per-token advantages [N, T] are written as the first completion token's (A_0: how much better
    the completion went than the critic expected of the prompt)."""
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
                "advantage": float(advantages[i] if advantages.dim() == 1 else advantages[i, 0]),
                "finish_reason": scored.batch.finish_reason[i],
            }
        )
        answers = judged(scored.batch.completion_text[i], s) if judged is not None else None
        if answers:
            rows[-1]["judge"] = answers
        if scored.batch.tools is not None:  # the transcript, tool output marked as "env"
            record = scored.batch.tools[i]
            rows[-1]["tool_calls"] = record.calls
            rows[-1]["turns"] = record.turns
            rows[-1]["transcript"] = [{"from": who, "text": t} for who, t in record.transcript]
            if record.metrics:
                rows[-1]["env_metrics"] = dict(record.metrics)
    rows.sort(key=lambda r: -r["reward"])
    with (out / f"step-{step}.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def error_rows(
    step: int,
    phase: str,
    failures: Sequence[Failure],
    seen: set[str],
    limit: int = ERRORS_PER_STEP,
) -> list[dict[str, Any]]:
    """errors.jsonl lines of one step's failures in one phase ("train", "eval"), in row order.

    Per kind at most `limit` lines: first the first record of each error (`Failure.key`) that
    is not in `seen`, then the others in row order. A line carries its traceback only when its
    error was not in `seen`; `seen` gains the keys of the lines written (so each error's
    traceback is written once per run)."""
    rows = []
    for kind in FAILURE_KINDS:
        mine = sorted((f for f in failures if f.kind == kind), key=lambda f: f.row)
        first, met = [], set(seen)
        for i, f in enumerate(mine):
            if f.key not in met:
                met.add(f.key)
                first.append(i)
        taken = set(first)
        order = first + [i for i in range(len(mine)) if i not in taken]
        chosen = [mine[i] for i in sorted(order[:limit])]
        for f in first_tracebacks(chosen, seen):
            rows.append(
                {
                    "step": step,
                    "phase": phase,
                    "kind": f.kind,
                    "sample_id": _plain_id(f.sample_id),
                    "row": f.row,
                    "component": f.component,
                    "error": f.error,
                    "traceback": f.traceback,
                }
            )
    return sorted(rows, key=lambda r: (r["row"], r["kind"]))


def _plain_id(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


class ErrorLog:
    """RUN_DIR/errors.jsonl: one JSON object per failed completion (`error_rows`: capped per
    step, each error's traceback once per run), appended and flushed line by line, so a crash
    loses nothing written; the file is made at the first failure (a run where nothing fails
    has none), kept by a resumed run and removed by a fresh one (`fresh`). When more than half
    of a step's completions failed in the verifier or the environment, `warn` gets one
    warning line per error and phase for the whole run (`failure_warning`). Only rank 0
    (`main`) writes and warns."""

    def __init__(
        self,
        run_dir: Path,
        *,
        main: bool = True,
        fresh: bool = False,
        warn: Callable[[str], None] = print,
        limit: int = ERRORS_PER_STEP,
    ) -> None:
        self.path, self.main, self.warn, self.limit = run_dir / "errors.jsonl", main, warn, limit
        if main and fresh:
            self.path.unlink(missing_ok=True)
        self.writer: JsonlWriter | None = None
        self.seen: set[str] = set()  # errors whose traceback has been written
        self.warned: set[tuple[str, str]] = set()  # (phase, error) warned about

    def write(self, step: int, phase: str, failures: Sequence[Failure], completions: int) -> None:
        """The failures of `completions` completions scored at `step` in `phase`."""
        if not self.main or not failures:
            return
        if self.writer is None:
            self.writer = JsonlWriter(self.path)
        for row in error_rows(step, phase, failures, self.seen, self.limit):
            self.writer.write(row)
        for kind in FAILURE_KINDS:
            mine = [f for f in failures if f.kind == kind]
            if not mine:
                continue
            key = Counter(f.key for f in mine).most_common(1)[0][0]
            same = [f for f in mine if f.key == key]
            traced = any(f.traceback is not None for f in same)
            warning = failure_warning(
                step, kind, len(mine), completions, same[0].error, phase=phase, traceback=traced
            )
            if warning is not None and (phase, key) not in self.warned:
                self.warned.add((phase, key))
                self.warn(warning.line())

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
