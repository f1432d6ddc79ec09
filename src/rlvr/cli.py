"""The `rlvr` command.

    rlvr train [--config FILE.yaml] [key=value ...] [--output-dir DIR]
    rlvr verify --verifier NAME --input samples.jsonl [--output out.jsonl]
    rlvr eval --model PATH [--model PATH ...] [--k 8]
    rlvr report RUN_DIR [RUN_DIR ...]

User errors (a config typo, a missing model, a bad value) print one line on stderr and exit 2;
--debug shows the traceback instead.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from rlvr import __version__
from rlvr.commands import add_run_arguments, config_listing, dispatch, resume_dir
from rlvr.config import Config
from rlvr.errors import UserError

# Subcommands beyond `train`, in --help order; each is rlvr/commands/NAME.py with add_parser().
SUBCOMMANDS = ("sft", "sample", "distill", "pipeline", "eval", "verify", "report", "estimate")
RUN_FILES = ("config.yaml", "metrics.jsonl", "summary.json", "samples", "final", "checkpoints")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlvr",
        description="Reinforcement learning from verifiable rewards (GRPO family).",
    )
    parser.add_argument("--version", action="version", version=f"rlvr {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    train = sub.add_parser(
        "train",
        help="train a policy with GRPO-family RL (no arguments: the embedded default)",
        description="Train a policy with GRPO-family RL. With no arguments it runs the embedded "
        "default: a tiny base model learns to reason on multi-digit addition.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=config_listing(Config),
    )
    add_run_arguments(
        train, prefix="train", example="rollout.group_size=8 optimizer.lr=1e-5", resume=True
    )
    train.set_defaults(func=cmd_train)

    import importlib
    import importlib.util

    for name in SUBCOMMANDS:
        module_name = f"rlvr.commands.{name}"
        if importlib.util.find_spec(module_name) is not None:
            importlib.import_module(module_name).add_parser(sub)
    return parser


def check_run_dir(
    output_dir: str | None,
    overwrite: bool,
    *,
    files: tuple[str, ...] = RUN_FILES,
    prefix: str = "train",
) -> Path:
    """The run directory to use; refuses to clobber an earlier run (any of `files`) unless
    `overwrite`. Without `output_dir`: runs/PREFIX-YYYYmmdd-HHMMSS."""
    run_dir = (
        Path(output_dir) if output_dir else Path("runs") / time.strftime(f"{prefix}-%Y%m%d-%H%M%S")
    )
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"--output-dir {run_dir}: exists and is not a directory")
    existing = [name for name in files if (run_dir / name).exists()]
    if existing and not overwrite:
        raise UserError(
            f"--output-dir {run_dir}: already holds a run ({', '.join(existing)}); "
            "choose another directory or pass --overwrite"
        )
    return run_dir


def check_resumable(output_dir: str | None, cfg: object, *, allow_change: bool = False) -> Path:
    """The run directory to resume: it must exist and hold the same config (diff named), unless
    `allow_change`, which prints the differing keys instead."""
    from rlvr.config import to_dict
    from rlvr.training.checkpoint import check_same_config

    if not output_dir:
        raise UserError("--resume: name the run directory: --resume RUN_DIR")
    run_dir = Path(output_dir)
    check_same_config(
        to_dict(cfg),
        run_dir,
        allow_change=allow_change,
        warn=lambda msg: print(f"rlvr: {msg}", file=sys.stderr),
    )
    return run_dir


def create_run_dir(run_dir: Path) -> None:
    """Create the directory, removing an earlier run's files (only reached with --overwrite)."""
    for name in RUN_FILES:
        target = run_dir / name
        if not target.exists():
            continue
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    run_dir.mkdir(parents=True, exist_ok=True)


def cmd_train(args: argparse.Namespace) -> int:
    from rlvr.config import load_config
    from rlvr.models.loading import resolve_model_path
    from rlvr.observe.loggers import check_available
    from rlvr.rewards.compose import build_verifier

    cfg = load_config(args.config, args.overrides)
    # Everything that can be checked without loading weights is checked before the run starts.
    build_verifier(cfg.reward.verifier)
    check_available(cfg.logging.report_to)
    from rlvr.distributed.world import init_world

    # Under torchrun every rank runs this; rank 0 picks and checks the run directory.
    world = init_world(cfg.distributed.backend)
    checked: tuple[Path | None, str | None] = (None, None)
    if world.is_main:
        try:
            resuming = resume_dir(args)
            if args.resume is not None:
                path = check_resumable(resuming, cfg, allow_change=args.allow_config_change)
            else:
                path = check_run_dir(args.output_dir, args.overwrite)
            checked = (path, None)
        except UserError as e:
            checked = (None, str(e))
    run_dir, error = world.broadcast_object(checked)
    if error is not None:
        raise UserError(error)
    resolve_model_path(cfg.model.name_or_path, cfg.model.gguf_file)

    from rlvr.training.grpo import GRPOTrainer

    log = (lambda _msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    resume = args.resume is not None
    trainer = GRPOTrainer(
        cfg, run_dir, progress=not args.quiet, log=log, resume=resume, world=world
    )
    # Created only once the model has loaded: a failed start leaves nothing behind.
    if not resume and world.is_main:
        create_run_dir(run_dir)
    world.barrier()
    from rlvr.training.run import TrainingInterrupted

    try:
        summary = trainer.train()
    except TrainingInterrupted as e:
        print(f"rlvr: {e}", file=sys.stderr)
        return 128 + e.signum
    log(f"run directory: {run_dir}  ({summary['steps']} steps, {summary['wall_seconds']:.0f} s)")
    return 0


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
