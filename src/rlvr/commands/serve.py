"""`rlvr serve`: an OpenAI-compatible endpoint over an rlvr rollout engine.

    rlvr serve [--config FILE.yaml] [key=value ...] [--host 127.0.0.1] [--port 8000]
               [--engine fast|hf|vllm] [--quiet] [--debug]

Loads model.name_or_path (the embedded model by default; a run's final/ directory, a hub id, a
GGUF file) on the engine of rollout.engine and answers /v1/chat/completions, /v1/completions,
/v1/models and /health until interrupted; every response carries the exact prompt and
completion token ids and the sampler's log-probs. The server is rlvr.serve.server;
docs/guides/serve.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rlvr.commands import add_config_help, config_listing, standalone_main
from rlvr.serve.config import ServeConfig


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "serve",
        help="serve a model over OpenAI's chat/completions API, with exact token ids",
        description="Serve a model on OpenAI's /v1/chat/completions and /v1/completions\n"
        "endpoints, for any harness that drives an OpenAI client; every response also carries\n"
        "the exact tokens: prompt_token_ids, and per choice token_ids and token_logprobs.\n"
        "With no arguments it serves the embedded model on 127.0.0.1:8000 until Ctrl-C.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=config_listing(ServeConfig),
        add_help=False,
    )
    add_config_help(parser, ServeConfig)
    parser.add_argument("--config", metavar="FILE.yaml", help="YAML config (sections as below)")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="dotted overrides, e.g. model.name_or_path=runs/x/final rollout.engine=hf",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port (0 = a free one)")
    parser.add_argument(
        "--engine", choices=["fast", "hf", "vllm"], help="rollout.engine (overrides the config)"
    )
    parser.add_argument("--quiet", action="store_true", help="no line per request")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from rlvr.config import load_config
    from rlvr.errors import UserError
    from rlvr.models.loading import resolve_model_path
    from rlvr.serve.server import Server

    overrides = [*args.overrides, *([f"rollout.engine={args.engine}"] if args.engine else [])]
    cfg = load_config(args.config, overrides, schema=ServeConfig)
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port: expected 0..65535, got {args.port}")
    resolve_model_path(cfg.model.name_or_path, cfg.model.gguf_file)  # before the weights load

    def say(line: str) -> None:
        print(f"rlvr serve: {line}", file=sys.stderr, flush=True)

    server = Server(cfg, host=args.host, port=args.port, log=None if args.quiet else say)
    try:
        url = server.start()
    except OSError as e:
        raise UserError(f"--host {args.host} --port {args.port}: cannot listen ({e})") from None
    say(f"{cfg.served_name} on the {cfg.rollout.engine} engine at {url} (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        say("stopped")
    finally:
        server.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m rlvr.commands.serve`), with the CLI's error handling."""
    return standalone_main("serve", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
