"""Memory arithmetic of a run: what `rlvr estimate CONFIG` prints.

Per device, for a policy of N parameters (T of them trainable) in a run's configuration:

  weights         N * b_w            b_w: 4 (fp32 weights, also under mixed precision, where the
                                     fp32 master copy is what is stored) or 2 (pure bf16/fp16)
  gradients       T * b_g            b_g = b_w
  optimizer       T * 8 or T * 4     AdamW's two moments: fp32 (8 bytes) unless the weights are
                                     pure bf16/fp16 (the moments follow the parameter dtype: 4)
  reference       N * b_w            only when algorithm.kl_coef > 0 and without LoRA (LoRA's
                                     reference is the adapter-disabled policy: no copy)
  KV cache        2 * L * H_kv * d_head * (P + C) * R * b_a
                                     R = rows decoded together (min(max_batch_size, prompts x G)),
                                     P = prompt tokens, C = rollout.max_new_tokens, b_a = 2 on
                                     bf16/mixed, 4 on fp32
  activations     per micro-batch of S tokens: S * h * L * 34 * b_a / 2 without checkpointing
                  (the per-layer term of Korthikanti et al. 2022, 34 bytes/token/hidden in 16-bit,
                  attention scores excluded as with fused SDPA kernels), S * h * L * b_a with
                  gradient checkpointing (one hidden state per layer kept), plus the logits
                  S * V * 4 (fp32 log-softmax of the completion positions)

With FSDP over W ranks, weights, gradients and optimizer state are divided by W.

So full fine-tuning with Adam costs 16 bytes per trainable parameter both in fp32 and in
mixed precision (fp32 master weights + bf16 compute: 4 + 4 + 8), and 8 in pure bf16 (2 + 2 + 4):
a 7B model in mixed precision needs 112 GB for weights, gradients and optimizer alone.

Decision: the estimate is what rlvr itself would allocate for the configuration (precision
"auto" = fp32 on CPU; bf16 weights and moments when model.dtype=bfloat16), with `--precision`
to plan other layouts; activations are an order-of-magnitude guide, the rest is exact
arithmetic from the model config (parameter counts come from building the model on the meta
device, so no weights are read or downloaded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PRECISIONS = ("auto", "fp32", "mixed", "bf16")
GIB = 2**30


@dataclass
class ModelShape:
    num_parameters: int
    trainable_parameters: int
    num_layers: int
    hidden_size: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int


def lora_trainable(config: Any, rank: int, targets: list[str]) -> int:
    """Trainable parameters of LoRA adapters r * (in + out) on the targeted linear layers."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    head = model.get_output_embeddings()
    total = 0
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or module is head:
            continue
        leaf = name.rsplit(".", 1)[-1]
        if targets == ["all-linear"] or leaf in targets:
            total += rank * (module.in_features + module.out_features)
    return total


def model_shape(config: Any, lora_rank: int = 0, lora_targets: list[str] | None = None):
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    n = sum(p.numel() for p in model.parameters())
    trainable = (
        lora_trainable(config, lora_rank, lora_targets or ["all-linear"]) if lora_rank else n
    )
    heads = getattr(config, "num_attention_heads", 1)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    hidden = config.hidden_size
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    return ModelShape(
        num_parameters=n + (trainable if lora_rank else 0),
        trainable_parameters=trainable,
        num_layers=config.num_hidden_layers,
        hidden_size=hidden,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=config.vocab_size,
    )


def estimate(
    shape: ModelShape,
    *,
    precision: str,
    kl_coef: float,
    lora: bool,
    rows_decoded: int,
    prompt_tokens: int,
    max_new_tokens: int,
    micro_batch_rows: int,
    gradient_checkpointing: bool,
    world_size: int = 1,
    fsdp: bool = False,
) -> dict[str, float]:
    """Bytes per device of each part (see the module docstring for every formula)."""
    if precision not in ("fp32", "mixed", "bf16"):
        raise ValueError(f"precision must be fp32, mixed or bf16, got {precision!r}")
    b_w = 2 if precision == "bf16" else 4
    b_a = 4 if precision == "fp32" else 2
    moments = 4 if precision == "bf16" else 8
    shard = world_size if fsdp else 1
    n, t = shape.num_parameters, shape.trainable_parameters
    base = n - t if lora else n  # frozen base weights under LoRA are never sharded apart
    seq = prompt_tokens + max_new_tokens
    tokens = micro_batch_rows * seq
    per_layer_act = 34 * b_a / 2 if not gradient_checkpointing else b_a
    parts = {
        "weights": (base + (t if lora else 0)) * b_w / shard,
        "gradients": t * b_w / shard,
        "optimizer": t * moments / shard,
        "reference": (n * b_w / shard) if (kl_coef > 0 and not lora) else 0.0,
        "kv_cache": 2.0
        * shape.num_layers
        * shape.num_kv_heads
        * shape.head_dim
        * seq
        * rows_decoded
        * b_a,
        "activations": tokens * shape.hidden_size * shape.num_layers * per_layer_act,
        "logits": micro_batch_rows * max_new_tokens * shape.vocab_size * 4.0,
    }
    parts["total"] = sum(parts.values())
    # weight + gradient + moments of one trainable parameter, before sharding
    parts["bytes_per_trainable_parameter"] = float(2 * b_w + moments)
    return parts


def resolve_precision(precision: str, dtype: str, device: str) -> str:
    """What rlvr trains in for model.dtype/model.device when precision is 'auto'."""
    if precision != "auto":
        return precision
    if dtype == "float32":
        return "fp32"
    if dtype in ("bfloat16", "float16"):
        return "bf16"
    return "bf16" if device == "cuda" else "fp32"  # dtype auto: bf16 weights on CUDA


def _count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit} ({n:,})"
    return f"{n:,}"


def _bytes(b: float) -> str:
    return f"{b / GIB:.2f} GiB" if b >= GIB else f"{b / 2**20:.1f} MiB"


def format_report(shape: ModelShape, parts: dict[str, float], precision: str, note: str) -> str:
    rows = [
        ("parameters", _count(shape.num_parameters)),
        ("trainable", _count(shape.trainable_parameters)),
        ("precision", precision),
    ]
    for key in (
        "weights",
        "gradients",
        "optimizer",
        "reference",
        "kv_cache",
        "activations",
        "logits",
        "total",
    ):
        rows.append((key, _bytes(parts[key])))
    rows.append(("bytes/trainable param", f"{parts['bytes_per_trainable_parameter']:.1f}"))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    if note:
        lines.append(note)
    return "\n".join(lines)
