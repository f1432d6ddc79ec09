import random
import re
from fractions import Fraction

import pytest

from rlvr.config import load_config
from rlvr.data.registry import build_task
from rlvr.data.tasks.countdown import CountdownTask, is_heldout_problem, problem_key
from rlvr.errors import ConfigError
from rlvr.rewards.countdown import countdown_reward, evaluate, literals, parse_expression


def train_samples(task: CountdownTask, n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [task.sample_train(rng) for _ in range(n)]


def test_every_problem_is_solvable_by_its_own_answer_within_the_settings():
    task = CountdownTask(min_numbers=3, max_numbers=5, max_value=50, max_target=500)
    samples = train_samples(task, 300) + task.heldout(50)
    for s in samples:
        assert 3 <= len(s["numbers"]) <= 5
        assert all(1 <= n <= 50 for n in s["numbers"])
        assert 1 <= s["target"] <= 500
        tree = parse_expression(s["answer"])
        assert sorted(literals(tree)) == sorted(s["numbers"])
        assert evaluate(tree) == Fraction(s["target"])
        assert countdown_reward(s["answer"], s) == 1.0
        assert (
            s["source"] == "countdown"
            and s["id"] == f"countdown-{problem_key(s['numbers'], s['target'])}"
        )
        assert ", ".join(map(str, s["numbers"])) in s["prompt"] and str(s["target"]) in s["prompt"]
    assert {len(s["numbers"]) for s in samples} == {3, 4, 5}
    assert {op for s in samples for op in "+-*/" if op in s["answer"]} == set("+-*/")


def test_demonstrations_verify_and_their_steps_are_right():
    task = CountdownTask()
    for s in train_samples(task, 100) + task.heldout(20):
        demo = task.demonstration(s)
        assert countdown_reward(demo, s) == 1.0
        trace, answer = re.fullmatch(r"<think>(.*)</think>(.*)", demo).groups()
        assert answer == s["answer"]
        values = []
        for step in trace.split(","):
            a, op, b, c = re.fullmatch(r"(\d+)([+\-*/])(\d+)=(\d+)", step).groups()
            exact = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}
            assert Fraction(int(c)) == (Fraction(int(a), int(b)) if op == "/" else exact[op])
            values.append(int(c))
        assert values[-1] == s["target"] and len(values) == len(s["numbers"]) - 1


def test_generation_and_heldout_are_deterministic():
    task = CountdownTask()
    assert train_samples(task, 5, seed=4) == train_samples(task, 5, seed=4)
    assert task.heldout(20) == CountdownTask().heldout(20)
    assert task.heldout(20) != CountdownTask(seed=1).heldout(20)


def test_train_and_heldout_are_disjoint_and_heldout_is_distinct():
    task = CountdownTask(min_numbers=2, max_numbers=2, max_value=12, max_target=200)
    held = task.heldout(20)  # small on purpose: train draws cover the whole problem space
    keys = {problem_key(s["numbers"], s["target"]) for s in held}
    assert len(keys) == 20
    assert all(is_heldout_problem(s["numbers"], s["target"]) for s in held)
    train = {problem_key(s["numbers"], s["target"]) for s in train_samples(task, 3000)}
    assert not keys & train


def test_the_split_ignores_the_order_of_the_numbers():
    assert problem_key([44, 3, 19], 98) == problem_key([3, 19, 44], 98) == "3,19,44->98"
    assert is_heldout_problem([44, 3, 19], 98) == is_heldout_problem([19, 44, 3], 98)
    share = sum(is_heldout_problem([a, b], a + b) for a in range(1, 80) for b in range(1, 80))
    assert 0.08 < share / 79**2 < 0.12


def test_impossible_settings_fail_with_a_clear_error():
    with pytest.raises(ValueError, match="min_numbers <= max_numbers"):
        CountdownTask(min_numbers=4, max_numbers=3)
    with pytest.raises(ValueError, match="only 0 of 5 held-out problems"):
        CountdownTask(min_numbers=2, max_numbers=2, max_value=1, max_target=2).heldout(5)


def test_build_task_from_config_and_config_errors():
    cfg = load_config(
        overrides=[
            "data.task=countdown",
            "data.countdown_min_numbers=4",
            "data.countdown_max_numbers=4",
            "data.countdown_max_value=20",
            "reward.verifier=countdown",
        ]
    )
    task = build_task(cfg.data)
    assert isinstance(task, CountdownTask)
    assert all(len(s["numbers"]) == 4 for s in train_samples(task, 20))
    with pytest.raises(
        ConfigError, match="data.countdown_min_numbers: must be <= data.countdown_max"
    ):
        bad = [
            "data.task=countdown",
            "data.countdown_min_numbers=5",
            "data.countdown_max_numbers=4",
        ]
        build_task(load_config(overrides=bad).data)
    with pytest.raises(ConfigError, match="data.countdown_max_numbers: must be <= 8"):
        load_config(overrides=["data.countdown_max_numbers=9"])
