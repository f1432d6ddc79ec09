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
`poly` or `encode_cyclic`, which tests call) and `test_setup_code`. The names an MBPP assert
calls and its setup does not define become stubs; other free names used as modules (`math`)
are imported in the checker.
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

_VERDICT = re.compile(r"(\d+) (\d+)\n(.*)", re.DOTALL)
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
    bound = _bound_names(_parse(setup, where, "'test_setup_code'")) | set(dir(builtins))
    called, used_as_module = set(), set()
    for i, source in enumerate(asserts):
        if not isinstance(source, str):
            raise DataError(
                f"{where}: test_list[{i}] must be a string, got {type(source).__name__}"
            )
        for node in ast.walk(_parse(source, where, f"test_list[{i}]")):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                called.add(node.func.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                used_as_module.add(node.value.id)
    stubs = tuple(sorted(called - bound))
    modules = tuple(sorted(used_as_module - bound - called))
    return AssertTests("asserts", len(asserts), None, "", "", tuple(asserts), setup, stubs, modules)


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


def _defines(block: str, name: str | None) -> bool:
    """True if `block` parses and defines `name` at top level (a def or an assignment)."""
    try:
        tree = ast.parse(block)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return name in _bound_names(tree)


def parse_verdict(output: bytes, total: int) -> tuple[int, str] | None:
    """(passed, reason) from the checker's `passed total\\nreason`, or None if malformed."""
    match = _VERDICT.fullmatch(output.decode("utf-8", "replace"))
    if match is None:
        return None
    passed, claimed_total = int(match.group(1)), int(match.group(2))
    if claimed_total != total or passed > total:
        return None
    return passed, match.group(3)[:200]
