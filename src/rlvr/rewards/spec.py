"""How a `reward.verifier` spec travels to worker processes, and how it reads in one line.

A spec is a string (`math:1.0,format:0.1`, `trl:rewards.py:accuracy_reward`), or, set from
Python, a function or a list of functions, names and (function, weight) pairs
(rlvr.rewards.compose.build_verifier). A worker process gets a string with its 'file.py' items
made absolute (it resolves them itself, so they need not pickle), or the pickled object (a
function pickles as a reference to its module and name: a lambda or a nested function cannot).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from rlvr.errors import ConfigError

TRL_PREFIX = "trl:"  # declares a TRL-shaped function: trl:rewards.py:accuracy_reward
# A learned reward (a reward model directory, `rm:PATH`): a component only a caller that loads
# models can build; `build_verifier(spec, resolve=...)` (rlvr.rewards.compose) hands it over.
LEARNED_PREFIX = "rm:"


def absolute_spec(spec: str) -> str:
    """Make 'relative/file.py:fn' items (after a `trl:` prefix too) absolute so workers resolve
    them whatever their cwd."""
    items = []
    for item in spec.split(","):
        lead = item[: len(item) - len(item.lstrip())]
        prefix = TRL_PREFIX if item.strip().startswith(TRL_PREFIX) else ""
        target, sep, rest = item.strip()[len(prefix) :].partition(".py:")
        if sep and not Path(target + ".py").is_absolute():
            path = str(Path(target + ".py").resolve())[: -len(".py")]
            item = lead + prefix + path + sep + rest
        items.append(item)
    return ",".join(items)


def learned_items(spec: str) -> list[tuple[str, str]]:
    """(directory, weight suffix) of each 'rm:PATH[:WEIGHT]' item of a spec string, in order
    (the suffix ':WEIGHT' as written, or '')."""
    out = []
    for item in (part.strip() for part in spec.split(",")):
        if item.startswith(LEARNED_PREFIX):
            target = item[len(LEARNED_PREFIX) :]
            head, sep, last = target.rpartition(":")
            out.append((head, sep + last) if sep and is_number(last) else (target, ""))
    return out


def absolute_learned(spec: str) -> str:
    """Make the relative directories of 'rm:PATH[:WEIGHT]' items absolute where they exist (a
    hub id is left as written), so a run's recorded config resumes from anywhere."""
    items = []
    for item in spec.split(","):
        lead, body = item[: len(item) - len(item.lstrip())], item.strip()
        for target, weight in learned_items(body):
            path = Path(target).expanduser()
            if not path.is_absolute() and path.exists():
                item = lead + LEARNED_PREFIX + str(path.resolve()) + weight
        items.append(item)
    return ",".join(items)


def is_number(text: str) -> bool:
    """Whether `text` parses as a float (a spec item's weight)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def worker_spec(spec: Any) -> str | bytes:
    """What a worker builds its verifier from: a spec string, its 'file.py' items made
    absolute; a function or list of them (from Python), pickled, which a lambda or a function
    defined inside another cannot be: a one-line ConfigError then."""
    if isinstance(spec, str):
        return absolute_spec(spec)
    try:
        return pickle.dumps(spec)
    except Exception as e:  # noqa: BLE001 - pickle raises several types (PicklingError, ...)
        raise ConfigError(
            f"reward.verifier: {describe_spec(spec)} cannot be sent to the reward.workers "
            f"processes ({_short(e)}); use reward.workers=0, or a function defined at "
            "the top level of a module"
        ) from None


def describe_spec(spec: Any) -> str:
    """A spec as one line: the string itself, a function as 'module:qualname', a list as its
    items joined by commas (a weight after a colon)."""
    if isinstance(spec, str):
        return spec
    if isinstance(spec, (list, tuple)):
        return ",".join(
            f"{describe_spec(item[0])}:{item[1]:g}"
            if isinstance(item, (list, tuple))
            and len(item) == 2
            and isinstance(item[1], (int, float))
            else describe_spec(item)
            for item in spec
        )
    fn = getattr(spec, "fn", spec)  # a BatchedReward: the user's function
    module = getattr(fn, "__module__", None) or type(fn).__module__
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}:{qualname}"


def _short(e: BaseException) -> str:
    return " ".join(f"{type(e).__name__}: {e}".split())[:200]
