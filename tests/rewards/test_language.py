"""Language consistency: share of reasoning words in the target script."""

import time

import pytest

from rlvr.rewards.language import (
    LanguageVerifier,
    language_reward,
    language_share,
    reasoning_text,
    resolve_target,
    script_words,
    strip_math,
)
from rlvr.rewards.registry import get_verifier


def test_pure_english_reasoning_scores_one():
    assert language_reward("<think>We add the two numbers.</think>5", {}) == 1.0


def test_mixed_reasoning_scores_the_share_of_target_words():
    # 4 latin words, 2 Han characters (one word each)
    text = "<think>First add them 然后 carry</think>"
    assert language_reward(text, {}) == pytest.approx(4 / 6)
    assert language_reward(text, {"language": "zh"}) == pytest.approx(2 / 6)


def test_math_digits_punctuation_and_variables_are_ignored():
    text = "我们 计算 $x^2 + \\frac{1}{2}$ 和 \\(y\\) = 42, x + y! \\alpha"
    assert script_words(text) == ["CJK"] * 5
    assert language_share(text, "zh") == 1.0


def test_cyrillic_and_accents_count_as_their_script():
    assert language_share("Сложим числа и получим ответ", "ru") == 1.0
    assert language_share("Déjà vu, ça marche", "fr") == 1.0
    assert language_share("Сложим numbers", "cyrillic") == 0.5


def test_only_the_think_block_is_scored_when_there_is_one():
    completion = "<think>we add</think><answer>答案是五</answer>"
    assert reasoning_text(completion) == "we add"
    assert language_reward(completion, {}) == 1.0
    assert reasoning_text("<think>never closed") == "never closed"
    assert reasoning_text("no think block") == "no think block"


def test_nothing_to_count_scores_zero():
    assert language_reward("<think>1 + 2 = 3</think>", {}) == 0.0
    assert language_reward("", {}) == 0.0


def test_target_from_the_verifier_or_the_sample():
    russian = LanguageVerifier("ru")
    assert russian("<think>считаем</think>", {}) == 1.0
    assert russian("<think>считаем</think>", {"language": "en"}) == 0.0


def test_unknown_target_is_a_clear_error():
    assert resolve_target("zh-CN") == "cjk"
    with pytest.raises(ValueError, match="unknown target 'klingon'"):
        resolve_target("klingon")


def test_registry_name():
    assert get_verifier("language") is language_reward


def test_unclosed_math_is_kept_as_text():
    assert strip_math("pay $5 now") == "pay $5 now"
    assert strip_math("so $x$ and $$y$$ here") == "so   and   here"
    assert strip_math("a \\( b") == "a \\( b"


def test_adversarial_math_delimiters_are_handled_in_linear_time():
    for text in ["\\(" * 100_000, "$x$ " * 50_000 + "\\[", "$$" * 100_000]:
        start = time.monotonic()
        language_reward(text, {})
        assert time.monotonic() - start < 2.0
