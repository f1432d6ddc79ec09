"""Sub-commands of the `rlvr` CLI beyond `train`: each module exposes add_parser(subparsers)
and run(args) -> exit code, and cli.py wires them in."""
