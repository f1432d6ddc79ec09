"""`rlvr sft`: supervised fine-tuning on prompt -> completion pairs.

    rlvr sft [--config FILE.yaml] [key=value ...] [--output-dir DIR] [--overwrite] [--resume]
             [--quiet] [--debug]

With no arguments it fine-tunes the embedded model on 2000 correct `<think>` demonstrations of
3-digit addition (the R1 cold start in miniature) and prints held-out accuracy before and
after. The run directory holds config.yaml, metrics.jsonl, summary.json, final/ and, with
checkpoint.every > 0, checkpoints/step-N/. See docs/sft.md.

Decisions:
- --resume continues the run in --output-dir from its latest checkpoint; without --config the
  run's own config.yaml is used (overrides still apply and must leave it unchanged).
- Config, verifier, metric sinks, model path, run directory and every data row are checked
  before the run directory is created, so a failed start leaves nothing behind (--overwrite
  clears the earlier run's files first).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from rlvr.commands import (
    add_config_help,
    add_run_arguments,
    config_listing,
    resume_dir,
    standalone_main,
    terminal_text,
)
from rlvr.errors import UserError
from rlvr.sft.trainer import SFTConfig


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "sft",
        help="supervised fine-tuning on prompt/completion pairs (no arguments: embedded demo)",
        description=terminal_text(
            "Supervised fine-tuning with completion-only loss, packing and optional "
            "LoRA. With no arguments it fine-tunes the embedded model on addition demonstrations."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=config_listing(SFTConfig),
        add_help=False,
    )
    add_config_help(parser, SFTConfig)
    add_run_arguments(
        parser, prefix="sft", example="data.path=traces.jsonl optimizer.lr=1e-5", resume=True
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from rlvr.config import load_config
    from rlvr.models.loading import resolve_model_path
    from rlvr.observe.loggers import check_available
    from rlvr.rewards.compose import build_verifier
    from rlvr.runs.run_dir import check_run_dir, create_run_dir
    from rlvr.sft.trainer import SFTConfig, run_sft

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
            args.output_dir or str(Path("runs") / time.strftime("sft-%Y%m%d-%H%M%S")),
            args.overwrite,
        )
    cfg = load_config(config, args.overrides, schema=SFTConfig)
    build_verifier(cfg.reward.verifier)
    check_available(cfg.logging.report_to)
    resolve_model_path(cfg.model.name_or_path, cfg.model.gguf_file)
    if args.overwrite:  # otherwise run_sft creates the directory once its input checks pass
        create_run_dir(run_dir)

    log = (lambda _msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    from rlvr.runs.run import TrainingInterrupted

    try:
        summary = run_sft(
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


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m rlvr.commands.sft`), with the CLI's error handling."""
    return standalone_main("sft", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
