"""data.fewshot: K solved training problems before every prompt, as chat turns or plain text."""

import json
import random

import pytest

from rlvr.config import DataConfig
from rlvr.data.fewshot import FewShotTask
from rlvr.data.registry import build_task
from rlvr.errors import ConfigError
from rlvr.models.loading import encode_prompt
from rlvr.rewards.compose import build_verifier


def test_every_sample_carries_the_same_solved_training_problems():
    task = build_task(DataConfig(fewshot=3))
    rng = random.Random(1)
    train = [task.sample_train(rng) for _ in range(20)]
    held = task.heldout(200)
    shots = train[0]["shots"]
    assert len(shots) == 3 and len({s["prompt"] for s in shots}) == 3
    assert all(s["shots"] == shots for s in train + held if s["prompt"] not in shots)
    # The completions are the task's demonstrations: correct solutions in the trained format.
    verifier = build_verifier("exact_answer")
    for shot in shots:
        a, b = map(int, shot["prompt"].rstrip("=").split("+"))
        assert shot["completion"].startswith("<think>")
        assert verifier(shot["completion"], {"answer": str(a + b)}) == 1.0
    # Never a held-out problem, and the wrapped task's hooks are still there.
    assert not {s["prompt"] for s in shots} & {s["prompt"] for s in held}
    assert task.demonstration(train[0]) == build_task(DataConfig()).demonstration(train[0])


def test_a_prompt_equal_to_a_shot_gets_the_spare_instead_of_its_own_answer():
    task = build_task(DataConfig(fewshot=2))
    first = task.shots[0]
    sample = task.apply({"prompt": first["prompt"], "answer": "x"})
    assert first not in sample["shots"] and task.spare in sample["shots"]
    assert len(sample["shots"]) == 2


def test_the_shots_depend_on_the_seed_and_are_reproducible():
    a = build_task(DataConfig(fewshot=2, seed=0)).shots
    assert build_task(DataConfig(fewshot=2, seed=0)).shots == a
    assert build_task(DataConfig(fewshot=2, seed=1)).shots != a


def test_shots_follow_the_prompt_template():
    task = build_task(DataConfig(fewshot=1, prompt_template="Q: {prompt}\nA:"))
    shot = task.shots[0]
    assert shot["prompt"].startswith("Q: ") and shot["prompt"].endswith("\nA:")


class _AnswerOnly:
    """A task without demonstrations (like a dataset or a reasoning-gym task)."""

    def __init__(self, answers=True):
        self.answers = answers

    def sample_train(self, rng):
        n = rng.randrange(1000)
        return {"id": f"row-{n}", "prompt": f"p{n}", "answer": str(n) if self.answers else None}

    def heldout(self, n):
        return [{"prompt": f"h{i}", "answer": "0"} for i in range(n)]


def test_a_task_without_demonstrations_shows_the_answer_in_tags():
    task = FewShotTask(_AnswerOnly(), 2)
    assert all(s["completion"] == f"<answer>{s['prompt'][1:]}</answer>" for s in task.shots)


def test_a_task_with_neither_answers_nor_demonstrations_is_a_config_error():
    with pytest.raises(ConfigError, match=r"data\.fewshot: row-\d+ has no answer"):
        FewShotTask(_AnswerOnly(answers=False), 2)


def test_a_task_with_too_few_distinct_problems_is_a_config_error(tmp_path):
    path = tmp_path / "two.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"p{i}", "answer": i}) + "\n" for i in range(3)))
    with pytest.raises(ConfigError, match="data.fewshot: wanted 4 distinct"):
        build_task(DataConfig(task="dataset", path=str(path), eval_fraction=0.34, fewshot=4))


class _ChatTokenizer:
    """Records the messages a chat template gets; encodes each character as its code."""

    chat_template = "yes"

    def apply_chat_template(self, messages, add_generation_prompt, tokenize, **kw):
        self.messages = messages
        return [ord(c) for c in json.dumps(messages)]

    def __call__(self, text):
        self.text = text
        return {"input_ids": [ord(c) for c in text]}


def test_chat_models_see_the_shots_as_earlier_turns_after_the_system_message():
    tok = _ChatTokenizer()
    shots = [{"prompt": "1+1=", "completion": "<answer>2</answer>"}]
    encode_prompt(tok, "2+2=", chat=True, system_prompt="be brief", shots=shots)
    assert tok.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "1+1="},
        {"role": "assistant", "content": "<answer>2</answer>"},
        {"role": "user", "content": "2+2="},
    ]


def test_plain_models_see_the_shots_as_text_before_the_question():
    tok = _ChatTokenizer()
    shots = [{"prompt": "1+1=", "completion": "2"}, {"prompt": "3+3=", "completion": "6"}]
    encode_prompt(tok, "2+2=", chat=False, shots=shots)
    assert tok.text == "1+1=2\n\n3+3=6\n\n2+2="
    encode_prompt(tok, "2+2=", chat=False)
    assert tok.text == "2+2="


def test_the_trainers_prompts_carry_the_shots():
    from rlvr.models.loading import load_tokenizer

    tokenizer = load_tokenizer("embedded", False, None)
    task = build_task(DataConfig(fewshot=2))
    sample = task.heldout(1)[0]
    with_shots = encode_prompt(tokenizer, sample["prompt"], chat=False, shots=sample["shots"])
    alone = encode_prompt(tokenizer, sample["prompt"], chat=False)
    assert len(with_shots) > len(alone)
    assert tokenizer.decode(with_shots).endswith(sample["prompt"])


def test_sft_refuses_fewshot(tmp_path):
    from rlvr.cli import main

    rc = main(["sft", "--output-dir", str(tmp_path / "r"), "task.fewshot=2"])
    assert rc == 2
