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
from typing import Any

from rlvr.commands import (
    add_config_help,
    add_run_arguments,
    config_listing,
    run_job,
    standalone_main,
    terminal_text,
)
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
    from rlvr.reward_model.trainer import run_rm

    return run_job(args, prefix="rm", schema=RMConfig, job=run_rm)


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m rlvr.commands.rm`), with the CLI's error handling."""
    return standalone_main("rm", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
