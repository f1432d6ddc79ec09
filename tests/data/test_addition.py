import random
import re

import pytest

from rlvr.data.tasks.addition import (
    THINK_CLOSE,
    THINK_OPEN,
    AdditionTask,
    carry_dropped_sum,
    has_carry,
    is_heldout_pair,
)


def operands(sample: dict) -> tuple[int, int]:
    a, b = re.fullmatch(r"(\d+)\+(\d+)=", sample["prompt"]).groups()
    return int(a), int(b)


def test_samples_have_the_documented_fields_and_correct_answers():
    task = AdditionTask()
    rng = random.Random(0)
    for sample in [task.sample_train(rng) for _ in range(200)] + task.heldout(200):
        assert set(sample) == {"id", "prompt", "answer", "source"}
        assert sample["source"] == "addition"
        a, b = operands(sample)
        assert 100 <= a <= 999 and 100 <= b <= 999
        assert sample["answer"] == str(a + b)


def test_sampling_is_reproducible_from_the_rng_seed():
    task = AdditionTask()
    first = [task.sample_train(random.Random(7)) for _ in range(3)]
    again = [task.sample_train(random.Random(7)) for _ in range(3)]
    assert first == again


def test_heldout_is_deterministic_distinct_and_depends_on_seed():
    assert AdditionTask(seed=0).heldout(100) == AdditionTask(seed=0).heldout(100)
    ids = [s["id"] for s in AdditionTask(seed=0).heldout(300)]
    assert len(set(ids)) == 300
    assert AdditionTask(seed=1).heldout(20) != AdditionTask(seed=0).heldout(20)


def test_train_and_heldout_are_disjoint_including_swapped_operands():
    task = AdditionTask()
    heldout = {operands(s) for s in task.heldout(300)}
    assert all(is_heldout_pair(a, b) and is_heldout_pair(b, a) for a, b in heldout)
    rng = random.Random(0)
    train = {task.sample_train_pair(rng) for _ in range(3000)}
    assert not train & heldout
    assert not any(is_heldout_pair(a, b) for a, b in train)


def test_about_ten_percent_of_pairs_are_held_out():
    rng = random.Random(0)
    pairs = [(rng.randint(100, 999), rng.randint(100, 999)) for _ in range(5000)]
    assert 0.08 < sum(is_heldout_pair(a, b) for a, b in pairs) / len(pairs) < 0.12


def test_heldout_refuses_more_problems_than_exist():
    task = AdditionTask(digits=1)
    task.heldout(task.num_heldout_pairs())
    with pytest.raises(ValueError, match="held-out"):
        task.heldout(task.num_heldout_pairs() + 1)


@pytest.mark.parametrize("digits", [1, 2, 3, 4])
def test_direct_completion_is_wrong_exactly_when_a_carry_occurs(digits):
    task = AdditionTask(digits=digits)
    rng = random.Random(digits)
    for _ in range(500):
        a, b = task.sample_train_pair(rng)
        direct = task.direct_completion(a, b)
        assert len(direct) == digits and direct.isdigit()
        assert (int(direct) == a + b) == (not has_carry(a, b))


def test_carry_dropped_sum_example():
    assert carry_dropped_sum(347, 285, 3) == "522"
    assert carry_dropped_sum(500, 500, 3) == "000"
    assert has_carry(347, 285) and not has_carry(123, 456)


@pytest.mark.parametrize("digits", [1, 2, 3, 5])
def test_reasoning_traces_are_correct_column_additions_ending_in_the_sum(digits):
    task = AdditionTask(digits=digits)
    rng = random.Random(digits)
    step = re.compile(r"(\d)\+(\d)\+([01])=(\d\d)")
    for _ in range(500):
        a, b = task.sample_train_pair(rng)
        text = task.reasoning_completion(a, b)
        assert text.startswith(THINK_OPEN) and text.count(THINK_CLOSE) == 1
        trace, answer = text[len(THINK_OPEN) :].split(THINK_CLOSE)
        assert answer == str(a + b)
        carry, digits_out = 0, []
        for i, part in enumerate(trace.split(",")):
            x, y, c, total = step.fullmatch(part).groups()
            assert int(x) == a // 10**i % 10 and int(y) == b // 10**i % 10
            assert int(c) == carry and int(total) == int(x) + int(y) + carry
            carry, digits_out = int(total) // 10, [total[1], *digits_out]
        assert i == digits - 1
        assert int(str(carry) + "".join(digits_out)) == a + b


def test_documented_example():
    task = AdditionTask()
    assert task.format_prompt(347, 285) == "347+285="
    assert task.direct_completion(347, 285) == "522"
    assert task.reasoning_completion(347, 285) == "<think>7+5+0=12,4+8+1=13,3+2+1=06</think>632"
