"""The learned reward against the rule beside it: per-step agreement and the diagnostics."""

from __future__ import annotations

import math

import pytest

from rlvr.observe.diagnostics import (
    diagnose,
    learned_reward_disagreement,
    learned_reward_hacking,
)
from rlvr.reward_model.agreement import learned_reward_agreement, ranking_agreement

RM = "rm:/runs/rm/final"


def test_ranking_agreement_is_the_within_group_auc():
    # group 1: rule 1,0,0 and the learned score puts the correct one above one of the two
    # wrong ones (1 of 2 pairs); group 2: rule 1,1,0, both correct above the wrong (2 of 2)
    learned = [0.5, 0.9, 0.1, 3.0, 2.0, 1.0]
    rule = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    assert ranking_agreement(learned, rule, 3) == (3 / 4, 4)
    assert ranking_agreement([1.0, 1.0], [1.0, 0.0], 2) == (0.5, 1)  # a tie counts 1/2
    value, pairs = ranking_agreement([1.0, 2.0], [1.0, 1.0], 2)
    assert pairs == 0 and math.isnan(value)  # an all-equal group holds no pair
    with pytest.raises(ValueError, match="in groups of 4"):
        ranking_agreement([0.0] * 6, [0.0] * 6, 4)


def test_agreement_metrics_need_a_learned_and_a_rule_component_covering_the_step():
    components = {RM: [0.2, 0.8, 0.4, 0.3], "exact_answer": [0.0, 1.0, 1.0, 0.0]}
    out = learned_reward_agreement(components, group_size=2, completions=4)
    assert out == {
        "reward/agreement_pairs/exact_answer": 2,
        "reward/agreement/exact_answer": 1.0,
    }
    assert learned_reward_agreement({"exact_answer": [1.0, 0.0]}, 2, 2) == {}
    assert learned_reward_agreement(components, 2, 4, failures=1) == {}
    assert learned_reward_agreement(components, 2, 6) == {}  # values missing for some rows
    out = learned_reward_agreement({RM: [1.0, 2.0], "format": [1.0, 1.0]}, 2, 2)
    assert out == {"reward/agreement_pairs/format": 0}


def history(rm_means, rule_means, agreement=None):
    rows = []
    for step, (rm, rule) in enumerate(zip(rm_means, rule_means), start=1):
        row = {
            "step": step,
            "reward_mean": rm,
            f"reward/{RM}_mean": rm,
            f"reward/{RM}_std": 1.0,
            "reward/exact_answer_mean": rule,
            "reward/exact_answer_std": 0.4,
        }
        if agreement is not None:
            row["reward/agreement/exact_answer"] = agreement[step - 1]
        rows.append(row)
    return rows


def test_hacking_fires_when_the_learned_reward_rises_and_the_rule_does_not():
    hacked = history([0.1 * s for s in range(20)], [0.2] * 20)
    d = learned_reward_hacking(hacked)
    assert d is not None and d.name == "learned_reward_hacking" and d.step == 20
    assert RM in d.message and "exact_answer" in d.message
    assert "learned_reward_hacking" in [x.name for x in diagnose(hacked)]


def test_hacking_stays_quiet_on_a_healthy_run_a_short_one_and_a_solved_rule():
    healthy = history([0.1 * s for s in range(20)], [0.2 + 0.03 * s for s in range(20)])
    assert learned_reward_hacking(healthy) is None
    flat = history([0.0] * 20, [0.2] * 20)
    assert learned_reward_hacking(flat) is None
    assert learned_reward_hacking(history([0.1 * s for s in range(19)], [0.2] * 19)) is None
    solved = history([0.1 * s for s in range(20)], [0.99] * 20)
    assert learned_reward_hacking(solved) is None
    rule_only = [{"step": 1, "reward/exact_answer_mean": 0.5, "reward/exact_answer_std": 0.5}]
    assert learned_reward_hacking(rule_only) is None


def test_disagreement_fires_after_five_steps_below_chance():
    below = history([0.0] * 6, [0.5] * 6, agreement=[0.9, 0.4, 0.3, 0.4, 0.2, 0.45])
    d = learned_reward_disagreement(below)
    assert d is not None and d.metric == "reward/agreement/exact_answer" and d.value == 0.45
    healthy = history([0.0] * 6, [0.5] * 6, agreement=[0.9, 0.4, 0.3, 0.6, 0.2, 0.45])
    assert learned_reward_disagreement(healthy) is None
    assert learned_reward_disagreement(history([0.0] * 6, [0.5] * 6)) is None
