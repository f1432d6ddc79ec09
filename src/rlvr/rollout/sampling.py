"""Next-token sampling as pure tensor functions: temperature, top-k, top-p, greedy.

Every engine samples through `sample_next`, so the log-probabilities stored in a rollout are
always those of the distribution the token was actually drawn from.
"""

from __future__ import annotations

import torch

from rlvr.rollout.types import SamplingParams


def check_sampling_params(params: SamplingParams) -> None:
    """Raise a one-line ValueError naming the first SamplingParams field out of range."""
    if params.temperature < 0:
        raise ValueError(f"SamplingParams.temperature must be >= 0, got {params.temperature}")
    if params.top_k < 0:
        raise ValueError(f"SamplingParams.top_k must be >= 0 (0 = off), got {params.top_k}")
    if not 0.0 < params.top_p <= 1.0:
        raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {params.top_p}")
    if params.max_new_tokens < 1:
        raise ValueError(f"SamplingParams.max_new_tokens must be >= 1, got {params.max_new_tokens}")
    if any(not s for s in params.stop):
        raise ValueError(f"SamplingParams.stop must not contain empty strings, got {params.stop}")


def filter_logits(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """Scale logits [B, V] by 1/temperature, then mask tokens outside top-k and top-p with -inf.

    top_k: keep exactly the k largest logits of each row (0 = off; k >= V keeps all).
    top_p: after top-k, keep the smallest prefix of the tokens sorted by probability whose
        cumulative probability reaches top_p (1.0 = off). The most likely token is always kept.
    Returns a new float tensor; softmax of it is the distribution to sample from.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 to filter logits, got {temperature}")
    logits = logits.float() / temperature
    vocab_size = logits.shape[-1]
    if 0 < top_k < vocab_size:
        logits = _keep_top_k(logits, top_k)
    if top_p < 1.0:
        logits = _keep_top_p(logits, top_p)
    return logits


def _keep_top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    # Scatter the top-k indices rather than thresholding at the k-th value, so ties at the
    # boundary cannot keep more than k tokens.
    top_indices = logits.topk(k, dim=-1).indices
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, top_indices, True)
    return logits.masked_fill(~keep, float("-inf"))


def _keep_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_logits, sorted_indices = logits.sort(dim=-1, descending=True)
    sorted_probs = sorted_logits.softmax(dim=-1)
    # A token is kept when the probability mass strictly before it is still below top_p;
    # the first token has zero mass before it, so at least one token is always kept.
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    keep_sorted = mass_before < top_p
    keep = torch.zeros_like(keep_sorted).scatter_(-1, sorted_indices, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


def sample_next(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row from next-token logits [B, V].

    temperature == 0: greedy argmax; logprob = log_softmax(raw logits)[token].
    otherwise: draw from softmax(filter_logits(...)) with torch.multinomial (using `generator`,
        which must live on the logits' device); logprob = log_softmax(filtered logits)[token],
        the exact log-probability (nats) under the distribution actually sampled from.
    Returns (tokens [B] long, logprobs [B] float32).
    """
    logits = logits.float()
    if params.temperature == 0:
        tokens = logits.argmax(dim=-1)
        logprobs = logits.log_softmax(dim=-1)
    else:
        filtered = filter_logits(logits, params.temperature, params.top_k, params.top_p)
        logprobs = filtered.log_softmax(dim=-1)
        tokens = torch.multinomial(logprobs.exp(), 1, generator=generator).squeeze(-1)
    return tokens, logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
