import math

import pytest

from rlvr.config import OptimizerConfig
from rlvr.training.optim import lr_factor


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
