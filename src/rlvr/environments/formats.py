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
marker), so text the model writes after a call is never run. Everything here is plain string
work; nothing is executed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from rlvr.errors import ConfigError

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
    an observation is appended as text, else the chat role it is rendered as."""

    name: str
    stop: tuple[str, ...]
    role: str | None
    _call: re.Pattern[str]
    _open: str = ""
    _close: str = ""
    _call_open: str = ""  # the markers of a call, counted: an unclosed one makes no call
    _call_close: str = ""

    def find_call(self, turn: str) -> str | None:
        """The code of the tool call that ends `turn`, or None when the turn makes none."""
        if self._call_open and turn.count(self._call_open) != turn.count(self._call_close):
            return None  # an unclosed or nested call: not a call
        match = self._call.search(turn)
        if match is None:
            return None
        if self.name != "hermes":
            return match.group(1)
        try:
            call = json.loads(match.group(1))
        except ValueError:
            return None
        if not isinstance(call, dict) or call.get("name") != "python":
            return None
        args = call.get("arguments")
        if isinstance(args, str):  # some models write the arguments as a JSON string
            try:
                args = json.loads(args)
            except ValueError:
                return None
        code = args.get("code") if isinstance(args, dict) else None
        return code if isinstance(code, str) else None

    def render(self, output: str) -> str:
        """The observation text for a tool's output (a fenced block's closing fence on a line
        of its own)."""
        if self.name == "fenced" and not output.endswith("\n"):
            output += "\n"
        return f"{self._open}{output}{self._close}"


FORMATS = {
    "tags": ToolFormat(
        "tags",
        stop=("</python>",),
        role=None,
        _call=re.compile(r"<python>((?:(?!<python>).)*?)</python>\s*\Z", re.DOTALL),
        _open="<output>",
        _close="</output>",
        _call_open="<python>",
        _call_close="</python>",
    ),
    "fenced": ToolFormat(
        "fenced",
        stop=("```\n",),
        role=None,
        _call=re.compile(r"```python[ \t]*\n((?:(?!```).)*?)```[ \t]*\n?\s*\Z", re.DOTALL),
        _open="```output\n",
        _close="```\n",
    ),
    "hermes": ToolFormat(
        "hermes",
        stop=(),
        role="tool",
        _call=re.compile(r"<tool_call>\s*(\{.*\})\s*</tool_call>\s*\Z", re.DOTALL),
    ),
}


def tool_format(name: str) -> ToolFormat:
    if name not in FORMATS:
        raise ConfigError(
            f"environment.format: unknown tool-call format {name!r}; expected one of "
            f"{', '.join(FORMATS)}"
        )
    return FORMATS[name]
