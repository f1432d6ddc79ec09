"""The model behind `rlvr serve`: a tokenizer, a rollout engine and the prompt encoding rlvr's
training uses, answering one checked request at a time.

Decisions:
- Prompts are encoded as `rlvr train`, `rlvr eval` and `rlvr sample` encode them
  (`rlvr.models.loading.PromptEncoder`): a chat request's messages become a conversational
  row (`rlvr.data.messages.conversation`: the system message, the earlier turns, the question)
  rendered by the tokenizer's chat template with the generation prompt, or, for a model
  without one (the embedded models), the plain rendering training gives such a row (earlier
  turns as solved examples, the question last; a system message is not shown to a plain
  model). A served checkpoint therefore reads a request as it read its training prompts.
- One request at a time: encoding, generation and the response are made under one lock (the
  engine keeps one KV cache, and a tokenizer is not safe to share between threads); the HTTP
  threads only parse and write. The n completions of a request (and the prompts of a batched
  completions request) are decoded together, in one engine call.
- Sampling is keyed (`rlvr.rollout.sampling`): a request's `seed` seeds a torch.Generator whose
  one draw keys the rows, so choice i depends only on the seed, the prompt and i, never on
  other requests or on n. A request without a seed takes one draw from the server's generator
  (seeded by serve.seed).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rlvr.data.messages import conversation
from rlvr.errors import DataError
from rlvr.models.loading import PromptEncoder, encode_prompt
from rlvr.rollout import Engine, RolloutBatch, SamplingParams
from rlvr.serve.config import ServeConfig
from rlvr.serve.protocol import (
    COMPLETIONS_MAX_TOKENS,
    GenerationRequest,
    RequestError,
    Row,
    chat_response,
    completion_response,
)


class ServedModel:
    """A rollout engine and its tokenizer behind the OpenAI endpoints.

    engine: any rlvr engine (`rlvr.rollout.build_engine`); tokenizer: the model's.
    name: the model name responses report. chat: render chat requests with the tokenizer's
        chat template (False: the plain rendering, see the module docstring).
    context_length: prompt + completion tokens the model takes (None: unchecked).
    vocab_size: token ids a prompt may hold are 0..vocab_size-1.
    max_tokens: a chat request's default limit (0 = the rest of the context window).
    max_n: the largest n a request may ask. seed: the server generator's seed.
    """

    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        *,
        name: str,
        chat: bool,
        device: torch.device,
        context_length: int | None = None,
        vocab_size: int | None = None,
        max_tokens: int = 0,
        max_n: int = 64,
        seed: int = 0,
        engine_name: str = "",
    ) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.name = name
        self.chat = chat
        self.device = device
        self.context_length = context_length
        self.vocab_size = vocab_size
        self.max_tokens = max_tokens
        self.max_n = max_n
        self.engine_name = engine_name
        self.encoder = PromptEncoder(tokenizer, chat)
        self.lock = threading.Lock()
        self._seeds = torch.Generator().manual_seed(seed)

    @classmethod
    def from_config(cls, cfg: ServeConfig) -> ServedModel:
        """Load the model of `cfg.model` for inference (as `rlvr eval` and `rlvr sample` do)
        and build the engine of `cfg.rollout`."""
        from rlvr.models.loading import (
            load_model,
            load_tokenizer,
            resolve_device,
            resolve_dtype,
            uses_chat_template,
        )
        from rlvr.rollout import build_engine
        from rlvr.rollout.engines import engine_options

        m = cfg.model
        device = resolve_device(m.device)
        tokenizer = load_tokenizer(m.name_or_path, m.trust_remote_code, m.gguf_file)
        chat = uses_chat_template(tokenizer, m.chat_template)
        model = load_model(m, device, resolve_dtype(m.dtype, device), train=False)
        engine = build_engine(cfg.rollout.engine, model, tokenizer, **engine_options(cfg.rollout))
        return cls(
            engine,
            tokenizer,
            name=cfg.served_name,
            chat=chat,
            device=device,
            context_length=cfg.rollout.vllm_max_model_len or context_length(model),
            vocab_size=model.get_input_embeddings().num_embeddings,
            max_tokens=cfg.serve.max_tokens,
            max_n=cfg.serve.max_n,
            seed=cfg.serve.seed,
            engine_name=cfg.rollout.engine,
        )

    def describe(self) -> dict[str, Any]:
        """The /v1/models entry of the served model."""
        return {
            "id": self.name,
            "object": "model",
            "created": 0,
            "owned_by": "rlvr",
            "rlvr": {
                "engine": self.engine_name,
                "chat_template": self.chat,
                "context_length": self.context_length,
            },
        }

    # --- prompts ------------------------------------------------------------------------------

    def encode_chat(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        """The token ids a chat request's messages are given to the model as."""
        try:
            sample = conversation(list(messages), "request", "messages")
        except DataError as e:
            raise RequestError(str(e).removeprefix("request: "), "messages") from None
        return self.encoder(sample)

    def encode_prompt(self, prompt: str | Sequence[int]) -> list[int]:
        """A completions prompt: text encoded as a plain prompt (the tokenizer's BOS when it
        adds one), token ids as they are."""
        if isinstance(prompt, str):
            ids = encode_prompt(self.tokenizer, prompt, chat=False)
            if not ids:
                raise RequestError("prompt: encodes to no tokens", "prompt")
            return ids
        size = self.vocab_size
        bad = [t for t in prompt if size is not None and not 0 <= t < size]
        if bad and size is not None:
            raise RequestError(
                f"prompt: token id {bad[0]} is outside the vocabulary (0..{size - 1})", "prompt"
            )
        return list(prompt)

    def new_tokens(self, request: GenerationRequest, prompts: Sequence[Sequence[int]]) -> int:
        """max_new_tokens of a request: its max_tokens, else the endpoint's default (chat:
        serve.max_tokens or the rest of the context; completions: OpenAI's 16), within the
        context window of the longest prompt."""
        field = "messages" if request.chat else "prompt"
        context, longest = self.context_length, max(len(p) for p in prompts)
        room = None if context is None else context - longest
        if room is not None and room < 1:
            raise RequestError(
                f"{field}: {longest} prompt tokens leave no room in the model's context of "
                f"{context} tokens",
                field,
            )
        if request.max_tokens is not None:
            if room is not None and request.max_tokens > room:
                raise RequestError(
                    f"max_tokens: {request.max_tokens} new tokens after {longest} prompt tokens "
                    f"exceed the model's context of {context} tokens",
                    "max_tokens",
                )
            return request.max_tokens
        default = (self.max_tokens or None) if request.chat else COMPLETIONS_MAX_TOKENS
        limits = [x for x in (default, room) if x is not None]
        if not limits:
            raise RequestError(
                "max_tokens: required (the model's context length is unknown)", "max_tokens"
            )
        return min(limits)

    # --- answers ------------------------------------------------------------------------------

    def respond(self, request: GenerationRequest) -> dict[str, Any]:
        """The response object of a checked request (one at a time: under `lock`)."""
        with self.lock:
            if request.chat:
                prompts = [self.encode_chat(request.messages)]
            else:
                prompts = [self.encode_prompt(p) for p in request.prompts]
            params = SamplingParams(
                temperature=request.temperature,
                top_p=request.top_p,
                top_k=request.top_k,
                max_new_tokens=self.new_tokens(request, prompts),
                stop=request.stop,
            )
            batch = self.generate(prompts, request.n, params, request.seed)
            rows = [
                Row(c.tolist(), lp.tolist(), text, reason)
                for c, lp, text, reason in zip(
                    batch.completion_ids,
                    batch.logprobs,
                    batch.completion_text,
                    batch.finish_reason,
                    strict=True,
                )
            ]
            if request.chat:
                return chat_response(request, self.name, prompts[0], rows, self.token_text)
            return completion_response(request, self.name, prompts, rows, self.token_text)

    def generate(
        self, prompts: Sequence[Sequence[int]], n: int, params: SamplingParams, seed: int | None
    ) -> RolloutBatch:
        """`n` completions of each prompt, keyed by `seed` (None: the server's next draw)."""
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,), generator=self._seeds))
        generator = torch.Generator(device=self.device).manual_seed(seed)
        return self.engine.generate(prompts, n, params, generator=generator)

    def token_text(self, token: int) -> str:
        """One token as text (OpenAI's `token` of a log-prob entry), special tokens shown."""
        return str(self.tokenizer.decode([token], skip_special_tokens=False))


def context_length(model: torch.nn.Module) -> int | None:
    """Prompt + completion tokens `model` takes: its config's position limit (None: unknown)."""
    config = getattr(model, "config", None)
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None
