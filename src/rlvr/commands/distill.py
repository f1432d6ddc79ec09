"""`rlvr distill`: a teacher's verified reasoning traces -> SFT of a smaller student.

    rlvr distill [--teacher PATH] [--student PATH] [STAGE.key=value ...] [--output-dir DIR]
                 [--overwrite] [--quiet] [--debug]

The built-in `distill` pipeline (src/rlvr/pipeline/recipes/distill.yaml): stage `traces`
samples k completions per training prompt from the teacher and keeps the verified-correct,
well-formed reasoning traces (one per prompt); stage `student_sft` fine-tunes the student on
them. The table compares teacher, student before and student after on the same held-out
problems, with parameter counts. Defaults: teacher = embedded (0.67M parameters), student =
embedded-small (0.14M). Stage settings take overrides, e.g. traces.sampling.k=16.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rlvr.commands import standalone_main
from rlvr.commands.pipeline import add_common, run_recipe


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "distill",
        help="SFT a smaller student on a teacher's verified traces",
        description="Distillation: sample a teacher, keep its verified-correct reasoning traces, "
        "fine-tune a smaller student on them, and compare both on held-out problems.",
    )
    parser.add_argument("--teacher", metavar="PATH", help="teacher model (default: embedded)")
    parser.add_argument("--student", metavar="PATH", help="student model (default: embedded-small)")
    add_common(parser)
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    models = {}
    if args.teacher:
        models["teacher"] = args.teacher
    if args.student:
        models["student"] = args.student
    return run_recipe("distill", args, models)


def main(argv: list[str] | None = None) -> int:
    return standalone_main("distill", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
