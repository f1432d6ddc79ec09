"""How a model writes a tool call and how it is shown the result: the tool-call formats.

    tags     <python>CODE</python>             -> <output>OUT</output>
             (base models; the turn stops at `</python>`)
    fenced   ```python\\nCODE\\n```             -> ```output\\nOUT\\n```
             (base models that write markdown; the turn stops at "```\\n", so an opening
             fence must name the language: a bare "```\\n" ends the turn without a call)
    hermes   <tool_call>{"name": "python", "arguments": {"code": CODE}}</tool_call>
             -> a `tool` message, rendered by the model's own chat template (Qwen/Hermes
             chat models; the turn ends at the model's end-of-turn token, EOS)

A turn holds a call only when the call ends it (nothing but whitespace after the closing
marker), so text the model writes after a call is never run. What a call is, per format:

    tags     the `<python>` and `</python>` markers of the turn alternate, opener first (no
             block nested in another, none left open, no stray closer); the call is the last
             block, and the code is its text as written.
    fenced   the last ``` of the turn is the closing fence; the opening fence is the last
             "```python" before it, followed by spaces or tabs and a newline; the code is the
             text between that newline and the closing fence, and holds no ``` (an inner
             fence, as in a nested block, makes the last opening the call's).
    hermes   the payload runs from the first `{` that follows a `<tool_call>` (whitespace
             between them only) to the last `}`, which only whitespace separates from the
             closing `</tool_call>`; it must be one JSON object naming the tool "python" with
             `arguments` {"code": str}, or those arguments as a JSON string. A turn with two
             `<tool_call>` blocks makes no call: its payload spans both blocks and is not one
             JSON object. The environment serves one call per turn, and running one of a
             model's parallel calls while dropping the other would show it an output of a
             call it did not make alone.

Why plain string scanning and no regular expressions: a turn is model output under RL pressure
(up to `max_tokens`, megabytes with a long budget), parsed on every step while holding the
GIL, so a parser that backtracks is a way to stall a whole batch. The old patterns did: 46 s on
a 1 MB turn of `<tool_call>{` repeated (hermes), and about 1.5 hours (extrapolated from 21 s at
64 KB) on a closing fence followed by a megabyte of spaces and one more character (fenced).
Every step below is a `find`, `rfind`, `split`, `count`, strip or slice over the turn, each
character looked at a bounded number of times, so parsing is linear in the turn's length; the
tests time 1 MB adversarial turns (tests/environments/test_tool_formats.py). `json.loads` is
linear too; a payload nested too deep for it (RecursionError) is no call. Nothing here is run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from rlvr.errors import ConfigError
from rlvr.markup import (
    OUTPUT_CLOSE,
    OUTPUT_OPEN,
    PYTHON_CLOSE,
    PYTHON_OPEN,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
)

PYTHON_TOOL_SCHEMA = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Run a Python program in a sandbox (no network, no files of the host) "
        "and return what it prints.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "the program"}},
            "required": ["code"],
        },
    },
}


@dataclass(frozen=True)
class ToolFormat:
    """name; stop: strings that end a model turn at a call's closing marker; role: None when
    an observation is appended as text, else the chat role it is rendered as; _find: the
    format's parser (a module-level function, so a format pickles by reference)."""

    name: str
    stop: tuple[str, ...]
    role: str | None
    _find: Callable[[str], str | None] = field(repr=False, compare=False)
    _open: str = ""
    _close: str = ""

    def find_call(self, turn: str) -> str | None:
        """The code of the tool call that ends `turn`, or None when the turn makes none (the
        rules per format are in the module docstring)."""
        return self._find(turn)

    def render(self, output: str) -> str:
        """The observation text for a tool's output (a fenced block's closing fence on a line
        of its own)."""
        if self.name == "fenced" and not output.endswith("\n"):
            output += "\n"
        return f"{self._open}{output}{self._close}"


def _closing_marker(turn: str, marker: str) -> int | None:
    """Where the last `marker` of `turn` starts, when nothing but whitespace follows it (the
    call ends the turn); else None. Only the last occurrence can be followed by whitespace
    alone, so one `rfind` decides."""
    end = turn.rfind(marker)
    if end < 0:
        return None
    tail = turn[end + len(marker) :]
    return end if not tail or tail.isspace() else None


def _tags_call(turn: str) -> str | None:
    opener, closer = PYTHON_OPEN, PYTHON_CLOSE
    if _closing_marker(turn, closer) is None:
        return None
    # The markers alternate, opener first, exactly when the text before the first opener holds
    # no closer and the text after each opener holds exactly one (the two markers cannot
    # overlap: one ends with ">", the other starts with "<"). The last block's closer is then
    # the turn's last one, which ends the turn.
    before, *blocks = turn.split(opener)
    if not blocks or closer in before or any(b.count(closer) != 1 for b in blocks):
        return None  # no call, a stray closer, or a block left open or nested in another
    return blocks[-1][: blocks[-1].find(closer)]


def _fenced_call(turn: str) -> str | None:
    fence, opening = "```", "```python"
    end = _closing_marker(turn, fence)
    if end is None:
        return None
    start = turn.rfind(opening, 0, end)
    if start < 0:
        return None
    newline = turn.find("\n", start + len(opening), end)
    if newline < 0 or turn[start + len(opening) : newline].strip(" \t"):
        return None  # no newline before the closing fence, or code on the fence line
    code_start = newline + 1
    # No ``` may start inside the code, nor straddle its end: "x\n````" is a code "x\n`" whose
    # last backtick makes a fence with the closing one, so (as CommonMark would) no call.
    if turn.find(fence, code_start, end + len(fence) - 1) >= 0:
        return None
    return turn[code_start:end]


def _hermes_call(turn: str) -> str | None:
    opener, closer = TOOL_CALL_OPEN, TOOL_CALL_CLOSE
    end = _closing_marker(turn, closer)
    if end is None:
        return None
    last = len(turn[:end].rstrip()) - 1  # the payload's closing brace
    if last < 0 or turn[last] != "}":
        return None
    # The payload starts at the first opener whose text, after whitespace, starts with "{"
    # (split: each stretch of the turn is looked at once). It runs to the last brace, over any
    # later markers: JSON decides whether it is one object.
    before, *after_openers = turn[: last + 1].split(opener)
    start = len(before)
    for text in after_openers:
        start += len(opener)
        payload = text.lstrip()
        if payload.startswith("{"):
            start += len(text) - len(payload)
            return _python_code(turn[start : last + 1])
        start += len(text)
    return None


def _python_code(payload: str) -> str | None:
    """The code of a hermes payload naming the python tool, or None."""
    call = _json(payload)
    if not isinstance(call, dict) or call.get("name") != "python":
        return None
    args = call.get("arguments")
    if isinstance(args, str):  # some models write the arguments as a JSON string
        args = _json(args)
    code = args.get("code") if isinstance(args, dict) else None
    return code if isinstance(code, str) else None


def _json(text: str) -> object:
    """json.loads, or None for text that is not JSON; RecursionError is what a value nested
    deeper than the decoder's recursion limit (a megabyte of "[[[[") raises."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


FORMATS = {
    "tags": ToolFormat(
        "tags",
        stop=(PYTHON_CLOSE,),
        role=None,
        _find=_tags_call,
        _open=OUTPUT_OPEN,
        _close=OUTPUT_CLOSE,
    ),
    "fenced": ToolFormat(
        "fenced",
        stop=("```\n",),
        role=None,
        _find=_fenced_call,
        _open="```output\n",
        _close="```\n",
    ),
    "hermes": ToolFormat("hermes", stop=(), role="tool", _find=_hermes_call),
}


def tool_format(name: str) -> ToolFormat:
    if name not in FORMATS:
        raise ConfigError(
            f"environment.format: unknown tool-call format {name!r}; expected one of "
            f"{', '.join(FORMATS)}"
        )
    return FORMATS[name]
