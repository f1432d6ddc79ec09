"""TRL's conversational prompts: a row's prompt as a list of chat messages.

    {"prompt": [{"role": "system", "content": "Answer with a number."},
                {"role": "user", "content": "What is 2+3?"}]}

`conversation(messages, where, field)` checks the list and returns the parts rlvr renders every
prompt from, so a message list reaches the model exactly as a string prompt with the same
system message and solved examples would (rlvr.models.loading.encode_prompt):

    prompt   the last message's content (the user's question)
    system   the system message's content, when the list starts with one
    shots    the user/assistant turns before it, as solved examples
             [{"prompt": user, "completion": assistant}, ...]

Under a chat template that is the conversation as written (system, the earlier turns, the
question, then the generation prompt), as TRL renders it; for a model without one (the embedded
models) the plain rendering of a string prompt with few-shot examples: each earlier turn's user
text and answer, a blank line, then the question (the system message, as for any prompt, is
not shown to a plain model).

Expected: a non-empty list of objects, each with a `role` (system, user or assistant) and a
string `content`; a system message only first; then user and assistant in turn, starting and
ending with the user's, whose content is not blank. Anything else is a DataError naming the
file, row, field and message (1-based).
"""

from __future__ import annotations

from typing import Any

from rlvr.errors import DataError

ROLES = ("system", "user", "assistant")


def conversation(messages: list[Any], where: str, field: str) -> dict[str, Any]:
    """{"prompt", "system" (when given), "shots", "prompt_messages"} of a message list; a
    one-line DataError naming `where` (file and row) and `field` otherwise."""
    if not messages:
        raise DataError(
            f"{where}: field {field!r} (prompt) is an empty list (expected a non-empty string "
            'or chat messages [{"role": "user", "content": ...}])'
        )
    clean: list[dict[str, str]] = []
    for number, message in enumerate(messages, start=1):
        at = f"{where}: field {field!r} message {number}"
        if not isinstance(message, dict):
            raise DataError(
                f"{at}: expected an object with 'role' and 'content', got {type(message).__name__}"
            )
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise DataError(f"{at}: role {role!r} (expected one of {', '.join(ROLES)})")
        if not isinstance(content, str):
            raise DataError(
                f"{at}: 'content' must be a string, got {type(content).__name__} "
                "(text only: rlvr takes no images or content parts)"
            )
        clean.append({"role": role, "content": content})
    out: dict[str, Any] = {"prompt_messages": clean}
    turns = clean
    if clean[0]["role"] == "system":
        out["system"], turns = clean[0]["content"], clean[1:]
    first = len(clean) - len(turns) + 1  # the number of the first turn after the system's
    for k, message in enumerate(turns):
        expected = "user" if k % 2 == 0 else "assistant"
        if message["role"] != expected:
            raise DataError(
                f"{where}: field {field!r} message {first + k}: role {message['role']!r} "
                f"(expected {expected}: an optional system message first, then user and "
                "assistant in turn, ending with the user's)"
            )
    if not turns or turns[-1]["role"] != "user":
        raise DataError(
            f"{where}: field {field!r}: the last message must be the user's (the question the "
            "model answers)"
        )
    if not turns[-1]["content"].strip():
        raise DataError(f"{where}: field {field!r} message {len(clean)}: the question is blank")
    out["prompt"] = turns[-1]["content"]
    out["shots"] = [
        {"prompt": turns[i]["content"], "completion": turns[i + 1]["content"]}
        for i in range(0, len(turns) - 1, 2)
    ]
    return out
