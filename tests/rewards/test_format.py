"""Format verifier: the think/answer template, matched in full."""

import time

import pytest

from rlvr.rewards.format import FormatVerifier, format_reward
from rlvr.rewards.registry import get_verifier

SAMPLE = {"answer": "5"}


@pytest.mark.parametrize(
    "completion",
    [
        "<think>2+3=5</think><answer>5</answer>",
        "<think>\n2+3=5\n</think>\n<answer>\n5\n</answer>\n",
        "  <think>a</think>   \n\n <answer>b</answer>  ",
    ],
)
def test_template_with_whitespace_between_blocks_scores_one(completion):
    assert format_reward(completion, SAMPLE) == 1.0


@pytest.mark.parametrize(
    "completion",
    [
        "",
        "5",
        "<answer>5</answer>",  # no think block
        "<think>x</think>",  # no answer block
        "<think>x</think>5",
        "<answer>5</answer><think>x</think>",  # wrong order
        "<think>x</think><answer>5</answer>extra",  # text after the template
        "Sure! <think>x</think><answer>5</answer>",  # text before the template
        "<think>x</think> so <answer>5</answer>",  # text between the blocks
        "<think>x</think><answer>5</answer><answer>6</answer>",  # two answer blocks
        "<think>x</think><think>y</think><answer>5</answer>",  # two think blocks
        "<think>x<answer>4</answer></think><answer>5</answer>",  # tag inside think
        "<think>x</think><answer>5</think></answer>",
        "<think>   </think><answer>5</answer>",  # empty think
        "<think>x</think><answer> </answer>",  # empty answer
        "<think>x</think><answer>5",  # unclosed answer
        "<think>x<answer>5</answer>",  # unclosed think
    ],
)
def test_anything_else_scores_zero(completion):
    assert format_reward(completion, SAMPLE) == 0.0


def test_think_block_can_be_optional():
    lenient = FormatVerifier(require_think=False)
    assert lenient("<answer>5</answer>", SAMPLE) == 1.0
    assert lenient("<think>x</think><answer>5</answer>", SAMPLE) == 1.0
    assert lenient("5 <answer>5</answer>", SAMPLE) == 0.0


def test_tags_and_pattern_are_configurable():
    custom = FormatVerifier(think_tag="reasoning", answer_tag="final")
    assert custom("<reasoning>x</reasoning><final>5</final>", SAMPLE) == 1.0
    assert custom("<think>x</think><answer>5</answer>", SAMPLE) == 0.0
    boxed = FormatVerifier(pattern=r".*\\boxed\{[^{}]+\}\s*")
    assert boxed("work \\boxed{5}", SAMPLE) == 1.0
    assert boxed("\\boxed{5} and more", SAMPLE) == 0.0


def test_registry_name():
    assert get_verifier("format") is format_reward


def test_adversarial_completions_are_checked_in_linear_time():
    for text in ["<think>a" + "</think>" * 100_000, "<think>a</think>" + "<answer>" * 100_000]:
        start = time.monotonic()
        assert format_reward(text, SAMPLE) == 0.0
        assert time.monotonic() - start < 1.0
