import pytest

from rlvr.rewards.exact import exact_answer_reward, extract_final_answer, is_reasoning

SAMPLE = {"id": "addition-3d-347+285", "prompt": "347+285=", "answer": "632", "source": "addition"}
TRACE = "<think>7+5+0=12,4+8+1=13,3+2+1=06</think>"


@pytest.mark.parametrize(
    "completion",
    ["632", " 632\n", TRACE + "632", "  " + TRACE + " 632 ", "\n" + TRACE + "\n632\n"],
)
def test_correct_answer_with_or_without_think_scores_one(completion):
    assert exact_answer_reward(completion, SAMPLE) == 1.0


def test_leading_zeros_are_accepted_because_answers_compare_as_integers():
    assert exact_answer_reward("0632", SAMPLE) == 1.0
    assert extract_final_answer("052") == "052"


@pytest.mark.parametrize(
    "completion",
    [
        "",  # no answer
        "   ",
        TRACE,  # trace but no answer after it
        "522",  # wrong (carries dropped)
        TRACE + "522",
        "632 522",  # hedged: several numbers
        "632,522",
        "632 or 522",
        "6 32",
        "the answer is 632",
        "632.",
        "+632",
        "<think>7+5+0=12,4+8+1=13,3+2+1=06 632",  # unclosed think
        "<think>632",
        "632</think>632",  # stray close
        TRACE + TRACE + "632",  # a second think block
        TRACE + "632" + TRACE,
        "632" + TRACE + "632",  # think block not at the start
        TRACE + "<think>632",
    ],
)
def test_missing_hedged_or_malformed_answers_score_zero(completion):
    assert exact_answer_reward(completion, SAMPLE) == 0.0


def test_extraction_returns_none_for_malformed_and_the_integer_otherwise():
    assert extract_final_answer(TRACE + "632") == "632"
    assert extract_final_answer("-17") == "-17"
    assert extract_final_answer("<think>no end") is None
    assert extract_final_answer("1 2") is None
    assert extract_final_answer("") is None


def test_non_ascii_digits_are_not_integers():
    assert extract_final_answer("٦٣٢") is None


def test_negative_answers_compare_as_integers():
    assert exact_answer_reward("-5", {"answer": "-5"}) == 1.0
    assert exact_answer_reward("5", {"answer": "-5"}) == 0.0


def test_is_reasoning_means_the_completion_opens_a_think_block():
    assert is_reasoning(TRACE + "632")
    assert is_reasoning("  <think>unfinished")
    assert not is_reasoning("632")
    assert not is_reasoning("632" + TRACE)


def test_verifier_module_imports_only_the_standard_library():
    import ast
    import sys

    import rlvr.rewards.exact as exact

    tree = ast.parse(open(exact.__file__).read())
    imported = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    own = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {m for m in own if m.startswith("rlvr")} <= {"rlvr.errors", "rlvr.markup"}  # stdlib only
    imported.discard("rlvr")
    assert imported <= set(sys.stdlib_module_names)
