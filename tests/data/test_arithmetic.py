import ast
import operator
import random
import re

import pytest

from rlvr.config import load_config
from rlvr.data.registry import build_task
from rlvr.data.tasks.arithmetic import (
    LEVELS,
    ArithmeticTask,
    canonical_key,
    enumerate_level,
    is_heldout_expression,
    level_size,
    parse_prompt,
)
from rlvr.errors import ConfigError
from rlvr.rewards.exact import exact_answer_reward

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def reference_value(expression: str) -> int:
    """Python's own parser and precedence, independent of the task's evaluator."""

    def walk(node: ast.expr) -> int:
        if isinstance(node, ast.BinOp):
            return _BINOPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):  # a negative step
            return -walk(node.operand)
        assert isinstance(node, ast.Constant) and type(node.value) is int
        return node.value

    return walk(ast.parse(expression, mode="eval").body)


def train_samples(task: ArithmeticTask, n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [task.sample_train(rng) for _ in range(n)]


@pytest.mark.parametrize("level", sorted(LEVELS))
def test_each_level_follows_the_documented_table_and_answers_are_exact(level):
    spec = LEVELS[level]
    task = ArithmeticTask(level=level, max_level=level)
    for sample in train_samples(task, 100) + task.heldout(9):  # level 1 has 9 held-out forms
        expression = sample["prompt"].removesuffix("=")
        operands = [int(x) for x in re.split(r"[+\-*]", expression)]
        operators = re.findall(r"[+\-*]", expression)
        assert len(operands) == spec.operands
        assert all(len(str(x)) == spec.digits and x > 0 for x in operands)
        assert set(operators) <= set(spec.operators)
        assert sample["answer"] == str(reference_value(expression))
        assert sample["level"] == level and sample["source"] == f"arithmetic-L{level}"


def test_multiplication_binds_tighter_than_addition_and_subtraction():
    sample = ArithmeticTask().make_sample(6, [2, 3, 4, 5], ["+", "*", "-"])
    assert sample["prompt"] == "2+3*4-5=" and sample["answer"] == "9"
    assert ArithmeticTask().make_sample(2, [10, 30], ["-"])["answer"] == "-20"


def test_multiplication_appears_only_from_level_4():
    for level in (1, 2, 3):
        task = ArithmeticTask(level=level, max_level=level)
        assert all("*" not in s["prompt"] for s in train_samples(task, 200))
    task = ArithmeticTask(level=4, max_level=4)
    assert any("*" in s["prompt"] for s in train_samples(task, 200))


def test_sampling_and_heldout_are_deterministic():
    task = ArithmeticTask(level=2, max_level=6)
    assert train_samples(task, 5, seed=3) == train_samples(task, 5, seed=3)
    assert task.heldout(30) == ArithmeticTask(level=2, max_level=6).heldout(30)
    assert task.heldout(30) != ArithmeticTask(level=2, max_level=6, seed=1).heldout(30)


def test_heldout_cycles_through_all_levels_with_distinct_forms():
    held = ArithmeticTask(level=1, max_level=8).heldout(72)
    assert [s["level"] for s in held[:8]] == list(range(1, 9))
    assert all(sum(s["level"] == lv for s in held) == 9 for lv in range(1, 9))
    keys = [canonical_key(*parse_prompt(s["prompt"])) for s in held]
    assert len(set(keys)) == len(keys)
    assert all(is_heldout_expression(*parse_prompt(s["prompt"])) for s in held)


def test_heldout_skips_an_exhausted_level_then_raises_when_all_are():
    forms = {canonical_key(*c) for c in enumerate_level(1) if is_heldout_expression(*c)}
    one = ArithmeticTask(level=1, max_level=1)
    assert len(one.heldout(len(forms))) == len(forms)
    with pytest.raises(ValueError, match="have only"):
        one.heldout(len(forms) + 1)
    both = ArithmeticTask(level=1, max_level=2).heldout(3 * len(forms))
    assert sum(s["level"] == 1 for s in both) == len(forms)


def test_train_and_heldout_are_disjoint_by_canonical_form():
    for level in (1, 4, 6):
        task = ArithmeticTask(level=level, max_level=level)
        held = {canonical_key(*parse_prompt(s["prompt"])) for s in task.heldout(9)}
        train = {canonical_key(*parse_prompt(s["prompt"])) for s in train_samples(task, 2000)}
        assert held and not held & train
    # the split is exact on a small level: every train draw is outside the held-out forms
    all_held = {canonical_key(*c) for c in enumerate_level(1) if is_heldout_expression(*c)}
    task = ArithmeticTask(level=1, max_level=1)
    assert not all_held & {
        canonical_key(*parse_prompt(s["prompt"])) for s in train_samples(task, 500)
    }


def test_canonical_form_merges_commuted_expressions_only():
    assert canonical_key([3, 4], ["+"]) == canonical_key([4, 3], ["+"])
    assert canonical_key([12, 3, 45, 7], ["*", "-", "+"]) == "+3*12|+7|-45"
    assert canonical_key([12, 3, 45, 7], ["*", "-", "+"]) == canonical_key(
        [7, 3, 12, 45], ["+", "*", "-"]
    )
    assert canonical_key([5, 3], ["-"]) != canonical_key([3, 5], ["-"])
    assert canonical_key([2, 3, 4], ["+", "*"]) != canonical_key([2, 3, 4], ["*", "+"])


def test_about_ten_percent_of_forms_are_held_out():
    forms = {canonical_key(*c): is_heldout_expression(*c) for c in enumerate_level(2)}
    share = sum(forms.values()) / len(forms)
    assert 0.08 < share < 0.12
    assert level_size(2) == len(enumerate_level(2)) == 90 * 90 * 2


def test_demonstrations_are_correct_traces_that_the_verifier_accepts():
    task = ArithmeticTask(level=1, max_level=8)
    samples = task.heldout(40)
    for level in LEVELS:
        task.level = level
        samples += train_samples(task, 10, seed=level)
    for sample in samples:
        demo = task.demonstration(sample)
        assert exact_answer_reward(demo, sample) == 1.0
        trace = re.fullmatch(r"<think>(.*)</think>(-?\d+)", demo).group(1)
        for step in trace.split(","):
            a, op, b, c = re.fullmatch(r"(-?\d+)([+\-*])(\d+)=(-?\d+)", step).groups()
            assert reference_value(f"({a}){op}{b}") == int(c)


def test_demonstration_evaluates_products_before_sums():
    sample = ArithmeticTask().make_sample(6, [2, 3, 4, 5], ["+", "*", "-"])
    assert ArithmeticTask().demonstration(sample) == "<think>3*4=12,2+12=14,14-5=9</think>9"


def test_fixed_schedule_never_moves():
    task = ArithmeticTask(level=3, max_level=8, difficulty="fixed", promote_window=2)
    for step in range(10):
        task.on_step(step, 10)
        task.observe([{"level": 3}] * 4, [1.0] * 4)
    assert task.level == 3
    assert all(s["level"] == 3 for s in train_samples(task, 20))


def test_linear_schedule_gives_each_level_an_equal_phase():
    task = ArithmeticTask(level=2, max_level=5, difficulty="linear")
    levels = []
    for step in range(8):
        task.on_step(step, 8)
        levels.append(task.level)
        assert task.sample_train(random.Random(step))["level"] == task.level
    assert levels == [2, 2, 3, 3, 4, 4, 5, 5]
    task.on_step(8, 8)  # a 1-based caller's last step stays at the top level
    assert task.level == 5


def test_adaptive_schedule_promotes_on_a_full_window_at_the_threshold():
    task = ArithmeticTask(
        level=1, max_level=3, difficulty="adaptive", promote_at=0.75, promote_window=4
    )
    task.observe([{"level": 1}] * 3, [1.0, 1.0, 1.0])
    assert task.level == 1  # the window is not full yet
    task.observe([{"level": 1}], [0.0])
    assert task.level == 2  # mean 0.75 >= 0.75
    task.observe([{"level": 1}] * 8, [1.0] * 8)  # stale samples of the old level are ignored
    assert task.level == 2 and len(task.window) == 0
    task.observe([{"level": 2}] * 4, [1.0, 0.0, 1.0, 0.0])
    assert task.level == 2  # mean 0.5 < 0.75
    task.observe([{"level": 2}] * 2, [1.0, 1.0])  # the window is the last 4: 1, 0, 1, 1
    assert task.level == 3
    assert task.sample_train(random.Random(0))["level"] == 3
    task.observe([{"level": 3}] * 8, [1.0] * 8)
    assert task.level == 3  # capped at max_level
    assert task.metrics() == {"data/level": 3.0}


def test_observe_rejects_mismatched_lengths():
    task = ArithmeticTask(difficulty="adaptive")
    with pytest.raises(ValueError, match="2 samples but 1 rewards"):
        task.observe([{"level": 1}] * 2, [1.0])


def test_build_task_from_config_and_config_errors():
    cfg = load_config(
        overrides=[
            "data.task=arithmetic",
            "data.level=2",
            "data.max_level=4",
            "data.difficulty=adaptive",
            "data.promote_window=8",
        ]
    )
    task = build_task(cfg.data)
    assert isinstance(task, ArithmeticTask)
    assert (task.level, task.max_level, task.difficulty, task.window.maxlen) == (
        2,
        4,
        "adaptive",
        8,
    )
    with pytest.raises(ConfigError, match="data.level: must be <= data.max_level = 2, got 3"):
        build_task(
            load_config(overrides=["data.task=arithmetic", "data.level=3", "data.max_level=2"]).data
        )
    with pytest.raises(ConfigError, match="data.difficulty"):
        load_config(overrides=["data.difficulty=quadratic"])
    with pytest.raises(ConfigError, match="data.level: must be <= 8"):
        load_config(overrides=["data.level=9"])


def test_parse_prompt_rejects_anything_but_an_expression():
    assert parse_prompt("12*3-45+7=") == ([12, 3, 45, 7], ["*", "-", "+"])
    for bad in ("", "=", "1+=", "+1=", "1/2=", "1+(2)=", "١+2="):
        with pytest.raises(ValueError, match="not an arithmetic prompt"):
            parse_prompt(bad)
