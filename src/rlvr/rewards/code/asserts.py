"""Assert-style code tests: HumanEval rows (`prompt`, `test` defining `check(candidate)`,
`entry_point`) and MBPP rows (`test_list` of assert statements, optional `test_setup_code`).

    HumanEval: program = the completion's code block, or the prompt's code + the block when the
               block does not define `entry_point` (the block is then the function's body, as
               HumanEval's own completions are); the test is `check(entry_point)`, one test.
    MBPP:      program = the block; each assert of `test_list` is one test.

The rows are read unchanged. What runs where (sandbox_runner.run_checked_case): the program in
one process, which serves calls of its functions; the test code in another, the checker, where
the entry point (HumanEval) or every function the asserts call (MBPP) is a stub that sends the
arguments to the program's process and gets the result back as a plain value (None, bool, int,
float, complex, str, bytes, and lists, tuples, sets, frozensets and dicts of them). So the
program cannot see the test, cannot replace `check` or the asserts, and its results are
compared by the checker's own `==` on values of exact builtin types. The verdict is the
checker's, on a pipe the program never held. docs/verifiers-code.md has the threat model.

The checker runs trusted code: the dataset's test, the prompt's code (HumanEval helpers such as
`poly` or `encode_cyclic`, which tests call) and `test_setup_code`. Other free names used as
modules (`math`) are imported in the checker.

Which names of an MBPP row are the program's (its functions under test, the stubs), decided
from the row alone, at parse time:

 1. The names the asserts call (`name(...)`) that are neither builtins nor defined by the setup.
    Builtins the asserts call are then the checker's own helpers (`set(similar(...)) ==
    set(...)`, `round(f(x), 2)`): a stub for them would let a program that defines `set` choose
    both sides of the comparison, a forged verdict.
 2. Only when there is no such name (every name called is a builtin, as in `assert pow(2, 3)
    == 8` for a task "write pow"), one builtin is under test: of the builtins called by the
    most asserts, the innermost (no call of it has a call of another of them in its arguments:
    in `round(pow(2, 0.5), 3) == 1.414`, pow), and of several, the one called first. Without
    a stub, the asserts would call Python's own `pow`, and every program would pass. Only one:
    two stubs could stand on both sides of `==` (`pow(2, 3) == int("8")`), so the program would
    choose both; with one, it chooses only what the function under test returns, as for any
    row (where a test compares a function with itself, the test is as weak here as anywhere).
 3. A row calling no name besides the setup's has nothing to test (every program would pass):
    a DataError, as is a builtin-only row whose calls each wrap another (no innermost).

Stubs are bound in the checker whether or not the program defines the name, so a program that
does not define its function under test fails that call (NameError from its process), never
passes on Python's builtin.
"""

from __future__ import annotations

import ast
import builtins
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlvr.errors import DataError

# The builtins of the checker's interpreter. It runs with `-I -S`, so it lacks the names `site`
# adds to the host's: a row calling `help(...)` or `exit(...)` calls the program's function.
_SITE_NAMES = frozenset({"copyright", "credits", "exit", "help", "license", "quit"})
CHECKER_BUILTINS = frozenset(dir(builtins)) - _SITE_NAMES
# At most 9 ASCII digits a number: int() raises past 4300 digits, and a verdict that cannot be
# read must give None (the checker writes it; the bound only keeps parse_verdict total).
_VERDICT = re.compile(r"([0-9]{1,9}) ([0-9]{1,9})\n(.*)", re.DOTALL)
_FENCE_BLOCK = re.compile(r"^[ \t]*```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)^[ \t]*```", re.M | re.S)


@dataclass(frozen=True)
class AssertTests:
    """One row's assert-style tests: `kind` "check" (HumanEval) or "asserts" (MBPP)."""

    kind: str
    total: int
    entry_point: str | None
    prompt_code: str
    test: str
    asserts: tuple[str, ...]
    setup: str
    stubs: tuple[str, ...]
    modules: tuple[str, ...]

    def program(self, block: str) -> str:
        """The program to run for the completion's code block `block`."""
        if self.kind == "check" and not _defines(block, self.entry_point):
            return self.prompt_code + ("" if self.prompt_code.endswith("\n") else "\n") + block
        return block

    def description(self, stop_at_first_failure: bool) -> dict[str, Any]:
        """What the checker process runs (sandbox_runner.run_test)."""
        return {
            "kind": self.kind,
            "setup": self.prompt_code if self.kind == "check" else self.setup,
            "test": self.test,
            "entry_point": self.entry_point,
            "asserts": list(self.asserts),
            "stubs": list(self.stubs),
            "modules": list(self.modules),
            "stop_at_first_failure": stop_at_first_failure,
        }


def is_assert_form(sample: Mapping[str, Any]) -> bool:
    """True for a HumanEval or MBPP row (and no stdin/stdout or function-call `tests`)."""
    return "tests" not in sample and (
        "test_list" in sample or ("test" in sample and "entry_point" in sample)
    )


def parse_assert_tests(sample: Mapping[str, Any]) -> AssertTests:
    """The row's tests, validated; a malformed row is a DataError naming it and the field."""
    where = f"sample {str(sample.get('id', sample.get('task_id', '?')))[:80]!r}"
    if "test" in sample and "entry_point" in sample:
        return _humaneval(sample, where)
    return _mbpp(sample, where)


def _humaneval(sample: Mapping[str, Any], where: str) -> AssertTests:
    test, entry_point, prompt = sample["test"], sample["entry_point"], sample.get("prompt", "")
    if not isinstance(entry_point, str) or not entry_point.isidentifier():
        raise DataError(f"{where}: 'entry_point' must be a Python identifier, got {entry_point!r}")
    if not isinstance(prompt, str):
        raise DataError(f"{where}: 'prompt' must be a string")
    if not isinstance(test, str):
        raise DataError(f"{where}: 'test' must be a string of Python code defining check()")
    tree = _parse(test, where, "'test'")
    if not any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tree.body):
        raise DataError(f"{where}: 'test' must define check(candidate) at top level")
    return AssertTests("check", 1, entry_point, prompt_code(prompt), test, (), "", (), ())


def _mbpp(sample: Mapping[str, Any], where: str) -> AssertTests:
    asserts, setup = sample.get("test_list"), sample.get("test_setup_code") or ""
    if isinstance(asserts, str) and asserts.lstrip().startswith("["):  # a CSV/Parquet cell
        try:
            asserts = json.loads(asserts)
        except ValueError:
            pass
    if not isinstance(asserts, list) or not asserts:
        raise DataError(f"{where}: 'test_list' must be a non-empty list of assert statements")
    if not isinstance(setup, str):
        raise DataError(f"{where}: 'test_setup_code' must be a string of Python code")
    setup_names = _bound_names(_parse(setup, where, "'test_setup_code'"))
    calls: list[list[tuple[str, ast.Call]]] = []  # per assert: (name, call) of what it calls
    used_as_module: set[str] = set()
    for i, source in enumerate(asserts):
        if not isinstance(source, str):
            raise DataError(
                f"{where}: test_list[{i}] must be a string, got {type(source).__name__}"
            )
        tree = _parse(source, where, f"test_list[{i}]")
        calls.append([(name, node) for name, node in _named_calls(tree) if name not in setup_names])
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                used_as_module.add(node.value.id)
    called = {name for row in calls for name, _ in row}
    stubs = _functions_under_test(calls, where)
    modules = tuple(sorted(used_as_module - setup_names - CHECKER_BUILTINS - called))
    return AssertTests("asserts", len(asserts), None, "", "", tuple(asserts), setup, stubs, modules)


def _named_calls(tree: ast.AST) -> list[tuple[str, ast.Call]]:
    """(name, call) of every call `name(...)` in `tree`, in source order."""
    found = [
        (node.func.id, node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    ]
    return sorted(found, key=lambda item: (item[1].lineno, item[1].col_offset))


def _functions_under_test(calls: list[list[tuple[str, ast.Call]]], where: str) -> tuple[str, ...]:
    """The stubs of an MBPP row, from each assert's calls of names its setup does not define:
    the called names that are not builtins; else one builtin, the innermost of those called by
    the most asserts (the rule and why it is safe: the module docstring)."""
    called = {name for row in calls for name, _ in row}
    own = called - CHECKER_BUILTINS
    if own:
        return tuple(sorted(own))
    if not called:
        raise DataError(
            f"{where}: 'test_list' calls no function the program could define (none, or only "
            "test_setup_code's), so every program would pass it"
        )
    asserts_calling = {
        name: sum(any(n == name for n, _ in row) for row in calls) for name in called
    }
    most = max(asserts_calling.values())
    candidates = {name for name, count in asserts_calling.items() if count == most}
    wrappers = {
        name
        for row in calls
        for name, call in row
        if name in candidates
        and any(
            inner in candidates and inner != name
            for argument in [*call.args, *(keyword.value for keyword in call.keywords)]
            for inner, _ in _named_calls(argument)
        )
    }
    innermost = candidates - wrappers
    if not innermost:
        raise DataError(
            f"{where}: 'test_list' calls builtins only ({', '.join(sorted(candidates))}), each "
            "call wrapping another, so it does not say which is the function under test"
        )
    in_order = [name for row in calls for name, _ in row]  # source order, assert by assert
    return (min(innermost, key=in_order.index),)


def _parse(source: str, where: str, field: str) -> ast.Module:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        message = getattr(e, "msg", None) or type(e).__name__
        raise DataError(f"{where}: {field} is not valid Python ({message})") from None


def _bound_names(tree: ast.Module) -> set[str]:
    """Names a module's top level defines: functions, classes, imports, assignments."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def prompt_code(prompt: str) -> str:
    """The code of a prompt: its last fenced Python (or untagged) block, else the whole text
    (HumanEval's own prompts are plain code)."""
    blocks = _FENCE_BLOCK.findall(prompt)
    return blocks[-1] if blocks else prompt


# Above this size `_defines` reads the block's lines instead of parsing it: CPython's parser is
# quadratic on some inputs (an f-string of 200,000 `{a}` fields took 29 s) and runs here, in the
# scoring process, before the sandbox's time limit applies.
PARSE_MAX_CHARS = 20_000


def _defines(block: str, name: str | None) -> bool:
    """True if `block` defines `name` at top level (a def, class, import or assignment): by
    parsing it, or, for a block over PARSE_MAX_CHARS, by a linear scan of its unindented
    lines. Either reading only decides whether the prompt's code goes first; a wrong "no" puts
    the prompt's function before the block's own, which then replaces it."""
    if name is None:
        return False
    if len(block) > PARSE_MAX_CHARS:
        return _defines_by_lines(block, name)
    try:
        tree = ast.parse(block)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return name in _bound_names(tree)


def _defines_by_lines(block: str, name: str) -> bool:
    word = re.escape(name)
    binding = re.compile(
        rf"(?:async[ \t]+)?def[ \t]+{word}\b|class[ \t]+{word}\b|{word}[ \t]*(?::[^=\n]*)?=(?!=)"
        rf"|(?:from[ \t]+\S+[ \t]+)?import[ \t][^\n#]*\b{word}\b"
    )
    return any(binding.match(line) for line in block.split("\n"))


def parse_verdict(output: bytes, total: int) -> tuple[int, str] | None:
    """(passed, reason) from the checker's `passed total\\nreason`, or None if malformed."""
    match = _VERDICT.fullmatch(output.decode("utf-8", "replace"))
    if match is None:
        return None
    passed, claimed_total = int(match.group(1)), int(match.group(2))
    if claimed_total != total or passed > total:
        return None
    return passed, match.group(3)[:200]
