"""The pretraining corpus of `embedded-tools`: multiplication, answered directly or with a tool.

    python -m rlvr.models.embedded.build --task tools --out DIR

`build.py` trains the same tiny Llama as the addition models on `MultiplicationTask` problems
(3-digit x 2-digit) with two kinds of completion (see data/tasks/multiplication.py):

- direct, the carry-dropped product (right on 2.4% of problems): `6266`;
- a tool call, its output, the product copied from it:
  `<python>print(347*28)</python><output>9716\\n</output>9716`.

The observation `<output>...</output>` (both tags included) is the environment's text, not the
model's: it is in the input but carries no loss, as RL masks it. The answer after it does.

The tokenizer is the addition tokenizer plus the rest of printable ASCII except `<` and `>`
(`(` `)` for `print(...)`, the others so that other code and most tracebacks round-trip), with
`<think>` `</think>` `<python>` `</python>` `<output>` `</output>` as single non-special added
tokens, so decode(..., skip_special_tokens=True) keeps them, and a tag can only be written as
its token. It is character-level, so the observation tokenized alone gives the same ids as
inside a whole transcript.

`complete_with_tool` decodes with a stand-in for the tool (`emulated_tool`: the product of a
`print(x*y)` call computed in Python, no sandbox), for the build's evaluation and for
scripts/measure_embedded_tools.py.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr.data.tasks.multiplication import MultiplicationTask, observation, tool_code
from rlvr.rewards.exact import (
    OUTPUT_CLOSE,
    OUTPUT_OPEN,
    PYTHON_CLOSE,
    PYTHON_OPEN,
    THINK_CLOSE,
    THINK_OPEN,
    exact_answer_reward,
)

# Appended to the addition tokenizer's characters: the rest of printable ASCII but < and >, so
# code and tracebacks round-trip while a tag can only be written as its one token.
EXTRA_CHARACTERS = "()" + "!\"#$%&'/;@[\\]^_`{|}~\t"
ADDED_TOKENS = (THINK_OPEN, THINK_CLOSE, PYTHON_OPEN, PYTHON_CLOSE, OUTPUT_OPEN, OUTPUT_CLOSE)
_PRINT_PRODUCT = re.compile(r"print\((\d+)\*(\d+)\)")


def make_tools_batch(
    task: MultiplicationTask,
    tokenizer,
    rng: random.Random,
    batch_size: int,
    tool_fraction: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and labels (prompt, observation and padding = -100) for one batch.

    Whether a completion calls the tool is a coin flip independent of the problem, so the
    model's P(<python> | prompt) is the same constant on every prompt.
    """
    rows = []
    for _ in range(batch_size):
        a, b = task.sample_train_pair(rng)
        prompt_ids = tokenizer.encode(task.format_prompt(a, b))
        if rng.random() < tool_fraction:
            call = tokenizer.encode(PYTHON_OPEN + tool_code(a, b) + PYTHON_CLOSE)
            seen = tokenizer.encode(observation(f"{a * b}\n"))
            answer = tokenizer.encode(str(a * b)) + [tokenizer.eos_token_id]
            ids = call + seen + answer
            labels = call + [-100] * len(seen) + answer
        else:
            ids = tokenizer.encode(task.direct_completion(a, b)) + [tokenizer.eos_token_id]
            labels = list(ids)
        rows.append((prompt_ids, ids, labels))
    length = max(len(p) + len(c) for p, c, _ in rows)
    input_ids = torch.full((batch_size, length), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((batch_size, length), -100, dtype=torch.long)
    for i, (p, c, lab) in enumerate(rows):
        input_ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        labels[i, len(p) : len(p) + len(c)] = torch.tensor(lab)
    return input_ids, labels


def emulated_tool(code: str) -> str:
    """What the sandbox would print for `print(x*y)`; empty for any other code. Not a sandbox."""
    match = _PRINT_PRODUCT.fullmatch(code.strip())
    return f"{int(match.group(1)) * int(match.group(2))}\n" if match else ""


@dataclass
class Transcript:
    """One decoded completion: its text (observations included) and what the model wrote.

    codes: the code of each tool call; token_ids: the completion's tokens (a forced prefix,
    observations and the final EOS included); model_mask: 1 where the model wrote the token
    (and the prefix), 0 on observations; model_tokens: sum(model_mask); finished: it ended with
    EOS within the token budget.
    """

    text: str
    codes: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    model_mask: list[int] = field(default_factory=list)
    finished: bool = False

    @property
    def model_tokens(self) -> int:
        return sum(self.model_mask)


@torch.no_grad()
def complete_with_tool(
    model,
    tokenizer,
    prompts: list[str],
    *,
    prefix: str = "",
    temperature: float = 0.0,
    max_new_tokens: int = 48,
    max_calls: int = 2,
    run_tool: Callable[[str], str] = emulated_tool,
    bad_words_ids: list[list[int]] | None = None,
) -> list[Transcript]:
    """Decode each prompt (+ prefix) with tool calls: generate until `</python>` or EOS; after
    `</python>`, append the tokens of `observation(run_tool(code))` and continue.

    temperature 0 = greedy, otherwise plain sampling (no top-k/top-p). max_new_tokens is the
    budget of each generation segment (between tool calls); after max_calls calls `</python>`
    no longer stops generation. Rows are left-padded to decode in one batch.
    """
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    python_close = tokenizer.convert_tokens_to_ids(PYTHON_CLOSE)
    sampling: dict[str, Any] = {"do_sample": False}
    if temperature > 0:
        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
    if bad_words_ids:
        sampling["bad_words_ids"] = bad_words_ids
    rows = [tokenizer.encode(p + prefix) for p in prompts]
    starts = [len(tokenizer.encode(p)) for p in prompts]
    out = [Transcript(text="", model_mask=[1] * (len(r) - s)) for r, s in zip(rows, starts)]
    active = list(range(len(prompts)))
    for calls in range(max_calls + 1):
        if not active:
            break
        width = max(len(rows[i]) for i in active)
        ids = torch.tensor([[pad] * (width - len(rows[i])) + rows[i] for i in active])
        mask = torch.tensor([[0] * (width - len(rows[i])) + [1] * len(rows[i]) for i in active])
        stops = [eos, python_close] if calls < max_calls else [eos]
        generated = model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            eos_token_id=stops,
            pad_token_id=pad,
            **sampling,
        )[:, width:].tolist()
        still_active = []
        for i, new in zip(active, generated):
            end = next((k + 1 for k, t in enumerate(new) if t in stops), len(new))
            new = new[:end]
            rows[i] += new
            out[i].model_mask += [1] * len(new)
            if new and new[-1] == python_close:
                call = tokenizer.decode(rows[i][starts[i] :])
                code = call[call.rfind(PYTHON_OPEN) + len(PYTHON_OPEN) : -len(PYTHON_CLOSE)]
                out[i].codes.append(code)
                seen = tokenizer.encode(observation(run_tool(code)))
                rows[i] += seen
                out[i].model_mask += [0] * len(seen)
                still_active.append(i)
            else:
                out[i].finished = bool(new) and new[-1] == eos
        active = still_active
    for i, transcript in enumerate(out):
        transcript.token_ids = rows[i][starts[i] :]
        transcript.text = tokenizer.decode(transcript.token_ids, skip_special_tokens=True)
    return out


def operands(sample: dict) -> tuple[int, int]:
    a, b = sample["prompt"].rstrip("=").split("*")
    return int(a), int(b)


def tools_report(
    model, tokenizer, task: MultiplicationTask, samples: list[dict]
) -> dict[str, float]:
    """Greedy decoding on held-out problems with the emulated tool (fractions in [0, 1]).

    accuracy / tool: plain greedy accuracy and how often it calls the tool;
    tool_accuracy / code_right: accuracy, and how often the code is exactly `print(a*b)`, when
        the completion is forced to start with `<python>`;
    carry_dropped: how often a direct answer (`<python>` banned) is the carry-dropped product.
    """
    python_open = tokenizer.convert_tokens_to_ids(PYTHON_OPEN)
    prompts = [s["prompt"] for s in samples]
    pairs = [operands(s) for s in samples]
    n = len(samples)

    def accuracy(outs: list[Transcript]) -> float:
        return sum(exact_answer_reward(o.text, s) for o, s in zip(outs, samples)) / n

    was_training = model.training
    model.eval()
    plain = complete_with_tool(model, tokenizer, prompts)
    forced = complete_with_tool(model, tokenizer, prompts, prefix=PYTHON_OPEN)
    direct = complete_with_tool(model, tokenizer, prompts, bad_words_ids=[[python_open]])
    model.train(was_training)
    return {
        "accuracy": accuracy(plain),
        "tool": sum(bool(o.codes) for o in plain) / n,
        "tool_accuracy": accuracy(forced),
        "code_right": sum(o.codes[:1] == [tool_code(a, b)] for o, (a, b) in zip(forced, pairs)) / n,
        "carry_dropped": sum(
            o.text.strip() == task.direct_completion(a, b) for o, (a, b) in zip(direct, pairs)
        )
        / n,
    }
