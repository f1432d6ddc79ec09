"""`rlvr verify`: score a JSONL file of completions with a verifier, outside training.

    rlvr verify --verifier math --input samples.jsonl [--output out.jsonl] [--workers N]
                [--timeout S]

Each input line is a JSON object with a "completion" string plus whatever the verifier reads
(math: "answer"); the whole object is the sample. Each output line is the input object with
"reward" (float) and "detail" (short text: the extracted answer, the error) added, in input order;
without --output, lines go to stdout. A summary goes to stderr.

Decisions:
- The whole input is read and checked before anything is scored or written, so a malformed line
  (DataError, naming the file and line) costs no scoring time and leaves an existing --output
  file untouched.
- Output is then written in input order, a chunk at a time, and flushed: an interrupted run keeps
  every line already scored.
- Scoring runs in a VerifierPool (--workers, default: one per CPU) with a per-sample time limit
  (--timeout); --workers 0 scores in this process, where only verifiers that isolate themselves
  (math) have a time limit.
- Failing verifiers follow the training policy (rlvr.rewards.base), in a pool or not: a sample
  whose verifier raises, returns anything but a finite number, crashes or times out scores 0
  with detail "error: Type: message" and counts in `failures`; each distinct error (the same
  type from the same line) is printed once to stderr with its traceback. A ConfigError (a
  missing dependency, a sandbox that cannot start) stops the command with its one line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from rlvr.commands import standalone_main
from rlvr.errors import DataError, UserError

CHUNK = 256  # samples scored between writes


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "verify",
        help="score a JSONL file of completions with a verifier",
        description="Score each line of a JSONL file ({'completion': ..., 'answer': ...}) with a "
        "verifier; write each line back with 'reward' and 'detail' added.",
    )
    parser.add_argument(
        "--verifier",
        required=True,
        metavar="NAME",
        help="math, format, language, code, exact_answer, json_schema, regex, 'module:function', "
        "'file.py:function', or a weighted sum like 'math:1.0,format:0.1'",
    )
    parser.add_argument("--input", required=True, metavar="FILE.jsonl", help="samples to score")
    parser.add_argument("--output", metavar="FILE.jsonl", help="scored samples (default: stdout)")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="worker processes (default: one per CPU; 0: score in this process)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="seconds allowed per sample before its worker is killed (default: 10)",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    parser.set_defaults(func=run)
    return parser


def read_samples(path: Path) -> list[dict[str, Any]]:
    """Every non-blank line of a JSONL file as a dict with a 'completion' string."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read ({e})") from None
    samples = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(
                f"{path} line {number}: expected a JSON object with 'completion' "
                f"(invalid JSON: {e.msg})"
            ) from None
        if not isinstance(obj, dict) or not isinstance(obj.get("completion"), str):
            raise DataError(f"{path} line {number}: expected a JSON object with 'completion'")
        samples.append(obj)
    return samples


class _InProcessScorer:
    """The VerifierPool interface over a verifier called in this process (`score_one`, as
    the pool's workers do)."""

    def __init__(self, spec: str) -> None:
        from rlvr.rewards.compose import build_verifier

        self.verifier = build_verifier(spec)

    def score_with_failures(self, completions: list[str], samples: list[dict[str, Any]]):  # noqa: ANN201
        from dataclasses import replace

        from rlvr.rewards.pool import BatchScores, score_one

        rewards, details, failed = [], [], []
        for row, (completion, sample) in enumerate(zip(completions, samples)):
            reply = score_one(self.verifier, completion, sample)
            rewards.append(reply.reward)
            details.append(reply.detail)
            if reply.failure is not None:
                failed.append(replace(reply.failure, row=row))
        return BatchScores(rewards, len(failed), details), {}, failed

    def close(self) -> None:
        close = getattr(self.verifier, "close", None)
        if callable(close):
            close()


def report_failures(
    failures: list[Any], chunk: list[dict[str, Any]], begin: int, seen: set[str], err: TextIO
) -> None:
    """Each error of `chunk` (input samples from `begin`) not in `seen` (the same type from
    the same line is one error), once: the sample it first failed (its position in the input
    from 1, and its id when it has one), the error line, and the traceback."""
    for f in failures:
        if f.key in seen:
            continue
        seen.add(f.key)
        sample = chunk[f.row]  # its `id`, else its `task_id` (as rlvr.rewards.base.sample_id)
        named = sample.get("id") if sample.get("id") is not None else sample.get("task_id")
        where = f"sample {begin + f.row + 1}" + (f" (id {named!r})" if named is not None else "")
        print(f"verify: the verifier failed on {where}: {f.error}", file=err)
        if f.traceback:
            print(f.traceback.rstrip("\n"), file=err)


def run(args: argparse.Namespace) -> int:
    from rlvr.rewards.pool import VerifierPool

    if args.timeout is not None and args.timeout <= 0:
        raise UserError(f"--timeout: must be > 0, got {args.timeout}")
    if args.workers is not None and args.workers < 0:
        raise UserError(f"--workers: must be >= 0, got {args.workers}")
    samples = read_samples(Path(args.input))
    start = time.monotonic()
    if args.workers == 0:
        scorer: Any = _InProcessScorer(args.verifier)
        how = "in-process"
    else:
        scorer = VerifierPool(args.verifier, workers=args.workers, timeout_s=args.timeout)
        how = f"{scorer.workers} workers"
    total, failures = 0.0, 0
    seen: set[str] = set()  # errors already printed
    out: TextIO = sys.stdout
    try:
        if args.output:
            Path(args.output).parent.mkdir(parents=True, exist_ok=True)
            out = open(args.output, "w", encoding="utf-8")  # noqa: SIM115 - closed below
        for begin in range(0, len(samples), CHUNK):
            chunk = samples[begin : begin + CHUNK]
            scores, _, failed = scorer.score_with_failures([s["completion"] for s in chunk], chunk)
            failures += scores.failures
            report_failures(failed, chunk, begin, seen, sys.stderr)
            for sample, reward, detail in zip(chunk, scores.rewards, scores.details):
                total += reward
                out.write(json.dumps({**sample, "reward": reward, "detail": detail}) + "\n")
            out.flush()
    finally:
        scorer.close()
        if out is not sys.stdout:
            out.close()
    n = len(samples)
    mean = total / n if n else 0.0
    print(
        f"verify: n={n} mean_reward={mean:.4f} failures={failures} "
        f"time={time.monotonic() - start:.1f}s ({args.verifier}, {how})"
        + (f" -> {args.output}" if args.output else ""),
        file=sys.stderr,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m rlvr.commands.verify`), with the CLI's error handling."""
    return standalone_main("verify", add_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
