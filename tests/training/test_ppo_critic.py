"""PPO with a critic (algorithm.advantage=gae): the value model's passes, the advantages the
update uses, the critic's training, warm-up, LoRA, and checkpoints that resume bit for bit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlvr.algorithms import token_level_rewards, whiten
from rlvr.algorithms.gae import gae
from rlvr.cli import main
from rlvr.config import load_config
from rlvr.forward.logprobs import completion_values, final_hidden_states, make_token_batch
from rlvr.forward.paths import build_forward
from rlvr.models.loading import load_model
from rlvr.models.value import value_model_from_lm
from rlvr.training.critic import CriticAdvantages, critic_lr
from rlvr.training.grpo import GRPOTrainer

SMALL = [
    "algorithm.advantage=gae",
    "training.steps=4",
    "rollout.prompts_per_step=3",
    "rollout.group_size=4",
    "optimizer.warmup_steps=0",
    "optimizer.lr=3e-4",
    "optimizer.adam_eps=1e-5",
    "eval.size=0",
    "logging.samples_every=0",
]


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _value_model(seed: int = 0):
    cfg = load_config(None, [])
    torch.manual_seed(seed)
    value = value_model_from_lm(load_model(cfg.model, torch.device("cpu"), torch.float32))
    with torch.no_grad():  # a head that is not zero, so the values say something
        value.value_head.weight.normal_(0.0, 0.5)
        value.value_head.bias.fill_(0.25)
    return cfg, value


def _tokens():
    prompts = [torch.tensor([5, 6, 7]), torch.tensor([5, 6, 7]), torch.tensor([9, 10])]
    completions = [torch.tensor([11, 12, 13, 2]), torch.tensor([14, 2]), torch.tensor([15, 16, 2])]
    return make_token_batch(prompts, completions, pad_id=0)


def test_the_value_model_keeps_the_decoder_and_a_zero_fp32_head_without_an_lm_head():
    cfg = load_config(None, [])
    value = value_model_from_lm(load_model(cfg.model, torch.device("cpu"), torch.float32))
    assert value.get_output_embeddings() is None
    assert not any("lm_head" in name for name, _ in value.named_parameters())
    assert value.value_head.weight.dtype == torch.float32
    assert torch.count_nonzero(value.value_head.weight) == 0
    assert value.value_head.bias.item() == 0.0
    with pytest.raises(TypeError, match="value passes"):
        value(torch.zeros(1, 2, dtype=torch.long))


@pytest.mark.parametrize("budget", [0, 2048])
def test_values_are_the_head_on_the_decoder_state_that_predicts_each_completion_token(budget):
    cfg, value = _value_model()
    cfg = load_config(None, [f"training.token_budget={budget}"])
    tokens = _tokens()
    forward = build_forward(cfg, 0, 1.0)
    got = torch.zeros(tokens.completion_mask.shape)
    with torch.no_grad():
        for rows, unit in forward.micro_batches(tokens, torch.arange(len(tokens))):
            v, none = forward.values(value, unit)
            assert none is None
            got[rows, : v.shape[1]] = v
        # independently: each row alone, unpadded, through the decoder; the state at position
        # p predicts token p + 1, so completion token t of a P-token prompt is read at P - 1 + t
        prompts, completions = tokens.unpadded()
        for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
            ids = torch.cat([p, c])[None]
            hidden = final_hidden_states(value, input_ids=ids)[0]
            head = value.value_head
            want = hidden[len(p) - 1 : len(p) - 1 + len(c)] @ head.weight[0] + head.bias
            torch.testing.assert_close(got[i, : len(c)], want, rtol=1e-5, atol=1e-5)
            if budget:  # packed: nothing past a row's completion (padded: anything; masked)
                assert torch.all(got[i, len(c) :] == 0)
        padded = completion_values(value, tokens)
    on = tokens.completion_mask.bool()
    torch.testing.assert_close(padded[on], got[on], rtol=1e-5, atol=1e-5)


def test_the_update_uses_whitened_gae_over_the_critics_values_and_trains_the_critic(tmp_path):
    cfg = load_config(None, [*SMALL, "training.steps=1", "critic.lr=1e-3"])
    trainer = GRPOTrainer(cfg, tmp_path / "run", progress=False, log=lambda _m: None)
    source = trainer.advantages
    assert isinstance(source, CriticAdvantages)
    scored = trainer.collect(1)
    seen = {}
    estimate = source.estimate

    def spy(tokens, mask, rewards, group_ids, old_lp, ref_lp):
        out = estimate(tokens, mask, rewards, group_ids, old_lp, ref_lp)
        seen.update(tokens=tokens, mask=mask.clone(), rewards=rewards, values=source._batch[0])
        return out

    source.estimate = spy
    before = {k: v.clone() for k, v in source.critic.model.state_dict().items()}
    stats, advantages = trainer.update(scored)
    # an independent computation from the critic's own values: token rewards, GAE, whitening
    mask, values = seen["mask"], seen["values"]
    # V_old is the critic's pass over the batch (its starting head is zero)
    torch.testing.assert_close(values, completion_values(_zero_copy(source), seen["tokens"]) * mask)
    adv, _ = gae(token_level_rewards(seen["rewards"].float(), mask), values, mask)
    torch.testing.assert_close(advantages, whiten(adv, mask))
    assert advantages.shape == mask.shape
    assert stats["critic_loss"] > 0 and stats["critic_grad_norm"] > 0
    assert stats["critic_lr"] == pytest.approx(1e-3)
    after = source.critic.model.state_dict()
    assert not torch.equal(before["value_head.weight"], after["value_head.weight"])
    # the critic's first values were the zero head's: V_old = 0, so A = whiten(R at every token)
    assert torch.all(values == 0)


def _zero_copy(source):
    """The critic as it was before its first update: its decoder, a zero head."""
    import copy

    model = copy.deepcopy(source.critic.model)
    with torch.no_grad():
        model.value_head.weight.zero_()
        model.value_head.bias.zero_()
    return model


def test_critic_lr_defaults_to_ten_times_the_policys():
    assert critic_lr(load_config(None, ["optimizer.lr=2e-5"])) == pytest.approx(2e-4)
    assert critic_lr(load_config(None, ["critic.lr=1e-3"])) == 1e-3


def test_during_warm_up_only_the_critic_trains(tmp_path):
    out = tmp_path / "warm"
    args = ["train", "--quiet", "--output-dir", str(out), *SMALL, "critic.warmup_steps=2"]
    args += ["checkpoint.every=2"]
    assert main(args) == 0
    rows = [r for r in _rows(out) if r["step"] > 0]
    assert [r["policy_waits"] for r in rows] == [1, 1, 0, 0]
    assert all(r["critic_loss"] > 0 for r in rows)
    assert [r["grad_norm"] for r in rows[:2]] == [0.0, 0.0]  # no policy update was made
    assert all(r["grad_norm"] > 0 for r in rows[2:])
    # the policy's weights after the two warm-up steps are the starting ones
    from rlvr.config import load_config as lc
    from rlvr.models.loading import load_model as lm

    start = lm(lc(None, []).model, torch.device("cpu"), torch.float32).state_dict()
    at2 = load_file(out / "checkpoints" / "step-2" / "model.safetensors")
    for name, tensor in at2.items():
        assert torch.equal(tensor, start[name]), name


def test_an_interrupted_ppo_run_resumes_to_the_same_metrics_policy_and_critic(tmp_path):
    opts = [*SMALL, "checkpoint.every=2", "checkpoint.deterministic=true"]
    full = tmp_path / "full"
    assert main(["train", "--quiet", "--output-dir", str(full), *opts]) == 0
    cut = tmp_path / "cut"
    shutil.copytree(full, cut)
    shutil.rmtree(cut / "checkpoints" / "step-4")
    shutil.rmtree(cut / "final")
    assert main(["train", "--quiet", "--resume", str(cut)]) == 0
    assert _rows(full) == _rows(cut)  # deterministic mode: no timings in the rows
    a, b = (load_file(r / "final" / "model.safetensors") for r in (full, cut))
    assert all(torch.equal(a[k], b[k]) for k in a)
    state_a = torch.load(full / "checkpoints" / "step-4" / "trainer_state.pt", weights_only=False)
    state_b = torch.load(cut / "checkpoints" / "step-4" / "trainer_state.pt", weights_only=False)
    critic_a, critic_b = state_a["critic"], state_b["critic"]
    assert critic_a["fits"] == critic_b["fits"] == 4
    assert critic_a["model"].keys() == critic_b["model"].keys()
    assert all(torch.equal(critic_a["model"][k], critic_b["model"][k]) for k in critic_a["model"])


def test_a_grpo_checkpoint_does_not_resume_as_ppo(tmp_path, capsys):
    out = tmp_path / "grpo"
    base = [x for x in SMALL if not x.startswith("algorithm.advantage")]
    assert main(["train", "--quiet", "--output-dir", str(out), *base, "checkpoint.every=2"]) == 0
    shutil.rmtree(out / "checkpoints" / "step-4")
    code = main(
        [
            "train",
            "--quiet",
            "--resume",
            str(out),
            "--allow-config-change",
            "--config",
            str(out / "config.yaml"),
            "algorithm.advantage=gae",
        ]
    )
    assert code == 2
    assert "holds no critic" in capsys.readouterr().err


def test_a_lora_critic_trains_only_its_adapters_and_head(tmp_path):
    cfg = load_config(None, [*SMALL, "training.steps=1", "model.lora_rank=4"])
    trainer = GRPOTrainer(cfg, tmp_path / "lora", progress=False, log=lambda _m: None)
    critic = trainer.advantages.critic.model
    trainable = [n for n, p in critic.named_parameters() if p.requires_grad]
    assert "value_head.weight" in trainable and "value_head.bias" in trainable
    assert all("lora_" in n or n.startswith("value_head") for n in trainable)
    assert any("lora_" in n for n in trainable)
    stats, _ = trainer.update(trainer.collect(1))
    assert stats["critic_grad_norm"] > 0


def test_a_loss_that_needs_sequence_advantages_is_refused_with_gae(capsys):
    for bad in ("algorithm.policy_loss=gmpo", "algorithm.ratio_level=sequence"):
        assert main(["train", "algorithm.advantage=gae", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "per token" in err[0], err


def test_critic_options_without_gae_are_named_as_ineffective():
    from rlvr.config import config_warnings

    lines = config_warnings(load_config(None, ["critic.value_clip=0.2", "algorithm.lam=0.9"]))
    assert any(line.startswith("critic.value_clip=0.2 has no effect") for line in lines)
    assert any(line.startswith("algorithm.lam=0.9 has no effect") for line in lines)
