"""The rlvr side of `benchmarks/vs_trl.py`, run in its own process (see _vs_trl_common.py).

    python benchmarks/_rlvr_peer.py SPEC.json RESULT.json

Phases, in the order the spec lists them (each optional):
  step     rlvr's GRPOTrainer for `warmup + steps` steps on the shared config; per-step wall time,
           generation and update time (metrics.jsonl) and the exact tokens each update processed
           (prompt + completion tokens of every row, no padding). Peak memory is read right after
           this phase, so later phases do not count in it.
  rollout  the rollout engine that config selects (`rollout.engine`, from the trainer itself) vs
           `model.generate` on the same model object, at each batch size (rows = prompts x G),
           with B rows decoding together (`concurrent`: the engine's max_batch_size is B for
           the call; the trainer's own is the rows of one step, which would cut a batch larger
           than a step into waves).
  tta      time to accuracy: GRPO on the TTA config, held-out greedy accuracy every
           `eval.every` steps; wall time until it first reaches the threshold, evaluation excluded.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

from _vs_trl_common import (
    peak_rss_mib,
    prompt_stream,
    read_spec,
    setup_process,
    write_result,
)


def concurrent(engine: Any, rows: int) -> Any:
    """A context in which `engine` decodes `rows` rows together (its max_batch_size), as a
    throughput figure at B concurrent sequences means; restored on exit."""
    import contextlib

    @contextlib.contextmanager
    def scope() -> Any:
        before = engine.max_batch_size
        engine.max_batch_size = rows
        try:
            yield engine
        finally:
            engine.max_batch_size = before

    return scope()


class _StopTraining(Exception):
    """Raised from inside the training loop once the time-to-accuracy run has its answer."""


def _trainer(overrides: list[str], run_dir: Path) -> Any:
    from rlvr.config import load_config
    from rlvr.runs.run_dir import create_run_dir
    from rlvr.training.grpo import GRPOTrainer

    cfg = load_config(None, overrides)
    trainer = GRPOTrainer(cfg, run_dir, progress=False, log=lambda _msg: None)
    create_run_dir(run_dir)
    return trainer


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl rows; wall-clock keys are merged back in from timings.jsonl when the
    config wrote them there (checkpoint.deterministic)."""

    def rows(name: str) -> list[dict[str, Any]]:
        path = run_dir / name
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    timings = {r["step"]: r for r in rows("timings.jsonl")}
    return [{**r, **timings.get(r["step"], {})} for r in rows("metrics.jsonl")]


def step_phase(spec: dict[str, Any], work: Path) -> tuple[dict[str, Any], Any]:
    t0 = time.perf_counter()
    run_dir = work / "rlvr-step"
    trainer = _trainer(spec["overrides"] + spec["rlvr_extra"], run_dir)
    load_s = time.perf_counter() - t0
    update_tokens: list[dict[str, int]] = []
    update = trainer.update

    def counting_update(scored: Any, *args: Any, **kwargs: Any) -> Any:
        batch = scored.batch
        update_tokens.append(
            {
                "rows": len(batch),
                "prompt_tokens": sum(int(len(p)) for p in batch.prompt_ids),
                "completion_tokens": sum(batch.completion_lengths),
            }
        )
        return update(scored, *args, **kwargs)

    trainer.update = counting_update  # the loop calls self.update: the instance attribute wins
    trainer.train()
    rows = _metrics(run_dir)
    warm = spec["warmup"]
    measured = rows[warm:]
    cfg = trainer.cfg
    result = {
        "load_s": load_s,
        "num_parameters": sum(p.numel() for p in trainer.model.parameters()),
        "ppo_epochs": cfg.training.ppo_epochs,
        "rollout_engine": cfg.rollout.engine,
        "warmup_steps": warm,
        "step_time_s": [r["step_time_s"] for r in measured],
        "time_generate_s": [r["time_generate_s"] for r in measured],
        "time_update_s": [r["time_update_s"] for r in measured],
        "time_logprobs_s": [r.get("time_logprobs_s", 0.0) for r in measured],
        "reward_mean": [r["reward_mean"] for r in measured],
        "completion_length_mean": [r["completion_length_mean"] for r in measured],
        "loss": [r.get("loss") for r in measured],
        "update_tokens": update_tokens[warm:],
        # positions the update's forward passes actually ran, padding excluded (a shared
        # prompt counts once per unit): what train_mfu counts
        "update_positions": [
            round(r["update_tokens"] * (1.0 - r["padding_fraction"])) for r in measured
        ],
        "warmup_step_time_s": [r["step_time_s"] for r in rows[:warm]],
        "peak_rss_mib": peak_rss_mib(),
    }
    return result, trainer


def _generate_tokens(out: Any, prompt_width: int, eos_ids: list[int], max_new: int) -> int:
    """Completion tokens of a `model.generate` output: up to and including the first EOS of a
    row (what rlvr's engines count), else the whole `max_new` tokens."""
    total = 0
    for row in out[:, prompt_width:].tolist():
        length = max_new if len(row) >= max_new else len(row)
        for i, tok in enumerate(row):
            if tok in eos_ids:
                length = i + 1
                break
        total += length
    return total


def rollout_phase(spec: dict[str, Any], work: Path, trainer: Any | None) -> dict[str, Any]:
    import torch

    if trainer is None:
        trainer = _trainer(
            spec["overrides"] + spec["rlvr_extra"] + ["training.steps=0"], work / "rlvr-rollout"
        )
    cfg, model, tok = trainer.cfg, trainer.model, trainer.tokenizer
    g = cfg.rollout.group_size
    sampling = trainer.sampling
    eos_ids = list(getattr(trainer.engine, "eos_token_ids", None) or [tok.eos_token_id])
    pad_id = trainer.tokenizer.pad_token_id
    samples = prompt_stream(cfg, max(spec["rollout_batches"]) // g)
    prompts = [trainer.encode(s) for s in samples]

    def rlvr_engine(batch: int, max_new: int, seed: int) -> tuple[int, float]:
        params = dataclasses.replace(sampling, max_new_tokens=max_new)
        gen = torch.Generator().manual_seed(seed)
        with concurrent(trainer.engine, batch):
            t0 = time.perf_counter()
            out = trainer.engine.generate(prompts[: batch // g], g, params, generator=gen)
            return sum(out.completion_lengths), time.perf_counter() - t0

    def hf_generate(batch: int, max_new: int, seed: int) -> tuple[int, float]:
        rows = prompts[: batch // g]
        width = max(len(p) for p in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, p in enumerate(rows):  # left padding, as generate expects for decoder-only models
            ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        torch.manual_seed(seed)
        was_training = model.training
        model.eval()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=sampling.temperature > 0,
                temperature=sampling.temperature if sampling.temperature > 0 else None,
                top_p=sampling.top_p,
                top_k=sampling.top_k,  # 0 = off; generate's own default would be 50
                max_new_tokens=max_new,
                num_return_sequences=g,
                pad_token_id=pad_id,
                eos_token_id=eos_ids,
            )
        seconds = time.perf_counter() - t0
        model.train(was_training)
        return _generate_tokens(out, width, eos_ids, max_new), seconds

    max_new = cfg.rollout.max_new_tokens
    for batch in spec["rollout_batches"]:  # warm-up: allocations, thread pools, any compile
        for fn in (rlvr_engine, hf_generate):
            fn(batch, min(8, max_new), 0)
    by_batch: dict[str, dict[str, Any]] = {}
    for rep in range(spec["rollout_repeats"]):
        for batch in spec["rollout_batches"]:
            row = by_batch.setdefault(
                str(batch),
                {"prompts": batch // g, "group_size": g, "rlvr": [], "generate": []},
            )
            order = [("rlvr", rlvr_engine), ("generate", hf_generate)]
            for name, fn in order if rep % 2 == 0 else order[::-1]:  # alternate who goes first
                tokens, seconds = fn(batch, max_new, 1000 + rep)
                row[name].append({"tokens": tokens, "seconds": seconds})
    for row in by_batch.values():
        for name in ("rlvr", "generate"):
            tokens = sum(r["tokens"] for r in row[name])
            seconds = sum(r["seconds"] for r in row[name])
            row[f"{name}_tokens_per_s"] = tokens / seconds
        row["speedup"] = row["rlvr_tokens_per_s"] / row["generate_tokens_per_s"]
    return {
        "rollout_engine": cfg.rollout.engine,
        "max_new_tokens": max_new,
        "eos_token_ids": eos_ids,
        "by_batch": by_batch,
    }


def tta_phase(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    run_dir = work / "rlvr-tta"
    trainer = _trainer(spec["tta_overrides"] + spec["rlvr_extra"], run_dir)
    threshold, cap = spec["tta_threshold"], spec["tta_max_seconds"]
    evals: list[dict[str, Any]] = []
    clock = {"start": 0.0, "eval_s": 0.0}
    run_eval = trainer.evaluate

    def timed_eval() -> dict[str, float]:
        t = time.perf_counter()
        train_s = t - clock["start"] - clock["eval_s"]
        result = run_eval()
        clock["eval_s"] += time.perf_counter() - t
        evals.append({"step": trainer.step, "train_s": train_s, "accuracy": result["accuracy"]})
        if result["accuracy"] >= threshold or train_s >= cap:
            raise _StopTraining
        return result

    trainer.evaluate = timed_eval
    clock["start"] = time.perf_counter()
    try:
        trainer.train()
    except _StopTraining:
        pass
    reached = next((e for e in evals if e["accuracy"] >= threshold), None)
    # rows of zero advantage whose forward/backward the update skipped (exact: no gradient)
    skipped = [int(r.get("update_rows_skipped", 0)) for r in _metrics(run_dir)]
    return {
        "threshold": threshold,
        "reached": reached is not None,
        "seconds": reached["train_s"] if reached else None,
        "steps": reached["step"] if reached else None,
        "trained_s": evals[-1]["train_s"] if evals else 0.0,
        "trained_steps": evals[-1]["step"] if evals else 0,
        "evals": evals,
        "eval_s": clock["eval_s"],
        "update_rows_skipped": sum(skipped),
        "update_rows_skipped_by_step": skipped,
    }


def main(argv: list[str]) -> int:
    spec, out = read_spec(argv)
    setup_process(spec)
    from rlvr.errors import UserError

    work = Path(spec["work_dir"])
    result: dict[str, Any] = {"library": "rlvr"}
    trainer = None
    try:
        for phase in spec["phases"]:
            t0 = time.perf_counter()
            print(f"rlvr: {phase} ...", file=sys.stderr, flush=True)
            if phase == "step":
                result["step"], trainer = step_phase(spec, work)
            elif phase == "rollout":
                result["rollout"] = rollout_phase(spec, work, trainer)
            elif phase == "tta":
                trainer = None  # the step model is not needed any more
                result["tta"] = tta_phase(spec, work)
            print(f"rlvr: {phase} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    except UserError as e:
        result["error"] = str(e)
        write_result(out, result)
        return 2
    write_result(out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
