"""Subcommands of `rlvr` beyond train: each module has `add_parser(subparsers)` and `run(args)`.

`dispatch` is the one place where a user error becomes one stderr line and exit 2 (a traceback
only with --debug); the `rlvr` CLI and each module's stand-alone `python -m` entry both use it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from rlvr.errors import UserError


def dispatch(args: argparse.Namespace) -> int:
    """Run `args.func(args)`; user errors print one line and return 2."""
    resume = getattr(args, "resume", None)
    if resume and "=" in resume:  # `--resume a.b=1`: a key=value override, not a RUN_DIR
        args.overrides = [resume, *getattr(args, "overrides", [])]
        args.resume = ""
    try:
        return args.func(args)
    except UserError as e:
        if getattr(args, "debug", False):
            raise
        print(f"rlvr: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlvr: interrupted", file=sys.stderr)
        return 130


def standalone_main(
    name: str, add_parser: Callable[[Any], argparse.ArgumentParser], argv: list[str] | None
) -> int:
    """`python -m rlvr.commands.NAME ...` behaves like `rlvr NAME ...`."""
    parser = argparse.ArgumentParser(prog="rlvr")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return dispatch(parser.parse_args([name, *(sys.argv[1:] if argv is None else argv)]))


def config_listing(schema: type) -> str:
    """The `--help` epilog of a command driven by a config tree: every key, default and help."""
    from rlvr.config import describe

    lines = ["configuration keys (set in --config YAML or as key=value overrides):"]
    section = None
    for key, default, help_text in describe(schema):
        head = key.split(".", 1)[0]
        if head != section:
            section = head
            lines.append(f"  {head}:")
        lines.append(f"    {key} = {default!r}\n        {help_text}")
    return "\n".join(lines)


def add_run_arguments(
    parser: argparse.ArgumentParser, *, prefix: str, example: str, resume: bool
) -> None:
    """--config, key=value overrides, --output-dir, --overwrite, [--resume], --quiet, --debug."""
    parser.add_argument("--config", metavar="FILE.yaml", help="YAML config (sections as below)")
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value", help=f"dotted overrides, e.g. {example}"
    )
    parser.add_argument(
        "--output-dir",
        metavar="DIR",
        help=f"run directory (default: runs/{prefix}-YYYYmmdd-HHMMSS)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace the files of an earlier run in DIR"
    )
    if resume:
        parser.add_argument(
            "--resume",
            nargs="?",
            const="",
            default=None,
            metavar="RUN_DIR",
            help="continue RUN_DIR (or --output-dir) from its newest complete checkpoints/step-N; "
            "the config must match the run's config.yaml",
        )
        parser.add_argument(
            "--allow-config-change",
            action="store_true",
            help="with --resume: accept a config that differs from the run's (the differing "
            "keys are printed)",
        )
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no log lines")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")


def resume_dir(args: argparse.Namespace) -> str | None:
    """The run directory `--resume [RUN_DIR]` names (RUN_DIR, else --output-dir); None when
    not resuming. Both given and different is an error."""
    if args.resume is None:
        return None
    if args.resume and args.output_dir and args.resume != args.output_dir:
        raise UserError(
            f"--resume {args.resume} and --output-dir {args.output_dir}: name one run directory"
        )
    return args.resume or args.output_dir
