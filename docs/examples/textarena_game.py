"""A single-player TextArena game written with TextArena's public API only, the way its own
single-player games (GuessTheNumber) are written: a `textarena.Env` whose `reset` makes a
`SinglePlayerState` from the seed and whose `step` adds observations and sets the outcome.
Registering it under an id when the module is imported is all rlvr needs
(docs/environments/textarena.md):

    rlvr train data.task=environment \
        environment.name=textarena:docs/examples/textarena_game.py:SumGuess-v0

The game draws a sum of two 3-digit numbers from its seed and shows it bare ("347+285=", the
embedded model's task). An answer (the text after a `<think>` block, if any) that is no number
is an invalid move, which ends the game (`error_allowance=0`). A wrong number gets "higher" or
"lower" and the question again, up to `max_turns` guesses. Reward 1 for the right sum, 0
otherwise.
"""

from __future__ import annotations

import random
import re
from typing import Any

import textarena as ta

NUMBER = re.compile(r"^-?[0-9]+$")


class SumGuessEnv(ta.Env):
    def __init__(self, max_turns: int = 3):
        super().__init__()
        self.max_turns = max_turns

    def reset(self, num_players: int, seed: int | None = None):
        self.state = ta.SinglePlayerState(
            num_players=num_players, seed=seed, max_turns=self.max_turns, error_allowance=0
        )
        a, b = random.randint(100, 999), random.randint(100, 999)
        game_state = {"question": f"{a}+{b}=", "answer": a + b}
        self.state.reset(game_state=game_state, player_prompt_function=self._prompt)

    def _prompt(self, player_id: int, game_state: dict[str, Any]) -> str:
        return game_state["question"]

    def step(self, action: str) -> tuple[bool, ta.Info]:
        player_id = self.state.current_player_id
        self.state.add_observation(
            from_id=player_id,
            to_id=-1,
            message=action,
            observation_type=ta.ObservationType.PLAYER_ACTION,
        )
        answer = action.rsplit("</think>", 1)[-1].strip()
        if not NUMBER.match(answer):
            self.state.set_invalid_move(reward=0.0, reason="the answer is no number.")
            return self.state.step()
        guess, target = int(answer), self.state.game_state["answer"]
        if guess == target:
            self.state.set_outcome(reward=1.0, reason="The sum is right.")
        elif self.state.turn + 1 >= self.max_turns:
            self.state.set_outcome(reward=0.0, reason=f"Out of guesses: it was {target}.")
        else:
            hint = "higher" if guess < target else "lower"
            for message in (hint, self.state.game_state["question"]):
                self.state.add_observation(
                    message=message, observation_type=ta.ObservationType.GAME_MESSAGE
                )
        return self.state.step()


ta.register(id="SumGuess-v0", entry_point=SumGuessEnv)
