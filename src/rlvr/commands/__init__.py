"""Subcommands of `rlvr` beyond train: each module has `add_parser(subparsers)` and `run(args)`.

`dispatch` is the one place where a user error becomes one stderr line and exit 2 (a traceback
only with --debug); the `rlvr` CLI and each module's stand-alone `python -m` entry both use it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
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


def config_listing(schema: type, section: str | None = None, width: int | None = None) -> str:
    """The configuration keys of a command driven by a config tree, wrapped to `width` columns
    (default: the terminal's, 80 without one). Without `section`: the `--help` epilog, every
    key's name by section; `section` 'all': every key with its default and help; a section
    ('rollout') or a key ('rollout.group_size'): only those ('' when there is none)."""
    from rlvr.config import describe

    width = width or shutil.get_terminal_size((80, 24)).columns
    rows = describe(schema)
    if section is None:
        lines = _wrap(
            "configuration keys (set in --config YAML or as key=value overrides); "
            "`--help SECTION` shows a section's keys with their defaults and help (e.g. "
            "--help rollout), `--help all` every key's:",
            width,
            "",
        )
        for head in config_sections(schema):
            keys = [key for key, _, _ in rows if key.split(".", 1)[0] == head]
            lines += _wrap(f"{head}: {', '.join(keys)}", width, "  ", "      ")
        return "\n".join(lines)
    if section != "all":
        rows = [r for r in rows if r[0] == section or r[0].startswith(section + ".")]
    lines, current = [], None
    for key, default, help_text in rows:
        head = key.split(".", 1)[0]
        if head != current:
            current = head
            lines.append(f"  {head}:")
        lines += _wrap(f"{key} = {default!r}", width, "    ", "        ")
        lines += _wrap(help_text, width, "        ")
    return "\n".join(lines)


def terminal_text(text: str) -> str:
    """A paragraph for a raw `--help` description, wrapped to the terminal's width."""
    width = shutil.get_terminal_size((80, 24)).columns
    return "\n".join(_wrap(" ".join(text.split()), width, ""))


def _wrap(text: str, width: int, indent: str, later: str | None = None) -> list[str]:
    return textwrap.wrap(
        text,
        max(width - 1, 40),  # a full-width line wraps early on some terminals
        initial_indent=indent,
        subsequent_indent=indent if later is None else later,
        break_on_hyphens=False,
    ) or [indent.rstrip()]


def config_sections(schema: type) -> list[str]:
    """The top-level sections of a config tree, in `--help` order."""
    from rlvr.config import describe

    return list(dict.fromkeys(key.split(".", 1)[0] for key, _, _ in describe(schema)))


class ConfigHelp(argparse.Action):
    """-h/--help [SECTION]: the help (the config keys by name), or one section's keys with
    their defaults and help (`rlvr train --help rollout`), or one key's (`--help
    rollout.group_size`), or every key's (`--help all`)."""

    def __init__(self, option_strings: list[str], dest: str, schema: type, **kwargs: Any) -> None:
        self.schema = schema
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs="?",
            metavar="SECTION",
            help="show this help and exit; with SECTION (e.g. rollout, or all) that section's "
            "configuration keys with their defaults and help",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: Any,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        if values is None:
            parser.print_help()
            parser.exit()
        listing = config_listing(self.schema, values)
        if not listing:
            parser.error(
                f"--help {values}: no such section or key; sections: "
                f"{', '.join(config_sections(self.schema))}, all"
            )
        print(listing)
        parser.exit()


def add_config_help(parser: argparse.ArgumentParser, schema: type) -> None:
    """The -h/--help of a parser made with add_help=False whose epilog lists `schema`."""
    parser.add_argument("-h", "--help", action=ConfigHelp, schema=schema)


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
            "without --config its config.yaml is read (key=value overrides on top); the config "
            "must match it",
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


def run_job(
    args: argparse.Namespace,
    *,
    prefix: str,
    schema: type,
    job: Callable[..., dict[str, Any]],
    check: Callable[[Any], None] = lambda _cfg: None,
) -> int:
    """What `rlvr sft` and `rlvr rm` do with their arguments: the run directory (a fresh one
    checked, --resume RUN_DIR with the run's own config.yaml, --overwrite cleared only once every
    check passed), the config of `schema` loaded and checked (`check(cfg)`, the metric sinks,
    the model path) before anything is created, then `job(cfg, run_dir, log=, progress=,
    resume=, allow_config_change=)`; exit 128 + signal when interrupted."""
    import time
    from pathlib import Path

    from rlvr.config import load_config
    from rlvr.models.loading import resolve_model_path
    from rlvr.observe.loggers import check_available
    from rlvr.runs.run import TrainingInterrupted
    from rlvr.runs.run_dir import check_run_dir, create_run_dir

    resuming = resume_dir(args)
    if args.resume is not None:
        if not resuming:
            raise UserError("--resume: name the run directory: --resume RUN_DIR")
        if args.overwrite:
            raise UserError("--resume and --overwrite: choose one")
        run_dir = Path(resuming)
        config = args.config or run_dir / "config.yaml"
        if not Path(config).is_file():
            raise UserError(f"--resume: {run_dir / 'config.yaml'} not found (not a run directory)")
    else:
        config = args.config
        run_dir = check_run_dir(
            args.output_dir or str(Path("runs") / time.strftime(f"{prefix}-%Y%m%d-%H%M%S")),
            args.overwrite,
        )
    cfg = load_config(config, args.overrides, schema=schema)
    check(cfg)
    check_available(cfg.logging.report_to)
    resolve_model_path(cfg.model.name_or_path, cfg.model.gguf_file)
    if args.overwrite:  # otherwise the job creates the directory once its input checks pass
        create_run_dir(run_dir)

    log = (lambda _msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    try:
        summary = job(
            cfg,
            run_dir,
            log=log,
            progress=not args.quiet,
            resume=args.resume is not None,
            allow_config_change=args.allow_config_change,
        )
    except TrainingInterrupted as e:
        print(f"rlvr: {e}", file=sys.stderr)
        return 128 + e.signum
    log(f"run directory: {run_dir}  ({summary['steps']} steps, {summary['wall_seconds']:.0f} s)")
    return 0
