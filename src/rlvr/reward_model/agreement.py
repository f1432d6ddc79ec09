"""How far a learned reward agrees with a rule verifier on the same completions, per step.

A learned reward (`rm:PATH`) can be gamed: the policy finds completions the reward model
scores high that the task does not reward. With a rule verifier in the composite beside it
(at weight 0 it only watches: `rm:runs/rm/final:1.0,exact_answer:0`), every step logs

    reward/agreement/<rule>  within-group ranking agreement of the learned score with the rule:
                             over every pair (i, j) of completions of one prompt with
                             rule_i > rule_j, the share with learned_i > learned_j (a tie in
                             the learned score counts 1/2). It is the AUC of the learned score
                             for the rule's outcome, pooled over the step's groups
                             (Mann-Whitney); 1 = the reward model ranks every rule-preferred
                             completion higher, 0.5 = chance, below 0.5 = it prefers what the
                             rule rejects.
    reward/agreement_pairs/<rule>  the number of such pairs (0: every group was all-equal
                             under the rule; the agreement is then left out)

Within groups, because GRPO's advantages are: a learned score that ranks a group's
completions as the rule does pushes the policy the same way, whatever its offset per prompt.
The learned component is the first whose name starts with `rm:`; every other component is a
rule. A step where a component failed on some completion, or whose component values do not
cover its completions in order (an environment's own rewards), logs no agreement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rlvr.rewards.spec import LEARNED_PREFIX


def ranking_agreement(
    learned: Sequence[float], rule: Sequence[float], group_size: int
) -> tuple[float, int]:
    """(agreement, pairs) of `learned` with `rule` over consecutive groups of `group_size`
    (module docstring); agreement is NaN when there are no pairs."""
    if len(learned) != len(rule) or group_size < 1 or len(rule) % group_size:
        raise ValueError(
            f"ranking_agreement: {len(learned)} learned and {len(rule)} rule values in groups "
            f"of {group_size}"
        )
    concordant, pairs = 0.0, 0
    for start in range(0, len(rule), group_size):
        lg, rg = learned[start : start + group_size], rule[start : start + group_size]
        for i in range(group_size):
            for j in range(group_size):
                if rg[i] > rg[j]:
                    pairs += 1
                    concordant += 1.0 if lg[i] > lg[j] else 0.5 if lg[i] == lg[j] else 0.0
    return (concordant / pairs if pairs else float("nan")), pairs


def learned_reward_agreement(
    components: Mapping[str, Sequence[float]],
    group_size: int,
    completions: int,
    failures: int = 0,
) -> dict[str, float]:
    """The step's reward/agreement/<rule> and reward/agreement_pairs/<rule> (module
    docstring); {} without a learned and a rule component, or when the values do not cover
    the `completions` scored in order (`failures` > 0 among them)."""
    learned = next((n for n in components if n.startswith(LEARNED_PREFIX)), None)
    if learned is None or failures or group_size < 1 or completions % group_size:
        return {}
    out: dict[str, float] = {}
    for rule, values in components.items():
        if rule.startswith(LEARNED_PREFIX):
            continue
        if len(values) != completions or len(components[learned]) != completions:
            continue
        agreement, pairs = ranking_agreement(components[learned], values, group_size)
        out[f"reward/agreement_pairs/{rule}"] = pairs
        if pairs:
            out[f"reward/agreement/{rule}"] = agreement
    return out
