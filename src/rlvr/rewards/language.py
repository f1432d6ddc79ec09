"""Language-consistency reward (DeepSeek-R1 §2.3.3): the share of the reasoning written in the
target language, so a policy that drifts into mixing languages mid-thought is pulled back.

Definition (words, by Unicode script):
- The text scored is the content of the `<think>` block (up to `</think>`, or to the end if it is
  never closed), or the whole completion when there is no think block.
- Math is removed first: `$...$`, `$$...$$`, `\\(...\\)`, `\\[...\\]`, and LaTeX commands
  (`\\frac`, `\\alpha`).
- A word is a maximal run of letters (Unicode category L, plus combining marks) of one script;
  a letter's script is the first word of its Unicode name (LATIN, CYRILLIC, GREEK, CJK, ...).
  Han, Hiragana and Katakana characters are one word each (those languages have no spaces).
- Digits, punctuation, symbols and one-letter words (variables: x, n, α) are ignored.
- reward = words in the target script / words counted, in [0, 1]; 0.0 when nothing is counted
  (an empty or all-math reasoning earns no consistency bonus).

The target is `sample["language"]` when present, else the verifier's `target`. It is a script
("latin", "cyrillic", "greek", "cjk", "hangul", "arabic", "hebrew", "devanagari", "thai") or a
language code mapped to one ("en", "fr", "de", "es" -> latin; "ru" -> cyrillic; "zh", "ja" ->
cjk; "ko" -> hangul; ...). A script is not a language: French reasoning scores 1.0 for "en";
that is the granularity R1 used and it needs no model.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from rlvr.errors import DataError
from rlvr.markup import THINK_CLOSE, THINK_OPEN

SCRIPTS = {
    "latin": {"LATIN"},
    "cyrillic": {"CYRILLIC"},
    "greek": {"GREEK"},
    "cjk": {"CJK", "HIRAGANA", "KATAKANA"},
    "hangul": {"HANGUL"},
    "arabic": {"ARABIC"},
    "hebrew": {"HEBREW"},
    "devanagari": {"DEVANAGARI"},
    "thai": {"THAI"},
}
LANGUAGES = {
    **dict.fromkeys(["en", "fr", "de", "es", "it", "pt", "nl", "pl", "tr", "vi", "id"], "latin"),
    **dict.fromkeys(["ru", "uk", "bg", "sr"], "cyrillic"),
    **dict.fromkeys(["zh", "ja"], "cjk"),
    "ko": "hangul",
    "el": "greek",
    "ar": "arabic",
    "fa": "arabic",
    "he": "hebrew",
    "hi": "devanagari",
    "th": "thai",
}
_SINGLE_CHAR_WORDS = {"CJK", "HIRAGANA", "KATAKANA"}
_MATH_SPANS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+")


def strip_math(text: str) -> str:
    """`text` without math spans and LaTeX commands; an unclosed span is kept as text.

    A left-to-right scan with str.find; each opener's next position is cached and a closer
    that is absent is remembered, so the scan stays linear (a lazy regex like \\(.*?\\) is
    quadratic on many unclosed openers)."""
    out, pos = [], 0
    next_at: dict[str, int | None] = {o: None for o, _ in _MATH_SPANS}  # -1: no more of it
    closers = dict(_MATH_SPANS)
    while True:
        for opener, at in next_at.items():
            if at is None or 0 <= at < pos:
                next_at[opener] = text.find(opener, pos)
        found = [(at, -len(o), o) for o, at in next_at.items() if at is not None and at >= 0]
        if not found:
            break
        start, _, opener = min(found)  # earliest; "$$" before "$" at the same position
        end = text.find(closers[opener], start + len(opener))
        if end < 0:  # no closer after here, so none after any later opener of this kind
            next_at[opener] = -1
            continue
        out.append(text[pos:start] + " ")
        pos = end + len(closers[opener])
    out.append(text[pos:])
    return _LATEX_COMMAND.sub(" ", "".join(out))


def resolve_target(target: str) -> str:
    """A script name from a script or language code; ValueError for an unknown one."""
    key = target.lower()
    key = LANGUAGES.get(key.split("-")[0].split("_")[0], key)
    if key not in SCRIPTS:
        raise ValueError(
            f"language: unknown target {target!r}; expected a script "
            f"({', '.join(SCRIPTS)}) or a language code ({', '.join(sorted(LANGUAGES))})"
        )
    return key


@lru_cache(maxsize=65536)
def _script(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return name.split(" ", 1)[0] if name else ""


def script_words(text: str) -> list[str]:
    """The script of every counted word of `text` (math, digits and 1-letter words dropped)."""
    words: list[str] = []
    current, length = "", 0

    def flush() -> None:
        if current and length > 1:
            words.append(current)

    for ch in strip_math(text):
        cat = unicodedata.category(ch)
        if cat.startswith("M") and current:
            continue  # a combining accent belongs to the letter before it
        if not cat.startswith("L"):
            flush()
            current, length = "", 0
            continue
        script = _script(ch)
        if script in _SINGLE_CHAR_WORDS:
            flush()
            words.append(script)
            current, length = "", 0
        elif script == current:
            length += 1
        else:
            flush()
            current, length = script, 1
    flush()
    return words


def reasoning_text(completion: str) -> str:
    start = completion.find(THINK_OPEN)
    if start < 0:
        return completion
    end = completion.find(THINK_CLOSE, start)
    return completion[start + len(THINK_OPEN) : end if end >= 0 else None]


def language_share(text: str, target: str) -> float:
    """Share of the counted words of `text` written in the target script (0.0 if none)."""
    allowed = SCRIPTS[resolve_target(target)]
    words = script_words(text)
    if not words:
        return 0.0
    return sum(w in allowed for w in words) / len(words)


class LanguageVerifier:
    """`(completion, sample) -> share in [0, 1]` of the reasoning in the target language."""

    def __init__(self, target: str = "latin") -> None:
        self.target = resolve_target(target)

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> float:
        return language_share(reasoning_text(completion), self.sample_target(sample))

    def sample_target(self, sample: Mapping[str, Any]) -> str:
        """The script to score against: sample["language"] when set, else the verifier's."""
        language = sample.get("language")
        if language is None or language == "":
            return self.target
        where = f"language verifier: sample {str(sample.get('id', '?'))[:80]!r}"
        if not isinstance(language, str):
            raise DataError(
                f"{where}: field 'language' must be a script or language code string, "
                f"got {type(language).__name__}"
            )
        try:
            return resolve_target(language)
        except ValueError:
            raise DataError(
                f"{where}: field 'language' {language[:80]!r} is not a script "
                f"({', '.join(SCRIPTS)}) or a language code ({', '.join(sorted(LANGUAGES))})"
            ) from None


language_reward = LanguageVerifier()
