import math

import pytest

from rlvr.config import OptimizerConfig
from rlvr.runs.optim import lr_factor


def test_warmup_is_linear_then_constant():
    cfg = OptimizerConfig(warmup_steps=4, schedule="constant")
    assert [lr_factor(s, 10, cfg) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


def test_cosine_decays_from_peak_to_floor():
    cfg = OptimizerConfig(warmup_steps=2, schedule="cosine", min_lr_ratio=0.1)
    assert lr_factor(2, 12, cfg) == pytest.approx(1.0)
    assert lr_factor(7, 12, cfg) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lr_factor(12, 12, cfg) == pytest.approx(0.1)


def test_linear_decay_midpoint():
    cfg = OptimizerConfig(warmup_steps=0, schedule="linear", min_lr_ratio=0.0)
    assert lr_factor(5, 10, cfg) == pytest.approx(0.5)


def test_fused_adamw_is_used_on_plain_cpu_parameters_and_matches_the_reference_rule():
    import torch

    from rlvr.runs.optim import build_optimizer, fused_adamw_supported

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.Linear(5, 3))
    cfg = OptimizerConfig(lr=1e-2, beta1=0.9, beta2=0.99, adam_eps=1e-8, weight_decay=0.1)
    opt = build_optimizer(model, cfg)
    assert opt.defaults["fused"] is True
    assert not fused_adamw_supported([]) and not fused_adamw_supported(
        [torch.zeros(2, dtype=torch.long)]
    )
    # AdamW by hand (decoupled weight decay, bias-corrected moments) over three steps
    params = [p.detach().clone() for p in model.parameters()]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    for step in range(1, 4):
        grads = [torch.randn_like(p) for p in params]
        for p, g in zip(model.parameters(), grads):
            p.grad = g.clone()
        opt.step()
        for i, g in enumerate(grads):
            params[i] *= 1 - cfg.lr * cfg.weight_decay
            m[i] = cfg.beta1 * m[i] + (1 - cfg.beta1) * g
            v[i] = cfg.beta2 * v[i] + (1 - cfg.beta2) * g * g
            m_hat, v_hat = m[i] / (1 - cfg.beta1**step), v[i] / (1 - cfg.beta2**step)
            params[i] -= cfg.lr * m_hat / (v_hat.sqrt() + cfg.adam_eps)
    for p, expected in zip(model.parameters(), params):
        torch.testing.assert_close(p.detach(), expected, rtol=1e-5, atol=1e-6)
