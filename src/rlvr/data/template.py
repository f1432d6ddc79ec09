r"""Plain prompt templates: `data.prompt_template` rewrites every prompt of a task.

On the command line, put the value in double quotes inside the shell's single quotes: YAML reads
a double-quoted value and turns each \n into a newline (unquoted, a text key takes the text as
written, backslash and all; docs/data.md):

    rlvr train 'data.prompt_template="Question: {prompt}\nThink step by step.\nAnswer:"'

The same in a config file (or a block scalar, `prompt_template: |-`, with real line breaks):

    data:
      prompt_template: "Question: {prompt}\nThink step by step.\nAnswer:"

`{prompt}` is the task's (or dataset row's) prompt; any other `{field}` is that field of the
sample (`{answer}` is refused: it would leak the reference into the prompt). The template is
applied before the chat template, so an instruct model sees the templated text as the user turn
and a base model sees it as is. The untemplated prompt is kept as `raw_prompt`, and the task's
own methods (`demonstration`, `observe`, ...) see samples with their original prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlvr.config.checks import check_template  # one check, the config's (it runs at load)
from rlvr.errors import DataError


class TemplatedTask:
    """Wraps a task so that every sample it hands out has its prompt templated."""

    def __init__(self, task: Any, template: str) -> None:
        self.task = task
        self.template = template
        self.fields = check_template(template)

    def apply(self, sample: Mapping[str, Any]) -> dict:
        values = {}
        for f in self.fields:
            if f == "prompt":
                values[f] = sample["prompt"]
            elif sample.get(f) is None:
                where = sample.get("id", "a sample")
                raise DataError(f"data.prompt_template: {where} has no field '{f}'")
            else:
                values[f] = sample[f]
        return {**sample, "raw_prompt": sample["prompt"], "prompt": self.template.format(**values)}

    @staticmethod
    def original(sample: Mapping[str, Any]) -> dict:
        if "raw_prompt" not in sample:
            return dict(sample)
        out = {k: v for k, v in sample.items() if k != "raw_prompt"}
        out["prompt"] = sample["raw_prompt"]
        return out

    def sample_train(self, rng: Any) -> dict:
        return self.apply(self.task.sample_train(rng))

    def heldout(self, n: int) -> list[dict]:
        return [self.apply(s) for s in self.task.heldout(n)]

    def __getattr__(self, name: str) -> Any:
        # on_step, metrics, state_dict, eval (datasets), ... belong to the wrapped task, and a
        # method it lacks stays missing (the trainer checks with hasattr). The two that take
        # samples get them back with their original prompt.
        attr = getattr(self.task, name)
        if name == "demonstration":
            return lambda sample: attr(self.original(sample))
        if name == "observe":
            return lambda samples, rewards: attr([self.original(s) for s in samples], rewards)
        return attr

    def __len__(self) -> int:
        return len(self.task)
