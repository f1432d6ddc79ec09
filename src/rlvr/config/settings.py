"""Settings given as KEY=VALUE texts (`data.gym_config`, `environment.args`): keyword
arguments for a third-party library's constructor, values read as YAML."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from rlvr.config.fields import YAML_VALUE_ERRORS, split_flow_list
from rlvr.errors import ConfigError


def _setting_value(raw: str) -> Any:
    try:
        return yaml.safe_load(raw) if raw.strip() else ""
    except (yaml.YAMLError, RecursionError, *YAML_VALUE_ERRORS):
        return raw.strip()  # not YAML ("[+", "!!int x"): the library checks the text


def parse_settings(items: Sequence[str] | Mapping[str, Any], field: str) -> dict[str, Any]:
    """['min_terms=2', 'operators=[+, -]'] -> {'min_terms': 2, 'operators': ['+', '-']}.

    Values are read as YAML scalars or flow collections. An item may also be the whole setting
    in one text, '[min_terms=2,operators=[+, -]]' (split at the commas outside brackets) or
    '{min_terms: 2, operators: [+, -]}' (a YAML mapping), and a mapping is taken as is."""
    if isinstance(items, Mapping):
        return _checked_mapping(dict(items), field)
    out: dict[str, Any] = {}
    for i, item in enumerate(items):
        where = f"{field}[{i}]"
        text = item.strip() if isinstance(item, str) else item
        if isinstance(text, str) and text.startswith("["):
            inner = split_flow_list(text)
            if inner is None:
                raise ConfigError(
                    f"{where}: unbalanced brackets or quotes in {item!r}; expected "
                    "[KEY=VALUE, ...], e.g. [min_terms=2,operators=[+, -]]"
                )
            out.update(_key_value(v, f"{where} item {j + 1}") for j, v in enumerate(inner))
        elif isinstance(text, str) and text.startswith("{"):
            mapping = _setting_value(text)
            if not isinstance(mapping, dict):
                raise ConfigError(
                    f"{where}: expected a YAML mapping like {{min_terms: 2}}, got {item!r}"
                )
            out.update(_checked_mapping(mapping, where))
        else:
            key, value = _key_value(item, where)
            out[key] = value
    return out


def _key_value(item: Any, where: str) -> tuple[str, Any]:
    """'KEY=VALUE' -> (KEY, VALUE read as YAML); `where` names a malformed item."""
    key, sep, raw = item.partition("=") if isinstance(item, str) else ("", "", "")
    key = key.strip()
    if not sep or not key.isidentifier():
        raise ConfigError(f"{where}: expected KEY=VALUE, got {item!r}")
    return key, _setting_value(raw)


def _checked_mapping(mapping: dict, where: str) -> dict[str, Any]:
    for key in mapping:
        if not isinstance(key, str) or not key.isidentifier():
            raise ConfigError(f"{where}: expected setting names as keys, got {key!r}")
    return mapping
