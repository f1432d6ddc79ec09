r"""The machinery of a typed config tree, independent of any particular tree.

A tree is a dataclass whose fields are scalars, lists of scalars or further such dataclasses
(sections). Each leaf is declared with `option(default, help, **constraints)`; its metadata carries
  help     one line shown by `--help` and the configuration reference
  choices  allowed values
  ge/gt/le/lt   numeric bounds
  from_python   what a config built from Python may hold besides the declared type (a
                function for `reward.verifier`): such a value is kept as it is, and `to_dict`
                records it as text
`load_tree` reads YAML, applies dotted `key=value` overrides, checks every type and constraint
(a one-line `ConfigError` naming the key, with the closest valid key suggested for an unknown
one) and calls the tree's `validate()` for the checks that involve more than one field.

How an override's value (the text after the first '=') is read depends on the key's type:
  str, str or null   the text as written, so a prompt may hold ': ', ' #', 'true' or '0123';
                     'null' or '~' is null where null is allowed; a value wholly in matching
                     quotes is a YAML quoted string: '...' drops the quotes, "..." also turns
                     \n, \t, \" and \\ into a newline, a tab, a quote and a backslash
  list of str        [a, b, ...] split at the commas outside brackets, braces and quotes,
                     each item read as a str above ('[min_terms=2,operators=[+, -]]' gives
                     'min_terms=2' and 'operators=[+, -]'); anything else is one item
  anything else      a YAML scalar or flow collection ('4', '3e-4', 'true', '[128, 256]');
                     text YAML cannot read, reads as a 'key: value' mapping without braces,
                     or nests more than 32 brackets deep is kept as text for the type check
`parse_override` without the schema's types reads every value as YAML.
`rlvr.config` holds the RL run's tree; `rlvr sft` and `rlvr sample` declare their own.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from dataclasses import field
from pathlib import Path
from typing import Any

import yaml

from rlvr.errors import ConfigError


def option(default: Any, help: str, **constraints: Any) -> Any:
    """A dataclass field with help text and constraints in its metadata."""
    meta = {"help": help, **constraints}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def leaf_keys(cls: type, prefix: str = "") -> list[str]:
    """Every dotted leaf key of the tree `cls`, e.g. 'rollout.group_size'."""
    keys = []
    for f in dataclasses.fields(cls):
        sub = _dataclass_type(cls, f)
        if sub is not None:
            keys += leaf_keys(sub, f"{prefix}{f.name}.")
        else:
            keys.append(prefix + f.name)
    return keys


def leaf_hints(cls: type, prefix: str = "") -> dict[str, Any]:
    """{dotted leaf key: its type hint} of the tree `cls`."""
    hints: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        sub = _dataclass_type(cls, f)
        if sub is not None:
            hints.update(leaf_hints(sub, f"{prefix}{f.name}."))
        else:
            hints[prefix + f.name] = _field_types(cls)[f.name]
    return hints


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    # `from __future__ import annotations` makes annotations strings; resolve them once.
    return typing.get_type_hints(cls)


def _dataclass_type(cls: type, f: dataclasses.Field) -> type | None:
    hint = _field_types(cls)[f.name]
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def foreign_names(schema: type) -> typing.Mapping[str, str]:
    """{another library's name for a setting: the tree's dotted key} a schema declares in its
    `FOREIGN_NAMES` class attribute (the RL tree: TRL's GRPOConfig names), for suggestions."""
    return getattr(schema, "FOREIGN_NAMES", {})


def _suggest(
    key: str, candidates: list[str], foreign: typing.Mapping[str, str] | None = None
) -> str:
    # Another library's name (TRL's num_generations, beta, ...) is matched before spelling:
    # 'rollout.num_generations' is rollout.group_size, not the nearest string.
    tail = key.rsplit(".", 1)[-1]
    if foreign and tail in foreign:
        return f"; did you mean '{foreign[tail]}'? (TRL's {tail})"
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    if not close:
        # Also match on the last component, so 'rollout.groupsize' finds 'rollout.group_size'.
        tails = {c.rsplit(".", 1)[-1]: c for c in candidates}
        hit = difflib.get_close_matches(key.rsplit(".", 1)[-1], list(tails), n=1, cutoff=0.75)
        close = [tails[hit[0]]] if hit else []
    return f"; did you mean '{close[0]}'?" if close else ""


def type_name(hint: Any) -> str:
    """A type hint in words, as errors and the config reference show it: 'int', 'str or null',
    'list of str'."""
    if hint is type(None):
        return "null"
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in typing.get_args(hint))
    if origin is not None:
        return f"{origin.__name__} of {', '.join(type_name(a) for a in typing.get_args(hint))}"
    return getattr(hint, "__name__", str(hint))


def _coerce(key: str, value: Any, hint: Any) -> Any:
    """Check `value` against the type `hint`; ints are accepted where floats are expected."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(key, value, arg)
            except ConfigError:
                pass
        raise ConfigError(f"{key}: expected {type_name(hint)}, got {value!r}")
    if origin is list:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected {type_name(hint)}, got {value!r}")
        (item,) = typing.get_args(hint)
        return [_coerce(f"{key}[{i}]", v, item) for i, v in enumerate(value)]
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:
                raise ConfigError(
                    f"{key}: expected {type_name(hint)}, got an integer out of float range"
                ) from None
        if isinstance(value, str):  # YAML 1.1 reads '3e-4' (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif hint is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
    else:
        raise TypeError(f"unsupported config type {hint!r} for {key}")
    raise ConfigError(f"{key}: expected {type_name(hint)}, got {value!r}")


def _check_constraints(key: str, value: Any, meta: typing.Mapping[str, Any]) -> None:
    if value is None:
        return
    choices = meta.get("choices")
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_constraints(f"{key}[{i}]", item, meta)
        return
    if choices is not None and value not in choices:
        hint = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        extra = f"; did you mean '{hint[0]}'?" if hint else ""
        raise ConfigError(
            f"{key}: expected one of {', '.join(map(str, choices))}, got {value!r}{extra}"
        )
    for op, test, word in (
        ("ge", lambda v, b: v >= b, ">="),
        ("gt", lambda v, b: v > b, ">"),
        ("le", lambda v, b: v <= b, "<="),
        ("lt", lambda v, b: v < b, "<"),
    ):
        if op in meta and not test(value, meta[op]):
            raise ConfigError(f"{key}: must be {word} {meta[op]}, got {value!r}")


def _build(cls: type, data: Any, prefix: str, root: type | None = None) -> Any:
    root = root or cls
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in data:
        if name not in fields:
            full = f"{prefix}{name}"
            value = data[name]
            if isinstance(value, dict) and value:  # a section of another name: its first key
                full = f"{full}.{next(iter(value))}"
            hint = _suggest(full, leaf_keys(root), foreign_names(root))
            raise ConfigError(f"unknown config key {full!r}{hint}")
    kwargs = {}
    for name, f in fields.items():
        key = prefix + name
        sub = _dataclass_type(cls, f)
        if sub is not None:
            kwargs[name] = _build(sub, data.get(name), key + ".", root)
        elif name in data and f.metadata.get("from_python") and _python_valued(data[name]):
            kwargs[name] = data[name]  # a function (or a list of them) given from Python
        elif name in data:
            value = _coerce(key, data[name], _field_types(cls)[name])
            _check_constraints(key, value, f.metadata)
            kwargs[name] = value
    return cls(**kwargs)


_MAX_NESTING = 32  # no config value nests deeper; PyYAML takes seconds on hundreds of levels


def _nesting(text: str) -> int:
    depth = deepest = 0
    for c in text:
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(depth - 1, 0)
    return deepest


# What PyYAML's constructors raise, besides yaml.YAMLError, on a tag they cannot apply: '!!int x'
# and an int over Python's 4300-digit limit (ValueError), '!!int' or '!!float' with no value
# (IndexError), '!!bool maybe' (KeyError), '!!timestamp x' (AttributeError).
YAML_VALUE_ERRORS = (ValueError, AttributeError, TypeError, KeyError, IndexError, OverflowError)


def _yaml_value(raw: str) -> Any:
    """An override's value read as YAML: a scalar or a flow collection."""
    if _nesting(raw) > _MAX_NESTING:
        return raw  # kept as text: the type check reports it
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except (yaml.YAMLError, RecursionError, *YAML_VALUE_ERRORS):
        # Not a YAML scalar: a tag PyYAML cannot apply ('!!int x', '!!bool maybe') or an int
        # over Python's 4300-digit limit. Keep the text; the key's type check reports it.
        return raw
    if isinstance(value, dict) and not raw.lstrip().startswith("{"):
        # 'Answer format: <answer>N</answer>' is a block mapping to YAML; nobody writes a
        # mapping that way on a command line, so it is text (the type check names the key).
        return raw
    return value


_NULLS = ("null", "Null", "NULL", "~")


def _text_value(raw: str, nullable: bool) -> str | None:
    """A str key's override value: the text as written, or null, or a YAML quoted string."""
    text = raw.strip()
    if nullable and text in _NULLS:
        return None
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
        except (yaml.YAMLError, RecursionError, ValueError):
            node = None
        # One quoted scalar and nothing after it ("'a' #c'" is a scalar and a comment).
        if (
            isinstance(node, yaml.ScalarNode)
            and node.style == text[0]
            and node.end_mark.index == len(text)
        ):
            return node.value
    return raw


def split_flow_list(text: str) -> list[str] | None:
    """'[a=1, b=[+, -], "c, d"]' -> ['a=1', 'b=[+, -]', '"c, d"']: the items of a bracketed
    list, split at the commas outside brackets, braces and quotes, stripped, quotes kept.
    None when `text` is not one bracketed list or its brackets or quotes do not balance."""
    text = text.strip()
    if len(text) < 2 or text[0] != "[" or text[-1] != "]":
        return None
    items: list[str] = []
    closing: list[str] = []  # the brackets and braces open at this point, innermost last
    quote, escaped, start = "", False, 1
    for i in range(1, len(text) - 1):
        c = text[i]
        if escaped:
            escaped = False
        elif quote:
            if c == "\\" and quote == '"':
                escaped = True  # YAML double quotes escape; '' inside single quotes needs none
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "[{":
            closing.append("]" if c == "[" else "}")
        elif c in "]}":
            if not closing or closing.pop() != c:
                return None
        elif c == "," and not closing:
            items.append(text[start:i].strip())
            start = i + 1
    if quote or closing:
        return None
    items.append(text[start:-1].strip())
    if items[-1] == "":
        items.pop()  # '[]', '[a, b,]'
    return items


def _str_args(hint: Any) -> tuple[list[Any], bool]:
    """The non-null members of `hint` and whether null is one of them."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        return [a for a in args if a is not type(None)], type(None) in args
    return [hint], False


def override_value(raw: str, hint: Any) -> Any:
    """The value of an override's text `raw` for a key of type `hint` (module docstring)."""
    args, nullable = _str_args(hint)
    if args == [str]:
        return _text_value(raw, nullable)
    if len(args) == 1 and typing.get_origin(args[0]) is list and typing.get_args(args[0]) == (str,):
        if nullable and raw.strip() in _NULLS:
            return None
        items = split_flow_list(raw)
        if items is None:
            return _text_value(raw, False)
        return [_text_value(item, False) for item in items]
    return _yaml_value(raw)


def parse_override(text: str, hints: typing.Mapping[str, Any] | None = None) -> tuple[str, Any]:
    """'rollout.group_size=4' -> ('rollout.group_size', 4). With `hints` ({dotted key: type},
    `leaf_hints`) the value is read for its key's type (module docstring); without them, or for
    a key not in them, it is read as YAML."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected key=value, e.g. rollout.group_size=4")
    key, raw = text.split("=", 1)
    key = key.strip()
    if hints is not None and key in hints:
        return key, override_value(raw, hints[key])
    return key, _yaml_value(raw)


def _set_dotted(tree: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override '{key}': '{'.'.join(parts[: i + 1])}' is not a section")
        node = child
    node[parts[-1]] = value


def read_yaml(path: Path, label: str) -> Any:
    """Parse a YAML file; every way it can be unreadable is a one-line ConfigError starting
    with `label` (e.g. "config file run.yaml")."""
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{label}{where}: invalid YAML") from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{label}: not UTF-8 text (byte {e.start}); expected a UTF-8 YAML file"
        ) from None
    except RecursionError:
        raise ConfigError(f"{label}: not valid YAML (nested too deeply)") from None
    except YAML_VALUE_ERRORS as e:
        reason = " ".join(str(e).split())[:200]
        if isinstance(e, KeyError | IndexError):
            reason = f"a tagged value it cannot read: {reason or 'empty'}"
        raise ConfigError(f"{label}: not valid YAML ({reason})") from None


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"  # shipped in the package


def packaged_example(path: Path) -> Path:
    """`path`, or, when it does not exist and reads examples/NAME.yaml, the copy of that example
    shipped in the package (rlvr/examples/NAME.yaml), so `rlvr train --config
    examples/tools.yaml` runs from any directory after a pip install."""
    if path.is_file() or len(path.parts) != 2 or path.parts[0] != "examples":
        return path
    shipped = EXAMPLES / path.name
    return shipped if shipped.is_file() else path


def read_config_file(path: str | Path) -> dict:
    """The mapping a YAML config file holds (an `examples/NAME.yaml` also from the package);
    a one-line ConfigError naming the file otherwise."""
    p = packaged_example(Path(path))
    if not p.is_file():
        raise ConfigError(f"config file {p}: not found")
    tree = read_yaml(p, f"config file {p}") or {}
    if not isinstance(tree, dict):
        raise ConfigError(f"config file {p}: expected a mapping of sections at the top level")
    return tree


def apply_overrides(schema: type, tree: dict, overrides: list[str] | None) -> dict:
    """`tree` (nested sections) with the dotted `key=value` overrides set, each key checked
    against `schema` (values are read for their key's type; checked when the tree is built)."""
    tree = dict(tree)
    hints = leaf_hints(schema)
    valid = set(hints)
    for text in overrides or []:
        key, value = parse_override(text, hints)
        if key not in valid:
            hint = _suggest(key, sorted(valid), foreign_names(schema))
            raise ConfigError(f"unknown config key {key!r}{hint}")
        _set_dotted(tree, key, value)
    return tree


def build_tree(schema: type, tree: dict) -> Any:
    """The tree `schema` built from a mapping: every key, type and constraint checked, then the
    schema's `validate(self)` (the checks that involve more than one field) where it has one."""
    cfg = _build(schema, tree, "")
    if hasattr(cfg, "validate"):
        cfg.validate()
    return cfg


def load_tree(
    schema: type,
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    tree: dict | None = None,
) -> Any:
    """Read YAML (optional), apply dotted overrides, check every key, build the tree `schema`.

    `tree` is a mapping to start from instead of a file (pipelines). A schema with a
    `validate(self)` method gets it called for the checks that involve more than one field.
    """
    start = read_config_file(path) if path is not None else dict(tree or {})
    return build_tree(schema, apply_overrides(schema, start, overrides))


def to_dict(cfg: Any) -> dict:
    """The tree as plain data. A value set from Python that YAML cannot hold (a function as
    `reward.verifier`, or a list of them) is recorded as text: 'module:qualname', items joined
    by commas, a weight after a colon ('__main__:accuracy_reward,__main__:format_reward:0.2')."""
    return dataclasses.asdict(cfg, dict_factory=lambda pairs: {k: _readable(v) for k, v in pairs})


def _python_valued(value: Any) -> bool:
    """A function, or a list holding one or a (function or spec, weight) pair: what only Python
    sets. Anything else (`[[]]`, a list of texts) has its type checked as any value's."""
    if isinstance(value, (list, tuple)):
        return any(callable(v) or _weighted_pair(v) for v in value)
    return callable(value)


def _weighted_pair(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and (callable(value[0]) or isinstance(value[0], str))
        and isinstance(value[1], (int, float))
        and not isinstance(value[1], bool)
    )


def _readable(value: Any) -> Any:
    if callable(value):
        fn = getattr(value, "fn", value)  # a wrapped function: the user's own
        module = getattr(fn, "__module__", None) or type(fn).__module__
        return f"{module}:{getattr(fn, '__qualname__', None) or type(fn).__qualname__}"
    if isinstance(value, (list, tuple)) and _python_valued(value):
        return ",".join(
            f"{_readable(v[0])}:{v[1]:g}"
            if isinstance(v, (list, tuple)) and len(v) == 2 and isinstance(v[1], (int, float))
            else str(_readable(v))
            for v in value
        )
    return value


def dump_yaml(cfg: Any, path: Path) -> None:
    path.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def describe_tree(cls: type, prefix: str = "") -> list[tuple[str, Any, str]]:
    """(dotted key, default, help) for every leaf, in declaration order: the `--help` listing."""
    rows = []
    instance = cls()
    for f in dataclasses.fields(cls):
        sub = _dataclass_type(cls, f)
        if sub is not None:
            rows += describe_tree(sub, f"{prefix}{f.name}.")
        else:
            rows.append((prefix + f.name, getattr(instance, f.name), f.metadata.get("help", "")))
    return rows
