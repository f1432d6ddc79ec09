"""One update per batch: π_old is the update's own forward, detached, also when another policy
sampled the batch (a stale or lower-precision sampler): the sampler's drift and the truncated
importance weights come from that forward, and no log-prob pass runs before the update. The
update equals the one with a separate pass (forced here by an MIS cap no sequence reaches)."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.config import load_config
from rlvr.rollout import RolloutBatch
from rlvr.training.grpo import GRPOTrainer, ScoredRollouts
from rlvr.training.update import SamplerDriftError

TINY = [
    "rollout.prompts_per_step=3",
    "rollout.group_size=4",
    "eval.size=0",
    "optimizer.lr=1e-3",
    "optimizer.warmup_steps=0",
    "optimizer.adam_eps=1e-5",
    "rollout.off_policy_steps=1",  # the sampler is one step behind: its log-probs are corrected
    "training.skip_zero_advantage=false",
]
REWARDS = [1.0, 0.0, 0.5, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.25, 0.0, 1.0]


def _trainer(tmp_path, name: str, *overrides: str) -> GRPOTrainer:
    run = tmp_path / name
    run.mkdir()
    cfg = load_config(None, [*TINY, *overrides])
    return GRPOTrainer(cfg, run, progress=False, log=lambda _m: None)


def _scored(trainer: GRPOTrainer, seed: int = 3, staleness: int = 1) -> ScoredRollouts:
    """12 ragged rows whose sampler log-probs are the learner's plus noise."""
    g = torch.Generator().manual_seed(seed)
    vocab, eos = len(trainer.tokenizer), trainer.tokenizer.eos_token_id
    prompts = [
        torch.randint(3, vocab, (int(k),), generator=g)
        for k in torch.randint(1, 12, (3,), generator=g)
    ]
    completions = [
        torch.cat([torch.randint(3, vocab, (k,), generator=g), torch.tensor([eos])])
        for k in torch.randint(1, 16, (12,), generator=g).tolist()
    ]
    batch = RolloutBatch(
        prompt_ids=[prompts[i // 4] for i in range(12)],
        completion_ids=completions,
        completion_text=["x"] * 12,
        logprobs=[torch.zeros(len(c)) for c in completions],
        finish_reason=["eos"] * 12,
        prompt_index=[i // 4 for i in range(12)],
    )
    scored = ScoredRollouts(batch, [{}] * 12, torch.tensor(REWARDS), 0)
    scored.staleness = staleness
    # the learner's own log-probs, moved by up to 0.3 nats: a sampler that is close, not equal
    from rlvr.forward.logprobs import make_token_batch

    tokens = make_token_batch(
        batch.prompt_ids, batch.completion_ids, trainer.tokenizer.pad_token_id
    )
    own = trainer.learner.logprobs(trainer.model, tokens)
    for i, c in enumerate(completions):
        noise = (torch.rand(len(c), generator=g) - 0.5) * 0.6
        batch.logprobs[i] = own[i, : len(c)] + noise
    return scored


def _update(trainer: GRPOTrainer, scored: ScoredRollouts):
    passes = []
    inner = trainer.learner.logprobs
    trainer.learner.logprobs = lambda *a, **k: passes.append(1) or inner(*a, **k)  # type: ignore[method-assign]
    stats, advantages = trainer.update(scored)
    weights = {k: p.detach().clone() for k, p in trainer.model.named_parameters()}
    return stats, advantages, weights, len(passes)


@pytest.mark.parametrize(
    "overrides",
    [[], ["algorithm.token_correction=icepop"], ["training.token_budget=0"]],
    ids=["tis", "icepop", "padded"],
)
def test_the_folded_update_equals_the_one_with_a_separate_pass(tmp_path, overrides):
    folded = _trainer(tmp_path, "folded", *overrides)
    separate = _trainer(tmp_path, "separate", "algorithm.mis_cap=1e6", *overrides)
    s_f, a_f, w_f, passes_f = _update(folded, _scored(folded))
    s_s, a_s, w_s, passes_s = _update(separate, _scored(separate))
    assert passes_f == 0 and passes_s == 1  # the fold saves the pass before the update
    assert torch.equal(a_f, a_s)
    assert s_f["rollout_logprob_drift_mean"] > 0.05  # the noise is seen, from the same forward
    keys = ["loss", "grad_norm", "rollout_logprob_drift_mean", "rollout_logprob_drift_max"]
    keys += ["rollout_mismatch_kl"] + [k for k in s_s if k.startswith(("tis_", "icepop_"))]
    assert len(keys) > 6
    for key in keys:
        assert math.isclose(s_f[key], s_s[key], rel_tol=1e-4, abs_tol=1e-6), (key, s_f, s_s)
    for name, w in w_s.items():
        torch.testing.assert_close(w_f[name], w, rtol=0, atol=2e-5, msg=name)


def test_a_separate_pass_stays_where_the_update_needs_pi_old_before_it(tmp_path):
    for overrides in (["training.ppo_epochs=2"], ["algorithm.mis_cap=2.0"]):
        t = _trainer(tmp_path, overrides[0].split("=")[0], *overrides)
        *_, passes = _update(t, _scored(t))
        assert passes == 1, overrides


def test_drift_measured_by_the_update_still_stops_a_run_sampled_with_wrong_weights(tmp_path):
    t = _trainer(tmp_path, "drift")
    t.drift_limit = 0.05  # as with a lower-precision sampler (rollout.max_logprob_drift)
    with pytest.raises(SamplerDriftError, match="rollout_logprob_drift_mean"):
        t.update(_scored(t, staleness=0))
    t.update(_scored(t, staleness=1))  # a stale batch drifts by design: not checked
