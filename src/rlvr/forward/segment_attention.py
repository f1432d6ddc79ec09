"""Attention of packed rows without a dense mask: each row attends over its own tokens only.

The packed update lays rows out back to back (rlvr.forward.packing): a token attends causally
within its own segment and, for a completion of a shared-prompt unit, to the whole prompt (its
parent segment, which precedes it). The reference path expresses this as a dense [S, 1, W, W]
additive mask (`block_causal_mask`): W² floats per sequence (1 GiB at W = 16k) and attention
over every pair, masked or not. Two paths here compute the same attention from the segment
layout instead:

- **segments** (any device, gradients included): every segment becomes one attention row, the
  tokens it may see in order: [parent | own] for a completion of a shared unit (exactly the row
  run alone: prompt then completion), [own] for a standalone row. The rows' queries, keys and
  values are gathered from the packed layout into batches of similar length, right-padded, and
  run through `scaled_dot_product_attention(is_causal=True)` (torch's flash kernels on CPU and
  CUDA: no [L, L] tensor is kept, memory linear in the tokens); each token's output is gathered
  back from the row that owns it (a shared prompt's from its first completion's row). Right
  padding needs no mask: a real query never sees a later key. A shared prompt's attention is run
  once per completion (the dense layers still run it once per unit).
- **flex** (`torch.nn.attention.flex_attention`, compiled; CUDA): a `BlockMask` whose mask_mod
  reads the segment and parent ids. In torch 2.13 FlexAttention has no backward on the CPU; there
  it runs eagerly, without gradients, as a check of the block mask (it materialises the scores).

Both reach the model through transformers' `AttentionInterface`: `use_packed_attention(model)`
registers a dispatcher under a new name (`rlvr_packed_<base>`) and points the model's config at
it. The dispatcher runs the model's own implementation (`<base>`, e.g. sdpa) unless the call
carries an `rlvr_segments` or `rlvr_block_mask` keyword, so generation, the padded path and
everything else are unchanged, and a layer recomputed under gradient checkpointing (the
keywords are saved with its inputs) takes the same path as its first forward. The name is not
serialised with the config.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

PREFIX = "rlvr_packed_"

DENSE_MAX_WIDTH = 384
"""`training.packed_attention=auto`: micro-batches up to this width keep the dense mask. Measured
on the 2-core CPU (benchmarks/long_sequences.py --only short; docs/training-speed.md, "Long
sequences"): segments / dense time 1.09-1.16 at the default run's widths (65-90), 1.11-1.25 at
104-136, 0.95-1.00 at 207-373, 0.88-0.95 at 369-501 (SmolLM2's layer shape: 1.05 at 249-335,
0.84 at 297-659); the mask is a few MiB at these widths."""

DENSE_SHARED_MAX_WIDTH = 4096
"""`training.packed_attention=auto`, widths above DENSE_MAX_WIDTH: the dense mask is kept up to
this width when the segment rows would attend over more (query, key) pairs than the mask spans,
as when completions share a long prompt and each row runs it again. Measured on the 2-core CPU
with SmolLM2's layer shape (benchmarks/long_sequences.py --only short --shape smollm2 --prompt
250; docs/training-speed.md): segments / dense time 1.06-1.49 where the rows' pairs are 1.3-3.7x
the mask's, 0.73-0.97 where they are 0.58-1.01x. Above this width the mask (64 MiB a sequence
in fp32 at 4096) is not kept whatever the pairs: memory stays linear in the tokens."""

BUCKET_RATIO = 0.8
"""A row joins a batch while its length is at least this fraction of the batch's longest row:
at most 25% of a batch's positions are padding."""


@dataclass
class SegmentRows:
    """The attention rows of one packed micro-batch [S, W] (flat positions p = s · W + t).

    index:    [N] the flat positions of every row's tokens in attention order, batch after
              batch, each batch [n, L] row-major with its rows right-padded to L by repeating
              their last position
    shapes:   (n, L) of each batch
    inverse:  [S · W] where each position's output is in the rows' outputs (every position is
              written by exactly one row)
    """

    index: torch.Tensor
    shapes: list[tuple[int, int]]
    inverse: torch.Tensor

    def to(self, device: torch.device) -> SegmentRows:
        return SegmentRows(self.index.to(device), self.shapes, self.inverse.to(device))


def segment_rows(segment_ids: torch.Tensor, parent_ids: torch.Tensor | None) -> SegmentRows:
    """The attention rows of a packed layout, from its [S, W] segment and parent ids.

    Segments are contiguous runs of a sequence; a run whose parent is another segment is a
    completion of a shared unit, and its parent run (the prompt) precedes it. Row of a
    completion: [parent | own], which writes its own outputs and, for the parent's first child,
    the parent's; row of any other run without children (a standalone row, a padding tail):
    [own]. Rows are sorted longest first and cut into batches whose rows are all at least
    BUCKET_RATIO of the batch's longest."""
    s, w = segment_ids.shape
    seg = segment_ids.reshape(-1).tolist()
    par = (parent_ids if parent_ids is not None else segment_ids).reshape(-1).tolist()
    starts: list[int] = []
    lengths: list[int] = []
    parents: list[int] = []  # the parent run, or -1
    run_of: dict[tuple[int, int], int] = {}  # (sequence, segment) -> run
    for p in range(s * w):
        if p % w == 0 or seg[p] != seg[p - 1]:
            run_of[(p // w, seg[p])] = len(starts)
            starts.append(p)
            lengths.append(0)
            parents.append(-1 if par[p] == seg[p] else run_of[(p // w, par[p])])
        lengths[-1] += 1

    def span(run: int) -> list[int]:
        return list(range(starts[run], starts[run] + lengths[run]))

    has_child = [False] * len(starts)
    rows: list[tuple[list[int], int]] = []  # (positions, first position whose output it writes)
    for run, parent in enumerate(parents):
        if parent >= 0:
            first = not has_child[parent]
            has_child[parent] = True
            rows.append((span(parent) + span(run), 0 if first else lengths[parent]))
    rows += [(span(r), 0) for r, p in enumerate(parents) if p < 0 and not has_child[r]]
    rows.sort(key=lambda row: -len(row[0]))
    index: list[int] = []
    shapes: list[tuple[int, int]] = []
    inverse = [0] * (s * w)
    i = 0
    while i < len(rows):
        longest = len(rows[i][0])
        j = i
        while j < len(rows) and len(rows[j][0]) >= BUCKET_RATIO * longest:
            j += 1
        for positions, written in rows[i:j]:
            for k in range(written, len(positions)):
                inverse[positions[k]] = len(index) + k
            index += positions + [positions[-1]] * (longest - len(positions))
        shapes.append((j - i, longest))
        i = j
    return SegmentRows(
        torch.tensor(index, dtype=torch.long), shapes, torch.tensor(inverse, dtype=torch.long)
    )


def segment_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    rows: SegmentRows,
    *,
    scaling: float | None = None,
    dropout: float = 0.0,
) -> torch.Tensor:
    """Attention of the packed layout: query [S, Hq, W, D], key/value [S, Hkv, W, D] ->
    [S, W, Hq, D] (transformers' layout of an attention output).

    One gather per tensor for all batches (its backward is one zero fill and one index_add of
    the layout's size, not one per batch), one causal SDPA per batch, one gather back."""
    s, hq, w, d = query.shape
    hkv = key.shape[1]

    def gather(x: torch.Tensor, heads: int) -> torch.Tensor:
        # [S, H, W, D] -> [S·W, H, D]: a view when the projection's [S, W, H, D] layout is kept
        return x.transpose(1, 2).reshape(s * w, heads, d).index_select(0, rows.index)

    sizes = [n * length for n, length in rows.shapes]
    # split, not slices: a slice's backward fills a zero tensor of the whole gather per batch
    batches = zip(*(gather(x, h).split(sizes) for x, h in ((query, hq), (key, hkv), (value, hkv))))
    outputs = []
    for (n, length), qkv in zip(rows.shapes, batches):
        q, k, v = (x.view(n, length, -1, d).transpose(1, 2) for x in qkv)
        out = F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout, is_causal=True, scale=scaling, enable_gqa=hq != hkv
        )
        outputs.append(out.transpose(1, 2).reshape(n * length, hq, d))
    return torch.cat(outputs).index_select(0, rows.inverse).view(s, w, hq, d)


def packed_block_mask(segment_ids: torch.Tensor, parent_ids: torch.Tensor | None) -> Any:
    """FlexAttention `BlockMask` of the packed layout: query i sees key j <= i of its own segment
    or of its parent segment (the dense mask's rule, block-sparse)."""
    from torch.nn.attention import flex_attention

    s, w = segment_ids.shape
    # The ids padded to whole blocks (segment -1, parent -2: padding sees nothing real), so a
    # kernel that evaluates mask_mod on a partial block's padded indices reads inside them.
    pad = -w % getattr(flex_attention, "_DEFAULT_SPARSE_BLOCK_SIZE", 128)
    seg = F.pad(segment_ids, (0, pad), value=-1)
    par = F.pad(segment_ids if parent_ids is None else parent_ids, (0, pad), value=-2)

    def mask_mod(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return ((seg[b, q] == seg[b, kv]) | (par[b, q] == seg[b, kv])) & (kv <= q)

    return flex_attention.create_block_mask(
        mask_mod, B=s, H=None, Q_LEN=w, KV_LEN=w, device=seg.device
    )


def flex_unavailable(device: torch.device, grad: bool = True) -> str | None:
    """Why FlexAttention cannot run the packed update here, or None."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: F401
    except ImportError as error:
        return f"torch.nn.attention.flex_attention is unavailable ({error})"
    if grad and device.type != "cuda":
        return f"FlexAttention has no backward on {device.type} in torch {torch.__version__}"
    return None


@functools.cache
def _compiled_flex() -> Any:
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention)


def _flex(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    block_mask: Any,
    scaling: float | None,
) -> torch.Tensor:
    """FlexAttention, compiled on CUDA (fused, block-sparse). Elsewhere eager: a reference that
    materialises the scores (torch 2.13's compiled CPU kernel gave wrong outputs for sequences
    shorter than one block, and has no backward)."""
    from torch.nn.attention.flex_attention import flex_attention

    run = _compiled_flex() if query.is_cuda else flex_attention
    out = run(
        query,
        key,
        value,
        block_mask=block_mask,
        scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1],
    )
    return out.transpose(1, 2).contiguous()


def _own_attention(base: str) -> Any:
    """The attention function the model would run: `base` from transformers' registry, or for
    eager the `eager_attention_forward` of the calling module's own modelling file
    (architectures differ: softcapping, sinks), else Llama's."""
    from transformers import AttentionInterface
    from transformers.models.llama.modeling_llama import eager_attention_forward

    if base != "eager":
        return lambda module: AttentionInterface._global_mapping[base]
    return lambda module: getattr(
        sys.modules[type(module).__module__], "eager_attention_forward", eager_attention_forward
    )


def _dispatcher(base: str) -> Any:
    own = _own_attention(base)

    def attention(
        module: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: Any,
        *,
        rlvr_segments: SegmentRows | None = None,
        rlvr_block_mask: Any = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        if rlvr_segments is None and rlvr_block_mask is None:
            return own(module)(module, query, key, value, attention_mask, **kwargs)
        for name in ("sliding_window", "softcap", "s_aux", "position_bias"):
            if kwargs.get(name) is not None:
                raise NotImplementedError(
                    f"packed attention without a mask: {name} is not supported"
                )
        if rlvr_block_mask is not None or rlvr_segments is None:  # one of the two is set
            return _flex(query, key, value, rlvr_block_mask, kwargs.get("scaling")), None
        out = segment_attention(
            query,
            key,
            value,
            rlvr_segments,
            scaling=kwargs.get("scaling"),
            dropout=kwargs.get("dropout") or 0.0,
        )
        return out, None

    return attention


def use_packed_attention(model: Any) -> None:
    """Point `model`'s attention at the dispatcher over its current implementation (idempotent).
    Without the packed keywords every call runs the original implementation unchanged."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    config = model.config
    base = config._attn_implementation or "eager"
    if base.startswith(PREFIX):
        return
    name = PREFIX + base
    if name not in AttentionInterface._global_mapping:
        AttentionInterface.register(name, _dispatcher(base))
    if base in ALL_MASK_ATTENTION_FUNCTIONS and name not in AttentionMaskInterface._global_mapping:
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[base])
    config._attn_implementation = name


def segment_pairs(segment_ids: torch.Tensor, parent_ids: torch.Tensor | None) -> int:
    """The (query, key) pairs the segment rows of a packed [S, W] layout attend over, L² a row
    of length L: [parent | own] for a completion of a shared unit (the prompt once per
    completion), [own] for any other run without children. The dense mask spans S · W²."""
    total = 0
    parents = segment_ids if parent_ids is None else parent_ids
    for seg, par in zip(segment_ids.tolist(), parents.tolist()):
        lengths: dict[int, int] = {}
        parent_of: dict[int, int] = {}
        for sid, pid in zip(seg, par):
            lengths[sid] = lengths.get(sid, 0) + 1
            if pid != sid:
                parent_of[sid] = pid
        with_children = set(parent_of.values())
        for sid, n in lengths.items():
            if sid in parent_of:
                total += (lengths[parent_of[sid]] + n) ** 2
            elif sid not in with_children:
                total += n * n
    return total


def attention_method(
    choice: str, segment_ids: torch.Tensor, parent_ids: torch.Tensor | None = None
) -> str:
    """The attention of a packed micro-batch ([S, W] segment and parent ids) under
    `training.packed_attention`. `auto`: the dense mask up to DENSE_MAX_WIDTH (faster there on
    the CPU); segments above DENSE_SHARED_MAX_WIDTH; in between, segments unless its rows attend
    over more pairs than the mask spans (long shared prompts). Any other choice as given."""
    if choice != "auto":
        return choice
    s, w = segment_ids.shape
    if w <= DENSE_MAX_WIDTH or w > DENSE_SHARED_MAX_WIDTH:  # no need to count the pairs
        return auto_attention(w, s, 0)
    return auto_attention(w, s, segment_pairs(segment_ids, parent_ids))


def auto_attention(width: int, sequences: int, pairs: int) -> str:
    """`training.packed_attention=auto` for `sequences` packed sequences of width `width` whose
    segment rows attend over `pairs` (query, key) pairs (segment_pairs): "dense" or "segments".
    Also what `rlvr estimate` plans (rlvr.estimate.memory)."""
    if width <= DENSE_MAX_WIDTH:
        return "dense"
    if width <= DENSE_SHARED_MAX_WIDTH and pairs > sequences * width * width:
        return "dense"
    return "segments"


def packed_attention_inputs(
    model: Any,
    segment_ids: torch.Tensor,
    parent_ids: torch.Tensor | None,
    method: str,
    device: torch.device,
) -> dict[str, Any]:
    """The decoder keywords of a packed forward by `method` ("segments" or "flex"), from the
    layout's [S, W] ids: the layout for the dispatcher, and as `attention_mask` an empty 4D
    tensor, which transformers passes through as a ready mask (so it builds no mask of its
    own) and which an attention other than the dispatcher would reject for its shape."""
    use_packed_attention(model)
    empty = torch.zeros((segment_ids.shape[0], 1, 0, 0), dtype=torch.bool, device=device)
    if method == "flex":
        parents = None if parent_ids is None else parent_ids.to(device)
        return {
            "attention_mask": empty,
            "rlvr_block_mask": packed_block_mask(segment_ids.to(device), parents),
        }
    if method == "segments":
        return {
            "attention_mask": empty,
            "rlvr_segments": segment_rows(segment_ids, parent_ids).to(device),
        }
    raise ValueError(f"packed attention: unknown method {method!r}")
