"""How one decoder layer of `LlamaFamilyDecoder` computes its projections (`LayerPlan`).

The plain linears of a layer are multiplied through fused copies (q/k/v in one matrix,
gate/up in one), with the RMSNorm before each folded into its columns where the rounding
allows, the residual adds of o_proj and down_proj inside their matmuls, and, on a CPU with
oneDNN, the copies held pre-packed for skinny (decode) inputs. Wrapped projections (peft
LoRA, quantized linears) are called as modules, so adapters apply. Which shortcuts are taken
in half precision depends on `hf_rounding` (see `LayerPlan`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from rlvr.models.modules import is_plain_linear
from rlvr.rollout.weight_stamp import Stamp, layer_sources


def interleave_rope_rows(weight: torch.Tensor, head_dim: int) -> torch.Tensor:
    """The rows (or bias entries) of each head of a q or k projection reordered
    0, D/2, 1, D/2 + 1, ..., D/2 - 1, D - 1, so that the projection yields each rotated pair
    (x_i, x_{i + D/2}) side by side, as `_rotate_interleaved` needs.

    Attention scores are unchanged when queries and keys are permuted alike (q . k sums the
    same products, in another order), and the permuted keys never leave the engine's cache.
    """
    order = torch.arange(head_dim, device=weight.device).view(2, -1).t().reshape(-1)
    return weight.unflatten(0, (-1, head_dim))[:, order].flatten(0, 1)


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


def rms_norm(norm: Any, x: torch.Tensor) -> torch.Tensor:
    """The model's RMSNorm in fewer ops than the module, when it is a known RMSNorm class.
    Like HF's, half-precision inputs are normalised in float32 and cast back before the weight."""
    if not _is_rms_norm(norm):
        return norm(x)
    if x.dtype == torch.float32:
        return _rms_scale(x, norm.variance_epsilon) * norm.weight
    return norm.weight * _rms_scale(x.float(), norm.variance_epsilon).to(x.dtype)


def _can_fold(norm: Any, hf_rounding: bool) -> bool:
    """Fold the norm into the next matmul in float32, and in half precision unless the
    decoder rounds like HF (the folded weights round differently from norm-then-matmul)."""
    return _is_rms_norm(norm) and (norm.weight.dtype == torch.float32 or not hf_rounding)


def _fold(weight: torch.Tensor, norm: Any) -> torch.Tensor:
    """weight [N, H] times the RMSNorm weight times sqrt(H) per column (see `_unit_norm`),
    computed in float32 and rounded once to weight's dtype."""
    scale = norm.weight.float() * norm.weight.shape[-1] ** 0.5
    return (weight.float() * scale).to(weight.dtype)


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


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """A copy of `weight` [N, K] in oneDNN's blocked layout for skinny inputs (decode rows):
    on a 2-core CPU the 30 layers of a 135M model ran their decode matmuls in 25 ms packed
    against 62 ms through F.linear (docs/rollout.md)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _PACK_ROWS)


_PACK_ROWS = 8  # the batch size oneDNN tunes the layout for; any row count is exact


def linear(
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
    hf_rounding: bool = True,
) -> torch.Tensor:
    """h + module(x); one addmm (or one packed oneDNN matmul with the add fused) over the
    flattened rows when the weight is known."""
    if weight is None:
        return h + module(x)
    if h.dtype != torch.float32 and hf_rounding:  # round like HF: the product, then the add
        return h + (linear(x, weight, None, True) if packed else module(x))
    if packed:
        return torch.ops.mkldnn._linear_pointwise.binary(x, h, weight, None, "add")
    out = torch.addmm(h.reshape(-1, h.shape[-1]), x.reshape(-1, x.shape[-1]), weight.t())
    return out.view(h.shape)


class LayerPlan:
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
        hf_rounding: bool = True,
    ) -> None:
        attention, mlp = layer.self_attn, layer.mlp
        self.layer = layer
        self.hf_rounding = hf_rounding
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
                weights[:2] = [interleave_rope_rows(w, head_dim) for w in weights[:2]]
                biases[:2] = [interleave_rope_rows(b, head_dim) for b in biases[:2]]
            self.qkv_weight = torch.cat(weights)
            if _can_fold(norm, hf_rounding):
                self.qkv_weight = _fold(self.qkv_weight, norm)
                self.qkv_floor = _norm_floor(norm)
            if any(m.bias is not None for m in qkv):
                self.qkv_bias = torch.cat(biases)
        gate_up = (mlp.gate_proj, mlp.up_proj)
        norm = layer.post_attention_layernorm
        if fuse and all(is_plain_linear(m) and m.bias is None for m in gate_up):
            self.gate_up_weight = torch.cat([m.weight for m in gate_up])
            if _can_fold(norm, hf_rounding):
                self.gate_up_weight = _fold(self.gate_up_weight, norm)
                self.gate_up_floor = _norm_floor(norm)
        self.o_weight = _residual_weight(attention.o_proj) if fuse else None
        self.down_weight = _residual_weight(mlp.down_proj) if fuse else None
        silu = fuse and type(mlp.act_fn).__name__ in ("SiLUActivation", "SiLU")
        self.act_fn = F.silu if silu else mlp.act_fn
        # With `pack`, every fused or plain weight above is replaced by a oneDNN-packed copy.
        self.packed = False
        if pack and self.qkv_weight is not None and can_pack(self.qkv_weight):
            self.packed = True
            self.qkv_weight = pack_weight(self.qkv_weight)
            if self.gate_up_weight is not None:
                self.gate_up_weight = pack_weight(self.gate_up_weight)
            if self.o_weight is not None:
                self.o_weight = pack_weight(self.o_weight)
            if self.down_weight is not None:
                self.down_weight = pack_weight(self.down_weight)

    def qkv(self, h: torch.Tensor) -> torch.Tensor:
        """[B, T, (Hq + 2 Hkv) D]: queries, keys and values of the normed h, side by side."""
        norm = self.layer.input_layernorm
        if self.qkv_weight is None:
            attention, x = self.layer.self_attn, rms_norm(norm, h)
            return torch.cat(
                (attention.q_proj(x), attention.k_proj(x), attention.v_proj(x)), dim=-1
            )
        if self.qkv_floor is not None:
            x = _unit_norm(h, self.qkv_floor)
        else:
            x = rms_norm(norm, h)
        return linear(x, self.qkv_weight, self.qkv_bias, self.packed)

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        """The gated MLP's inner activations act(gate(x)) * up(x) of the normed h."""
        norm = self.layer.post_attention_layernorm
        if self.gate_up_weight is None:
            x = rms_norm(norm, h)
            gate, up = self.layer.mlp.gate_proj(x), self.layer.mlp.up_proj(x)
        else:
            if self.gate_up_floor is not None:
                x = _unit_norm(h, self.gate_up_floor)
            else:
                x = rms_norm(norm, h)
            gate, up = linear(x, self.gate_up_weight, None, self.packed).chunk(2, dim=-1)
        return self.act_fn(gate) * up

    def attention_residual(self, h: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """h + o_proj(attended), attended [B, T, Hq D]."""
        o_proj = self.layer.self_attn.o_proj
        return _add_projection(h, attended, self.o_weight, o_proj, self.packed, self.hf_rounding)

    def mlp_residual(self, h: torch.Tensor) -> torch.Tensor:
        """h + down_proj(act(gate(x)) * up(x)) with x the normed h."""
        down_proj = self.layer.mlp.down_proj
        return _add_projection(
            h, self.mlp(h), self.down_weight, down_proj, self.packed, self.hf_rounding
        )
