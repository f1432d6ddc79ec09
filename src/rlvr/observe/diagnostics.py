"""Run diagnostics: known GRPO failure modes read off the metric history, each with a fix.

`diagnose(history)` looks at the per-step metric rows written so far (oldest first) and returns
the warnings that hold at the latest step. Each check is a small function; thresholds are
arguments with defaults chosen from what practitioners report, not tuned on one run.

`failure_warning` is the one warning that needs more than the metrics: the error that made most
of a step's completions fail in the verifier or the environment, quoted from the step's failure
records (errors.jsonl, written by rlvr.training.step_metrics.ErrorLog, which calls it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Diagnostic:
    name: str
    step: int
    metric: str
    value: float
    message: str

    def line(self) -> str:
        """'warning [name] step N: metric=value: message' ('metric=value: ' left out when
        `metric` is empty: the message says it)."""
        head = f"warning [{self.name}] step {self.step}"
        if self.metric:
            head += f": {self.metric}={self.value:.4g}"
        return f"{head}: {self.message}"


def _series(history: Sequence[Row], key: str) -> list[float]:
    return [float(r[key]) for r in history if key in r and r[key] is not None]


def non_finite_loss(history: Sequence[Row]) -> Diagnostic | None:
    last = history[-1]
    for key in ("loss", "grad_norm"):
        value = last.get(key)
        if value is not None and not math.isfinite(float(value)):
            return Diagnostic(
                "non_finite",
                last["step"],
                key,
                float(value),
                "NaN/inf in the update; lower optimizer.lr, keep "
                "optimizer.max_grad_norm > 0, or use fp32",
            )
    return None


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def entropy_collapse(
    history: Sequence[Row],
    floor: float = 0.01,
    window: int = 10,
    drop: float = 0.5,
    persist: int = 5,
    stall: float = 0.02,
    ceiling: float = 0.9,
) -> Diagnostic | None:
    """Entropy below `floor` nats for `persist` steps in a row; or its `window`-step mean below
    (1 - `drop`) times its mean over the run's first `window` steps, at each of the last
    `persist` steps, while the reward stalled (its `window`-step mean rose less than `stall`
    over the `window` steps before) below `ceiling` (a reward mean at or above it, near the top
    of the usual 0-1 verifiers, is a solved task: falling entropy there is convergence).

    Judged on means, not single steps: with a few prompts per step the per-step entropy swings
    by a factor of several around a stable level (0.2-1.2 nats with 8 prompts), which a
    step-to-step comparison reads as a collapse. A 10-step mean of such noise moves ~0.1 nats,
    so a real fall stands out, and `persist` steps in a row rule out a chance dip."""
    ent = _series(history, "entropy")
    if len(ent) < persist:
        return None
    step = history[-1]["step"]
    if all(v < floor for v in ent[-persist:]):
        return Diagnostic(
            "entropy_collapse",
            step,
            "entropy",
            ent[-1],
            "the policy is nearly deterministic; exploration has stopped. Raise "
            "rollout.temperature, add algorithm.entropy_coef, or use "
            "algorithm.clip_ratio_high=0.28 (clip-higher)",
        )
    reward = _series(history, "reward_mean")
    if len(ent) < max(2 * window, window + persist - 1) or len(reward) < 2 * window:
        return None
    early = _mean(ent[:window])
    # The window-step mean at each of the last `persist` steps (oldest windows may overlap the
    # early one when the run is short; the latest never does).
    recent = [_mean(ent[len(ent) - k - window : len(ent) - k]) for k in range(persist)]
    # A fast fall while reward still climbs is the policy converging, not collapsing.
    recent_reward = _mean(reward[-window:])
    stalled = recent_reward - _mean(reward[-2 * window : -window]) < stall
    stalled = stalled and recent_reward < ceiling
    if early > 0 and all(r < (1 - drop) * early for r in recent) and stalled:
        return Diagnostic(
            "entropy_collapse",
            step,
            f"entropy ({window}-step mean)",
            recent[0],
            f"more than {drop:.0%} below the first {window} steps' mean ({early:.3g}) for "
            f"{persist} steps while the reward stalled; consider clip-higher or a lower "
            "learning rate",
        )
    return None


def zero_variance_groups(
    history: Sequence[Row], threshold: float = 0.8, window: int = 5
) -> Diagnostic | None:
    """Most groups all-equal for `window` steps: the effective batch has shrunk."""
    z = _series(history, "zero_std_group_fraction")
    if len(z) >= window and all(v > threshold for v in z[-window:]):
        return Diagnostic(
            "zero_variance_groups",
            history[-1]["step"],
            "zero_std_group_fraction",
            z[-1],
            "most groups carry no gradient; enable "
            "algorithm.dynamic_sampling, raise rollout.group_size, or filter "
            "prompts that are always solved or never solved",
        )
    return None


def length_inflation(
    history: Sequence[Row], window: int = 20, growth: float = 0.5, flat: float = 0.02
) -> Diagnostic | None:
    """Completion length up by more than `growth` (relative) over `window` steps while the
    reward moved less than `flat`."""
    length = _series(history, "completion_length_mean")
    reward = _series(history, "reward_mean")
    if len(length) <= window or len(reward) <= window or length[-window - 1] <= 0:
        return None
    grew = length[-1] / length[-window - 1] - 1
    if grew > growth and reward[-1] - reward[-window - 1] < flat:
        return Diagnostic(
            "length_inflation",
            history[-1]["step"],
            "completion_length_mean",
            length[-1],
            "length rises but reward does not; try "
            "algorithm.loss_aggregation=seq_mean_token_sum_norm (Dr. GRPO) or "
            "reward.overlong_buffer",
        )
    return None


def reward_hacking(
    history: Sequence[Row], min_evals: int = 2, rise: float = 0.1
) -> Diagnostic | None:
    """Training reward up by `rise` between the last two held-out evaluations while held-out
    accuracy did not improve."""
    evals = [r for r in history if "eval_accuracy" in r]
    if len(evals) < min_evals:
        return None
    a, b = evals[-2], evals[-1]
    train_a = _window_mean(history, a["step"])
    train_b = _window_mean(history, b["step"])
    if train_b - train_a > rise and b["eval_accuracy"] <= a["eval_accuracy"]:
        return Diagnostic(
            "reward_hacking",
            b["step"],
            "eval_accuracy",
            float(b["eval_accuracy"]),
            "training reward rises while held-out accuracy does not; audit "
            "samples/step-N.jsonl for answers the verifier wrongly accepts",
        )
    return None


def _window_mean(history: Sequence[Row], step: int, width: int = 5) -> float:
    vals = [
        float(r["reward_mean"])
        for r in history
        if "reward_mean" in r and step - width < r["step"] <= step
    ]
    return sum(vals) / len(vals) if vals else 0.0


def clip_fraction_high(
    history: Sequence[Row], threshold: float = 0.2, window: int = 5
) -> Diagnostic | None:
    c = _series(history, "clip_fraction")
    if len(c) >= window and all(v > threshold for v in c[-window:]):
        return Diagnostic(
            "clip_fraction_high",
            history[-1]["step"],
            "clip_fraction",
            c[-1],
            "updates keep hitting the clip bounds; lower optimizer.lr or training.ppo_epochs",
        )
    return None


def off_policy_drift(
    history: Sequence[Row], clip_threshold: float = 0.05, window: int = 5
) -> Diagnostic | None:
    """With off-policy rollouts: more than `clip_threshold` of the tokens had an importance
    ratio above algorithm.tis_cap for `window` steps in a row — the policy moves too far in one
    update for a one-step-stale sampler, and the capped weights bias the gradient."""
    c = _series(history, "tis_clip_fraction")
    if len(c) >= window and all(v > clip_threshold for v in c[-window:]):
        return Diagnostic(
            "off_policy_drift",
            history[-1]["step"],
            "tis_clip_fraction",
            c[-1],
            "the stale sampler's policy is far from the learner's; lower optimizer.lr, or "
            "set rollout.max_staleness=0 (and rollout.off_policy_steps=0)",
        )
    return None


def tool_failures(
    history: Sequence[Row],
    timeout_threshold: float = 0.1,
    error_threshold: float = 0.5,
    window: int = 3,
    min_calls: int = 4,
) -> Diagnostic | None:
    """Multi-turn rollouts: for `window` steps in a row (each with at least `min_calls` tool
    calls) more than `timeout_threshold` of the calls were killed at their time limit, or more
    than `error_threshold` failed. Timeouts cost their whole limit each and slow every step;
    calls that keep failing teach the model that the tool does not help."""
    rows = [r for r in history if r.get("tool_calls", 0) >= min_calls][-window:]
    if len(rows) < window or rows[-1] is not history[-1]:
        return None
    if all(float(r.get("tool_timeout_fraction", 0.0)) > timeout_threshold for r in rows):
        return Diagnostic(
            "tool_timeouts",
            history[-1]["step"],
            "tool_timeout_fraction",
            float(rows[-1]["tool_timeout_fraction"]),
            "tool calls keep hitting environment.timeout_s; raise it, or read samples/ for "
            "loops the model writes",
        )
    if all(float(r.get("tool_error_fraction", 0.0)) > error_threshold for r in rows):
        return Diagnostic(
            "tool_errors",
            history[-1]["step"],
            "tool_error_fraction",
            float(rows[-1]["tool_error_fraction"]),
            "most tool calls fail; read the transcripts in samples/ (a tool's own errors are "
            "there; errors.jsonl has the traceback of a step that raised) and check the "
            "tool's limits (environment.memory_mb, environment.timeout_s)",
        )
    return None


LEARNED_PREFIX = "rm:"  # a learned reward's component name (rlvr.rewards.spec.LEARNED_PREFIX)


def _components(row: Row) -> tuple[list[str], list[str]]:
    """(learned, rule) component names with a reward/<name>_mean in `row`."""
    means = [k[len("reward/") : -len("_mean")] for k in row if k.startswith("reward/")]
    names = [n for n in means if f"reward/{n}_std" in row]  # a component logs both
    learned = [n for n in names if n.startswith(LEARNED_PREFIX)]
    return learned, [n for n in names if not n.startswith(LEARNED_PREFIX)]


def learned_reward_hacking(
    history: Sequence[Row],
    window: int = 10,
    rise: float = 0.25,
    flat: float = 0.02,
    ceiling: float = 0.95,
) -> Diagnostic | None:
    """A learned reward (a component `rm:PATH`) whose mean over the last `window` steps is more
    than `rise` of its typical spread above its mean over the `window` steps before (the
    spread: the mean of reward/<rm>_std over those 2 x `window` steps, since a reward model's
    scale is its own), while a rule verifier beside it (reward/<rule>_mean: exact_answer at
    weight 0 watches) rose by less than `flat` and stays below `ceiling` (a solved rule
    cannot rise). The policy is then learning what the reward model likes and the task does
    not: reward hacking, visible because the rule is logged. Measured (docs/guides/
    reward-models.md): with rise 0.25 it fires at step 35 of a run whose training accuracy then
    fell from 0.72 to 0.10, and at step 44 of one that stalled at 0.7 (the rule alone: 0.99);
    0.5 fires on neither."""
    last = history[-1]
    learned, rules = _components(last)
    if not learned or not rules:
        return None
    name = learned[0]
    mean = _series(history, f"reward/{name}_mean")
    spread = _series(history, f"reward/{name}_std")
    if len(mean) < 2 * window or len(spread) < 2 * window:
        return None
    scale = _mean(spread[-2 * window :])
    gain = _mean(mean[-window:]) - _mean(mean[-2 * window : -window])
    if scale <= 0 or gain <= rise * scale:
        return None
    for rule in rules:
        values = _series(history, f"reward/{rule}_mean")
        if len(values) < 2 * window:
            continue
        recent = _mean(values[-window:])
        if recent - _mean(values[-2 * window : -window]) < flat and recent < ceiling:
            return Diagnostic(
                "learned_reward_hacking",
                last["step"],
                f"reward/{rule}_mean ({window}-step mean)",
                recent,
                f"the learned reward {name} rose by {gain / scale:.2g} of its spread over "
                f"{window} steps while {rule} did not; the policy may be exploiting the reward "
                "model. Read samples/step-N.jsonl, give the rule a weight, retrain the reward "
                "model on the policy's own completions, or lower optimizer.lr",
            )
    return None


def learned_reward_disagreement(
    history: Sequence[Row], threshold: float = 0.5, window: int = 5
) -> Diagnostic | None:
    """The learned reward ranks completions against a rule verifier for `window` steps in a
    row: reward/agreement/<rule> (within-group ranking agreement, rlvr.reward_model.agreement)
    below `threshold` (0.5 = chance) at each of the last `window` steps."""
    last = history[-1]
    for key in (k for k in last if k.startswith("reward/agreement/")):
        rows = history[-window:]
        if len(rows) < window or any(r.get(key) is None for r in rows):
            continue
        values = [float(r[key]) for r in rows]
        if all(v < threshold for v in values):
            rule = key.removeprefix("reward/agreement/")
            return Diagnostic(
                "learned_reward_disagreement",
                last["step"],
                key,
                values[-1],
                f"the learned reward prefers what {rule} rejects in most groups; the reward "
                "model does not measure the task on these completions: retrain it on the "
                "policy's own completions",
            )
    return None


def failure_warning(
    step: int,
    kind: str,
    failed: int,
    total: int,
    error: str,
    *,
    phase: str = "train",
    traceback: bool = True,
    threshold: float = 0.5,
) -> Diagnostic | None:
    """More than `threshold` of a step's `total` completions failed in the `kind` ("verifier"
    or "environment"): a Diagnostic named `<kind>_failures` (`eval_<kind>_failures` for the
    held-out evaluation, `phase` "eval") that quotes `error`, the failures' most common error
    line, and says where its `traceback` is (when it has one). None otherwise (no completion,
    or `failed` at most threshold x total)."""
    if total <= 0 or failed <= threshold * total:
        return None
    prefix, what = ("eval_", "held-out completions") if phase == "eval" else ("", "completions")
    where = "errors.jsonl has the traceback" if traceback else "errors.jsonl lists them"
    return Diagnostic(
        f"{prefix}{kind}_failures",
        step,
        "",
        float(failed),
        f"{failed} of {total} {what} failed in the {kind}: {error} ({where})",
    )


CHECKS = (
    non_finite_loss,
    entropy_collapse,
    zero_variance_groups,
    length_inflation,
    reward_hacking,
    clip_fraction_high,
    off_policy_drift,
    tool_failures,
    learned_reward_hacking,
    learned_reward_disagreement,
)


def diagnose(history: Sequence[Row]) -> list[Diagnostic]:
    """Every check that fires at the latest row of `history`."""
    if not history:
        return []
    return [d for check in CHECKS if (d := check(history)) is not None]
