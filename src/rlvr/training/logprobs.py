"""Per-token log-probabilities (and entropies) of completions under a causal LM.

Rows are laid out as [left-padded prompt | right-padded completion], so every completion starts
at the same column P. One forward pass with `logits_to_keep = C + 1` then yields exactly the
logits that predict the C completion columns, without materialising logits for the prompts.

The padding-free path (packing.py) instead takes the decoder's final hidden states, selects the K
positions that predict completion tokens and projects them to the vocabulary in chunks
(`chunked_token_logprobs`), so at most one chunk's [chunk, V] logits is alive at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

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

    def unpadded(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Each row's prompt and completion tokens without padding (the packed layout's input)."""
        width_p = self.input_ids.shape[1] - self.completion_width
        real = self.attention_mask.bool()
        prompts = [ids[:width_p][on[:width_p]] for ids, on in zip(self.input_ids, real)]
        completions = [ids[width_p:][on[width_p:]] for ids, on in zip(self.input_ids, real)]
        return prompts, completions


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


def final_hidden_states(model: Any, **inputs: torch.Tensor) -> torch.Tensor:
    """The decoder's last hidden states [B, T, H] (after the final norm), i.e. what the output
    head of a causal LM multiplies; works through peft wrappers (adapters stay applied)."""
    out = model.get_decoder()(**inputs, use_cache=False)
    return out.last_hidden_state


def output_logits(model: Any, hidden: torch.Tensor) -> torch.Tensor:
    """The LM head applied to hidden states [..., H] -> float32 logits [..., V].

    Reproduces the head of the model's own forward: the output embedding, then Cohere's
    `logit_scale` (z · s), Granite's `logits_scaling` (z / s) and Gemma's
    `final_logit_softcapping` (cap · tanh(z / cap)) when configured. `check_output_head` verifies
    the result against the model's own forward for architectures with other head transforms.
    """
    logits = model.get_output_embeddings()(hidden)
    config = getattr(model, "config", None)
    scale = getattr(config, "logit_scale", None)
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        logits = logits * scale
    divisor = getattr(config, "logits_scaling", None)
    if isinstance(divisor, (int, float)) and not isinstance(divisor, bool) and divisor:
        logits = logits / divisor
    cap = getattr(config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits.float()


@torch.no_grad()
def check_output_head(model: Any, input_ids: torch.Tensor) -> float:
    """Largest |logit| difference between output_logits(final_hidden_states) and the model's own
    forward on `input_ids` [1, T], relative to max(1, largest |logit|); ~0 (float rounding) when
    the decoder + head split reproduces the model."""
    device = next(model.parameters()).device
    input_ids = input_ids.to(device)
    expected = model(input_ids=input_ids, use_cache=False).logits.float()
    got = output_logits(model, final_hidden_states(model, input_ids=input_ids))
    return float((got - expected).abs().max() / expected.abs().max().clamp_min(1.0))


def _chunk_logprobs(
    model: Any, hidden: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, ...]:
    logits = output_logits(model, hidden)
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    log_p = torch.log_softmax(logits, dim=-1)
    logprobs = log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    if not with_entropy:
        return (logprobs,)
    return logprobs, -(log_p.exp() * log_p).sum(-1)  # H = -Σ_v p_v log p_v, nats


def chunked_token_logprobs(
    model: Any,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(target_k) = z_k[target_k]/T - logsumexp(z_k/T) for hidden states [K, H], targets [K].

    The K positions are processed `chunk_size` at a time. When gradients are on, each chunk runs
    under torch.utils.checkpoint: its [chunk, V] logits are freed after the forward and recomputed
    in backward, so at most one chunk's logits (and softmax) are alive at a time, forward or
    backward, instead of [K, V]. Entropy (nats, of the same tempered distribution) comes from the
    same chunk. Returns float32 ([K], [K] or None).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    use_checkpoint = torch.is_grad_enabled() and hidden.requires_grad
    logprobs, entropies = [], []
    for start in range(0, hidden.shape[0], chunk_size):
        args = (model, hidden[start : start + chunk_size], targets[start : start + chunk_size])
        if use_checkpoint:
            # the head and softmax draw no random numbers: no RNG state to stash per chunk
            out = checkpoint(
                _chunk_logprobs,
                *args,
                temperature,
                with_entropy,
                use_reentrant=False,
                preserve_rng_state=False,
            )
        else:
            out = _chunk_logprobs(*args, temperature, with_entropy)
        logprobs.append(out[0])
        if with_entropy:
            entropies.append(out[1])
    if not logprobs:  # no completion tokens at all
        empty = hidden[:0, 0].float()  # keeps the graph, so backward still runs
        return empty, (empty if with_entropy else None)
    return torch.cat(logprobs), (torch.cat(entropies) if with_entropy else None)
