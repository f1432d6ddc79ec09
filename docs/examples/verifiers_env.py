"""Addition with hints, written for Prime Intellect's `verifiers` (0.4, `verifiers.v1`) only.

Nothing here imports rlvr: it is an environment as verifiers' docs describe one (a
`Taskset` of typed `Task`s with weighted `@vf.reward`s, and an `Env` whose `run()` plays the
user), exported through `__all__`. rlvr trains it unchanged:

    rlvr train --config examples/verifiers.yaml
    rlvr train environment.name=verifiers:docs/examples/verifiers_env.py data.task=environment

The model is asked `347+285=`. A right answer ends the episode. A wrong one is told `higher` or
`lower` and asked again, up to `max_turns` model turns in all (the player's limit). The
rubric: `first_try` (weight 0.5) and `solved` (weight 0.5), so a first-try answer scores 1.0,
a later one 0.5, none 0; `guesses` is a metric (unweighted, not in the reward).

docs/environments/verifiers.md explains what maps to what.
"""

from __future__ import annotations

import random
import re

import verifiers.v1 as vf

_INTEGER = re.compile(r"-?\d+")


def last_integer(reply: str | None) -> int | None:
    """The last integer after the reasoning (`<think>...</think>`); None when there is none
    or the reasoning is left open."""
    answer = (reply or "").rsplit("</think>", 1)[-1]
    if "<think>" in answer:
        return None
    found = _INTEGER.findall(answer)
    return int(found[-1]) if found else None


class AdditionData(vf.TaskData):
    answer: int


class HintedAddition(vf.Task[AdditionData]):
    @vf.reward(weight=0.5)
    async def first_try(self, trace: vf.Trace) -> float:
        replies = trace.assistant_messages
        return float(bool(replies) and last_integer(replies[0].content) == self.data.answer)

    @vf.reward(weight=0.5)
    async def solved(self, trace: vf.Trace) -> float:
        return float(last_integer(trace.last_reply) == self.data.answer)

    @vf.metric
    async def guesses(self, trace: vf.Trace) -> float:
        return float(trace.num_turns)


class HintedAdditionConfig(vf.TasksetConfig):
    num_tasks: int = 2000
    digits: int = 3
    seed: int = 0


class HintedAdditionTaskset(vf.Taskset[HintedAddition, HintedAdditionConfig]):
    def load(self) -> list[HintedAddition]:
        rng = random.Random(self.config.seed)
        low, high = 10 ** (self.config.digits - 1), 10**self.config.digits - 1
        tasks = []
        for i in range(self.config.num_tasks):
            a, b = rng.randint(low, high), rng.randint(low, high)
            data = AdditionData(id=f"add-{i}", prompt=f"{a}+{b}=", answer=a + b)
            tasks.append(HintedAddition(data, self.config.task))
        return tasks


class HintsConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(max_turns=2)


class HintsEnv(vf.Env[HintsConfig]):
    """The user: `higher` or `lower` after a wrong answer, then the question again."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()  # the prompt speaks first
            while not segment.terminated:
                guess = last_integer(segment.last_reply)
                if guess is None or guess == task.data.answer:
                    break  # no answer, or the right one: the exchange ends
                hint = "higher" if guess < task.data.answer else "lower"
                segment = await interaction.turn(f"{hint}\n{task.data.prompt}")


__all__ = ["HintedAdditionTaskset", "HintsEnv"]
