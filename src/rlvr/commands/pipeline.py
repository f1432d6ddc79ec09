"""`rlvr pipeline`: run a multi-stage recipe (SFT, GRPO, rejection sampling, filter, eval).

    rlvr pipeline FILE.yaml|RECIPE [STAGE.key=value ...] [--model NAME=PATH ...]
                  [--output-dir DIR] [--overwrite] [--quiet] [--debug]

RECIPE is a built-in pipeline: r1 (cold start -> RL -> rejection sampling -> SFT -> RL),
r1_zero (RL on the base model) or distill (teacher traces -> SFT of a smaller student). See
docs/pipelines.md for the file format. Running the same pipeline into the same --output-dir again
resumes it: finished stages are skipped, an interrupted one continues from its last checkpoint.
At the end the stage table (held-out accuracy after every stage) is printed and written to
DIR/stages.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from rlvr.commands import standalone_main
from rlvr.errors import ConfigError, UserError


def add_common(parser: argparse.ArgumentParser, with_pipeline: bool = False) -> None:
    # One positional list: argparse cannot take a second positional list after options.
    parser.add_argument(
        "overrides",
        nargs="+" if with_pipeline else "*",
        metavar="FILE.yaml|RECIPE [STAGE.key=value ...]" if with_pipeline else "STAGE.key=value",
        help=("pipeline file or recipe (r1, r1_zero, distill), then " if with_pipeline else "")
        + "overrides of a stage's config, e.g. rl1.training.steps=10",
    )
    parser.add_argument("--output-dir", metavar="DIR", help="default: runs/NAME-YYYYmmdd-HHMMSS")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="delete an earlier run in --output-dir first instead of resuming it",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars or stage lines")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "pipeline",
        help="run a multi-stage recipe (r1, r1_zero, distill, or a YAML file)",
        description=__doc__.split("\n\n", 2)[2].split("\n\n")[0],
    )
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="replace a named model of the pipeline, e.g. --model base=runs/x/final",
    )
    add_common(parser, with_pipeline=True)
    parser.set_defaults(func=run)
    return parser


def parse_model_overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UserError(f"--model {item}: expected NAME=PATH, e.g. base=runs/x/final")
        out[name] = path
    return out


def apply_stage_overrides(spec: Any, overrides: list[str]) -> None:
    """'rl1.training.steps=10' sets training.steps in stage rl1's config."""
    from rlvr.config import parse_override

    names = [s.name for s in spec.stages]
    for text in overrides:
        key, value = parse_override(text)
        stage_name, dot, rest = key.partition(".")
        if not dot or not rest:
            raise ConfigError(
                f"override '{text}': expected STAGE.key=value, e.g. rl1.training.steps=10"
            )
        stage = next((s for s in spec.stages if s.name == stage_name), None)
        if stage is None:
            raise ConfigError(
                f"override '{text}': no stage '{stage_name}' (stages: {', '.join(names)})"
            )
        stage.config = {**stage.config, rest: value}


def run_recipe(
    name_or_path: str,
    args: argparse.Namespace,
    model_overrides: dict[str, str],
) -> int:
    import shutil

    from rlvr.pipeline.runner import Pipeline, format_table
    from rlvr.pipeline.spec import load_pipeline, resolve_pipeline_file

    path = resolve_pipeline_file(name_or_path)
    spec = load_pipeline(path, model_overrides)
    apply_stage_overrides(spec, args.overrides)
    run_dir = Path(
        args.output_dir or Path("runs") / f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"--output-dir {run_dir}: exists and is not a directory")
    log = (lambda _m: None) if args.quiet else (lambda m: print(m, file=sys.stderr))
    pipeline = Pipeline(spec, run_dir, log=log, progress=not args.quiet)  # checks every stage
    if args.overwrite and run_dir.exists():
        shutil.rmtree(run_dir)
    result = pipeline.run()
    print(format_table(result["rows"]))
    log(f"run directory: {run_dir}  ({result['wall_seconds']:.0f} s; table in stages.md)")
    return 0


def run(args: argparse.Namespace) -> int:
    name, *args.overrides = args.overrides
    return run_recipe(name, args, parse_model_overrides(args.model))


def main(argv: list[str] | None = None) -> int:
    return standalone_main("pipeline", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
