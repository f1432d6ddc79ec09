"""Per-token log-probabilities (and entropies) of completions under a causal LM.

Rows are laid out as [left-padded prompt | right-padded completion], so every completion starts
at the same column P. One forward pass with `logits_to_keep = C + 1` then yields exactly the
logits that predict the C completion columns, without materialising logits for the prompts.

The padding-free path (packing.py) instead takes the decoder's final hidden states, selects the K
positions that predict completion tokens and projects them to the vocabulary in chunks
(`chunked_token_logprobs`), so at most one chunk's [chunk, V] logits is alive at a time.

When the output head is a plain bias-free linear layer (float32/float64, no softcapping, no
hooks), that projection runs as one fused autograd function (`_FusedTokenLogprobs`): its forward
keeps only each row's logsumexp, and its hand-written backward recomputes a chunk's logits and
turns them into the gradient with one in-place exp and two matmuls, instead of storing or
recomputing log_softmax and scattering a [K, V] gather gradient. Other heads, and an entropy
that must itself be differentiated (an entropy bonus), take the checkpointed autograd path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

from rlvr.algorithms.entropy import entropy_from_logits
from rlvr.models.modules import is_plain, is_plain_linear, is_plain_tensor


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

        def rows_of(ids: torch.Tensor, on: torch.Tensor) -> list[torch.Tensor]:
            # boolean selection runs row-major: row r's tokens are the r-th run of the result
            return list(ids[on].split(on.sum(1).tolist()))

        prompts = rows_of(self.input_ids[:, :width_p], real[:, :width_p])
        completions = rows_of(self.input_ids[:, width_p:], real[:, width_p:])
        return prompts, completions


def make_token_batch(
    prompt_ids: list[torch.Tensor],
    completion_ids: list[torch.Tensor],
    pad_id: int,
    loss_masks: list[torch.Tensor] | None = None,
) -> TokenBatch:
    """Pad prompts on the left and completions on the right into one [B, P + C] batch.

    loss_masks (multi-turn rollouts): per row, 1 on sampled completion tokens and 0 on tokens
    an environment inserted; the completion mask is 0 on the inserted ones, so they are
    attended to but never trained on, KL-penalised or counted in a length normaliser."""
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
    completion_mask = attention[:, width_p:].float()
    for i, m in enumerate(loss_masks or ()):
        completion_mask[i, : m.numel()] *= m.float()
    return TokenBatch(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=position_ids,
        completion_ids=input_ids[:, width_p:].clone(),
        completion_mask=completion_mask,
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
    The model's own forward computes the logits: under autocast (bf16-mixed) its head's matmul
    runs in bf16 and only the log-softmax in fp32; the packed path keeps the head in fp32 too.
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


def completion_values(model: Any, batch: TokenBatch) -> torch.Tensor:
    """V(s_t) for every completion token of the padded layout, [B, C] float32, from a value
    model (rlvr.models.value): its decoder's states at the C positions that predict the
    completion (the last C + 1 positions but the last, as `completion_logprobs` keeps them)."""
    device = next(model.parameters()).device
    width = batch.completion_width
    hidden = final_hidden_states(
        model,
        input_ids=batch.input_ids.to(device),
        attention_mask=batch.attention_mask.to(device),
        position_ids=batch.position_ids.to(device),
    )
    return model.values(hidden[:, hidden.shape[1] - width - 1 : -1])


def final_hidden_states(model: Any, **inputs: torch.Tensor) -> torch.Tensor:
    """The decoder's last hidden states [B, T, H] (after the final norm), i.e. what the output
    head of a causal LM multiplies; works through peft wrappers (adapters stay applied)."""
    embeds = _sparse_grad_embeddings(model, inputs.get("input_ids"))
    if embeds is not None:
        inputs = {k: v for k, v in inputs.items() if k != "input_ids"}
        inputs["inputs_embeds"] = embeds
    out = model.get_decoder()(**inputs, use_cache=False)
    return out.last_hidden_state


def _sparse_grad_embeddings(model: Any, input_ids: torch.Tensor | None) -> torch.Tensor | None:
    """The input embeddings of `input_ids` looked up with a sparse gradient, when that is safe
    and pays: a plain `nn.Embedding` (no hooks, no max_norm) whose weight is trained and tied to
    the output head. Its dense gradient would be a zero-filled [V, H] tensor with the tokens'
    rows added, then added to the head's gradient (SmolLM2-135M: ~0.15 s of a ~4 s update, most
    of it first-touch page faults of the 113 MB zero fill); the sparse one is added into the
    head's dense gradient row by row. Tied only: the head's dense gradient always arrives first
    in the backward pass (the decoder's gradient depends on it), so the parameter's `.grad`
    stays dense for clipping and fused AdamW. None: let the model embed `input_ids` itself."""
    if input_ids is None or not torch.is_grad_enabled():
        return None
    embedding = model.get_input_embeddings()
    head = model.get_output_embeddings()
    if (
        not is_plain(embedding, torch.nn.Embedding)
        or not is_plain_tensor(embedding.weight)
        or embedding.max_norm is not None
        or not embedding.weight.requires_grad
        or head is None
        or head.weight is not embedding.weight
    ):
        return None
    return F.embedding(input_ids, embedding.weight, padding_idx=embedding.padding_idx, sparse=True)


def output_logits(model: Any, hidden: torch.Tensor) -> torch.Tensor:
    """The LM head applied to hidden states [..., H] -> float32 logits [..., V].

    Reproduces the head of the model's own forward: the output embedding, then Cohere's
    `logit_scale` (z · s), Granite's `logits_scaling` (z / s) and Gemma's
    `final_logit_softcapping` (cap · tanh(z / cap)) when configured. `check_output_head` verifies
    the result against the model's own forward for architectures with other head transforms.
    A float64 head keeps float64 logits (exact reference computations); any other dtype gives
    float32.
    """
    logits = model.get_output_embeddings()(hidden)
    config = getattr(model, "config", None)
    scale = _config_number(config, "logit_scale")
    if scale is not None:
        logits = logits * scale
    divisor = _config_number(config, "logits_scaling")
    if divisor:
        logits = logits / divisor
    cap = getattr(config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits if logits.dtype == torch.float64 else logits.float()


def _config_number(config: Any, name: str) -> float | None:
    """config.<name> when it is a plain number (not a bool, not absent), else None."""
    value = getattr(config, name, None)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


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


def _fused_head(model: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, float] | None:
    """(W [V, H], s) when output_logits(model, h) is exactly s · (h @ Wᵀ), which the fused path
    computes; None when the head is anything else and the autograd path must run it.

    That needs a plain nn.Linear without bias or hooks (not a peft/quantised/parametrised
    wrapper), a float32 or float64 weight of the hidden states' dtype and device as a plain
    tensor (not e.g. an FSDP-sharded DTensor), no autocast, and no final logit softcapping; s
    folds Cohere's `logit_scale` and Granite's `logits_scaling`.
    """
    head = model.get_output_embeddings()
    if not is_plain_linear(head) or head.bias is not None:
        return None
    weight = head.weight
    if not is_plain_tensor(weight):
        return None
    if weight.dtype not in (torch.float32, torch.float64) or hidden.dtype != weight.dtype:
        return None
    if weight.device != hidden.device or torch.is_autocast_enabled(hidden.device.type):
        return None
    config = getattr(model, "config", None)
    if getattr(config, "final_logit_softcapping", None):
        return None
    scale = _config_number(config, "logit_scale")
    divisor = _config_number(config, "logits_scaling")
    scale = 1.0 if scale is None else scale
    return weight, (scale / divisor if divisor else scale)


# Logits computed at a time by the fused head: [rows, B] for a vocabulary block of B entries,
# about 8 MiB of float32, so a block of logits (and of its weight rows) stays in a CPU's
# last-level cache through its passes; the head never materialises [rows, V] (for SmolLM2's
# 49152-entry vocabulary and 512 positions that would be 100 MB, for Qwen's 151936 300 MB).
_BLOCK_ELEMENTS = 1 << 21


def _vocab_block(rows: int, vocab: int, hidden: int) -> int:
    """Vocabulary entries per block: [rows, B] logits and [B, H] weight rows of at most
    _BLOCK_ELEMENTS each (at least one entry, at most the vocabulary)."""
    return max(1, min(vocab, _BLOCK_ELEMENTS // max(rows, 1), _BLOCK_ELEMENTS // max(hidden, 1)))


def _fused_chunk_forward(
    scaled_hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(log p(target), logsumexp, entropy or None) of one chunk, [c] each, without autograd.

    With z = (s·h) @ Wᵀ computed one vocabulary block z_b at a time, an online logsumexp: m =
    the running max, S = Σ e^(z − m) and B = Σ e^(z − m)(z − m) so far; a block with max m'
    rescales them, S' = e^(m − m') S + Σ_b e^(z − m'), B' = e^(m − m') (B + (m − m') S) +
    Σ_b e^(z − m')(z − m'). At the end logsumexp(z) = m + log S, log p(t) = z_t − logsumexp(z)
    (z_t read from its block) and H = −Σ_v p_v log p_v = log S − B / S, since log p_v =
    (z_v − m) − log S. Every exponent is ≤ 0 (no overflow); torch's sums are pairwise, so float32
    entropies stay accurate over a large vocabulary.
    """
    rows, vocab = scaled_hidden.shape[0], weight.shape[0]
    step = _vocab_block(rows, vocab, weight.shape[1])
    target_logits = scaled_hidden.new_zeros(rows)
    top = total = weighted = None
    for start in range(0, vocab, step):
        block = torch.mm(scaled_hidden, weight[start : start + step].t())  # z_b [c, B]
        inside = (targets >= start) & (targets < start + block.shape[1])
        column = (targets - start).clamp_(0, block.shape[1] - 1)
        target_logits = torch.where(
            inside, block.gather(1, column[:, None]).squeeze(1), target_logits
        )
        block_top = block.amax(1)
        new_top = block_top if top is None else torch.maximum(top, block_top)
        shifted = block.sub_(new_top[:, None])  # z_b − m', in place
        if with_entropy:
            exp_shifted = torch.exp(shifted)
            block_total = exp_shifted.sum(1)
            block_weighted = exp_shifted.mul_(shifted).sum(1)
        else:
            block_total = shifted.exp_().sum(1)
            block_weighted = None
        if top is None or total is None:  # the first block
            total, weighted = block_total, block_weighted
        else:
            drop = top - new_top  # m − m' ≤ 0
            rescale = drop.exp()
            if weighted is not None and block_weighted is not None:  # with_entropy
                weighted = rescale * (weighted + drop * total) + block_weighted
            total = total * rescale + block_total
        top = new_top
    assert top is not None and total is not None  # vocab ≥ 1: at least one block
    log_total = total.log()
    lse = top + log_total
    entropy = log_total - weighted / total if weighted is not None else None
    return target_logits - lse, lse, entropy


class _FusedTokenLogprobs(torch.autograd.Function):
    """log p(target_k) (and, without gradient, the entropy) of z_k = s · (h_k @ Wᵀ), by chunks.

    Forward keeps only h, W, the targets and each row's logsumexp. Backward recomputes each
    chunk's logits and, with p = softmax(z) and g the incoming gradient of log p(target),
    uses ∂ log p(t)/∂z = onehot(t) − p:

        ∂L/∂h_k = s · g_k · (W[t_k] − p_k @ W)
        ∂L/∂W   = Σ_k onehot(t_k) ⊗ (s g_k h_k) − pᵀ @ (s g h)

    one vocabulary block of p at a time (`_vocab_block`): each [c, B] block is touched only by
    the recomputing matmul, one in-place shift-and-exp and the two matmuls, p_k @ W sums over
    the blocks, and ∂L/∂W is written block by block; the per-row factor s·g scales [c, H] rows
    instead of [c, V] ones, and the one-hot terms are a row gather and an index_add on W's rows.
    ∂L/∂W is accumulated in one [V, H] buffer across chunks; when W is also the input embedding
    (tied weights), autograd adds it to the embedding's gradient.
    """

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        scale: float,
        chunk_size: int,
        with_entropy: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = hidden.shape[0]
        logprobs = hidden.new_empty(n)
        lse = hidden.new_empty(n)
        entropy = hidden.new_empty(n if with_entropy else 0)
        for start in range(0, n, chunk_size):
            rows = slice(start, start + chunk_size)
            lp, chunk_lse, ent = _fused_chunk_forward(
                hidden[rows] * scale, weight, targets[rows], with_entropy
            )
            logprobs[rows], lse[rows] = lp, chunk_lse
            if ent is not None:
                entropy[rows] = ent
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.scale, ctx.chunk_size = scale, chunk_size
        ctx.mark_non_differentiable(entropy)
        return logprobs, entropy

    @staticmethod
    @once_differentiable
    def backward(
        ctx: Any, grad_logprobs: torch.Tensor, _grad_entropy: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, targets, lse = ctx.saved_tensors
        need_hidden, need_weight = ctx.needs_input_grad[:2]
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        grad_weight = torch.empty_like(weight) if need_weight else None
        vocab = weight.shape[0]
        for first, start in enumerate(range(0, hidden.shape[0], ctx.chunk_size)):
            rows = slice(start, start + ctx.chunk_size)
            t = targets[rows]
            scaled = hidden[rows] * ctx.scale
            weighted = scaled * grad_logprobs[rows, None]  # s g_k h_k, [c, H]
            expected = None  # p_k @ W, [c, H], summed over the vocabulary blocks
            step = _vocab_block(scaled.shape[0], vocab, weight.shape[1])
            for v in range(0, vocab, step):
                w_block = weight[v : v + step]
                # p = exp(z − logsumexp(z)), in place on the recomputed block of logits
                probs = torch.mm(scaled, w_block.t()).sub_(lse[rows, None]).exp_()
                if grad_hidden is not None:
                    if expected is None:
                        expected = torch.mm(probs, w_block)
                    else:
                        expected.addmm_(probs, w_block)
                if grad_weight is not None:
                    if first == 0:  # the first chunk writes the block, later ones add to it
                        torch.mm(probs.t(), weighted, out=grad_weight[v : v + step]).neg_()
                    else:
                        grad_weight[v : v + step].addmm_(probs.t(), weighted, alpha=-1)
            if grad_hidden is not None:
                row_scale = grad_logprobs[rows, None] * ctx.scale  # s·g_k, [c, 1]
                grad_hidden[rows] = (weight.index_select(0, t) - expected).mul_(row_scale)
            if grad_weight is not None:
                grad_weight.index_add_(0, t, weighted)
        return grad_hidden, grad_weight, None, None, None, None


def chunked_token_logprobs(
    model: Any,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = 1024,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(target_k) = z_k[target_k]/T - logsumexp(z_k/T) for hidden states [K, H], targets [K].

    The K positions are processed `chunk_size` at a time, so at most one chunk's [chunk, V]
    logits are alive at a time, forward or backward, instead of [K, V]. Entropy (nats, of the
    same tempered distribution) comes from the same chunk.

    A plain linear head (see `_fused_head`) runs through `_FusedTokenLogprobs`, whose entropy
    carries no gradient. With `entropy_grad` (an entropy bonus needs ∂H) while gradients are
    on, and for any other head, each chunk instead runs `_chunk_logprobs` under
    torch.utils.checkpoint: its logits are freed after the forward and recomputed in backward.
    Under torch.autocast (model.precision=bf16-mixed) all of it runs with autocast off, on
    hidden states cast to the head's dtype. Returns float32 ([K], [K] or None); float64 for a
    float64 head.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        # Mixed precision: the head's matmul and the log-softmax run in the head's own (fp32)
        # dtype, not bf16: bf16 logits are off by ~|z|·2^-8, e.g. 0.1 nats at z = 25, and the
        # policy ratio exp(log p - log p_old) would carry that noise. With autocast off here the
        # fused head applies (a float32 weight and hidden states of its dtype).
        weight = model.get_output_embeddings().weight
        if weight.dtype.is_floating_point:
            hidden = hidden.to(weight.dtype)
        with torch.autocast(device_type, enabled=False):
            return chunked_token_logprobs(
                model,
                hidden,
                targets,
                temperature=temperature,
                chunk_size=chunk_size,
                with_entropy=with_entropy,
                entropy_grad=entropy_grad,
            )
    if hidden.shape[0] == 0:  # no completion tokens at all
        dtype = torch.float64 if hidden.dtype == torch.float64 else torch.float32
        empty = hidden[:0, 0].to(dtype)  # keeps the graph, so backward still runs
        return empty, (empty if with_entropy else None)
    fused = _fused_head(model, hidden)
    needs_entropy_graph = with_entropy and entropy_grad and torch.is_grad_enabled()
    if fused is not None and not needs_entropy_graph:
        weight, scale = fused
        if temperature > 0 and temperature != 1.0:
            scale = scale / temperature
        logprobs, entropy = _FusedTokenLogprobs.apply(
            hidden, weight, targets, scale, chunk_size, with_entropy
        )
        return logprobs, (entropy if with_entropy else None)
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
    return torch.cat(logprobs), (torch.cat(entropies) if with_entropy else None)
