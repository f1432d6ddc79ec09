"""The exact-answer verifier on tool-using completions: `<python>` calls, `<output>` blocks."""

import pytest

from rlvr.rewards.exact import calls_tool, exact_answer_reward, extract_final_answer

SAMPLE = {"id": "multiplication-3x2-347*28", "prompt": "347*28=", "answer": "9716"}
CALL = "<python>print(347*28)</python>"
OUT = "<output>9716\n</output>"
PAIR = CALL + OUT
THINK = "<think>too hard to do in my head</think>"


@pytest.mark.parametrize(
    "completion",
    [
        PAIR + "9716",  # the demonstration
        " " + PAIR + "9716\n",
        PAIR + "\n9716",
        CALL + "\n" + OUT + " 9716",  # whitespace between blocks is not text
        "<python>print(347*29)</python><output>10063\n</output>" + PAIR + "9716",  # two calls
        "<python>x = 347\nprint(x * 28)</python>" + OUT + "9716",  # code with newlines
        "<python></python><output></output>9716",  # empty call: the answer is still its own
        THINK + PAIR + "9716",  # one leading think block, as without tools
        "<think>I could call <python> here</think>" + PAIR + "9716",  # tags in think are text
        "9716",  # a direct answer still scores
        PAIR + "09716",  # leading zeros, as for direct answers
    ],
)
def test_an_integer_after_complete_call_output_pairs_scores_one(completion):
    assert exact_answer_reward(completion, SAMPLE) == 1.0


@pytest.mark.parametrize(
    "completion",
    [
        PAIR,  # the answer only inside the output block
        PAIR + " ",
        CALL + "<output>9716",  # unclosed output
        CALL + "<output>9716\n",
        "<python>print(347*28)" + OUT + "9716",  # unclosed call
        "<python>print(347*28)9716",
        OUT + "9716",  # an output block without a call before it
        CALL + "9716",  # a call without its output
        CALL + "</output>9716",  # a stray closing tag
        PAIR + "</output>9716",
        PAIR + "</python>9716",
        PAIR + "<python>9716",  # a fake unclosed block at the end
        PAIR + "<output>9716",
        "9716" + PAIR,  # answer before the call
        "9716" + PAIR + "9716",
        PAIR + "9716" + PAIR + "9716",  # an answer between pairs
        CALL + "so" + OUT + "9716",  # text between blocks
        PAIR + "so 9716",
        "ok " + PAIR + "9716",
        PAIR + "9716 9716",  # two numbers
        PAIR + "9716\n10063",
        CALL + "<output>9716\n</output>9716\n</output>9716",  # program printed a closing tag
        "<python>print('</output>')</python>" + OUT + "9716",  # tag text inside a call
        "<python>print(1)</python><output><python>1</output>9716",  # tag inside an output
        "<python><python>print(1)</python>" + OUT + "9716",  # nested call
        PAIR + THINK + "9716",  # think block after a tool pair
        THINK + THINK + PAIR + "9716",  # two think blocks
        "<think>unclosed" + PAIR + "9716",
        PAIR + "</think>9716",
        "<think><think></think>" + PAIR + "9716",
        PAIR + "9717",  # wrong answer after a right output
        "<python>print(347*29)</python><output>10063\n</output>10063",  # wrong code, copied
    ],
)
def test_malformed_or_wrong_tool_completions_score_zero(completion):
    assert exact_answer_reward(completion, SAMPLE) == 0.0


def test_extraction_gives_the_integer_after_the_last_output_or_none():
    assert extract_final_answer(PAIR + "9716") == "9716"
    assert extract_final_answer(PAIR + "-3") == "-3"
    assert extract_final_answer(PAIR) is None
    assert extract_final_answer(CALL) is None
    assert extract_final_answer("<python>") is None
    assert extract_final_answer("<output></output>") is None


def test_calls_tool_means_the_completion_opens_a_python_block():
    assert calls_tool(PAIR + "9716")
    assert calls_tool(" <python>print(")
    assert not calls_tool("9716")
    assert not calls_tool("<think>9716</think>9716")
