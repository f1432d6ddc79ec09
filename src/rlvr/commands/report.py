"""`rlvr report`: one self-contained HTML report of one or more training runs.

    rlvr report RUN_DIR [RUN_DIR ...] [--output DIR]

Writes DIR/report.html (plots embedded, opens offline) and DIR/plots/NAME.png; DIR defaults to
the first RUN_DIR. Several runs are overlaid on each plot and their configs compared. What the
report holds: docs/report.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rlvr.commands import standalone_main


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "report",
        help="write an HTML report (plots, eval, config diff, samples) of training runs",
        description="Read RUN_DIR/metrics.jsonl, summary.json, config.yaml and samples/ of each "
        "run and write one self-contained report.html with the runs overlaid.",
    )
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories")
    parser.add_argument(
        "--output", metavar="DIR", help="where report.html and plots/ go (default: first RUN_DIR)"
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from rlvr.observe.report import write_report

    run_dirs = [Path(p) for p in args.run_dirs]
    output = Path(args.output) if args.output else run_dirs[0]
    report = write_report(run_dirs, output)
    print(f"report: {len(run_dirs)} run(s) -> {report}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m rlvr.commands.report`), with the CLI's error handling."""
    return standalone_main("report", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
