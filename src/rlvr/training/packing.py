"""Padding-free layout of variable-length rows: bin packing and block-diagonal causal attention.

A row is one example's tokens (prompt + completion, no padding). Rows are packed first-fit
decreasing into sequences as long as the longest row; a micro-batch is a few such sequences,
[S, W] with S · W <= the token budget. Inside a sequence

    position_ids  restart at 0 for every row (the same positions the row has on its own)
    a 4D additive attention mask is causal inside a row and blocks every other row

so each row's hidden states are those of the row run alone (up to float rounding), and only the
tail of a sequence that the packing could not fill is padding (a few percent on ragged batches,
against 30-70% for [left-padded prompt | right-padded completion]).

Why sequences no longer than the longest row (or twice that, see pack_to_budget): the dense
[W, W] mask makes attention cost W per token whatever the mask says, so packing everything into
one long sequence would trade padding for attention over masked-out blocks (measured slower on
near-uniform batches, see docs/training-speed.md). With W = the longest row, attention per token
never exceeds that of the padded layout, whose width is at least the longest row.

The SFT trainer uses `pack` and `block_causal_mask`; the GRPO trainer `packed_micro_batches` and
`packed_completion_logprobs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.training.logprobs import chunked_token_logprobs, final_hidden_states


def pack(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """First-fit decreasing: indices of examples grouped into rows of at most `capacity` tokens.

    Deterministic (ties keep input order); each row lists its examples in input order.
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    rows: list[list[int]] = []
    room: list[int] = []
    for i in order:
        if lengths[i] > capacity:
            raise ValueError(f"example of {lengths[i]} tokens exceeds pack length {capacity}")
        for r, free in enumerate(room):
            if lengths[i] <= free:
                rows[r].append(i)
                room[r] -= lengths[i]
                break
        else:
            rows.append([i])
            room.append(capacity - lengths[i])
    return [sorted(r) for r in rows]


def pack_to_budget(
    lengths: Sequence[int], token_budget: int, max_rows: int
) -> list[list[list[int]]]:
    """Micro-batches of packed sequences: [micro-batch][sequence][row index].

    Rows are packed first-fit decreasing into sequences of capacity L, the longest row (so
    attention never spans more than the padded layout's rows would), then consecutive sequences
    (fullest first) form a micro-batch while (sequences · its longest sequence) <= token_budget;
    a micro-batch holds at least one sequence and at most `max_rows` rows. When one row is much
    longer than the rest, sequences of capacity L fill badly (two 41-token rows do not fit in
    72); capacity 2L is then used if it cuts the forward tokens (rows + padding) by more than 5%.
    Deterministic; each sequence lists its indices in input order.
    """
    if token_budget < 1 or max_rows < 1:
        raise ValueError(f"token_budget and max_rows must be >= 1, got {token_budget}, {max_rows}")
    if not lengths:
        return []
    longest = max(lengths)
    best = _pack_sequences(lengths, longest, token_budget, max_rows)
    wider = _pack_sequences(lengths, 2 * longest, token_budget, max_rows)
    if _forward_tokens(wider, lengths) < 0.95 * _forward_tokens(best, lengths):
        best = wider
    return best


def _forward_tokens(batches: list[list[list[int]]], lengths: Sequence[int]) -> int:
    return sum(len(mb) * max(sum(lengths[i] for i in seq) for seq in mb) for mb in batches)


def _pack_sequences(
    lengths: Sequence[int], capacity: int, token_budget: int, max_rows: int
) -> list[list[list[int]]]:
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    seqs: list[list[int]] = []
    room: list[int] = []
    for i in order:
        for b, free in enumerate(room):
            if lengths[i] <= free and len(seqs[b]) < max_rows:
                seqs[b].append(i)
                room[b] -= lengths[i]
                break
        else:
            seqs.append([i])
            room.append(capacity - lengths[i])
    fill = [capacity - r for r in room]
    by_fill = sorted(range(len(seqs)), key=lambda b: -fill[b])
    batches: list[list[list[int]]] = []
    width = rows = 0
    for b in by_fill:
        fits = batches and (len(batches[-1]) + 1) * width <= token_budget
        if fits and rows + len(seqs[b]) <= max_rows:
            batches[-1].append(sorted(seqs[b]))
            rows += len(seqs[b])
            continue
        batches.append([sorted(seqs[b])])
        width, rows = fill[b], len(seqs[b])
    return batches


def block_causal_mask(segment_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[R, 1, T, T] additive mask: 0 where query i may attend key j (same segment, j <= i), else
    the dtype's most negative value (not -inf, so no row of the softmax is ever all -inf).

    A 4D mask is passed through unchanged by transformers' eager and sdpa attention."""
    t = segment_ids.shape[-1]
    causal = torch.ones(t, t, dtype=torch.bool, device=segment_ids.device).tril()
    allowed = (segment_ids[:, :, None] == segment_ids[:, None, :]) & causal
    mask = torch.zeros(allowed.shape, dtype=dtype, device=segment_ids.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


@dataclass
class PackedRows:
    """Rows (prompt + completion each) laid out back to back in S sequences of width W.

    rows:          [R] indices of the rows in the caller's numbering, in layout order
    input_ids, position_ids, segment_ids:  [S, W]; positions restart at 0 for every row; a
                   sequence's padding tail is one more segment (it attends to nothing real)
    predict_pos:   [K] flat positions (s · W + t) whose hidden state predicts a completion token
    target_ids:    [K] the completion tokens they predict (K = Σ_r c_r)
    target_row, target_col:  [K] where each token sits in the [R, width] completion layout
    width:         the longest completion among the rows (at least 1)
    num_real_tokens:  Σ_r (p_r + c_r); the rest of S · W is padding
    """

    rows: torch.Tensor
    input_ids: torch.Tensor
    position_ids: torch.Tensor
    segment_ids: torch.Tensor
    predict_pos: torch.Tensor
    target_ids: torch.Tensor
    target_row: torch.Tensor
    target_col: torch.Tensor
    width: int
    num_real_tokens: int

    @property
    def num_tokens(self) -> int:
        return self.input_ids.numel()


def pack_rows(
    prompt_ids: Sequence[torch.Tensor],
    completion_ids: Sequence[torch.Tensor],
    sequences: Sequence[Sequence[int]],
    pad_id: int = 0,
) -> PackedRows:
    """Lay out `sequences` (each a list of indices into prompt_ids / completion_ids) as one
    packed micro-batch, one sequence per row of the [S, W] tensors."""
    lengths = [sum(prompt_ids[i].numel() + completion_ids[i].numel() for i in s) for s in sequences]
    shape = (len(sequences), max(lengths))
    input_ids = torch.full(shape, pad_id, dtype=torch.long)
    position_ids = torch.zeros(shape, dtype=torch.long)
    segment_ids = torch.zeros(shape, dtype=torch.long)
    rows, predict, targets, t_row, t_col = [], [], [], [], []
    width = 1
    for s, seq in enumerate(sequences):
        t = 0
        for seg, i in enumerate(seq):
            p, c = prompt_ids[i].reshape(-1).long(), completion_ids[i].reshape(-1).long()
            lp, lc = p.numel(), c.numel()
            if lp == 0:
                raise ValueError(f"row {i} has an empty prompt: nothing predicts its first token")
            input_ids[s, t : t + lp + lc] = torch.cat([p, c])
            position_ids[s, t : t + lp + lc] = torch.arange(lp + lc)
            segment_ids[s, t : t + lp + lc] = seg
            # the hidden state at position t predicts the token at t + 1
            start = s * shape[1] + t + lp - 1
            predict.append(torch.arange(start, start + lc))
            targets.append(c)
            t_row.append(torch.full((lc,), len(rows), dtype=torch.long))
            t_col.append(torch.arange(lc))
            rows.append(i)
            t += lp + lc
            width = max(width, lc)
        segment_ids[s, t:] = len(seq)
        position_ids[s, t:] = torch.arange(shape[1] - t)
    return PackedRows(
        rows=torch.tensor(rows, dtype=torch.long),
        input_ids=input_ids,
        position_ids=position_ids,
        segment_ids=segment_ids,
        predict_pos=torch.cat(predict),
        target_ids=torch.cat(targets),
        target_row=torch.cat(t_row),
        target_col=torch.cat(t_col),
        width=width,
        num_real_tokens=sum(lengths),
    )


def packed_micro_batches(
    prompt_ids: Sequence[torch.Tensor],
    completion_ids: Sequence[torch.Tensor],
    rows: Sequence[int],
    *,
    token_budget: int,
    max_rows: int,
    pad_id: int = 0,
) -> list[PackedRows]:
    """Split `rows` into packed micro-batches (see pack_to_budget)."""
    rows = [int(i) for i in rows]
    lengths = [prompt_ids[i].numel() + completion_ids[i].numel() for i in rows]
    return [
        pack_rows(prompt_ids, completion_ids, [[rows[j] for j in seq] for seq in mb], pad_id)
        for mb in pack_to_budget(lengths, token_budget, max_rows)
    ]


def packed_completion_logprobs(
    model: Any,
    packed: PackedRows,
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(y_t | x, y_<t) of every completion token of the packed rows, [R, width] float32.

    Row r of the result is packed.rows[r]; columns past a row's completion hold 0 (mask them).
    Only the K completion-predicting positions are projected to the vocabulary, in chunks of
    `chunk_size` (see chunked_token_logprobs). Entropy as in completion_logprobs.
    """
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    hidden = final_hidden_states(
        model,
        input_ids=packed.input_ids.to(device),
        attention_mask=block_causal_mask(packed.segment_ids.to(device), dtype),
        position_ids=packed.position_ids.to(device),
    )
    selected = hidden.reshape(-1, hidden.shape[-1]).index_select(0, packed.predict_pos.to(device))
    lp, ent = chunked_token_logprobs(
        model,
        selected,
        packed.target_ids.to(device),
        temperature=temperature,
        chunk_size=chunk_size,
        with_entropy=with_entropy,
    )
    shape = (len(packed.rows), packed.width)
    where = (packed.target_row.to(device), packed.target_col.to(device))
    logprobs = torch.zeros(shape, dtype=lp.dtype, device=device).index_put(where, lp)
    entropy = None
    if ent is not None:
        # As a metric the entropy needs no graph; as a bonus (entropy_grad) it does.
        ent = ent if entropy_grad else ent.detach()
        entropy = torch.zeros(shape, dtype=ent.dtype, device=device).index_put(where, ent)
    return logprobs, entropy
