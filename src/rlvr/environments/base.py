"""The environment protocol of multi-turn rollouts, and how a config names one.

An environment lives for one rollout row (one completion). The rollout calls

    observation = env.reset(sample)        # before the first model turn; None: nothing
    result = env.step(turn_text)           # after every model turn

`turn_text` is what the model wrote in its latest turn only (decoded, special tokens dropped).
`step` returns a `StepResult`: the observation to show the model next (text; None ends the
row), an optional final reward, `done`, and what the turn's tool call cost. The rollout then
tokenizes the observation (never the transcript: see rlvr.rollout.multi_turn), appends it
with loss mask 0 and lets the model continue, up to `environment.max_turns` model turns and
`rollout.max_new_tokens` tokens in all.

An environment is plain Python (no torch): the built-in `python` tool, or a user class named
'module:Class' or 'path/file.py:Class', constructed with no arguments once per row. Steps of
different rows run in parallel threads; a step that overruns `environment.timeout_s` (plus a
grace second) is abandoned and ends its row as a tool timeout. An environment that raises
(anything but a ConfigError, which stops the run) or returns what the protocol does not allow
(a `reset` that is no string or None, a `step` that is no StepResult, a reward that is no
finite number) fails its row: it ends with reward 0 and is recorded in errors.jsonl
(rlvr.rollout.multi_turn). Only the built-in tool runs code in a sandbox; a user environment is
trusted code of the user's (docs/guides/tools.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class StepResult:
    """What one environment step gives back.

    observation: text appended after the model's turn before it continues; None ends the row.
    reward: the row's reward when the environment decides it (it replaces the verifier's
        score of the row); None: the verifier's score of the transcript stands. Anything but
        None or a finite real number fails the row.
    done: the row ends after this step (also when an observation is given: it is not shown).
    role: None: the observation text is appended as it is (tokenized alone); a chat role
        ('tool', 'user'): it is that message, rendered by the tokenizer's chat template (a
        tokenizer without one appends the text as it is).
    tool_call, tool_error, tool_timeout, tool_seconds: the step ran a tool call, it failed
        (raised, non-zero exit, killed at a limit), it was killed at its time limit, and the
        seconds it took; logged as tool metrics.
    metrics: the environment's own figures for the row (a rubric's components, a game's
        outcome), names to finite real numbers; a later step's value of a name replaces an
        earlier one. Logged each step as `env/<name>`, the mean over the rows that reported
        the name (docs/metrics.md), and kept with the row in samples/. A row whose
        environment fails reports none.
    """

    observation: str | None = None
    reward: float | None = None
    done: bool = False
    role: str | None = None
    tool_call: bool = False
    tool_error: bool = False
    tool_timeout: bool = False
    tool_seconds: float = 0.0
    metrics: Mapping[str, float] | None = None


@runtime_checkable
class Environment(Protocol):
    def reset(self, sample: Mapping[str, Any]) -> str | None: ...

    def step(self, text: str) -> StepResult: ...
