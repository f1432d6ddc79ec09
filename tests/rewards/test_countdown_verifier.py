"""The countdown verifier: exact arithmetic, each number exactly once, and a hostile input set."""

import argparse
import json
import time

import pytest

from rlvr.errors import DataError
from rlvr.rewards.compose import build_verifier
from rlvr.rewards.countdown import (
    CountdownVerifier,
    countdown_reward,
    evaluate,
    final_answer_text,
    parse_expression,
    steps,
)
from rlvr.rewards.registry import get_verifier

SAMPLE = {"numbers": [44, 19, 35, 3, 3], "target": 98}


def reward(completion: str, sample: dict = SAMPLE) -> float:
    return countdown_reward(completion, sample)


@pytest.mark.parametrize(
    "completion",
    [
        "44+19+35",  # the two 3s unused
        "44+19+35*3*3/3",  # 3 used three times
        "44+19+35+3*3",  # = 107
        "<think>44+19+35*3/3</think>",  # the reasoning is not the answer
    ],
)
def test_wrong_or_incomplete_answers_score_zero(completion):
    assert reward(completion) == 0.0


@pytest.mark.parametrize(
    "completion",
    [
        "44+19+35+3-3+44-44",  # = 98, but 44 three times
        "44+19+35*3/3*3/3",  # = 98, but 3 four times
        "44+19+35",  # = 98, but the 3s unused: every number exactly once
        "44+19+35+3-3+0",  # = 98, but 0 is not given
    ],
)
def test_right_value_with_the_wrong_numbers_scores_zero(completion):
    assert evaluate(parse_expression(completion)) == SAMPLE["target"]
    assert reward(completion) == 0.0


@pytest.mark.parametrize(
    "completion",
    [
        "44+19+35*3/3",
        " 44 + 19 + 35 * 3 / 3 ",
        "<think>35*3=105,105/3=35,44+19+35=98</think>44+19+35*3/3",
        "<think>try</think>\n<answer>(35*3/3)+44+19</answer>",
        "<answer>44+19+35*3/3</answer>",
        "44+19+35*3/3 = 98",
        "<think>a</think>b<think>c</think>44+(19+(35*(3/3)))",  # only the text after the last
    ],
)
def test_correct_expressions_in_every_accepted_form_score_one(completion):
    assert reward(completion) == 1.0


def test_intermediate_fractions_are_exact():
    assert reward("(4/3)*6", {"numbers": [4, 3, 6], "target": 8}) == 1.0
    assert reward("(2/3)*(3/2)", {"numbers": [2, 3, 3, 2], "target": 1}) == 1.0
    assert reward("7/2*2", {"numbers": [7, 2, 2], "target": 7}) == 1.0
    assert reward("7/2", {"numbers": [7, 2], "target": 3}) == 0.0  # 7/2 is 3.5, not 3
    # 1e16 + 1 - 1e16 is 0 in floating point; exactly it is 1
    big = {"numbers": [10**16, 1, 10**16], "target": 1}
    assert reward(f"{10**16}+1-{10**16}", big) == 1.0


def test_a_number_given_twice_must_be_used_twice():
    sample = {"numbers": [5, 5, 2], "target": 12}
    assert reward("5+5+2", sample) == 1.0
    assert reward("5*2+2", sample) == 0.0


def test_a_trailing_claim_must_name_the_target():
    assert reward("44+19+35*3/3 = 97") == 0.0
    assert reward("44+19+35*3/3 = 98 = 98") == 0.0


def test_division_by_zero_scores_zero_with_a_detail():
    sample = {"numbers": [4, 3, 3], "target": 4}
    score = countdown_reward.score("4/(3-3)", sample)
    assert score.reward == 0.0 and "division by zero" in score.detail


HOSTILE = [
    "__import__('os').system('echo pwned')",
    "eval('44+19+35*3/3')",
    "exec('x=1')",
    "(lambda: 98)()",
    "[44, 19, 35, 3]",
    "(44, 19, 35, 3)",
    "98 if 1 else 0",
    "44 .real + 19 + 35",
    "2**10000000",
    "9**9**9**9",
    "44+19+35*3**1",
    "44+19+35*3//1",
    "44+19+35*3%4",
    "-44+19+35*3",
    "+44+19+35*3/3",
    "44+19+35*3/3.0",
    "44+19+35*3/3e0",
    "44+19+35*3/1e3",
    "4.4e1+19+35*3/3",
    "44+19+35*0x3/3",
    "44+19+35*3_0/30",
    "44+19+35*True*3/3",
    "٤٤+19+35*3/3",  # Arabic-Indic digits
    "４４+19+35*3/3",  # full-width digits
    "𝟒𝟒+19+35*3/3",  # mathematical bold digits
    "44+19+35*3/3\n+0",
    "44+19+35*3/3;0",
    "44 + 19 + 35 * 3 / 3 # comment",
    "(" * 1000 + "44" + ")" * 1000 + "+19+35*3/3",
    "(" * 20 + "44" + ")" * 20 + "+19+35*3/3",
    "44" + "+0" * 5000,
    "9" * 5000,
    "99999999999999999999999*0+98",
    "044+19+35*3/3",
    "",
    "<answer>44+19+35*3/3</answer><answer>1</answer>",
    "<answer>44+19+35*3/3",
    "<think>44+19+35*3/3",
    "44+19+35*3/3<think>",
]


@pytest.mark.parametrize("completion", HOSTILE)
def test_hostile_answers_score_zero_quickly_and_never_execute(completion):
    start = time.perf_counter()
    assert reward(completion) == 0.0
    assert time.perf_counter() - start < 0.5


def test_hostile_detail_says_why():
    assert "'_' is not allowed" in countdown_reward.score("__import__('os')", SAMPLE).detail
    assert "Pow is not allowed" in countdown_reward.score("44+19+35*3**1", SAMPLE).detail
    assert (
        "nested deeper"
        in countdown_reward.score("((((((((((((((((((1))))))))))))))))))", SAMPLE).detail
    )
    assert "longer than" in countdown_reward.score("9" * 5000, SAMPLE).detail
    assert "UnaryOp is not allowed" in countdown_reward.score("-44+19+35*3", SAMPLE).detail


def test_limits_are_configurable():
    strict = CountdownVerifier(max_chars=10, max_depth=1)
    assert strict("44+19+35*3/3", SAMPLE) == 0.0
    assert strict("(44+(19+35))*3/3", SAMPLE) == 0.0
    assert CountdownVerifier(max_depth=2)("(44+(19+35))*3/3", SAMPLE) == 1.0


def test_samples_without_numbers_or_target_are_data_errors():
    with pytest.raises(DataError, match="'numbers' must be a non-empty list of integers"):
        countdown_reward("1+2", {"target": 3})
    with pytest.raises(DataError, match="'numbers'"):
        countdown_reward("1+2", {"numbers": ["1", "2"], "target": 3})
    with pytest.raises(DataError, match="'target' must be an integer"):
        countdown_reward("1+2", {"numbers": [1, 2], "target": "3"})


def test_answer_extraction_rules():
    assert final_answer_text("<think>x</think> 1+2 ") == "1+2"
    assert final_answer_text("<think>x</think>so <answer> 1+2 </answer> done") == "1+2"
    assert final_answer_text("<think>unfinished") is None
    assert final_answer_text("</answer>1<answer>") is None
    assert final_answer_text("1+2") == "1+2"


def test_steps_follow_the_tree():
    tree = parse_expression("(44+19)*(35-3)/7")
    assert steps(tree) == ["44+19=63", "35-3=32", "63*32=2016", "2016/7=288"]
    assert steps(parse_expression("1/3*6")) == ["1/3=(1/3)", "(1/3)*6=2"]


def test_registered_and_composable():
    assert get_verifier("countdown") is countdown_reward
    composite = build_verifier("countdown:1.0,format:0.1")
    assert composite("<think>a</think><answer>44+19+35*3/3</answer>", SAMPLE) == pytest.approx(1.1)


def test_rlvr_verify_scores_a_countdown_file(tmp_path, capsys):
    from rlvr.commands.verify import add_parser, run

    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    rows = [
        {**SAMPLE, "completion": "44+19+35*3/3"},
        {**SAMPLE, "completion": "__import__('os').system('echo pwned')"},
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    parser = argparse.ArgumentParser(prog="rlvr")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["verify", "--verifier", "countdown", "--input", str(src), "--output", str(out)]
        + ["--workers", "0"]
    )
    assert run(args) == 0
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["reward"] for r in scored] == [1.0, 0.0]
