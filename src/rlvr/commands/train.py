"""`rlvr train`: GRPO-family RL on a config (no arguments: the embedded default).

    rlvr train [--config FILE.yaml] [key=value ...] [--output-dir DIR] [--overwrite]
               [--resume [RUN_DIR]] [--allow-config-change] [--quiet] [--debug]

Everything that can be checked without loading weights (config, verifier, loggers, run
directory, model path) is checked before the model loads. Under torchrun every rank runs
`cmd_train`; rank 0 picks and checks the run directory (in GRPOTrainer, which the Python API
shares). `--resume RUN_DIR` without --config reads RUN_DIR/config.yaml, key=value overrides on
top (a changed key needs --allow-config-change), so the line a stopped run prints works as
written. The loop itself is rlvr.training.grpo.
"""

from __future__ import annotations

import argparse
import sys
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
from rlvr.config import Config
from rlvr.errors import UserError


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help="train a policy with GRPO-family RL (no arguments: the embedded default)",
        description=terminal_text(
            "Train a policy with GRPO-family RL. With no arguments it runs the embedded "
            "default: a tiny base model learns to reason on multi-digit addition."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=config_listing(Config),
        add_help=False,
    )
    add_config_help(parser, Config)
    add_run_arguments(
        parser, prefix="train", example="rollout.group_size=8 optimizer.lr=1e-5", resume=True
    )
    parser.set_defaults(func=cmd_train)
    return parser


def cmd_train(args: argparse.Namespace) -> int:
    from rlvr.config import config_warnings, load_config
    from rlvr.models.loading import resolve_model_path
    from rlvr.observe.loggers import check_available
    from rlvr.reward_model.scoring import learned_reward_check
    from rlvr.rewards.compose import build_verifier

    resuming = resume_dir(args)
    if args.resume is not None and not resuming:
        raise UserError("--resume: name the run directory: --resume RUN_DIR")
    config = args.config
    if resuming and config is None and (Path(resuming) / "config.yaml").is_file():
        config = str(Path(resuming) / "config.yaml")  # the run's own config, overrides on top
    cfg = load_config(config, args.overrides)
    # Everything that can be checked without loading weights is checked before the run starts.
    build_verifier(cfg.reward.verifier, resolve=learned_reward_check(cfg))  # rm: unloaded
    if cfg.environment.name:
        from rlvr.environments import environment_from_config

        environment_from_config(cfg.environment)
    check_available(cfg.logging.report_to)
    from rlvr.distributed.world import init_world

    # Under torchrun every rank runs this; the trainer has rank 0 pick and check the directory.
    world = init_world(cfg.distributed.backend)
    if world.is_main and not args.quiet:
        for line in config_warnings(cfg):  # options the rest of the config makes ineffective
            print(f"rlvr: warning: {line}", file=sys.stderr)
    resolve_model_path(cfg.model.name_or_path, cfg.model.gguf_file)

    from rlvr.training.grpo import GRPOTrainer

    log = (lambda _msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    # The run directory is checked before the model loads and created once it has (a failed
    # start leaves nothing behind): GRPOTrainer does both, as for a Python caller.
    trainer = GRPOTrainer(
        cfg,
        resuming if args.resume is not None else args.output_dir,
        progress=not args.quiet,
        log=log,
        resume=args.resume is not None,
        overwrite=args.overwrite,
        allow_config_change=args.allow_config_change,
        world=world,
    )
    from rlvr.runs.run import TrainingInterrupted

    try:
        result = trainer.train()
    except TrainingInterrupted as e:
        print(f"rlvr: {e}", file=sys.stderr)
        return 128 + e.signum
    summary = result.summary
    log(
        f"run directory: {result.run_dir}  ({summary['steps']} steps, "
        f"{summary['wall_seconds']:.0f} s)"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m rlvr.commands.train`), with the CLI's error handling."""
    return standalone_main("train", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
