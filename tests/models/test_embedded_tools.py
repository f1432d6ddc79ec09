import json

import pytest
import torch
from transformers import AutoModelForCausalLM

import rlvr.models.embedded as embedded
from rlvr.config import load_config
from rlvr.data.tasks.multiplication import MultiplicationTask, observation
from rlvr.models.embedded import build, tools_corpus
from rlvr.models.loading import load_tokenizer, resolve_model_path
from rlvr.rewards.exact import (
    OUTPUT_CLOSE,
    OUTPUT_OPEN,
    PYTHON_CLOSE,
    PYTHON_OPEN,
    exact_answer_reward,
)

TAGS = (PYTHON_OPEN, PYTHON_CLOSE, OUTPUT_OPEN, OUTPUT_CLOSE, "<think>", "</think>")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("embedded-tools")


def test_embedded_tools_resolves_to_the_shipped_directory():
    path = resolve_model_path("embedded-tools")
    assert path == str(embedded._HERE / "tools")
    assert embedded.embedded_model_path("tools") == embedded._HERE / "tools"
    cfg = load_config(None, ["model.name_or_path=embedded-tools"])
    assert cfg.model.name_or_path == "embedded-tools"


def test_tokenizer_round_trips_a_transcript_and_tags_are_single_non_special_tokens(tokenizer):
    task = MultiplicationTask()
    text = task.format_prompt(347, 28) + task.tool_completion(347, 28)
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode(ids + [tokenizer.eos_token_id], skip_special_tokens=True) == text
    for tag in TAGS:
        assert len(tokenizer.encode(tag)) == 1
        assert tag not in tokenizer.all_special_tokens
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.eos_token == "<eos>" and tokenizer.pad_token == "<pad>"
    assert not getattr(tokenizer, "chat_template", None)


def test_code_and_tracebacks_round_trip_and_angle_brackets_only_come_as_tags(tokenizer):
    code = "x = [347, 28]\nprint(x[0] * x[1] % 7, 'a_b', \"c\")  # {~^|@$&!;/\\`}\t"
    ids = tokenizer.encode(code)
    assert tokenizer.unk_token_id not in ids and tokenizer.decode(ids) == code
    trace = '  File "/tmp/tool.py", line 2\nZeroDivisionError: division by zero\n'
    assert tokenizer.decode(tokenizer.encode(trace)) == trace
    assert tokenizer.encode("<module>").count(tokenizer.unk_token_id) == 2


def test_the_observation_tokenized_alone_matches_its_tokens_inside_a_transcript(tokenizer):
    task = MultiplicationTask()
    prefix = task.format_prompt(347, 28) + PYTHON_OPEN + "print(347*28)" + PYTHON_CLOSE
    seen = observation("9716\n")
    whole = tokenizer.encode(prefix + seen + "9716")
    assert whole == tokenizer.encode(prefix) + tokenizer.encode(seen) + tokenizer.encode("9716")


def test_shipped_tokenizer_matches_the_build_recipe(tokenizer):
    recipe = build.build_tokenizer(
        build.CHARACTERS + tools_corpus.EXTRA_CHARACTERS, tools_corpus.ADDED_TOKENS
    )
    assert recipe.get_vocab() == tokenizer.get_vocab()


def test_build_info_records_the_tools_recipe_and_its_base_metrics():
    info = json.loads((embedded._HERE / "tools" / "build_info.json").read_text())
    assert info["build_config"]["task"] == "tools"
    assert info["build_config"]["head_dim"] == 32 and info["build_config"]["num_heads"] == 8
    metrics = info["base_metrics"]
    assert metrics["greedy_accuracy"] <= 0.15 and metrics["greedy_tool_fraction"] == 0
    assert 0.02 <= metrics["t1_tool_start_fraction"] <= 0.10
    assert metrics["t1_tool"]["code_right"] >= 0.95
    assert metrics["t1_tool"]["answer_copies_output"] >= 0.95


def test_the_tokens_of_the_observation_carry_no_pretraining_loss(tokenizer):
    import random

    input_ids, labels = tools_corpus.make_tools_batch(
        MultiplicationTask(), tokenizer, random.Random(0), 32, tool_fraction=1.0
    )
    out_open, out_close = tokenizer.convert_tokens_to_ids([OUTPUT_OPEN, OUTPUT_CLOSE])
    for ids, labs in zip(input_ids.tolist(), labels.tolist()):
        start, end = ids.index(out_open), ids.index(out_close)
        assert all(t == -100 for t in labs[start : end + 1])
        assert labs[end + 1] == ids[end + 1] != -100  # the answer after it is learned
        assert labs[ids.index(tokenizer.convert_tokens_to_ids(PYTHON_OPEN))] != -100


def test_greedy_answers_directly_and_a_forced_tool_call_is_right():
    path = embedded.embedded_model_path("tools")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tokenizer = load_tokenizer(str(path))
    samples = MultiplicationTask().heldout(50)
    prompts = [s["prompt"] for s in samples]
    greedy = tools_corpus.complete_with_tool(model, tokenizer, prompts)
    assert not any(t.codes for t in greedy)
    forced = tools_corpus.complete_with_tool(model, tokenizer, prompts, prefix=PYTHON_OPEN)
    right = sum(exact_answer_reward(t.text, s) for t, s in zip(forced, samples))
    assert right >= 0.9 * len(samples)
