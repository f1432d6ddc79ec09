"""`rlvr rm`: train a Bradley-Terry scalar reward model on preference pairs.

    rlvr rm data.path=pairs.jsonl [--config FILE.yaml] [key=value ...] [--output-dir DIR]
            [--overwrite] [--resume] [--quiet] [--debug]

Rows hold `chosen` and `rejected` completions and optionally a shared `prompt` (TRL's
RewardTrainer and OpenRLHF's format; chat messages too). The model
(AutoModelForSequenceClassification, num_labels=1) starts from model.name_or_path; held-out
pairwise accuracy is printed before and after. The run directory holds config.yaml,
metrics.jsonl, summary.json, final/ (what `reward.verifier=rm:DIR/final` loads) and, with
checkpoint.every > 0, checkpoints/step-N/. See docs/guides/reward-models.md.

Decisions (as `rlvr sft`):
- --resume continues the run in --output-dir from its latest checkpoint; without --config the
  run's own config.yaml is used (overrides still apply and must leave it unchanged).
- Config, metric sinks, model path, run directory and every pair are checked before the run
  directory is created, so a failed start leaves nothing behind (--overwrite clears the
  earlier run's files first).
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
from rlvr.reward_model.config import RMConfig


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "rm",
        help="train a Bradley-Terry reward model on chosen/rejected pairs (for rm:PATH rewards)",
        description=terminal_text(
            "Train a scalar reward model (Bradley-Terry loss) on preference pairs: rows with "
            "chosen and rejected completions and an optional shared prompt. Its final/ "
            "directory is a reward for rlvr train: reward.verifier=rm:RUN_DIR/final."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=config_listing(RMConfig),
        add_help=False,
    )
    add_config_help(parser, RMConfig)
    add_run_arguments(
        parser, prefix="rm", example="data.path=pairs.jsonl optimizer.lr=1e-4", resume=True
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from rlvr.config import load_config
    from rlvr.models.loading import resolve_model_path
    from rlvr.observe.loggers import check_available
    from rlvr.reward_model.trainer import run_rm
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
            args.output_dir or str(Path("runs") / time.strftime("rm-%Y%m%d-%H%M%S")),
            args.overwrite,
        )
    cfg = load_config(config, args.overrides, schema=RMConfig)
    check_available(cfg.logging.report_to)
    resolve_model_path(cfg.model.name_or_path, cfg.model.gguf_file)
    if args.overwrite:  # otherwise run_rm creates the directory once its input checks pass
        create_run_dir(run_dir)

    log = (lambda _msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    try:
        summary = run_rm(
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
    """Stand-alone entry (`python -m rlvr.commands.rm`), with the CLI's error handling."""
    return standalone_main("rm", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
