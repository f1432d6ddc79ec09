import random
import subprocess
import sys

import pytest
import torch

from rlvr.algorithms.gae import (
    TOKEN_ADVANTAGE_ESTIMATORS,
    explained_variance,
    gae,
    token_level_rewards,
    value_loss,
    whiten,
)

NAN = float("nan")
# the worked row: three sampled tokens, reward 1 at the end
VALUES = [0.5, 0.2, 0.7]
# gamma = 0.9, lam = 0.8 (γλ = 0.72), token rewards [0, 0, 1], V after the last token = 0:
#   δ_2 = 1 + 0.9·0   − 0.7 =  0.3
#   δ_1 = 0 + 0.9·0.7 − 0.2 =  0.43
#   δ_0 = 0 + 0.9·0.2 − 0.5 = −0.32
#   A_2 = 0.3
#   A_1 = 0.43 + 0.72·0.3   = 0.646
#   A_0 = −0.32 + 0.72·0.646 = −0.32 + 0.46512 = 0.14512
#   G = A + V = [0.64512, 0.846, 1.0]
WORKED_ADVANTAGES = [0.14512, 0.646, 0.3]
WORKED_RETURNS = [0.64512, 0.846, 1.0]


def _t(rows):
    return torch.tensor(rows, dtype=torch.float64)


# --- token_level_rewards ---------------------------------------------------------------------


def test_reward_sits_on_the_last_sampled_token_of_each_row():
    mask = _t([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]])
    out = token_level_rewards(_t([1.0, 2.0, 3.0, 4.0]), mask)
    # rows 0 and 1 end in padding, row 2 has a gap before its last sampled token (position 2),
    # the empty row gets nothing
    assert out.tolist() == [[0, 0, 1, 0], [0, 2, 0, 0], [0, 0, 3, 0], [0, 0, 0, 0]]


def test_reward_skips_inserted_tokens_at_the_end_of_a_row():
    out = token_level_rewards(_t([1.0]), _t([[1, 1, 0, 0]]))
    assert out.tolist() == [[0, 1, 0, 0]]


def test_kl_penalty_is_charged_at_every_sampled_token_and_ignored_elsewhere():
    # β = 0.5, kl = [0.1, 0.2, (inf: padding), 0.3] with mask [1, 1, 0, 1], R = 1:
    #   r = [−0.05, −0.1, 0, 1 − 0.15] = [−0.05, −0.1, 0, 0.85]
    kl = torch.tensor([[0.1, 0.2, float("inf"), 0.3]], dtype=torch.float64, requires_grad=True)
    out = token_level_rewards(_t([1.0]), _t([[1, 1, 0, 1]]), kl, kl_coef=0.5)
    assert torch.allclose(out, _t([[-0.05, -0.1, 0.0, 0.85]]))
    assert not out.requires_grad


def test_token_rewards_reject_a_kl_coef_without_kl_and_mismatched_shapes():
    with pytest.raises(ValueError, match="needs the per-token kl"):
        token_level_rewards(_t([1.0]), _t([[1, 1]]), kl_coef=0.1)
    with pytest.raises(ValueError, match="must be"):
        token_level_rewards(_t([1.0, 2.0]), _t([[1, 1]]))
    with pytest.raises(ValueError, match="kl has shape"):
        token_level_rewards(_t([1.0]), _t([[1, 1]]), _t([[0.1, 0.1, 0.1]]), kl_coef=0.1)


# --- gae: hand computations ------------------------------------------------------------------


def test_gamma_1_lam_1_gives_reward_minus_value_on_the_worked_row():
    # A_t = R − V_t = [0.5, 0.8, 0.3]; G_t = R = 1 everywhere
    rewards = token_level_rewards(_t([1.0]), _t([[1, 1, 1]]))
    adv, ret = gae(rewards, _t([VALUES]), _t([[1, 1, 1]]), gamma=1.0, lam=1.0)
    assert torch.allclose(adv, _t([[0.5, 0.8, 0.3]]))
    assert torch.allclose(ret, _t([[1.0, 1.0, 1.0]]))


def test_gamma_09_lam_08_matches_the_hand_computation():
    rewards = token_level_rewards(_t([1.0]), _t([[1, 1, 1]]))
    adv, ret = gae(rewards, _t([VALUES]), _t([[1, 1, 1]]), gamma=0.9, lam=0.8)
    assert torch.allclose(adv, _t([WORKED_ADVANTAGES]))
    assert torch.allclose(ret, _t([WORKED_RETURNS]))


def test_kl_in_the_token_rewards_enters_the_advantages():
    # β = 0.5, kl = [0.1, 0.2, 0.3] → r = [−0.05, −0.1, 0.85]; γ = λ = 1:
    #   A_t = Σ_{s≥t} r_s − V_t = [0.7 − 0.5, 0.75 − 0.2, 0.85 − 0.7] = [0.2, 0.55, 0.15]
    mask = _t([[1, 1, 1]])
    rewards = token_level_rewards(_t([1.0]), mask, _t([[0.1, 0.2, 0.3]]), kl_coef=0.5)
    adv, ret = gae(rewards, _t([VALUES]), mask, gamma=1.0, lam=1.0)
    assert torch.allclose(adv, _t([[0.2, 0.55, 0.15]]))
    assert torch.allclose(ret, _t([[0.7, 0.75, 0.85]]))


def test_a_masked_gap_mid_row_is_skipped_the_token_before_it_bootstraps_from_the_one_after():
    # The worked row with two inserted (tool) tokens between its 2nd and 3rd sampled token; their
    # values are garbage. Skipping them gives the worked row's numbers at positions 0, 1, 4:
    # δ_1 = 0 + 0.9 · V_4 − V_1 (V_4 = 0.7, the next *sampled* token), one discount step.
    # (OpenRLHF's rule would use V_2 = 0 and discount twice more across the gap.)
    mask = _t([[1, 1, 0, 0, 1]])
    values = _t([[0.5, 0.2, 9.0, NAN, 0.7]])
    rewards = token_level_rewards(_t([1.0]), mask)
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    a0, a1, a2 = WORKED_ADVANTAGES
    g0, g1, g2 = WORKED_RETURNS
    assert torch.allclose(adv, _t([[a0, a1, 0, 0, a2]]))
    assert torch.allclose(ret, _t([[g0, g1, 0, 0, g2]]))


def test_padding_is_ignored_even_when_it_holds_nan():
    mask = _t([[1, 1, 1, 0, 0]])
    values = _t([[*VALUES, NAN, NAN]])
    rewards = _t([[0, 0, 1, NAN, NAN]])
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    assert torch.allclose(adv, _t([[*WORKED_ADVANTAGES, 0, 0]]))
    assert torch.allclose(ret, _t([[*WORKED_RETURNS, 0, 0]]))


def test_an_empty_row_is_all_zero_and_leaves_the_others_alone():
    mask = _t([[1, 1, 1], [0, 0, 0]])
    rewards = token_level_rewards(_t([1.0, 5.0]), mask)
    assert rewards[1].tolist() == [0, 0, 0]
    adv, ret = gae(rewards, _t([VALUES, [NAN, 3.0, 4.0]]), mask, gamma=0.9, lam=0.8)
    assert adv[1].tolist() == [0, 0, 0] and ret[1].tolist() == [0, 0, 0]
    assert torch.allclose(adv[0], _t(WORKED_ADVANTAGES))


def test_gae_rejects_bad_shapes_and_coefficients():
    mask = _t([[1, 1]])
    with pytest.raises(ValueError, match="values has shape"):
        gae(_t([[0, 1]]), _t([[0, 1, 2]]), mask, gamma=1.0, lam=1.0)
    with pytest.raises(ValueError, match="gamma"):
        gae(_t([[0, 1]]), _t([[0, 1]]), mask, gamma=1.5, lam=1.0)
    with pytest.raises(ValueError, match="lam"):
        gae(_t([[0, 1]]), _t([[0, 1]]), mask, gamma=1.0, lam=-0.1)


def test_gae_outputs_carry_no_gradient_and_are_at_least_float32():
    values = torch.tensor([VALUES], dtype=torch.bfloat16, requires_grad=True)
    rewards = torch.tensor([[0.0, 0.0, 1.0]], requires_grad=True)
    adv, ret = gae(rewards, values, torch.ones(1, 3), gamma=0.9, lam=0.8)
    assert not adv.requires_grad and not ret.requires_grad
    assert adv.grad_fn is None and ret.grad_fn is None
    assert adv.dtype == torch.float32
    # the returns are a target: a value loss against them sends gradient only through V
    loss, _ = value_loss(values.float(), values.detach().float(), ret, torch.ones(1, 3), clip=None)
    loss.sum().backward()
    assert rewards.grad is None


# --- gae against CleanRL's loop --------------------------------------------------------------


def cleanrl_gae(rewards, values, dones, next_value, next_done, gamma, gae_lambda):
    """CleanRL ppo.py's advantage loop, in plain Python over lists indexed [t][env].

    dones[t][e] = 1 when step t of env e starts a new episode (the previous one ended at
    t − 1); next_done / next_value: the same for the step after the rollout.
    """
    num_steps, num_envs = len(rewards), len(rewards[0])
    advantages = [[0.0] * num_envs for _ in range(num_steps)]
    lastgaelam = [0.0] * num_envs
    for t in reversed(range(num_steps)):
        for e in range(num_envs):
            if t == num_steps - 1:
                nextnonterminal = 1.0 - next_done[e]
                nextvalues = next_value[e]
            else:
                nextnonterminal = 1.0 - dones[t + 1][e]
                nextvalues = values[t + 1][e]
            delta = rewards[t][e] + gamma * nextvalues * nextnonterminal - values[t][e]
            lastgaelam[e] = delta + gamma * gae_lambda * nextnonterminal * lastgaelam[e]
            advantages[t][e] = lastgaelam[e]
    returns = [[advantages[t][e] + values[t][e] for e in range(num_envs)] for t in range(num_steps)]
    return advantages, returns


def _random_rows(seed):
    """A batch of rows with padding and masked gaps, and each row's sampled-token episode."""
    rng = random.Random(seed)
    n, t_len = rng.randint(1, 6), rng.randint(1, 40)
    mask = torch.zeros(n, t_len, dtype=torch.float64)
    for i in range(n):
        length = rng.randint(0, t_len)  # 0: an empty row
        for t in range(length):
            mask[i, t] = 0.0 if rng.random() < 0.25 else 1.0  # inserted tokens
    values = torch.tensor([[rng.gauss(0, 1) for _ in range(t_len)] for _ in range(n)]).double()
    kl = torch.tensor([[rng.gauss(0, 0.1) for _ in range(t_len)] for _ in range(n)]).double()
    rewards = torch.tensor([float(rng.random() < 0.5) for _ in range(n)]).double()
    return rng, mask, values, kl, rewards


@pytest.mark.parametrize("seed", range(6))
def test_gae_matches_cleanrls_loop_over_each_rows_sampled_tokens(seed):
    rng, mask, values, kl, rewards = _random_rows(seed)
    gamma, lam = rng.choice([1.0, 0.99, 0.9]), rng.choice([1.0, 0.95, 0.5, 0.0])
    token_rewards = token_level_rewards(rewards, mask, kl, kl_coef=0.1)
    adv, ret = gae(token_rewards, values, mask, gamma=gamma, lam=lam)

    # CleanRL's layout: one environment per row, its steps the row's sampled tokens; rows of
    # other lengths are padded with steps of a following episode (done = 1 where they start),
    # and the episode is done after its last step (next_done = 1, so next_value is never read).
    n = mask.shape[0]
    episodes = [(mask[i] != 0).nonzero().flatten().tolist() for i in range(n)]
    steps = max(1, max(len(p) for p in episodes))
    r = [[0.0] * n for _ in range(steps)]
    v = [[0.0] * n for _ in range(steps)]
    dones = [[0.0] * n for _ in range(steps)]
    for e, positions in enumerate(episodes):
        for t, pos in enumerate(positions):
            r[t][e] = token_rewards[e, pos].item()
            v[t][e] = values[e, pos].item()
        for t in range(len(positions), steps):
            r[t][e], v[t][e] = rng.gauss(0, 1), rng.gauss(0, 1)  # the next episode's steps
        if len(positions) < steps:
            dones[len(positions)][e] = 1.0
    next_value = [rng.gauss(0, 1) for _ in range(n)]
    ref_adv, ref_ret = cleanrl_gae(r, v, dones, next_value, [1.0] * n, gamma, lam)

    expected_adv = torch.zeros_like(adv)
    expected_ret = torch.zeros_like(ret)
    for e, positions in enumerate(episodes):
        for t, pos in enumerate(positions):
            expected_adv[e, pos] = ref_adv[t][e]
            expected_ret[e, pos] = ref_ret[t][e]
    assert torch.allclose(adv, expected_adv, atol=1e-6, rtol=0)
    assert torch.allclose(ret, expected_ret, atol=1e-6, rtol=0)


@pytest.mark.parametrize("seed", range(3))
def test_lam_1_is_monte_carlo_lam_0_is_the_td_error_and_returns_are_a_plus_v(seed):
    _, mask, values, kl, rewards = _random_rows(seed)
    token_rewards = token_level_rewards(rewards, mask, kl, kl_coef=0.2)
    on = mask != 0
    for gamma in (1.0, 0.9):
        mc, mc_ret = gae(token_rewards, values, mask, gamma=gamma, lam=1.0)
        td, td_ret = gae(token_rewards, values, mask, gamma=gamma, lam=0.0)
        for i in range(mask.shape[0]):
            positions = on[i].nonzero().flatten().tolist()
            r = [token_rewards[i, p].item() for p in positions]
            v = [values[i, p].item() for p in positions] + [0.0]
            for k, pos in enumerate(positions):
                discounted = sum(gamma**j * r[k + j] for j in range(len(r) - k))
                assert mc[i, pos].item() == pytest.approx(discounted - v[k], abs=1e-9)
                assert td[i, pos].item() == pytest.approx(r[k] + gamma * v[k + 1] - v[k], abs=1e-9)
        for adv, ret in ((mc, mc_ret), (td, td_ret)):
            assert torch.allclose(ret[on], (adv + values)[on])
            assert torch.all(adv[~on] == 0) and torch.all(ret[~on] == 0)
    # γ = 1 with only the end reward: A_t = R − V_t
    plain = token_level_rewards(rewards, mask)
    mc, _ = gae(plain, values, mask, gamma=1.0, lam=1.0)
    assert torch.allclose(mc[on], (rewards[:, None] - values).expand_as(mask)[on])


# --- whiten ----------------------------------------------------------------------------------


def test_whiten_gives_masked_mean_0_std_1_and_zeros_at_masked_positions():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 9, generator=gen, dtype=torch.float64) * 3 + 2
    mask = (torch.rand(4, 9, generator=gen) < 0.6).double()
    x[mask == 0] = NAN
    y = whiten(x, mask)
    on = mask != 0
    assert y[on].mean().item() == pytest.approx(0.0, abs=1e-12)
    assert y[on].std(unbiased=False).item() == pytest.approx(1.0, abs=1e-6)
    assert torch.all(y[~on] == 0)


def test_whiten_without_shift_keeps_the_mean_and_scales_to_std_1():
    x = _t([[1.0, 2.0, 3.0, 100.0]])
    mask = _t([[1, 1, 1, 0]])
    # μ = 2, σ² = 2/3, y = (x − 2) / sqrt(2/3) + 2
    y = whiten(x, mask, shift_mean=False, eps=0.0)
    s = (2 / 3) ** 0.5
    assert torch.allclose(y, _t([[2 - 1 / s, 2.0, 2 + 1 / s, 0.0]]))


def test_whiten_of_a_single_token_or_equal_values_is_exactly_zero():
    assert whiten(_t([[0.3, NAN]]), _t([[1, 0]])).tolist() == [[0.0, 0.0]]
    # the float32 mean of three 0.9s is not exactly 0.9; eps-divided rounding must not leak
    same = torch.tensor([[0.9, 0.9], [0.9, 7.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert whiten(same, mask).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert torch.equal(whiten(same, mask, shift_mean=False), torch.tensor([[0.9, 0.9], [0.9, 0]]))
    assert whiten(_t([[1.0, 2.0]]), _t([[0, 0]])).tolist() == [[0.0, 0.0]]


def test_whiten_carries_no_gradient():
    x = torch.tensor([[1.0, 2.0, 4.0]], requires_grad=True)
    assert not whiten(x, torch.ones(1, 3)).requires_grad


# --- value_loss ------------------------------------------------------------------------------

# Five tokens and one padding position (NaN everywhere); V_old = 1, ε = 0.2, so
# clip(V) ∈ [0.8, 1.2]:
#   t  V    G    clip(V)  ½(V−G)²          ½(clip(V)−G)²     ½ max     clip larger
#   0  1.1  1.5  1.1      ½·0.16 = 0.08    0.08              0.08      no (equal)
#   1  1.6  0.5  1.2      ½·1.21 = 0.605   ½·0.49 = 0.245    0.605     no
#   2  0.5  2.0  0.8      ½·2.25 = 1.125   ½·1.44 = 0.72     1.125     no
#   3  1.5  2.0  1.2      ½·0.25 = 0.125   ½·0.64 = 0.32     0.32      yes
#   4  0.6  0.0  0.8      ½·0.36 = 0.18    ½·0.64 = 0.32     0.32      yes
# value_clip_fraction = 2/5; value_mean = 5.3/5 = 1.06;
# value_error = (0.4 + 1.1 + 1.5 + 0.5 + 0.6)/5 = 0.82;
# G − V = [0.4, −1.1, 1.5, 0.5, −0.6], mean 0.14, Σ(dev²) = 4.132, Var = 0.8264;
# G mean 1.2, Σ(dev²) = 3.3, Var = 0.66; explained variance = 1 − 0.8264/0.66 = −0.252121...
V = [1.1, 1.6, 0.5, 1.5, 0.6, NAN]
G = [1.5, 0.5, 2.0, 2.0, 0.0, NAN]
V_OLD = [1.0, 1.0, 1.0, 1.0, 1.0, NAN]
VMASK = [1, 1, 1, 1, 1, 0]


def test_value_loss_with_clip_matches_the_hand_computation():
    loss, stats = value_loss(_t([V]), _t([V_OLD]), _t([G]), _t([VMASK]), clip=0.2)
    assert torch.allclose(loss, _t([[0.08, 0.605, 1.125, 0.32, 0.32, 0.0]]))
    assert stats["value_clip_fraction"].item() == pytest.approx(0.4)
    assert stats["value_mean"].item() == pytest.approx(1.06)
    assert stats["value_error"].item() == pytest.approx(0.82)
    assert stats["explained_variance"].item() == pytest.approx(1 - 0.8264 / 0.66)
    assert all(s.dim() == 0 and not s.requires_grad for s in stats.values())


def test_value_loss_without_clip_is_half_the_squared_error():
    loss, stats = value_loss(_t([V]), _t([V_OLD]), _t([G]), _t([VMASK]), clip=None)
    assert torch.allclose(loss, _t([[0.08, 0.605, 1.125, 0.125, 0.18, 0.0]]))
    assert stats["value_clip_fraction"].item() == 0.0


def _independent_clipped_loss(v, v_old, g, eps):
    """0.5 · max over the two squared errors, written another way: the larger term chosen by
    comparison, the clip as min/max of bounds."""
    v_clip = torch.minimum(torch.maximum(v, v_old - eps), v_old + eps)
    a, b = 0.5 * (v - g) ** 2, 0.5 * (v_clip - g) ** 2
    return torch.where(b > a, b, a)


def test_value_loss_gradient_matches_autograd_of_an_independent_formula():
    values = _t([V]).requires_grad_(True)
    loss, _ = value_loss(values, _t([V_OLD]), _t([G]), _t([VMASK]), clip=0.2)
    (grad,) = torch.autograd.grad(loss.sum(), values)
    # d/dV ½(V − G)² = V − G where the unclipped term is larger; 0 where the clipped one is
    # (tokens 3 and 4: V outside [0.8, 1.2], the clip flat); 0 at padding
    assert torch.allclose(grad, _t([[-0.4, 1.1, -1.5, 0.0, 0.0, 0.0]]))

    gen = torch.Generator().manual_seed(1)
    v = torch.randn(3, 7, generator=gen, dtype=torch.float64)
    v_old = v + 0.3 * torch.randn(3, 7, generator=gen, dtype=torch.float64)
    g = torch.randn(3, 7, generator=gen, dtype=torch.float64)
    mask = (torch.rand(3, 7, generator=gen) < 0.8).double()
    v1 = v.clone().requires_grad_(True)
    v2 = v.clone().requires_grad_(True)
    loss, stats = value_loss(v1, v_old, g, mask, clip=0.1)
    reference = _independent_clipped_loss(v2, v_old, g, 0.1) * mask
    assert torch.allclose(loss, reference)
    (grad,) = torch.autograd.grad(loss.sum(), v1)
    (ref_grad,) = torch.autograd.grad(reference.sum(), v2)
    assert torch.allclose(grad, ref_grad)
    binding = (mask != 0) & ((v - v_old).abs() > 0.1)
    binding &= (v_old + (v - v_old).clamp(-0.1, 0.1) - g) ** 2 > (v - g) ** 2
    assert binding.any() and torch.all(grad[binding] == 0)
    assert stats["value_clip_fraction"].item() == pytest.approx(
        binding.sum().item() / mask.sum().item()
    )


def test_explained_variance_is_one_for_a_perfect_critic_and_zero_for_constant_returns():
    gen = torch.Generator().manual_seed(2)
    g = torch.randn(2, 5, generator=gen, dtype=torch.float64)
    mask = torch.ones(2, 5, dtype=torch.float64)
    _, stats = value_loss(g.clone(), g, g, mask, clip=None)
    assert stats["explained_variance"].item() == pytest.approx(1.0)
    _, stats = value_loss(torch.full_like(g, g.mean().item()), g, g, mask, clip=None)
    assert stats["explained_variance"].item() == pytest.approx(0.0, abs=1e-12)
    v = torch.randn(2, 5, generator=gen, dtype=torch.float64)
    _, stats = value_loss(v, v, g, mask, clip=None)
    expected = 1 - (g - v).var(unbiased=False) / g.var(unbiased=False)
    assert stats["explained_variance"].item() == pytest.approx(expected.item())
    _, stats = value_loss(v, v, torch.full_like(v, 0.9), mask, clip=None)
    assert stats["explained_variance"].item() == 0.0
    _, stats = value_loss(v, v, g, torch.zeros_like(mask), clip=0.2)
    assert all(s.item() == 0.0 for s in stats.values())


def test_value_loss_rejects_a_negative_clip_and_mismatched_shapes():
    with pytest.raises(ValueError, match="clip"):
        value_loss(_t([V]), _t([V_OLD]), _t([G]), _t([VMASK]), clip=-0.1)
    with pytest.raises(ValueError, match="returns has shape"):
        value_loss(_t([V]), _t([V_OLD]), _t([G[:3]]), _t([VMASK]), clip=0.2)


# --- registry and exports --------------------------------------------------------------------


def test_gae_is_registered_as_a_token_advantage_estimator_and_exported():
    import rlvr.algorithms as algorithms
    from rlvr.algorithms import ADVANTAGE_ESTIMATORS

    assert TOKEN_ADVANTAGE_ESTIMATORS == {"gae": gae}
    assert "gae" not in ADVANTAGE_ESTIMATORS  # needs a value model; not a config choice yet
    assert algorithms.gae is gae and algorithms.TOKEN_ADVANTAGE_ESTIMATORS is not None
    assert algorithms.whiten is whiten and algorithms.value_loss is value_loss


def test_gae_is_the_function_even_when_its_module_was_imported_first():
    code = (
        "import rlvr.algorithms.gae\n"
        "from rlvr.algorithms import gae\n"
        "assert callable(gae) and gae.__name__ == 'gae'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_explained_variance_is_zero_when_returns_differ_only_by_rounding():
    # gamma = lam = 1, one reward at the end: G_t = (R - V_t) + V_t, R only to the last bits
    gen = torch.Generator().manual_seed(3)
    values = torch.rand(3, 7, generator=gen) * 0.7
    mask = torch.ones(3, 7)
    # returns of 1 off by a few units in the last place, as (R - V) + V can leave them
    returns = 1.0 + torch.randint(-2, 3, (3, 7), generator=gen) * torch.finfo(torch.float32).eps
    assert not bool(returns.max() == returns.min())
    assert explained_variance(values, returns, mask).item() == 0.0
    # distinct returns: the population-variance formula
    rewards = torch.tensor([1.0, 0.0, 1.0])
    _, returns = gae(token_level_rewards(rewards, mask), values, mask)
    expected = 1 - (returns - values).var(unbiased=False) / returns.var(unbiased=False)
    assert explained_variance(values, returns, mask).item() == pytest.approx(expected.item())
