"""Every code example in docs/ runs, on the CPU: the docs example runner.

One test per page docs/**/*.md (id = its path under docs/). The convention, described for
writers in docs/contributing-docs.md:

- ```python blocks run in order in one namespace per page; ```bash blocks run with
  `bash -euo pipefail -c`. All blocks of a page share one fresh temporary working directory.
- The environment: `python` is this interpreter and `rlvr` its console script (first on PATH),
  RLVR_REPO is the repository root, MPLBACKEND=Agg, HF_HUB_OFFLINE=1.
- `<!-- docs-test: skip REASON -->` right before a block (only blank lines between) skips it;
  the reason is required. Skipped blocks are listed at the end of the pytest run.
- Other blocks are not run; ```yaml blocks must parse with yaml.safe_load.
- The first failing block fails the page's test with its line number and its output.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
BASH_TIMEOUT_S = 900
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
MARKER = re.compile(r"^\s*<!--\s*docs-test:(?P<body>.*?)-->\s*$")
SKIP = re.compile(r"skip(?:\s+(?P<reason>.*\S))?\s*$")


@dataclass(frozen=True)
class Block:
    """A fenced code block of a page."""

    language: str  # first word of the info string, lower case ("" when none)
    line: int  # 1-based line of the opening fence
    code: str  # the content, dedented by the fence's indentation
    skip: str | None  # the reason of a `docs-test: skip` marker, else None


def parse_blocks(text: str, page: str) -> list[Block]:
    """The fenced blocks of a markdown page; a malformed docs-test marker raises ValueError."""
    lines = text.splitlines()
    blocks: list[Block] = []
    marker: tuple[int, str] | None = None  # (line, reason) of a skip waiting for its block
    i = 0
    while i < len(lines):
        line = lines[i]
        found = MARKER.match(line)
        if found:
            if marker:
                raise ValueError(f"{page}:{marker[0]}: docs-test marker not followed by a block")
            skip = SKIP.fullmatch(found["body"].strip())
            if not skip:
                raise ValueError(
                    f"{page}:{i + 1}: unknown docs-test marker {line.strip()!r}; "
                    "expected <!-- docs-test: skip REASON -->"
                )
            if not skip["reason"]:
                raise ValueError(f"{page}:{i + 1}: docs-test skip needs a reason")
            marker = (i + 1, skip["reason"])
            i += 1
            continue
        fence = FENCE.match(line)
        if not fence:
            if line.strip() and marker:
                raise ValueError(f"{page}:{marker[0]}: docs-test marker not followed by a block")
            i += 1
            continue
        indent, mark = fence["indent"], fence["fence"]
        closing = re.compile(rf"^[ \t]*{re.escape(mark[0])}{{{len(mark)},}}\s*$")
        end = i + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        body = [text_line.removeprefix(indent) for text_line in lines[i + 1 : end]]
        info = fence["info"].strip().lstrip("{.").split()
        language = info[0].lower().rstrip("}") if info else ""
        blocks.append(Block(language, i + 1, "\n".join(body) + "\n", marker[1] if marker else None))
        marker = None
        i = end + 1
    if marker:
        raise ValueError(f"{page}:{marker[0]}: docs-test marker not followed by a block")
    return blocks


# Pages whose examples take more than 5 s (they train, evaluate or start clusters): marked
# slow, so `pytest -m "not slow"` leaves them out of the inner loop.
SLOW_PAGES = {
    "concepts/async-rl.md",
    "concepts/group-size.md",
    "concepts/recipes.md",
    "environments/openenv.md",
    "environments/skyrl-gym.md",
    "environments/textarena.md",
    "environments/verifiers.md",
    "evaluation.md",
    "guides/code-rl.md",
    "guides/custom-verifier.md",
    "guides/distributed.md",
    "guides/lora.md",
    "guides/own-data.md",
    "guides/quickstart.md",
    "guides/report.md",
    "guides/tools.md",
    "sft.md",
}


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def page_params() -> list:
    return [
        pytest.param(p, marks=pytest.mark.slow) if _page_id(p) in SLOW_PAGES else p for p in pages()
    ]


def _page_id(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


def page_environment(tmp_path: Path) -> dict[str, str]:
    """The environment of a page's blocks: this interpreter first on PATH, RLVR_REPO set."""
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]])
    return {
        "PATH": path,
        "RLVR_REPO": str(REPO),
        "MPLBACKEND": "Agg",
        "HF_HUB_OFFLINE": "1",
    }


def run_bash(block: Block, cwd: Path) -> tuple[bool, str]:
    """(ok, combined output) of a bash block."""
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.code],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=BASH_TIMEOUT_S,
    )
    return result.returncode == 0, f"exit status {result.returncode}\n{result.stdout}"


@contextlib.contextmanager
def restored_globals() -> Iterator[None]:
    """Run a page's python blocks in this process without leaking the global state they most
    often change (RNG seeds, torch defaults, warning filters, sys.path) into later tests."""
    import torch

    random_state, torch_rng = random.getstate(), torch.random.get_rng_state()
    dtype, threads, path = torch.get_default_dtype(), torch.get_num_threads(), list(sys.path)
    try:
        with warnings.catch_warnings():
            yield
    finally:
        random.setstate(random_state)
        torch.random.set_rng_state(torch_rng)
        torch.set_default_dtype(dtype)
        torch.set_num_threads(threads)
        sys.path[:] = path


def run_python(block: Block, namespace: dict, source: Path) -> tuple[bool, str]:
    """(ok, output and traceback) of a python block run in the page's namespace."""
    # Leading newlines make traceback line numbers those of the markdown file.
    code = compile("\n" * block.line + block.code, str(source), "exec")
    output = io.StringIO()
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            exec(code, namespace)
    except SystemExit as e:
        if e.code not in (None, 0):
            return False, f"{output.getvalue()}SystemExit({e.code!r})"
    except Exception:
        return False, output.getvalue() + traceback.format_exc()
    return True, output.getvalue()


@pytest.mark.parametrize("page", page_params(), ids=_page_id)
def test_page_examples(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    name = page.relative_to(DOCS).as_posix()
    try:
        blocks = parse_blocks(page.read_text(encoding="utf-8"), name)
    except ValueError as e:
        pytest.fail(str(e), pytrace=False)
    for key, value in page_environment(tmp_path).items():
        monkeypatch.setenv(key, value)
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    with restored_globals():
        skipped = run_blocks(blocks, name, page, workdir)
    for where in skipped:
        request.node.user_properties.append(("docs_skipped", where))


def run_blocks(blocks: list[Block], name: str, page: Path, workdir: Path) -> list[str]:
    """Run a page's blocks in order, python ones in one namespace; the first failure fails the
    test. Returns the skipped blocks as 'page:line (language): reason'."""
    namespace: dict = {"__name__": "__docs__"}
    skipped = []
    for block in blocks:
        where = f"{name}:{block.line}"
        if block.skip is not None:
            skipped.append(f"{where} ({block.language}): {block.skip}")
        elif block.language == "yaml":
            try:
                list(yaml.safe_load_all(block.code))
            except yaml.YAMLError as e:
                pytest.fail(f"{where}: yaml block does not parse: {e}", pytrace=False)
        elif block.language == "bash":
            ok, output = run_bash(block, workdir)
            if not ok:
                pytest.fail(f"{where}: bash block failed, {output}", pytrace=False)
        elif block.language == "python":
            ok, output = run_python(block, namespace, page)
            if not ok:
                pytest.fail(f"{where}: python block failed\n{output}", pytrace=False)
    return skipped


def test_slow_pages_are_pages() -> None:
    assert SLOW_PAGES <= {_page_id(p) for p in pages()}


def test_parser_follows_the_convention() -> None:
    page = "\n".join(
        [
            "<!-- docs-test: skip needs a GPU -->",
            "",
            "```bash",
            "nvidia-smi",
            "```",
            "  ```python",
            "  x = 1",
            "  ```",
            "````markdown",
            "```python",
            "````",
            "```",
            "plain",
            "```",
        ]
    )
    blocks = parse_blocks(page, "p.md")
    assert [(b.language, b.line, b.skip) for b in blocks] == [
        ("bash", 3, "needs a GPU"),
        ("python", 6, None),
        ("markdown", 9, None),
        ("", 12, None),
    ]
    assert blocks[1].code == "x = 1\n"
    for bad in (
        "<!-- docs-test: skip -->\n```bash\ntrue\n```",
        "<!-- docs-test: setup -->\n```bash\ntrue\n```",
        "<!-- docs-test: skip GPU -->\ntext\n```bash\ntrue\n```",
        "text\n<!-- docs-test: skip GPU -->",
    ):
        with pytest.raises(ValueError, match="p.md:"):
            parse_blocks(bad, "p.md")


def test_a_failing_block_reports_its_line_and_output(tmp_path: Path) -> None:
    (block,) = parse_blocks("text\n\n```python\nprint('before')\n1 / 0\n```\n", "p.md")
    ok, output = run_python(block, {}, tmp_path / "p.md")
    assert not ok
    assert "before" in output and "ZeroDivisionError" in output and "line 5" in output
    ok, output = run_bash(Block("bash", 1, "echo before; false; echo after\n", None), tmp_path)
    assert not ok
    assert "exit status 1" in output and "before" in output and "after" not in output
