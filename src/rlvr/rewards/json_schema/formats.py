"""The `format` checks of the json_schema verifier: jsonschema's, narrowed where they pass
strings the schema's author meant to refuse.

Characters first, for every format below in every draft (also where jsonschema has no checker
for the rest of the format because its optional package is missing, as for `uri` and
`hostname`: a value with such a character is malformed whatever its grammar):
- ASCII formats (dates and times, `duration`, `email`, `hostname`, IP addresses, URIs and URI
  templates, `uuid`): printable ASCII only, no space. Their grammars are ASCII; a checker
  built on Python's `\\d` or `int()` would take "٢٠٢٤" for 2024, a `$` a final newline.
- Internationalized formats (`idn-email`, `idn-hostname`, `iri`, `iri-reference`): no
  whitespace, control, format (U+200B, U+200D, U+FEFF, U+202E), private-use or unassigned
  character, and none that renders blank (U+3164, U+2800): `"\\u200b@example.com"` is not an
  address.
- `regex`, `json-pointer`, `relative-json-pointer`: the same, except that a plain space is
  allowed (a pattern or a key may hold one).

Then the grammar: `email` and `idn-email` need a dot-atom local part (at most 64 characters)
and a hostname or bracketed-IP domain (jsonschema only asks for an `@`; quoted local parts are
refused), an `idn-email` domain is also an `idn-hostname` where jsonschema checks those;
`uuid` is the 8-4-4-4-12 hex form (jsonschema lets Python's UUID() strip braces and "urn:");
`regex` is an ECMA-262 regular expression (rewards.json_schema.ecma), so Python-only syntax
such as `(?P<x>a)` is malformed. Other formats are jsonschema's checks; an unknown format name
is an annotation, as JSON Schema says, and checks nothing.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Callable
from typing import Any

from rlvr.rewards.json_schema.ecma import is_ecma_regex
from rlvr.rewards.structured import is_visible

ASCII_FORMATS = frozenset(
    "date date-time time full-date full-time duration email hostname host-name ipv4 ipv6 "
    "ip-address uri uri-reference uri-template uuid color".split()
)
IDN_FORMATS = frozenset("idn-email idn-hostname iri iri-reference".split())
TEXT_FORMATS = frozenset("regex json-pointer relative-json-pointer".split())

_PRINTABLE_ASCII = re.compile(r"[\x21-\x7e]*")
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_EMAIL = re.compile(rf"(?P<local>{_ATOM}(?:\.{_ATOM})*)@(?P<domain>{_LABEL}(?:\.{_LABEL})*)")
_IDN_ATOM = r"(?:[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]|[^\x00-\x7f\s])+"
_IDN_LABEL = r"[^\W_](?:(?:[^\W_]|-)*[^\W_])?"
_IDN_EMAIL = re.compile(
    rf"(?P<local>{_IDN_ATOM}(?:\.{_IDN_ATOM})*)@(?P<domain>{_IDN_LABEL}(?:\.{_IDN_LABEL})*)"
)
_IP_LITERAL = re.compile(r"(?P<local>[^@]+)@\[(?:IPv6:(?P<v6>[^\]]+)|(?P<v4>[0-9.]+))\]")
_UUID = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
# Checks for formats whose jsonschema checker needs a package that may be missing (fqdn,
# isoduration, rfc3987): coarser than those, but each refuses what no grammar allows.
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_DURATION_TIME = r"T(?:\d+H(?:\d+M)?(?:\d+S)?|\d+M(?:\d+S)?|\d+S)"
_DURATION = re.compile(
    rf"P(?:\d+W|(?:\d+Y(?:\d+M)?(?:\d+D)?|\d+M(?:\d+D)?|\d+D)(?:{_DURATION_TIME})?|{_DURATION_TIME})",
    re.ASCII,
)
_URI_CHARS = r"(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*"
_URI = re.compile(rf"[A-Za-z][A-Za-z0-9+.\-]*:{_URI_CHARS}")
_URI_REFERENCE = re.compile(_URI_CHARS)


def _unseen(c: str) -> bool:
    """A character that is no part of a written value: whitespace, a control, format,
    private-use or unassigned character, or one that renders blank. Combining marks are
    parts (Indic hostnames need them), so they are not refused here."""
    kind = unicodedata.category(c)[0]
    return kind in "ZC" or (kind != "M" and not is_visible(c))


def characters_ok(name: str, value: str) -> bool:
    """Whether `value` holds only characters the format `name` may hold (module docstring)."""
    if name in ASCII_FORMATS:
        return _PRINTABLE_ASCII.fullmatch(value) is not None
    if name in IDN_FORMATS:
        return not any(_unseen(c) for c in value)
    if name in TEXT_FORMATS:
        return not any(c != " " and _unseen(c) for c in value)
    return True


def _is_email(instance: object, pattern: re.Pattern[str] = _EMAIL) -> bool:
    """An address `local@domain`: dot-atom local part (at most 64 characters), hostname domain
    (at most 253) or a bracketed IP literal. Quoted local parts are refused: no RL task needs
    them, and each accepted oddity is one more string that passes for an address."""
    if not isinstance(instance, str):
        return True
    if len(instance) > 320:
        return False
    literal = _IP_LITERAL.fullmatch(instance)
    if literal is not None:
        local = literal["local"]
        try:
            if literal["v6"] is not None:
                ipaddress.IPv6Address(literal["v6"])
            else:
                ipaddress.IPv4Address(literal["v4"])
        except ValueError:
            return False
        return len(local) <= 64 and _is_email(local + "@a", pattern)
    match = pattern.fullmatch(instance)
    return match is not None and len(match["local"]) <= 64 and len(match["domain"]) <= 253


def _is_uuid(instance: object) -> bool:
    return not isinstance(instance, str) or _UUID.fullmatch(instance) is not None


def _is_regex(instance: object) -> bool:
    return not isinstance(instance, str) or is_ecma_regex(instance)


def _fallbacks() -> dict[str, Callable[[object], bool]]:
    """Grammar checks for the formats jsonschema leaves unchecked without an optional package."""

    def full(pattern: re.Pattern[str], most: int = 2048) -> Callable[[object], bool]:
        def check(instance: object) -> bool:
            if not isinstance(instance, str):
                return True
            return len(instance) <= most and pattern.fullmatch(instance) is not None

        return check

    return {
        "hostname": full(_HOSTNAME, 253),
        "duration": full(_DURATION),
        "uri": full(_URI),
        "uri-reference": full(_URI_REFERENCE),
    }


# The first draft that defines each fallback's format (a draft without it leaves it unchecked).
_SINCE = {"uri": 3, "hostname": 4, "uri-reference": 6, "duration": 2019}
_DRAFTS = (("draft-03", 3), ("draft-04", 4), ("draft-06", 6), ("draft-07", 7), ("2019-09", 2019))


def _draft(validator_class: Any) -> int:
    """The draft of a jsonschema validator class: 3, 4, 6, 7, 2019, or 2020 (and newer)."""
    uri = str(validator_class.META_SCHEMA.get("$schema", "")) + str(
        validator_class.META_SCHEMA.get("id", "")
    )
    return next((rank for name, rank in _DRAFTS if name in uri), 2020)


def _idn_email(base: Any) -> Callable[[object], bool]:
    """The idn-email check; its domain is also an idn-hostname where `base` checks those."""

    def check(instance: object) -> bool:
        if not _is_email(instance, _IDN_EMAIL):
            return False
        if not isinstance(instance, str) or "idn-hostname" not in base.checkers:
            return True
        domain = instance.rpartition("@")[2]
        return domain.startswith("[") or base.conforms(domain, "idn-hostname")

    return check


def _with_characters(name: str, check: Callable[[object], bool]) -> Callable[[object], bool]:
    def checked(instance: object) -> bool:
        if isinstance(instance, str) and not characters_ok(name, instance):
            return False
        return check(instance)

    return checked


def format_checker(validator_class: Any) -> Any:
    """The validator class's own FormatChecker, narrowed as the module docstring says."""
    import jsonschema

    base = validator_class.FORMAT_CHECKER
    checker = jsonschema.FormatChecker(formats=())
    stricter: dict[str, Callable[[object], bool]] = {
        "email": _is_email,
        "idn-email": _idn_email(base),
        "uuid": _is_uuid,
        "regex": _is_regex,
    }
    for name, (check, raises) in base.checkers.items():
        check = stricter.get(name, check)
        if name == "regex":
            raises = ()
        checker.checks(name, raises)(_with_characters(name, check))
    draft = _draft(validator_class)
    fallbacks = {k: v for k, v in _fallbacks().items() if draft >= _SINCE[k]}
    for name in ASCII_FORMATS | IDN_FORMATS | TEXT_FORMATS:
        if name not in base.checkers:  # not checked by jsonschema here: the characters, and
            check = fallbacks.get(name, lambda instance: True)  # a coarse grammar if the
            checker.checks(name)(_with_characters(name, check))  # draft defines the format
    return checker
