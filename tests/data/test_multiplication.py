import random
import re

import pytest

from rlvr.config import load_config
from rlvr.data.registry import build_task
from rlvr.data.tasks.multiplication import (
    MultiplicationTask,
    carry_dropped_product,
    is_heldout_pair,
    observation,
    tool_code,
)
from rlvr.errors import DataError
from rlvr.rewards.exact import exact_answer_reward, extract_final_answer


def operands(sample: dict) -> tuple[int, int]:
    a, b = re.fullmatch(r"(\d+)\*(\d+)=", sample["prompt"]).groups()
    return int(a), int(b)


def test_samples_have_the_documented_fields_and_correct_answers():
    task = MultiplicationTask()
    rng = random.Random(0)
    for sample in [task.sample_train(rng) for _ in range(200)] + task.heldout(200):
        assert set(sample) == {"id", "prompt", "answer", "source"}
        assert sample["source"] == "multiplication"
        a, b = operands(sample)
        assert 100 <= a <= 999 and 10 <= b <= 99
        assert sample["answer"] == str(a * b)
        assert sample["id"] == f"multiplication-3x2-{a}*{b}"


def test_sampling_is_reproducible_from_the_rng_seed():
    task = MultiplicationTask()
    assert [task.sample_train(random.Random(7)) for _ in range(3)] == [
        task.sample_train(random.Random(7)) for _ in range(3)
    ]


def test_heldout_is_deterministic_distinct_and_depends_on_seed():
    assert MultiplicationTask(seed=0).heldout(100) == MultiplicationTask(seed=0).heldout(100)
    ids = [s["id"] for s in MultiplicationTask().heldout(500)]
    assert len(set(ids)) == 500
    assert MultiplicationTask(seed=1).heldout(20) != MultiplicationTask(seed=0).heldout(20)


def test_train_and_heldout_are_disjoint_including_swapped_operands():
    task = MultiplicationTask()
    heldout = {operands(s) for s in task.heldout(500)}
    assert all(is_heldout_pair(a, b) and is_heldout_pair(b, a) for a, b in heldout)
    rng = random.Random(0)
    train = {task.sample_train_pair(rng) for _ in range(5000)}
    assert not train & heldout
    assert not any(is_heldout_pair(a, b) for a, b in train)
    square = MultiplicationTask(digits=2, multiplier_digits=2)  # b*a is a prompt there too
    held = {operands(s) for s in square.heldout(50)}
    train = {square.sample_train_pair(rng) for _ in range(3000)}
    assert not train & (held | {(b, a) for a, b in held})


def test_about_ten_percent_of_pairs_are_held_out_and_heldout_refuses_more_than_exist():
    task = MultiplicationTask()
    assert 0.08 < task.num_heldout_pairs() / task.num_pairs() < 0.12
    tiny = MultiplicationTask(digits=1, multiplier_digits=1)
    with pytest.raises(ValueError, match="held-out problems, only"):
        tiny.heldout(tiny.num_heldout_pairs() + 1)


def test_tool_completion_is_a_call_the_output_and_the_product():
    task = MultiplicationTask()
    assert tool_code(347, 28) == "print(347*28)"
    assert observation("9716\n") == "<output>9716\n</output>"
    assert task.tool_completion(347, 28) == (
        "<python>print(347*28)</python><output>9716\n</output>9716"
    )
    # the code really prints the output the completion claims
    assert str(eval(tool_code(347, 28).removeprefix("print"))) == "9716"


def test_carry_dropped_product_drops_every_carry_and_is_rarely_right():
    # 347*28: columns 7*8=56, 4*8+7*2=46, 3*8+4*2=32, 3*2=6 -> 6 2 6 6, each mod 10
    assert carry_dropped_product(347, 28, 4) == "6266"
    assert carry_dropped_product(111, 11, 4) == "1221" == str(111 * 11)  # no carry: right
    assert MultiplicationTask().direct_completion(347, 28) == "6266"
    task = MultiplicationTask()
    rng = random.Random(0)
    pairs = [task.sample_train_pair(rng) for _ in range(5000)]
    right = sum(int(task.direct_completion(a, b)) == a * b for a, b in pairs) / len(pairs)
    assert right < 0.05  # 2.4% over all 3x2 pairs


def test_the_exact_verifier_scores_the_demonstration_one_and_direct_answers_zero():
    task = MultiplicationTask()
    for sample in task.heldout(200):
        a, b = operands(sample)
        demo = task.demonstration(sample)
        assert demo == task.tool_completion(a, b)
        assert extract_final_answer(demo) == sample["answer"]
        assert exact_answer_reward(demo, sample) == 1.0
        direct = task.direct_completion(a, b)
        assert exact_answer_reward(direct, sample) == float(int(direct) == a * b)
        assert exact_answer_reward(demo.rsplit("</output>", 1)[0] + "</output>", sample) == 0.0


def test_demonstration_refuses_a_prompt_of_another_shape():
    with pytest.raises(DataError, match="not 'a\\*b='"):
        MultiplicationTask().demonstration({"id": "x", "prompt": "12*34="})
    with pytest.raises(DataError):
        MultiplicationTask().demonstration({"id": "x", "prompt": "347+28="})


def test_data_task_multiplication_builds_the_task_with_the_data_seed():
    cfg = load_config(None, ["data.task=multiplication", "data.seed=3"])
    task = build_task(cfg.data)
    assert isinstance(task, MultiplicationTask)
    assert (task.digits, task.multiplier_digits, task.seed) == (3, 2, 3)
