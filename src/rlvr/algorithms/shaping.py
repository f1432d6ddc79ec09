"""DAPO overlong reward shaping (Yu et al. 2025, eq. 13): a soft penalty as a completion nears
the generation limit, instead of the hard cliff of "truncated = wrong".

    R_length(y) = 0                                  if |y| <= L_max - L_buf
                = ((L_max - L_buf) - |y|) / L_buf    if L_max - L_buf < |y| <= L_max
                = -1                                 if |y| > L_max
    reward added = factor * R_length(y)              (so the penalty is capped at -factor)

|y| is the completion length in tokens, L_max the generation limit (rollout.max_new_tokens) and
L_buf the buffer (DAPO: 4096 of 20480). A completion cut at the limit has |y| = L_max and gets
-factor; "beyond" only happens when lengths are counted against a smaller L_max than generation
used. The shaped reward is added to the verifier's reward by the trainer.

The other half of DAPO's overlong handling, dropping truncated completions from the loss
("overlong filtering"), is the trainer's job under the option `reward.mask_truncated`.
"""

from __future__ import annotations

from collections.abc import Sequence


def overlong_penalty(
    length: int, max_tokens: int, buffer_tokens: int, factor: float = 1.0
) -> float:
    """factor * R_length for a completion of `length` tokens (formula above); in [-factor, 0]."""
    if max_tokens <= 0:
        raise ValueError(f"overlong_penalty: max_tokens must be > 0, got {max_tokens}")
    if not 0 <= buffer_tokens <= max_tokens:
        raise ValueError(
            f"overlong_penalty: buffer_tokens must be in [0, max_tokens={max_tokens}], "
            f"got {buffer_tokens}"
        )
    if factor < 0:
        raise ValueError(f"overlong_penalty: factor must be >= 0, got {factor}")
    safe = max_tokens - buffer_tokens
    if length <= safe:
        return 0.0
    if length <= max_tokens:  # only reachable with buffer_tokens > 0
        return factor * (safe - length) / buffer_tokens
    return -factor


def overlong_penalties(
    lengths: Sequence[int], max_tokens: int, buffer_tokens: int, factor: float = 1.0
) -> list[float]:
    """overlong_penalty for each completion length, in order."""
    return [overlong_penalty(n, max_tokens, buffer_tokens, factor) for n in lengths]
