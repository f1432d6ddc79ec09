"""Assert-style code tests (HumanEval `check(candidate)` rows, MBPP `test_list` rows): what they
accept and how they score. Hostile programs against them are in test_code_asserts_attacks.py."""

from __future__ import annotations

import textwrap

import pytest

from rlvr.errors import DataError
from rlvr.isolation.sandbox import Program, SandboxUnavailable
from rlvr.rewards.code import CodeVerifier
from rlvr.rewards.code.asserts import parse_assert_tests, prompt_code


@pytest.fixture(scope="module")
def verifier() -> CodeVerifier:
    v = CodeVerifier(timeout_s=2.0)
    try:
        v.sandbox.run(Program("pass"), [""])
    except SandboxUnavailable as e:
        pytest.skip(f"bwrap sandbox unavailable here: {e}")
    return v


def fenced(code: str) -> str:
    return f"Here it is:\n```python\n{code.strip(chr(10))}\n```\n"


PROMPT = '''from typing import List


def double(xs: List[int]) -> List[int]:
    """Each element times two."""
'''
HUMANEVAL = {
    "task_id": "T/0",
    "prompt": PROMPT,
    "entry_point": "double",
    "test": textwrap.dedent(
        """
        METADATA = {}


        def check(candidate):
            assert candidate([]) == []
            assert candidate([1, 2]) == [2, 4]
            assert candidate([-3]) == [-6]
        """
    ),
}
MBPP = {
    "task_id": 7,
    "text": "Write a function to find the shared elements of two tuples.",
    "test_list": [
        "assert set(similar_elements((3, 4, 5, 6), (5, 7, 4, 10))) == set((4, 5))",
        "assert math.isclose(area(2), 4 * math.pi)",
        "assert similar_elements((1,), (2,)) == ()",
    ],
    "test_setup_code": "import math",
}
MBPP_SOLUTION = """
import math

def similar_elements(a, b):
    return tuple(sorted(set(a) & set(b)))

def area(r):
    return math.pi * r * r
"""


# --- HumanEval rows --------------------------------------------------------------------------


def test_a_function_body_is_run_after_the_prompts_code(verifier):
    score = verifier.score(fenced("    return [2 * x for x in xs]"), HUMANEVAL)
    assert (score.reward, score.detail) == (1.0, "check passed")


def test_a_whole_function_is_run_as_it_is(verifier):
    code = "def double(xs):\n    return [x + x for x in xs]"
    assert verifier(fenced(code), HUMANEVAL) == 1.0
    # The prompt is not prepended when the block defines the entry point, so its imports are not
    # either: a whole function must bring its own.
    typed = "def double(xs: List[int]):\n    return [x + x for x in xs]"
    score = verifier.score(fenced(typed), HUMANEVAL)
    assert score.reward == 0.0 and "NameError" in score.detail


def test_a_wrong_body_fails_and_names_the_test_line(verifier):
    score = verifier.score(fenced("    return xs"), HUMANEVAL)
    assert (score.reward, score.detail) == (0.0, "check failed: AssertionError at test line 7")


def test_an_exception_in_the_function_fails_with_its_message(verifier):
    score = verifier.score(fenced("    raise ValueError('nope')"), HUMANEVAL)
    assert score.reward == 0.0 and score.detail == "check failed: ValueError: nope"


def test_a_program_that_does_not_load_fails_with_its_error(verifier):
    score = verifier.score(fenced("def double(xs):\n    return undefined_name"), HUMANEVAL)
    assert score.reward == 0.0 and "NameError" in score.detail
    score = verifier.score(fenced("x = 1 / 0\ndef double(xs):\n    return xs"), HUMANEVAL)
    assert score.reward == 0.0 and "ZeroDivisionError" in score.detail


def test_an_endless_function_fails_at_the_time_limit(verifier):
    score = verifier.score(fenced("    while True:\n        pass"), HUMANEVAL)
    assert score.reward == 0.0 and "time limit" in score.detail


def test_no_code_block_scores_zero(verifier):
    assert verifier.score("return [2 * x for x in xs]", HUMANEVAL).detail == "no code block"


def test_the_tests_helpers_come_from_the_prompt(verifier):
    """HumanEval/38-style: the test calls a helper the prompt defines."""
    sample = {
        "prompt": 'def shift(s):\n    return s[1:] + s[:1]\n\n\ndef unshift(s):\n    """Undo."""\n',
        "entry_point": "unshift",
        "test": "def check(candidate):\n    for w in ['abc', 'x', '']:\n"
        "        assert candidate(shift(w)) == w\n",
    }
    assert verifier(fenced("    return s[-1:] + s[:-1]"), sample) == 1.0


@pytest.mark.parametrize(
    ("expected", "body", "reward"),
    [
        ("(1, 2)", "return (1, 2)", 1.0),
        ("(1, 2)", "return [1, 2]", 0.0),  # a tuple is not a list, as in Python
        ("{1: 'a', (2, 3): None}", "return {1: 'a', (2, 3): None}", 1.0),
        ("{frozenset({1}), 2.5}", "return {2.5, frozenset([1])}", 1.0),
        ("10 ** 40 + 1", "return 10 ** 40 + 1", 1.0),
        ("0.1 + 0.2", "return 0.30000000000000004", 1.0),
        ("0.3", "return 0.30000000000000004", 0.0),  # floats keep their exact value
        ("b'\\x00\\xff'", "return bytes([0, 255])", 1.0),
        ("1j + 2", "return complex(2, 1)", 1.0),
        ("'\\ud800 é'", "return '\\ud800 é'", 1.0),
        ("None", "return None", 1.0),
        ("True", "return 1", 1.0),  # 1 == True in Python, as in HumanEval's own harness
    ],
)
def test_results_cross_as_plain_values_of_their_own_type(verifier, expected, body, reward):
    sample = {
        "prompt": "def f(*args):\n",
        "entry_point": "f",
        "test": f"def check(candidate):\n    assert candidate({expected}) == {expected}\n",
    }
    assert verifier(fenced(f"    {body}"), sample) == reward


def test_the_function_gets_its_arguments_as_plain_values(verifier):
    sample = {
        "prompt": "def f(a, b, *, c):\n",
        "entry_point": "f",
        "test": "def check(candidate):\n"
        "    assert candidate([1, (2, 3)], {'k': {4}}, c=b'x') == "
        "['list', 'tuple', 'set', 'bytes']\n",
    }
    code = "    return [type(v).__name__ for v in (a, a[1], b['k'], c)]"
    assert verifier(fenced(code), sample) == 1.0


def test_a_result_that_is_not_a_plain_value_fails(verifier):
    score = verifier.score(fenced("    return (x for x in xs)"), HUMANEVAL)
    assert score.reward == 0.0 and "not a plain value" in score.detail


def test_a_prompt_with_a_fenced_block_contributes_that_block():
    assert prompt_code("Complete this:\n```python\ndef f():\n    pass\n```\nThanks") == (
        "def f():\n    pass\n"
    )
    assert prompt_code("def f():\n") == "def f():\n"


# --- MBPP rows -------------------------------------------------------------------------------


def test_an_mbpp_row_runs_each_assert(verifier):
    score = verifier.score(fenced(MBPP_SOLUTION), MBPP)
    assert (score.reward, score.detail) == (1.0, "3/3 asserts passed")


def test_an_mbpp_failure_names_the_assert_and_stops(verifier):
    wrong = MBPP_SOLUTION.replace("math.pi * r * r", "3.14 * r * r")
    score = verifier.score(fenced(wrong), MBPP)
    assert score.reward == 0.0
    assert score.detail == "1/3 asserts passed; assert 2: AssertionError"


def test_fraction_mode_counts_every_assert():
    v = CodeVerifier(timeout_s=2.0, all_or_nothing=False)
    wrong = MBPP_SOLUTION.replace("math.pi * r * r", "3.14 * r * r")
    score = v.score(fenced(wrong), MBPP)
    assert score.reward == pytest.approx(2 / 3) and score.detail.startswith("2/3 asserts")


def test_the_names_the_asserts_call_become_the_programs_functions():
    tests = parse_assert_tests(MBPP)
    assert tests.stubs == ("area", "similar_elements")  # set() is a builtin
    assert tests.modules == ()  # math comes from test_setup_code
    bare = parse_assert_tests({"test_list": ["assert math.floor(f(1.5)) == 1"]})
    assert (bare.stubs, bare.modules) == (("f",), ("math",))


# --- malformed rows --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        ({**HUMANEVAL, "entry_point": "not a name"}, "'entry_point' must be a Python identifier"),
        ({**HUMANEVAL, "test": "assert True"}, "'test' must define check(candidate)"),
        ({**HUMANEVAL, "test": "def check(:"}, "'test' is not valid Python"),
        ({**HUMANEVAL, "test": 5}, "'test' must be a string"),
        ({"id": "m", "test_list": []}, "'test_list' must be a non-empty list"),
        ({"id": "m", "test_list": "assert f(1)"}, "'test_list' must be a non-empty list"),
        ({"id": "m", "test_list": ["assert f(1) =="]}, "test_list[0] is not valid Python"),
        ({"id": "m", "test_list": [3]}, "test_list[0] must be a string"),
        ({"id": "m", "test_list": ["assert f()"], "test_setup_code": 1}, "'test_setup_code'"),
    ],
)
def test_malformed_rows_are_one_line_data_errors_naming_the_field(sample, message):
    with pytest.raises(DataError) as info:
        CodeVerifier().score(fenced("pass"), sample)
    text = str(info.value)
    assert message in text and "\n" not in text and "sample" in text


def test_a_test_list_stored_as_a_json_string_is_read(verifier):
    import json

    sample = {**MBPP, "test_list": json.dumps(MBPP["test_list"])}
    assert verifier(fenced(MBPP_SOLUTION), sample) == 1.0


def test_assert_style_tests_also_run_unsandboxed_when_allowed(monkeypatch, capsys):
    from rlvr.isolation import sandbox as sandbox_module

    monkeypatch.setattr(sandbox_module, "find_bwrap", lambda: None)
    v = CodeVerifier(allow_unsandboxed=True, timeout_s=2.0)
    assert v(fenced("    return [2 * x for x in xs]"), HUMANEVAL) == 1.0
    assert v(fenced("    return xs"), HUMANEVAL) == 0.0
    assert "WITHOUT isolation" in capsys.readouterr().err
