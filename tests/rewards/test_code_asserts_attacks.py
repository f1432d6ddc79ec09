"""Programs that try to forge the verdict of assert-style tests (HumanEval, MBPP rows).

Every program here computes a wrong answer and attacks the harness instead. Each would score 1
if its attack worked; where a same-process harness (program and test exec'd in one interpreter,
passed when it exits with status 0: the shape of HumanEval's own `check_program`) is beaten by
it, `naive_harness_passes` shows that it is, on the host, for the attacks that are safe to run
there. The sandboxed verifier must give each one 0, within its time limit plus 1 s.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from rlvr.errors import DataError
from rlvr.isolation.sandbox import Program, SandboxUnavailable
from rlvr.rewards.code import CodeVerifier
from rlvr.rewards.code.asserts import parse_assert_tests, parse_verdict

TIMEOUT_S = 1.0

ADD = {
    "id": "add",
    "prompt": 'def add(a, b):\n    """a + b"""\n',
    "entry_point": "add",
    "test": textwrap.dedent(
        """
        import math


        def check(candidate):
            assert candidate(2, 3) == 5
            assert math.isclose(candidate(0.5, 0.25), 0.75)
            assert candidate(10 ** 12, 7) == 10 ** 12 + 7
        """
    ),
}
ROOT = {  # HumanEval/32's shape: the test calls a helper of the prompt on the argument it passed
    "id": "root",
    "prompt": "def poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\n\n\n"
    'def find_zero(xs):\n    """x with poly(xs, x) == 0."""\n',
    "entry_point": "find_zero",
    "test": "def check(candidate):\n    for xs in ([1, 2], [-6, 11, -6, 1], [4, -2]):\n"
    "        x = candidate(xs)\n        assert abs(poly(xs, x)) < 1e-6\n",
}
MBPP = {
    "id": "mbpp",
    "test_list": [
        "assert set(similar(('a', 'b', 'c'), ('c', 'a'))) == set(('a', 'c'))",
        "assert similar((1, 2), (3,)) == ()",
    ],
}


@pytest.fixture(scope="module")
def verifier() -> CodeVerifier:
    v = CodeVerifier(timeout_s=TIMEOUT_S, memory_mb=256)
    try:
        v.sandbox.run(Program("pass"), [""])
    except SandboxUnavailable as e:
        pytest.skip(f"bwrap sandbox unavailable here: {e}")
    return v


def attack(verifier: CodeVerifier, code: str, sample: dict = ADD) -> float:
    completion = "```python\n" + textwrap.dedent(code).strip() + "\n```"
    started = time.monotonic()
    score = verifier.score(completion, sample)
    wall = time.monotonic() - started
    assert wall < TIMEOUT_S + 1.0 + 0.5 * len(sample.get("test_list", [])), f"{wall:.2f} s"
    assert score.reward == 0.0, score.detail
    return score.reward


def naive_harness_passes(code: str, sample: dict = ADD) -> bool:
    """Program, then the test, then `check(entry_point)` (or the asserts) exec'd as one source
    in one fresh interpreter on the host; passed iff it exits with status 0."""
    program = textwrap.dedent(code).strip() + "\n"
    if "test_list" in sample:
        source = program + "\n".join(sample["test_list"]) + "\n"
    else:
        source = program + sample["test"] + f"\ncheck({sample['entry_point']})\n"
    runner = "import sys\nsource = sys.stdin.read()\nexec(compile(source, 'p', 'exec'), {})\n"
    done = subprocess.run(
        [sys.executable, "-c", runner], input=source, capture_output=True, text=True, timeout=20
    )
    return done.returncode == 0


# Attacks that are safe to run on the host too, so the naive harness shows each one works there.
BEATS_A_SAME_PROCESS_HARNESS = {
    "sys.exit(0) inside the function": """
        import sys
        def add(a, b):
            sys.exit(0)
    """,
    "os._exit(0) inside the function": """
        import os
        def add(a, b):
            os._exit(0)
    """,
    "SystemExit raised inside the function": """
        def add(a, b):
            raise SystemExit(0)
    """,
    "an atexit hook that exits 0": """
        import atexit, os
        atexit.register(os._exit, 0)
        def add(a, b):
            return 0
    """,
    "sys.excepthook that exits 0": """
        import os, sys
        sys.excepthook = lambda *exc: os._exit(0)
        def add(a, b):
            return 0
    """,
    "a result whose __eq__ is always true": """
        class Anything:
            def __eq__(self, other):
                return True
            def __sub__(self, other):
                return 0
            __rsub__ = __sub__
            def __float__(self):
                return 0.75
        def add(a, b):
            return Anything()
    """,
    "an int subclass whose __eq__ is always true": """
        class Yes(int):
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__
            def __float__(self):
                return 0.75
        def add(a, b):
            return Yes(0)
    """,
    "math.isclose patched in sys.modules and builtins.__import__ overridden": """
        import builtins, math, sys, types
        fake = types.ModuleType("math")
        fake.isclose = lambda *a, **k: True
        sys.modules["math"] = fake
        real_import = builtins.__import__
        def fake_import(name, *args, **kwargs):
            return fake if name == "math" else real_import(name, *args, **kwargs)
        builtins.__import__ = fake_import
        def add(a, b):  # right on integers only
            return a + b if isinstance(a, int) else 0.0
    """,
    "reading the test's source from memory (gc, frames) to answer": """
        import gc, re, sys
        def add(a, b):
            texts = [o for o in gc.get_objects() if isinstance(o, str) and "def check" in o]
            frame = sys._getframe()
            while frame is not None:
                texts += [str(v) for v in frame.f_globals.values() if "def check" in str(v)]
                frame = frame.f_back
            for text in texts:
                for args, expected in re.findall(r"candidate\\((.*?)\\) == (.*)", text):
                    if eval(args) == (a, b):
                        return eval(expected)
            return 0.75 if isinstance(a, float) else 0
    """,
    "a thread that outlives the call and exits 0": """
        import os, threading, time
        def add(a, b):
            threading.Thread(target=lambda: (time.sleep(0.2), os._exit(0))).start()
            return 0
    """,
    "an exception whose __str__ exits 0": """
        import os
        class Boom(Exception):
            def __str__(self):
                os._exit(0)
            __repr__ = __str__
        def add(a, b):
            raise Boom()
    """,
}


@pytest.mark.parametrize("name", sorted(BEATS_A_SAME_PROCESS_HARNESS))
def test_an_attack_that_beats_a_same_process_harness_scores_zero(verifier, name):
    code = BEATS_A_SAME_PROCESS_HARNESS[name]
    assert naive_harness_passes(code), "the attack should work against the naive harness"
    attack(verifier, code)


def test_emptying_the_argument_the_test_checks_again_scores_zero(verifier):
    code = """
    def poly(xs, x):
        return 0
    def find_zero(xs):
        xs.clear()
        return 0.0
    """
    assert naive_harness_passes(code, ROOT)
    attack(verifier, code, ROOT)


def test_redefining_the_helper_the_test_calls_scores_zero(verifier):
    code = """
    import builtins
    def poly(xs, x):
        return 0
    builtins.poly = poly
    def find_zero(xs):
        return 0.0
    """
    attack(verifier, code, ROOT)


def test_patching_builtins_the_asserts_use_scores_zero(verifier):
    code = """
    import builtins
    builtins.set = lambda *args: 1
    def similar(a, b):
        return ()
    """
    assert naive_harness_passes(code, MBPP)
    attack(verifier, code, MBPP)


def test_a_program_defining_its_own_check_and_asserts_scores_zero(verifier):
    attack(
        verifier,
        """
        def check(candidate):
            return True
        def add(a, b):
            return 0
        AssertionError = Exception
        """,
    )


@pytest.mark.parametrize(
    "exit_code", ["import os; os._exit(0)", "raise SystemExit(0)", "import sys; sys.exit()"]
)
def test_exiting_before_any_call_scores_zero(verifier, exit_code):
    attack(verifier, f"def add(a, b):\n    return 0\n{exit_code}")


@pytest.mark.parametrize(
    "exception",
    ["KeyboardInterrupt", "GeneratorExit", "type('Escape', (BaseException,), {})", "StopIteration"],
)
def test_raising_base_exceptions_from_the_function_scores_zero(verifier, exception):
    attack(verifier, f"def add(a, b):\n    raise {exception}()")


def test_printing_and_writing_pass_markers_everywhere_scores_zero(verifier):
    attack(
        verifier,
        """
        import os
        MARKERS = [b"1 1\\n", b"check passed\\n", b"3/3 asserts passed\\n", b"PASSED\\n"]
        def add(a, b):
            for marker in MARKERS:
                print(marker.decode(), flush=True)
                for fd in range(1024):
                    try:
                        os.write(fd, marker)
                    except OSError:
                        pass
            return 0
        """,
    )


def test_replies_written_ahead_of_the_calls_are_only_claims(verifier):
    """Replies for every call written before it is made: each is a value the program chose."""
    attack(
        verifier,
        """
        import json, os, struct
        for seq in range(1, 10):
            payload = json.dumps([seq, "ok", True]).encode()
            for fd in range(3, 64):
                try:
                    os.write(fd, struct.pack(">I", len(payload)) + payload)
                except OSError:
                    pass
        def add(a, b):
            return True
        """,
    )


def test_a_reply_that_cannot_be_decoded_is_the_programs_failure(verifier):
    """A reply of a complex of a 400-digit int written ahead: float() of it overflows inside
    the test's process, which must not reach the test as an ordinary exception (a test that
    expects an exception could catch it)."""
    code = """
    import json, os, struct
    payload = json.dumps([1, "ok", {"complex": [10**400, 0]}]).encode()
    for fd in range(3, 64):
        try:
            os.write(fd, struct.pack(">I", len(payload)) + payload)
        except OSError:
            pass
    def add(a, b):
        return a + b
    """
    score = verifier.score("```python\n" + textwrap.dedent(code).strip() + "\n```", ADD)
    assert score.reward == 0.0 and score.detail == "check failed: add returned no plain value"


def test_reading_the_test_from_proc_or_disk_finds_nothing(verifier):
    attack(
        verifier,
        """
        import glob, re
        def add(a, b):
            for path in glob.glob("/proc/*/fd/*") + glob.glob("/proc/*/mem") + glob.glob(
                "/proc/*/cmdline"
            ) + glob.glob("/proc/*/environ") + glob.glob("/tmp/**", recursive=True):
                try:
                    with open(path, "rb") as f:
                        data = f.read(1 << 20)
                except OSError:
                    continue
                for args, expected in re.findall(rb"candidate\\((.*?)\\) == (.*)", data):
                    if eval(args) == (a, b):
                        return eval(expected)
            return 0
        """,
    )


def test_planting_modules_the_test_imports_scores_zero(verifier):
    attack(
        verifier,
        """
        import os
        for folder in (os.getcwd(), "/tmp", "/rlvr-runner"):
            try:
                with open(os.path.join(folder, "math.py"), "w") as f:
                    f.write("def isclose(*a, **k):\\n    return True\\n")
            except OSError:
                pass
        def add(a, b):  # right on integers only
            return a + b if isinstance(a, int) else 0.0
        """,
    )


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM", "SIGUSR1", "SIGKILL", "SIGSTOP"])
def test_signalling_every_process_scores_zero(verifier, signal_name):
    attack(
        verifier,
        f"""
        import os, signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        def add(a, b):
            for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
                if pid != os.getpid():
                    try:
                        os.kill(pid, signal.{signal_name})
                    except OSError:
                        pass
            return 0
        """,
    )


def test_turning_asserts_off_scores_zero(verifier):
    attack(
        verifier,
        """
        import builtins, os
        builtins.__dict__["__debug__"] = False
        os.environ["PYTHONOPTIMIZE"] = "2"
        def add(a, b):
            return 0
        """,
    )


@pytest.mark.parametrize(
    "method",
    [
        "def __str__(self):\n        raise RuntimeError('no')",
        "def __str__(self):\n        return 'x' * 10 ** 8",
        "def __eq__(self, other):\n        return True",
    ],
)
def test_exceptions_that_misbehave_score_zero(verifier, method):
    attack(
        verifier,
        f"""
        class Odd(Exception):
            {method}
        def add(a, b):
            raise Odd()
        """,
    )


def test_a_huge_or_deep_result_scores_zero(verifier):
    attack(verifier, "def add(a, b):\n    return [0] * (10 ** 7)")
    attack(
        verifier,
        "def add(a, b):\n    x = []\n    for _ in range(10 ** 5):\n        x = [x]\n    return x",
    )


# --- functions named like builtins (MBPP rows whose asserts call only builtins) --------------
#
# The asserts of POW call `pow` and `round`, both builtins. The old rule (stubs: the called names
# minus builtins) made no stub at all, so the asserts called Python's own pow and every program
# scored 1, even one defining no pow. Now pow, the innermost builtin called by every assert, is
# under test, and round stays the checker's helper.

POW = {
    "id": "pow",
    "test_list": [
        "assert pow(2, 3) == 8",
        "assert pow(3, 2) == 9",
        "assert round(pow(2, 0.5), 3) == 1.414",
    ],
}


def scores(verifier: CodeVerifier, code: str, sample: dict) -> float:
    completion = "```python\n" + textwrap.dedent(code).strip() + "\n```"
    return verifier.score(completion, sample).reward


BUILTIN_NAMED_ATTACKS = {
    "a wrong pow": "def pow(a, b):\n    return 0",
    "no pow at all (Python's would answer)": "def power(a, b):\n    return a ** b",
    "nothing but pass": "pass",
    "a wrong Solution.pow": "class Solution:\n    def pow(self, a, b):\n        return 0",
    "a module __getattr__ that answers for any name": """
        def __getattr__(name):
            return lambda *args, **kwargs: 8
    """,
    "a class pow whose instances equal anything": """
        class pow:
            def __init__(self, a, b):
                pass
            def __eq__(self, other):
                return True
            def __round__(self, digits=None):
                return self
    """,
    "an int subclass whose __eq__ is always true": """
        class Yes(int):
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__
        def pow(a, b):
            return Yes(0)
    """,
    "a wrong lambda": "pow = lambda a, b: a * b",
    "a NaN result": "def pow(a, b):\n    return float('nan')",
    "a very large int": "def pow(a, b):\n    return 10 ** 5000",
    "a recursion bomb": "def pow(a, b):\n    return pow(a, b)",
    "a realtime signal to itself": """
        import os
        def pow(a, b):
            os.kill(os.getpid(), 40)
    """,
    "a fake verdict printed, then exit 0 before any call": """
        import os
        print("3 3", flush=True)
        os.write(1, b"3 3\\n")
        os._exit(0)
    """,
    "sys.exit with a text before any call": "import sys\nsys.exit('3 3')",
    "redefining the helper round as well": """
        def pow(a, b):
            return 0
        def round(x, digits=None):
            return 1.414
    """,
}


@pytest.mark.parametrize("name", sorted(BUILTIN_NAMED_ATTACKS))
def test_a_wrong_program_for_a_builtin_named_function_scores_zero(verifier, name):
    attack(verifier, BUILTIN_NAMED_ATTACKS[name], POW)


BUILTIN_NAMED_SOLUTIONS = {
    "a function": "def pow(a, b):\n    return a ** b",
    "a lambda": "pow = lambda a, b: a ** b",
    "a Solution method": "class Solution:\n    def pow(self, a, b):\n        return a ** b",
    "a callable object": """
        class Power:
            def __call__(self, a, b):
                return a ** b
        pow = Power()
    """,
    "an import of math.pow": "from math import pow",
    # the program's own round is never called: helpers are the checker's
    "a right pow next to a broken round": """
        def pow(a, b):
            return a ** b
        def round(*args):
            raise ValueError("not this one")
    """,
}


@pytest.mark.parametrize("name", sorted(BUILTIN_NAMED_SOLUTIONS))
def test_a_right_program_for_a_builtin_named_function_scores_one(verifier, name):
    assert scores(verifier, BUILTIN_NAMED_SOLUTIONS[name], POW) == 1.0


def test_only_one_builtin_is_under_test_so_the_program_cannot_choose_both_sides(verifier):
    """pow and int are both innermost here; were both stubs, a program defining both would
    choose both sides of `==`. The one called first, pow, is under test; int is the checker's."""
    sample = {"id": "pow-int", "test_list": ["assert pow(2, 3) == int('8')"]}
    forged = "def pow(a, b):\n    return 0\ndef int(x):\n    return 0"
    attack(verifier, forged, sample)
    assert scores(verifier, "def pow(a, b):\n    return a ** b", sample) == 1.0


def test_redefining_a_builtin_helper_next_to_the_function_under_test_scores_zero(verifier):
    """MBPP's `set(similar(...)) == set(...)`: similar is under test, set stays the checker's, so
    a program's `set` that makes both sides equal is never called."""
    code = """
    def set(*args):
        return 1
    def similar(a, b):
        return ()
    """
    assert naive_harness_passes(code, MBPP)
    attack(verifier, code, MBPP)


def test_a_module_getattr_does_not_define_the_function_under_test(verifier):
    attack(verifier, "def __getattr__(name):\n    return lambda *args: ('a', 'c')", MBPP)


def test_a_tuple_subclass_result_is_not_a_plain_value(verifier):
    code = """
    class Anything(tuple):
        def __eq__(self, other):
            return True
        __hash__ = tuple.__hash__
    def similar(a, b):
        return Anything()
    """
    attack(verifier, code, MBPP)


def test_a_class_returning_plain_values_is_a_function_like_any(verifier):
    code = """
    class similar:
        def __new__(cls, a, b):
            return tuple(x for x in a if x in b)
    """
    assert scores(verifier, code, MBPP) == 1.0


def test_killing_every_process_with_a_realtime_signal_scores_zero(verifier):
    code = """
    import os
    def similar(a, b):
        for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
            try:
                os.kill(pid, 40)
            except OSError:
                pass
        return tuple(x for x in a if x in b)
    """
    attack(verifier, code, MBPP)


@pytest.mark.parametrize(
    ("test_list", "setup", "stubs"),
    [
        (POW["test_list"], "", ("pow",)),
        (["assert round(pow(2, 0.5), 3) == 1.414"], "", ("pow",)),  # innermost
        (["assert sum([1, 2]) == 3", "assert sum(range(3)) == 3"], "", ("sum",)),  # most asserts
        (["assert sorted(pow(2, 3)) == sorted([8])"], "", ("pow",)),
        (["assert pow(2, 3) == int('8')"], "", ("pow",)),  # one: the first called
        (["assert set(similar((3, 4), (4, 5))) == set((4,))"], "", ("similar",)),
        (["assert math.isclose(area(2), 12.56)"], "import math", ("area",)),
        (["assert help(1) == 2"], "", ("help",)),  # the checker has no site: help is no builtin
        (["assert pow(2, 3) == 8", "assert helper(1)"], "def helper(x):\n    return x", ("pow",)),
    ],
)
def test_the_functions_under_test_are_decided_from_the_row_alone(test_list, setup, stubs):
    tests = parse_assert_tests({"test_list": test_list, "test_setup_code": setup})
    assert tests.stubs == stubs


@pytest.mark.parametrize(
    ("test_list", "setup", "message"),
    [
        (["assert True"], "", "calls no function the program could define"),
        (["assert 1 + 1 == 2", "assert [] == []"], "", "calls no function"),
        (["assert helper(1) == 1"], "def helper(x):\n    return x", "calls no function"),
        (["assert pow(2, 3) == 8"], "from math import pow", "calls no function"),
        (["assert pow(abs(-2), 3) == abs(pow(-2, 3))"], "", "which is the function under test"),
    ],
)
def test_a_row_that_tests_no_function_is_a_data_error(test_list, setup, message):
    """Such a row would pass every program (the old rule gave every program 1)."""
    sample = {"id": "untestable", "test_list": test_list, "test_setup_code": setup}
    with pytest.raises(DataError, match=message):
        CodeVerifier().score("```python\npass\n```", sample)


def test_a_verdict_with_an_unreadable_number_is_no_verdict():
    """parse_verdict returns None for what it cannot read, never raises (int() refuses more
    than 4300 digits; a non-ASCII digit is not the checker's)."""
    assert parse_verdict(b"3 3\nok", 3) == (3, "ok")
    assert parse_verdict(b"1" * 5000 + b" 3\n", 3) is None
    assert parse_verdict("\u0663 3\n".encode(), 3) is None


@pytest.mark.parametrize(
    "tail",
    ['x = f"' + "{a}" * 200_000 + '"', "f()\n" * 250_000],
    ids=["f-string-of-200k-fields", "1-mb-of-calls"],
)
def test_a_huge_program_is_not_parsed_outside_the_time_limit(verifier, tail):
    """Whether the block defines the entry point is decided in the scoring process, before the
    sandbox's limit applies: CPython's parser took 29 s on the f-string (quadratic)."""
    block = "def add(a, b):\n    return a - b\n" + tail
    started = time.monotonic()
    score = verifier.score("```python\n" + block + "\n```", ADD)
    assert time.monotonic() - started < TIMEOUT_S + 5.0, score
    assert score.reward == 0.0
