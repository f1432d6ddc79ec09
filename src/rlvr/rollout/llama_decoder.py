"""The forward pass of Llama-family decoders, written out over the model's own modules.

The fast engine does not call `model.forward`: per decode step, the HF forward spends more time
in Python (mask construction, cache bookkeeping, output records) than a small model spends in
matrix products. Here each layer is the textbook sequence

    x = h + o_proj(attention(rope(q_proj(norm1(h))), rope(k_proj(..)), v_proj(..)))
    h = x + down_proj(act(gate_proj(norm2(x))) * up_proj(norm2(x)))

over the model's own weights: plain linears through fused copies made when a call starts
(`_LayerPlan`), anything else (peft LoRA layers, quantized linears) by calling the module, so
adapters apply and weights updated in place by the trainer are used by the next call. Keys and
values live in a `SlotKVCache`. Supported: `model_type` llama, mistral and qwen2 (q/k/v biases
included); sliding windows only while a sequence fits inside the window.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlvr.rollout.kv_cache import SlotKVCache

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")
# RoPE variants whose frequencies do not depend on the sequence length, so one table of cos/sin
# per position is exact ("dynamic" / "longrope" rescale with the current length).
_STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


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
    config = model.config
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


def _is_plain_linear(module: torch.nn.Module) -> bool:
    """An unwrapped nn.Linear without hooks: its weight alone defines what it computes (a peft
    LoRA layer or a quantized linear is not one)."""
    return (
        type(module) is torch.nn.Linear
        and not module._forward_hooks
        and not module._forward_pre_hooks
    )


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


def _norm_floor(norm: torch.nn.Module) -> torch.Tensor:
    """sqrt(H eps) of an RMSNorm, as the 0-dim tensor `_unit_norm` takes."""
    weight = norm.weight
    value = (weight.shape[-1] * norm.variance_epsilon) ** 0.5
    return torch.tensor(value, dtype=weight.dtype, device=weight.device)


def _rms_norm(norm: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The model's RMSNorm in fewer ops than the module, when it is a known RMSNorm class.
    Like HF's, half-precision inputs are normalised in float32 and cast back before the weight."""
    if not _is_rms_norm(norm):
        return norm(x)
    if x.dtype == torch.float32:
        return _rms_scale(x, norm.variance_epsilon) * norm.weight
    return norm.weight * _rms_scale(x.float(), norm.variance_epsilon).to(x.dtype)


def _can_fold(norm: torch.nn.Module) -> bool:
    """Fold the norm into the next matmul only in float32: in half precision the folded
    weights would round differently from HF's norm-then-matmul."""
    return _is_rms_norm(norm) and norm.weight.dtype == torch.float32


def _folded_norm_weight(norm: torch.nn.Module) -> torch.Tensor:
    """The RMSNorm weight times sqrt(H), to fold into the next matmul (see `_unit_norm`)."""
    return norm.weight * norm.weight.shape[-1] ** 0.5


def _residual_weight(linear: torch.nn.Module) -> torch.Tensor | None:
    if _is_plain_linear(linear) and linear.bias is None:
        return linear.weight
    return None


def can_pack(weight: torch.Tensor) -> bool:
    """Whether oneDNN can hold `weight` pre-packed: fp32 on a CPU build with mkldnn."""
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    )


def _pack(weight: torch.Tensor) -> torch.Tensor:
    """A copy of `weight` [N, K] in oneDNN's blocked layout for skinny inputs (decode rows):
    on a 2-core CPU the 30 layers of a 135M model ran their decode matmuls in 25 ms packed
    against 62 ms through F.linear (docs/rollout.md)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _PACK_ROWS)


_PACK_ROWS = 8  # the batch size oneDNN tunes the layout for; any row count is exact


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, packed: bool):
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
    if weight is None or h.dtype != torch.float32:  # half precision: round like HF
        return h + module(x)
    if packed:
        return torch.ops.mkldnn._linear_pointwise.binary(x, h, weight, None, "add")
    out = torch.addmm(h.reshape(-1, h.shape[-1]), x.reshape(-1, x.shape[-1]), weight.t())
    return out.view(h.shape)


class _LayerPlan:
    """How one decoder layer computes its projections during one `generate` call.

    With `fuse`, plain linears are fused for the call: q/k/v into one [(Hq + 2 Hkv) D, H]
    matrix and gate/up into one [2 I, H] matrix (fewer, larger matmuls: on a CPU a small
    model's step time is mostly per-op overhead), and the weight of the RMSNorm before each is
    folded into its columns, since (x_hat * w) @ W^T = x_hat @ (W * w)^T (with the sqrt(H) of
    `_unit_norm`). Bias-free o_proj and down_proj add the residual inside one addmm. The fused
    copies are made from the live weights when the call starts, so in-place updates by the
    trainer are seen by the next call. Wrapped projections (LoRA) are called as modules.
    """

    def __init__(self, layer: torch.nn.Module, fuse: bool, pack: bool = False) -> None:
        attention, mlp = layer.self_attn, layer.mlp
        self.layer = layer
        self.qkv_weight = self.qkv_bias = self.gate_up_weight = None
        self.qkv_floor = self.gate_up_floor = None
        qkv = (attention.q_proj, attention.k_proj, attention.v_proj)
        norm = layer.input_layernorm
        if fuse and all(_is_plain_linear(m) for m in qkv):
            self.qkv_weight = torch.cat([m.weight for m in qkv])
            if _can_fold(norm):
                self.qkv_weight *= _folded_norm_weight(norm)
                self.qkv_floor = _norm_floor(norm)
            if any(m.bias is not None for m in qkv):
                biases = [
                    m.bias if m.bias is not None else m.weight.new_zeros(m.out_features)
                    for m in qkv
                ]
                self.qkv_bias = torch.cat(biases)
        gate_up = (mlp.gate_proj, mlp.up_proj)
        norm = layer.post_attention_layernorm
        if fuse and all(_is_plain_linear(m) and m.bias is None for m in gate_up):
            self.gate_up_weight = torch.cat([m.weight for m in gate_up])
            if _can_fold(norm):
                self.gate_up_weight *= _folded_norm_weight(norm)
                self.gate_up_floor = _norm_floor(norm)
        self.o_weight = _residual_weight(attention.o_proj) if fuse else None
        self.down_weight = _residual_weight(mlp.down_proj) if fuse else None
        silu = fuse and type(mlp.act_fn).__name__ in ("SiLUActivation", "SiLU")
        self.act_fn = F.silu if silu else mlp.act_fn
        # With `pack`, every fused or plain weight above is replaced by a oneDNN-packed copy.
        self.packed = pack and self.qkv_weight is not None and can_pack(self.qkv_weight)
        if self.packed:
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
    Call `prepare()` before a generate call (fuses projections from the current weights) and
    `release()` after it.
    """

    def __init__(
        self, model: torch.nn.Module, fuse_projections: bool = True, pack_weights: bool = False
    ) -> None:
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"LlamaFamilyDecoder: {reason}")
        self.model = model
        self.decoder = model.model
        self.fuse_projections = fuse_projections
        self.pack_weights = pack_weights and fuse_projections
        self._head: torch.Tensor | None = None  # packed output head during a call
        config = model.config
        self.num_layers = len(self.decoder.layers)
        self.num_heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.num_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.num_heads
        self._gqa = self.num_heads != self.kv_heads
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None
        self._plans: list[_LayerPlan] | None = None

    def prepare(self) -> None:
        self._plans = [
            _LayerPlan(layer, self.fuse_projections, self.pack_weights)
            for layer in self.decoder.layers
        ]
        head = self.model.lm_head
        packable = self.pack_weights and _is_plain_linear(head) and head.bias is None
        self._head = _pack(head.weight) if packable and can_pack(head.weight) else None

    def release(self) -> None:
        self._plans = None
        self._head = None

    def rope_table(self, length: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin (see `_apply_rope`) [length, D] for positions 0..length-1, from the
        model's own rotary module (so its scaling variant and attention factor apply); cached,
        grown on demand."""
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
            self._rope = cached = (cos, torch.cat((-sin[:, :half], sin[:, half:]), dim=-1))
        return cached[0][:length], cached[1][:length]

    def _attention_inputs(
        self, plan: _LayerPlan, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B, Hq, T, D], k and v [B, Hkv, T, D] of hidden states h [B, T, H], RoPE applied
        to queries and keys together."""
        batch, steps, _ = h.shape
        qkv = plan.qkv(h).view(batch, steps, -1, self.head_dim).transpose(1, 2)
        rotated_heads = self.num_heads + self.kv_heads
        qk = qkv[:, :rotated_heads]
        qk = _apply_rope(qk, cos, sin)
        return qk[:, : self.num_heads], qk[:, self.num_heads :], qkv[:, rotated_heads:]

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
        up to each row's length) and the next-token logits [B, V] at each row's last token.
        """
        h = self.decoder.embed_tokens(input_ids)
        cos, sin = self.rope_table(input_ids.shape[1], h)
        keys, values = [], []
        for plan in self._layer_plans():
            q, k, v = self._attention_inputs(plan, h, cos, sin)
            attended = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=plan.layer.self_attn.scaling, enable_gqa=self._gqa
            )
            h = self._finish_layer(plan, h, attended)
            keys.append(k)
            values.append(v)
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
        the [B, T, H] prefill layout. Returns next-token logits [W, V] float32.
        """
        width = tokens.shape[0]
        heads, kv_heads = self.num_heads, self.kv_heads
        h = self.decoder.embed_tokens(tokens)  # [W, H]
        cos_table, sin_table = self.rope_table(cache.max_len, h)
        cos, sin = cos_table[positions].unsqueeze(1), sin_table[positions].unsqueeze(1)
        key_positions = torch.arange(length, device=tokens.device)
        hidden = key_positions.unsqueeze(0) > positions.unsqueeze(1)
        mask = torch.zeros(hidden.shape, dtype=h.dtype, device=h.device).masked_fill_(
            hidden, float("-inf")
        )
        mask = mask.view(width, 1, 1, length)
        for index, plan in enumerate(self._layer_plans()):
            qkv = plan.qkv(h).view(width, -1, self.head_dim)  # [W, Hq + 2 Hkv, D]
            qk = _apply_rope(qkv[:, : heads + kv_heads], cos, sin)
            cache.write(index, positions, qk[:, heads:], qkv[:, heads + kv_heads :])
            cached_k, cached_v = cache.view(index, width, length)
            attended = self._decode_attention(qk[:, :heads], cached_k, cached_v, mask, plan)
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

        q [W, Hq, D] is viewed as [W, Hkv, G, D]: query heads j*G..j*G+G-1 share kv head j
        (the layout of HF's repeat_kv). k, v [W, Hkv, L, D]; mask [W, 1, 1, L] is 0 or -inf.
        In float32 these four ops measured as fast as one SDPA call on a CPU for a single
        query; half precision uses SDPA, as HF does, so that rounding matches.
        Returns [W, Hq D].
        """
        width = q.shape[0]
        scale = plan.layer.self_attn.scaling
        if q.dtype != torch.float32:
            attended = F.scaled_dot_product_attention(
                q.unsqueeze(2), k, v, attn_mask=mask, scale=scale, enable_gqa=self._gqa
            )
            return attended.reshape(width, -1)
        grouped = q.view(width, self.kv_heads, -1, self.head_dim)
        scores = torch.matmul(grouped, k.transpose(-1, -2))
        scores = torch.add(mask, scores, alpha=scale)
        attended = torch.matmul(scores.softmax(dim=-1), v)  # [W, Hkv, G, D]
        return attended.view(width, -1)
