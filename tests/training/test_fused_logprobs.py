"""The fused log-prob head (`_FusedTokenLogprobs`) equals the checkpointed autograd path and a
plain full log_softmax: values, entropies and gradients, and it steps aside for other heads."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import rlvr.forward.logprobs as logprobs_module
from rlvr.forward.logprobs import (
    _FusedTokenLogprobs,
    chunked_token_logprobs,
    final_hidden_states,
    output_logits,
)

VOCAB, HIDDEN, K = 67, 16, 13


def _model(
    dtype: torch.dtype = torch.float32, tie: bool = False, **config: float
) -> LlamaForCausalLM:
    """A 1-layer random Llama whose logits spread over a few nats (not a near-uniform softmax);
    extra config entries (logit_scale, ...) become config attributes."""
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=tie,
        initializer_range=0.5,
        **config,
    )
    return LlamaForCausalLM(cfg).to(dtype).eval()


def _inputs(dtype: torch.dtype = torch.float32, n: int = K, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, HIDDEN, generator=gen, dtype=dtype).requires_grad_()
    targets = torch.randint(0, VOCAB, (n,), generator=gen)
    weights = torch.randn(n, generator=gen, dtype=dtype)  # a loss that weighs tokens unequally
    return hidden, targets, weights


def _run(model, hidden, targets, weights, **options):
    """(log-probs, entropies, ∂L/∂hidden, ∂L/∂W) for L = Σ_k w_k log p(target_k)."""
    hidden.grad = None
    model.zero_grad(set_to_none=True)
    lp, ent = chunked_token_logprobs(model, hidden, targets, with_entropy=True, **options)
    (lp * weights).sum().backward()
    head_grad = model.get_output_embeddings().weight.grad
    return lp.detach(), ent.detach(), hidden.grad.clone(), head_grad.clone()


def _checkpointed(model, hidden, targets, weights, **options):
    """The autograd path: asking for a differentiable entropy keeps it."""
    return _run(model, hidden, targets, weights, entropy_grad=True, **options)


def _naive(model, hidden, targets, weights, temperature: float = 1.0):
    """One full [K, V] log_softmax through output_logits, no chunks, no checkpoint."""
    hidden.grad = None
    model.zero_grad(set_to_none=True)
    log_p = (output_logits(model, hidden) / temperature).log_softmax(-1)
    lp = log_p.gather(-1, targets[:, None]).squeeze(-1)
    ent = -(log_p.exp() * log_p).sum(-1)
    (lp * weights).sum().backward()
    head_grad = model.get_output_embeddings().weight.grad
    return lp.detach(), ent.detach(), hidden.grad.clone(), head_grad.clone()


@pytest.fixture
def autograd_path_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows each call of the autograd path's per-chunk function saw (empty: fused path only)."""
    calls: list[int] = []
    original = logprobs_module._chunk_logprobs

    def spy(model, hidden, *args):
        calls.append(hidden.shape[0])
        return original(model, hidden, *args)

    monkeypatch.setattr(logprobs_module, "_chunk_logprobs", spy)
    return calls


def _assert_same(got, expected, value_tol: float, grad_rtol: float) -> None:
    lp, ent, grad_h, grad_w = got
    lp_e, ent_e, grad_h_e, grad_w_e = expected
    torch.testing.assert_close(lp, lp_e, rtol=0, atol=value_tol)
    torch.testing.assert_close(ent, ent_e, rtol=0, atol=value_tol)
    for g, e in ((grad_h, grad_h_e), (grad_w, grad_w_e)):
        # relative to the gradient's scale: entries near zero get the same absolute slack
        torch.testing.assert_close(g, e, rtol=grad_rtol, atol=grad_rtol * float(e.abs().max()))


@pytest.mark.parametrize("chunk_size", [1, 4, K, 100])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_fused_values_and_gradients_equal_checkpointed_and_full_softmax(
    chunk_size: int, temperature: float, autograd_path_calls: list[int]
):
    model = _model()
    hidden, targets, weights = _inputs()
    options = {"temperature": temperature, "chunk_size": chunk_size}
    fused = _run(model, hidden, targets, weights, **options)
    assert autograd_path_calls == []  # the fused function did all of it
    checkpointed = _checkpointed(model, hidden, targets, weights, **options)
    assert len(autograd_path_calls) == 2 * -(-K // chunk_size)  # forward + recompute per chunk
    naive = _naive(model, hidden, targets, weights, temperature)
    _assert_same(fused, checkpointed, value_tol=1e-5, grad_rtol=1e-5)
    _assert_same(fused, naive, value_tol=1e-5, grad_rtol=1e-5)
    assert (fused[0] < -0.01).all() and (fused[1] > 0.1).all()
    assert (fused[1] < torch.log(torch.tensor(VOCAB - 1.0))).all()  # not uniform


@pytest.mark.parametrize("block", [1, 3, VOCAB - 1])
def test_vocabulary_blocks_give_the_full_softmax_values_and_gradients(
    monkeypatch: pytest.MonkeyPatch, block: int
):
    # blocks of one entry, full blocks with a partial last one, and a last block of one entry:
    # the online logsumexp and entropy must rescale exactly (chunks of 8 and 5 rows)
    monkeypatch.setattr(logprobs_module, "_BLOCK_ELEMENTS", HIDDEN * block)
    assert logprobs_module._vocab_block(8, VOCAB, HIDDEN) == block
    assert logprobs_module._vocab_block(5, VOCAB, HIDDEN) == block
    model = _model()
    hidden, targets, weights = _inputs()
    fused = _run(model, hidden, targets, weights, temperature=0.7, chunk_size=8)
    naive = _naive(model, hidden, targets, weights, temperature=0.7)
    _assert_same(fused, naive, value_tol=1e-5, grad_rtol=1e-5)


def test_fused_entropy_carries_no_gradient_and_entropy_grad_keeps_the_autograd_path():
    model = _model()
    hidden, targets, _ = _inputs()
    lp, ent = chunked_token_logprobs(model, hidden, targets, with_entropy=True)
    assert lp.requires_grad and not ent.requires_grad
    lp2, ent2 = chunked_token_logprobs(model, hidden, targets, with_entropy=True, entropy_grad=True)
    assert ent2.requires_grad  # an entropy bonus can differentiate it
    torch.testing.assert_close(ent, ent2.detach(), rtol=0, atol=1e-5)
    _, no_ent = chunked_token_logprobs(model, hidden, targets)
    assert no_ent is None


def test_tied_embeddings_gradient_sums_the_input_and_output_uses_end_to_end(
    autograd_path_calls: list[int],
):
    model = _model(tie=True)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    gen = torch.Generator().manual_seed(2)
    input_ids = torch.randint(0, VOCAB, (2, 9), generator=gen)
    positions = torch.tensor([2, 3, 4, 5, 6, 7, 11, 12, 13, 14, 15, 16])  # of the flat [18] rows
    targets = input_ids.reshape(-1)[positions + 1]
    weights = torch.randn(positions.numel(), generator=gen)

    def grads(entropy_grad: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        hidden = final_hidden_states(model, input_ids=input_ids)
        selected = hidden.reshape(-1, HIDDEN).index_select(0, positions)
        lp, _ = chunked_token_logprobs(
            model,
            selected,
            targets,
            temperature=0.8,
            chunk_size=5,
            with_entropy=True,
            entropy_grad=entropy_grad,
        )
        (lp * weights).sum().backward()
        return lp.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}

    lp_fused, fused = grads(entropy_grad=False)
    assert autograd_path_calls == []
    lp_ref, reference = grads(entropy_grad=True)
    assert autograd_path_calls
    torch.testing.assert_close(lp_fused, lp_ref, rtol=0, atol=1e-5)
    assert fused.keys() == reference.keys()
    for name, expected in reference.items():
        scale = float(expected.abs().max())
        torch.testing.assert_close(fused[name], expected, rtol=1e-5, atol=1e-5 * scale, msg=name)
    # the tied matrix's gradient has both parts: rows of input tokens that are never targets
    # get only the (small, dense) softmax part, which the embedding gather alone would not give
    embedding_grad = fused["model.embed_tokens.weight"]
    unused = torch.ones(VOCAB, dtype=torch.bool)
    unused[input_ids.reshape(-1)] = False
    assert (embedding_grad[unused].abs().sum(1) > 0).all()


def test_float64_agrees_to_rounding_and_passes_gradcheck(autograd_path_calls: list[int]):
    model = _model(torch.float64)
    hidden, targets, weights = _inputs(torch.float64)
    fused = _run(model, hidden, targets, weights, temperature=0.6, chunk_size=5)
    assert autograd_path_calls == [] and fused[0].dtype == torch.float64
    checkpointed = _checkpointed(model, hidden, targets, weights, temperature=0.6, chunk_size=5)
    naive = _naive(model, hidden, targets, weights, temperature=0.6)
    _assert_same(fused, checkpointed, value_tol=1e-10, grad_rtol=1e-10)
    _assert_same(fused, naive, value_tol=1e-10, grad_rtol=1e-10)

    gen = torch.Generator().manual_seed(3)
    h = torch.randn(6, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(11, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    t = torch.tensor([0, 3, 3, 10, 7, 1])  # a repeated target: its W row gets both rows' terms

    def fused_logprobs(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return _FusedTokenLogprobs.apply(h, w, t, 1.7, 4, True)[0]

    assert torch.autograd.gradcheck(fused_logprobs, (h, w))


@pytest.mark.parametrize(
    "config",
    [{"logit_scale": 0.25}, {"logits_scaling": 3.0}, {"logit_scale": 2.0, "logits_scaling": 4.0}],
)
def test_head_scale_factors_are_folded_into_the_fused_path(config, autograd_path_calls):
    model = _model(**config)
    hidden, targets, weights = _inputs()
    fused = _run(model, hidden, targets, weights, temperature=0.9, chunk_size=4)
    assert autograd_path_calls == []
    naive = _naive(model, hidden, targets, weights, temperature=0.9)
    _assert_same(fused, naive, value_tol=1e-5, grad_rtol=1e-5)


def _with_biased_head(model: LlamaForCausalLM) -> LlamaForCausalLM:
    old = model.lm_head
    head = torch.nn.Linear(HIDDEN, VOCAB, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.copy_(torch.linspace(-1, 1, VOCAB))
    model.lm_head = head
    return model


@pytest.mark.parametrize("kind", ["softcapping", "bias", "hook"])
def test_other_heads_fall_back_to_the_autograd_path(kind: str, autograd_path_calls: list[int]):
    if kind == "softcapping":
        model = _model(final_logit_softcapping=1.0)
    elif kind == "bias":
        model = _with_biased_head(_model())
    else:
        model = _model()
        model.lm_head.register_forward_hook(lambda _m, _args, out: out * 1.5)
    hidden, targets, weights = _inputs()
    got = _run(model, hidden, targets, weights, temperature=0.7, chunk_size=4)
    assert autograd_path_calls == [4, 4, 4, 1, 1, 4, 4, 4]  # forward, then recompute backwards
    naive = _naive(model, hidden, targets, weights, temperature=0.7)
    _assert_same(got, naive, value_tol=1e-5, grad_rtol=1e-5)
    # the transform really changes the numbers, so the fused formula would have been wrong
    plain = _naive(_model(), hidden, targets, weights, temperature=0.7)
    assert (got[0] - plain[0]).abs().max() > 1e-3


def test_no_completion_tokens_still_give_a_graph_to_backward_through():
    model = _model()
    hidden, targets, _ = _inputs(n=0)
    lp, ent = chunked_token_logprobs(model, hidden, targets, with_entropy=True)
    assert lp.shape == (0,) and ent.shape == (0,) and lp.dtype == torch.float32
    assert lp.requires_grad
    lp.sum().backward()
    assert hidden.grad is not None and hidden.grad.shape == (0, HIDDEN)


def test_no_grad_and_frozen_hidden_states(autograd_path_calls: list[int]):
    model = _model()
    hidden, targets, weights = _inputs()
    with torch.no_grad():
        lp, ent = chunked_token_logprobs(
            model, hidden, targets, temperature=0.7, chunk_size=4, with_entropy=True
        )
    assert lp.grad_fn is None and not lp.requires_grad
    naive = _naive(model, hidden, targets, weights, temperature=0.7)
    torch.testing.assert_close(lp, naive[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(ent, naive[1], rtol=0, atol=1e-5)
    # only the head's weight needs a gradient (the hidden states are data)
    model.zero_grad(set_to_none=True)
    frozen = hidden.detach()
    lp, _ = chunked_token_logprobs(model, frozen, targets, temperature=0.7, chunk_size=4)
    (lp * weights).sum().backward()
    assert frozen.grad is None
    scale = float(naive[3].abs().max())
    torch.testing.assert_close(model.lm_head.weight.grad, naive[3], rtol=1e-5, atol=1e-5 * scale)
    assert autograd_path_calls == []
