"""Whether `model.precision=auto` trains in bf16-mixed or fp32 on a CPU, decided by measuring.

CPUs differ more than a rule can say: with AVX2 alone a bf16 matmul is ~100x slower than fp32,
with AVX-512-BF16 (AMD EPYC) or Intel AMX it is faster (AMX: 4.7x, a SmolLM2-shaped
forward+backward 3.2x under bf16 autocast). So `probe` times one decoder layer's linear
projections of the model's own shapes (q, k, v, o, gate, up, down; fp32 weights, a forward and
backward over a few hundred tokens) in fp32 and under `torch.autocast("cpu", bfloat16)`, the
best of a few interleaved repeats after a warm-up of each, on one thread: about 0.3 s at
SmolLM2's shapes (larger layers are timed scaled down to about its size). Rules, in order:

    RLVR_PRECISION_PROBE=off                  fp32, nothing timed
    no oneDNN bf16 kernels on this CPU        fp32, nothing timed
    hidden size < SMALL_HIDDEN                fp32, nothing timed
    fp32 time / bf16 time >= MIN_SPEEDUP      bf16-mixed, else fp32

Pure: a generator of its own (the global RNGs are untouched), torch's thread count restored.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from rlvr.errors import UserError

ENV = "RLVR_PRECISION_PROBE"  # "off": fp32 without timing anything
# Below this hidden size the model's other ops (autocast's casts, norms, attention, small
# kernels) outweigh the matmuls and bf16 does not pay: on an AVX-512-BF16 EPYC, where these
# projections alone run ~2x faster in bf16 at hidden 128, the embedded model's (hidden 128)
# update takes 0.041 s a step in fp32 and 0.044-0.053 s in bf16-mixed. Every tiny model of the
# tests stays fp32 without a probe.
SMALL_HIDDEN = 512
# bf16-mixed only with a clear margin, so timing noise (the min of 3 moves ~10% between runs
# on a shared CPU) cannot flip a choice near 1: measured at SmolLM2's shapes (hidden 576)
# 2.9-3.5x on that EPYC; AMX matmuls 4.7x; AVX2 never gets here (no bf16 kernels).
MIN_SPEEDUP = 1.5
# Rows of the timed forward; fewer make bf16 look slow (a Llama-3.2-1B layer over 32 tokens
# measured 0.97x, over 256 2.4x), and training's micro-batches hold thousands.
PROBE_TOKENS = 256
# Larger layers (SmolLM2's holds 3.5M weights) are timed scaled down to about this many, in
# the same proportions: a full Qwen2.5-0.5B layer measured 3.7x, scaled 3.8x; a Llama-3.2-1B
# layer 2.4x, scaled 3.5x (an overestimate, far from 1.5x either way), and it took 7 s.
LAYER_PARAMS = 4_000_000
REPEATS = 3


@dataclass(frozen=True)
class ProbeResult:
    """choice: fp32 or bf16-mixed; ratio = fp32_s / bf16_s (None when nothing was timed);
    fp32_s, bf16_s: the best forward+backward of the layer's projections, seconds."""

    choice: str
    ratio: float | None
    fp32_s: float | None
    bf16_s: float | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """summary.json's precision_probe (the choice is its `precision`)."""
        return {
            "ratio": self.ratio,
            "fp32_s": self.fp32_s,
            "bf16_s": self.bf16_s,
            "reason": self.reason,
        }


def bf16_kernels() -> bool:
    """Whether oneDNN has bf16 kernels on this CPU (AVX-512 or AMX; not AVX2 alone)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN
        return False


def layer_sizes(config: Any) -> tuple[int, int, int]:
    """(hidden, MLP width, k/v width) of a HF config's decoder layer (multimodal: its text
    part); hidden 0 when the config names none."""
    c = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden = int(getattr(c, "hidden_size", 0) or 0)
    heads = getattr(c, "num_attention_heads", None) or 1
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or hidden // heads
    ffn = getattr(c, "intermediate_size", None) or getattr(c, "n_inner", None) or 4 * hidden
    return hidden, int(ffn), int(kv_heads * head_dim)


def probe(hidden: int, ffn: int, kv: int | None = None) -> ProbeResult:
    """The layout auto trains in on this CPU for a model of these layer sizes (the rules
    above); `kv` defaults to `hidden` (no grouped-query attention)."""
    setting = os.environ.get(ENV, "").strip().lower()
    if setting not in ("", "on", "off"):
        raise UserError(f"{ENV}: expected 'on' or 'off', got {setting!r}")
    if setting == "off":
        return ProbeResult("fp32", None, None, None, f"{ENV}=off")
    if not bf16_kernels():
        return ProbeResult("fp32", None, None, None, "no bf16 kernels on this CPU")
    if hidden < SMALL_HIDDEN:
        return ProbeResult(
            "fp32", None, None, None, f"hidden {hidden} < {SMALL_HIDDEN}: bf16 does not pay"
        )
    sizes = timed_sizes(hidden, ffn, kv or hidden)
    fp32_s, bf16_s = time_layer(*sizes)
    ratio = fp32_s / bf16_s
    choice = "bf16-mixed" if ratio >= MIN_SPEEDUP else "fp32"
    reason = f"bf16 {ratio:.1f}x fp32 on this CPU at hidden {hidden}"
    if sizes[0] != hidden:
        reason += f" (timed scaled down to hidden {sizes[0]})"
    if choice == "fp32":
        reason += f", under the {MIN_SPEEDUP}x it takes"
    return ProbeResult(choice, ratio, fp32_s, bf16_s, reason)


def timed_sizes(hidden: int, ffn: int, kv: int) -> tuple[int, int, int]:
    """The layer sizes to time: the model's own, or over LAYER_PARAMS weights scaled down in
    proportion to about that many (multiples of 64)."""
    weights = hidden * (2 * hidden + 2 * kv + 3 * ffn)
    if weights <= LAYER_PARAMS:
        return hidden, ffn, kv
    scale = math.sqrt(LAYER_PARAMS / weights)
    h, f, k = (max(64, round(size * scale / 64) * 64) for size in (hidden, ffn, kv))
    return h, f, k


def time_layer(hidden: int, ffn: int, kv: int) -> tuple[float, float]:
    """(fp32, bf16-autocast) seconds of the best forward+backward of one layer's projections,
    each warmed up once, then REPEATS interleaved pairs, stopping after a pair in which bf16 is
    no faster: where bf16 is slow its repeats cost the most, and fp32 is the safe choice."""
    gen = torch.Generator().manual_seed(0)
    shapes = [(hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden)]
    shapes += [(ffn, hidden), (ffn, hidden), (hidden, ffn)]
    weights = [(torch.randn(o, i, generator=gen) * i**-0.5).requires_grad_() for o, i in shapes]
    x = torch.randn(PROBE_TOKENS, hidden, generator=gen).requires_grad_()

    def timed(bf16: bool) -> float:
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16, cache_enabled=False):
            loss = _layer(x, weights)
        loss.backward()
        return time.perf_counter() - start

    # On one thread: on a CPU shared with other work a team of threads stalls at every op (2
    # threads on 2 cores at load 4: each pass 40x slower, 5 s in all, a 0.9x ratio); one thread
    # only slows down (3.0-3.5x in 0.33 s there; 2 threads on the idle CPU measured 2.9-3.4x).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.enable_grad():
            timed(False)
            timed(True)
            fp32_s = bf16_s = math.inf
            for _ in range(REPEATS):
                fp32_s, bf16_s = min(fp32_s, timed(False)), min(bf16_s, timed(True))
                if bf16_s >= fp32_s:
                    break
    finally:
        torch.set_num_threads(threads)
    return fp32_s, bf16_s


def _layer(x: torch.Tensor, w: list[torch.Tensor]) -> torch.Tensor:
    """A decoder layer's projections without the attention itself: q and o, k and v (into the
    loss), the gated MLP; residuals in fp32, as the model's."""
    wq, wk, wv, wo, wg, wu, wd = w
    h = x + F.linear(F.linear(x, wq), wo)
    out = h + F.linear(F.silu(F.linear(h, wg)) * F.linear(h, wu), wd)
    return out.float().sum() + F.linear(x, wk).float().sum() + F.linear(x, wv).float().sum()
