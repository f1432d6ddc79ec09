"""The documentation site builds in strict mode and has a page for every nav entry."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

# every test reads the one strict mkdocs build of the module (~11 s): all are slow
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")


def nav_pages(entries: list) -> Iterator[str]:
    """Every markdown path in an mkdocs nav, depth first."""
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        if isinstance(value, list):
            yield from nav_pages(value)
        else:
            yield value


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(site directory, warnings) of `mkdocs build --strict`; the build's output if it failed."""
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    warnings = "\n".join(line for line in result.stdout.splitlines() if "WARNING" in line)
    return out, warnings or ("" if result.returncode == 0 else result.stdout)


@pytest.fixture(scope="module")
def site(build: tuple[Path, str]) -> Path:
    return build[0]


@pytest.mark.slow
def test_strict_build_has_no_warnings(build: tuple[Path, str]) -> None:
    warnings = build[1]
    if warnings:
        pytest.fail(f"mkdocs build --strict:\n{warnings}", pytrace=False)


def test_strict_build_has_a_page_for_every_nav_entry(site: Path) -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    pages = list(nav_pages(config["nav"]))
    assert "reference/config.md" in pages and "reference/cli.md" in pages
    missing = []
    for page in pages:
        stem = page.removesuffix(".md")
        html = site / ("index.html" if stem == "index" else f"{stem}/index.html")
        if not html.is_file():
            missing.append(page)
    assert not missing, f"nav entries without a built page: {', '.join(missing)}"


def test_generated_reference_pages_are_rendered(site: Path) -> None:
    config = (site / "reference/config/index.html").read_text(encoding="utf-8")
    cli = (site / "reference/cli/index.html").read_text(encoding="utf-8")
    api = (site / "reference/api/index.html").read_text(encoding="utf-8")
    assert "rollout.group_size" in config
    assert "rlvr pipeline" in cli
    assert "GRPOTrainer" in api and "policy_loss" in api
