"""The generated configuration and command-line reference: complete, described, in step.

The pages are rendered by the MkDocs hook docs/hooks/reference.py at every build (so they cannot
drift from the code); these tests check what the hook walks.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "docs" / "hooks" / "reference.py"


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    """docs/hooks/reference.py, imported as MkDocs does."""
    spec = importlib.util.spec_from_file_location("rlvr_docs_reference_hook", HOOK)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being created
    spec.loader.exec_module(module)
    return module


def test_every_config_key_has_a_description(hook: ModuleType) -> None:
    undescribed = [
        f"{schema.title}: {key.key}"
        for schema in hook.SCHEMAS
        for key in hook.walk(schema.load())
        if not str(key.metadata.get("help", "")).strip()
    ]
    assert not undescribed, f"config keys without a help text: {', '.join(undescribed)}"


def test_every_config_schema_in_use_is_documented(hook: ModuleType) -> None:
    from rlvr.cli import build_parser
    from rlvr.commands import config_listing
    from rlvr.pipeline.runner import _schema
    from rlvr.pipeline.spec import KINDS

    documented = {schema.load().__name__ for schema in hook.SCHEMAS}
    for kind in KINDS:
        kind = "sample" if kind == "rejection_sample" else kind
        assert _schema(kind)[0].__name__ in documented, f"pipeline stage kind {kind!r}"
    # Every schema handed to load_config by name somewhere in the package.
    for path in (REPO / "src" / "rlvr").rglob("*.py"):
        for name in re.findall(r"schema=([A-Z]\w*)", path.read_text(encoding="utf-8")):
            assert name in documented, f"{path.relative_to(REPO)}: schema {name} is not in SCHEMAS"
    # Every subcommand that lists config keys in its --help links the matching schema.
    for name, _, parser in hook.subcommands(build_parser()):
        if parser.epilog and parser.epilog.startswith("configuration keys"):
            linked = [s for s in hook.SCHEMAS if name in s.commands]
            assert any(parser.epilog == config_listing(s.load()) for s in linked), name


def test_config_page_lists_every_key_with_its_help(hook: ModuleType) -> None:
    page = hook.config_page()
    for schema in hook.SCHEMAS:
        assert f"{{#{schema.anchor}}}" in page
        for key in hook.walk(schema.load()):
            row = f"| `{key.key}` | {key.type} | `{hook.yaml_value(key.default)}` |"
            assert row in page, schema.title
            assert hook.escape(key.metadata["help"]) in page, key.key


def test_cli_page_lists_every_subcommand_and_option(hook: ModuleType) -> None:
    from rlvr.cli import build_parser

    page = hook.cli_page()
    commands = hook.subcommands(build_parser())
    assert len(commands) >= 9
    for name, _, parser in commands:
        assert f"## rlvr {name} {{#{name}}}" in page
        assert hook.usage(parser) in page
        for action in parser._actions:
            for option in action.option_strings:
                assert option in page, f"rlvr {name} {option}"
            if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
                assert f"`{action.metavar or action.dest}`" in page, f"rlvr {name} {action.dest}"


def test_cell_text_is_escaped(hook: ModuleType) -> None:
    assert hook.escape("KL(p || q) on <think>, a_b * c") == (
        r"KL(p \|\| q) on &lt;think&gt;, a\_b \* c"
    )
    assert hook.yaml_value(None) == "null"
    assert hook.yaml_value([128, 256]) == "[128, 256]"
    assert hook.allowed({"help": "x", "ge": 0, "lt": 1.0}) == "≥ 0; < 1.0"
