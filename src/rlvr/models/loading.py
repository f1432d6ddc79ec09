"""Load any Hugging Face causal LM and its tokenizer, and turn task prompts into token ids."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.config import ModelConfig
from rlvr.data.fewshot import chat_turns, render_plain
from rlvr.errors import ModelLoadError

EMBEDDED = "embedded"
EMBEDDED_SMALL = "embedded-small"
EMBEDDED_TOOLS = "embedded-tools"
# model name -> variant of rlvr.models.embedded (a directory shipped in the package)
EMBEDDED_VARIANTS = {EMBEDDED: "base", EMBEDDED_SMALL: "small", EMBEDDED_TOOLS: "tools"}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("model.device: 'cuda' requested but no CUDA device is available")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """fp32 on CPU by default: bf16 matmuls are ~100x slower than fp32 on common CPUs."""
    if name == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


@dataclass(frozen=True)
class Precision:
    """How `rlvr train` stores and computes the policy (model.precision, docs/memory.md).

    name     fp32 | bf16-mixed | bf16 | fp16 (the last from model.dtype=float16)
    weights  the dtype the trained weights are loaded in: AdamW steps these (fp32 masters under
             bf16-mixed), and its moments and the gradients follow them
    compute  the dtype the learner's forward passes run in under torch.autocast, or None for no
             autocast (the weights' own dtype)
    """

    name: str
    weights: torch.dtype
    compute: torch.dtype | None


PRECISION_DTYPES = {
    "fp32": (torch.float32, None),
    "bf16-mixed": (torch.float32, torch.bfloat16),
    "bf16": (torch.bfloat16, None),
    "fp16": (torch.float16, None),
}


def resolve_precision(cfg: ModelConfig, device: torch.device) -> Precision:
    """model.precision on `device` (`ModelConfig.training_precision`): auto = bf16-mixed on CUDA
    with bf16, fp32 elsewhere, or the pure layout of an explicit model.dtype."""
    bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    name = cfg.training_precision(device.type, bf16_supported=bf16)
    return Precision(name, *PRECISION_DTYPES[name])


def resolve_model_path(name_or_path: str, gguf_file: str | None = None) -> str:
    """'embedded' (and its siblings 'embedded-small', 'embedded-tools') -> a shipped tiny model;
    a path must exist; anything else is a hub id.

    With `gguf_file`, a local directory must hold that file instead of a config.json.
    """
    if name_or_path in EMBEDDED_VARIANTS:
        from rlvr.models.embedded import embedded_model_path

        return str(embedded_model_path(EMBEDDED_VARIANTS[name_or_path]))
    looks_like_path = (
        name_or_path.startswith((".", "/", "~"))
        or os.sep in name_or_path.strip("/").split("/", 1)[-1]
        or name_or_path.count("/") > 1
    )
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(
                f"model.name_or_path: {path} is a file; expected a model directory"
            )
        if gguf_file:
            if not (path / gguf_file).is_file():
                raise ModelLoadError(f"model.gguf_file: {path / gguf_file} not found")
            return str(path)
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"model.name_or_path: {path} has no config.json; expected a directory written by "
                "save_pretrained"
            )
        return str(path)
    if looks_like_path:
        raise ModelLoadError(f"model.name_or_path: directory {path} not found")
    return name_or_path


def load_tokenizer(
    name_or_path: str, trust_remote_code: bool = False, gguf_file: str | None = None
) -> Any:
    from transformers import AutoTokenizer

    path = resolve_model_path(name_or_path, gguf_file)
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            path, trust_remote_code=trust_remote_code, **extra
        )
    except (OSError, ValueError) as e:
        raise ModelLoadError(
            f"model.name_or_path: cannot load a tokenizer from '{path}': {_first_line(e)}"
        ) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    cfg: ModelConfig, device: torch.device, dtype: torch.dtype, *, train: bool = True
) -> Any:
    """An AutoModelForCausalLM on `device` in `dtype`; in train mode unless `train=False`."""
    from transformers import AutoModelForCausalLM

    path = resolve_model_path(cfg.name_or_path, cfg.gguf_file)
    extra = {"gguf_file": cfg.gguf_file} if cfg.gguf_file else {}
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=dtype, trust_remote_code=cfg.trust_remote_code, **extra
        )
    except (OSError, ValueError) as e:
        raise ModelLoadError(
            f"model.name_or_path: cannot load a causal LM from '{path}': {_first_line(e)}"
        ) from None
    model.to(device)
    if cfg.gguf_file:
        model._rlvr_from_gguf = True  # transformers refuses save_pretrained; see checkpoint.py
    if cfg.lora_rank and train:
        from rlvr.models.lora import apply_lora

        model = apply_lora(model, cfg)
    if cfg.gradient_checkpointing and train:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    model.train(train)
    if not train:
        model.requires_grad_(False)
    return model


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def uses_chat_template(tokenizer: Any, mode: str) -> bool:
    has = bool(getattr(tokenizer, "chat_template", None))
    if mode == "always" and not has:
        raise ModelLoadError("model.chat_template: 'always' but the tokenizer has no chat template")
    return has if mode == "auto" else mode == "always"


@dataclass(frozen=True)
class PromptEncoder:
    """A task sample's prompt as the token ids a run sends to the model: `encode_prompt` with the
    sample's own system message (else the run's `system_prompt`), its few-shot examples and
    the tools declared to the chat template. One object, so the trainer, evaluation, rejection
    sampling and `rlvr estimate` encode a sample the same way."""

    tokenizer: Any
    chat: bool
    system_prompt: str | None = None
    tools: list[dict] | None = None

    def __call__(self, sample: Mapping[str, Any]) -> list[int]:
        return encode_prompt(
            self.tokenizer,
            sample["prompt"],
            chat=self.chat,
            system_prompt=sample.get("system") or self.system_prompt,
            tools=self.tools,
            shots=sample.get("shots"),
        )


def encode_prompt(
    tokenizer: Any,
    prompt: str,
    *,
    chat: bool,
    system_prompt: str | None = None,
    tools: list[dict] | None = None,
    shots: list[dict] | None = None,
) -> list[int]:
    """Token ids of a prompt: through the chat template for instruct models, plain otherwise.

    Plain prompts get the tokenizer's BOS token when it adds one by default; chat templates
    carry their own special tokens, so nothing else is added. `tools` (JSON schemas of
    functions) are declared to a chat template that takes them (the python tool in its
    `hermes` format). `shots` (solved examples, `data.fewshot`: rlvr/data/fewshot.py) come
    before the question: as user/assistant turns after the system message, or as plain text.
    """
    if chat:
        messages = []
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        messages.extend(chat_turns(shots or []))
        messages.append({"role": "user", "content": prompt})
        extra = {"tools": tools} if tools else {}
        ids = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, **extra
        )
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return list(ids)
    return list(tokenizer(render_plain(shots or [], prompt))["input_ids"])
