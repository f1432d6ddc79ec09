"""reasoning-gym adapter: any reasoning-gym generator as a task, its scorer as the `gym` verifier.

Needs the optional extra: `pip install 'rlvr[gym]'` (reasoning-gym pins its own dependencies,
so it is not installed by default).

    data.task=gym data.gym_name=basic_arithmetic data.gym_config=[min_terms=2,max_terms=3]
    reward.verifier=gym

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
no held-out question is ever trained on, even when the generator repeats questions.

Verifier `gym`: the answer is read like the countdown verifier reads its expression
(`rlvr.rewards.countdown.final_answer_text`): everything up to the last `</think>` is dropped,
an unclosed `<think>` means no answer, the content of one `<answer>...</answer>` pair is the
answer if there are tags, else the stripped remaining text. That string (or None) goes to
the dataset's own `score_answer(answer, entry)`; its result is clipped to [0, 1] (NaN is 0).
An answer over `max_answer_chars` (2000) scores 0 without reaching the scorer. Some
reasoning-gym scorers give partial credit, so gym rewards can lie between 0 and 1.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from rlvr.errors import ConfigError, DataError, UserError
from rlvr.rewards.base import Score
from rlvr.rewards.countdown import final_answer_text

HELDOUT_MODULUS = 10
_SCAN_FACTOR = 200  # held-out scan: at most this many entries per requested problem (+ slack)


def import_reasoning_gym(user: str = "data.task=gym") -> Any:
    """The reasoning_gym module, or a one-line UserError naming the extra."""
    try:
        import reasoning_gym
    except ImportError:
        raise UserError(
            f"{user} needs reasoning-gym, which is not installed: pip install 'rlvr[gym]'"
        ) from None
    return reasoning_gym


def parse_gym_config(items: Sequence[str]) -> dict[str, Any]:
    """['min_terms=2', 'operators=[+, -]'] -> {'min_terms': 2, 'operators': ['+', '-']}.

    Values are read as YAML scalars or flow collections."""
    out: dict[str, Any] = {}
    for i, item in enumerate(items):
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ConfigError(f"data.gym_config[{i}]: expected KEY=VALUE, got {item!r}")
        try:
            out[key] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            out[key] = raw.strip()
    return out


def is_heldout_question(question: str) -> bool:
    """True if the question belongs to the held-out split (about 10% of questions)."""
    digest = hashlib.sha256(question.encode()).digest()
    return int.from_bytes(digest[:8], "big") % HELDOUT_MODULUS == 0


def create_gym_dataset(name: str, kwargs: Mapping[str, Any], user: str = "data.task=gym") -> Any:
    """`reasoning_gym.create_dataset(name, **kwargs)` with one-line errors naming data.gym_*."""
    rg = import_reasoning_gym(user)
    from reasoning_gym.factory import DATASETS

    if name not in DATASETS:
        import difflib

        close = difflib.get_close_matches(name, list(DATASETS), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ConfigError(
            f"data.gym_name: unknown reasoning-gym dataset '{name}' "
            f"({len(DATASETS)} exist, e.g. basic_arithmetic, chain_sum){hint}"
        )
    try:
        return rg.create_dataset(name, **kwargs)
    except TypeError as e:
        raise ConfigError(f"data.gym_config: not a setting of '{name}': {e}") from None
    except (AssertionError, ValueError) as e:
        raise ConfigError(f"data.gym_config: invalid for '{name}': {e or 'rejected'}") from None


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
        seen: set[str] = set()
        samples: list[dict] = []
        for index in range(limit):
            if len(samples) == n:
                break
            sample = self.make_sample(index)
            question = sample["prompt"]
            if question in seen or not is_heldout_question(question):
                continue
            seen.add(question)
            samples.append(sample)
        if len(samples) < n:
            raise DataError(
                f"data.gym_name={self.name}: asked for {n} held-out questions, found "
                f"{len(samples)} in the first {limit} entries (lower eval.size or raise "
                "data.gym_size)"
            )
        return samples


class GymVerifier:
    """`(completion, sample) -> [0, 1]`: the reasoning-gym dataset's own scorer on the answer.

    Datasets are rebuilt from the sample's stored name and settings (cached per setting), so
    the verifier works in worker processes and from `rlvr verify`."""

    def __init__(self, max_answer_chars: int = 2000) -> None:
        self.max_answer_chars = max_answer_chars
        self._datasets: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _dataset(self, name: str, kwargs: Mapping[str, Any]) -> Any:
        key = json.dumps([name, kwargs], sort_keys=True, default=str)
        with self._lock:
            if key not in self._datasets:
                self._datasets[key] = create_gym_dataset(name, kwargs, "the gym verifier")
            return self._datasets[key]

    def score(self, completion: str, sample: Mapping[str, Any]) -> Score:
        gym = sample.get("gym")
        if not isinstance(gym, Mapping) or not {"name", "config", "entry"} <= set(gym):
            raise DataError(
                "gym verifier: sample has no 'gym' field with name, config and entry "
                "(samples of data.task=gym have it)"
            )
        answer = final_answer_text(completion)
        if answer is not None and len(answer) > self.max_answer_chars:
            return Score(0.0, f"answer longer than {self.max_answer_chars} characters")
        dataset = self._dataset(gym["name"], gym["config"])
        reward = float(dataset.score_answer(answer, dict(gym["entry"])))
        reward = min(1.0, max(0.0, reward)) if reward == reward else 0.0
        shown = "no answer" if answer is None else answer[:80]
        return Score(reward, shown)

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> float:
        return self.score(completion, sample).reward

    def __getstate__(self) -> dict[str, Any]:
        return {"max_answer_chars": self.max_answer_chars}  # datasets are rebuilt on demand

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)


# "gym" in the registry; "rlvr.data.tasks.gym:gym_reward" as a spec.
gym_reward = GymVerifier()
