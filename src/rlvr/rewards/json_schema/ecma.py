"""What the json_schema worker reads as JSON Schema reads it, where Python would read otherwise.

Patterns are ECMA-262 regular expressions, the dialect JSON Schema names, matched with the
`regress` package (a Rust ECMA-262 engine; `pip install 'rlvr[structured]'`), not with Python's
`re`, whose reading differs exactly where a policy looks for a way through: `\\d` takes any
Unicode digit ("١٢٣" for `^\\d{3}$`), `\\w` any letter, `$` also matches before a final
newline, `.` crosses `\\r`, U+2028 and U+2029, and Python-only syntax (`(?P<x>)`, `(?i)`, `\\Z`,
`(?#...)`) means something in one dialect and nothing in the other. A pattern compiles with
the `u` flag (Unicode mode, as JSON Schema recommends: `\\p{L}` works) or, when that refuses
it, in plain mode (Annex B: `\\-` and `a{,3}` outside Unicode mode); one that neither reads is
a PatternError, a fault of the schema.

Where jsonschema matches a schema's pattern (`pattern`, `patternProperties`, and the
patternProperties that `additionalProperties` and `unevaluatedProperties` skip), it calls
`re.search` in three of its modules. Inside `ecma_patterns()` those calls match with regress:
`install()` puts an object that stands for `re` there, which passes other callers through to
Python's `re`. The keywords are not re-implemented one by one, because `unevaluatedProperties`
finds the keys patternProperties evaluated through `$ref`, `$dynamicRef`, `allOf`, `if` and
the rest; one seam at the call covers every keyword and draft that matches a pattern.
`additionalProperties` is replaced all the same: jsonschema joins the patterns with `|`, and
a backreference (`(a)\\1`) would then refer to a group of another pattern.

`multipleOf` (and draft 3's `divisibleBy`) is exact: both numbers as decimal fractions (a
float as the shortest decimal that reads back as it, what `repr` prints: the number as
written, for one written with at most 17 significant digits). Float division passed 1e20 as
a multiple of 0.7 and failed 0.3 as one of 0.1.

Matching stays bounded by the worker's time limit: regress backtracks, so `(a+)+$` on a
crafted string takes exponential time, and the worker is killed after `timeout_s`.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import re
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

# jsonschema's modules that call `re.search(pattern, text)` on a schema's patterns.
PATTERN_MODULES = ("jsonschema._keywords", "jsonschema._utils", "jsonschema._legacy_keywords")
MAX_COMPILED = 1000
# Patterns past these are refused before regress sees them: its parser recurses, and
# overflows the stack (a segfault, not an error) on a few thousand nested groups (releases
# before 2026.9) or some 50,000 alternatives (all), while a pattern in the `regex` format is
# model text. Real patterns nest a handful of levels and list far fewer alternatives.
MAX_GROUP_DEPTH = 100
MAX_ALTERNATIVES = 5000
_ACTIVE = contextvars.ContextVar("rlvr_ecma_patterns", default=False)
_compiled: dict[str, Any] = {}


class PatternError(ValueError):
    """A schema's pattern that is not an ECMA-262 regular expression."""


def ecma_regex(pattern: str) -> Any:
    """`pattern` compiled as ECMA-262 (a regress.Regex), in Unicode mode when it reads there;
    PatternError when it reads in neither mode. Compiled patterns are kept (at most
    MAX_COMPILED), since one schema matches its patterns against every answer."""
    compiled = _compiled.get(pattern)
    if compiled is None:
        import regress

        depth, alternatives = pattern_shape(pattern)
        if depth > MAX_GROUP_DEPTH or alternatives > MAX_ALTERNATIVES:
            limits = f"at most {MAX_GROUP_DEPTH} levels of groups, {MAX_ALTERNATIVES} alternatives"
            raise PatternError(f"{pattern[:80]!r} is past what is read ({limits})")
        try:
            compiled = regress.Regex(pattern, "u")
        except regress.RegressError:
            try:
                compiled = regress.Regex(pattern)
            except regress.RegressError as e:
                why = " ".join(str(e).split())
                raise PatternError(f"{pattern[:80]!r} is not an ECMA-262 regex ({why})") from None
        if len(_compiled) >= MAX_COMPILED:
            _compiled.clear()
        _compiled[pattern] = compiled
    return compiled


def pattern_shape(pattern: str) -> tuple[int, int]:
    """(how deep the groups of `pattern` nest, how many `|` it has), counting only the `(` and
    `|` that are not escaped and not inside a character class. Linear in its length."""
    deepest = depth = bars = 0
    escaped = in_class = False
    for c in pattern:
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth = max(depth - 1, 0)
        elif c == "|":
            bars += 1
    return deepest, bars


def ecma_search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches somewhere in `text`, as ECMA-262 `RegExp.test` reads it."""
    return ecma_regex(pattern).find(text) is not None


def is_ecma_regex(text: str) -> bool:
    """Whether `text` is an ECMA-262 regular expression (the `regex` format)."""
    try:
        ecma_regex(text)
    except PatternError:
        return False
    return True


class _EcmaRe:
    """Stands for the `re` module in jsonschema's keyword modules: `search` matches as ECMA-262
    inside `ecma_patterns()`; everything else, and everything outside it, is Python's `re`.
    Inside, any other use of `re` raises, so a jsonschema release that matches patterns some
    other way fails loudly instead of quietly reading them as Python."""

    def search(self, pattern: Any, string: Any, flags: int = 0) -> Any:
        if not _ACTIVE.get():
            return re.search(pattern, string, flags)
        if not isinstance(pattern, str) or flags:
            raise PatternError(f"jsonschema matched a pattern of type {type(pattern).__name__}")
        return ecma_regex(pattern).find(string)

    def __getattr__(self, name: str) -> Any:
        if _ACTIVE.get():
            raise AttributeError(f"jsonschema calls re.{name}: not read as ECMA-262")
        return getattr(re, name)


_SHIM = _EcmaRe()


def install() -> None:
    """Put the ECMA-262 stand-in for `re` in jsonschema's pattern modules (once; it changes
    nothing outside `ecma_patterns()`). ImportError when regress is not installed."""
    import regress  # noqa: F401 - fail here, where the missing extra can be named

    for name in PATTERN_MODULES:
        module = importlib.import_module(name)
        if getattr(module, "re", None) is re:
            module.re = _SHIM  # type: ignore[attr-defined]


@contextlib.contextmanager
def ecma_patterns() -> Iterator[None]:
    """Inside, jsonschema matches schema patterns as ECMA-262 (after `install()`)."""
    token = _ACTIVE.set(True)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def exact(number: int | float) -> Fraction:
    """A JSON number as an exact fraction: a float as the shortest decimal that reads back
    as it (`repr`), so 0.1 is 1/10, not the binary fraction nearest to it."""
    return Fraction(number) if isinstance(number, int) else Fraction(repr(number))


def multiple_of(validator: Any, divisor: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """`multipleOf` with exact arithmetic (see the module docstring)."""
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "number") or not validator.is_type(divisor, "number"):
        return
    if exact(instance) % exact(divisor) != 0:
        yield ValidationError(f"{instance!r} is not a multiple of {divisor!r}")


def additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """`additionalProperties`, each patternProperties pattern matched on its own."""
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    extras = [
        key
        for key in instance
        if key not in properties and not any(ecma_search(p, key) for p in patterns)
    ]
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif extra is False and extras:
        names = ", ".join(repr(key) for key in sorted(extras)[:5])
        yield ValidationError(f"Additional properties are not allowed ({names} unexpected)")


def ecma_validator(cls: Any) -> Any:
    """`cls` (a jsonschema validator class) with exact `multipleOf`/`divisibleBy` and
    per-pattern `additionalProperties`, for the keywords its draft has."""
    import jsonschema

    replaced = {
        "multipleOf": multiple_of,
        "divisibleBy": multiple_of,
        "additionalProperties": additional_properties,
    }
    keywords = {name: fn for name, fn in replaced.items() if name in cls.VALIDATORS}
    return jsonschema.validators.extend(cls, keywords)
