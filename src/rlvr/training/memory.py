"""Memory arithmetic of a run: what `rlvr estimate CONFIG` prints.

Per device, for a policy of N parameters (T of them trainable) in a run's configuration:

  weights         N * b_w            b_w: 4 (fp32 weights, also under bf16-mixed, where the
                                     fp32 master copy is what is stored) or 2 (pure bf16/fp16);
                                     LoRA: a frozen base of (N - T) * b_w, with b_w = 2 under
                                     bf16-mixed too, and T * 4 of adapters (peft keeps them in
                                     fp32 over a 16-bit base)
  gradients       T * b_t            b_t: the trained weights' bytes (b_w; LoRA: 4)
  optimizer       T * 2 * b_t        AdamW's two moments follow the trained weights' dtype
  compute copy    T' * 2 (/ L)       bf16-mixed only (T' = N, LoRA: T): the bf16 casts of the
                                     fp32 weights autocast
                                     makes in the gradient pass, saved for its backward (whole
                                     weights even under FSDP: autocast casts gathered ones);
                                     one layer's (N * 2 / L) with gradient checkpointing
  reference       N * b_w            only when algorithm.kl_coef > 0 and without LoRA (LoRA's
                                     reference is the adapter-disabled policy: no copy)
  KV cache        2 * L * H_kv * d_head * (P + C) * R * b_w
                                     R = rows decoded together (min(max_batch_size, prompts x G)),
                                     P = prompt tokens, C = rollout.max_new_tokens; the engines
                                     decode in the weights' dtype (fp32 under bf16-mixed)
  activations     per micro-batch of S tokens: S * h * L * 34 * b_a / 2 without checkpointing
                  (the per-layer term of Korthikanti et al. 2022, 34 bytes/token/hidden in 16-bit,
                  attention scores excluded as with fused SDPA kernels), S * h * L * b_a with
                  gradient checkpointing (one hidden state per layer kept), plus the logits
                  S * V * 4 (fp32 log-softmax of the completion positions); b_a = 2 under
                  bf16-mixed and pure 16-bit, 4 in fp32

With FSDP over W ranks, weights, gradients and optimizer state are divided by W.

So full fine-tuning with Adam costs 16 bytes per trainable parameter both in fp32 and in
bf16-mixed (fp32 master weights + bf16 compute: 4 + 4 + 8, plus the transient 2-byte compute
copy), and 8 in pure bf16 (2 + 2 + 4): a 7B model in bf16-mixed needs 112 GB for weights,
gradients and optimizer alone.

Decision: the estimate is what rlvr itself would allocate for the configuration (precision
"auto" = model.precision as `rlvr train` resolves it: bf16-mixed on CUDA, fp32 on CPU, pure
16-bit for an explicit model.dtype), with `--precision` to plan other layouts; activations are
an order-of-magnitude guide, the rest is exact
arithmetic from the model config (parameter counts come from building the model on the meta
device, so no weights are read or downloaded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PRECISIONS = ("auto", "fp32", "bf16-mixed", "bf16")  # model.precision's choices
LAYOUTS = ("fp32", "bf16-mixed", "bf16", "fp16")  # what auto resolves to (fp16: model.dtype)
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
    if precision not in LAYOUTS:
        raise ValueError(f"precision must be one of {', '.join(LAYOUTS)}, got {precision!r}")
    pure16 = precision in ("bf16", "fp16")
    # a 16-bit frozen base in the pure layouts, and under bf16-mixed with LoRA (build_policy)
    b_w = 2 if pure16 or (lora and precision == "bf16-mixed") else 4
    b_t = 4 if lora else b_w
    b_a = 4 if precision == "fp32" else 2
    moments = 2 * b_t
    shard = world_size if fsdp else 1
    n, t = shape.num_parameters, shape.trainable_parameters
    base = n - t if lora else n  # frozen base weights under LoRA are never sharded apart
    seq = prompt_tokens + max_new_tokens
    tokens = micro_batch_rows * seq
    per_layer_act = 34 * b_a / 2 if not gradient_checkpointing else b_a
    parts = {
        "weights": (base * b_w + (t * b_t if lora else 0)) / shard,
        "gradients": t * b_t / shard,
        "optimizer": t * moments / shard,
        "compute_copy": (
            (t if lora else n) * 2.0 / (shape.num_layers if gradient_checkpointing else 1)
            if precision == "bf16-mixed"
            else 0.0
        ),
        "reference": (n * b_w / shard) if (kl_coef > 0 and not lora) else 0.0,
        "kv_cache": 2.0
        * shape.num_layers
        * shape.num_kv_heads
        * shape.head_dim
        * seq
        * rows_decoded
        * b_w,
        "activations": tokens * shape.hidden_size * shape.num_layers * per_layer_act,
        "logits": micro_batch_rows * max_new_tokens * shape.vocab_size * 4.0,
    }
    parts["total"] = sum(parts.values())
    # weight + gradient + moments of one trainable parameter, before sharding
    parts["bytes_per_trainable_parameter"] = float(2 * b_t + moments)
    return parts


def resolve_precision(precision: str, model: Any, device: str) -> str:
    """The layout to plan: `precision` (the --precision flag) unless 'auto', then what `rlvr
    train` would use for the config's model section on `device` ('cpu'/'cuda'; a CUDA device
    is assumed to support bf16)."""
    if precision != "auto":
        return precision
    return model.training_precision(device)


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
        "compute_copy",
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
