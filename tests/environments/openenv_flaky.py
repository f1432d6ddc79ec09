"""docs/examples/openenv_guess.py's OpenEnv server, made to fail on request (openenv-core's
public API only): a step whose action is "hang" sleeps 2 s; with OPENENV_DIE_AFTER=N in its
environment, the server process exits in the middle of its N-th step."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "docs" / "examples"))

from openenv.core.env_server import create_app  # noqa: E402
from openenv_guess import GuessAction, GuessEnvironment, GuessObservation  # noqa: E402

_steps = 0
_lock = threading.Lock()


class FlakyGuess(GuessEnvironment):
    def step(self, action, timeout_s=None, **kwargs):  # type: ignore[override]
        global _steps
        with _lock:
            _steps += 1
            steps = _steps
        if action.message == "hang":
            time.sleep(2)
        die_after = int(os.environ.get("OPENENV_DIE_AFTER") or 0)
        if die_after and steps >= die_after:
            os._exit(1)  # the server dies mid-request: no reply, every session dropped
        return super().step(action, timeout_s, **kwargs)


app = create_app(FlakyGuess, GuessAction, GuessObservation, max_concurrent_envs=512)
