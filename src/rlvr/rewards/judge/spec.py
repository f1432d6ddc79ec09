"""How an LLM judge is named in `reward.verifier`, and how its settings travel with the name.

    judge:URL[#KEY=VALUE&KEY=VALUE...][:WEIGHT]        judge:serve[#...][:WEIGHT]

URL is the base of an OpenAI-compatible API (`http://127.0.0.1:8000/v1`; requests go to
URL/chat/completions). `judge:serve` is the judge `rlvr train` serves itself from
`reward.judge_serve` (rlvr.training.judge_server), which writes the server's URL in its place.

The settings (`JudgeSettings`: the keys of `reward.judge_*` without the prefix) ride in the URL's
fragment, the part after `#`, which an HTTP client never sends. So a spec string carries
everything a judge needs: a verifier pool's worker processes, Ray actors and `rlvr verify`
build the same judge from it. `rlvr train` writes the config's `reward.judge_*` values into
the fragment of each judge item (`with_settings`); a key already in an item's fragment wins, so
two judges of one weighted sum may differ. Values are percent-encoded (`:`, `,`, `.` in them
too), which keeps the two separators of a spec out of the fragment.

The weight: a trailing `:NUMBER` is the weight only where it cannot be a port, i.e. after a
port, a path or a fragment (`judge:http://h:8000/v1:0.5`, `judge:http://h:8000:0.5`); in
`judge:http://h:8000` the 8000 is the port and the weight is 1.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

from rlvr.errors import ConfigError
from rlvr.rewards.spec import is_number

JUDGE_PREFIX = "judge:"
SERVED = "serve"  # judge:serve, the judge rlvr train serves (reward.judge_serve)
FORMATS = ("score_line", "json", "number")  # how an answer states its score (judge/rubric.py)


@dataclass(frozen=True)
class JudgeSettings:
    """One judge's settings; each is the config key `reward.judge_<name>` (config/rollout.py,
    which documents them; the defaults are the same, a test keeps them so)."""

    model: str = ""
    rubric: str = ""
    format: str = "score_line"
    max_score: float = 10.0
    timeout_s: float = 30.0
    concurrency: int = 8
    retries: int = 1
    max_tokens: int = 512
    temperature: float = 0.0
    seed: int = 0
    cache_size: int = 4096
    api_key_env: str = ""
    name: str = ""  # the component's name in a weighted sum ('' = the item without its fragment)


SETTING_KEYS = tuple(f.name for f in dataclasses.fields(JudgeSettings))
_TYPES: dict[str, type] = {f.name: type(f.default) for f in dataclasses.fields(JudgeSettings)}
# (lowest, whether the lowest is allowed, highest) of the numeric settings
_BOUNDS: dict[str, tuple[float, bool, float | None]] = {
    "max_score": (0.0, False, None),
    "timeout_s": (0.0, False, None),
    "concurrency": (1, True, 256),
    "retries": (0, True, 10),
    "max_tokens": (1, True, None),
    "temperature": (0.0, True, 2.0),
    "cache_size": (0, True, None),
}


def is_judge(item: Any) -> bool:
    return isinstance(item, str) and item.strip().startswith(JUDGE_PREFIX)


def _ends_in_port_path_or_fragment(target: str) -> bool:
    """Whether `target` (after `judge:`) is a URL that a `:NUMBER` after it cannot extend: one
    with a port, a path or a fragment already (or judge:serve)."""
    if target == SERVED or target.startswith(SERVED + "#"):
        return True
    parts = urlsplit(target)
    host = parts.netloc.rpartition("@")[2]
    has_port = ":" in host.rpartition("]")[2]
    return bool(parts.scheme and host) and (has_port or bool(parts.path) or "#" in target)


def split_judge_weight(item: str) -> tuple[str, float]:
    """(judge spec item, weight) of `item` (module docstring: a port is never a weight)."""
    item = item.strip()
    head, sep, last = item.rpartition(":")
    if sep and is_number(last) and _ends_in_port_path_or_fragment(head[len(JUDGE_PREFIX) :]):
        return head.strip(), float(last)
    return item, 1.0


def parse_judge(item: str) -> tuple[str, dict[str, str]]:
    """(URL or 'serve', the fragment's settings as text) of a judge spec item without weight;
    a ConfigError for an unknown or repeated key, or a URL that is not http(s)://HOST."""
    target = item.strip()[len(JUDGE_PREFIX) :]
    url, _, fragment = target.partition("#")
    try:
        pairs = parse_qsl(fragment, keep_blank_values=True, strict_parsing=bool(fragment))
    except ValueError:
        raise ConfigError(f"reward.verifier: '{item}': expected #KEY=VALUE&KEY=VALUE") from None
    given: dict[str, str] = {}
    for key, value in pairs:
        if key not in SETTING_KEYS:
            raise ConfigError(
                f"reward.verifier: '{item}': unknown judge setting '{key}' (expected "
                f"{', '.join(SETTING_KEYS)})"
            )
        if key in given:
            raise ConfigError(f"reward.verifier: '{item}': judge setting '{key}' given twice")
        given[key] = value
    if url != SERVED:
        check_url(url, item)
    return url, given


def check_url(url: str, item: str) -> None:
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is no number in range
    except ValueError:
        raise ConfigError(f"reward.verifier: '{item}': the URL's port is not valid") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"reward.verifier: '{item}': expected judge:http://HOST[:PORT]/PATH (an "
            "OpenAI-compatible base URL, e.g. judge:http://127.0.0.1:8000/v1) or judge:serve"
        )
    if parts.query or parts.username or parts.password:
        raise ConfigError(
            f"reward.verifier: '{item}': no query or credentials in a judge's URL (the API "
            "key comes from the environment variable reward.judge_api_key_env names)"
        )


def settings_of(given: Mapping[str, Any], item: str = "") -> JudgeSettings:
    """JudgeSettings from text or typed values by key (missing keys: the defaults), each
    checked: a one-line ConfigError naming the key otherwise."""
    values: dict[str, Any] = {}
    for key, raw in given.items():
        kind = _TYPES[key]
        where = f"reward.verifier: '{item}': " if item else ""
        try:
            value = kind(raw) if kind is not int else int(str(raw))
        except (TypeError, ValueError):
            raise ConfigError(
                f"{where}reward.judge_{key}: expected {kind.__name__}, got {raw!r}"
            ) from None
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{where}reward.judge_{key}: expected a finite number, got {raw!r}")
        bounds = _BOUNDS.get(key)
        if bounds is not None:
            low, closed, high = bounds
            if not (value >= low if closed else value > low) or (high is not None and value > high):
                top = f" and <= {high:g}" if high is not None else ""
                raise ConfigError(
                    f"{where}reward.judge_{key}: expected {'>=' if closed else '>'} {low:g}{top}, "
                    f"got {value!r}"
                )
        values[key] = value
    settings = JudgeSettings(**values)
    if settings.format not in FORMATS:
        raise ConfigError(
            f"reward.judge_format: expected one of {', '.join(FORMATS)}, got {settings.format!r}"
        )
    return settings


def judge_name(item: str) -> str:
    """A judge component's name: its `name` setting, else the item without its fragment."""
    _, given = parse_judge(item)
    return given.get("name") or item.strip().partition("#")[0]


def _encode(value: Any) -> str:
    text = repr(value) if isinstance(value, float) else str(value)
    return quote(text, safe="").replace(".", "%2E")


def judge_settings(reward: Any) -> dict[str, Any]:
    """The `reward.judge_*` values of a reward config section by setting name (`model`,
    `timeout_s`, ...)."""
    return {
        key: getattr(reward, f"judge_{key}")
        for key in SETTING_KEYS
        if hasattr(reward, f"judge_{key}")
    }


def configured_spec(reward: Any) -> Any:
    """`reward.verifier` with the section's `reward.judge_*` settings in each judge item (what
    `rlvr sample` and held-out evaluation build their verifier from; `judge:serve` needs the
    trainer's server: rlvr.training.judge_server)."""
    return with_settings(reward.verifier, judge_settings(reward))


def with_settings(
    spec: Any, defaults: Mapping[str, Any], served_url: str | None = None, base: Path | None = None
) -> Any:
    """`spec` with every judge item's fragment holding every setting: its own, else
    `defaults`' (by key of JudgeSettings); a relative rubric path made absolute (against
    `base`, default the working directory); `judge:serve` replaced by `served_url` (named
    'judge:serve' unless it names itself). Each item's settings are checked. A spec from Python
    (a list of names, functions and (item, weight) pairs) has its string items rewritten; a
    function is left as it is."""
    if isinstance(spec, (list, tuple)):
        return [
            (with_settings(x[0], defaults, served_url, base), x[1])
            if isinstance(x, (list, tuple)) and len(x) == 2 and is_judge(x[0])
            else with_settings(x, defaults, served_url, base)
            for x in spec
        ]
    if not isinstance(spec, str) or JUDGE_PREFIX not in spec:
        return spec
    items = []
    for part in spec.split(","):
        if not is_judge(part):
            items.append(part)
            continue
        item, weight = split_judge_weight(part)
        url, given = parse_judge(item)
        merged: dict[str, Any] = {k: v for k, v in defaults.items() if k in SETTING_KEYS}
        merged.update(given)
        if url == SERVED:
            if served_url is None:
                raise ConfigError(
                    f"reward.verifier: '{item}': judge:serve is the judge rlvr train serves "
                    "from reward.judge_serve; elsewhere name the judge's URL"
                )
            if not merged.get("name"):  # metrics keep one name whatever port it got
                merged["name"] = item.partition("#")[0].strip()
            url = served_url
        if merged.get("rubric"):
            merged["rubric"] = str((base or Path.cwd()) / Path(str(merged["rubric"])).expanduser())
        settings = settings_of(merged, item)
        fragment = "&".join(
            f"{key}={_encode(getattr(settings, key))}"
            for key in SETTING_KEYS
            if getattr(settings, key) != getattr(JudgeSettings, key) or key == "model"
        )
        weight_text = "" if weight == 1.0 and item == part.strip() else f":{weight!r}"
        items.append(f"{JUDGE_PREFIX}{url}#{fragment}{weight_text}")
    return ",".join(items)
