"""The package's layering, read from the source with `ast`: floors, cycles, sizes, heavy imports.

Packages sit on floors, lowest first; a package may import itself and packages on strictly lower
floors only (so packages on one floor do not import each other):

    errors < {algorithms, isolation, markup, plugins} < config < {rewards, observe}
      < {data, environments} < models < {rollout, forward} < distributed < runs
      < {evaluation, estimate, sample, serve, reward_model} < {training, sft} < {pipeline, api}
      < commands < cli < __main__

A top-level module (`errors.py`, `cli.py`, `__main__.py`) is its own package;
`rlvr/__init__.py` imports nothing from rlvr but `errors`. Every `import` and `from ... import`
counts, wherever it is: at module level, inside a function (lazy), under TYPE_CHECKING; relative
imports are resolved. Strings naming modules (`importlib.import_module`, 'module:function'
verifier specs) are not imports.

Also checked: no cycle in the module import graph (an import of `rlvr.a.b` is an edge to module
`rlvr.a.b`, `from rlvr.a import b` to `rlvr.a.b` when that is a module, else to `rlvr.a`); no
source file in src/ over 600 lines (`.py` and `.yaml`: the embedded models' weights and
tokenizers are data); and `isolation/`, `markup.py`, `plugins.py`, `rewards/`, `environments/`,
`config/` and `algorithms/names.py` never import torch, transformers or numpy, so a verifier
or a config runs where none of them is installed.

docs/architecture.md ("Floors") shows the same order as above; a test keeps the two equal.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
ROOT = SRC / "rlvr"
MAX_LINES = 600
SIZE_CHECKED = (".py", ".yaml")
HEAVY = ("torch", "transformers", "numpy")


def floor_line(text: str) -> str:
    """The 'errors < ... < __main__' order in `text`, its lines joined, whitespace normalised."""
    words = " ".join(text.split())
    start = words.index("errors < ")
    end = words.index("__main__", start) + len("__main__")
    return words[start:end]


FLOOR_LINE = floor_line(__doc__)


def parse_floors(line: str) -> dict[str, int]:
    """'a < {b, c} < d' -> {'a': 0, 'b': 1, 'c': 1, 'd': 2}."""
    floors = {}
    for floor, group in enumerate(line.split("<")):
        for name in group.strip().strip("{}").split(","):
            floors[name.strip()] = floor
    return floors


FLOORS = parse_floors(FLOOR_LINE)
ROOT_MAY_IMPORT = {"errors"}


@dataclass(frozen=True)
class Import:
    source: str  # importing module, dotted ("rlvr.rewards.math")
    path: Path
    line: int
    target: str  # imported module, dotted; for a name imported from a module, that module

    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def resolve_from(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a `from X import ...` reads X from (relative levels resolved)."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package(path) else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(path: Path) -> Iterator[Import]:
    module = module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, path, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = resolve_from(module, path, node)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield Import(module, path, node.lineno, submodule if submodule in MODULES else base)


ALL_IMPORTS = [imp for path in MODULES.values() for imp in imports_of(path)]
OWN_IMPORTS = [imp for imp in ALL_IMPORTS if imp.target.split(".")[0] == "rlvr"]


def package_of(module: str) -> str:
    """'rlvr.rewards.math' -> 'rewards'; 'rlvr.config' -> 'config'; 'rlvr' -> '' (the root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_floor_table_is_the_one_in_docs_architecture():
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert floor_line(doc) == FLOOR_LINE, (
        f"docs/architecture.md must show the floor line of tests/test_layering.py: {FLOOR_LINE}"
    )


def test_every_package_has_a_floor():
    packages = {package_of(m) for m in MODULES} - {""}
    unknown = sorted(packages - FLOORS.keys())
    assert not unknown, f"packages without a floor (add them to tests/test_layering.py): {unknown}"


def test_no_package_imports_upward_or_sideways():
    bad = []
    for imp in OWN_IMPORTS:
        source, target = package_of(imp.source), package_of(imp.target)
        if target == "" or source == target:
            continue  # `rlvr` itself (its __init__ is checked below), or within one package
        if source == "":
            allowed = target in ROOT_MAY_IMPORT
        else:
            allowed = FLOORS.get(target, 99) < FLOORS.get(source, -1)
        if not allowed:
            bad.append(
                f"{imp.where()}: {imp.source} imports {imp.target} "
                f"({source or 'rlvr/__init__'} floor {FLOORS.get(source, '-')} -> "
                f"{target} floor {FLOORS.get(target, '?')})"
            )
    bad = list(dict.fromkeys(bad))  # one line per statement, however many names it imports
    assert not bad, "imports that go upward or sideways:\n  " + "\n  ".join(bad)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively: the components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_strongly_connected_finds_a_cycle_and_ignores_a_chain():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(graph) == [["a", "b", "c"]]


def test_no_import_cycles_between_modules():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    lines: dict[tuple[str, str], str] = {}
    for imp in OWN_IMPORTS:
        if imp.target in MODULES and imp.target != imp.source:
            graph[imp.source].add(imp.target)
            lines.setdefault((imp.source, imp.target), imp.where())
    cycles = []
    for component in strongly_connected(graph):
        members = set(component)
        edges = [
            f"{a} -> {b} ({lines[a, b]})" for a in component for b in sorted(graph[a] & members)
        ]
        cycles.append(f"{', '.join(component)}:\n    " + "\n    ".join(edges))
    assert not cycles, "import cycles (lazy imports count):\n  " + "\n  ".join(cycles)


def test_no_source_file_is_over_the_line_limit():
    long = []
    for path in sorted(SRC.rglob("*")):
        if path.is_file() and path.suffix in SIZE_CHECKED:
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > MAX_LINES:
                long.append(f"{path.relative_to(REPO)}: {n} lines")
    assert not long, f"files over {MAX_LINES} lines (split them):\n  " + "\n  ".join(long)


LIGHT_PACKAGES = ("isolation", "markup", "plugins", "rewards", "environments", "config")
LIGHT = [m for m in MODULES if package_of(m) in LIGHT_PACKAGES] + [
    "rlvr.algorithms.names",
]


@pytest.mark.parametrize("module", [m for m in LIGHT if m in MODULES])
def test_light_modules_import_no_torch_transformers_or_numpy(module):
    heavy = [
        f"{imp.where()}: imports {imp.target}"
        for imp in ALL_IMPORTS
        if imp.source == module and imp.target.split(".")[0] in HEAVY
    ]
    assert not heavy, f"{module} must run without {', '.join(HEAVY)}:\n  " + "\n  ".join(heavy)


def test_relative_imports_resolve_to_the_package():
    path = ROOT / "rewards" / "compose.py"
    node = ast.parse("from .base import Score\nfrom .. import errors").body
    assert resolve_from("rlvr.rewards.compose", path, node[0]) == "rlvr.rewards.base"
    assert resolve_from("rlvr.rewards.compose", path, node[1]) == "rlvr"
    init = ROOT / "rewards" / "__init__.py"
    assert resolve_from("rlvr.rewards", init, node[0]) == "rlvr.rewards.base"


def test_every_package_directory_has_an_init_and_is_tracked():
    """setuptools' package discovery (and mkdocstrings) skip a directory without __init__.py,
    which Python would still import as a namespace package: a wheel would lack it."""
    import subprocess

    listed = subprocess.run(
        ["git", "ls-files", "src/rlvr"], cwd=REPO, capture_output=True, text=True
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    tracked = set(listed.stdout.split())
    missing = []
    for directory in {p.parent for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts}:
        init = (directory / "__init__.py").relative_to(REPO).as_posix()
        if init not in tracked:
            missing.append(init)
    assert not missing, f"package directories without a tracked __init__.py: {sorted(missing)}"
