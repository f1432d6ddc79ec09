"""The forward pass of Llama-family decoders, written out over the model's own modules.

The fast engine does not call `model.forward`: per decode step, the HF forward spends more time
in Python (mask construction, cache bookkeeping, output records) than a small model spends in
matrix products. Here each layer is the textbook sequence

    x = h + o_proj(attention(rope(q_proj(norm1(h))), rope(k_proj(..)), v_proj(..)))
    h = x + down_proj(act(gate_proj(norm2(x))) * up_proj(norm2(x)))

over the model's own weights: plain linears through fused (and, on a CPU, oneDNN-packed) copies
(`_LayerPlan`), anything else (peft LoRA layers, quantized linears) by calling the module, so
adapters apply. The copies are kept between calls and rebuilt when a weight they were made
from changed (`Stamp`), so weights updated in place by the trainer are used by the next call
without re-packing unchanged ones. Keys and values live in a `SlotKVCache`. Supported:
`model_type` llama, mistral and qwen2 (q/k/v biases included); sliding windows only while a
sequence fits inside the window.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from rlvr.models.modules import is_plain_linear
from rlvr.rollout.kv_cache import SlotKVCache
from rlvr.rollout.weight_stamp import Stamp, layer_sources, module_sources

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")
# RoPE variants whose frequencies do not depend on the sequence length, so one table of cos/sin
# per position is exact ("dynamic" / "longrope" rescale with the current length).
_STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
# cos and signed sin [.., D] (see `_apply_rope`), cos + i sin [.., D/2] (`_rotate_interleaved`)
_Rope = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]

# The model's own (HF) modules are duck-typed as Any below: torch types a submodule attribute
# such as `layer.self_attn` or `norm.weight` as `Tensor | Module`.


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """None when `LlamaFamilyDecoder` can run `model`, else a short reason it cannot."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        return f"model_type {model_type!r} is not one of {SUPPORTED_MODEL_TYPES}"
    rope = getattr(config, "rope_parameters", None) or {}
    rope_type = rope.get("rope_type", "default") if isinstance(rope, dict) else "per-layer"
    if rope_type not in _STATIC_ROPE_TYPES:
        return f"rope_type {rope_type!r} is not one of {_STATIC_ROPE_TYPES}"
    decoder = getattr(model, "model", None)
    needed = ("embed_tokens", "layers", "norm", "rotary_emb")
    if decoder is None or not all(hasattr(decoder, name) for name in needed):
        return "the model has no .model with embed_tokens/layers/norm/rotary_emb"
    if not hasattr(model, "lm_head"):
        return "the model has no lm_head"
    attention_parts = ("q_proj", "k_proj", "v_proj", "o_proj")
    mlp_parts = ("gate_proj", "up_proj", "down_proj", "act_fn")
    for layer in decoder.layers:
        attention, mlp = layer.self_attn, layer.mlp
        if not all(hasattr(attention, name) for name in attention_parts):
            return "an attention block lacks q_proj/k_proj/v_proj/o_proj"
        if hasattr(attention, "q_norm") or hasattr(attention, "k_norm"):
            return "attention with q/k norms is not supported"
        if not all(hasattr(mlp, name) for name in mlp_parts):
            return "an MLP lacks gate_proj/up_proj/down_proj/act_fn"
    return None


def sliding_window(model: torch.nn.Module) -> int | None:
    """The attention window of any sliding layer (None when every layer attends fully)."""
    config: Any = model.config
    window = getattr(config, "sliding_window", None)
    if window is None:
        return None
    layer_types = getattr(config, "layer_types", None)
    if config.model_type == "mistral" or (layer_types and "sliding_attention" in layer_types):
        return int(window)
    return None


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """HF's x * cos + rotate_half(x) * sin, in three ops.

    rotate_half(x) = cat(-x2, x1) equals roll(x, D/2) * [-1 .. -1, 1 .. 1] elementwise, so with
    signed_sin = cat(-sin1, sin2) precomputed the products are exactly HF's.
    """
    rolled = x.roll(x.shape[-1] // 2, dims=-1)
    if x.dtype != torch.float32:  # round each product like HF (addcmul rounds once)
        return x * cos + rolled * signed_sin
    return torch.addcmul(x * cos, rolled, signed_sin)


def _interleave_rope_rows(weight: torch.Tensor, head_dim: int) -> torch.Tensor:
    """The rows (or bias entries) of each head of a q or k projection reordered
    0, D/2, 1, D/2 + 1, ..., D/2 - 1, D - 1, so that the projection yields each rotated pair
    (x_i, x_{i + D/2}) side by side, as `_rotate_interleaved` needs.

    Attention scores are unchanged when queries and keys are permuted alike (q . k sums the
    same products, in another order), and the permuted keys never leave the engine's cache.
    """
    order = torch.arange(head_dim, device=weight.device).view(2, -1).t().reshape(-1)
    return weight.unflatten(0, (-1, head_dim))[:, order].flatten(0, 1)


def _rotate_interleaved(x: torch.Tensor, freqs: torch.Tensor) -> None:
    """RoPE in place on x [..., heads, D] laid out by `_interleave_rope_rows`: one complex
    multiply by freqs = cos + i sin [..., 1, D/2] (`_rope_freqs`), instead of `_apply_rope`'s
    roll (a cat), two products and a copy into the cache.

    (x1 + i x2)(cos + i sin) = (x1 cos - x2 sin) + i (x2 cos + x1 sin) is HF's
    x * cos + rotate_half(x) * sin term by term; ATen's complex product rounds each of the two
    products and their sum once, like HF's separate ops. Measured (8 rows, 9 + 3 heads of 64,
    one thread): 7 us against 14 us for `_apply_rope` plus writing the result back.
    """
    torch.view_as_complex(x.unflatten(-1, (-1, 2))).mul_(freqs)


def _rope_freqs(cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor | None:
    """cos + i sin [L, D/2] for `_rotate_interleaved`, from HF's tables [L, D] (whose halves are
    equal: HF builds them from cat(freqs, freqs)); None where no complex dtype matches."""
    if cos.dtype not in (torch.float32, torch.float64):
        return None
    half = cos.shape[-1] // 2
    return torch.complex(cos[:, :half], signed_sin[:, half:])


_RMS_NORM_CLASSES = ("LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm")


def _is_rms_norm(norm: torch.nn.Module) -> bool:
    return type(norm).__name__ in _RMS_NORM_CLASSES and hasattr(norm, "variance_epsilon")


def _rms_scale(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) over the last dim: an RMSNorm without its weight."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True).add_(eps))


def _unit_norm(x: torch.Tensor, floor: torch.Tensor) -> torch.Tensor:
    """x / sqrt(|x|^2 + H eps) over the last dim (size H), in three ops; floor = sqrt(H eps)
    as a 0-dim tensor.

    Equals `_rms_scale(x, eps) / sqrt(H)`, since x / sqrt(mean(x^2) + eps)
    = sqrt(H) x / sqrt(|x|^2 + H eps): the fused weights carry the factor sqrt(H).
    """
    return x / torch.hypot(torch.linalg.vector_norm(x, dim=-1, keepdim=True), floor)


def _norm_floor(norm: Any) -> torch.Tensor:
    """sqrt(H eps) of an RMSNorm, as the 0-dim tensor `_unit_norm` takes."""
    weight = norm.weight
    value = (weight.shape[-1] * norm.variance_epsilon) ** 0.5
    return torch.tensor(value, dtype=weight.dtype, device=weight.device)


def _rms_norm(norm: Any, x: torch.Tensor) -> torch.Tensor:
    """The model's RMSNorm in fewer ops than the module, when it is a known RMSNorm class.
    Like HF's, half-precision inputs are normalised in float32 and cast back before the weight."""
    if not _is_rms_norm(norm):
        return norm(x)
    if x.dtype == torch.float32:
        return _rms_scale(x, norm.variance_epsilon) * norm.weight
    return norm.weight * _rms_scale(x.float(), norm.variance_epsilon).to(x.dtype)


def _can_fold(norm: Any) -> bool:
    """Fold the norm into the next matmul only in float32: in half precision the folded
    weights would round differently from HF's norm-then-matmul."""
    return _is_rms_norm(norm) and norm.weight.dtype == torch.float32


def _folded_norm_weight(norm: Any) -> torch.Tensor:
    """The RMSNorm weight times sqrt(H), to fold into the next matmul (see `_unit_norm`)."""
    return norm.weight * norm.weight.shape[-1] ** 0.5


def _residual_weight(linear: Any) -> torch.Tensor | None:
    if is_plain_linear(linear) and linear.bias is None:
        return linear.weight
    return None


def can_pack(weight: torch.Tensor) -> bool:
    """Whether oneDNN can hold `weight` pre-packed: fp32, or bf16 where the CPU has oneDNN's
    bf16 kernels (AVX-512-BF16, AMX), on a CPU build with mkldnn. Measured on an AVX-512-BF16
    CPU (2 threads, 16 rows): a SmolLM2 MLP matmul 63.7 -> 47.1 us packed in bf16, the output
    head 2616 -> 1655 us, bit-identical to F.linear's (docs/rollout.md)."""
    if weight.dtype == torch.bfloat16:
        supported = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
        if supported is None or not supported():
            return False
    elif weight.dtype != torch.float32:
        return False
    return (
        weight.device.type == "cpu"
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    )


def _pack(weight: torch.Tensor) -> torch.Tensor:
    """A copy of `weight` [N, K] in oneDNN's blocked layout for skinny inputs (decode rows):
    on a 2-core CPU the 30 layers of a 135M model ran their decode matmuls in 25 ms packed
    against 62 ms through F.linear (docs/rollout.md)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _PACK_ROWS)


_PACK_ROWS = 8  # the batch size oneDNN tunes the layout for; any row count is exact


def _linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, packed: bool
) -> torch.Tensor:
    if packed:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    return F.linear(x, weight, bias)


def _add_projection(
    h: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    module: torch.nn.Module,
    packed: bool = False,
) -> torch.Tensor:
    """h + module(x); one addmm (or one packed oneDNN matmul with the add fused) over the
    flattened rows when the weight is known."""
    if weight is None:
        return h + module(x)
    if h.dtype != torch.float32:  # half precision: round like HF (the product, then the add)
        return h + (_linear(x, weight, None, True) if packed else module(x))
    if packed:
        return torch.ops.mkldnn._linear_pointwise.binary(x, h, weight, None, "add")
    out = torch.addmm(h.reshape(-1, h.shape[-1]), x.reshape(-1, x.shape[-1]), weight.t())
    return out.view(h.shape)


class _LayerPlan:
    """How one decoder layer computes its projections, kept across `generate` calls.

    With `fuse`, plain linears are fused: q/k/v into one [(Hq + 2 Hkv) D, H] matrix and
    gate/up into one [2 I, H] matrix (fewer, larger matmuls: on a CPU a small model's step time
    is mostly per-op overhead), and the weight of the RMSNorm before each is folded into its
    columns, since (x_hat * w) @ W^T = x_hat @ (W * w)^T (with the sqrt(H) of `_unit_norm`).
    In float32 the q and k rows are also reordered for `_rotate_interleaved` (`interleaved`).
    Bias-free o_proj and down_proj add the residual inside one addmm. Wrapped projections
    (LoRA) are called as modules. `stamp` records what the copies were made from: the decoder
    reuses the plan while `stamp.matches(layer_sources(layer))`, so weights updated in place
    by the trainer are seen by the next call and unchanged ones are not copied again.
    """

    def __init__(
        self,
        layer: Any,  # a decoder layer: self_attn.q_proj, mlp.act_fn, input_layernorm, ...
        fuse: bool,
        pack: bool = False,
        head_dim: int | None = None,
    ) -> None:
        attention, mlp = layer.self_attn, layer.mlp
        self.layer = layer
        self.stamp = Stamp(layer_sources(layer))
        self.qkv_weight = self.qkv_bias = self.gate_up_weight = None
        self.qkv_floor = self.gate_up_floor = None
        qkv = (attention.q_proj, attention.k_proj, attention.v_proj)
        norm = layer.input_layernorm
        self.interleaved = False
        if fuse and all(is_plain_linear(m) for m in qkv):
            weights = [m.weight for m in qkv]
            biases = [
                m.bias if m.bias is not None else m.weight.new_zeros(m.out_features) for m in qkv
            ]
            if head_dim is not None and qkv[0].weight.dtype == torch.float32:
                self.interleaved = True  # q and k: the rotated projections
                weights[:2] = [_interleave_rope_rows(w, head_dim) for w in weights[:2]]
                biases[:2] = [_interleave_rope_rows(b, head_dim) for b in biases[:2]]
            self.qkv_weight = torch.cat(weights)
            if _can_fold(norm):
                self.qkv_weight *= _folded_norm_weight(norm)
                self.qkv_floor = _norm_floor(norm)
            if any(m.bias is not None for m in qkv):
                self.qkv_bias = torch.cat(biases)
        gate_up = (mlp.gate_proj, mlp.up_proj)
        norm = layer.post_attention_layernorm
        if fuse and all(is_plain_linear(m) and m.bias is None for m in gate_up):
            self.gate_up_weight = torch.cat([m.weight for m in gate_up])
            if _can_fold(norm):
                self.gate_up_weight *= _folded_norm_weight(norm)
                self.gate_up_floor = _norm_floor(norm)
        self.o_weight = _residual_weight(attention.o_proj) if fuse else None
        self.down_weight = _residual_weight(mlp.down_proj) if fuse else None
        silu = fuse and type(mlp.act_fn).__name__ in ("SiLUActivation", "SiLU")
        self.act_fn = F.silu if silu else mlp.act_fn
        # With `pack`, every fused or plain weight above is replaced by a oneDNN-packed copy.
        self.packed = False
        if pack and self.qkv_weight is not None and can_pack(self.qkv_weight):
            self.packed = True
            self.qkv_weight = _pack(self.qkv_weight)
            if self.gate_up_weight is not None:
                self.gate_up_weight = _pack(self.gate_up_weight)
            if self.o_weight is not None:
                self.o_weight = _pack(self.o_weight)
            if self.down_weight is not None:
                self.down_weight = _pack(self.down_weight)

    def qkv(self, h: torch.Tensor) -> torch.Tensor:
        """[B, T, (Hq + 2 Hkv) D]: queries, keys and values of the normed h, side by side."""
        norm = self.layer.input_layernorm
        if self.qkv_weight is None:
            attention, x = self.layer.self_attn, _rms_norm(norm, h)
            return torch.cat(
                (attention.q_proj(x), attention.k_proj(x), attention.v_proj(x)), dim=-1
            )
        if self.qkv_floor is not None:
            x = _unit_norm(h, self.qkv_floor)
        else:
            x = _rms_norm(norm, h)
        return _linear(x, self.qkv_weight, self.qkv_bias, self.packed)

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        """The gated MLP's inner activations act(gate(x)) * up(x) of the normed h."""
        norm = self.layer.post_attention_layernorm
        if self.gate_up_weight is None:
            x = _rms_norm(norm, h)
            gate, up = self.layer.mlp.gate_proj(x), self.layer.mlp.up_proj(x)
        else:
            if self.gate_up_floor is not None:
                x = _unit_norm(h, self.gate_up_floor)
            else:
                x = _rms_norm(norm, h)
            gate, up = _linear(x, self.gate_up_weight, None, self.packed).chunk(2, dim=-1)
        return self.act_fn(gate) * up

    def attention_residual(self, h: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """h + o_proj(attended), attended [B, T, Hq D]."""
        return _add_projection(h, attended, self.o_weight, self.layer.self_attn.o_proj, self.packed)

    def mlp_residual(self, h: torch.Tensor) -> torch.Tensor:
        """h + down_proj(act(gate(x)) * up(x)) with x the normed h."""
        return _add_projection(
            h, self.mlp(h), self.down_weight, self.layer.mlp.down_proj, self.packed
        )


class LlamaFamilyDecoder:
    """Prefill and one-token decode steps of a Llama-family `*ForCausalLM` (unwrapped from peft).

    Shapes: Hq query heads, Hkv key/value heads (GQA when Hq > Hkv), head size D.
    Call `prepare()` before a generate call (checks the kept fused/packed copies against the
    current weights, rebuilding stale ones) and `release()` after it (the copies are kept for
    the next call unless `weights=True`).
    """

    def __init__(
        self, model: torch.nn.Module, fuse_projections: bool = True, pack_weights: bool = False
    ) -> None:
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"LlamaFamilyDecoder: {reason}")
        decoder: Any = model.model
        self.model: Any = model
        self.decoder = decoder
        self.fuse_projections = fuse_projections
        self.pack_weights = pack_weights and fuse_projections
        config: Any = model.config
        self.num_layers = len(decoder.layers)
        self.num_heads: int = config.num_attention_heads
        self.kv_heads: int = getattr(config, "num_key_value_heads", None) or self.num_heads
        self.head_dim: int = (
            getattr(config, "head_dim", None) or config.hidden_size // self.num_heads
        )
        self._gqa = self.num_heads != self.kv_heads
        self._rope: _Rope | None = None
        # Kept between calls: one plan per layer and the packed output head with its stamp.
        self._kept_plans: list[_LayerPlan | None] = []
        self._kept_head: tuple[Stamp, torch.Tensor | None] | None = None
        # Set by prepare() for the duration of a call only.
        self._plans: list[_LayerPlan] | None = None
        self._head: torch.Tensor | None = None  # packed output head

    def prepare(self) -> None:
        """Make the projections ready for a call from the current weights: a layer's kept plan
        is reused while its `Stamp` matches, else rebuilt (its stale copies are dropped first,
        so at most one copy of each weight is held, plus one layer's while it is rebuilt).
        Re-packing SmolLM2-135M's 121 weights took ~110 ms of CPU per call."""
        layers = list(self.decoder.layers)
        if len(self._kept_plans) != len(layers):
            self._kept_plans = [None] * len(layers)
        kept = self._kept_plans
        plans: list[_LayerPlan] = []
        for index, layer in enumerate(layers):
            plan = kept[index]
            if plan is None or not plan.stamp.matches(layer_sources(layer)):
                kept[index] = None
                plan = kept[index] = _LayerPlan(
                    layer, self.fuse_projections, self.pack_weights, self.head_dim
                )
            plans.append(plan)
        self._plans = plans
        head = self.model.lm_head
        sources = module_sources((head,))
        if self._kept_head is None or not self._kept_head[0].matches(sources):
            self._kept_head = None
            packable = self.pack_weights and is_plain_linear(head) and head.bias is None
            packed = _pack(head.weight) if packable and can_pack(head.weight) else None
            self._kept_head = (Stamp(sources), packed)
        self._head = self._kept_head[1]

    def release(self, weights: bool = False) -> None:
        """End a call. The fused/packed copies stay kept for the next call's `prepare()` (one
        copy of the projection weights and, packed, of the output head: ~540 MB for SmolLM2 in
        fp32); `weights=True` frees them (the next call rebuilds them)."""
        self._plans = None
        self._head = None
        if weights:
            self._kept_plans = []
            self._kept_head = None

    def rope_table(self, length: int, like: torch.Tensor) -> _Rope:
        """cos and signed sin (see `_apply_rope`) [length, D], and cos + i sin [length, D/2]
        (see `_rotate_interleaved`; None in half precision) for positions 0..length-1, from
        the model's own rotary module (so its scaling variant and attention factor apply);
        cached, grown on demand."""
        cached = self._rope
        if (
            cached is None
            or cached[0].shape[0] < length
            or cached[0].dtype != like.dtype
            or cached[0].device != like.device
        ):
            positions = torch.arange(length, device=like.device).unsqueeze(0)
            cos, sin = self.decoder.rotary_emb(like, position_ids=positions)
            cos, sin = cos[0], sin[0]
            half = sin.shape[-1] // 2
            signed_sin = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
            self._rope = cached = (cos, signed_sin, _rope_freqs(cos, signed_sin))
        freqs = cached[2][:length] if cached[2] is not None else None
        return cached[0][:length], cached[1][:length], freqs

    def _rotate(
        self,
        plan: _LayerPlan,
        qkv: torch.Tensor,
        rope: _Rope,
    ) -> None:
        """RoPE in place on the query and key heads of qkv [..., Hq + 2 Hkv, D]; rope holds
        cos and signed sin [..., 1, D] and cos + i sin [..., 1, D/2] at the tokens' positions.
        Writing back in the non-interleaved layout keeps keys and values adjacent in qkv, so
        the cache takes both in one write."""
        rotated = qkv[..., : self.num_heads + self.kv_heads, :]
        if plan.interleaved:
            assert rope[2] is not None, "interleaved plans are float32, with cos + i sin tables"
            _rotate_interleaved(rotated, rope[2])
        else:
            rotated.copy_(_apply_rope(rotated, rope[0], rope[1]))

    def _attention_inputs(
        self, plan: _LayerPlan, h: torch.Tensor, rope: _Rope
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B, Hq, T, D], k and v [B, Hkv, T, D] of hidden states h [B, T, H], RoPE applied
        to queries and keys together."""
        batch, steps, _ = h.shape
        qkv = plan.qkv(h).view(batch, steps, -1, self.head_dim)
        self._rotate(plan, qkv, rope)
        qkv = qkv.transpose(1, 2)
        heads, rotated = self.num_heads, self.num_heads + self.kv_heads
        return qkv[:, :heads], qkv[:, heads:rotated], qkv[:, rotated:]

    def _finish_layer(
        self, plan: _LayerPlan, h: torch.Tensor, attended: torch.Tensor
    ) -> torch.Tensor:
        """Output projection, residual, then the gated MLP block with its residual."""
        batch, _, steps, _ = attended.shape
        attended = attended.transpose(1, 2).reshape(batch, steps, -1)
        return plan.mlp_residual(plan.attention_residual(h, attended))

    def _logits(self, last_hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits [B, V] (float32) of last-position hidden states [B, H]."""
        normed = _rms_norm(self.decoder.norm, last_hidden)
        if self._head is not None:
            return _linear(normed, self._head, None, True).float()
        return self.model.lm_head(normed).float()

    def _layer_plans(self) -> list[_LayerPlan]:
        if self._plans is None:
            raise RuntimeError("LlamaFamilyDecoder: call prepare() before prefill/decode")
        return self._plans

    def prefill(
        self, input_ids: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
        """Run right-padded prompts input_ids [B, P] (true lengths [B]) from position 0.

        Causal attention alone is exact here: padding only follows a row's real tokens, so no
        real token ever attends to it. Returns per-layer keys and values [B, Hkv, P, D] (valid
        up to each row's length; keys in the plan's layout, see `_LayerPlan.interleaved`) and
        the next-token logits [B, V] at each row's last token.
        """
        h = self.decoder.embed_tokens(input_ids)
        cos, signed_sin, freqs = self.rope_table(input_ids.shape[1], h)
        rope = (  # [P, 1, ...]: one row per position, broadcast over heads
            cos.unsqueeze(1),
            signed_sin.unsqueeze(1),
            freqs.unsqueeze(1) if freqs is not None else None,
        )
        keys, values = [], []
        for plan in self._layer_plans():
            q, k, v = self._attention_inputs(plan, h, rope)
            attended = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=plan.layer.self_attn.scaling, enable_gqa=self._gqa
            )
            h = self._finish_layer(plan, h, attended)
            # k and v are views into the layer's [B, Hq + 2 Hkv, P, D] projection: keep a
            # compact copy of them, not the whole tensor (the queries were ~60% of it).
            cached = torch.cat((k, v), dim=1)
            keys.append(cached[:, : self.kv_heads])
            values.append(cached[:, self.kv_heads :])
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)
        return keys, values, self._logits(h[rows, lengths - 1])

    def decode(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        cache: SlotKVCache,
        length: int,
    ) -> torch.Tensor:
        """Feed one token per slot: tokens [W] at positions [W] of slots 0..W-1.

        Each slot's key/value is written at its own position, then it attends to its positions
        0..positions[s] (an additive mask over the first `length` cache positions hides the
        rest). Hidden states stay 2-D [W, H] (one query per slot), which saves the reshapes of
        the [B, T, H] prefill layout. Per layer and step: the norm, one q/k/v matmul, RoPE in
        place, one cache write of keys and values together, attention, and the MLP; what does
        not depend on the layer (RoPE rows, mask, cache indices) is computed once per step.
        Returns next-token logits [W, V] float32.
        """
        width = tokens.shape[0]
        heads = self.num_heads
        h = self.decoder.embed_tokens(tokens)  # [W, H]
        cos, signed_sin, freqs = self.rope_table(cache.max_len, h)
        rope = (
            cos[positions].unsqueeze(1),
            signed_sin[positions].unsqueeze(1),
            freqs[positions].unsqueeze(1) if freqs is not None else None,
        )
        write_index = cache.write_index(positions)
        hidden = torch.arange(length, device=tokens.device) > positions.unsqueeze(1)
        mask = torch.zeros(hidden.shape, dtype=h.dtype, device=h.device).masked_fill_(
            hidden, float("-inf")
        )  # [W, L]
        if h.dtype == torch.float32:  # one row per (slot, kv head), see _decode_attention
            mask = mask.repeat_interleave(self.kv_heads, dim=0).unsqueeze(1)
        else:
            mask = mask.view(width, 1, 1, length)
        for index, plan in enumerate(self._layer_plans()):
            qkv = plan.qkv(h).view(width, -1, self.head_dim)  # [W, Hq + 2 Hkv, D]
            self._rotate(plan, qkv, rope)
            cache.write(index, write_index, qkv[:, heads:])
            cached_k, cached_v = cache.view(index, width, length)
            attended = self._decode_attention(qkv[:, :heads], cached_k, cached_v, mask, plan)
            h = plan.mlp_residual(plan.attention_residual(h, attended))
        return self._logits(h)

    def _decode_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor,
        plan: _LayerPlan,
    ) -> torch.Tensor:
        """softmax(q k^T * scale + mask) v for one query per slot, GQA without copying K/V.

        q [W, Hq, D]; k, v [W, Hkv, L, D] (cache views). In float32: q is regrouped as
        [W Hkv, G, D] (query heads j*G..j*G+G-1 share kv head j, the layout of HF's repeat_kv),
        k and v are viewed as [W Hkv, L, D] (the cache's slot stride is Hkv times its head
        stride, so no copy), mask [W Hkv, 1, L] is 0 or -inf; then baddbmm (mask + scale q k^T
        in one op), softmax and bmm. Measured (8 rows, 9/3 heads, 100 positions, one thread):
        104 us against 112 us for 4-D matmul/add/softmax/matmul and 122 us for SDPA. Half
        precision uses SDPA with mask [W, 1, 1, L], as HF does, so that rounding matches.
        Returns [W, Hq D].
        """
        width, length = q.shape[0], k.shape[2]
        scale = plan.layer.self_attn.scaling
        if q.dtype != torch.float32:
            attended = F.scaled_dot_product_attention(
                q.unsqueeze(2), k, v, attn_mask=mask, scale=scale, enable_gqa=self._gqa
            )
            return attended.reshape(width, -1)
        rows = width * self.kv_heads
        grouped = q.reshape(rows, -1, self.head_dim)
        keys = k.reshape(rows, length, self.head_dim)
        scores = torch.baddbmm(mask, grouped, keys.transpose(1, 2), alpha=scale)
        attended = torch.bmm(scores.softmax(dim=-1), v.reshape(rows, length, self.head_dim))
        return attended.view(width, -1)
