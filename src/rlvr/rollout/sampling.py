"""Next-token sampling as pure tensor functions: temperature, top-k, top-p, greedy.

Every engine samples through `sample_next`, so the log-probabilities stored in a rollout are
always those of the distribution the token was actually drawn from.

Keyed sampling. Each rollout row has a 32-bit key (a hash of the call's seed and the row's
global index, `row_keys`); the uniform number that picks the token at completion position t is a
hash of (key, t) (`keyed_uniform`), and the token is found by inverting the cumulative
distribution. A row's draws therefore do not depend on which other rows share its batch, on the
engine's slot schedule, on `max_batch_size`, or on how the rows of a step are split across data
parallel ranks or Ray workers: the same seed gives the same completions everywhere.
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
    Returns a float tensor (the input itself when there is nothing to change: temperature 1,
    no top-k, no top-p); softmax of it is the distribution to sample from.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 to filter logits, got {temperature}")
    logits = logits.float()
    if temperature != 1.0:  # no [B, V] copy per token at temperature 1
        logits = logits / temperature
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


_MASK32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xor-shift-multiply finaliser) of int64 tensors holding values in
    [0, 2^32). The multipliers are below 2^31, so every product fits in int64."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x5BD1E995) & _MASK32
    return x ^ (x >> 16)


def row_keys(seed: int, rows: torch.Tensor) -> torch.Tensor:
    """Sampling keys [R] (int64 in [0, 2^32)) of global row indices `rows` under `seed`."""
    salt = _mix32(torch.tensor(seed & _MASK32, dtype=torch.long))
    return _mix32((rows.long() & _MASK32) ^ salt)


def keyed_uniform(keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Uniform numbers in [0, 1) as float64 [B], a deterministic function of (key, position):
    53 random bits from two 32-bit hashes (27 + 26 bits), as in MT19937's genrand_res53."""
    h1 = _mix32(keys.long() ^ _mix32((positions.long() + 0x9E3779B9) & _MASK32))
    h2 = _mix32(h1 ^ 0x68E31DA4)
    return ((h1 >> 5).double() * 67108864.0 + (h2 >> 6).double()) / 9007199254740992.0


def sampling_seed(generator: torch.Generator | None) -> int:
    """One draw from `generator` (or torch's global RNG) that seeds a generate call's keys."""
    device = generator.device if generator is not None else "cpu"
    return int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=device))


def sample_next(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None = None,
    *,
    keys: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    uniforms: torch.Tensor | None = None,
    blocked: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row from next-token logits [B, V].

    temperature == 0: greedy argmax; logprob = log_softmax(raw logits)[token].
    otherwise: draw from p = softmax(filter_logits(...)); logprob = log_softmax(filtered
        logits)[token], the exact log-probability (nats) under the distribution sampled from.
        With `keys` [B] and `positions` [B] (the completion position of each row's token), the
        draw is the inverse CDF at u = keyed_uniform(key, position): the first token whose
        cumulative probability (float64, vocabulary order) exceeds u. Without keys it is
        torch.multinomial with `generator` (which must live on the logits' device).
        `uniforms` [B] (float64) are those u given directly: an engine that computed
        keyed_uniform for all of a row's positions when the row started passes them per step.
        `blocked`: the same inverse CDF found in two levels (`_inverse_cdf_blocked`), a third of
        the memory traffic; its sums run in another order, so a u within rounding of a token
        boundary may pick the neighbour: for an engine whose draws need not match the exact
        path's bit for bit (a cast replica, whose log-probs the learner corrects anyway).
    Returns (tokens [B] long, logprobs [B] float32).
    """
    logits = logits.float()
    if params.temperature == 0:
        tokens = logits.argmax(dim=-1)
        logprobs = logits.log_softmax(dim=-1)
    else:
        filtered = filter_logits(logits, params.temperature, params.top_k, params.top_p)
        logprobs = filtered.log_softmax(dim=-1)
        inverse_cdf = _inverse_cdf_blocked if blocked else _inverse_cdf
        if uniforms is not None:
            tokens = inverse_cdf(logprobs, uniforms.to(logits.device))
        elif keys is None:
            tokens = torch.multinomial(logprobs.exp(), 1, generator=generator).squeeze(-1)
        else:
            if positions is None:
                raise ValueError("sample_next: keyed sampling needs the positions of the tokens")
            tokens = inverse_cdf(logprobs, keyed_uniform(keys, positions).to(logits.device))
    return tokens, logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


CDF_BLOCK = 1024  # tokens per block of the two-level inverse CDF


def _inverse_cdf_blocked(logprobs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """`_inverse_cdf` in two levels: p = exp(log p) in float32, the float64 sum of each block
    of CDF_BLOCK tokens, the block where u · total falls (a float64 cumsum over the few block
    sums), then the float64 cumulative sum inside that block only. The same distribution to
    within float rounding (each p to ~1e-7 relative, the sums in float64), read from ~36 bytes
    a token instead of ~100 (SmolLM2, 64 rows: the full float64 exp and cumsum were ~40% of a
    bf16 decode step)."""
    rows, vocab = logprobs.shape
    pad = (-vocab) % CDF_BLOCK
    probs = logprobs.exp()
    if pad:
        probs = torch.nn.functional.pad(probs, (0, pad))
    blocks = probs.view(rows, -1, CDF_BLOCK)
    totals = blocks.sum(dim=-1, dtype=torch.float64).cumsum(dim=-1)  # [B, blocks]
    target = (u.double() * totals[:, -1]).unsqueeze(-1)
    last = totals.shape[-1] - 1
    block = torch.searchsorted(totals, target, right=True).squeeze(-1).clamp(max=last)
    before = torch.where(
        block > 0, totals.gather(1, (block - 1).clamp(min=0).unsqueeze(-1)).squeeze(-1), 0.0
    )
    index = torch.arange(rows, device=logprobs.device)
    within = blocks[index, block].double().cumsum(dim=-1) + before.unsqueeze(-1)
    offset = torch.searchsorted(within, target, right=True).squeeze(-1).clamp(max=CDF_BLOCK - 1)
    tokens = (block * CDF_BLOCK + offset).clamp(max=vocab - 1)
    # a target past the block's last nonzero mass (rounding between the two sums): the mode
    chosen = probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    if bool((chosen > 0).all()):
        return tokens
    return torch.where(chosen > 0, tokens, probs.argmax(dim=-1))


def _inverse_cdf(logprobs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    probs = logprobs.double().exp()
    cdf = probs.cumsum(dim=-1)
    target = (u * cdf[:, -1]).unsqueeze(-1)  # scaled by the total: rounding cannot overshoot
    tokens = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    tokens = tokens.clamp(max=logprobs.shape[-1] - 1)
    # u within 2^-53 of 1 could land past the last token of nonzero mass: take the mode instead
    chosen = probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    if probs.device.type == "cpu" and bool((chosen > 0).all()):
        return tokens  # the usual case; on a CPU the check is cheaper than a [B, V] argmax
    return torch.where(chosen > 0, tokens, probs.argmax(dim=-1))
