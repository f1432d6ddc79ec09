"""Few-shot prompts: `data.fewshot=K` puts K solved training problems before every prompt.

    data.task=gym data.gym_name=word_sequence_reversal data.fewshot=3

A small instruct model often ignores an instruction about the answer format (SmolLM2-135M
never wrote `<answer>` tags under any system prompt tried) but copies the format of solved
examples. Each shot is a training sample and its solution:

- the task's `demonstration(sample)` when the task has one (addition, arithmetic, countdown,
  multiplication: the completion SFT would teach), else
- `<answer>{answer}</answer>`, the form the tag-reading verifiers (exact_answer, math,
  countdown, gym) take.

The shots travel with every sample as `sample["shots"] = [{"prompt": ..., "completion": ...}]`
(before the turns a conversational row brings as its own shots, rlvr.data.messages),
and `rlvr.models.loading.encode_prompt` renders them: with a chat template as earlier
user/assistant turns (after the system message, before the question), for a plain model as
text, each shot's prompt followed by its completion and a blank line, then the question.

Decisions:
- One fixed set of shots for the whole run (training and evaluation alike), drawn once with
  `random.Random(f"fewshot-{seed}")` from the task's *training* split (`sample_train`), so no
  held-out problem is ever shown as a shot and every prompt shares the same prefix (prefix
  caches in vLLM reuse it). A sample whose prompt equals one of the shots gets a spare shot
  in its place, so a prompt never contains its own answer.
- Shots are drawn from the wrapped task, after `data.prompt_template` (the shots are templated
  like the question they precede).
- A shot whose task has no demonstration and whose sample has no answer (code tasks with
  tests) cannot be written: that is a ConfigError naming data.fewshot.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from rlvr.errors import ConfigError

_DRAWS = 1000  # training draws tried to find K + 1 distinct shots


class FewShotTask:
    """Wraps a task so that every sample it hands out carries the same K solved examples."""

    def __init__(self, task: Any, k: int, seed: int = 0) -> None:
        self.task = task
        self.k = k
        rng = random.Random(f"fewshot-{seed}")
        demonstrate = getattr(task, "demonstration", None)
        shots: list[dict] = []
        seen: set[str] = set()
        for _ in range(_DRAWS):
            if len(shots) == k + 1:
                break
            sample = task.sample_train(rng)
            if sample["prompt"] in seen:
                continue
            seen.add(sample["prompt"])
            shots.append({"prompt": sample["prompt"], "completion": _solution(sample, demonstrate)})
        if len(shots) < k + 1:
            raise ConfigError(
                f"data.fewshot: wanted {k} distinct training problems (+1 spare), the task gave "
                f"{len(shots)} in {_DRAWS} draws; lower data.fewshot"
            )
        self.shots, self.spare = shots[:k], shots[k]

    def shots_for(self, prompt: str) -> list[dict]:
        """The shots to put before `prompt` (the spare replaces a shot equal to it)."""
        return [self.spare if s["prompt"] == prompt else s for s in self.shots]

    def apply(self, sample: Mapping[str, Any]) -> dict:
        # a conversational row's own earlier turns (rlvr.data.messages) stay nearest the question
        own = list(sample.get("shots") or [])
        return {**sample, "shots": self.shots_for(sample["prompt"]) + own}

    def sample_train(self, rng: Any) -> dict:
        return self.apply(self.task.sample_train(rng))

    def heldout(self, n: int) -> list[dict]:
        return [self.apply(s) for s in self.task.heldout(n)]

    def __getattr__(self, name: str) -> Any:
        # on_step, metrics, state_dict, demonstration, observe, eval (datasets) ... belong to the
        # wrapped task; a method it lacks stays missing (the trainer checks with hasattr).
        return getattr(self.task, name)

    def __len__(self) -> int:
        return len(self.task)


def _solution(sample: Mapping[str, Any], demonstrate: Any) -> str:
    if demonstrate is not None:
        return demonstrate(sample)
    answer = sample.get("answer")
    if answer is None or str(answer) == "":
        where = sample.get("id", "a training sample")
        raise ConfigError(
            f"data.fewshot: {where} has no answer and the task has no demonstration, so no "
            "solved example can be written; set data.fewshot=0"
        )
    return f"<answer>{answer}</answer>"


def render_plain(shots: list[Mapping[str, str]], prompt: str) -> str:
    """A plain (no chat template) prompt: each shot's prompt and completion, a blank line, then
    the question."""
    return "".join(f"{s['prompt']}{s['completion']}\n\n" for s in shots) + prompt


def chat_turns(shots: list[Mapping[str, str]]) -> list[dict]:
    """The shots as alternating user/assistant chat messages."""
    turns: list[dict] = []
    for s in shots:
        turns.append({"role": "user", "content": s["prompt"]})
        turns.append({"role": "assistant", "content": s["completion"]})
    return turns
