"""reasoning-gym adapter: any reasoning-gym generator as a task, its scorer as the `gym` verifier.

Needs the optional extra: `pip install 'rlvr[gym]'` (reasoning-gym pins its own dependencies,
so it is not installed by default).

    data.task=gym data.gym_name=basic_arithmetic 'data.gym_config=[min_terms=2,operators=[+, -]]'
    reward.verifier=gym

`data.gym_config` is a list of KEY=VALUE texts, values read as YAML (`parse_gym_config`); the
override splits it at the commas outside brackets (rlvr.config.fields), so nested lists survive.

A sample wraps one entry of `reasoning_gym.create_dataset(name, size=gym_size, seed=seed,
**gym_config)`::

    {"id": "gym-basic_arithmetic-417", "prompt": entry["question"], "answer": entry["answer"],
     "source": "gym-basic_arithmetic",
     "gym": {"name": "basic_arithmetic", "config": {...the kwargs above...}, "entry": entry}}

The entry (question, answer, metadata) is kept whole under "gym" so the dataset's scorer gets
exactly what it generated; it is JSON-serialisable, so samples survive `rlvr verify` files.

Train/held-out split: `sha256(question) mod 10 == 0` marks an entry held out (~10%).
Training draws uniformly random indices of the dataset and skips held-out questions;
`heldout(n)` takes the first n distinct held-out questions in index order (deterministic), so
no held-out question is ever trained on, even when the generator repeats questions. Too few is a
DataError with the real cause: settings that allow few distinct questions, or a small gym_size.

Verifier `gym` (rlvr/rewards/gym.py): the dataset's own `score_answer` on the completion's
answer, the dataset rebuilt from the sample's "gym" field.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from typing import Any

from rlvr.config.settings import parse_settings
from rlvr.errors import DataError

# gym_reward is re-exported: "rlvr.data.tasks.gym:gym_reward" was its spec before it moved.
from rlvr.rewards.gym import create_gym_dataset, gym_reward  # noqa: F401

HELDOUT_MODULUS = 10
_SCAN_FACTOR = 200  # held-out scan: at most this many entries per requested problem (+ slack)


def parse_gym_config(items: Sequence[str] | Mapping[str, Any]) -> dict[str, Any]:
    """`data.gym_config`'s settings as keyword arguments (rlvr.config.settings.parse_settings):
    ['min_terms=2', 'operators=[+, -]'] -> {'min_terms': 2, 'operators': ['+', '-']}."""
    return parse_settings(items, "data.gym_config")


def is_heldout_question(question: str) -> bool:
    """True if the question belongs to the held-out split (about 10% of questions)."""
    digest = hashlib.sha256(question.encode()).digest()
    return int.from_bytes(digest[:8], "big") % HELDOUT_MODULUS == 0


class GymTask:
    """Prompts from one reasoning-gym generator (module docstring)."""

    def __init__(
        self, name: str, config: Mapping[str, Any] | None = None, size: int = 100_000, seed: int = 0
    ) -> None:
        self.name = name
        self.source = f"gym-{name}"
        self.kwargs = {**dict(config or {}), "size": size, "seed": seed}
        self.size = size
        self.dataset = create_gym_dataset(name, self.kwargs)

    def make_sample(self, index: int) -> dict:
        entry = self.dataset[index]
        answer = entry.get("answer")
        return {
            "id": f"{self.source}-{index}",
            "prompt": entry["question"],
            "answer": None if answer is None else str(answer),
            "source": self.source,
            "gym": {"name": self.name, "config": dict(self.kwargs), "entry": entry},
        }

    def sample_train(self, rng: random.Random) -> dict:
        for _ in range(1000):
            sample = self.make_sample(rng.randrange(self.size))
            if not is_heldout_question(sample["prompt"]):
                return sample
        raise DataError(
            f"data.gym_name={self.name}: 1000 draws in a row were held-out questions; "
            "the generator produces too few distinct questions"
        )

    def heldout(self, n: int) -> list[dict]:
        """The first n distinct held-out questions in index order."""
        limit = min(self.size, _SCAN_FACTOR * n + 1000)
        seen: set[str] = set()  # every distinct question scanned, held out or not
        samples: list[dict] = []
        scanned = 0
        for index in range(limit):
            if len(samples) == n:
                break
            scanned += 1
            sample = self.make_sample(index)
            question = sample["prompt"]
            if question in seen:
                continue
            seen.add(question)
            if is_heldout_question(question):
                samples.append(sample)
        if len(samples) < n:
            raise DataError(self._too_few_heldout(n, len(samples), len(seen), scanned))
        return samples

    def _too_few_heldout(self, n: int, found: int, distinct: int, scanned: int) -> str:
        """Why heldout(n) came short, and what to change: a generator whose settings make few
        distinct questions (it repeats them), or a dataset too small to hold n held-out ones."""
        head = (
            f"data.gym_name={self.name}: asked for {n} held-out questions, found {found}: its "
            f"first {scanned} entries hold {distinct} distinct questions, {found} of them held "
            f"out (about 1 in {HELDOUT_MODULUS})"
        )
        if found:
            lower = f"lower the number asked for (eval.size) to {found} or less"
        else:
            lower = "set eval.size=0 (no held-out evaluation)"
        if distinct * 2 <= scanned:  # mostly repeats: the generator's settings are the limit
            return (
                f"{head}; the generator repeats its questions, so data.gym_config allows only "
                f"about {distinct} distinct ones: widen its settings, or {lower}"
            )
        need = HELDOUT_MODULUS * n * 3 // 2
        return f"{head}; raise data.gym_size (to about {need}), or {lower}"
