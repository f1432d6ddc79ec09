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
