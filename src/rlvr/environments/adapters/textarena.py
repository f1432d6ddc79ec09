"""TextArena games behind rlvr's environment protocol: `environment.name=textarena:ENV_ID`
(docs/environments/textarena.md).

ENV_ID is an id in TextArena's registry (GuessTheNumber-v0, Mastermind-v0, TowerOfHanoi-v0,
...) or one a user module registers with `textarena.register` when it is imported, named in
front of the id: `textarena:my_games:Guess-v0` or `textarena:path/games.py:Guess-v0`
(rlvr.environments.adapters.registering). `environment.args` are keyword arguments of
`textarena.make` (the game's constructor: `max_turns=5`), except `train_seeds` and
`eval_seeds`, the number of games `data.task=environment` trains and evaluates on.

Each rollout row plays one single-player game:

    game = textarena.make(ENV_ID, **args); game.reset(num_players=1, seed=<the row's seed>)
    reset(sample) -> the game's first observation (None when the row's prompt already is it)
    step(text)    -> game.step(text); the game's messages since the model's last move, or,
                     once the game is done, its reward from game.close()

The seed is the sample's `seed` field (the rows `rows(split)` gives: seeds 0.. for training,
1_000_000_000.. held out, so the two never meet), else one derived from the sample's id and
prompt, so a row's game is the same on every run. Every game of the process keeps its own
state of Python's `random` (TextArena's games draw from the module-level generator, and rows
step in parallel threads), so a game's draws depend on its seed and the model's moves only.

Observations are read from the game itself, below TextArena's observation wrappers (which
render the whole history again every turn, for an agent without memory; the model here keeps
its context): the new messages, the model's own move left out, one per line. Action wrappers
(ActionFormattingWrapper) apply. The role is 'user' (plain text without a chat template).
A row's reward is 0 until its game ends, then the game's reward for the player; its metrics:
`finished`, `win` (a final reward of 1 or more, TextArena's win) and every number of the
player's game_info (`invalid_move`, `turn_count`).
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rlvr.environments.adapters.registering import import_registrations
from rlvr.environments.base import Environment, StepResult
from rlvr.errors import ConfigError

EVAL_SEED_BASE = 1_000_000_000  # held-out games' seeds start here; training's at 0
_ROW_KEYS = {"train_seeds": 1000, "eval_seeds": 200}  # environment.args of rows(), not make's

# TextArena's games draw from the module-level `random`; one game at a time has its own state
# swapped in. A step holding it longer than this is a hung game: the next one fails its row.
_RANDOM = threading.Lock()
_RANDOM_WAIT_S = 60.0


def factory(ref: str, env: Any, settings: dict[str, Any]) -> Callable[[], Environment]:
    """A function making one TextArenaEnvironment per row for `textarena:REF` (REF: 'ENV_ID',
    'MODULE:ENV_ID' or 'path/file.py:ENV_ID'), carrying `rows(split)`: one row per seed. One
    game is made and reset here, so an unknown id, bad args or a game that needs more than
    one player is a one-line ConfigError before any weights load."""
    _library()
    env_id = import_registrations(ref, "textarena")
    where = f"environment.name: textarena:{ref}"
    from textarena.envs.registration import ENV_REGISTRY

    if env_id not in ENV_REGISTRY:
        raise ConfigError(
            f"{where}: textarena has no environment {env_id!r} (single-player games are e.g. "
            f"GuessTheNumber-v0, Mastermind-v0, TowerOfHanoi-v0); a module that registers it "
            f"is named as textarena:MODULE:{env_id}"
        )
    counts = {key: settings.get(key, default) for key, default in _ROW_KEYS.items()}
    for key, n in counts.items():
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= EVAL_SEED_BASE:
            raise ConfigError(
                f"environment.args: {key}={n!r}: expected a whole number of games, 1 to "
                f"{EVAL_SEED_BASE}"
            )
    kwargs = {k: v for k, v in settings.items() if k not in _ROW_KEYS}

    def make() -> TextArenaEnvironment:
        return TextArenaEnvironment(env_id, kwargs)

    try:
        make().start(0)
    except Exception as e:
        message = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        args = "[" + ",".join(f"{k}={v}" for k, v in kwargs.items()) + "]"
        raise ConfigError(
            f"{where}: textarena.make(..., **environment.args={args}) and "
            f"reset(num_players=1) failed: {message}"
        ) from e

    def rows(split: str) -> list[dict[str, Any]]:
        """One row per seed: its game's first observation as the prompt."""
        held_out = split == "eval"
        base = EVAL_SEED_BASE if held_out else 0
        n = counts["eval_seeds" if held_out else "train_seeds"]
        game = make()
        return [
            {"id": f"{env_id}-seed-{seed}", "prompt": game.start(seed), "seed": seed}
            for seed in range(base, base + n)
        ]

    make.rows = rows  # type: ignore[attr-defined]
    return make


class TextArenaEnvironment:
    """One row's TextArena game behind rlvr's protocol (module docstring)."""

    def __init__(self, env_id: str, kwargs: Mapping[str, Any]) -> None:
        self.env_id, self.kwargs = env_id, dict(kwargs)
        self.game: Any = None
        self.random_state: Any = None

    def start(self, seed: int) -> str:
        """A new game reset with `seed`; its first observation."""
        ta = _library()
        self.random_state = random.Random(seed).getstate()
        with self._own_random():
            self.game = ta.make(self.env_id, **self.kwargs)
            self.game.reset(num_players=1, seed=seed)
            return self._observation()

    def reset(self, sample: Mapping[str, Any]) -> str | None:
        first = self.start(game_seed(sample))
        return None if sample.get("prompt") == first else first

    def step(self, text: str) -> StepResult:
        with self._own_random():
            done, _ = self.game.step(text)
            if not done:
                observation = "\n" + self._observation()
            else:
                rewards, game_info = self.game.close()
        if not done:
            return StepResult(observation=observation, role="user", reward=0.0, metrics=_UNFINISHED)
        reward = float((rewards or {}).get(0, 0.0))
        info = (game_info or {}).get(0, {})
        metrics = {"finished": 1.0, "win": float(reward >= 1.0)}
        for name, value in info.items():
            if isinstance(name, str) and name and isinstance(value, (bool, int, float)):
                metrics[name] = float(value)
        return StepResult(reward=reward, done=True, metrics=metrics)

    def _observation(self) -> str:
        """The game's messages for the player since the last call, its own moves left out."""
        ta = _library()
        inner = self.game
        while isinstance(inner, ta.Wrapper):  # below the observation wrappers
            inner = inner.env
        player, messages = inner.get_observation()
        if player != 0:
            raise RuntimeError(f"textarena {self.env_id!r}: player {player} is to move")
        if isinstance(messages, str):
            return messages
        roles = getattr(getattr(inner, "state", None), "role_mapping", None) or {}
        lines = []
        for sender, message, kind in messages:
            if sender == player and kind == ta.ObservationType.PLAYER_ACTION:
                continue  # the model's move, already in its context
            if sender == ta.GAME_ID:
                lines.append(str(message))
            else:
                lines.append(f"[{roles.get(sender, f'Player {sender}')}] {message}")
        return "\n".join(lines)

    @contextmanager
    def _own_random(self) -> Iterator[None]:
        if not _RANDOM.acquire(timeout=_RANDOM_WAIT_S):
            raise RuntimeError(
                f"textarena {self.env_id!r}: another game's step has held the random state for "
                f"{_RANDOM_WAIT_S:.0f} s"
            )
        try:
            outer = random.getstate()
            random.setstate(self.random_state)
            try:
                yield
            finally:
                self.random_state = random.getstate()
                random.setstate(outer)
        finally:
            _RANDOM.release()


_UNFINISHED = {"finished": 0.0, "win": 0.0}


def game_seed(sample: Mapping[str, Any]) -> int:
    """The sample's `seed` (a whole number), else a number made from its id and prompt."""
    seed = sample.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0:
        return seed
    key = f"{sample.get('id', '')}\x00{sample.get('prompt', '')}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:4], "big")


def _library() -> Any:
    try:
        import textarena
    except ImportError:
        raise ConfigError(
            "environment.name: TextArena games need the textarena package; "
            "pip install 'rlvr[textarena]'"
        ) from None
    return textarena
