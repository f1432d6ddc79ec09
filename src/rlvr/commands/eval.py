"""`rlvr eval`: compare one or more models on the same held-out problems.

    rlvr eval --model PATH [--model PATH ...] [--data addition|humaneval] [--digits 3] [--n N]
              [--k 8] [--max-new-tokens N] [--seed 0] [--device auto] [--output FILE.json]

Each --model is a directory written by save_pretrained (a training run's final/ or a
checkpoint), a hub id, or 'embedded' (the built-in tiny base model). Every model is scored by
`rlvr.training.evaluate.evaluate` with k = --k on the same `--n` held-out problems of the task,
with the same seed; stdout gets one table, one row per model:

    model  accuracy  pass@1  pass@k  maj@k  reasoning_fraction  mean_length

accuracy is greedy; the others come from max(k, 4) samples per problem at temperature 1 (see
docs/evaluation.md). A task scored by the `math` verifier also gets accuracy_lenient beside
accuracy: greedy accuracy under `math_lenient`, which also reads answers given without a box,
tag or answer line (the fair number for a base model's baseline row). --output also writes every
metric of every model as JSON.

Decisions:
- --seed seeds both the held-out problem list (the task's seed) and the temperature-1 draws, so
  two invocations with the same arguments print the same table.
- The verifier is the task's: exact_answer for addition (--n 200, --max-new-tokens 64 by
  default); code for humaneval (all 164 problems, --max-new-tokens 512 by default; needs the
  `humaneval` extra), whose maj@k votes over the completions' code blocks. `lenient_spec`
  names the lenient reading of a spec with a `math` component (math -> math_lenient), scored on
  the same greedy completions.
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
LENIENT_COLUMN = "accuracy_lenient"  # after accuracy, when a model's metrics have it
MATH_SPECS = {"math": "math_lenient", "rlvr.rewards.math:math_reward": "math_lenient"}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "eval",
        help="compare models on held-out problems: accuracy, pass@k, maj@k",
        description="Evaluate one or more models on the same held-out problems and print one "
        "table (greedy accuracy, pass@1, pass@k, maj@k, reasoning fraction, mean length).",
    )
    parser.add_argument(
        "--model",
        action="append",
        required=True,
        metavar="PATH",
        help="model directory, hub id, or 'embedded'; repeat to compare several",
    )
    parser.add_argument(
        "--data",
        default="addition",
        choices=["addition", "humaneval"],
        help="task (default: addition); humaneval needs pip install 'rlvr[humaneval]'",
    )
    parser.add_argument("--digits", type=int, default=3, help="operand digits (default: 3)")
    parser.add_argument(
        "--n", type=int, default=None, help="held-out problems (default: 200; humaneval: 164)"
    )
    parser.add_argument("--k", type=int, default=8, help="k of pass@k and maj@k (default: 8)")
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="completion token limit (default: 64; humaneval: 512)",
    )
    parser.add_argument("--seed", type=int, default=0, help="problems and sampling seed")
    parser.add_argument(
        "--device", default="auto", choices=["auto", "cpu", "cuda"], help="default: auto"
    )
    parser.add_argument("--output", metavar="FILE.json", help="also write all metrics as JSON")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    parser.set_defaults(func=run)
    return parser


def _check_args(args: argparse.Namespace) -> None:
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


def evaluate_model(
    name: str,
    samples: list[dict],
    args: argparse.Namespace,
    verifier: Any,
    extract: Any = None,
    other_readings: dict[str, Any] | None = None,
) -> dict[str, float]:
    """Load one model and score it on `samples` with evaluate(k=args.k)."""
    from rlvr.config import ModelConfig
    from rlvr.training.evaluate import evaluate_model as evaluate_checkpoint

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
    """One row per model; pass@k and maj@k headers carry the actual k; accuracy_lenient follows
    accuracy when any model has it."""
    columns = list(COLUMNS)
    if any(LENIENT_COLUMN in metrics for metrics in results):
        columns.insert(1, LENIENT_COLUMN)
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
        results.append(evaluate_model(name, samples, args, verifier, extract, other_readings))
    print(format_table(args.model, results, args.k))
    if args.output:
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "data": args.data,
            "digits": args.digits,
            "n": args.n,
            "k": args.k,
            "max_new_tokens": args.max_new_tokens,
            "seed": args.seed,
            "models": [{"model": m, "metrics": r} for m, r in zip(args.model, results)],
        }
        out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"eval: wrote {out}", file=sys.stderr)
    return 0


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
