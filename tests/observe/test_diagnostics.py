"""Each diagnostic fires on a synthetic history that shows its failure, and not on a healthy one."""

import math

from rlvr.observe.diagnostics import diagnose


def _healthy(n: int = 30) -> list[dict]:
    return [
        {
            "step": i + 1,
            "entropy": 0.8,
            "zero_std_group_fraction": 0.3,
            "completion_length_mean": 50 + i * 0.5,
            "reward_mean": 0.2 + 0.01 * i,
            "clip_fraction": 0.01,
            "loss": 0.0,
            "grad_norm": 0.5,
        }
        for i in range(n)
    ]


def _names(history):
    return {d.name for d in diagnose(history)}


def test_a_healthy_run_raises_nothing():
    assert _names(_healthy()) == set()


def test_nan_loss():
    h = _healthy()
    h[-1]["loss"] = math.nan
    assert "non_finite" in _names(h)


def test_entropy_below_floor_and_entropy_falling_fast():
    h = _healthy()
    h[-1]["entropy"] = 0.001
    assert "entropy_collapse" in _names(h)
    h = _healthy()
    for i, row in enumerate(h[-10:]):
        row["entropy"] = 0.8 * (0.8 ** (i + 1))
    assert "entropy_collapse" not in _names(h)  # reward still rising: converging, not collapse
    for row in h[-11:]:
        row["reward_mean"] = 0.4
    assert "entropy_collapse" in _names(h)


def test_most_groups_without_variance_for_several_steps():
    h = _healthy()
    for row in h[-5:]:
        row["zero_std_group_fraction"] = 0.95
    assert "zero_variance_groups" in _names(h)
    h[-1]["zero_std_group_fraction"] = 0.5
    assert "zero_variance_groups" not in _names(h)


def test_length_inflating_while_reward_is_flat():
    h = _healthy()
    for i, row in enumerate(h):
        row["completion_length_mean"] = 50 * (1.05**i)
        row["reward_mean"] = 0.3
    assert "length_inflation" in _names(h)


def test_training_reward_rising_while_heldout_accuracy_falls():
    h = _healthy()
    h[9]["eval_accuracy"] = 0.5
    for row in h[25:]:
        row["reward_mean"] = 0.9
    h[-1]["eval_accuracy"] = 0.45
    assert "reward_hacking" in _names(h)
    h[-1]["eval_accuracy"] = 0.7
    assert "reward_hacking" not in _names(h)


def test_clip_fraction_persistently_high():
    h = _healthy()
    for row in h[-5:]:
        row["clip_fraction"] = 0.4
    assert "clip_fraction_high" in _names(h)


def test_off_policy_drift_needs_five_steps_of_clipped_importance_weights():
    h = _healthy()
    for row in h:
        row["tis_clip_fraction"] = 0.001
    assert "off_policy_drift" not in _names(h)
    for row in h[-4:]:
        row["tis_clip_fraction"] = 0.2
    assert "off_policy_drift" not in _names(h)  # four steps: not yet
    h[-5]["tis_clip_fraction"] = 0.2
    assert "off_policy_drift" in _names(h)


def test_tool_timeouts_and_errors_need_three_steps_with_enough_calls():
    h = _healthy()
    for row in h:
        row.update(tool_calls=20, tool_timeout_fraction=0.0, tool_error_fraction=0.1)
    assert not _names(h) & {"tool_timeouts", "tool_errors"}
    for row in h[-2:]:
        row["tool_timeout_fraction"] = 0.5
    assert "tool_timeouts" not in _names(h)  # two steps: not yet
    h[-3]["tool_timeout_fraction"] = 0.5
    assert "tool_timeouts" in _names(h)
    for row in h[-3:]:
        row.update(tool_timeout_fraction=0.0, tool_error_fraction=0.9)
    assert "tool_errors" in _names(h)
    h[-1]["tool_calls"] = 2  # too few calls at the latest step to judge
    assert "tool_errors" not in _names(h)
