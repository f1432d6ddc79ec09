import math

import pytest
import torch

from rlvr.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    dr_grpo,
    get_advantage_estimator,
    group_stats,
    grpo,
    reinforce_pp,
    reinforce_pp_baseline,
    rloo,
    zero_variance_groups,
)

WORKED_GROUP = torch.tensor([1.0, 0, 0, 1, 0, 0, 0, 1])
GROUP_AWARE = ["grpo", "dr_grpo", "rloo", "reinforce_pp_baseline"]


def test_grpo_worked_group_population_std():
    # mean = 3/8 = 0.375; population var = 0.375 * 0.625 = 0.234375, std = 0.48412.
    # correct: 0.625 / 0.48412 = +1.29099; wrong: -0.375 / 0.48412 = -0.77460
    adv = grpo(WORKED_GROUP, torch.zeros(8, dtype=torch.long))
    assert adv[0].item() == pytest.approx(1.291, abs=1e-3)
    assert adv[1].item() == pytest.approx(-0.775, abs=1e-3)
    assert torch.allclose(adv[WORKED_GROUP == 1], torch.tensor(1.29099), atol=1e-4)
    assert torch.allclose(adv[WORKED_GROUP == 0], torch.tensor(-0.77460), atol=1e-4)


def test_grpo_worked_group_sample_std():
    # sample var = 0.234375 * 8/7 = 0.267857, std = 0.51755.
    # correct: 0.625 / 0.51755 = +1.20761; wrong: -0.375 / 0.51755 = -0.72457
    adv = grpo(WORKED_GROUP, torch.zeros(8, dtype=torch.long), std="sample")
    assert adv[0].item() == pytest.approx(1.2076, abs=1e-3)
    assert adv[1].item() == pytest.approx(-0.7246, abs=1e-3)


def test_grpo_normalises_each_group_separately():
    rewards = torch.tensor([1.0, 0.0, 2.0, 0.0, 0.0, 4.0])
    group_ids = torch.tensor([0, 0, 1, 1, 1, 1])
    adv = grpo(rewards, group_ids, eps=0.0)
    assert torch.allclose(adv[:2], torch.tensor([1.0, -1.0]))
    g1 = rewards[2:]
    expected = (g1 - g1.mean()) / g1.std(unbiased=False)
    assert torch.allclose(adv[2:], expected)


@pytest.mark.parametrize("name", list(ADVANTAGE_ESTIMATORS))
@pytest.mark.parametrize("value", [0.0, 1.0, 0.1, -3.7])
def test_all_equal_batch_gives_exactly_zero_advantage(name, value):
    rewards = torch.full((6,), value)
    group_ids = torch.tensor([0, 0, 0, 1, 1, 1])
    for opts in ({}, {"std": "sample"}) if name not in ("dr_grpo", "rloo") else ({},):
        adv = get_advantage_estimator(name)(rewards, group_ids, **opts)
        assert torch.equal(adv, torch.zeros(6))


@pytest.mark.parametrize("name", GROUP_AWARE)
def test_zero_variance_group_in_mixed_batch_gives_exactly_zero_advantage(name):
    # In float32 the mean of three 0.9s is not exactly 0.9 (0.9 - mean = 6e-8), so a
    # mean-based zero-variance test would leak eps-divided rounding noise (6e-8 / 1e-6 = 0.06).
    rewards = torch.tensor([0.9, 0.9, 0.9, 1.0, 0.0, 0.25, 0.0, 0.0])
    group_ids = torch.tensor([5, 5, 5, 9, 9, 9, 2, 2])
    adv = get_advantage_estimator(name)(rewards, group_ids)
    assert not torch.isnan(adv).any()
    assert torch.equal(adv[[0, 1, 2, 6, 7]], torch.zeros(5))
    assert (adv[3:6] != 0).all()


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "reinforce_pp_baseline"])
@pytest.mark.parametrize("std", ["population", "sample"])
def test_size_one_group_gives_exactly_zero_advantage(name, std):
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.3])
    group_ids = torch.tensor([0, 0, 1, 7])
    opts = {} if name == "dr_grpo" else {"std": std}
    adv = get_advantage_estimator(name)(rewards, group_ids, **opts)
    assert not torch.isnan(adv).any()
    assert torch.equal(adv[2:], torch.zeros(2))
    assert adv[0] > 0 > adv[1]


@pytest.mark.parametrize("std", ["population", "sample"])
def test_reinforce_pp_single_row_batch_gives_zero_not_nan(std):
    adv = reinforce_pp(torch.tensor([0.7]), torch.tensor([0]), std=std)
    assert torch.equal(adv, torch.zeros(1))


def test_dr_grpo_subtracts_group_mean_without_std():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0])
    group_ids = torch.tensor([0, 0, 0, 0, 1])
    adv = dr_grpo(rewards, group_ids)
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, -0.5, 0.5, 0.0]))


def test_rloo_matches_hand_computation():
    # group 0 = [1, 0, 0]: A_0 = 1 - (0+0)/2 = 1, A_1 = 0 - (1+0)/2 = -0.5, A_2 = -0.5
    # group 1 = [2, 4]: A_3 = 2 - 4 = -2, A_4 = 4 - 2 = 2
    rewards = torch.tensor([1.0, 0.0, 0.0, 2.0, 4.0])
    group_ids = torch.tensor([0, 0, 0, 1, 1])
    adv = rloo(rewards, group_ids)
    assert torch.allclose(adv, torch.tensor([1.0, -0.5, -0.5, -2.0, 2.0]))


def test_rloo_rejects_a_group_of_size_one_naming_it():
    with pytest.raises(ValueError, match="group id 42 has 1"):
        rloo(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([3, 3, 42]))


def test_reinforce_pp_normalises_over_the_batch_ignoring_groups():
    # mean = 1.5; population var = (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25
    rewards = torch.tensor([0.0, 1.0, 2.0, 3.0])
    expected = torch.tensor([-1.5, -0.5, 0.5, 1.5]) / math.sqrt(1.25)
    adv_a = reinforce_pp(rewards, torch.tensor([0, 0, 1, 1]), eps=0.0)
    adv_b = reinforce_pp(rewards, torch.tensor([0, 1, 2, 3]), eps=0.0)
    assert torch.allclose(adv_a, expected)
    assert torch.equal(adv_a, adv_b)
    sample = reinforce_pp(rewards, torch.zeros(4, dtype=torch.long), std="sample", eps=0.0)
    assert torch.allclose(sample, torch.tensor([-1.5, -0.5, 0.5, 1.5]) / math.sqrt(5 / 3))


def test_reinforce_pp_baseline_centres_by_group_then_scales_by_batch_std():
    # group 0 = [1, 0] -> centred [0.5, -0.5]; group 1 = [0, 0, 3] -> centred [-1, -1, 2]
    # centred values have mean 0 and population var (0.25+0.25+1+1+4)/5 = 1.3
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 3.0])
    group_ids = torch.tensor([0, 0, 1, 1, 1])
    adv = reinforce_pp_baseline(rewards, group_ids, eps=0.0)
    expected = torch.tensor([0.5, -0.5, -1.0, -1.0, 2.0]) / math.sqrt(1.3)
    assert torch.allclose(adv, expected)


@pytest.mark.parametrize("name", list(ADVANTAGE_ESTIMATORS))
def test_non_contiguous_group_ids_match_contiguous_after_permutation(name):
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 3, (12,), generator=gen).float()
    contiguous = torch.tensor([0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2])
    estimator = get_advantage_estimator(name)
    expected = estimator(rewards, contiguous)
    perm = torch.randperm(12, generator=gen)
    relabel = torch.tensor([907, -4, 31])  # arbitrary, unsorted ids
    adv = estimator(rewards[perm], relabel[contiguous[perm]])
    assert torch.allclose(adv, expected[perm], atol=1e-6)


def test_get_advantage_estimator_lists_valid_names_on_unknown_name():
    assert get_advantage_estimator("grpo") is grpo
    with pytest.raises(ValueError, match="dr_grpo, grpo, reinforce_pp"):
        get_advantage_estimator("ppo")


def test_mismatched_group_ids_shape_is_rejected():
    with pytest.raises(ValueError, match="group_ids has shape"):
        grpo(torch.zeros(4), torch.zeros(3, dtype=torch.long))


def test_zero_variance_groups_marks_rows_of_constant_groups():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.5])
    group_ids = torch.tensor([0, 0, 1, 1, 2, 2, 3])
    mask = zero_variance_groups(rewards, group_ids)
    assert mask.tolist() == [True, True, False, False, True, True, True]


def test_group_stats_splits_constant_groups_into_all_correct_and_all_wrong():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.5, 0.5])
    group_ids = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    stats = group_stats(rewards, group_ids)
    assert stats["num_groups"] == 4
    assert stats["zero_std_group_fraction"] == pytest.approx(0.75)
    assert stats["all_correct_group_fraction"] == pytest.approx(0.5)  # groups 0 and 3
    assert stats["all_wrong_group_fraction"] == pytest.approx(0.25)  # group 2
