import dataclasses
import inspect
import subprocess
import sys

import pytest
import torch

import rlvr.algorithms as algorithms
from rlvr.algorithms import (
    ADVANTAGE_ESTIMATORS,
    POLICY_LOSSES,
    TOKEN_ADVANTAGE_ESTIMATORS,
    get_policy_loss,
    policy_loss,
)
from rlvr.algorithms.names import (
    ADVANTAGE_ESTIMATOR_NAMES,
    ADVANTAGE_ESTIMATOR_SPECS,
    POLICY_LOSS_NAMES,
    POLICY_LOSS_SPECS,
)
from rlvr.config import AlgorithmConfig

# the estimators of one advantage per sequence, then those with a critic (per token)
ESTIMATORS = {**ADVANTAGE_ESTIMATORS, **TOKEN_ADVANTAGE_ESTIMATORS}
CASES = [(ADVANTAGE_ESTIMATOR_SPECS, ESTIMATORS), (POLICY_LOSS_SPECS, POLICY_LOSSES)]


@pytest.mark.parametrize("specs, registry", CASES)
def test_registries_hold_exactly_the_declared_names_in_order(specs, registry):
    assert list(registry) == list(specs)
    assert ADVANTAGE_ESTIMATOR_NAMES == tuple(ADVANTAGE_ESTIMATOR_SPECS)
    assert POLICY_LOSS_NAMES == tuple(POLICY_LOSS_SPECS)


@pytest.mark.parametrize("specs, registry", CASES)
def test_every_option_is_a_config_field_and_a_keyword_with_the_same_default(specs, registry):
    fields = {f.name: f for f in dataclasses.fields(AlgorithmConfig)}
    defaults = AlgorithmConfig()
    for name, spec in specs.items():
        assert spec.name == name and spec.summary and spec.paper
        params = inspect.signature(registry[name]).parameters
        keywords = {p for p, v in params.items() if v.kind is inspect.Parameter.KEYWORD_ONLY}
        assert set(spec.options) == keywords, name  # every keyword is configurable, no others
        for option in spec.options:
            assert option in fields, f"{name}: {option} is not an AlgorithmConfig field"
            assert params[option].default == getattr(defaults, option), f"{name}: {option}"


def test_config_choices_are_the_declared_names():
    fields = {f.name: f for f in dataclasses.fields(AlgorithmConfig)}
    assert fields["advantage"].metadata["choices"] == list(ADVANTAGE_ESTIMATOR_NAMES)
    assert fields["policy_loss"].metadata["choices"] == list(POLICY_LOSS_NAMES)


def test_names_module_imports_without_torch():
    code = "import sys, rlvr.algorithms.names; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_policy_loss_is_the_function_even_when_its_module_was_imported_first():
    code = (
        "import rlvr.algorithms.policy_loss, rlvr.algorithms.registry\n"
        "from rlvr.algorithms import policy_loss\n"
        "assert callable(policy_loss) and policy_loss.__name__ == 'policy_loss'\n"
        "import rlvr.algorithms as a; assert a.policy_loss is policy_loss"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_export_resolves_and_submodules_are_reachable():
    assert algorithms.__all__ == sorted(algorithms._EXPORTS)
    for name in algorithms.__all__:
        assert getattr(algorithms, name) is not None, name
    assert algorithms.advantages.grpo is algorithms.grpo
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        algorithms.nope  # noqa: B018


def _batch():
    gen = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 6, generator=gen) * 3
    logprobs = (old + 0.3 * torch.randn(4, 6, generator=gen)).requires_grad_(True)
    adv = torch.randn(4, generator=gen)
    mask = (torch.arange(6)[None, :] < torch.tensor([6, 3, 1, 0])[:, None]).float()
    # padding as a padded forward pass may leave it
    padded_lp = torch.where(mask.bool(), logprobs, torch.tensor(float("-inf")))
    padded_old = torch.where(mask.bool(), old, torch.tensor(float("nan")))
    return padded_lp, logprobs, padded_old, adv, mask


@pytest.mark.parametrize("name", POLICY_LOSS_NAMES)
def test_every_variant_called_generically_gives_per_token_loss_and_scalar_stats(name):
    padded_lp, logprobs, old, adv, mask = _batch()
    spec = POLICY_LOSS_SPECS[name]
    cfg = AlgorithmConfig()
    loss, stats = get_policy_loss(name)(
        padded_lp, old, adv, mask, **{k: getattr(cfg, k) for k in spec.options}
    )
    assert loss.shape == mask.shape
    assert torch.all(loss[mask == 0] == 0)
    assert torch.isfinite(loss).all()
    for key, value in stats.items():
        assert value.dim() == 0 and not value.requires_grad, key
        assert torch.isfinite(value), key
    assert {"ratio_mean", "ratio_min", "ratio_max"} <= set(stats)
    (grad,) = torch.autograd.grad(loss.sum(), logprobs)
    assert torch.isfinite(grad).all() and torch.all(grad[mask == 0] == 0)


def test_clip_through_the_registry_is_bit_identical_to_the_direct_call():
    padded_lp, _, old, adv, mask = _batch()
    cfg = AlgorithmConfig(clip_ratio_high=0.28, dual_clip_c=3.0)
    direct, direct_stats = policy_loss(
        padded_lp,
        old,
        adv,
        mask,
        clip_ratio_low=cfg.clip_ratio_low,
        clip_ratio_high=cfg.clip_ratio_high,
        dual_clip_c=cfg.dual_clip_c,
        ratio_level=cfg.ratio_level,
    )
    options = {k: getattr(cfg, k) for k in POLICY_LOSS_SPECS["clip"].options}
    loss, stats = get_policy_loss("clip")(padded_lp, old, adv, mask, **options)
    assert torch.equal(loss, direct)
    assert stats.keys() == direct_stats.keys()
    assert all(torch.equal(stats[k], direct_stats[k]) for k in stats)


def test_unknown_policy_loss_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown policy loss 'ppo'; expected one of: cispo, clip"):
        get_policy_loss("ppo")


def test_the_critic_estimators_are_exactly_the_token_level_registry():
    critic = [n for n, spec in ADVANTAGE_ESTIMATOR_SPECS.items() if spec.needs_critic]
    assert critic == list(TOKEN_ADVANTAGE_ESTIMATORS) == ["gae"]
    assert not set(critic) & set(ADVANTAGE_ESTIMATORS)


@pytest.mark.parametrize(
    "name", [n for n, s in POLICY_LOSS_SPECS.items() if not s.sequence_advantages]
)
def test_a_per_sequence_advantage_repeated_at_every_token_gives_the_same_loss(name):
    padded_lp, logprobs, old, adv, mask = _batch()
    spec = POLICY_LOSS_SPECS[name]
    cfg = AlgorithmConfig()
    options = {k: getattr(cfg, k) for k in spec.options}
    fn = get_policy_loss(name)
    per_row, row_stats = fn(padded_lp, old, adv, mask, **options)
    per_token, token_stats = fn(padded_lp, old, adv[:, None].expand_as(mask), mask, **options)
    assert torch.equal(per_row, per_token)
    assert all(torch.equal(row_stats[k], token_stats[k]) for k in row_stats)


@pytest.mark.parametrize("name", POLICY_LOSS_NAMES)
def test_per_token_advantages_weigh_each_token_by_its_own(name):
    padded_lp, logprobs, old, adv, mask = _batch()
    spec = POLICY_LOSS_SPECS[name]
    options = {k: getattr(AlgorithmConfig(), k) for k in spec.options}
    token_adv = torch.randn(mask.shape, generator=torch.Generator().manual_seed(5))
    fn = get_policy_loss(name)
    if spec.sequence_advantages:
        with pytest.raises(ValueError, match="one advantage per sequence"):
            fn(padded_lp, old, token_adv, mask, **options)
        return
    loss, _ = fn(padded_lp, old, token_adv, mask, **options)
    (grad,) = torch.autograd.grad(loss.sum(), logprobs)
    # flipping one token's advantage flips only that token's gradient (at ratio ~ 1, unclipped
    # tokens): token (0, 2) is sampled, the others keep theirs
    flipped = token_adv.clone()
    flipped[0, 2] = -flipped[0, 2]
    padded_lp, logprobs, old, _, _ = _batch()  # the same batch, a fresh graph
    loss2, _ = fn(padded_lp, old, flipped, mask, **options)
    (grad2,) = torch.autograd.grad(loss2.sum(), logprobs)
    keep = torch.ones_like(mask, dtype=torch.bool)
    keep[0, 2] = False
    if not spec.couples_rows:  # the covariance losses select tokens by A: others may change
        assert torch.equal(grad[keep], grad2[keep])
    assert not torch.equal(grad[0, 2], grad2[0, 2])


def test_gspo_ratio_refuses_per_token_advantages():
    padded_lp, _, old, _, mask = _batch()
    with pytest.raises(ValueError, match="ratio_level=sequence"):
        policy_loss(padded_lp, old, torch.ones_like(mask), mask, ratio_level="sequence")
