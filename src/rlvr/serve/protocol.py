"""OpenAI's request and response bodies for `rlvr serve`: requests checked field by field into a
`GenerationRequest`, generated rows turned into chat.completion / text_completion objects.

Pure functions over JSON values and token ids (no model, no torch), so every rule here is
tested without a server. The rules (docs/guides/serve.md):

- A field that is missing or null takes OpenAI's default; an unknown field is ignored; a field
  of the wrong type or out of range, or one asking for what rlvr cannot do exactly (top
  alternatives in `logprobs`, `echo`, penalties, tools), is a 400 whose error names it:
  {"error": {"message": ..., "type": "invalid_request_error", "param": FIELD, "code": null}}.
- `finish_reason` is "stop" when the completion ended at EOS or at a stop string, "length" when
  it hit max_tokens. The text is cut before the stop string (OpenAI's rule); `token_ids` keep
  every token the engine sampled, EOS and the token that completed a stop string included.
- Beside OpenAI's fields every response carries rlvr's exact tokens: `prompt_token_ids` (the
  prompt as the model read it, after the chat template) and, per choice, `token_ids` and
  `token_logprobs` (nats, the log-probability of each sampled token under the distribution it
  was drawn from: after temperature, top-k and top-p). The same numbers fill OpenAI's
  `logprobs` when a request asks for them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_STOP = 4  # OpenAI's limit on stop sequences
MAX_TOP_LOGPROBS = 20  # chat: OpenAI's bound of top_logprobs
MAX_COMPLETION_LOGPROBS = 5  # completions: OpenAI's bound of logprobs
COMPLETIONS_MAX_TOKENS = 16  # OpenAI's default max_tokens of /v1/completions
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.Generator.manual_seed takes


class RequestError(Exception):
    """A request the server refuses: the HTTP status and OpenAI's error body."""

    def __init__(
        self,
        message: str,
        param: str | None = None,
        status: int = 400,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message, self.param, self.status, self.kind = message, param, status, kind

    def body(self) -> dict[str, Any]:
        return {
            "error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}
        }


@dataclass(frozen=True)
class GenerationRequest:
    """What a request asks for, checked.

    chat: /v1/chat/completions (`messages` set) or /v1/completions (`prompts` set).
    messages: the conversation as {"role", "content"} with text content ("developer" read as
        "system").
    prompts: each prompt of a completions request, text or token ids; `batched` when the
        request's `prompt` was a list of prompts (the response's `prompt_token_ids` is then a
        list per prompt).
    max_tokens: None = the endpoint's default (the server decides; the context bounds it).
    top_k: rlvr's (and vLLM's) extra field; 0 = off.
    logprobs: OpenAI's log-prob fields asked for (chat: logprobs=true; completions:
        logprobs=0).
    stream: answer as server-sent events (the whole completion in one chunk per choice).
    """

    chat: bool
    messages: tuple[Mapping[str, str], ...] = ()
    prompts: tuple[str | tuple[int, ...], ...] = ()
    batched: bool = False
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    n: int = 1
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = False
    stream: bool = False
    include_usage: bool = False


@dataclass(frozen=True)
class Row:
    """One generated completion: the engine's tokens, their log-probs (nats), its text (rlvr's
    decode, EOS left out) and rlvr's finish reason ("eos", "stop" or "length")."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish: str


# --- requests ---------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(body: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if not _is_number(value) or not low <= value <= high:
        raise RequestError(f"{key}: expected a number in [{low}, {high}], got {value!r}", key)
    return float(value)


def _int(body: Mapping[str, Any], key: str, low: int, high: int | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not _is_int(value) or value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise RequestError(f"{key}: expected an integer {bound}, got {value!r}", key)
    return int(value)


def _bool(body: Mapping[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"{key}: expected true or false, got {value!r}", key)
    return value


def _refuse(body: Mapping[str, Any], key: str, ok: Callable[[Any], bool], why: str) -> None:
    value = body.get(key)
    if value is not None and not ok(value):
        raise RequestError(f"{key}: {why}", key)


def _sampling_fields(body: Any, max_n: int) -> dict[str, Any]:
    """The fields both endpoints share, checked."""
    if not isinstance(body, Mapping):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError(f"model: expected a string, got {model!r}", "model")
    max_tokens = _int(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0)
    if top_p == 0.0:
        raise RequestError("top_p: expected a number in (0, 1], got 0", "top_p")
    top_k = _int(body, "top_k", -1)
    n = _int(body, "n", 1, max_n)
    seed = _int(body, "seed", SEED_RANGE[0], SEED_RANGE[1])
    stream = _bool(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, Mapping):
        raise RequestError("stream_options: expected an object", "stream_options")
    include_usage = bool(stream and options and options.get("include_usage"))
    for key in ("presence_penalty", "frequency_penalty"):
        _refuse(body, key, lambda v: v == 0, "not supported (only 0): rlvr samples unpenalised")
    _refuse(body, "logit_bias", lambda v: not v, "not supported (only empty)")
    return {
        "max_tokens": max_tokens,
        "temperature": _number(body, "temperature", 1.0, 0.0, 2.0),
        "top_p": top_p,
        "top_k": 0 if top_k is None or top_k == -1 else top_k,
        "n": 1 if n is None else n,
        "stop": _stop(body.get("stop")),
        "seed": seed,
        "stream": stream,
        "include_usage": include_usage,
    }


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or not all(isinstance(s, str) and s for s in stops)
        or len(stops) > MAX_STOP
    ):
        raise RequestError(
            f"stop: expected a non-empty string or a list of at most {MAX_STOP}, got {value!r}",
            "stop",
        )
    return tuple(dict.fromkeys(stops))


def parse_chat(body: Any, max_n: int) -> GenerationRequest:
    """A /v1/chat/completions body, checked (`RequestError` naming the first bad field)."""
    fields = _sampling_fields(body, max_n)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages: expected a non-empty list of messages", "messages")
    clean = tuple(_message(m, i) for i, m in enumerate(messages))
    logprobs = _bool(body, "logprobs")
    top = _int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if top:
        raise RequestError(
            "top_logprobs: only 0 is supported (the engine returns the sampled token's "
            "log-prob, not the most likely alternatives)",
            "top_logprobs",
        )
    _refuse(body, "tools", lambda v: not v, "not supported: rlvr serve has no function calling")
    _refuse(body, "functions", lambda v: not v, "not supported: no function calling")
    _refuse(
        body,
        "response_format",
        lambda v: isinstance(v, Mapping) and v.get("type", "text") == "text",
        "only {'type': 'text'} is supported (no constrained decoding)",
    )
    return GenerationRequest(chat=True, messages=clean, logprobs=logprobs, **fields)


def _message(message: Any, index: int) -> dict[str, str]:
    where = f"messages[{index}]"
    if not isinstance(message, Mapping):
        raise RequestError(f"{where}: expected an object with 'role' and 'content'", "messages")
    role = message.get("role")
    if role not in ROLES:
        raise RequestError(
            f"{where}: role {role!r} is not supported (expected one of {', '.join(ROLES)}; "
            "no tool messages)",
            "messages",
        )
    content = message.get("content")
    if isinstance(content, list):  # content parts: text ones only
        if not all(isinstance(p, Mapping) and p.get("type") == "text" for p in content):
            raise RequestError(f"{where}: only text content parts are supported", "messages")
        content = "".join(str(p.get("text", "")) for p in content)
    if not isinstance(content, str):
        raise RequestError(f"{where}: 'content' must be a string or text parts", "messages")
    return {"role": ROLES[role], "content": content}


def parse_completion(body: Any, max_n: int) -> GenerationRequest:
    """A /v1/completions body, checked (`RequestError` naming the first bad field)."""
    fields = _sampling_fields(body, max_n)
    prompts, batched = _prompts(body.get("prompt"))
    logprobs = _int(body, "logprobs", 0, MAX_COMPLETION_LOGPROBS)
    if logprobs:
        raise RequestError(
            "logprobs: only 0 is supported (the sampled token's log-prob; the engine does not "
            "return the most likely alternatives)",
            "logprobs",
        )
    _refuse(body, "echo", lambda v: v is False, "not supported (no prompt log-probs)")
    _refuse(body, "suffix", lambda v: v == "", "not supported (no insertion)")
    _refuse(body, "best_of", lambda v: v == fields["n"], "only best_of = n is supported")
    return GenerationRequest(
        chat=False, prompts=prompts, batched=batched, logprobs=logprobs is not None, **fields
    )


def _prompts(value: Any) -> tuple[tuple[str | tuple[int, ...], ...], bool]:
    """(the prompts, whether `prompt` was a list of prompts) of a completions request."""
    bad = RequestError(
        "prompt: expected a string, a list of token ids, or a list of either", "prompt"
    )
    if isinstance(value, str):
        return (value,), False
    if not isinstance(value, list) or not value:
        raise bad
    if all(_is_int(t) for t in value):
        return (tuple(value),), False
    prompts: list[str | tuple[int, ...]] = []
    for item in value:
        if isinstance(item, str):
            prompts.append(item)
        elif isinstance(item, list) and item and all(_is_int(t) for t in item):
            prompts.append(tuple(item))
        else:
            raise bad
    return tuple(prompts), True


# --- responses --------------------------------------------------------------------------------


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, str | None]:
    """(`text` up to the first stop string, the one found there), or (`text`, None)."""
    hits = [(text.find(s), s) for s in stop if s in text]
    if not hits:
        return text, None
    at, found = min(hits)
    return text[:at], found


def _choice_text(row: Row, stop: Sequence[str]) -> tuple[str, str, str | None]:
    """(text, OpenAI finish_reason, stop_reason) of a row."""
    if row.finish == "stop":
        text, found = cut_at_stop(row.text, stop)
        return text, "stop", found
    return row.text, "length" if row.finish == "length" else "stop", None


def _usage(prompts: Sequence[Sequence[int]], rows: Sequence[Row]) -> dict[str, int]:
    """OpenAI's counts: each prompt once (whatever n), every sampled token of every choice."""
    prompt_tokens = sum(len(p) for p in prompts)
    completion_tokens = sum(len(r.token_ids) for r in rows)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def chat_response(
    request: GenerationRequest,
    model: str,
    prompt_ids: Sequence[int],
    rows: Sequence[Row],
    token_text: Callable[[int], str],
) -> dict[str, Any]:
    """The chat.completion object of `rows` (the n completions of one prompt, in order)."""
    choices = []
    for index, row in enumerate(rows):
        text, finish, stop_reason = _choice_text(row, request.stop)
        logprobs = None
        if request.logprobs:
            content = []
            for token, logprob in zip(row.token_ids, row.logprobs, strict=True):
                piece = token_text(token)
                content.append(
                    {
                        "token": piece,
                        "logprob": logprob,
                        "bytes": list(piece.encode("utf-8")),
                        "top_logprobs": [],
                    }
                )
            logprobs = {"content": content, "refusal": None}
        choices.append(
            {
                "index": index,
                "message": {"role": "assistant", "content": text},
                "logprobs": logprobs,
                "finish_reason": finish,
                "stop_reason": stop_reason,
                "token_ids": row.token_ids,
                "token_logprobs": row.logprobs,
            }
        )
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": _usage([prompt_ids], rows),
        "prompt_token_ids": list(prompt_ids),
    }


def completion_response(
    request: GenerationRequest,
    model: str,
    prompt_ids: Sequence[Sequence[int]],
    rows: Sequence[Row],
    token_text: Callable[[int], str],
) -> dict[str, Any]:
    """The text_completion object of `rows`: n per prompt, prompt-major (choice index
    i * n + j is prompt i's j-th completion, as OpenAI numbers a batch)."""
    choices = []
    for index, row in enumerate(rows):
        text, finish, stop_reason = _choice_text(row, request.stop)
        logprobs = None
        if request.logprobs:
            pieces = [token_text(t) for t in row.token_ids]
            offsets, at = [], 0
            for piece in pieces:
                offsets.append(at)
                at += len(piece)
            logprobs = {
                "tokens": pieces,
                "token_logprobs": row.logprobs,
                "top_logprobs": [{p: lp} for p, lp in zip(pieces, row.logprobs, strict=True)],
                "text_offset": offsets,
            }
        choices.append(
            {
                "index": index,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": finish,
                "stop_reason": stop_reason,
                "prompt_token_ids": list(prompt_ids[index // request.n]),
                "token_ids": row.token_ids,
                "token_logprobs": row.logprobs,
            }
        )
    prompts = [list(p) for p in prompt_ids]
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": _usage(prompts, rows),
        "prompt_token_ids": prompts if request.batched else prompts[0],
    }


def stream_chunks(response: Mapping[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """A finished response as the chunk objects of a stream (`stream: true`): per choice one
    chunk with all its content (and its tokens), then one with its finish_reason; with
    `include_usage`, a last chunk with no choices and the usage (OpenAI's stream_options)."""
    chat = response["object"] == "chat.completion"
    head: dict[str, Any] = {
        "id": response["id"],
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": response["created"],
        "model": response["model"],
    }
    chunks = []
    for choice in response["choices"]:
        body = {k: v for k, v in choice.items() if k not in ("message", "finish_reason")}
        if chat:
            body["delta"] = choice["message"]
        chunks.append({**head, "choices": [{**body, "finish_reason": None}]})
        end: dict[str, Any] = {"index": choice["index"], "finish_reason": choice["finish_reason"]}
        if chat:
            end["delta"] = {}
        else:
            end["text"] = ""
        chunks.append({**head, "choices": [end]})
    if chunks:
        chunks[0]["prompt_token_ids"] = response["prompt_token_ids"]
    if include_usage:
        chunks.append({**head, "choices": [], "usage": response["usage"]})
    return chunks
