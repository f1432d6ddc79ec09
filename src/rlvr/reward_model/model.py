"""A scalar reward model: the model, how it reads a sequence, and the text it reads.

The model is `transformers.AutoModelForSequenceClassification` with `num_labels=1`, started
from any model rlvr loads (`model.name_or_path`: the embedded models, a directory, a hub id, a
GGUF file; LoRA adapters with `model.lora_rank`): the causal LM's body with a fresh linear
`score` head (hidden -> 1). Its reward for a sequence is the head's output at the sequence's
last token (`sequence_rewards`): rows are right-padded and the last attended position is read,
so a pad token equal to EOS (as `load_tokenizer` sets when a tokenizer has none) cannot move
it. config.json records `pad_token_id` (transformers' own pooling needs it) and
`rlvr_rm_format`, the layout the model was trained on:

    text   tokenizer(prompt + completion) + EOS (unless the ids already end with it): TRL's
           RewardTrainer on plain rows, which appends EOS to chosen and rejected
    chat   the chat template over prompt messages + the assistant's completion: TRL's
           conversational rows (the template ends the turn itself)

`rm:PATH` scoring (rlvr.reward_model.scoring) lays out each completion the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rlvr.config import ModelConfig
from rlvr.errors import ConfigError, ModelLoadError, UserError
from rlvr.models.lora import is_lora

FORMAT_KEY = "rlvr_rm_format"  # config.json: the layout rlvr rm trained on ("text" or "chat")
FORMATS = ("text", "chat")
Messages = list[dict[str, str]]


def model_source(cfg: ModelConfig) -> tuple[str, dict[str, Any]]:
    """(directory, from_pretrained keywords) of `cfg`'s model: a GGUF file's converted
    directory when it can be cached (rlvr.models.loading.converted_gguf), else the file."""
    from rlvr.models.loading import converted_gguf, resolve_model_path

    path = resolve_model_path(cfg.name_or_path, cfg.gguf_file)
    if not cfg.gguf_file:
        return path, {}
    converted = converted_gguf(path, cfg.gguf_file, cfg.trust_remote_code)
    if converted is None:
        return path, {"gguf_file": cfg.gguf_file}
    return str(converted), {}


def load_reward_model(
    cfg: ModelConfig,
    device: torch.device,
    dtype: torch.dtype,
    *,
    pad_token_id: int,
    train: bool = True,
) -> Any:
    """AutoModelForSequenceClassification(num_labels=1) of `cfg`'s model on `device` in
    `dtype` (a causal LM gets a new score head, initialised from torch's global RNG); with
    `cfg.lora_rank` and `train`, LoRA adapters on its body and a trainable head."""
    from transformers import AutoModelForSequenceClassification

    path, extra = model_source(cfg)
    try:
        model: Any = AutoModelForSequenceClassification.from_pretrained(
            path, num_labels=1, dtype=dtype, trust_remote_code=cfg.trust_remote_code, **extra
        )
    except (OSError, ValueError, RuntimeError) as e:
        raise ModelLoadError(
            f"model.name_or_path: cannot load '{path}' as a sequence classifier: {_first_line(e)}"
        ) from None
    model.config.pad_token_id = pad_token_id
    model.to(device)
    if cfg.lora_rank and train:
        model = apply_reward_lora(model, cfg)
    if cfg.gradient_checkpointing and train:
        model.gradient_checkpointing_enable()
    model.train(train)
    if not train:
        model.requires_grad_(False)
    return model


def apply_reward_lora(model: Any, cfg: ModelConfig) -> Any:
    """LoRA adapters (model.lora_*) on the body, the score head trained in full (peft's
    SEQ_CLS task keeps it in `modules_to_save`)."""
    try:
        import peft as peft_module
    except ImportError:
        raise UserError(
            "model.lora_rank > 0 needs peft: pip install 'rlvr[lora]' (or pip install peft)"
        ) from None
    peft: Any = peft_module  # typed loosely, as rlvr.models.lora reads it
    targets: Any = cfg.lora_target_modules
    if targets == ["all-linear"]:
        # the head is no adapter target: it is new and trained whole
        targets = sorted(
            {
                name.rsplit(".", 1)[-1]
                for name, module in model.named_modules()
                if isinstance(module, torch.nn.Linear) and not name.startswith("score")
            }
        )
    lora_cfg = peft.LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        bias="none",
        task_type="SEQ_CLS",
        modules_to_save=["score"],
    )
    try:
        return peft.get_peft_model(model, lora_cfg)
    except ValueError as e:
        raise UserError(f"model.lora_target_modules: {str(e).splitlines()[0]}") from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def sequence_rewards(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """The reward of each right-padded row [B], fp32: the score head at the row's last attended
    position (attention_mask.sum - 1). A model without a `score` head over its base model is
    read through its own forward (transformers' pooling at the last non-pad token)."""
    inner = model.get_base_model() if is_lora(model) else model
    body = getattr(inner, getattr(inner, "base_model_prefix", ""), None)
    head = getattr(inner, "score", None)
    if body is None or head is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
        return logits[:, 0].float()
    hidden = body(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)[0]
    last = attention_mask.sum(dim=1) - 1
    rows = torch.arange(input_ids.shape[0], device=input_ids.device)
    return head(hidden[rows, last])[:, 0].float()


def pad_right(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) [B, T] of token lists, right-padded with `pad_id`."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(list(s), dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def recorded_format(model_config: Any) -> str | None:
    """The layout `rlvr rm` trained a model on (config.json's rlvr_rm_format), else None."""
    value = getattr(model_config, FORMAT_KEY, None)
    return value if value in FORMATS else None


def _text_of(part: str | Messages) -> str:
    """A completion given as messages (TRL's conversational form): its content, joined."""
    if isinstance(part, str):
        return part
    return "".join(m["content"] for m in part)


def encode_text(tokenizer: Any, prompt: str, completion: str) -> list[int]:
    """The `text` layout: tokenizer(prompt + completion) (its special tokens as the tokenizer
    adds them by default) + EOS unless the ids already end with it."""
    ids = list(tokenizer(prompt + completion)["input_ids"])
    eos = tokenizer.eos_token_id
    if eos is not None and (not ids or ids[-1] != eos):
        ids.append(eos)
    return ids


def encode_chat(
    tokenizer: Any,
    prompt: str | Messages,
    completion: str | Messages,
    system: str | None = None,
) -> list[int]:
    """The `chat` layout: the chat template over the prompt's messages (a string prompt: one
    user message, after `system` when given) and the completion as the assistant's turn."""
    if not has_chat_template(tokenizer):
        raise ConfigError(
            "the reward model's tokenizer has no chat template, which conversational pairs "
            "(lists of chat messages) need"
        )
    if isinstance(prompt, str):
        messages: Messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt})
    else:
        messages = list(prompt)
    if isinstance(completion, str):
        messages.append({"role": "assistant", "content": completion})
    else:
        messages += list(completion)
    ids = tokenizer.apply_chat_template(messages, tokenize=True)
    if isinstance(ids, Mapping) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    return list(ids)


def last_user_text(prompt: str | Messages) -> str:
    """A prompt as text: a string as it is, messages as the last user message's content."""
    if isinstance(prompt, str):
        return prompt
    users = [m["content"] for m in prompt if m.get("role") == "user"]
    return users[-1] if users else _text_of(prompt)


def encode_scored(
    tokenizer: Any,
    prompt: str | Messages,
    completion: str | Messages,
    *,
    layout: str,
    system: str | None = None,
) -> list[int]:
    """The token ids a reward model reads for (prompt, completion) in `layout` (module
    docstring); the text layout reads a message prompt as its last user message."""
    if layout == "chat":
        return encode_chat(tokenizer, prompt, completion, system)
    return encode_text(tokenizer, last_user_text(prompt), _text_of(completion))
