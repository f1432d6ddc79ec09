"""Per-token log-probabilities (and entropies) of completions under a causal LM.

Rows are laid out as [left-padded prompt | right-padded completion], so every completion starts
at the same column P. One forward pass with `logits_to_keep = C + 1` then yields exactly the
logits that predict the C completion columns, without materialising logits for the prompts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlvr.algorithms.entropy import entropy_from_logits


@dataclass
class TokenBatch:
    input_ids: torch.Tensor  # [B, P + C]
    attention_mask: torch.Tensor  # [B, P + C]
    position_ids: torch.Tensor  # [B, P + C]
    completion_ids: torch.Tensor  # [B, C]
    completion_mask: torch.Tensor  # [B, C] float, 1 on real completion tokens

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def completion_width(self) -> int:
        return self.completion_ids.shape[1]

    def rows(self, index: slice | torch.Tensor) -> TokenBatch:
        """A sub-batch, trimmed so no column is padding in every row."""
        am = self.attention_mask[index]
        cm = self.completion_mask[index]
        width = self.completion_width
        keep_c = int(cm.sum(0).nonzero().max().item()) + 1 if cm.any() else 1
        prompt_cols = am[:, : am.shape[1] - width]
        first = int(prompt_cols.sum(0).nonzero().min().item()) if prompt_cols.any() else 0
        end = am.shape[1] - width + keep_c
        return TokenBatch(
            input_ids=self.input_ids[index][:, first:end],
            attention_mask=am[:, first:end],
            position_ids=self.position_ids[index][:, first:end],
            completion_ids=self.completion_ids[index][:, :keep_c],
            completion_mask=cm[:, :keep_c],
        )


def make_token_batch(
    prompt_ids: list[torch.Tensor], completion_ids: list[torch.Tensor], pad_id: int
) -> TokenBatch:
    """Pad prompts on the left and completions on the right into one [B, P + C] batch."""
    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"{len(prompt_ids)} prompts for {len(completion_ids)} completions")
    n = len(prompt_ids)
    width_p = max(int(p.numel()) for p in prompt_ids)
    width_c = max(1, max(int(c.numel()) for c in completion_ids))
    input_ids = torch.full((n, width_p + width_c), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width_p + width_c), dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        lp, lc = int(p.numel()), int(c.numel())
        input_ids[i, width_p - lp : width_p] = p
        input_ids[i, width_p : width_p + lc] = c
        attention[i, width_p - lp : width_p + lc] = 1
    position_ids = (attention.cumsum(1) - 1).clamp(min=0)
    return TokenBatch(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=position_ids,
        completion_ids=input_ids[:, width_p:].clone(),
        completion_mask=attention[:, width_p:].float(),
    )


def completion_logprobs(
    model: Any,
    batch: TokenBatch,
    *,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(y_t | x, y_<t) for every completion token, [B, C] in float32 (nats).

    Logits are divided by the sampling temperature, so the log-probs are those of the policy the
    completions were sampled from (top-k/top-p truncation is a sampling device, not the policy).
    Entropy, when asked for, is that of the same tempered distribution, per token (nats).
    """
    device = next(model.parameters()).device
    width = batch.completion_width
    out = model(
        input_ids=batch.input_ids.to(device),
        attention_mask=batch.attention_mask.to(device),
        position_ids=batch.position_ids.to(device),
        logits_to_keep=width + 1,
        use_cache=False,
    )
    logits = out.logits[:, :-1, :].float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    targets = batch.completion_ids.to(device)
    logprobs = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logits.logsumexp(-1)
    entropy = None
    if with_entropy:
        # As a metric the entropy needs no graph; as a bonus (entropy_grad) it does.
        entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
    return logprobs, entropy
