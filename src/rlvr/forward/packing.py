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

Shared prompts (`share_prompts`, the GRPO default): the G completions of one prompt are laid out
as one unit [prompt | c_1 | c_2 | ...]; every completion attends to the prompt's one copy and to
its own earlier tokens, with positions continuing from the prompt's end, so each completion sees
exactly the keys and positions it has on its own row, and the prompt's tokens are run once per
unit instead of once per row. Gradient reaching the prompt's positions from all G completions
accumulates in one place, which is the same sum the row-by-row layout computes. A unit holds as
many completions as fit in the sequence capacity; which capacity (the longest row and steps of
an eighth of it, up to a whole group) is chosen by a cost model: forward tokens plus the
attention pairs of the dense mask, weighted by `pair_cost`.

The 4D mask is the reference path; `packed_completion_logprobs(attention="segments" | "flex")`
runs the same attention without it (rlvr.forward.segment_attention: memory linear in the
tokens, chosen by width under `training.packed_attention=auto`).

The SFT trainer uses `pack` and `block_causal_mask`; the GRPO trainer `packed_micro_batches` and
`packed_completion_logprobs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.forward.logprobs import chunked_token_logprobs, final_hidden_states
from rlvr.forward.segment_attention import packed_attention_inputs


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
    _check_budget(token_budget, max_rows)
    if not lengths:
        return []
    longest = max(lengths)
    best = _pack_sequences(lengths, longest, token_budget, max_rows)
    wider = _pack_sequences(lengths, 2 * longest, token_budget, max_rows)
    if _forward_tokens(wider, lengths) < 0.95 * _forward_tokens(best, lengths):
        best = wider
    return best


def _check_budget(token_budget: int, max_rows: int) -> None:
    if token_budget < 1 or max_rows < 1:
        raise ValueError(f"token_budget and max_rows must be >= 1, got {token_budget}, {max_rows}")


def _forward_tokens(batches: list[list[list[int]]], lengths: Sequence[int]) -> int:
    return sum(len(mb) * max(sum(lengths[i] for i in seq) for seq in mb) for mb in batches)


def _pack_sequences(
    lengths: Sequence[int],
    capacity: int,
    token_budget: int,
    max_rows: int,
    rows_of: Sequence[int] | None = None,
) -> list[list[list[int]]]:
    """First-fit decreasing of items (`lengths` tokens, `rows_of` rows each, default 1) into
    sequences of `capacity`, then micro-batches of them within the token budget and row cap."""
    rows_of = rows_of if rows_of is not None else [1] * len(lengths)
    seqs, fill, seq_rows = _first_fit_decreasing(lengths, capacity, max_rows, rows_of)
    return [
        [sorted(seqs[b]) for b in batch]
        for batch, _ in _batch_sequences(fill, seq_rows, token_budget, max_rows)
    ]


def _first_fit_decreasing(
    lengths: Sequence[int], capacity: int, max_rows: int, rows_of: Sequence[int]
) -> tuple[list[list[int]], list[int], list[int]]:
    """Items into sequences of `capacity` tokens and `max_rows` rows, longest first (ties in
    input order), each into the first sequence with room: (items, tokens, rows) per sequence."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    seqs: list[list[int]] = []
    fill: list[int] = []
    seq_rows: list[int] = []
    room = capacity
    for i in order:
        length, rows = lengths[i], rows_of[i]
        for b, used in enumerate(fill):
            if used + length <= room and seq_rows[b] + rows <= max_rows:
                seqs[b].append(i)
                fill[b] = used + length
                seq_rows[b] += rows
                break
        else:
            seqs.append([i])
            fill.append(length)
            seq_rows.append(rows)
    return seqs, fill, seq_rows


def _batch_sequences(
    fill: Sequence[int], seq_rows: Sequence[int], token_budget: int, max_rows: int
) -> list[tuple[list[int], int]]:
    """Sequences, fullest first (ties in input order), into micro-batches of consecutive ones
    while (sequences · the first's tokens) <= token_budget and the rows <= max_rows: each
    micro-batch's sequence indices and its width (its first sequence's tokens)."""
    batches: list[tuple[list[int], int]] = []
    width = rows = 0
    for b in sorted(range(len(fill)), key=lambda b: -fill[b]):
        if batches and (len(batches[-1][0]) + 1) * width <= token_budget:
            if rows + seq_rows[b] <= max_rows:
                batches[-1][0].append(b)
                rows += seq_rows[b]
                continue
        width, rows = fill[b], seq_rows[b]
        batches.append(([b], width))
    return batches


Unit = tuple[int, ...]
"""Rows laid out as one prompt copy followed by each row's completion (identical prompts)."""


def pack_groups_to_budget(
    prompt_lengths: Sequence[int],
    completion_lengths: Sequence[int],
    groups: Sequence[Sequence[int]],
    token_budget: int,
    max_rows: int,
    pair_cost: float = 0.0,
) -> list[list[list[Unit]]]:
    """Micro-batches of packed sequences of shared-prompt units: [micro-batch][sequence][unit].

    `groups` lists row indices whose prompts are identical (a row may be a group alone). For a
    capacity C = L + j · L / 8 (L the longest row; j = 0 ... 120, capped at the longest whole
    group or the token budget if less, but at least L; eighths of L rather than multiples: on
    the embedded default's 60 steps they cut the padding from 5.1% to 3.4% of the positions and
    the cost by 2%, for ~2 ms more Python per update), every group is split first-fit decreasing
    into units [prompt | completions...] of at most C tokens and at most `max_rows` rows, the units
    are packed as in `pack_to_budget`, and the capacity whose layout costs least wins (ties: the
    smaller). Cost of a micro-batch [S, W] = S · W · (1 + pair_cost · W): every position of the
    tensor runs through the dense layers, and the dense [W, W] mask makes attention cost W
    query-key pairs per position, each `pair_cost` of a position's dense-layer work.
    """
    _check_budget(token_budget, max_rows)
    groups = [list(g) for g in groups if g]
    if not groups:
        return []
    # Per group, computed once for every capacity tried: its prompt length, its completions
    # longest first (ties in group order) and its length as one whole unit.
    prompts = [prompt_lengths[g[0]] for g in groups]
    orders = [sorted(g, key=lambda i: -completion_lengths[i]) for g in groups]
    wholes = [p + sum(completion_lengths[i] for i in g) for p, g in zip(prompts, groups)]
    longest = max(p + completion_lengths[o[0]] for p, o in zip(prompts, orders))
    ceiling = max(longest, min(max(wholes), token_budget))
    best: tuple[float, list[Unit], list[list[int]], list[tuple[list[int], int]]] | None = None
    capacities = sorted({min(longest + j * longest // 8, ceiling) for j in range(121)})
    for capacity in capacities:
        units: list[Unit] = []
        lengths: list[int] = []
        for g, p, order, whole in zip(groups, prompts, orders, wholes):
            if whole <= capacity and len(g) <= max_rows:  # the whole group fits one unit
                units.append(tuple(sorted(g)))
                lengths.append(whole)
            else:
                for unit, length in _split_sorted(order, p, completion_lengths, capacity, max_rows):
                    units.append(unit)
                    lengths.append(length)
        rows_of = [len(u) for u in units]
        seqs, fill, seq_rows = _first_fit_decreasing(lengths, capacity, max_rows, rows_of)
        batches = _batch_sequences(fill, seq_rows, token_budget, max_rows)
        cost = sum(len(batch) * width * (1.0 + pair_cost * width) for batch, width in batches)
        if best is None or cost < best[0]:
            best = (cost, units, seqs, batches)
    assert best is not None
    _, units, seqs, batches = best
    return [[[units[j] for j in sorted(seqs[b])] for b in batch] for batch, _ in batches]


def _split_sorted(
    order: Sequence[int],
    prompt_length: int,
    completion_lengths: Sequence[int],
    capacity: int,
    max_rows: int,
) -> list[tuple[Unit, int]]:
    """First-fit decreasing of one group's completions (`order`: longest first) into units of at
    most `capacity` tokens (prompt included) and `max_rows` rows; a completion too long for any
    unit goes alone. Returns (unit, its length with the prompt), units in sorted order."""
    units: list[list[int]] = []
    used: list[int] = []
    room = capacity - prompt_length
    for i in order:
        length = completion_lengths[i]
        for u, taken in enumerate(used):
            if taken + length <= room and len(units[u]) < max_rows:
                units[u].append(i)
                used[u] = taken + length
                break
        else:
            units.append([i])
            used.append(length)
    return sorted((tuple(sorted(u)), prompt_length + t) for u, t in zip(units, used))


def block_causal_mask(
    segment_ids: torch.Tensor, dtype: torch.dtype, parent_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """[R, 1, T, T] additive mask: 0 where query i may attend key j (j <= i, and j in i's own
    segment or in segment parent_ids[i]), else the dtype's most negative value (not -inf, so no
    row of the softmax is ever all -inf). Without parent_ids a token sees its own segment only.

    A 4D mask is passed through unchanged by transformers' eager and sdpa attention."""
    t = segment_ids.shape[-1]
    causal = torch.ones(t, t, dtype=torch.bool, device=segment_ids.device).tril()
    allowed = segment_ids[:, :, None] == segment_ids[:, None, :]
    if parent_ids is not None:
        allowed |= parent_ids[:, :, None] == segment_ids[:, None, :]
    allowed &= causal
    mask = torch.zeros(allowed.shape, dtype=dtype, device=segment_ids.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]


@dataclass
class PackedRows:
    """Rows (prompt + completion each) laid out back to back in S sequences of width W.

    rows:          [R] indices of the rows in the caller's numbering, in layout order
    input_ids, position_ids, segment_ids:  [S, W]; positions restart at 0 for every unit; a
                   sequence's padding tail is one more segment (it attends to nothing real)
    parent_ids:    [S, W] the segment each token may also attend to: the shared prompt's for
                   the completions of a multi-row unit, else the token's own segment
    predict_pos:   [K] flat positions (s · W + t) whose hidden state predicts a completion token
                   (a shared prompt's last position predicts the first token of each of its rows)
    target_ids:    [K] the completion tokens they predict (K = Σ_r c_r)
    target_row, target_col:  [K] where each token sits in the [R, width] completion layout
    width:         the longest completion among the rows (at least 1)
    num_real_tokens:  prompt copies + completions; the rest of S · W is padding
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
    parent_ids: torch.Tensor | None = None

    @property
    def num_tokens(self) -> int:
        return self.input_ids.numel()


def pack_rows(
    prompt_ids: Sequence[torch.Tensor],
    completion_ids: Sequence[torch.Tensor],
    sequences: Sequence[Sequence[int | Sequence[int]]],
    pad_id: int = 0,
) -> PackedRows:
    """Lay out `sequences` as one packed micro-batch, one sequence per row of the [S, W] tensors.

    Each entry of a sequence is a row index (prompt + completion) or a unit: a sequence of row
    indices with identical prompts, laid out as one copy of the prompt followed by each row's
    completion (positions continuing from the prompt's end).

    The layout is built as Python lists and turned into tensors once per field: per-row tensor
    writes cost ~10 small ops per completion (5 ms per update of the embedded default's 128
    rows, against ~1 ms this way)."""
    units = [[_as_unit(e) for e in seq] for seq in sequences]
    prompt_list = {u[0]: prompt_ids[u[0]].reshape(-1).tolist() for seq in units for u in seq}
    completion_list = {
        i: completion_ids[i].reshape(-1).tolist() for seq in units for u in seq for i in u
    }
    lengths = [
        sum(len(prompt_list[u[0]]) + sum(len(completion_list[i]) for i in u) for u in seq)
        for seq in units
    ]
    span = max(lengths)
    input_ids: list[int] = []
    position_ids: list[int] = []
    segment_ids: list[int] = []
    parent_ids: list[int] = []
    rows: list[int] = []
    predict: list[int] = []
    targets: list[int] = []
    t_row: list[int] = []
    t_col: list[int] = []
    width = 1
    for s, seq in enumerate(units):
        t = seg = 0
        for unit in seq:
            p = prompt_list[unit[0]]
            lp = len(p)
            if lp == 0:
                raise ValueError(
                    f"row {unit[0]} has an empty prompt: nothing predicts its first token"
                )
            for i in unit[1:]:
                if prompt_ids[i].reshape(-1).tolist() != p:
                    raise ValueError(f"rows {unit[0]} and {i} share a unit but not a prompt")
            input_ids += p
            position_ids += range(lp)
            segment_ids += [seg] * lp
            parent_ids += [seg] * lp
            prompt_seg, prompt_last = seg, s * span + t + lp - 1
            t += lp
            for i in unit:
                c = completion_list[i]
                lc = len(c)
                if len(unit) > 1:  # shared: each completion a segment that sees the prompt's
                    seg += 1
                input_ids += c
                position_ids += range(lp, lp + lc)
                segment_ids += [seg] * lc
                parent_ids += [prompt_seg] * lc
                # the hidden state at position t predicts the token at t + 1; the first token
                # of every completion is predicted by the prompt's last position
                if lc:
                    start = s * span + t
                    predict.append(prompt_last)
                    predict += range(start, start + lc - 1)
                targets += c
                t_row += [len(rows)] * lc
                t_col += range(lc)
                rows.append(i)
                t += lc
                width = max(width, lc)
            seg += 1
        tail = span - t  # the sequence's padding: one more segment, attending to nothing real
        input_ids += [pad_id] * tail
        position_ids += range(tail)
        segment_ids += [seg] * tail
        parent_ids += [seg] * tail
    shape = (len(units), span)

    def flat(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long)

    def grid(values: list[int]) -> torch.Tensor:
        return flat(values).view(shape)

    return PackedRows(
        rows=flat(rows),
        input_ids=grid(input_ids),
        position_ids=grid(position_ids),
        segment_ids=grid(segment_ids),
        predict_pos=flat(predict),
        target_ids=flat(targets),
        target_row=flat(t_row),
        target_col=flat(t_col),
        width=width,
        num_real_tokens=sum(lengths),
        parent_ids=grid(parent_ids),
    )


def _as_unit(entry: int | Sequence[int]) -> Unit:
    if isinstance(entry, (int, torch.Tensor)):
        return (int(entry),)
    unit = tuple(int(i) for i in entry)
    if not unit:
        raise ValueError("pack_rows: an empty unit")
    return unit


def prompt_groups(prompt_ids: Sequence[torch.Tensor], rows: Sequence[int]) -> list[list[int]]:
    """`rows` grouped by identical prompt tokens, groups in order of first appearance."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i in rows:
        groups.setdefault(tuple(prompt_ids[i].reshape(-1).tolist()), []).append(i)
    return list(groups.values())


def attention_pair_cost(model: Any) -> float:
    """Attention work per query-key pair relative to one position's dense-layer work, for the
    packing cost model: 4 · Hq · D FLOPs (scores and weighted values) against 2 · (parameters of
    a decoder layer). SmolLM2-135M: 2 · 576 / 3.54M = 3.3e-4; the embedded model: 1.0e-3.
    Falls back to 5e-4 for a model without `config.num_attention_heads` or decoder `.layers`."""
    try:
        config = model.config
        layer = model.get_decoder().layers[0]
        heads = int(config.num_attention_heads)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        dense = sum(p.numel() for p in layer.parameters())
        return 2.0 * heads * int(head_dim) / dense
    except (AttributeError, IndexError, TypeError, ZeroDivisionError):
        return 5e-4


def packed_micro_batches(
    prompt_ids: Sequence[torch.Tensor],
    completion_ids: Sequence[torch.Tensor],
    rows: Sequence[int],
    *,
    token_budget: int,
    max_rows: int,
    pad_id: int = 0,
    share_prompts: bool = False,
    pair_cost: float = 0.0,
) -> list[PackedRows]:
    """Split `rows` into packed micro-batches (see pack_to_budget), or with `share_prompts` into
    micro-batches of shared-prompt units (see pack_groups_to_budget)."""
    rows = [int(i) for i in rows]
    if share_prompts:
        batches = pack_groups_to_budget(
            [int(p.numel()) for p in prompt_ids],
            [int(c.numel()) for c in completion_ids],
            prompt_groups(prompt_ids, rows),
            token_budget,
            max_rows,
            pair_cost,
        )
        return [pack_rows(prompt_ids, completion_ids, mb, pad_id) for mb in batches]
    lengths = [prompt_ids[i].numel() + completion_ids[i].numel() for i in rows]
    return [
        pack_rows(prompt_ids, completion_ids, [[rows[j] for j in seq] for seq in mb], pad_id)
        for mb in pack_to_budget(lengths, token_budget, max_rows)
    ]


def packed_predicting_states(model: Any, packed: PackedRows, attention: str) -> torch.Tensor:
    """[K, H]: the decoder's last hidden states at the K positions that predict the packed rows'
    completion tokens (`predict_pos`, in the order of `target_row` / `target_col`); attention
    as in `packed_completion_logprobs`. The policy projects them to the vocabulary, a value model
    to one number each (`packed_completion_values`)."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    if attention == "dense":
        parents = None if packed.parent_ids is None else packed.parent_ids.to(device)
        inputs = {
            "attention_mask": block_causal_mask(packed.segment_ids.to(device), dtype, parents)
        }
    else:
        inputs = packed_attention_inputs(
            model, packed.segment_ids, packed.parent_ids, attention, device
        )
    hidden = final_hidden_states(
        model,
        input_ids=packed.input_ids.to(device),
        position_ids=packed.position_ids.to(device),
        **inputs,
    )
    return hidden.reshape(-1, hidden.shape[-1]).index_select(0, packed.predict_pos.to(device))


def packed_completion_values(
    model: Any, packed: PackedRows, *, attention: str = "dense"
) -> torch.Tensor:
    """V(s_t) of every completion token of the packed rows, [R, width] float32, from a value
    model (rlvr.models.value: `values(hidden)`): the states `packed_predicting_states` reads,
    one number each. Columns past a row's completion hold 0 (mask them)."""
    device = next(model.parameters()).device
    values = model.values(packed_predicting_states(model, packed, attention))
    where = (packed.target_row.to(device), packed.target_col.to(device))
    shape = (len(packed.rows), packed.width)
    return torch.zeros(shape, dtype=values.dtype, device=device).index_put(where, values)


def packed_completion_logprobs(
    model: Any,
    packed: PackedRows,
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    attention: str = "dense",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(y_t | x, y_<t) of every completion token of the packed rows, [R, width] float32.

    Row r of the result is packed.rows[r]; columns past a row's completion hold 0 (mask them).
    Only the K completion-predicting positions are projected to the vocabulary, in chunks of
    `chunk_size` (see chunked_token_logprobs). Entropy as in completion_logprobs. `attention`:
    "dense" (the [S, 1, W, W] mask of block_causal_mask) or a mask-free method of
    rlvr.forward.segment_attention ("segments", "flex"); the same result within fp32 rounding.
    """
    device = next(model.parameters()).device
    selected = packed_predicting_states(model, packed, attention)
    lp, ent = chunked_token_logprobs(
        model,
        selected,
        packed.target_ids.to(device),
        temperature=temperature,
        chunk_size=chunk_size,
        with_entropy=with_entropy,
        entropy_grad=entropy_grad,
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
