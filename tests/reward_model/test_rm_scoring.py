"""`reward.verifier=rm:PATH`: scores equal the model's own forward, weights combine with rule
verifiers, and where the model cannot be reached the error is one line."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from rlvr.config import Config
from rlvr.errors import ConfigError
from rlvr.reward_model.scoring import (
    RewardModelScorer,
    learned_reward_check,
    learned_reward_resolver,
    z_scores,
)
from rlvr.rewards.batched import BatchedReward
from rlvr.rewards.compose import CompositeVerifier, build_verifier
from rlvr.rewards.scoring import Scorer

CPU = torch.device("cpu")
SAMPLES = [
    {"prompt": "12+30=", "answer": "42"},
    {"prompt": "12+30=", "answer": "42"},
    {"prompt": "7+1=", "answer": "8"},
]
TEXTS = ["<think>2+0+0=02,1+3+0=04</think>42", "43", "8"]


def direct_scores(path, texts, samples) -> list[float]:
    """The HF model's own forward, one unpadded sequence at a time: prompt + completion + EOS."""
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    out = []
    for text, sample in zip(texts, samples):
        ids = tok(sample["prompt"] + text)["input_ids"] + [tok.eos_token_id]
        with torch.no_grad():
            out.append(float(model(input_ids=torch.tensor([ids])).logits[0, 0]))
    return out


def test_rm_scores_equal_a_direct_model_call_in_a_weighted_composite(tiny_rm_dir):
    cfg = Config()
    cfg.reward.rm_batch_size = 2  # three sequences of unequal length: padding is exercised
    spec = f"rm:{tiny_rm_dir}:2.0,exact_answer:0.5"
    verifier = build_verifier(spec, resolve=learned_reward_resolver(cfg, CPU))
    assert isinstance(verifier, CompositeVerifier)
    assert list(verifier.components) == [f"rm:{tiny_rm_dir}", "exact_answer"]
    scorer = Scorer(verifier)
    rewards, failures = scorer(TEXTS, SAMPLES)
    assert failures == 0
    expected = direct_scores(tiny_rm_dir, TEXTS, SAMPLES)
    components = scorer.pop_components()
    torch.testing.assert_close(components[f"rm:{tiny_rm_dir}"], expected, rtol=1e-5, atol=1e-5)
    assert components["exact_answer"] == [1.0, 0.0, 1.0]
    torch.testing.assert_close(
        rewards,
        [2.0 * e + 0.5 * x for e, x in zip(expected, [1.0, 0.0, 1.0])],
        rtol=1e-5,
        atol=1e-5,
    )
    assert len(set(expected)) == 3  # the scores tell the completions apart


def test_a_single_rm_spec_is_a_one_component_sum_named_by_its_item(tiny_rm_dir):
    verifier = build_verifier(f"rm:{tiny_rm_dir}", resolve=learned_reward_resolver(Config(), CPU))
    assert isinstance(verifier, CompositeVerifier)
    ((name, (component, weight)),) = verifier.components.items()
    assert name == f"rm:{tiny_rm_dir}" and weight == 1.0 and isinstance(component, BatchedReward)


def test_batch_normalisation_z_scores_the_round(tiny_rm_dir):
    cfg = Config()
    cfg.reward.rm_normalize = "batch"
    verifier = build_verifier(f"rm:{tiny_rm_dir}", resolve=learned_reward_resolver(cfg, CPU))
    rewards, _ = Scorer(verifier)(TEXTS, SAMPLES)
    expected = z_scores(direct_scores(tiny_rm_dir, TEXTS, SAMPLES))
    torch.testing.assert_close(rewards, expected, rtol=1e-5, atol=1e-5)
    t = torch.tensor(rewards)
    assert abs(float(t.mean())) < 1e-6 and float(t.std(unbiased=False)) == pytest.approx(1.0)
    assert z_scores([3.0, 3.0]) == [0.0, 0.0] and z_scores([]) == []


def test_chat_layout_scores_the_conversation(tiny_rm_dir, char_tokenizer):
    model = AutoModelForSequenceClassification.from_pretrained(tiny_rm_dir)
    tok = char_tokenizer
    tok.chat_template = "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}"
    try:
        scorer = RewardModelScorer(model, tok)  # nothing recorded: chat, as the template exists
        assert scorer.layout == "chat"
        (score,) = scorer(["hi"], ["yo"], system=["be brief"])
        ids = tok("s:be brief\nu:hi\na:yo\n")["input_ids"]
        with torch.no_grad():
            direct = float(model(input_ids=torch.tensor([ids])).logits[0, 0])
        assert score == pytest.approx(direct, abs=1e-5)
    finally:
        tok.chat_template = None


def test_without_a_resolver_rm_is_a_one_line_config_error(tiny_rm_dir):
    with pytest.raises(ConfigError, match="learned reward model, which only rlvr train") as e:
        build_verifier(f"rm:{tiny_rm_dir}:1.0,exact_answer:0")
    assert "\n" not in str(e.value)


def test_worker_processes_cannot_score_an_rm_component(tiny_rm_dir):
    cfg = Config()
    cfg.reward.workers = 2
    with pytest.raises(ConfigError, match="reward.workers: 2 worker processes cannot score"):
        build_verifier(f"rm:{tiny_rm_dir}", workers=2, resolve=learned_reward_resolver(cfg, CPU))
    # whatever the resolver: a component it builds cannot reach the workers
    with pytest.raises(ConfigError, match="reward.workers: .* set reward.workers=0"):
        build_verifier("x:1,exact_answer:0", workers=2, resolve=lambda t: lambda c, s: 0.0)
    cfg.reward.workers, cfg.distributed.ray = 0, True
    with pytest.raises(ConfigError, match="distributed.ray: Ray reward actors cannot score"):
        build_verifier(f"rm:{tiny_rm_dir}", resolve=learned_reward_resolver(cfg, CPU))


def test_a_policy_directory_is_not_a_reward_model(tiny_model_dir, tmp_path):
    resolve = learned_reward_check(Config())
    with pytest.raises(ConfigError, match="not a reward model .config.json architectures: Llama"):
        build_verifier(f"rm:{tiny_model_dir}", resolve=resolve)
    with pytest.raises(ConfigError, match="directory .*missing not found"):
        build_verifier(f"rm:{tmp_path / 'missing'}:1.0", resolve=resolve)
    with pytest.raises(ConfigError, match="has no config.json"):
        build_verifier(f"rm:{tmp_path}", resolve=resolve)
    two = tmp_path / "two"
    two.mkdir()
    (two / "config.json").write_text(
        '{"architectures": ["LlamaForSequenceClassification"], "id2label": {"0": "a", "1": "b"}}'
    )
    with pytest.raises(ConfigError, match="a classifier with 2 labels"):
        build_verifier(f"rm:{two}", resolve=resolve)


def test_the_check_resolver_loads_nothing_and_keeps_the_other_items(tiny_rm_dir):
    verifier = build_verifier(
        f"rm:{tiny_rm_dir}:1.0,exact_answer:0", resolve=learned_reward_check(Config())
    )
    assert isinstance(verifier, CompositeVerifier)
    placeholder = verifier.components[f"rm:{tiny_rm_dir}"][0]
    assert isinstance(placeholder, BatchedReward)
    with pytest.raises(RuntimeError, match="placeholder"):
        placeholder.rewards(["1"], [{"prompt": "p"}])
