"""Sampling jobs: k completions per prompt, verifier scores, rejection sampling, pass rates.

The engine of `rlvr sample` (rlvr/commands/sample.py) and of pipeline `sample`/`filter` stages.
The rejection-sampling stage of the DeepSeek-R1 recipe (RL -> rejection sampling -> SFT): sample
`sampling.k` completions for each of `sampling.num_prompts` prompts, score each with the
verifier, keep the verified ones as SFT data (rlvr.data.rejection) and measure each prompt's
pass rate, which selects a curriculum of prompts that are neither always nor never solved.
With no arguments it samples the embedded model on 3-digit addition.

The run directory (see docs/sampling.md for every field):
    config.yaml        the resolved SampleConfig
    samples.jsonl      every completion with its reward, token count and finish reason
    kept.jsonl         the rejection-sampled completions: SFT data (prompt, completion, system)
    pass_rates.jsonl   one row per prompt: n, correct, pass_rate
    curriculum.jsonl   the prompts inside [filter.band_low, filter.band_high], loadable by
                       `rlvr train data.task=dataset data.path=DIR/curriculum.jsonl`
    summary.json       counts, drop reasons, pass-rate histogram, band counts, timing

Decisions:
- Everything is generated and scored before anything is written; each file is written to a
  temporary name and renamed into place, and summary.json comes last, so an interrupted run
  leaves no half file and a directory without summary.json holds no complete run.
- The reward is the verifier's alone: the overlong shaping and mask_truncated keys of the reward
  section shape training only (filter.drop_truncated is this stage's counterpart).
- `system` in the output rows is the system message handed to the prompt encoder (the row's
  own, else data.system_prompt); as in training it reaches the model only through a chat
  template.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from rlvr.config import DataConfig, ModelConfig, RewardConfig, option, validate_model
from rlvr.data.registry import heldout_size
from rlvr.data.rejection import (
    RejectionOptions,
    curriculum_band,
    pass_rate_histogram,
    pass_rates,
    rejection_sample,
)
from rlvr.errors import ConfigError

SAMPLE_FILES = (
    "config.yaml",
    "samples.jsonl",
    "kept.jsonl",
    "pass_rates.jsonl",
    "curriculum.jsonl",
    "summary.json",
)
# Added to each prompt's fields in samples.jsonl; whatever else a row holds describes its prompt.
COMPLETION_FIELDS = ("completion", "reward", "num_tokens", "finish_reason", "sample_index")
KEPT_FIELDS = ("prompt", "completion", "system", "id", "answer", "source", "reward")
MAX_DRAWS_PER_PROMPT = 20  # train split: draws allowed per wanted prompt before giving up


@dataclass
class SamplingConfig:
    k: int = option(8, "completions sampled per prompt", ge=1)
    num_prompts: int = option(256, "distinct prompts to sample", ge=1)
    split: str = option(
        "train",
        "prompts from the training stream or the held-out set",
        choices=["train", "heldout"],
    )
    temperature: float = option(1.0, "sampling temperature (0 = greedy)", ge=0.0)
    top_p: float = option(1.0, "nucleus sampling threshold (1 = off)", gt=0.0, le=1.0)
    top_k: int = option(0, "top-k sampling (0 = off)", ge=0)
    max_new_tokens: int = option(64, "completion length limit, tokens", ge=1)
    max_batch_size: int = option(256, "rows (prompt x completion) decoded together", ge=1)
    engine: str = option(
        "fast", "generation engine (docs/rollout.md)", choices=["hf", "fast", "vllm"]
    )
    seed: int = option(0, "seed of the prompt draw (train split) and of sampling")


@dataclass
class FilterSection(RejectionOptions):
    """The rejection options plus the pass-rate band of the curriculum (both edges inclusive)."""

    band_low: float = option(
        0.1, "curriculum keeps prompts with pass rate >= band_low", ge=0.0, le=1.0
    )
    band_high: float = option(
        0.9, "curriculum keeps prompts with pass rate <= band_high", ge=0.0, le=1.0
    )

    def check(self, prefix: str = "filter.") -> None:
        """The rejection options' checks and the band's order (a filter stage uses this alone)."""
        super().check(prefix)
        if self.band_low > self.band_high:
            raise ConfigError(
                f"{prefix}band_low: must be <= {prefix}band_high = {self.band_high}, "
                f"got {self.band_low}"
            )

    def rejection_options(self) -> RejectionOptions:
        names = [f.name for f in fields(RejectionOptions)]
        return RejectionOptions(**{name: getattr(self, name) for name in names})


@dataclass
class SampleConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    filter: FilterSection = field(default_factory=FilterSection)

    def validate(self) -> None:
        """Checks that involve more than one field (called by load_config)."""
        if self.data.task == "dataset" and not self.data.path:
            raise ConfigError("data.path: required when data.task is 'dataset'")
        self.data.validate()
        validate_model(self.model)
        self.filter.check("filter.")
        limit = self.sampling.max_new_tokens
        if self.filter.min_tokens > limit:
            raise ConfigError(
                f"filter.min_tokens: must be <= sampling.max_new_tokens = {limit}, "
                f"got {self.filter.min_tokens} (nothing could be kept)"
            )


# --- prompts ----------------------------------------------------------------------------------


def _prompt_id(sample: Mapping[str, Any]) -> str:
    return str(sample.get("id") if sample.get("id") is not None else sample["prompt"])


def select_prompts(
    task: Any, cfg: SamplingConfig, log: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    """The prompts to sample, distinct by id.

    train: draws from task.sample_train(random.Random(seed)) until num_prompts distinct ids are
        found or MAX_DRAWS_PER_PROMPT * num_prompts draws are spent (a small dataset then gives
        all it has). heldout: task.heldout(num_prompts), capped at a dataset's held-out size.
    """
    n = cfg.num_prompts
    if cfg.split == "heldout":
        available = heldout_size(task, n)
        if available == 0:
            raise ConfigError(
                "sampling.split: 'heldout' but the dataset holds out no prompts "
                "(set data.eval_fraction > 0 or data.eval_path)"
            )
        if available < n:
            log(f"sample: the dataset holds out {available} prompts; sampling all of them")
            n = available
        try:
            chosen = [dict(s) for s in task.heldout(n)]
        except ValueError as e:
            raise ConfigError(f"sampling.num_prompts: {e}") from None
    else:
        rng = random.Random(cfg.seed)
        found: dict[str, dict[str, Any]] = {}
        draws = 0
        while len(found) < n and draws < MAX_DRAWS_PER_PROMPT * n:
            sample = task.sample_train(rng)
            draws += 1
            found.setdefault(_prompt_id(sample), dict(sample))
        chosen = list(found.values())
        if len(chosen) < n:
            log(
                f"sample: only {len(chosen)} distinct training prompts in {draws} draws "
                f"(sampling.num_prompts = {n}); sampling those"
            )
    unique: dict[str, dict[str, Any]] = {}
    for sample in chosen:
        unique.setdefault(_prompt_id(sample), sample)
    return list(unique.values())


# --- writing ----------------------------------------------------------------------------------


def _write_atomic(path: Path, text: str) -> None:
    """Write to a temporary sibling, then rename over `path`: readers never see a half file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _jsonl(rows: Iterable[Mapping[str, Any]]) -> str:
    # default=str: a task field JSON cannot hold must not cost a finished sampling run.
    return "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows)


def _pick(row: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    return {key: row[key] for key in keys if row.get(key) is not None}


def _prompt_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """A samples.jsonl row without its completion: the prompt as a dataset row."""
    return {k: v for k, v in row.items() if k not in COMPLETION_FIELDS and v is not None}


# --- the run ----------------------------------------------------------------------------------


@dataclass
class ScoredSamples:
    """Every scored completion (rows of samples.jsonl) and the prompts they came from."""

    prompts: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    verifier_failures: int = 0
    completion_tokens: int = 0
    time_generate_s: float = 0.0
    time_score_s: float = 0.0


def sample_and_score(
    cfg: SampleConfig, *, log: Callable[[str], None] = print, progress: bool = True
) -> ScoredSamples:
    """Load the model, draw the prompts, sample k completions each and score every one."""
    import torch

    from rlvr.data.registry import build_task
    from rlvr.models.loading import (
        PromptEncoder,
        load_model,
        load_tokenizer,
        resolve_device,
        resolve_dtype,
        uses_chat_template,
    )
    from rlvr.observe.metrics import Progress
    from rlvr.rewards.compose import build_verifier
    from rlvr.rewards.judge.spec import configured_spec
    from rlvr.rewards.pool import VerifierPool
    from rlvr.rewards.scoring import Scorer
    from rlvr.rollout import SamplingParams, build_engine

    s = cfg.sampling
    spec = configured_spec(cfg.reward)  # an LLM judge's reward.judge_* settings in its item
    verifier = build_verifier(spec)
    task = build_task(cfg.data, verifier)
    device = resolve_device(cfg.model.device)
    dtype = resolve_dtype(cfg.model.dtype, device)
    tokenizer = load_tokenizer(
        cfg.model.name_or_path, cfg.model.trust_remote_code, cfg.model.gguf_file
    )
    chat = uses_chat_template(tokenizer, cfg.model.chat_template)
    encode = PromptEncoder(tokenizer, chat, cfg.data.system_prompt)

    if cfg.data.max_prompt_tokens and cfg.data.task == "dataset":
        from rlvr.data.datasets import filter_long_prompts

        report = filter_long_prompts(
            task, lambda sample: len(encode(sample)), cfg.data.max_prompt_tokens
        )
        log(f"data: dropped {report['dropped_train']} train and {report['dropped_eval']} held-out")
    prompts = select_prompts(task, s, log)
    for prompt in prompts:  # the system message each prompt is encoded with, written out as such
        if not prompt.get("system") and cfg.data.system_prompt:
            prompt["system"] = cfg.data.system_prompt

    model = load_model(cfg.model, device, dtype, train=False)
    engine = build_engine(s.engine, model, tokenizer, max_batch_size=s.max_batch_size)
    params = SamplingParams(
        temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, max_new_tokens=s.max_new_tokens
    )
    generator = torch.Generator(device=device).manual_seed(s.seed)
    pool = (
        VerifierPool(spec, cfg.reward.workers, cfg.reward.timeout_s)
        if cfg.reward.workers > 0
        else None
    )
    scorer = Scorer(verifier, pool)
    # Whole prompts per generate call, so that one call fills one decode batch and the progress
    # bar moves once per batch.
    per_call = max(1, s.max_batch_size // s.k)
    calls = range(0, len(prompts), per_call)
    log(
        f"sample: {len(prompts)} prompts x {s.k} completions from {cfg.model.name_or_path} "
        f"({s.split} split, T={s.temperature}, max {s.max_new_tokens} tokens)"
    )
    out = ScoredSamples(prompts=prompts, rows=[])
    seen: set[str] = set()  # verifier errors already logged
    bar = Progress(total=len(calls), enabled=progress, desc="rlvr sample")
    try:
        for begin in calls:
            chunk = prompts[begin : begin + per_call]
            t0 = time.perf_counter()
            batch = engine.generate([encode(p) for p in chunk], s.k, params, generator=generator)
            out.time_generate_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            row_samples: list[Mapping[str, Any]] = [chunk[i] for i in batch.prompt_index]
            rewards, failures = scorer(
                batch.completion_text,
                row_samples,
                first_row=len(out.rows),
                indices=[begin + i for i in batch.prompt_index],
            )
            scorer.pop_components()  # per-component rewards are a training metric
            for failure in scorer.pop_failures():  # each distinct error said once
                if failure.key not in seen:
                    seen.add(failure.key)
                    log(f"warning [verifier_failures]: sample {failure.sample_id}: {failure.error}")
            out.time_score_s += time.perf_counter() - t0
            out.verifier_failures += failures
            lengths = batch.completion_lengths
            out.completion_tokens += sum(lengths)
            for i, sample in enumerate(row_samples):
                row = {key: v for key, v in sample.items() if v is not None}
                row["id"] = _prompt_id(sample)
                row.update(
                    completion=batch.completion_text[i],
                    reward=float(rewards[i]),
                    num_tokens=lengths[i],
                    finish_reason=batch.finish_reason[i],
                    sample_index=i % s.k,
                )
                out.rows.append(row)
            bar.update({"reward_mean": sum(rewards) / len(rewards)})
    finally:
        bar.close()
        if pool is not None:
            pool.close()
    return out


def write_filtered(
    rows: list[dict[str, Any]],
    flt: FilterSection,
    out_dir: Path,
    *,
    summary: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Rejection-sample and band scored rows (samples.jsonl rows); no model is needed.

    Writes kept.jsonl, pass_rates.jsonl, curriculum.jsonl and, last, summary.json (`summary`'s
    items followed by the counts) into `out_dir`, each atomically; returns the summary. Used by
    `run_sample` and to re-filter an earlier run's samples with other options.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # summary.json marks a complete run: remove an earlier one before replacing anything.
    (out_dir / "summary.json").unlink(missing_ok=True)
    kept, drops = rejection_sample(rows, flt.rejection_options())
    rates = pass_rates(rows, flt.min_reward)
    band, too_easy, too_hard = curriculum_band(rates, flt.band_low, flt.band_high)
    first_row: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        first_row.setdefault(str(row["id"]), row)
    curriculum = [_prompt_fields(first_row[r["id"]]) for r in band]
    n = len(rows)
    out = dict(summary or {})
    out.update(
        prompts=len(rates),
        completions=n,
        mean_reward=sum(r["reward"] for r in rows) / n if n else 0.0,
        mean_pass_rate=sum(r["pass_rate"] for r in rates) / len(rates) if rates else 0.0,
        correct=sum(r["correct"] for r in rates),
        kept=len(kept),
        kept_prompts=len({r["id"] for r in kept}),
        drops=drops,
        truncated=sum(r.get("finish_reason") == "length" for r in rows),
        pass_rate_histogram=pass_rate_histogram(rates),
        band_low=flt.band_low,
        band_high=flt.band_high,
        band_kept=len(band),
        band_too_easy=len(too_easy),
        band_too_hard=len(too_hard),
    )
    _write_atomic(out_dir / "kept.jsonl", _jsonl(_pick(r, KEPT_FIELDS) for r in kept))
    _write_atomic(out_dir / "pass_rates.jsonl", _jsonl(rates))
    _write_atomic(out_dir / "curriculum.jsonl", _jsonl(curriculum))
    _write_atomic(out_dir / "summary.json", json.dumps(out, indent=2) + "\n")
    return out


def run_sample(
    cfg: SampleConfig,
    out_dir: Path,
    *,
    log: Callable[[str], None] = print,
    progress: bool = True,
) -> dict[str, Any]:
    """Sample, score, filter and write the run directory (module docstring); return the summary.

    Existing files of an earlier run in `out_dir` are replaced (the CLI refuses that without
    --overwrite; this API leaves the decision to its caller).
    """
    import yaml

    from rlvr.config import to_dict

    start = time.perf_counter()
    out_dir = Path(out_dir)
    scored = sample_and_score(cfg, log=log, progress=progress)
    tokens, t_generate = scored.completion_tokens, scored.time_generate_s
    n = len(scored.rows)
    head = {
        "model": cfg.model.name_or_path,
        "split": cfg.sampling.split,
        "k": cfg.sampling.k,
        "verifier_failures": scored.verifier_failures,
        "completion_tokens": tokens,
        "mean_completion_tokens": tokens / n if n else 0.0,
        "time_generate_s": t_generate,
        "time_score_s": scored.time_score_s,
        "tokens_per_s": tokens / t_generate if t_generate > 0 else 0.0,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").unlink(missing_ok=True)
    _write_atomic(out_dir / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False))
    _write_atomic(out_dir / "samples.jsonl", _jsonl(scored.rows))
    head["seconds"] = time.perf_counter() - start
    summary = write_filtered(scored.rows, cfg.filter, out_dir, summary=head)
    if not summary["band_kept"]:
        log(
            f"sample: no prompt has a pass rate in [{cfg.filter.band_low}, "
            f"{cfg.filter.band_high}]; curriculum.jsonl is empty"
        )
    return summary


def format_summary(summary: Mapping[str, Any], out_dir: Path) -> str:
    drops = ", ".join(f"{k} {v}" for k, v in summary["drops"].items() if v) or "none"
    return "\n".join(
        [
            f"sample: {summary['prompts']} prompts x {summary['k']} = {summary['completions']} "
            f"completions in {summary['seconds']:.1f} s ({summary['tokens_per_s']:.0f} tokens/s)",
            f"mean pass rate {summary['mean_pass_rate']:.3f}; kept {summary['kept']} completions "
            f"of {summary['kept_prompts']} prompts (dropped: {drops})",
            f"band [{summary['band_low']}, {summary['band_high']}]: {summary['band_kept']} "
            f"prompts kept, {summary['band_too_easy']} too easy, {summary['band_too_hard']} "
            "too hard",
            f"run directory: {out_dir}",
        ]
    )
