"""The names of the algorithms, their papers and the config options each one reads.

Standard library only (no torch): `rlvr.config` takes its `choices` from here, and the registries
in this package (`ADVANTAGE_ESTIMATORS`, `POLICY_LOSSES`) are checked against it by a test, so a
name is declared once.

`options` of a spec is the tuple of `AlgorithmConfig` field names the function takes as keyword
arguments of the same name. A trainer calls every variant the same way:

    spec = POLICY_LOSS_SPECS[cfg.algorithm.policy_loss]
    fn = get_policy_loss(spec.name)
    per_token, stats = fn(logprobs, old_logprobs, advantages, mask,
                          **{k: getattr(cfg.algorithm, k) for k in spec.options})

and `rlvr.config.config_warnings` names an option that is set while a variant that does not
read it is selected.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AlgorithmSpec:
    """One registered function: its config name, what it does, where it comes from.

    group_relative (estimators): compares the completions of a prompt with each other, so it
        needs rollout.group_size >= 2.
    couples_rows (policy losses): the loss of a token depends on other rows of the micro-batch (a
        statistic over all its completion tokens). The result then depends on how rows are split
        into micro-batches, and a row whose advantage is 0 still changes the other rows' loss, so
        a trainer must not skip it.
    needs_critic (estimators): learns a value model and gives every token its own advantage
        (registered in `TOKEN_ADVANTAGE_ESTIMATORS`, signature (token_rewards [N, T], values
        [N, T], mask [N, T], **opts) -> (advantages, returns)); the trainer builds a critic.
    sequence_advantages (policy losses): weighs one ratio per sequence, so it takes one
        advantage per sequence only (not a critic's per-token advantages).
    """

    name: str
    summary: str
    paper: str
    options: tuple[str, ...]
    group_relative: bool = False
    couples_rows: bool = False
    needs_critic: bool = False
    sequence_advantages: bool = False


def _by_name(*specs: AlgorithmSpec) -> dict[str, AlgorithmSpec]:
    return {s.name: s for s in specs}


ADVANTAGE_ESTIMATOR_SPECS: dict[str, AlgorithmSpec] = _by_name(
    AlgorithmSpec(
        "grpo",
        "(r_i - mean_group(r)) / (std_group(r) + eps)",
        "Shao et al. 2024, DeepSeekMath (arXiv:2402.03300)",
        ("std", "eps"),
        group_relative=True,
    ),
    AlgorithmSpec(
        "dr_grpo",
        "r_i - mean_group(r), no std division",
        "Liu et al. 2025, Understanding R1-Zero-Like Training (arXiv:2503.20783)",
        (),
        group_relative=True,
    ),
    AlgorithmSpec(
        "rloo",
        "r_i - mean of the other rewards of the group (leave-one-out baseline)",
        "Ahmadian et al. 2024, Back to Basics (arXiv:2402.14740)",
        (),
        group_relative=True,
    ),
    AlgorithmSpec(
        "reinforce_pp",
        "(r_i - mean_batch(r)) / (std_batch(r) + eps), groups ignored",
        "Hu 2025, REINFORCE++ (arXiv:2501.03262)",
        ("std", "eps"),
    ),
    AlgorithmSpec(
        "reinforce_pp_baseline",
        "group-mean baseline, then batch-std normalisation",
        "Hu 2025, REINFORCE++ (arXiv:2501.03262)",
        ("std", "eps"),
        group_relative=True,
    ),
    AlgorithmSpec(
        "gae",
        "per token: GAE over a learned value model V, A_t = sum_k (gamma lam)^k delta_t+k (PPO)",
        "Schulman et al. 2016, GAE (arXiv:1506.02438); Ouyang et al. 2022 (arXiv:2203.02155)",
        ("gamma", "lam"),
        needs_critic=True,
    ),
)

POLICY_LOSS_SPECS: dict[str, AlgorithmSpec] = _by_name(
    AlgorithmSpec(
        "clip",
        "clipped surrogate: PPO/GRPO, DAPO clip-higher, dual clip; GSPO with ratio_level=sequence",
        "Schulman et al. 2017 (arXiv:1707.06347); Zheng et al. 2025, GSPO (arXiv:2507.18071)",
        ("clip_ratio_low", "clip_ratio_high", "dual_clip_c", "ratio_level"),
    ),
    AlgorithmSpec(
        "cispo",
        "-sg(clip(r_t)) * A * log pi(y_t): the importance weight is clipped, never the gradient",
        "MiniMax 2025, MiniMax-M1 (arXiv:2506.13585), eq. 4-5",
        ("cispo_clip_low", "cispo_clip_high"),
    ),
    AlgorithmSpec(
        "gmpo",
        "geometric mean of token ratios clipped in log space, one ratio per sequence",
        "Zhao et al. 2025, Geometric-Mean Policy Optimization (arXiv:2507.20673)",
        ("gmpo_clip_low", "gmpo_clip_high"),
        sequence_advantages=True,
    ),
    AlgorithmSpec(
        "clip_cov",
        "clipped surrogate; a random few tokens of high covariance(log pi, A) get no gradient",
        "Cui et al. 2025, The Entropy Mechanism of RL for Reasoning LMs (arXiv:2505.22617)",
        ("clip_ratio_low", "clip_ratio_high", "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub"),
        couples_rows=True,
    ),
    AlgorithmSpec(
        "kl_cov",
        "-A * r_t, plus kl_cov_coef * |log r_t| on the top tokens by covariance(log pi, A)",
        "Cui et al. 2025, The Entropy Mechanism of RL for Reasoning LMs (arXiv:2505.22617)",
        ("kl_cov_ratio", "kl_cov_coef"),
        couples_rows=True,
    ),
)

ADVANTAGE_ESTIMATOR_NAMES: tuple[str, ...] = tuple(ADVANTAGE_ESTIMATOR_SPECS)
POLICY_LOSS_NAMES: tuple[str, ...] = tuple(POLICY_LOSS_SPECS)
AGGREGATION_MODES: tuple[str, ...] = (
    "seq_mean_token_mean",
    "token_mean",
    "seq_mean_token_sum_norm",
)
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")
STD_KINDS: tuple[str, ...] = ("population", "sample")
RATIO_LEVELS: tuple[str, ...] = ("token", "sequence")
# the per-token weights of a batch another policy sampled (rlvr.algorithms.importance)
TOKEN_CORRECTION_NAMES: tuple[str, ...] = ("tis", "icepop")
