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
from typing import Any

from rlvr.commands import (
    add_config_help,
    add_run_arguments,
    config_listing,
    run_job,
    standalone_main,
    terminal_text,
)
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
    from rlvr.rewards.compose import build_verifier
    from rlvr.sft.trainer import run_sft

    def check(cfg: Any) -> None:
        build_verifier(cfg.reward.verifier)  # held-out accuracy's verifier, before any model

    return run_job(args, prefix="sft", schema=SFTConfig, job=run_sft, check=check)


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m rlvr.commands.sft`), with the CLI's error handling."""
    return standalone_main("sft", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
