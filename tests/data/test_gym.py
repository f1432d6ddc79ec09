"""The reasoning-gym adapter: a fake module pins the wiring, the real package runs end to end."""

import json
import math
import pickle
import random
import re
import sys
import types
from pathlib import Path

import pytest

from rlvr.config import load_config
from rlvr.data.registry import build_task
from rlvr.data.tasks.gym import GymTask, is_heldout_question, parse_gym_config
from rlvr.errors import ConfigError, DataError, UserError
from rlvr.rewards.gym import GymVerifier, gym_reward
from rlvr.rewards.registry import get_verifier

# --- a fake reasoning_gym: the adapter's contract, without the package --------------------------


class FakeDataset:
    """Question i asks for i % modulus; the scorer records what it is given."""

    def __init__(self, size: int, seed: int, modulus: int = 10**9, reward: float = 1.0):
        self.size, self.seed, self.modulus, self.reward = size, seed, modulus, reward
        self.calls: list[tuple] = []

    def __getitem__(self, idx: int) -> dict:
        value = (idx + self.seed) % self.modulus
        return {"question": f"What is {value}?", "answer": str(value), "metadata": {"v": value}}

    def score_answer(self, answer, entry) -> float:
        self.calls.append((answer, entry))
        return self.reward if answer == entry["answer"] else 0.0


@pytest.fixture
def fake_gym(monkeypatch):
    created: list[FakeDataset] = []

    def create_dataset(name, size=500, seed=None, **kwargs):
        if kwargs.keys() - {"modulus", "reward"}:
            raise TypeError(f"unexpected keyword argument {sorted(kwargs)[0]!r}")
        if kwargs.get("modulus", 1) < 1:
            raise AssertionError("modulus must be positive")
        created.append(FakeDataset(size, seed or 0, **kwargs))
        return created[-1]

    module = types.ModuleType("reasoning_gym")
    module.create_dataset = create_dataset
    factory = types.ModuleType("reasoning_gym.factory")
    factory.DATASETS = {"fake_numbers": None, "other": None}
    module.factory = factory
    monkeypatch.setitem(sys.modules, "reasoning_gym", module)
    monkeypatch.setitem(sys.modules, "reasoning_gym.factory", factory)
    return created


def test_samples_wrap_entries_with_everything_the_scorer_needs(fake_gym):
    task = GymTask("fake_numbers", {"modulus": 1000}, size=50, seed=7)
    sample = task.sample_train(random.Random(0))
    entry = sample["gym"]["entry"]
    assert sample["prompt"] == entry["question"] and sample["answer"] == entry["answer"]
    assert sample["source"] == "gym-fake_numbers" and sample["id"].startswith("gym-fake_numbers-")
    assert sample["gym"]["name"] == "fake_numbers"
    assert sample["gym"]["config"] == {"modulus": 1000, "size": 50, "seed": 7}
    assert json.loads(json.dumps(sample)) == sample


def test_verifier_passes_the_extracted_answer_and_the_entry_to_the_scorer(fake_gym):
    task = GymTask("fake_numbers", size=50)
    sample = task.heldout(1)[0]
    verifier = GymVerifier()
    answer = sample["answer"]
    assert verifier(f"<think>maybe 3</think><answer> {answer} </answer>", sample) == 1.0
    assert verifier(f"<think>{answer}</think>no", sample) == 0.0
    assert verifier(f"<think>{answer}", sample) == 0.0
    scorer = fake_gym[-1]  # the verifier's own dataset, rebuilt from the sample's settings
    assert [call[0] for call in scorer.calls] == [answer, "no", None]
    assert scorer.calls[0][1] == sample["gym"]["entry"]
    assert (scorer.size, scorer.seed) == (50, 0)
    verifier(f"{answer}", sample)
    assert len(fake_gym) == 2  # task + one dataset per setting in the verifier, cached


@pytest.mark.parametrize(("raw", "expected"), [(5.0, 1.0), (-2.0, 0.0), (math.nan, 0.0)])
def test_scorer_results_are_clipped_to_the_unit_interval(fake_gym, raw, expected):
    sample = GymTask("fake_numbers", {"reward": raw}, size=50).heldout(1)[0]
    assert GymVerifier()(sample["answer"], sample) == expected


def test_overlong_answers_never_reach_the_scorer(fake_gym):
    sample = GymTask("fake_numbers", size=50).heldout(1)[0]
    verifier = GymVerifier(max_answer_chars=5)
    assert verifier.score("1" * 6, sample).detail == "answer longer than 5 characters"
    assert fake_gym[-1].calls == [] and len(fake_gym) == 1  # no scorer dataset was even built
    assert pickle.loads(pickle.dumps(verifier)).max_answer_chars == 5


def test_heldout_is_deterministic_distinct_and_never_trained_on(fake_gym):
    task = GymTask("fake_numbers", {"modulus": 300}, size=3000)  # questions repeat every 300
    held = task.heldout(10)
    assert held == GymTask("fake_numbers", {"modulus": 300}, size=3000).heldout(10)
    questions = {s["prompt"] for s in held}
    assert len(questions) == 10
    rng = random.Random(0)
    assert not questions & {task.sample_train(rng)["prompt"] for _ in range(3000)}
    with pytest.raises(DataError, match="asked for 100 held-out questions, found"):
        task.heldout(100)  # 300 distinct questions hold about 30 held-out ones


def _held_out_count(questions):
    return sum(is_heldout_question(q) for q in set(questions))


def test_too_few_heldout_questions_names_the_generator_as_the_cause(fake_gym):
    # 300 distinct questions repeated over 3000 entries: the generator's settings are the limit.
    task = GymTask("fake_numbers", {"modulus": 300}, size=3000)
    held = _held_out_count(f"What is {v}?" for v in range(300))
    assert 0 < held < 100
    with pytest.raises(DataError) as info:
        task.heldout(100)
    message = str(info.value)
    assert message == (
        f"data.gym_name=fake_numbers: asked for 100 held-out questions, found {held}: its first "
        f"3000 entries hold 300 distinct questions, {held} of them held out (about 1 in 10); the "
        "generator repeats its questions, so data.gym_config allows only about 300 distinct "
        f"ones: widen its settings, or lower the number asked for (eval.size) to {held} or less"
    )
    assert "data.gym_size" not in message  # a bigger dataset would only repeat more
    assert len(task.heldout(held)) == held  # the advice works


def test_too_few_heldout_questions_in_a_small_dataset_says_raise_gym_size(fake_gym):
    task = GymTask("fake_numbers", size=50)  # 50 distinct questions: about 5 held out
    held = _held_out_count(f"What is {v}?" for v in range(50))
    with pytest.raises(DataError) as info:
        task.heldout(20)
    message = str(info.value)
    assert f"its first 50 entries hold 50 distinct questions, {held} of them held out" in message
    assert message.endswith(
        f"raise data.gym_size (to about 300), or lower the number asked for (eval.size) to "
        f"{held} or less"
    )
    assert len(GymTask("fake_numbers", size=300).heldout(20)) == 20  # the advice works


def test_no_heldout_question_at_all_suggests_turning_evaluation_off(fake_gym):
    modulus = next(
        m for m in range(1, 50) if not _held_out_count(f"What is {v}?" for v in range(m))
    )
    task = GymTask("fake_numbers", {"modulus": modulus}, size=500)
    with pytest.raises(
        DataError, match=r"found 0: .*or set eval.size=0 \(no held-out evaluation\)$"
    ):
        task.heldout(1)


def test_real_small_generator_gets_the_real_cause():
    pytest.importorskip("reasoning_gym")
    # gcd of two numbers in 1..4: only 16 distinct questions, however large the dataset.
    settings = {"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 4}
    task = GymTask("gcd", settings, size=5000)
    with pytest.raises(DataError) as info:
        task.heldout(20)
    message = str(info.value)
    assert "its first 5000 entries hold 16 distinct questions" in message
    assert "data.gym_config allows only about 16 distinct ones: widen its settings" in message
    assert "\n" not in message


def test_config_errors_are_one_line_and_name_the_field(fake_gym):
    def build(*overrides):
        return build_task(load_config(overrides=["data.task=gym", *overrides]).data)

    with pytest.raises(ConfigError, match="data.gym_name: required"):
        build()
    with pytest.raises(ConfigError, match="did you mean 'fake_numbers'"):
        build("data.gym_name=fake_number")
    with pytest.raises(ConfigError, match="data.gym_config: not a setting of 'fake_numbers'"):
        build("data.gym_name=fake_numbers", "data.gym_config=[colour=red]")
    with pytest.raises(ConfigError, match="data.gym_config: invalid for 'fake_numbers'"):
        build("data.gym_name=fake_numbers", "data.gym_config=[modulus=0]")
    with pytest.raises(ConfigError, match=r"data.gym_config\[1\]: expected KEY=VALUE"):
        build("data.gym_name=fake_numbers", "data.gym_config=[modulus=3,modulus]")
    task = build("data.gym_name=fake_numbers", "data.gym_config=[modulus=3]", "data.gym_size=9")
    assert task.kwargs == {"modulus": 3, "size": 9, "seed": 0}


def test_gym_config_values_are_yaml():
    assert parse_gym_config(["a=2", "b=0.5", "c=true", "d=[+, -]", "e=hello", "f="]) == {
        "a": 2,
        "b": 0.5,
        "c": True,
        "d": ["+", "-"],
        "e": "hello",
        "f": "",
    }


EXPECTED_OPERATORS = {"min_terms": 2, "operators": ["+", "-"]}


def test_gym_config_with_a_nested_list_survives_the_command_line():
    """The documented `'data.gym_config=[min_terms=2,operators=[+, -]]'` (issue 22)."""
    cfg = load_config(overrides=["data.gym_config=[min_terms=2,operators=[+, -]]"]).data
    assert cfg.gym_config == ["min_terms=2", "operators=[+, -]"]
    assert parse_gym_config(cfg.gym_config) == EXPECTED_OPERATORS


@pytest.mark.parametrize(
    "yaml_value",
    [
        "[min_terms=2, 'operators=[+, -]']",
        "\n    - min_terms=2\n    - operators=[+, -]",
        "'[min_terms=2,operators=[+, -]]'",  # the command line's text, quoted for YAML
        "'{min_terms: 2, operators: [+, -]}'",
    ],
)
def test_gym_config_in_a_yaml_file_reads_the_same(tmp_path, yaml_value):
    path = tmp_path / "gym.yaml"
    path.write_text(f"data:\n  task: gym\n  gym_name: x\n  gym_config: {yaml_value}\n")
    assert parse_gym_config(load_config(path).data.gym_config) == EXPECTED_OPERATORS


def test_gym_config_accepts_a_mapping_and_whole_settings_in_one_item():
    assert parse_gym_config(EXPECTED_OPERATORS) == EXPECTED_OPERATORS
    assert parse_gym_config(["{min_terms: 2}", "[operators=[+, -]]", "x=1"]) == {
        **EXPECTED_OPERATORS,
        "x": 1,
    }


def _documented_gym_configs() -> list[tuple[str, str]]:
    root = Path(__file__).resolve().parents[2]
    found = []
    for path in [*(root / "docs").rglob("*.md"), *(root / "src").rglob("*.py")]:
        text = path.read_text(encoding="utf-8")
        # The value runs to the end of the shell word: a quote, a space or a line end outside
        # brackets.
        for match in re.finditer(
            r"data\.gym_config=((?:\[[^\]\[]*(?:\[[^\]\[]*\][^\]\[]*)*\])|\S+)", text
        ):
            found.append((str(path.relative_to(root)), match.group(1)))
    return found


def test_every_documented_gym_config_parses(fake_gym):
    documented = _documented_gym_configs()
    values = {value for _, value in documented}
    assert "[min_terms=2,operators=[+, -]]" in values, documented
    for where, value in documented:
        cfg = load_config(overrides=[f"data.gym_config={value}"]).data
        settings = parse_gym_config(cfg.gym_config)
        assert settings and all(k.isidentifier() for k in settings), (where, value, settings)
        assert all(not isinstance(v, str) or "[" not in v for v in settings.values()), where


def test_documented_gym_configs_run_the_real_generator():
    pytest.importorskip("reasoning_gym")
    for where, value in _documented_gym_configs():
        settings = parse_gym_config(
            load_config(overrides=[f"data.gym_config={value}"]).data.gym_config
        )
        task = GymTask("basic_arithmetic", settings, size=20)
        assert task.make_sample(0)["prompt"], where
    sample = GymTask("basic_arithmetic", EXPECTED_OPERATORS, size=50).make_sample(3)
    assert "*" not in sample["prompt"] and "/" not in sample["prompt"]


@pytest.mark.parametrize(
    "items, message",
    [
        (["[min_terms=2, operators=[+, -]"], r"data.gym_config\[0\]: unbalanced brackets"),
        (["[min_terms=2, operators]"], r"data.gym_config\[0\] item 2: expected KEY=VALUE"),
        (["{min_terms: 2"], r"data.gym_config\[0\]: expected a YAML mapping"),
        (["x=1", "{1: 2}"], r"data.gym_config\[1\]: expected setting names as keys, got 1"),
        ({"min terms": 2}, "data.gym_config: expected setting names as keys, got 'min terms'"),
        (["2=x"], r"data.gym_config\[0\]: expected KEY=VALUE, got '2=x'"),
    ],
)
def test_malformed_gym_config_is_one_line_naming_the_item(items, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_gym_config(items)
    assert "\n" not in str(info.value)


def test_gym_config_values_yaml_cannot_read_are_kept_as_text():
    assert parse_gym_config(["a=!!int x", "b=[+", "c=" + "1" * 5000, "d=!!int"]) == {
        "a": "!!int x",
        "b": "[+",
        "c": "1" * 5000,
        "d": "!!int",
    }


def test_missing_package_is_a_one_line_user_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # import fails
    with pytest.raises(UserError, match=r"data.task=gym needs reasoning-gym.*rlvr\[gym\]"):
        GymTask("basic_arithmetic")
    sample = {"gym": {"name": "basic_arithmetic", "config": {}, "entry": {}}}
    with pytest.raises(UserError, match=r"the gym verifier needs reasoning-gym.*rlvr\[gym\]"):
        GymVerifier()("1", sample)


def test_verifier_rejects_samples_of_other_tasks():
    with pytest.raises(DataError, match="sample has no 'gym' field"):
        gym_reward("1", {"prompt": "1+1=", "answer": "2"})


def test_registered_and_picklable():
    assert get_verifier("gym") is gym_reward
    assert get_verifier("rlvr.rewards.gym:gym_reward") is gym_reward
    assert get_verifier("rlvr.data.tasks.gym:gym_reward") is gym_reward  # its spec before the move
    assert isinstance(pickle.loads(pickle.dumps(gym_reward)), GymVerifier)


# --- the real package -----------------------------------------------------------------------------


@pytest.fixture
def real_task():
    pytest.importorskip("reasoning_gym")
    overrides = [
        "data.task=gym",
        "data.gym_name=basic_arithmetic",
        "data.gym_config=[min_terms=2,max_terms=3,min_digits=1,max_digits=2]",
        "data.gym_size=2000",
        "reward.verifier=gym",
    ]
    return build_task(load_config(overrides=overrides).data)


def test_real_reasoning_gym_end_to_end(real_task):
    held = real_task.heldout(10)
    assert held == real_task.heldout(10)
    train = [real_task.sample_train(random.Random(i)) for i in range(50)]
    assert not {s["prompt"] for s in held} & {s["prompt"] for s in train}
    for sample in held[:5] + train[:5]:
        sample = json.loads(json.dumps(sample))  # as read back by `rlvr verify`
        right, wrong = sample["answer"], str(int(sample["answer"]) + 1)
        assert gym_reward(f"<think>work</think><answer>{right}</answer>", sample) == 1.0
        assert gym_reward(f"<think>work</think>{right}", sample) == 1.0
        assert gym_reward(f"<think>work</think><answer>{wrong}</answer>", sample) == 0.0
        assert gym_reward(f"<think>{right}</think>", sample) == 0.0
        assert gym_reward(f"<think>{right}", sample) == 0.0


def test_real_reasoning_gym_in_a_verifier_pool(real_task):
    from rlvr.rewards.pool import VerifierPool

    samples = real_task.heldout(3)
    completions = [f"<answer>{s['answer']}</answer>" for s in samples[:2]] + ["nope"]
    with VerifierPool("gym", workers=1, timeout_s=60.0) as pool:
        rewards, failures, _ = pool.score_batch(completions, samples)
    assert rewards == [1.0, 1.0, 0.0] and failures == 0
