"""Forward paths of the update: how a step's rows become forward/backward units and log-probs.

Both paths share one interface, chosen by `training.token_budget`:

    units = path.micro_batches(tokens, rows)       [(row indices, unit), ...]
    lp, ent = path.logprobs(model, unit, ...)      [R, width] completion log-probs (entropies)
    values, _ = path.values(model, unit)           [R, width] a value model's V(s_t)
    total, real = path.token_counts(unit)          tokens the forward runs over, of them real

- `PaddedForward` (token_budget = 0): slices of `micro_batch_size` rows of the padded
  [left-padded prompt | right-padded completion] layout; one forward with
  `logits_to_keep = C + 1` (rlvr.forward.logprobs).
- `PackedForward` (token_budget > 0, the default): rows packed without padding into
  micro-batches of at most `token_budget` tokens, block-diagonal attention, one prompt copy per
  shared-prompt unit; log-probs from the decoder's hidden states at completion positions only,
  projected to the vocabulary in chunks (rlvr.forward.packing). The attention of a micro-batch
  follows `training.packed_attention` and its layout (`attention_method`: under `auto` the dense
  mask up to 384 positions, and up to 4096 where the mask-free rows would attend over more
  pairs, as with long shared prompts; mask-free segments otherwise). Before its first unit it
  checks once that the model's logits are its output head applied to its hidden states, and
  that the mask-free attention reproduces the dense mask's on this model (`check`).
Both give the same log-probs within fp32 rounding (tests/training/test_packing.py).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from rlvr.config import Config
from rlvr.errors import ConfigError
from rlvr.forward.logprobs import (
    TokenBatch,
    check_output_head,
    completion_logprobs,
    completion_values,
)
from rlvr.forward.packing import (
    PackedRows,
    pack_rows,
    packed_completion_logprobs,
    packed_completion_values,
    packed_micro_batches,
)
from rlvr.forward.segment_attention import attention_method, flex_unavailable

CHECK_TOKENS = 64
"""`PackedForward.check` runs on at most this many prompt and this many completion tokens of a
row. Enough to compare the two attention paths on a shared prompt and separate segments, while
the check's dense mask ([W, W] for W ~ 3 rows) and full logits stay small: run on a whole row
of an 8,192-token completion, the check alone grew the process by 4 GiB (a 4-layer model) and
set the run's peak."""


def check_sample(prompt: torch.Tensor, completion: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The tokens the run-start check runs on: the prompt's last and the completion's first
    CHECK_TOKENS tokens (the tokens around the boundary the packed layout is built on)."""
    return prompt[-CHECK_TOKENS:], completion[:CHECK_TOKENS]


class PaddedForward:
    """Micro-batches of `micro_batch_size` padded rows."""

    def __init__(self, micro_batch_size: int, temperature: float) -> None:
        self.micro_batch_size, self.temperature = micro_batch_size, temperature

    def micro_batches(self, tokens: TokenBatch, rows: torch.Tensor) -> list[tuple[Any, Any]]:
        """[(row indices, TokenBatch)]: each unit is only ever handed back to this path."""
        mbs = self.micro_batch_size
        return [
            (rows[s : s + mbs], tokens.rows(rows[s : s + mbs])) for s in range(0, len(rows), mbs)
        ]

    def logprobs(
        self,
        model: Any,
        unit: TokenBatch,
        *,
        with_entropy: bool = False,
        entropy_grad: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return completion_logprobs(
            model,
            unit,
            temperature=self.temperature,
            with_entropy=with_entropy,
            entropy_grad=entropy_grad,
        )

    def values(self, model: Any, unit: TokenBatch) -> tuple[torch.Tensor, None]:
        """A value model's [R, width] V(s_t) (and no entropy: the pass's second output)."""
        return completion_values(model, unit), None

    def token_counts(self, unit: TokenBatch) -> tuple[int, int]:
        return unit.input_ids.numel(), int(unit.attention_mask.sum())

    def check(self, model: Any, tokens: TokenBatch) -> None:
        """The padded path runs the model's own forward: nothing to check."""


class PackedForward:
    """Packed, padding-free micro-batches of at most `token_budget` tokens."""

    def __init__(
        self,
        *,
        token_budget: int,
        micro_batch_size: int,
        pad_id: int,
        share_prompts: bool,
        pair_cost: float,
        chunk_size: int,
        temperature: float,
        attention: str = "auto",
    ) -> None:
        self.token_budget, self.max_rows, self.pad_id = token_budget, micro_batch_size, pad_id
        self.share_prompts, self.pair_cost = share_prompts, pair_cost
        self.chunk_size, self.temperature = chunk_size, temperature
        self.attention = attention  # training.packed_attention
        self.checked = False

    def micro_batches(self, tokens: TokenBatch, rows: torch.Tensor) -> list[tuple[Any, Any]]:
        """[(row indices, PackedRows)]: each unit is only ever handed back to this path."""
        prompts, completions = tokens.unpadded()
        packs = packed_micro_batches(
            prompts,
            completions,
            rows.tolist(),
            token_budget=self.token_budget,
            max_rows=self.max_rows,
            pad_id=self.pad_id,
            share_prompts=self.share_prompts,
            pair_cost=self.pair_cost,
        )
        return [(p.rows, p) for p in packs]

    def logprobs(
        self,
        model: Any,
        unit: PackedRows,
        *,
        with_entropy: bool = False,
        entropy_grad: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return packed_completion_logprobs(
            model,
            unit,
            temperature=self.temperature,
            chunk_size=self.chunk_size,
            with_entropy=with_entropy,
            entropy_grad=entropy_grad,
            attention=attention_method(self.attention, unit.segment_ids, unit.parent_ids),
        )

    def values(self, model: Any, unit: PackedRows) -> tuple[torch.Tensor, None]:
        """A value model's [R, width] V(s_t) (and no entropy: the pass's second output)."""
        attention = attention_method(self.attention, unit.segment_ids, unit.parent_ids)
        return packed_completion_values(model, unit, attention=attention), None

    def token_counts(self, unit: PackedRows) -> tuple[int, int]:
        return unit.num_tokens, unit.num_real_tokens

    def check(self, model: Any, tokens: TokenBatch) -> None:
        """Once per run: the packed path rebuilds the logits from the decoder's hidden states
        and the output head; refuse an architecture whose forward transforms them otherwise.
        `model` holds whole weights (under FSDP the rollout replica)."""
        if self.checked:
            return
        prompts, completions = tokens.unpadded()
        ids = torch.cat(check_sample(prompts[0], completions[0]))[None]
        was_training = model.training
        model.eval()  # no dropout: the two forwards must see the same network
        error = check_output_head(model, ids)
        reason = None if self.attention == "dense" else self._attention_mismatch(model, tokens)
        model.train(was_training)
        if error > 1e-3:
            raise ConfigError(
                "training.token_budget: this model's logits are not its output head applied to "
                f"its decoder's hidden states (relative difference {error:.2g}); set "
                "training.token_budget=0 to train it with padded micro-batches"
            )
        if reason is not None and self.attention != "auto":
            raise ConfigError(
                f"training.packed_attention={self.attention}: {reason}; use auto or dense"
            )
        if reason is not None:
            warnings.warn(
                f"training.packed_attention=auto: {reason}; the packed update keeps the dense "
                "attention mask at every width",
                stacklevel=2,
            )
            self.attention = "dense"
        self.checked = True

    def _attention_mismatch(self, model: Any, tokens: TokenBatch) -> str | None:
        """Why the mask-free attention cannot stand in for the dense mask on this model, or
        None: it must give the dense mask's log-probs on a small layout of the step's row with the
        longest completion (a shared-prompt unit of two completions, then the row alone, each
        cut to `check_sample`) and run where it will."""
        method = "segments" if self.attention == "auto" else self.attention
        if method == "flex":
            reason = flex_unavailable(next(model.parameters()).device)
            if reason is not None:
                return reason
        prompts, completions = tokens.unpadded()
        i = max(range(len(completions)), key=lambda r: completions[r].numel())
        p, c = check_sample(prompts[i], completions[i])
        if c.numel() == 0:
            return None
        packed = pack_rows([p, p, p], [c, c.flip(0), c], [[(0, 1), 2]], self.pad_id)
        options: dict[str, Any] = {"temperature": self.temperature, "chunk_size": self.chunk_size}
        with torch.no_grad():
            dense, _ = packed_completion_logprobs(model, packed, attention="dense", **options)
            try:
                other, _ = packed_completion_logprobs(model, packed, attention=method, **options)
            except NotImplementedError as error:  # an attention feature segments do not model
                return str(error)
        # fp32 agrees to ~1e-6; 16-bit weights round each path differently
        tolerance = 1e-3 if torch.finfo(next(model.parameters()).dtype).bits >= 32 else 5e-2
        difference = float((other - dense).abs().max())
        if not difference <= tolerance:  # NaN included
            return f"its log-probs differ from the dense mask's by {difference:.2g}"
        return None


def build_forward(cfg: Config, pad_id: int, pair_cost: float) -> PaddedForward | PackedForward:
    """The update's forward path: packed when training.token_budget > 0, else padded."""
    t = cfg.training
    temperature = cfg.rollout.temperature if cfg.rollout.temperature > 0 else 1.0
    if t.token_budget == 0:
        return PaddedForward(t.micro_batch_size, temperature)
    return PackedForward(
        token_budget=t.token_budget,
        micro_batch_size=t.micro_batch_size,
        pad_id=pad_id,
        share_prompts=t.share_prompts,
        pair_cost=pair_cost,
        chunk_size=t.logprob_chunk,
        temperature=temperature,
        attention=t.packed_attention,
    )
