"""Code-execution verifier: run the completion's program on the sample's hidden tests.

    reward = 1.0 if every test passes else 0.0          (all_or_nothing=True, the default)
    reward = passed / len(tests)                          (all_or_nothing=False)

All-or-nothing is the default, as in DeepSeek-R1 and Code-R1/DeepCoder: partial credit pays a
policy for hard-coding the examples shown in the prompt (often the first tests) and for handling
only easy cases, and it lets a run stop at the first failing test, which makes wrong programs
(most of them early in training) cheap to verify.

Extraction: the LAST closed fenced block whose tag names an enabled language (``` untagged means
the first enabled language, Python by default), from the text after `</think>` if there is one.
No block: reward 0.

Sample format (JSON-lines rows):
- stdin/stdout tests: {"tests": [{"input": str, "output": str}, ...]}
- function-call tests: {"fn_name": str, "tests": [{"args": [...], "expected": <JSON>}, ...]};
  `fn_name` may be a top-level function or a method of a class `Solution`.
- HumanEval rows: {"prompt": str, "test": "def check(candidate): ...", "entry_point": str}
- MBPP rows: {"test_list": ["assert f(1) == 2", ...], "test_setup_code": str (optional)}
  (the last two run as rewards/code/asserts.py says: the test in a process of its own).

Judging happens here, in the parent, never in the sandbox (assert-style tests are code: they run in
the sandbox's checker process, out of the program's reach; see code/asserts.py). Outputs compare
line by line with trailing whitespace and trailing blank lines ignored and the line count
significant. Function results are json.dumps'd inside the sandbox and compared here as parsed JSON
values (bool is not int, 1 == 1.0, no NaN), so a result object with a rigged `__eq__` cannot pass:
it either fails to serialise or serialises to what it really is. Expected outputs never enter the
sandbox.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from rlvr.errors import ConfigError, DataError
from rlvr.isolation.sandbox import CaseResult, Program, Sandbox, SandboxLimits
from rlvr.markup import THINK_CLOSE
from rlvr.rewards.base import Score
from rlvr.rewards.code.asserts import AssertTests, is_assert_form, parse_assert_tests, parse_verdict


@dataclass(frozen=True)
class Language:
    """How to find and run one language. `fence_tags` are lower-case info strings ("" is an
    untagged fence). `run_command` None runs the code in the sandbox runner's own Python (fork
    per test, no exec); otherwise it is exec'd per test, '{file}' replaced by the source path,
    and must exist in the sandbox's read-only /usr."""

    name: str
    fence_tags: tuple[str, ...]
    file_name: str
    run_command: tuple[str, ...] | None = None


PYTHON = Language("python", ("python", "py", "python3", ""), "solution.py")
LANGUAGES: Mapping[str, Language] = MappingProxyType({"python": PYTHON})

_TAG = re.compile(r"[^\s]*")


def _fence(line: str) -> tuple[str, str] | None:
    """(backticks, info tag) when `line` is a fence line: at most 3 spaces or tabs, 3 or more
    backticks, then an info string without backticks whose first word is the tag. A string
    scan, linear in the line (a regex for it backtracks quadratically on a long last word)."""
    rest = line.lstrip(" \t")
    if len(line) - len(rest) > 3:
        return None
    info = rest.lstrip("`")
    if len(rest) - len(info) < 3 or "`" in info:
        return None
    tag = _TAG.match(info.lstrip(" \t"))
    assert tag is not None  # [^\s]* matches every string
    return rest[: len(rest) - len(info)], tag.group()


def extract_code(
    completion: str, languages: Sequence[Language] = (PYTHON,)
) -> tuple[Language, str] | None:
    """(language, source) of the last closed fenced block tagged for one of `languages`, or
    None. An untagged fence belongs to the first language that lists "" among its tags."""
    by_tag: dict[str, Language] = {}
    for language in languages:
        for tag in language.fence_tags:
            by_tag.setdefault(tag, language)
    text = completion.rsplit(THINK_CLOSE, 1)[-1]
    lines: list[str] = []
    found, fence, tag = None, "", ""
    for line in text.split("\n"):
        match = _fence(line)
        if not fence:
            if match:
                fence, tag, lines = match[0], match[1].lower(), []
        elif match and match[0].startswith(fence) and not match[1]:
            if tag in by_tag:
                found = (by_tag[tag], "\n".join(lines) + "\n")
            fence = ""
        else:
            lines.append(line)
    return found


def outputs_match(actual: str, expected: str) -> bool:
    """Line by line, ignoring trailing whitespace on each line and trailing blank lines."""
    return _lines(actual) == _lines(expected)


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def json_equal(actual: Any, expected: Any) -> bool:
    """Equality of JSON values: bool only equals bool, int and float compare numerically,
    lists (or tuples) elementwise, objects by keys and values."""
    if isinstance(actual, bool) or isinstance(expected, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(actual, (int, float)) and isinstance(expected, (int, float)):
        return actual == expected
    if isinstance(actual, str) and isinstance(expected, str):
        return actual == expected
    if isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple)):
        return len(actual) == len(expected) and all(map(json_equal, actual, expected))
    if isinstance(actual, dict) and isinstance(expected, dict):
        return actual.keys() == expected.keys() and all(
            json_equal(actual[k], expected[k]) for k in actual
        )
    return actual is None and expected is None


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str = ""


class CodeVerifier:
    """Verifier `(completion, sample) -> float` that runs the completion's code in a sandbox.

    timeout_s, memory_mb, processes, output_bytes: per-test limits (see SandboxLimits).
    all_or_nothing: reward 1 only if every test passes (default) instead of the passed fraction.
    languages: names in LANGUAGES or Language objects; the first also claims untagged fences.
    allow_unsandboxed: if bwrap cannot start, run programs WITHOUT isolation (warns on stderr)
    instead of raising SandboxUnavailable. Only for trusted code on a machine you can lose.
    """

    def __init__(
        self,
        *,
        timeout_s: float = 5.0,
        memory_mb: int = 512,
        processes: int = 16,
        output_bytes: int = 1 << 20,
        all_or_nothing: bool = True,
        languages: Sequence[str | Language] = ("python",),
        allow_unsandboxed: bool = False,
    ) -> None:
        limits = SandboxLimits(
            timeout_s=timeout_s, memory_mb=memory_mb, processes=processes, output_bytes=output_bytes
        )
        self.all_or_nothing = all_or_nothing
        self.languages = tuple(_language(x) for x in languages)
        self.sandbox = Sandbox(limits, allow_unsandboxed=allow_unsandboxed)

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> float:
        return self.score(completion, sample).reward

    def score(self, completion: str, sample: Mapping[str, Any]) -> Score:
        if is_assert_form(sample):
            return self._score_asserts(completion, parse_assert_tests(sample))
        fn_name, tests = _parse_tests(sample)
        found = extract_code(completion, self.languages)
        if found is None:
            return Score(0.0, "no code block")
        language, source = found
        if fn_name is not None and language.run_command is not None:
            return Score(0.0, f"function-call tests need Python, got {language.name}")
        program = Program(source, language.file_name, language.run_command, fn_name)
        cases = [t["input"] for t in tests] if fn_name is None else _json_args(tests, sample)
        verdicts: list[Verdict] = []

        def keep_going(index: int, result: CaseResult) -> bool:
            verdicts.append(self._judge(result, tests[index], fn_name is not None))
            return verdicts[-1].passed or not self.all_or_nothing

        self.sandbox.run(program, cases, keep_going)
        passed = sum(v.passed for v in verdicts)
        if self.all_or_nothing:
            reward = 1.0 if passed == len(tests) else 0.0
        else:
            reward = passed / len(tests)
        detail = f"{passed}/{len(tests)} tests passed"
        failed = next((i for i, v in enumerate(verdicts) if not v.passed), None)
        if failed is not None:
            detail += f"; test {failed + 1}: {verdicts[failed].reason}"
            if len(verdicts) < len(tests):
                detail += " (stopped)"
        return Score(reward, detail)

    def _score_asserts(self, completion: str, tests: AssertTests) -> Score:
        """HumanEval/MBPP rows: one sandbox case whose output is the checker's verdict."""
        found = extract_code(completion, self.languages)
        if found is None:
            return Score(0.0, "no code block")
        language, source = found
        if language.run_command is not None:
            return Score(0.0, f"assert-style tests need Python, got {language.name}")
        test = tests.description(stop_at_first_failure=self.all_or_nothing)
        program = Program(tests.program(source), language.file_name, test=test)
        results = self.sandbox.run(program, [None])
        passed, reason = 0, "the checker gave no verdict"
        if results:
            verdict = self._judge(results[0], {}, False, checked=True)
            parsed = parse_verdict(results[0].output, tests.total) if verdict.passed else None
            if parsed is not None:
                passed, reason = parsed
                last = (results[0].stderr.strip().splitlines() or [""])[-1][:200]
                if reason.startswith("the program's process ended") and last:
                    reason += f" ({last})"
            elif not verdict.passed:
                reason = verdict.reason
        if self.all_or_nothing:
            reward = 1.0 if passed == tests.total else 0.0
        else:
            reward = passed / tests.total
        if tests.kind == "check":
            return Score(reward, "check passed" if reward == 1.0 else f"check failed: {reason}")
        detail = f"{passed}/{tests.total} asserts passed"
        return Score(reward, detail + (f"; {reason}" if passed < tests.total else ""))

    def _judge(
        self, result: CaseResult, test: Mapping[str, Any], is_call: bool, checked: bool = False
    ) -> Verdict:
        """The verdict on one case's raw result. `checked` (assert-style tests): only whether
        the checker ran to its verdict; the verdict itself is read by `_score_asserts`."""
        # Every way a case can end but "exited with status 0, no signal" fails, each with a
        # reason; nothing here may raise on what the sandbox reports (any signal number, any
        # exit code, no exit code), since a program chooses how it dies.
        limits = self.sandbox.limits
        if result.status == "timeout" or result.wall_s > limits.timeout_s:
            return Verdict(False, "time limit exceeded")
        if result.status == "crashed":
            return Verdict(False, "the program killed the test runner")
        if result.status == "output_limit":
            return Verdict(False, "output limit exceeded")
        if result.status != "exited":
            return Verdict(False, f"the sandbox ended the test ({result.status})")
        if result.signal is not None:
            if result.signal == signal.SIGXCPU:
                return Verdict(False, "CPU time limit exceeded")
            return Verdict(False, f"killed by {signal_name(result.signal)}")
        if result.exit_code != 0:
            last = (result.stderr.strip().splitlines() or ["no message"])[-1][:200]
            status = "no exit status" if result.exit_code is None else f"exit {result.exit_code}"
            return Verdict(False, f"runtime error ({status}): {last}")
        if checked:
            return Verdict(True)
        if not is_call:
            actual = result.output.decode("utf-8", "replace")
            ok = outputs_match(actual, test["output"])
            return Verdict(ok, "" if ok else "wrong answer")
        try:
            value = json.loads(result.output, parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            return Verdict(False, "no valid JSON result")
        try:
            ok = json_equal(value, test["expected"])
        except RecursionError:
            ok = False
        return Verdict(ok, "" if ok else "wrong answer")


def signal_name(number: int) -> str:
    """A readable name for any signal number: 'SIGSEGV', 'SIGRTMIN+6' for a realtime signal
    (those have no `signal.Signals` member, whose lookup raises ValueError on them), else
    'signal N' (32 and 33, which glibc keeps for itself, or a number no signal has)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        pass
    low, high = getattr(signal, "SIGRTMIN", None), getattr(signal, "SIGRTMAX", None)
    if low is not None and high is not None and low < number < high:
        return f"SIGRTMIN+{number - low}"
    return f"signal {number}"


def _language(spec: str | Language) -> Language:
    if isinstance(spec, Language):
        return spec
    if spec not in LANGUAGES:
        known = ", ".join(LANGUAGES)
        raise ConfigError(f"code verifier: unknown language '{spec}'; expected one of {known}")
    return LANGUAGES[spec]


def _parse_tests(sample: Mapping[str, Any]) -> tuple[str | None, list[Mapping[str, Any]]]:
    """(fn_name, tests), validated; a malformed sample is a dataset error, not a zero reward."""
    where = f"sample {sample.get('id', '?')!r}"
    fn_name, tests = sample.get("fn_name"), sample.get("tests")
    if not isinstance(tests, list) or not tests:
        raise DataError(f"{where}: 'tests' must be a non-empty list")
    if fn_name is not None and not (isinstance(fn_name, str) and fn_name.isidentifier()):
        raise DataError(f"{where}: 'fn_name' must be a Python identifier, got {fn_name!r}")
    for i, test in enumerate(tests):
        if fn_name is None:
            ok = isinstance(test, Mapping) and isinstance(test.get("input"), str)
            ok = ok and isinstance(test.get("output"), str)
            expected = "{'input': str, 'output': str}"
        else:
            ok = isinstance(test, Mapping) and isinstance(test.get("args"), list)
            ok = ok and "expected" in test
            expected = "{'args': list, 'expected': JSON value}"
        if not ok:
            raise DataError(f"{where}: tests[{i}] must be {expected}")
    return fn_name, tests


def _json_args(tests: list[Mapping[str, Any]], sample: Mapping[str, Any]) -> list[list[Any]]:
    """Each test's args as plain JSON values (tuples become lists, as they would in a file)."""
    try:
        return json.loads(json.dumps([t["args"] for t in tests], allow_nan=False))
    except (TypeError, ValueError) as e:
        raise DataError(
            f"sample {sample.get('id', '?')!r}: 'args' must be JSON values: {e}"
        ) from None


code_reward = CodeVerifier()
