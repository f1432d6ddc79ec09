"""Every column of a row reaches the verifiers; a row missing what the verifier needs stops the
run at start naming file and row; TRL's conversational prompts (message lists) are rendered as
rlvr renders any prompt."""

from __future__ import annotations

import datetime
import json
import random

import pytest

from rlvr.config import DataConfig
from rlvr.data.datasets import FieldMap, build_sample, load_prompt_dataset
from rlvr.data.fewshot import FewShotTask
from rlvr.data.registry import build_task
from rlvr.errors import DataError
from rlvr.models.loading import PromptEncoder, load_tokenizer
from rlvr.rewards.compose import build_verifier


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def accuracy_reward(completions, ground_truth, **kwargs):
    return [float(c.strip() == str(g)) for c, g in zip(completions, ground_truth)]


def sample_of(row: dict, fields: FieldMap | None = None, **kw) -> dict:
    return build_sample(row, fields or FieldMap(), origin="d.jsonl", row_number=1, name="d", **kw)


# --- every column ---------------------------------------------------------------------------


def test_every_column_is_kept_under_its_own_name(tmp_path):
    path = write_jsonl(
        tmp_path / "d.jsonl",
        [{"prompt": "2+2=", "ground_truth": 4, "meta": {"level": [1, 2]}, "note": None}],
    )
    sample = load_prompt_dataset(path, eval_fraction=0).sample_train(random.Random(0))
    assert sample == {
        "prompt": "2+2=",
        "id": "d-1",
        "ground_truth": 4,
        "meta": {"level": [1, 2]},
        "note": None,
    }


def test_rlvr_keys_win_over_columns_of_the_same_name():
    row = {
        "question": "2+2=",
        "prompt": "not the prompt",
        "solution": 4,
        "answer": "not the answer",
        "shots": [{"prompt": "leak", "completion": "leak"}],
        "raw_prompt": "x",
        "prompt_messages": "x",
    }
    sample = sample_of(row, FieldMap(prompt="question", answer="solution"))
    assert sample["prompt"] == "2+2=" and sample["answer"] == "4"
    assert "shots" not in sample and "raw_prompt" not in sample
    assert "prompt_messages" not in sample
    assert sample["question"] == "2+2=" and sample["solution"] == 4


def test_values_json_cannot_hold_are_made_plain():
    row = {"prompt": "p", "nan": float("nan"), "when": datetime.date(2024, 1, 2), "t": (1, 2)}
    sample = sample_of(row)
    assert sample["nan"] is None and sample["when"] == "2024-01-02" and sample["t"] == [1, 2]
    json.dumps(sample, allow_nan=False)


def test_a_trl_function_gets_the_extra_column_in_training_samples(tmp_path):
    from rlvr.rewards.scoring import Scorer

    path = write_jsonl(tmp_path / "d.jsonl", [{"prompt": "2+2=", "ground_truth": 4}])
    task = build_task(DataConfig(task="dataset", path=path, eval_fraction=0))
    sample = task.sample_train(random.Random(0))
    assert Scorer(build_verifier(accuracy_reward))(["4", "5"], [sample] * 2) == ([1.0, 0.0], 0)


# --- what the verifier needs, checked at start -------------------------------------------------


def test_a_row_missing_the_answer_the_verifier_needs_is_found_at_start(tmp_path):
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(9)]
    del rows[6]["answer"]
    path = write_jsonl(tmp_path / "data.jsonl", rows)
    cfg = DataConfig(task="dataset", path=path)
    with pytest.raises(DataError) as e:
        build_task(cfg, build_verifier("math"))
    assert str(e.value) == (
        f"{path} row 7: field 'answer' is missing; the verifier 'math' needs it"
    )
    build_task(cfg, build_verifier("format"))  # format needs no answer: fine
    build_task(cfg)  # no verifier given: not checked


def test_the_mapped_column_is_named_and_held_out_rows_are_checked_too(tmp_path):
    train = write_jsonl(tmp_path / "t.jsonl", [{"q": "1+1=", "sol": "2"}])
    held = write_jsonl(tmp_path / "h.jsonl", [{"q": "2+2=", "sol": "4"}, {"q": "3+3=", "sol": ""}])
    cfg = DataConfig(
        task="dataset", path=train, eval_path=held, prompt_field="q", answer_field="sol"
    )
    with pytest.raises(DataError, match=r"h\.jsonl row 2: field 'sol' is missing; the verifier"):
        build_task(cfg, build_verifier("exact_answer:1,format:0.1"))


def test_a_trl_functions_named_columns_are_checked_in_every_row(tmp_path):
    rows = [{"prompt": "1+1=", "ground_truth": 2}, {"prompt": "2+2="}]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    cfg = DataConfig(task="dataset", path=path, eval_fraction=0)
    with pytest.raises(DataError) as e:
        build_task(cfg, build_verifier([accuracy_reward]))
    assert str(e.value) == (
        f"{path} row 2: field 'ground_truth' is missing; the verifier 'accuracy_reward' needs it"
    )


# --- conversational prompts -----------------------------------------------------------------

SYSTEM = {"role": "system", "content": "Answer with a number."}


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def test_a_message_list_becomes_prompt_system_and_earlier_turns():
    messages = [SYSTEM, user("1+1="), assistant("2"), user("2+2=")]
    sample = sample_of({"prompt": messages, "ground_truth": 4})
    assert sample["prompt"] == "2+2="
    assert sample["system"] == "Answer with a number."
    assert sample["shots"] == [{"prompt": "1+1=", "completion": "2"}]
    assert sample["prompt_messages"] == messages
    assert sample["ground_truth"] == 4


class _ChatTemplate:
    """A tokenizer whose chat template writes each message as [role]content."""

    chat_template = "yes"

    def apply_chat_template(self, messages, add_generation_prompt, tokenize, **kw):
        text = "".join(f"[{m['role']}]{m['content']}" for m in messages) + "[assistant]"
        return [ord(c) for c in text]


def test_a_chat_model_sees_the_conversation_as_written():
    messages = [SYSTEM, user("1+1="), assistant("2"), user("2+2=")]
    tok = _ChatTemplate()
    ids = PromptEncoder(tok, chat=True)(sample_of({"prompt": messages}))
    assert ids == tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)


def test_the_embedded_model_sees_a_message_list_as_the_same_string_prompt():
    tokenizer = load_tokenizer("embedded", False, None)
    encode = PromptEncoder(tokenizer, chat=False)
    plain = sample_of({"prompt": "388+243="})
    assert encode(sample_of({"prompt": [user("388+243=")]})) == encode(plain)
    assert encode(sample_of({"prompt": [SYSTEM, user("388+243=")]})) == encode(plain)
    turns = sample_of({"prompt": [user("1+1="), assistant("2"), user("388+243=")]})
    assert encode(turns) == list(tokenizer("1+1=2\n\n388+243=")["input_ids"])


def test_fewshot_examples_come_before_a_rows_own_turns(tmp_path):
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(6)]
    rows.append({"prompt": [user("1+1="), assistant("2"), user("9+9=")], "answer": "18"})
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    task = FewShotTask(build_task(DataConfig(task="dataset", path=path, eval_fraction=0)), 1)
    conversational = next(s for s in task.task.train if s["prompt"] == "9+9=")
    shots = task.apply(conversational)["shots"]
    assert shots[-1] == {"prompt": "1+1=", "completion": "2"} and len(shots) == 2


@pytest.mark.parametrize(
    "prompt, message",
    [
        ([], r"field 'prompt' \(prompt\) is an empty list \(expected a non-empty string or chat"),
        (["hi"], r"field 'prompt' message 1: expected an object with 'role' and 'content', got"),
        ([{"role": "tool", "content": "x"}], r"message 1: role 'tool' \(expected one of system"),
        ([{"role": "user", "content": [{"type": "text"}]}], r"message 1: 'content' must be a"),
        ([user("a"), SYSTEM, user("b")], r"message 2: role 'system' \(expected assistant"),
        ([user("a"), user("b")], r"message 2: role 'user' \(expected assistant"),
        ([user("a"), assistant("b")], r"field 'prompt': the last message must be the user's"),
        ([SYSTEM], r"the last message must be the user's"),
        ([user("  ")], r"message 1: the question is blank"),
        (42, r"must be a non-empty string or a list of chat messages .*, got int"),
    ],
)
def test_a_bad_message_list_is_a_one_line_data_error_naming_file_row_and_field(prompt, message):
    with pytest.raises(DataError, match=r"^d\.jsonl row 1: .*" + message) as e:
        sample_of({"prompt": prompt})
    assert "\n" not in str(e.value)


def test_a_system_message_and_a_system_column_together_are_refused():
    with pytest.raises(DataError, match="has a system message and field 'system' is set too"):
        sample_of({"prompt": [SYSTEM, user("a")], "system": "other"})


def test_the_prompt_length_limit_counts_the_whole_conversation(tmp_path):
    # data.max_prompt_tokens counts what the model is given (after the chat template): a
    # conversational row with a short last question but long earlier turns is too long
    from rlvr.data.datasets import filter_long_prompts

    long_turns = [SYSTEM, user("9" * 40 + "="), assistant("9" * 40), user("2+2=")]
    rows = [{"prompt": long_turns, "answer": "4"}] + [
        {"prompt": [user(f"{i}+{i}=")], "answer": str(2 * i)} for i in range(10, 16)
    ]
    ds = load_prompt_dataset(write_jsonl(tmp_path / "chat.jsonl", rows), eval_fraction=0.0)
    encode = PromptEncoder(_ChatTemplate(), chat=True)
    report = filter_long_prompts(ds, lambda sample: len(encode(sample)), 60)
    assert report["dropped_train"] == 1
    assert all(s["prompt"] != "2+2=" for s in ds.train)
