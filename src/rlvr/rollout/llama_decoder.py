"""The forward pass of Llama-family decoders, written out over the model's own modules.

The fast engine does not call `model.forward`: per decode step, the HF forward spends more time
in Python (mask construction, cache bookkeeping, output records) than a small model spends in
matrix products. Here each layer is the textbook sequence

    x = h + o_proj(attention(rope(q_proj(norm1(h))), rope(k_proj(..)), v_proj(..)))
    h = x + down_proj(act(gate_proj(norm2(x))) * up_proj(norm2(x)))

over the model's own weights: plain linears through fused (and, on a CPU, oneDNN-packed) copies
(`LayerPlan`), anything else (peft LoRA layers, quantized linears) by calling the module, so
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
from rlvr.rollout.layer_plan import LayerPlan, can_pack, linear, pack_weight, rms_norm
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


def _rotate_interleaved(x: torch.Tensor, freqs: torch.Tensor) -> None:
    """RoPE in place on x [..., heads, D] laid out by `interleave_rope_rows`: one complex
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


class LlamaFamilyDecoder:
    """Prefill and one-token decode steps of a Llama-family `*ForCausalLM` (unwrapped from peft).

    Shapes: Hq query heads, Hkv key/value heads (GQA when Hq > Hkv), head size D.
    Call `prepare()` before a generate call (checks the kept fused/packed copies against the
    current weights, rebuilding stale ones) and `release()` after it (the copies are kept for
    the next call unless `weights=True`).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        fuse_projections: bool = True,
        pack_weights: bool = False,
        hf_rounding: bool = True,
    ) -> None:
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"LlamaFamilyDecoder: {reason}")
        decoder: Any = model.model
        self.model: Any = model
        self.decoder = decoder
        self.fuse_projections = fuse_projections
        self.pack_weights = pack_weights and fuse_projections
        self.hf_rounding = hf_rounding
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
        self._kept_plans: list[LayerPlan | None] = []
        self._kept_head: tuple[Stamp, torch.Tensor | None] | None = None
        # Set by prepare() for the duration of a call only.
        self._plans: list[LayerPlan] | None = None
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
        plans: list[LayerPlan] = []
        for index, layer in enumerate(layers):
            plan = kept[index]
            if plan is None or not plan.stamp.matches(layer_sources(layer)):
                kept[index] = None
                plan = kept[index] = LayerPlan(
                    layer, self.fuse_projections, self.pack_weights, self.head_dim, self.hf_rounding
                )
            plans.append(plan)
        self._plans = plans
        head = self.model.lm_head
        sources = module_sources((head,))
        if self._kept_head is None or not self._kept_head[0].matches(sources):
            self._kept_head = None
            packable = self.pack_weights and is_plain_linear(head) and head.bias is None
            packed = pack_weight(head.weight) if packable and can_pack(head.weight) else None
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
        plan: LayerPlan,
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
        self, plan: LayerPlan, h: torch.Tensor, rope: _Rope
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
        self, plan: LayerPlan, h: torch.Tensor, attended: torch.Tensor
    ) -> torch.Tensor:
        """Output projection, residual, then the gated MLP block with its residual."""
        batch, _, steps, _ = attended.shape
        attended = attended.transpose(1, 2).reshape(batch, steps, -1)
        return plan.mlp_residual(plan.attention_residual(h, attended))

    def _logits(self, last_hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits [B, V] (float32) of last-position hidden states [B, H]."""
        normed = rms_norm(self.decoder.norm, last_hidden)
        if self._head is not None:
            return linear(normed, self._head, None, True).float()
        return self.model.lm_head(normed).float()

    def _layer_plans(self) -> list[LayerPlan]:
        if self._plans is None:
            raise RuntimeError("LlamaFamilyDecoder: call prepare() before prefill/decode")
        return self._plans

    def prefill(
        self, input_ids: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
        """Run right-padded prompts input_ids [B, P] (true lengths [B]) from position 0.

        Causal attention alone is exact here: padding only follows a row's real tokens, so no
        real token ever attends to it. Returns per-layer keys and values [B, Hkv, P, D] (valid
        up to each row's length; keys in the plan's layout, see `LayerPlan.interleaved`) and
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
        elif not self.hf_rounding:  # the same, positions down the rows
            mask = mask.repeat_interleave(self.kv_heads, dim=0).unsqueeze(-1)
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
        plan: LayerPlan,
    ) -> torch.Tensor:
        """softmax(q k^T * scale + mask) v for one query per slot, GQA without copying K/V.

        q [W, Hq, D]; k, v [W, Hkv, L, D] (cache views). In float32: q is regrouped as
        [W Hkv, G, D] (query heads j*G..j*G+G-1 share kv head j, the layout of HF's repeat_kv),
        k and v are viewed as [W Hkv, L, D] (the cache's slot stride is Hkv times its head
        stride, so no copy), mask [W Hkv, 1, L] is 0 or -inf; then baddbmm (mask + scale q k^T
        in one op), softmax and bmm. Measured (8 rows, 9/3 heads, 100 positions, one thread):
        104 us against 112 us for 4-D matmul/add/softmax/matmul and 122 us for SDPA. Half
        precision with `hf_rounding` uses SDPA with mask [W, 1, 1, L], as HF does, so that
        rounding matches; without, the grouped product is taken as k q^T [W Hkv, L, G] (mask
        [W Hkv, L, 1]), softmax over L, then its transpose times v, which reads the cached keys
        in place where bf16's bmm would first copy a transposed view. Measured with bf16 K/V on
        an AVX-512-BF16 CPU (one thread; 16 rows x 128 positions, 64 x 128, 16 x 512): 346,
        1967, 2321 us, against 427, 2325, 3368 us for the fp32 layout and 1916 us (16 x 128)
        for SDPA.
        Returns [W, Hq D].
        """
        width, length = q.shape[0], k.shape[2]
        scale = plan.layer.self_attn.scaling
        if not self._grouped_attention(q):
            attended = F.scaled_dot_product_attention(
                q.unsqueeze(2), k, v, attn_mask=mask, scale=scale, enable_gqa=self._gqa
            )
            return attended.reshape(width, -1)
        rows = width * self.kv_heads
        grouped = q.reshape(rows, -1, self.head_dim)
        keys = k.reshape(rows, length, self.head_dim)
        values = v.reshape(rows, length, self.head_dim)
        if q.dtype != torch.float32:  # [rows, L, G]: keys as they lie in the cache
            scores = torch.baddbmm(mask, keys, grouped.transpose(1, 2), alpha=scale)
            attended = torch.bmm(scores.softmax(dim=1).transpose(1, 2), values)
            return attended.reshape(width, -1)
        scores = torch.baddbmm(mask, grouped, keys.transpose(1, 2), alpha=scale)
        attended = torch.bmm(scores.softmax(dim=-1), values)
        return attended.view(width, -1)

    def _grouped_attention(self, x: torch.Tensor) -> bool:
        """Decode attention regrouped by kv head (`_decode_attention`): in float32, and in half
        precision unless rounding like HF."""
        return x.dtype == torch.float32 or not self.hf_rounding
