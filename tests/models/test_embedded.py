import json
import random

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import rlvr.models.embedded as embedded
from rlvr.data.tasks.addition import AdditionTask
from rlvr.markup import THINK_CLOSE, THINK_OPEN
from rlvr.models.embedded import build, embedded_model_path
from rlvr.rewards.exact import exact_answer_reward, extract_final_answer


@pytest.fixture(scope="module")
def model_dir():
    return embedded_model_path()


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def model(model_dir):
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def test_the_shipped_weights_are_used_and_fit_in_20_mb(model_dir):
    assert model_dir == embedded._HERE / "base"
    size = sum(f.stat().st_size for f in model_dir.iterdir() if f.is_file())
    assert size <= 20 * 2**20


def test_the_small_sibling_is_shipped_smaller_with_the_same_tokenizer(model_dir):
    from transformers import AutoModelForCausalLM

    small_dir = embedded_model_path("small")
    assert small_dir == embedded._HERE / "small"
    assert (small_dir / "tokenizer.json").read_text() == (model_dir / "tokenizer.json").read_text()
    small = AutoModelForCausalLM.from_pretrained(small_dir)
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    n_small = sum(p.numel() for p in small.parameters())
    n_base = sum(p.numel() for p in base.parameters())
    assert n_small * 3 < n_base
    info = json.loads((small_dir / "build_info.json").read_text())
    assert info["build_config"]["hidden_size"] == 64
    assert info["heldout_greedy"]["think_accuracy"] >= 0.95  # it can execute traces


def test_build_info_records_seed_and_base_metrics(model_dir):
    info = json.loads((model_dir / "build_info.json").read_text())
    assert info["seed"] == 0
    assert info["base_metrics"]["greedy_accuracy"] <= 0.4
    assert info["base_metrics"]["forced_think_greedy_accuracy"] >= 0.9


def test_tokenizer_is_a_base_model_tokenizer_with_eos_and_pad(tokenizer):
    assert tokenizer.eos_token == "<eos>" and tokenizer.pad_token == "<pad>"
    assert tokenizer.eos_token_id != tokenizer.pad_token_id
    assert not getattr(tokenizer, "chat_template", None)


def test_tokenizer_round_trips_text_and_keeps_think_tags_as_single_tokens(tokenizer):
    task = AdditionTask()
    text = task.format_prompt(347, 285) + task.reasoning_completion(347, 285)
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    for tag in (THINK_OPEN, THINK_CLOSE):
        assert len(tokenizer.encode(tag)) == 1
    odd = "Q: 12 + 3 =\n A: 15, ok?"
    assert tokenizer.decode(tokenizer.encode(odd)) == odd
    with_eos = ids + [tokenizer.eos_token_id]
    assert tokenizer.decode(with_eos, skip_special_tokens=True) == text


def test_shipped_tokenizer_matches_the_build_recipe(tokenizer):
    assert build.build_tokenizer().get_vocab() == tokenizer.get_vocab()


def test_generation_config_stops_at_eos(model, tokenizer):
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id
    assert model.config.vocab_size == len(tokenizer)


def _greedy(model, tokenizer, prompts: list[str]) -> list[str]:
    ids = torch.tensor([tokenizer.encode(p) for p in prompts])
    with torch.no_grad():
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=48
        )
    return tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)


def test_greedy_generation_gives_a_parsable_direct_answer(model, tokenizer):
    samples = AdditionTask().heldout(16)
    completions = _greedy(model, tokenizer, [s["prompt"] for s in samples])
    assert all(extract_final_answer(c) is not None for c in completions)


def test_forced_think_traces_are_correct_on_heldout_problems(model, tokenizer):
    samples = AdditionTask().heldout(32)
    completions = _greedy(model, tokenizer, [s["prompt"] + THINK_OPEN for s in samples])
    rewards = [exact_answer_reward(THINK_OPEN + c, s) for c, s in zip(completions, samples)]
    assert sum(rewards) / len(rewards) >= 0.85


def test_pretraining_batches_only_train_on_completions():
    tokenizer = build.build_tokenizer()
    task = AdditionTask()
    input_ids, labels = build.make_batch(task, tokenizer, random.Random(0), 8, 0.5)
    for row, label in zip(input_ids.tolist(), labels.tolist()):
        prompt_len = row.index(tokenizer.convert_tokens_to_ids("="), 4) + 1
        assert all(t == -100 for t in label[:prompt_len])
        completion = [t for t in label if t != -100]
        assert completion[-1] == tokenizer.eos_token_id
        assert completion == row[prompt_len : prompt_len + len(completion)]


def test_missing_weights_are_built_into_the_cache(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(embedded, "_HERE", tmp_path / "absent")
    monkeypatch.setattr(embedded.Path, "home", lambda: tmp_path)
    monkeypatch.setattr(build, "main", lambda argv: calls.append(argv))
    path = embedded_model_path()
    assert path == tmp_path / ".cache" / "rlvr" / f"embedded-{embedded.EMBEDDED_MODEL_VERSION}"
    assert calls == [["--out", str(path), "--set", "head_dim=32"]]  # as the shipped base
    small = embedded_model_path("small")
    version = embedded.EMBEDDED_MODEL_VERSION
    assert small == tmp_path / ".cache" / "rlvr" / f"embedded-small-{version}"
    assert calls[1] == ["--out", str(small), *embedded.VARIANTS["small"]]
    with pytest.raises(ValueError, match="unknown embedded model variant"):
        embedded_model_path("large")
