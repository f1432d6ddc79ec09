"""The `rlvr` command.

    rlvr train [--config FILE.yaml] [key=value ...] [--output-dir DIR]
    rlvr verify --verifier NAME --input samples.jsonl [--output out.jsonl]
    rlvr eval --model PATH [--model PATH ...] [--k 8]
    rlvr report RUN_DIR [RUN_DIR ...]
    rlvr serve [--config FILE.yaml] [key=value ...] [--host 127.0.0.1] [--port 8000]

User errors (a config typo, a missing model, a bad value) print one line on stderr and exit 2;
--debug shows the traceback instead.

This module is the parser and `main` only: each subcommand, `train` included, is
rlvr/commands/NAME.py, and nothing there imports this module.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from rlvr import __version__
from rlvr.commands import dispatch

# Subcommands in --help order; each is rlvr/commands/NAME.py with add_parser(subparsers).
SUBCOMMANDS = (
    "train",
    "sft",
    "rm",
    "sample",
    "distill",
    "pipeline",
    "eval",
    "verify",
    "report",
    "estimate",
    "serve",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlvr",
        description="Reinforcement learning from verifiable rewards (GRPO family).",
    )
    parser.add_argument("--version", action="version", version=f"rlvr {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        module_name = f"rlvr.commands.{name}"
        if importlib.util.find_spec(module_name) is not None:
            importlib.import_module(module_name).add_parser(sub)
    return parser


def _quiet_transformers() -> None:
    """Our progress bar and eval lines are the output; transformers' load/save bars are noise."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        from huggingface_hub.utils import logging as hub_logging

        hub_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover - huggingface_hub always comes with transformers
        pass


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # key=value overrides may come after options (`--output-dir D a.b=1`); argparse leaves a
    # positional list that resumes after options unparsed, so it is collected here.
    if (
        extra
        and hasattr(args, "overrides")
        and all("=" in e and not e.startswith("-") for e in extra)
    ):
        args.overrides = [*args.overrides, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        parser.print_help()
        return 0
    from rlvr.distributed.world import launched_world_size

    if args.command != "train" and launched_world_size() > 1:
        parser.error(
            f"`rlvr {args.command}` runs in one process; under torchrun only `rlvr train` "
            "runs data-parallel (docs/guides/distributed.md)"
        )
    _quiet_transformers()
    return dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
