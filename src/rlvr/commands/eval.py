"""`rlvr eval`: compare one or more models on the same held-out problems.

    rlvr eval --config FILE.yaml [key=value ...] [--model PATH ...] [--n N] [--k K]
              [--max-new-tokens N] [--seed S] [--device auto] [--output FILE.json]
    rlvr eval --model PATH [--model PATH ...] [--data addition|humaneval] [--digits 3] [--n N]
              [--k 8] [--max-new-tokens N] [--seed 0] [--device auto] [--output FILE.json]

With a training config (--config, or key=value overrides of the embedded default), every model
is evaluated exactly as `rlvr train` evaluates its policy before the first step
(`rlvr.evaluation.evaluate.evaluate_config`: the task of `data.*` with its templates and few-shot
examples, `reward.verifier`, the chat template / system prompt / declared tools, the rollout
engine, `rollout.stop`, and `eval.*`), so a model's row reproduces a run's eval_before. --model
defaults to model.name_or_path; each --model replaces only that key. The flags override the
config: --n is eval.size, --k eval.k, --max-new-tokens eval.max_new_tokens, --seed S both
data.seed and training.seed, --device model.device.

Without a config, the built-in addition task (--digits) or HumanEval (--data humaneval) is
scored by `rlvr.evaluation.evaluate.evaluate` with k = --k on the same `--n` held-out problems,
with the same seed. Either way stdout gets one table, one row per model:

    model  accuracy  pass@1  pass@k  maj@k  reasoning_fraction  mean_length

accuracy is greedy; the others come from max(k, 4) samples per problem at temperature 1 (see
docs/evaluation.md). With eval.k=0 the columns are accuracy, pass1_t1, reasoning_fraction and
mean_length, and a column no model reports (the temperature-1 ones under eval.t1_samples=0) is
left out. A task scored by the `math` verifier also gets accuracy_lenient beside accuracy:
greedy accuracy under `math_lenient`, which also reads answers given without a box, tag or
answer line (the fair number for a base model's baseline row). --output also writes every
metric of every model as JSON.

Decisions:
- --seed seeds both the held-out problem list (the task's seed) and the temperature-1 draws, so
  two invocations with the same arguments print the same table; with a config it sets
  data.seed and training.seed (the trainer draws its evaluation samples from training.seed).
- With a config the model loads as `rlvr train` loads the policy (`build_policy`: the dtype of
  model.precision, LoRA adapters), without a reference model or off-policy copy; --data and
  --digits are refused beside it (data.task and data.digits say that).
- Without a config the verifier is the task's: exact_answer for addition (--n 200,
  --max-new-tokens 64 by default); code for humaneval (all 164 problems, --max-new-tokens 512
  by default; needs the `humaneval` extra), whose maj@k votes over the completions' code
  blocks. `lenient_spec` names the lenient reading of a spec with a `math` component
  (math -> math_lenient), scored on the same greedy completions.
- Models are loaded one at a time and released before the next, so only one is in memory.
- A model that cannot be loaded is a one-line error (exit 2) before any table is printed; a
  missing directory is caught before the first model is evaluated.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rlvr.commands import standalone_main
from rlvr.errors import UserError

T1_SAMPLES = 4  # temperature-1 samples per problem when --k is smaller
COLUMNS = ("accuracy", "pass@1", "pass@k", "maj@k", "reasoning_fraction", "mean_length")
T1_COLUMNS = ("accuracy", "pass1_t1", "reasoning_fraction", "mean_length")  # when k = 0
LENIENT_COLUMN = "accuracy_lenient"  # after accuracy, when a model's metrics have it
MATH_SPECS = {"math": "math_lenient", "rlvr.rewards.math:math_reward": "math_lenient"}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "eval",
        help="compare models on held-out problems: accuracy, pass@k, maj@k",
        description="Evaluate one or more models on the same held-out problems and print one "
        "table (greedy accuracy, pass@1, pass@k, maj@k, reasoning fraction, mean length). "
        "With --config (or key=value overrides) the problems, prompts, verifier and decoding "
        "are a training config's, exactly as `rlvr train` evaluates them (eval_before).",
    )
    parser.add_argument(
        "--model",
        action="append",
        metavar="PATH",
        help="model directory, hub id, or 'embedded'; repeat to compare several "
        "(with --config: default model.name_or_path)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE.yaml",
        help="a training config: evaluate on its task, verifier, prompts and eval.* settings",
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="dotted overrides of the config, as rlvr train takes, e.g. data.task=countdown",
    )
    parser.add_argument(
        "--data",
        default=None,
        choices=["addition", "humaneval"],
        help="task without --config (default: addition); humaneval needs pip install "
        "'rlvr[humaneval]'",
    )
    parser.add_argument(
        "--digits", type=int, default=None, help="operand digits without --config (default: 3)"
    )
    parser.add_argument(
        "--n",
        type=int,
        default=None,
        help="held-out problems (default: 200; humaneval: 164; with --config: eval.size)",
    )
    parser.add_argument(
        "--k",
        type=int,
        default=None,
        help="k of pass@k and maj@k (default: 8; with --config: eval.k)",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="completion token limit (default: 64; humaneval: 512; with --config: "
        "eval.max_new_tokens)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="problems and sampling seed (default: 0; with --config: data.seed, training.seed)",
    )
    parser.add_argument(
        "--device",
        default=None,
        choices=["auto", "cpu", "cuda"],
        help="default: auto (with --config: model.device)",
    )
    parser.add_argument("--output", metavar="FILE.json", help="also write all metrics as JSON")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    parser.set_defaults(func=run)
    return parser


def _check_args(args: argparse.Namespace) -> None:
    """Defaults and bounds of the flags without a config."""
    if not args.model:
        raise UserError(
            "--model: required without --config (or --config FILE.yaml: evaluate a training "
            "config's task with its model)"
        )
    args.data = args.data or "addition"
    args.digits = 3 if args.digits is None else args.digits
    args.k = 8 if args.k is None else args.k
    args.seed = 0 if args.seed is None else args.seed
    args.device = args.device or "auto"
    humaneval = args.data == "humaneval"
    if args.n is None:
        args.n = 164 if humaneval else 200
    if args.max_new_tokens is None:
        args.max_new_tokens = 512 if humaneval else 64
    for name, low in (("n", 1), ("k", 1), ("max_new_tokens", 1), ("digits", 1)):
        value = getattr(args, name)
        if value < low:
            flag = "--" + name.replace("_", "-")
            raise UserError(f"{flag}: must be >= {low}, got {value}")


def lenient_spec(spec: str) -> str | None:
    """`spec` with its `math` components read leniently ("math:1.0,format:0.1" ->
    "math_lenient:1.0,format:0.1"), or None when it has none."""
    items, changed = [], False
    for item in (part.strip() for part in spec.split(",")):
        name, _, weight = item.rpartition(":") if _is_weighted(item) else (item, "", "")
        lenient = MATH_SPECS.get(name, name)
        changed |= lenient != name
        items.append(lenient + (f":{weight}" if weight else ""))
    return ",".join(items) if changed else None


def _is_weighted(item: str) -> bool:
    """'NAME:WEIGHT' (the weight parses as a number, a function name cannot)."""
    try:
        float(item.rpartition(":")[2])
    except ValueError:
        return False
    return ":" in item


def readings(spec: str) -> dict[str, Any]:
    """The other readings reported beside the task's verifier: {"lenient": ...} for math."""
    from rlvr.rewards.compose import build_verifier

    lenient = lenient_spec(spec)
    return {"lenient": build_verifier(lenient)} if lenient else {}


def evaluate_one_model(
    name: str,
    samples: list[dict],
    args: argparse.Namespace,
    verifier: Any,
    extract: Any = None,
    other_readings: dict[str, Any] | None = None,
) -> dict[str, float]:
    """Load one model and score it on `samples` with evaluate(k=args.k)."""
    from rlvr.config import ModelConfig
    from rlvr.evaluation.evaluate import evaluate_model as evaluate_checkpoint

    return evaluate_checkpoint(
        ModelConfig(name_or_path=name, device=args.device),
        samples,
        verifier,
        max_new_tokens=args.max_new_tokens,
        t1_samples=T1_SAMPLES,
        seed=args.seed,
        k=args.k,
        **({"extract": extract} if extract is not None else {}),
        readings=other_readings,
    )


def format_table(names: list[str], results: list[dict[str, float]], k: int) -> str:
    """One row per model; pass@k and maj@k headers carry the actual k (k = 0: pass1_t1 and no
    pass@k, maj@k); accuracy_lenient follows accuracy when any model has it; a column no model
    reports (the temperature-1 ones when none was drawn) is left out, a value one model lacks
    is nan."""
    columns = list(COLUMNS if k > 0 else T1_COLUMNS)
    if any(LENIENT_COLUMN in metrics for metrics in results):
        columns.insert(1, LENIENT_COLUMN)
    columns = [
        c for c in columns if c == "accuracy" or any(c.replace("@k", f"@{k}") in m for m in results)
    ]
    headers = ["model", *(c.replace("@k", f"@{k}") for c in columns)]
    rows = []
    for name, metrics in zip(names, results):
        cells = [name]
        for column, header in zip(columns, headers[1:]):
            value = metrics.get(header, float("nan"))
            cells.append(f"{value:.1f}" if column == "mean_length" else f"{value:.3f}")
        rows.append(cells)
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = []
    for r in [headers, *rows]:
        first = r[0].ljust(widths[0])
        rest = [cell.rjust(w) for cell, w in zip(r[1:], widths[1:])]
        lines.append("  ".join([first, *rest]))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.config is not None or args.overrides:
        return run_config(args)
    return run_builtin(args)


def run_builtin(args: argparse.Namespace) -> int:
    """`rlvr eval` without a config: the addition task or HumanEval."""
    from rlvr.data.tasks.addition import AdditionTask
    from rlvr.models.loading import resolve_model_path
    from rlvr.rewards.compose import build_verifier

    _check_args(args)
    for name in args.model:  # a missing directory fails before any model is evaluated
        resolve_model_path(name)
    spec, extract = "exact_answer", None  # the task's verifier
    if args.data == "humaneval":
        samples, verifier, extract = _humaneval(args.n)
        spec = "code"
    else:
        task = AdditionTask(digits=args.digits, seed=args.seed)
        try:
            samples = task.heldout(args.n)
        except ValueError as e:
            raise UserError(f"--n: {e}") from None
        verifier = build_verifier(spec)
    other_readings = readings(spec)
    results = []
    for name in args.model:
        results.append(evaluate_one_model(name, samples, args, verifier, extract, other_readings))
    _warn_failures(args.model, results)
    print(format_table(args.model, results, args.k))
    if args.output:
        report = {
            "data": args.data,
            "digits": args.digits,
            "n": args.n,
            "k": args.k,
            "max_new_tokens": args.max_new_tokens,
            "seed": args.seed,
            "models": [{"model": m, "metrics": r} for m, r in zip(args.model, results)],
        }
        _write_report(args.output, report)
    return 0


def config_overrides(args: argparse.Namespace) -> list[str]:
    """The flags given beside a config, as the dotted overrides they stand for (after the
    user's own, so a flag wins)."""
    if args.data is not None or args.digits is not None:
        flag = "--data" if args.data is not None else "--digits"
        raise UserError(
            f"{flag}: not with --config; the config names the task (data.task, data.digits)"
        )
    for flag, value, low in (
        ("--n", args.n, 1),
        ("--k", args.k, 0),
        ("--max-new-tokens", args.max_new_tokens, 1),
    ):
        if value is not None and value < low:
            raise UserError(f"{flag}: must be >= {low}, got {value}")
    pairs = [
        ("eval.size", args.n),
        ("eval.k", args.k),
        ("eval.max_new_tokens", args.max_new_tokens),
        ("data.seed", args.seed),
        ("training.seed", args.seed),
        ("model.device", args.device),
    ]
    return [f"{key}={value}" for key, value in pairs if value is not None]


def model_config(model: Any, name: str) -> Any:
    """The config's model section with `name` as the model. Its `model.gguf_file` is kept only
    where that file exists: a run's final/ (safetensors) of a model trained from a GGUF file is
    evaluated beside the GGUF original with one config."""
    from dataclasses import replace

    gguf = model.gguf_file
    if gguf and name != model.name_or_path and not (Path(name) / gguf).is_file():
        gguf = None
    return replace(model, name_or_path=name, gguf_file=gguf)


def run_config(args: argparse.Namespace) -> int:
    """`rlvr eval --config`: each model evaluated as `rlvr train` evaluates it (eval_before)."""
    from dataclasses import replace

    from rlvr.config import config_warnings, load_config, to_dict, validate_model
    from rlvr.evaluation.evaluate import evaluate_config
    from rlvr.models.loading import resolve_model_path
    from rlvr.rewards.compose import build_verifier

    cfg = load_config(args.config, [*args.overrides, *config_overrides(args)])
    if cfg.eval.size == 0:
        raise UserError("eval.size: 0 evaluates nothing; set eval.size=N or --n N")
    for line in config_warnings(cfg):  # only the evaluation's own keys matter here
        if line.startswith("eval."):
            print(f"rlvr: warning: {line}", file=sys.stderr)
    # Everything checkable without weights is checked before the first model loads.
    build_verifier(cfg.reward.verifier)
    if cfg.environment.name:
        from rlvr.environments import environment_from_config

        environment_from_config(cfg.environment)
    names = args.model or [cfg.model.name_or_path]
    configs = [replace(cfg, model=model_config(cfg.model, name)) for name in names]
    for each in configs:
        validate_model(each.model)
        resolve_model_path(each.model.name_or_path, each.model.gguf_file)
    other_readings = readings(cfg.reward.verifier)
    results = [evaluate_config(each, readings=other_readings, log=_log) for each in configs]
    _warn_failures(names, results)
    print(format_table(names, results, cfg.eval.k))
    if args.output:
        report = {
            "config_file": args.config,
            "overrides": list(args.overrides),
            "config": to_dict(cfg),
            "models": [{"model": m, "metrics": r} for m, r in zip(names, results)],
        }
        _write_report(args.output, report)
    return 0


def _warn_failures(names: list[str], results: list[dict[str, float]]) -> None:
    """One stderr line per model whose evaluation had completions the verifier or the
    environment failed (scored 0, as in training)."""
    for name, metrics in zip(names, results):
        for kind in ("verifier", "environment"):
            if metrics.get(f"{kind}_failures"):
                _log(
                    f"warning: {int(metrics[f'{kind}_failures'])} completions of {name} failed "
                    f"in the {kind} and scored 0"
                )


def _log(message: str) -> None:
    print(f"eval: {message}", file=sys.stderr)


def _write_report(path: str, report: dict[str, Any]) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"eval: wrote {out}", file=sys.stderr)


def _humaneval(n: int) -> tuple[list[dict], Any, Any]:
    """HumanEval's first n problems, the code verifier, and maj@k's answer: the code block."""
    from rlvr.data.humaneval import HumanEvalTask
    from rlvr.rewards.code import CodeVerifier, extract_code

    try:
        samples = HumanEvalTask().heldout(n)
    except ValueError as e:
        raise UserError(f"--n: {e}") from None

    def code_block(completion: str) -> str | None:
        found = extract_code(completion)
        return None if found is None else found[1]

    return samples, CodeVerifier(), code_block


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m rlvr.commands.eval`), with the CLI's error handling."""
    return standalone_main("eval", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
