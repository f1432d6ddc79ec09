"""Held-out evaluation with fixed decoding: greedy accuracy, pass@1 at temperature 1 and,
optionally (k > 0), pass@k, maj@k, per-source accuracy and accuracy within token budgets.

`heldout_eval` is the trainer's held-out evaluation of a run (`eval.*`, with the rollouts' stop
strings); `evaluate_config` builds the same evaluation from a config alone, as `rlvr train`
would before its first step (`rlvr eval --config`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from rlvr.data.registry import heldout_size
from rlvr.data.task import Task
from rlvr.observe.passk import maj_at_k, pass_at_k
from rlvr.rewards.base import Failure
from rlvr.rewards.exact import extract_final_answer, is_reasoning
from rlvr.rewards.scoring import Scorer
from rlvr.rollout.multi_turn import environment_metrics
from rlvr.rollout.types import Engine, SamplingParams


def evaluate(
    engine: Engine,
    samples: Sequence[Mapping[str, Any]],
    prompt_ids: Sequence[list[int]],
    verifier: Callable[[str, Mapping[str, Any]], float],
    *,
    max_new_tokens: int,
    t1_samples: int = 4,
    seed: int = 0,
    k: int = 0,
    budgets: Sequence[int] = (128, 256, 512),
    extract: Callable[[str], Any] = extract_final_answer,
    readings: Mapping[str, Callable[[str, Mapping[str, Any]], float]] | None = None,
    stop: Sequence[str] = (),
    failures: list[Failure] | None = None,
) -> dict[str, float]:
    """Score a model on held-out samples.

    accuracy            greedy decoding, fraction of problems with reward >= 1 (reward == 1
                        for binary verifiers)
    pass1_t1            mean reward over `t1_samples` samples per problem at temperature 1
                        (an unbiased pass@1 estimate at T=1)
    reasoning_fraction  fraction of the temperature-1 completions that open a <think> block
    reasoning_fraction_greedy  the same for the greedy completions
    mean_length         mean completion length of the temperature-1 completions, tokens
    mean_length_greedy  the same for the greedy completions
    truncated_fraction  fraction of temperature-1 completions cut at max_new_tokens
    n                   number of problems
    tool_call_fraction  multi-turn rollouts (an environment): fraction of the temperature-1
                        completions with at least one tool call; also tool_calls_mean,
                        turns_mean, and the three again for the greedy completions (_greedy)
    accuracy_<name>     for each (name, verifier) of `readings`: greedy accuracy under that
                        verifier (`rlvr eval` passes {"lenient": math_lenient} for math tasks)

    With k > 0 (default 0: off, and the keys above are all there is), m = max(k, t1_samples)
    temperature-1 samples are drawn per problem (the keys above then use all m of them), plus:

    pass@1, pass@k      mean over problems of the unbiased estimator 1 - C(m-c, k) / C(m, k)
                        (rlvr.observe.passk.pass_at_k), c = samples with reward >= 1
    maj@k               fraction of problems whose majority-voted answer over the first k
                        samples is correct; answers come from `extract` (default: the exact
                        verifier's strict integer extraction), None answers do not vote, ties
                        go to the answer seen first (rlvr.observe.passk.maj_at_k)
    accuracy/<source>   greedy accuracy over the problems with that sample["source"] (only for
                        samples that carry a "source")
    accuracy_within_<b> for each b in `budgets`: fraction of problems whose greedy completion is
                        correct AND at most b tokens long

    With t1_samples = 0 and k = 0 no temperature-1 sample is drawn: only the greedy keys
    (accuracy, reasoning_fraction_greedy, mean_length_greedy, the _greedy tool keys, the
    readings) and n are reported, and pass1_t1, reasoning_fraction, mean_length,
    truncated_fraction and tool_call_fraction are absent.

    Failing user code is contained as in training (rlvr.rewards.scoring.Scorer, the multi-turn
    engine): a completion whose verifier or environment fails scores 0. Then
    verifier_failures   completions (greedy and temperature-1) whose verifier failed; only
                        present when one did, so a run where nothing fails keeps its keys
    environment_failures  multi-turn rollouts: completions whose environment failed (always
                        present with the tool keys)
    and each failure's record is appended to `failures` when given (rows: the greedy ones
    0..n-1, then the temperature-1 ones from n; sample ids fall back on the held-out index).

    `stop`: strings that end a completion, applied by the engine exactly as in rollouts
    (`SamplingParams.stop`, the trainer passes `rollout.stop`), to both the greedy and the
    temperature-1 completions. The temperature-1 samples use a generator seeded with `seed`,
    so the evaluation of a given model is reproducible.
    """
    if k < 0:
        raise ValueError(f"evaluate: k must be >= 0, got {k}")
    if t1_samples < 0:
        raise ValueError(f"evaluate: t1_samples must be >= 0, got {t1_samples}")
    n = len(samples)
    if n == 0:
        return {"n": 0}
    num_t1 = max(k, t1_samples) if k > 0 else t1_samples
    greedy = engine.generate(
        list(prompt_ids),
        1,
        SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, stop=tuple(stop)),
        samples=samples,
    )
    scorer = Scorer(verifier)
    greedy_rewards, failed = _score(scorer, greedy, samples, 0)
    metrics: dict[str, float] = {"accuracy": sum(r >= 1.0 for r in greedy_rewards) / n}
    sampled = None
    t1_rewards: list[float] = []
    if num_t1 > 0:
        # The generator must live on the model's device (CPU: identical to a default one).
        gen = torch.Generator(device=getattr(engine, "device", "cpu")).manual_seed(seed)
        sampled = engine.generate(
            list(prompt_ids),
            num_t1,
            SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens, stop=tuple(stop)),
            generator=gen,
            samples=samples,
        )
        t1_rewards, t1_failed = _score(scorer, sampled, samples, len(greedy))
        failed += t1_failed
        metrics.update(
            {
                "pass1_t1": sum(t1_rewards) / len(t1_rewards),
                "reasoning_fraction": _mean([is_reasoning(t) for t in sampled.completion_text]),
                "mean_length": _mean(sampled.completion_lengths),
                "truncated_fraction": _mean(sampled.truncated),
            }
        )
        if sampled.tools is not None:  # multi-turn: tool use
            metrics.update(tool_use(sampled.tools))
    metrics["reasoning_fraction_greedy"] = _mean([is_reasoning(t) for t in greedy.completion_text])
    metrics["mean_length_greedy"] = _mean(greedy.completion_lengths)
    metrics["n"] = n
    if greedy.tools is not None:
        metrics.update({f"{k}_greedy": v for k, v in tool_use(greedy.tools).items()})
    greedy_samples = [samples[i] for i in greedy.prompt_index]
    for name, reading in (readings or {}).items():
        read, _ = Scorer(reading)(greedy.completion_text, greedy_samples)  # a failure reads 0
        metrics[f"accuracy_{name}"] = sum(r >= 1.0 for r in read) / n
    if k > 0:
        metrics.update(
            _k_metrics(samples, greedy, greedy_rewards, sampled, t1_rewards, num_t1, k, extract)
        )
        metrics.update(_budget_metrics(greedy, greedy_rewards, budgets, n))
    verifier_failed = sum(f.kind == "verifier" for f in failed)
    if verifier_failed:
        metrics["verifier_failures"] = verifier_failed
    if greedy.tools is not None:
        metrics["environment_failures"] = sum(f.kind == "environment" for f in failed)
    if failures is not None:
        failures.extend(failed)
    return metrics


def _score(
    scorer: Scorer, batch: Any, samples: Sequence[Mapping[str, Any]], first_row: int
) -> tuple[list[float], list[Failure]]:
    """The rewards of `batch` (an environment's first, a failed one's 0) and the failures of
    its verifier and environment, rows numbered from `first_row`."""
    rewards, _ = scorer(
        batch.completion_text,
        [samples[i] for i in batch.prompt_index],
        first_row=first_row,
        indices=batch.prompt_index,
        completion_ids=getattr(batch, "completion_ids", None),  # read by TRL functions only
        skip=getattr(batch, "environment_scored", None),
    )
    moved = [replace(f, row=first_row + f.row) for f in batch.environment_failures()]
    return batch.rewards_with_env(rewards), scorer.pop_failures() + moved


def tool_use(records: Sequence[Any]) -> dict[str, float]:
    """tool_call_fraction (completions that made at least one tool call), tool_calls_mean
    (calls per completion), turns_mean and the environments' own figures (`env/<name>`) of
    multi-turn rows' ToolRecords."""
    return {
        "tool_call_fraction": _mean([r.calls > 0 for r in records]),
        "tool_calls_mean": _mean([r.calls for r in records]),
        "turns_mean": _mean([r.turns for r in records]),
        **environment_metrics(records),
    }


def _k_metrics(
    samples: Sequence[Mapping[str, Any]],
    greedy: Any,
    greedy_rewards: list[float],
    sampled: Any,
    t1_rewards: list[float],
    m: int,
    k: int,
    extract: Callable[[str], Any],
) -> dict[str, float]:
    n = len(samples)
    per_problem: list[list[int]] = [[] for _ in range(n)]  # row indices of each problem
    for row, i in enumerate(sampled.prompt_index):
        per_problem[i].append(row)
    pass1, passk, maj = [], [], []
    for rows in per_problem:
        correct = sum(t1_rewards[r] >= 1.0 for r in rows)
        pass1.append(pass_at_k(m, correct, 1))
        passk.append(pass_at_k(m, correct, k))
        first_k = rows[:k]
        answers = [extract(sampled.completion_text[r]) for r in first_k]
        maj.append(maj_at_k(answers, [t1_rewards[r] for r in first_k]))
    out = {"pass@1": _mean(pass1), f"pass@{k}": _mean(passk), f"maj@{k}": _mean(maj)}
    by_source: dict[str, list[bool]] = {}
    for i, reward in zip(greedy.prompt_index, greedy_rewards):
        source = samples[i].get("source")
        if source is not None:
            by_source.setdefault(str(source), []).append(reward >= 1.0)
    for source in sorted(by_source):
        out[f"accuracy/{source}"] = _mean(by_source[source])
    return out


def _budget_metrics(
    greedy: Any, greedy_rewards: list[float], budgets: Sequence[int], n: int
) -> dict[str, float]:
    lengths = greedy.completion_lengths
    return {
        f"accuracy_within_{b}": sum(
            r >= 1.0 and length <= b for r, length in zip(greedy_rewards, lengths)
        )
        / n
        for b in budgets
    }


def _mean(values: Sequence[float | bool | int]) -> float:
    return float(sum(values)) / len(values) if values else 0.0


def evaluate_model(
    model_cfg: Any,
    samples: Sequence[Mapping[str, Any]],
    verifier: Callable[[str, Mapping[str, Any]], float],
    *,
    max_new_tokens: int,
    t1_samples: int = 4,
    seed: int = 0,
    k: int = 0,
    budgets: Sequence[int] = (128, 256, 512),
    system_prompt: str | None = None,
    engine: str = "fast",
    extract: Callable[[str], Any] = extract_final_answer,
    readings: Mapping[str, Callable[[str, Mapping[str, Any]], float]] | None = None,
) -> dict[str, float]:
    """Load the model of `model_cfg` (a ModelConfig) for inference and `evaluate` it with the
    named rollout engine (`extract`: maj@k's answer, `readings`: extra accuracies, as in
    `evaluate`); the result also carries `num_parameters`. The model is released when this
    returns."""
    from rlvr.models.loading import (
        PromptEncoder,
        load_model,
        load_tokenizer,
        resolve_device,
        resolve_dtype,
        uses_chat_template,
    )
    from rlvr.rollout import build_engine

    device = resolve_device(model_cfg.device)
    tokenizer = load_tokenizer(
        model_cfg.name_or_path, model_cfg.trust_remote_code, model_cfg.gguf_file
    )
    model = load_model(model_cfg, device, resolve_dtype(model_cfg.dtype, device), train=False)
    chat = uses_chat_template(tokenizer, model_cfg.chat_template)
    encode = PromptEncoder(tokenizer, chat, system_prompt)
    prompts = [encode(s) for s in samples]
    metrics = evaluate(
        build_engine(engine, model, tokenizer),
        samples,
        prompts,
        verifier,
        max_new_tokens=max_new_tokens,
        t1_samples=t1_samples,
        seed=seed,
        k=k,
        budgets=budgets,
        extract=extract,
        readings=readings,
    )
    metrics["num_parameters"] = sum(p.numel() for p in model.parameters())
    return metrics


@dataclass
class HeldoutEval:
    """A fixed held-out set and how it is decoded, evaluated again and again through a run
    (`evaluate` with the same seed each time, so two evaluations differ only by the weights).
    `readings`: extra greedy accuracies (`evaluate`'s), none in training. Each call keeps its
    failures' records and how many completions it scored, for `pop_failures`."""

    engine: Engine
    samples: Sequence[Mapping[str, Any]]
    prompt_ids: Sequence[list[int]]
    verifier: Callable[[str, Mapping[str, Any]], float]
    max_new_tokens: int
    t1_samples: int
    seed: int
    k: int = 0
    budgets: Sequence[int] = (128, 256, 512)
    stop: Sequence[str] = ()
    readings: Mapping[str, Callable[[str, Mapping[str, Any]], float]] | None = None
    failures: list[Failure] = field(default_factory=list)
    completions: int = 0

    def __bool__(self) -> bool:
        return bool(self.samples)

    def pop_failures(self) -> tuple[list[Failure], int]:
        """(the failure records of the evaluations since the last call, the completions they
        scored), and start afresh."""
        out = (self.failures, self.completions)
        self.failures, self.completions = [], 0
        return out

    def __call__(self) -> dict[str, float]:
        t1 = max(self.k, self.t1_samples) if self.k > 0 else self.t1_samples
        self.completions += len(self.samples) * (1 + t1)
        return evaluate(
            self.engine,
            self.samples,
            self.prompt_ids,
            self.verifier,
            max_new_tokens=self.max_new_tokens,
            t1_samples=self.t1_samples,
            seed=self.seed,
            k=self.k,
            budgets=tuple(self.budgets),
            stop=tuple(self.stop),
            readings=self.readings,
            failures=self.failures,
        )


def heldout_eval(
    cfg: Any,
    task: Task,
    engine: Engine,
    encode: Callable[[Mapping[str, Any]], list[int]],
    verifier: Callable[[str, Mapping[str, Any]], float],
) -> HeldoutEval:
    """The run's held-out set (`eval.size` problems of the task; a dataset holds out what it
    holds out) decoded as the `eval` section of `cfg` (a Config) says, with the rollouts' stop
    strings (`rollout.stop`), so evaluation completions end where training ones do."""
    size = heldout_size(task, cfg.eval.size)
    heldout = task.heldout(size) if size else []
    return HeldoutEval(
        engine,
        heldout,
        [encode(s) for s in heldout],
        verifier,
        max_new_tokens=cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens,
        t1_samples=cfg.eval.t1_samples,
        seed=cfg.training.seed + 12345,
        k=cfg.eval.k,
        budgets=tuple(cfg.eval.budgets),
        stop=tuple(cfg.rollout.stop),
    )


def evaluate_config(
    cfg: Any,
    *,
    readings: Mapping[str, Callable[[str, Mapping[str, Any]], float]] | None = None,
    log: Callable[[str], None] = lambda _msg: None,
) -> dict[str, float]:
    """The held-out evaluation `rlvr train` runs on `cfg` (a Config) before its first step
    (summary.json's eval_before), built in the trainer's order by the trainer's own functions:
    the verifier, the task (`build_run_task`: templates, few-shot examples), the policy
    (`build_policy`: model.precision's dtype, LoRA, the chat template, system prompt and
    declared tools of `Policy.encode`), the rollout engine with its environment, long dataset
    prompts dropped as the trainer drops them (`data.max_prompt_tokens`), and `heldout_eval`.
    Neither a reference model nor an off-policy snapshot is loaded: the step-0 weights are the
    same without them. `readings` as in `evaluate`. The result also carries `num_parameters`;
    the model is released when this returns."""
    from dataclasses import replace

    from rlvr.distributed.world import World
    from rlvr.errors import ConfigError
    from rlvr.models.loading import resolve_device
    from rlvr.rewards.compose import build_verifier
    from rlvr.rewards.judge.spec import configured_spec
    from rlvr.runs.policy import build_policy, build_rollout_engine
    from rlvr.runs.task import build_run_task

    verifier = build_verifier(configured_spec(cfg.reward))  # a judge's reward.judge_*
    task = build_run_task(cfg, verifier)
    weights_only = replace(
        cfg,
        algorithm=replace(cfg.algorithm, kl_coef=0.0, kl_in_reward=False),
        rollout=replace(cfg.rollout, off_policy_steps=0, max_staleness=0),
    )
    policy = build_policy(weights_only, World(), resolve_device(cfg.model.device))
    engine = build_rollout_engine(cfg, policy.model, policy.tokenizer)
    if cfg.data.max_prompt_tokens and cfg.data.task == "dataset":  # as GRPOTrainer does
        from rlvr.data.datasets import filter_long_prompts

        report = filter_long_prompts(
            task, lambda sample: len(policy.encode(sample)), cfg.data.max_prompt_tokens
        )
        log(f"data: dropped {report['dropped_eval']} held-out prompts ({report['reason']})")
    evaluation = heldout_eval(cfg, task, engine, policy.encode, verifier)
    if not evaluation:
        raise ConfigError(
            f"eval.size: no held-out problems to evaluate (eval.size={cfg.eval.size}; a dataset "
            "evaluates the rows it holds out: data.eval_path or data.eval_fraction)"
        )
    evaluation.readings = readings
    metrics = evaluation()
    metrics["num_parameters"] = sum(p.numel() for p in policy.model.parameters())
    return metrics
