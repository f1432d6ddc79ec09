"""MkDocs hook: the configuration and command-line reference pages, generated from the code.

`reference/config.md` is rendered from the config dataclasses (every key's type, default,
allowed values and help text from the field metadata), `reference/cli.md` from the argparse
parser of `rlvr`. Both exist only in the built site: they are generated at every `mkdocs build`
or `mkdocs serve`, so they cannot drift from the code. tests/docs/test_reference.py checks that
every key has a description and that every config schema in use is listed in SCHEMAS.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import inspect
import re
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from rlvr.config import type_name

CONFIG_PAGE = "reference/config.md"
CLI_PAGE = "reference/cli.md"
USAGE_WIDTH = 88  # columns of the usage lines, independent of the terminal building the site
CONSTRAINTS = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}


@dataclass(frozen=True)
class Schema:
    """A config tree documented on the configuration page."""

    anchor: str  # heading id on the page, e.g. "train"
    title: str
    used_by: str  # markdown: which commands and pipeline stages read it
    commands: tuple[str, ...]  # `rlvr` subcommands whose --config/key=value it is

    def load(self) -> type:
        """The root dataclass (imported lazily: the hook module loads without rlvr)."""
        if self.anchor == "train":
            from rlvr.config import Config

            return Config
        if self.anchor == "sft":
            from rlvr.sft.trainer import SFTConfig

            return SFTConfig
        if self.anchor == "sample":
            from rlvr.sample.job import SampleConfig

            return SampleConfig
        if self.anchor == "serve":
            from rlvr.serve.config import ServeConfig

            return ServeConfig
        if self.anchor == "rm":
            from rlvr.reward_model.config import RMConfig

            return RMConfig
        if self.anchor == "filter-stage":
            from rlvr.pipeline.stages import filter_schema

            return filter_schema()
        from rlvr.pipeline.stages import EvalStageConfig

        return EvalStageConfig


SCHEMAS = (
    Schema(
        "train",
        "rlvr train",
        "`rlvr train`, `rlvr estimate`, pipeline `grpo` stages",
        ("train", "estimate"),
    ),
    Schema("sft", "rlvr sft", "`rlvr sft`, pipeline `sft` stages", ("sft",)),
    Schema(
        "sample",
        "rlvr sample",
        "`rlvr sample`, pipeline `sample` (alias `rejection_sample`) stages",
        ("sample",),
    ),
    Schema("serve", "rlvr serve", "`rlvr serve`", ("serve",)),
    Schema("rm", "rlvr rm", "`rlvr rm`", ("rm",)),
    Schema("filter-stage", "Pipeline filter stage", "pipeline `filter` stages", ()),
    Schema("eval-stage", "Pipeline eval stage", "pipeline `eval` stages", ()),
)


@dataclass(frozen=True)
class Key:
    """One leaf of a config tree."""

    key: str  # dotted, e.g. "rollout.group_size"
    type: str
    default: Any
    metadata: typing.Mapping[str, Any]


def sections(cls: type) -> list[tuple[str, type]]:
    """The top-level (name, dataclass) sections of a schema, in declaration order."""
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    return [(f.name, hints[f.name]) for f in fields if dataclasses.is_dataclass(hints[f.name])]


def walk(cls: type, prefix: str = "") -> Iterator[Key]:
    """Every leaf key of the dataclass tree `cls`, depth first in declaration order."""
    hints = typing.get_type_hints(cls)
    instance = cls()
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            yield from walk(hint, f"{prefix}{f.name}.")
        else:
            yield Key(prefix + f.name, type_name(hint), getattr(instance, f.name), f.metadata)


def yaml_value(value: Any) -> str:
    """A default as it is written in a YAML config: null, true, 0.2, [128, 256]."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1_000).strip()
    return text[: -len("...")].strip() if text.endswith("...") else text


def allowed(metadata: typing.Mapping[str, Any]) -> str:
    """The constraints of a field as markdown: choices, bounds and any other metadata."""
    parts = []
    if "choices" in metadata:
        parts.append(", ".join(f"`{c}`" for c in metadata["choices"]))
    parts += [f"{sign} {metadata[op]}" for op, sign in CONSTRAINTS.items() if op in metadata]
    other = sorted(set(metadata) - {"help", "choices", *CONSTRAINTS})
    parts += [f"{name}: {escape(str(metadata[name]))}" for name in other]
    return "; ".join(parts)


def escape(text: str) -> str:
    """Plain text for a markdown table cell: no emphasis, links, HTML or column breaks."""
    return html.escape(re.sub(r"([\\`*_\[\]|])", r"\\\1", text), quote=False)


def key_table(keys: list[Key]) -> list[str]:
    """A markdown table with one row per key."""
    rows = ["| key | type | default | allowed | description |", "|---|---|---|---|---|"]
    for key in keys:
        rows.append(
            f"| `{key.key}` | {key.type} | `{yaml_value(key.default)}` "
            f"| {allowed(key.metadata)} | {escape(key.metadata.get('help', ''))} |"
        )
    return rows


def config_page() -> str:
    """The markdown of reference/config.md."""
    from rlvr.pipeline import spec

    lines = [
        "# Configuration reference",
        "",
        "Every key of every configuration tree, generated from the config dataclasses when the "
        "site is built. Keys are set in a `--config FILE.yaml` (nested sections) or as dotted "
        "`key=value` overrides on the command line; unknown keys, wrong types and values out "
        "of range are rejected before any work starts. `rlvr COMMAND --help all` prints the "
        "same listing, `rlvr COMMAND --help SECTION` one section of it.",
        "",
        *(f"- [{s.title}](#{s.anchor}): {s.used_by}" for s in SCHEMAS),
        "- [Pipeline file](#pipeline): the YAML file of `rlvr pipeline`",
    ]
    for schema in SCHEMAS:
        root = schema.load()
        lines += ["", f"## {schema.title} {{#{schema.anchor}}}", "", f"Read by {schema.used_by}."]
        top_level = [key for key in walk(root) if "." not in key.key]
        if top_level:
            lines += ["", *key_table(top_level)]
        for name, section in sections(root):
            lines += ["", f"### `{name}` {{#{schema.anchor}-{name}}}", ""]
            doc = section.__doc__ or ""
            if doc and not doc.startswith(f"{section.__name__}("):  # not dataclass's own
                lines += [inspect.cleandoc(doc), ""]
            lines += key_table(list(walk(section, f"{name}.")))
    example = next(p for p in inspect.getdoc(spec).split("\n\n") if p.startswith("    "))
    lines += [
        "",
        "## Pipeline file {#pipeline}",
        "",
        "`rlvr pipeline FILE.yaml` runs the stages of a pipeline file in order "
        "([Pipelines](../pipelines.md)). Top-level keys: "
        + ", ".join(f"`{k}`" for k in spec.TOP_KEYS)
        + "; keys of a stage: "
        + ", ".join(f"`{k}`" for k in spec.STAGE_KEYS)
        + ". A stage's `config:` holds keys of its kind's tree: `grpo` [rlvr train](#train), "
        "`sft` [rlvr sft](#sft), `sample` [rlvr sample](#sample), `filter` "
        "[filter stage](#filter-stage), `eval` [eval stage](#eval-stage). From "
        "`rlvr.pipeline.spec`:",
        "",
        "```yaml",
        inspect.cleandoc(example),
        "```",
        "",
    ]
    return "\n".join(lines)


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of every subcommand, in `rlvr --help` order."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in action._choices_actions}
    return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]


def usage(parser: argparse.ArgumentParser) -> str:
    """The usage lines of `parser` at a fixed width."""
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip()


def arguments_table(parser: argparse.ArgumentParser) -> list[str]:
    """A markdown table of the parser's arguments as `--help` shows them."""
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    rows = ["| argument | description |", "|---|---|"]
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        invocation = formatter._format_action_invocation(action)
        text = formatter._expand_help(action) if action.help else ""
        rows.append(f"| `{invocation}` | {escape(text)} |")
    return rows


def cli_page() -> str:
    """The markdown of reference/cli.md."""
    from rlvr.cli import build_parser
    from rlvr.commands import config_listing

    parser = build_parser()
    commands = subcommands(parser)
    lines = [
        "# Command-line reference",
        "",
        "Generated from the argparse parser of `rlvr` when the site is built; `rlvr COMMAND "
        "--help` prints the same. A user error (a config typo, a missing model, a bad value) "
        "prints one line on stderr and exits with status 2; `--debug` shows the traceback.",
        "",
        "```text",
        usage(parser),
        "```",
        "",
        *arguments_table(parser),
        "",
        "| command | what it does |",
        "|---|---|",
        *(f"| [`rlvr {name}`](#{name}) | {escape(help_text)} |" for name, help_text, _ in commands),
    ]
    for name, help_text, sub in commands:
        about = " ".join((sub.description or f"{help_text[:1].upper()}{help_text[1:]}.").split())
        lines += ["", f"## rlvr {name} {{#{name}}}", "", escape(about), ""]
        lines += ["```text", usage(sub), "```", "", *arguments_table(sub)]
        schemas = [s for s in SCHEMAS if name in s.commands]
        if schemas:
            links = ", ".join(f"[{s.title}](config.md#{s.anchor})" for s in schemas)
            lines += ["", f"Configuration keys (`--config` and `key=value`): {links}."]
        if sub.epilog and not any(sub.epilog == config_listing(s.load()) for s in schemas):
            lines += ["", "```text", sub.epilog.strip(), "```"]
    return "\n".join(lines) + "\n"


def on_files(files: Any, config: Any) -> Any:
    """MkDocs event: add the generated pages to the site's files."""
    from mkdocs.structure.files import File

    for path, render in ((CONFIG_PAGE, config_page), (CLI_PAGE, cli_page)):
        files.append(File.generated(config, path, content=render()))
    return files
