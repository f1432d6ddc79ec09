"""`rlvr sample`: k completions per prompt, verifier scores, rejection sampling, curriculum band.

    rlvr sample [--config FILE.yaml] [key=value ...] [--output-dir DIR] [--overwrite]
                [--quiet] [--debug]

The job itself (config, files written, decisions) is rlvr.sample.job; docs/sampling.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rlvr.commands import add_config_help, add_run_arguments, config_listing, standalone_main
from rlvr.sample.job import SAMPLE_FILES, SampleConfig, format_summary, run_sample


def check_sample_dir(output_dir: str | None, overwrite: bool) -> Path:
    """The output directory to use; refuses to clobber an earlier sample run unless `overwrite`."""
    from rlvr.runs.run_dir import check_run_dir

    return check_run_dir(output_dir, overwrite, files=SAMPLE_FILES, prefix="sample")


# --- CLI --------------------------------------------------------------------------------------


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "sample",
        help="sample k completions per prompt, keep the verified ones (rejection sampling)",
        description="Sample k completions per prompt, score them with the verifier, write the\n"
        "verified ones as SFT data (kept.jsonl), per-prompt pass rates and a pass-rate\n"
        "curriculum. With no arguments it samples the embedded model on addition.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=config_listing(SampleConfig),
        add_help=False,
    )
    add_config_help(parser, SampleConfig)
    add_run_arguments(
        parser, prefix="sample", example="sampling.k=16 filter.max_per_prompt=4", resume=False
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from rlvr.config import load_config
    from rlvr.models.loading import resolve_model_path
    from rlvr.rewards.compose import build_verifier

    cfg = load_config(args.config, args.overrides, schema=SampleConfig)
    # Everything that can be checked without loading weights is checked before sampling starts.
    build_verifier(cfg.reward.verifier)
    out_dir = check_sample_dir(args.output_dir, args.overwrite)
    resolve_model_path(cfg.model.name_or_path, cfg.model.gguf_file)
    log = (lambda _msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    summary = run_sample(cfg, out_dir, log=log, progress=not args.quiet)
    print(format_summary(summary, out_dir))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m rlvr.commands.sample`), with the CLI's error handling."""
    return standalone_main("sample", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
