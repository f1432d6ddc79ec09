"""TRL-shaped reward functions as verifiers: detected or declared, called once per batch with
keyword lists, None as "skipped", failures that name the function; callables and lists of them
as `reward.verifier`, in this process and in a verifier pool."""

from __future__ import annotations

import re

import pytest

from rlvr.config import Config, dump_yaml, to_dict
from rlvr.errors import ConfigError
from rlvr.rewards.batched import BatchedReward, is_trl_shaped, trl_arguments
from rlvr.rewards.compose import CompositeVerifier, build_verifier, verifier_needs
from rlvr.rewards.pool import VerifierPool, score_one
from rlvr.rewards.scoring import Scorer
from rlvr.rewards.spec import absolute_spec, describe_spec, worker_spec

CALLS: list[dict] = []


def accuracy_reward(completions, ground_truth, **kwargs):
    """The issue's TRL function: 1.0 when the completion's last number equals ground_truth."""
    CALLS.append({"completions": completions, "ground_truth": ground_truth, **kwargs})
    out = []
    for text, truth in zip(completions, ground_truth):
        numbers = re.findall(r"-?\d+", text if isinstance(text, str) else text[0]["content"])
        out.append(1.0 if numbers and numbers[-1] == str(truth) else 0.0)
    return out


def format_reward(completions, **kwargs):
    """TRL's other example: 1.0 for a completion that is one number, None for an empty one."""
    return [None if not c else float(bool(re.fullmatch(r"\s*-?\d+\s*", c))) for c in completions]


def per_sample(completion, sample):
    return float(completion == sample["answer"])


def batch(n: int, **extra) -> tuple[list[str], list[dict]]:
    texts = [f"so it is {i}" for i in range(n)]
    samples = [
        {"prompt": "2+2=", "answer": "4", "ground_truth": 4, "id": f"s{i}", **extra}
        for i in range(n)
    ]
    return texts, samples


@pytest.fixture(autouse=True)
def _fresh_calls():
    CALLS.clear()


def test_trl_functions_are_told_apart_from_per_sample_verifiers_by_their_signature():
    assert is_trl_shaped(accuracy_reward) and is_trl_shaped(format_reward)
    assert is_trl_shaped(lambda **kwargs: [])
    assert not is_trl_shaped(per_sample)
    assert not is_trl_shaped(lambda completion, sample: 0.0)
    assert not is_trl_shaped(len)  # no signature to read: per-sample


def test_a_batch_is_one_call_with_keyword_lists_of_prompts_completions_ids_and_columns():
    verifier = build_verifier(accuracy_reward)
    assert isinstance(verifier, CompositeVerifier)  # alone it is a sum of one: reward/<name>
    texts, samples = batch(5)
    rewards, failures = Scorer(verifier)(texts, samples, completion_ids=[[1, 2]] * 5)
    assert len(CALLS) == 1  # once per batch, not once per completion
    call = CALLS[0]
    assert call["completions"] == texts
    assert call["prompts"] == ["2+2="] * 5
    assert call["completion_ids"] == [[1, 2]] * 5
    assert call["ground_truth"] == [4] * 5 and call["answer"] == ["4"] * 5
    assert call["id"] == [f"s{i}" for i in range(5)]
    assert rewards == [0.0, 0.0, 0.0, 0.0, 1.0] and failures == 0


def test_conversational_rows_give_message_lists_as_prompts_and_completions():
    messages = [{"role": "user", "content": "2+2="}]
    samples = [{"prompt": "2+2=", "prompt_messages": messages, "ground_truth": 4}]
    kwargs = trl_arguments(["4"], samples)
    assert kwargs["prompts"] == [messages]
    assert kwargs["completions"] == [[{"role": "assistant", "content": "4"}]]
    assert "prompt" not in kwargs and "prompt_messages" not in kwargs
    assert Scorer(build_verifier(accuracy_reward))(["4"], samples) == ([1.0], 0)


def test_none_adds_nothing_and_is_left_out_of_the_functions_metric():
    verifier = build_verifier([accuracy_reward, (format_reward, 0.5)])
    scorer = Scorer(verifier)
    rewards, failures = scorer(["4", "", "3"], batch(3)[1])
    # 4: accuracy 1 + 0.5 * format 1; "": format skipped; 3: 0 + 0.5 * 1
    assert rewards == [1.5, 0.0, 0.5] and failures == 0
    assert scorer.pop_components() == {
        "accuracy_reward": [1.0, 0.0, 0.0],
        "format_reward": [1.0, 1.0],  # the skipped completion has no value
    }
    only = Scorer(build_verifier(format_reward))
    assert only(["", ""], batch(2)[1]) == ([0.0, 0.0], 0)  # all skipped: 0, as TRL's nansum
    assert only.pop_components() == {}


def test_a_function_that_raises_fails_every_completion_of_the_call_naming_it():
    def broken_reward(completions, **kwargs):
        raise ValueError("no ground truth here")

    scorer = Scorer(build_verifier([accuracy_reward, broken_reward]))
    rewards, failures = scorer(*batch(3))
    assert rewards == [0.0] * 3 and failures == 3
    records = scorer.pop_failures()
    assert [r.row for r in records] == [0, 1, 2]
    assert {r.component for r in records} == {"broken_reward"}
    assert records[0].error == "ValueError: no ground truth here"
    assert records[0].traceback is not None and records[1].traceback is None  # one traceback


@pytest.mark.parametrize(
    "returned, message",
    [
        ([1.0], r"the verifier 'bad_reward' returned list \[1\.0\] \(expected a list of 3"),
        (1.0, r"the verifier 'bad_reward' returned float 1\.0 \(expected a list of 3"),
    ],
)
def test_a_wrong_length_or_a_non_list_fails_the_call_naming_the_function(returned, message):
    def bad_reward(completions, **kwargs):
        return returned

    scorer = Scorer(build_verifier(bad_reward))
    assert scorer(*batch(3)) == ([0.0] * 3, 3)
    records = scorer.pop_failures()
    assert all(re.search(message, r.error) for r in records), records[0].error
    assert {r.component for r in records} == {"bad_reward"}


def test_a_wrong_item_fails_only_its_completion():
    def half_reward(completions, **kwargs):
        return [1.0, "1.0", float("nan")]

    scorer = Scorer(build_verifier(half_reward))
    assert scorer(*batch(3)) == ([1.0, 0.0, 0.0], 2)
    records = scorer.pop_failures()
    assert [r.row for r in records] == [1, 2]
    assert records[0].error.startswith("TypeError: the verifier 'half_reward' returned")
    assert records[0].component == "half_reward"


def test_a_function_from_python_and_lists_of_functions_and_weights_are_verifiers():
    assert build_verifier(per_sample) is per_sample
    v = build_verifier([per_sample, (accuracy_reward, 2.0), "format:0.1"])
    assert list(v.components) == ["per_sample", "accuracy_reward", "format"]
    assert [w for _, w in v.components.values()] == [1.0, 2.0, 0.1]
    assert isinstance(v.components["accuracy_reward"][0], BatchedReward)
    texts, samples = ["4"], batch(1)[1]
    assert Scorer(v)(texts, samples)[0] == [1.0 + 2.0 + 0.0]


@pytest.mark.parametrize(
    "spec, message",
    [
        ([per_sample, 3], r"reward\.verifier\[1\]: expected a function, a verifier name"),
        ([(per_sample, "a")], r"weight of 'per_sample' must be a number"),
        ([per_sample, per_sample], "'per_sample' appears twice"),
        ([], "needs at least one component"),
    ],
)
def test_a_bad_list_is_a_one_line_config_error(spec, message):
    with pytest.raises(ConfigError, match=message):
        build_verifier(spec)


def test_trl_specs_with_weights_parse_and_name_components_by_function(tmp_path):
    f = tmp_path / "rewards.py"
    f.write_text(
        "def accuracy_reward(completions, ground_truth, **kwargs):\n"
        "    return [float(c.strip() == str(g)) for c, g in zip(completions, ground_truth)]\n"
        "def lenient(prompts, **kwargs):  # no `completions`: only trl: says it is batched\n"
        "    return [0.5 for _ in prompts]\n"
    )
    spec = f"trl:{f}:accuracy_reward:1.0, trl:{f}:lenient:0.2"
    v = build_verifier(spec)
    assert list(v.components) == ["accuracy_reward", "lenient"]
    assert [w for _, w in v.components.values()] == [1.0, 0.2]
    assert Scorer(v)(["4", "5"], batch(2)[1])[0] == pytest.approx([1.1, 0.1])
    detected = build_verifier(f"{f}:accuracy_reward")  # the signature says so, without trl:
    assert list(detected.components) == ["accuracy_reward"]
    assert verifier_needs(v) == {"ground_truth": "accuracy_reward"}


def test_what_a_verifier_needs_from_every_row():
    assert verifier_needs(build_verifier("math")) == {"answer": "math"}
    assert verifier_needs(build_verifier("math:1,format:0.1")) == {"answer": "math"}
    assert verifier_needs(build_verifier("format")) == {}
    assert verifier_needs(build_verifier(format_reward)) == {}
    both = build_verifier([accuracy_reward, ("countdown", 1.0)])
    assert verifier_needs(both) == {
        "ground_truth": "accuracy_reward",
        "numbers": "countdown",
        "target": "countdown",
    }


def test_trl_prefixed_file_items_are_made_absolute_for_workers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = absolute_spec("trl:r.py:acc:1.0, r.py:fmt,math")
    assert spec == f"trl:{tmp_path}/r.py:acc:1.0, {tmp_path}/r.py:fmt,math"


def test_a_lambda_cannot_go_to_worker_processes_a_one_line_config_error():
    with pytest.raises(ConfigError, match=r"reward\.workers=0, or a function defined at the top"):
        worker_spec([lambda completions, **kw: [1.0] * len(completions)])
    with pytest.raises(ConfigError, match="cannot be sent to the reward.workers"):
        build_verifier(lambda c, s: 1.0, workers=2)
    assert build_verifier(per_sample, workers=2) is per_sample  # picklable: fine


def test_picklable_trl_functions_score_in_a_worker_pool_with_their_components():
    texts, samples = ["4", "", "3"], batch(3)[1]
    with VerifierPool([accuracy_reward, (format_reward, 0.5)], workers=1) as pool:
        scores, components, failures = pool.score_with_failures(texts, samples, [[1]] * 3)
    assert scores.rewards == [1.5, 0.0, 0.5] and failures == []
    assert components == {"accuracy_reward": [1.0, 0.0, 0.0], "format_reward": [1.0, 1.0]}


def test_score_one_passes_a_single_completion_as_lists_of_one():
    reply = score_one(build_verifier(accuracy_reward), "4", batch(1)[1][0], [7, 8])
    assert reply.reward == 1.0 and reply.parts == {"accuracy_reward": 1.0}
    assert CALLS[-1]["completion_ids"] == [[7, 8]]


def test_a_run_config_records_functions_as_module_and_name(tmp_path):
    cfg = Config()
    cfg.reward.verifier = [accuracy_reward, (format_reward, 0.2)]  # type: ignore[assignment]
    assert to_dict(cfg)["reward"]["verifier"] == (
        f"{__name__}:accuracy_reward,{__name__}:format_reward:0.2"
    )
    cfg.reward.verifier = lambda c, s: 1.0  # type: ignore[assignment]
    assert to_dict(cfg)["reward"]["verifier"].endswith(".<lambda>")  # readable, no crash
    dump_yaml(cfg, tmp_path / "config.yaml")
    assert "<lambda>" in (tmp_path / "config.yaml").read_text()
    assert describe_spec([(per_sample, 0.5)]) == f"{__name__}:per_sample:0.5"


def test_a_config_built_from_a_mapping_in_python_keeps_the_functions():
    from rlvr.config import load_config

    cfg = load_config(tree={"reward": {"verifier": [accuracy_reward, (format_reward, 0.2)]}})
    assert cfg.reward.verifier == [accuracy_reward, (format_reward, 0.2)]
    assert list(build_verifier(cfg.reward.verifier).components) == [
        "accuracy_reward",
        "format_reward",
    ]
    with pytest.raises(ConfigError, match=r"^model\.name_or_path: expected str"):
        load_config(tree={"model": {"name_or_path": per_sample}})  # only where it is declared
