"""Notation in one answer that math-verify would misread, read before it parses (both sides).

math-verify's normalisation is generous where a verifier must not be: it drops the last
`\\text{...}` of an answer *and everything after it* as a unit (`5 \\text{ (or 6)}` and
`5 \\text{ cm} + \\frac12` both read 5), it ignores a subscript on a number (`1010_2` reads
1010), and it keeps one side of `\\approx` (`5 \\approx 6` reads 5). So, before it parses, each
rule here either rewrites the notation to what it says or declares the answer unreadable
(`read_notation` returns None, and the answer matches nothing):

- Text groups (`\\text{}`, `\\textbf{}`, `\\mbox{}`, `\\mathrm{}` and the other text fonts):
  a group that names another value, by a digit or a word such as "or", "maybe", "also", "about",
  "half", "six", or that asks ("?"), is a hedge: unreadable. A group that is only "and" or "or"
  between two values is a list separator (`12 \\text{ and } 13` is the list 12, 13). Other words
  are units where they end the answer (`5 \\text{ cm}^2`, `5\\,\\text{m}/\\text{s}` read 5) and
  a label where they start it before `=` (`\\text{Area} = 5`); anywhere else, text between math
  is unreadable. An answer that is only text (`\\text{Monday}`, `(\\text{C})`) is left as it is.
  A math-font letter (`\\mathrm{e}`, `\\mathbf{i}`) is that letter, not a unit.
- The same hedge words written without `\\text{}` (`5 maybe`, `at least 5`) are a hedge too, and
  a non-ASCII symbol math-verify's grammar does not know (`x ≒ 5` reads 5) is unreadable; only
  letters, spaces, currency signs and the symbols mapped to LaTeX (`π`, `≤`, `≈`, `²`, `°`) pass.
- Commands that hide, strike, overlay or redefine what is shown (`\\phantom`, `\\color`,
  `\\cancel`, `\\overset`, `\\llap`, `\\def`, ...) make the answer unreadable.
- Base subscripts are bases: `1010_2` is 10, `12_3` is 5, `1010_{10}` is 1010, `(1010)_2` and
  `1010_{(2)}` are 10, `0.1_2` is 1/2, digits above 9 are capitals (`2A_{16}` is 42). A numeral
  starts with a digit; letters in a base of 10 or less are no digits (`2x_3` stays 2 x_3). A
  digit the base does not have (`12_2`), a base outside 2-36, or any other subscript on a number
  (`5_{x}`, `10_{two}`) is unreadable. `x_1` and other subscripts on letters are untouched.
  `numeral_bases` tells which bases an answer is written in: the verifier requires the gold's.
- Relations other than equality that math-verify cannot compare (`\\approx`, `\\sim`, `\\equiv`,
  `\\cong`, `\\propto`, `\\ll`, `\\not`, `:=`, arrows, ...; the Unicode `≈ ≅ ≡ ∼ ∝`) are named by
  `loose_relations`: the verifier accepts one only where the gold itself holds it.

Regexes and string scans in linear time; nothing here parses or evaluates the answer.
"""

from __future__ import annotations

import re
import unicodedata
from fractions import Fraction

_TEXT_COMMAND = re.compile(
    r"\\(?:text(?:bf|it|rm|sf|tt|normal|up|md|sl|sc)?|emph|mbox|hbox"
    r"|math(?:rm|bf|it|sf|tt|normal))(?![A-Za-z])\s*"
)
_MATH_FONT = re.compile(r"\\math(?:rm|bf|it|sf|tt|normal)\s*\{\s*([A-Za-z])\s*\}")
_OLD_FONT = re.compile(r"\\(?:rm|bf|it|sf|tt|sl|sc|cal)(?![A-Za-z])")  # `{\rm cm}`: no group
_HIDDEN = re.compile(
    r"\\(?:[hv]?phantom|smash|color|textcolor|colorbox|fcolorbox|pagecolor|b?cancel|xcancel"
    r"|cancelto|sout|xout|st|strike|overset|underset|overunderset|stackrel|overbrace|underbrace"
    r"|tag|label|footnote|marginpar|[hv]space|[hv]skip|m?kern|mskip|mspace|[lrc]lap"
    r"|math[lrc]lap|raisebox|scalebox|resizebox|rotatebox|reflectbox|href|url|[gex]?def|let"
    r"|(?:re|provide)?newcommand|DeclareMathOperator|iffalse|iftrue|ifx|ifnum|ifcase|fi"
    r"|mathchoice|ooalign|html(?:Class|Style|Data|Id))(?![A-Za-z])"
)
# Words that name another value or make the value uncertain. "and"/"or" alone between two
# values are list separators instead; units, labels and filler ("is the answer") name no value.
HEDGE_WORDS = frozenset(
    "or either neither nor whichever alternatively alternative also instead another other "
    "possibly possible maybe perhaps probably likely might may could though although but however "
    "unless otherwise else except if when depending depends not wrong incorrect false unsure "
    "uncertain guess estimate estimated approximate approximately approx about around roughly "
    "nearly almost circa vs versus between range to through till until from least most more less "
    "fewer greater smaller larger than above below under exceeding within up maximum minimum "
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty "
    "ninety hundred hundreds thousand thousands million millions billion billions trillion dozen "
    "dozens half halves third thirds fourth fourths fifth fifths sixth sixths seventh sevenths "
    "eighth eighths ninth ninths tenth tenths hundredth hundredths thousandth thousandths twice "
    "double triple thrice squared cubed factorial inverse reciprocal negative".split()
)
# Inside a text group these name a value too (`5 \text{ e}` is no unit).
_VALUE_WORDS = frozenset({"e", "i", "pi", "infinity", "infty", "inf"})
_CONNECTORS = frozenset({"and", "or"})
_WORD = re.compile(r"[A-Za-z]+")
_MATH = re.compile(r"\d|\\[A-Za-z]")
_PLAIN_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}(?![A-Za-z])")
_SPACING = re.compile(r"\\[ ,;:!>]|~|\\(?:quad|qquad|enspace|thinspace|medspace)(?![A-Za-z])")
_ESCAPED = re.compile(r"\\[$&%#_{}]")
_UNIT_POWER = re.compile(r"(?<=[A-Za-z])\^\s*(?:\{\s*-?\s*\d+\s*\}|-?\d)")  # `\text{m^2}`
# What may follow a unit: more units, powers, `/`, `\cdot`, spaces, degrees.
_UNIT_GLUE = re.compile(
    r"(?:\s|\\[ ,;:!]|~|/|\.|\\cdot(?![A-Za-z])|\^\s*(?:\{\s*-?\s*\d+\s*\}|-?\d"
    r"|\{?\s*\\circ\s*\}?))*"
)
_VALUE = re.compile(r"[A-Za-z0-9]|\\(?!left|right|[bB]igg?[lr]?)[A-Za-z]")
_TRAILING_SPACE = re.compile(r"(?:\s|\\[ ,;:!]|~)+$")

_DIGITS = r"\d[0-9A-Z]*(?:\.[0-9A-Z]+)?"
_NUMERAL = re.compile(
    rf"(?<![0-9.^_])(?:\(\s*({_DIGITS})\s*\)|({_DIGITS}))\s*_\s*"
    r"(?:\{\s*\(?\s*(\d+)\s*\)?\s*\}|(\d))"
)
_SUBSCRIPTED_NUMBER = re.compile(r"\d\s*_")
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

_LOOSE_RELATION = re.compile(
    r"\\(approx|approxeq|thickapprox|sim|simeq|thicksim|backsim|backsimeq|eqsim|nsim|cong|ncong"
    r"|equiv|nequiv|propto|varpropto|doteq|doteqdot|Doteq|triangleq|asymp|lesssim|gtrsim"
    r"|lessapprox|gtrapprox|lll|ggg|ll|gg|prec|succ|preceq|succeq|precsim|succsim|models|vdash"
    r"|dashv|coloneqq|coloneq|eqqcolon|Coloneqq|not|nless|ngtr|nleq|ngeq|nleqslant|ngeqslant"
    r"|mid|nmid|parallel|nparallel|perp|to|rightarrow|longrightarrow|Rightarrow|Longrightarrow"
    r"|implies|impliedby|iff|Leftrightarrow|leftrightarrow|Leftarrow|leftarrow|gets|mapsto)"
    r"(?![A-Za-z])|(:=|=:)"
)
# Unicode relations become the commands above (≤ ≥ ≠ are mapped by normalize as order
# relations, which math-verify compares); `~=` is math-verify's own spelling of `\approx`.
RELATION_SYMBOLS = {
    "≈": "\\approx ",
    "≃": "\\simeq ",
    "≅": "\\cong ",
    "∼": "\\sim ",
    "≡": "\\equiv ",
    "≢": "\\nequiv ",
    "∝": "\\propto ",
    "≪": "\\ll ",
    "≫": "\\gg ",
    "≲": "\\lesssim ",
    "≳": "\\gtrsim ",
    "≐": "\\doteq ",
    "≜": "\\triangleq ",
    "≍": "\\asymp ",
    "≔": "\\coloneqq ",
    "≮": "\\nless ",
    "≯": "\\ngtr ",
    "≰": "\\nleq ",
    "≱": "\\ngeq ",
    "→": "\\to ",
    "⇒": "\\Rightarrow ",
    "⇔": "\\iff ",
    "±": "\\pm ",
    "∓": "\\mp ",
    "÷": "\\div ",
}
_SUPERSCRIPTS = {"°": "^\\circ ", "′": "'", "″": "''"}
_SUPERSCRIPTS.update({ch: f"^{d}" for d, ch in enumerate("⁰¹²³⁴⁵⁶⁷⁸⁹")})
_APPROX_TILDE = re.compile(r"\\?~\s*=")
_NOT_EQUAL = re.compile(r"\\not\s*=")
_NOT_IN = re.compile(r"\\not\s*\\in(?![A-Za-z])")


def closing_brace(text: str, i: int) -> int:
    """Index of the `}` matching the `{` at `text[i]` (backslash escapes skipped), or -1."""
    depth, j = 0, i
    while j < len(text):
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return -1


def map_relations(s: str) -> str:
    """Unicode relations, `~=`, `\\not=` and `\\not\\in` in LaTeX's spelling."""
    for symbol, command in RELATION_SYMBOLS.items():
        s = s.replace(symbol, command)
    s = _APPROX_TILDE.sub(" \\\\approx ", s)
    s = _NOT_EQUAL.sub("\\\\ne ", s)
    return _NOT_IN.sub("\\\\notin ", s)


def loose_relations(s: str) -> frozenset[str]:
    """The relations other than equality and order in `s` that math-verify cannot compare."""
    return frozenset(m.group(1) or m.group(2) for m in _LOOSE_RELATION.finditer(s))


def read_notation(s: str) -> str | None:
    """`s` with its text groups and base numerals read (rules in the module docstring); None
    when it is unreadable."""
    s = s.replace("{\\rm d}", "d")  # math-verify's own reading of the old-style differential
    if _HIDDEN.search(s) or _OLD_FONT.search(s):
        return None
    for symbol, latex in _SUPERSCRIPTS.items():
        s = s.replace(symbol, latex)
    s = _text_groups(_MATH_FONT.sub(r" \1 ", s))
    if s is None:
        return None
    pieces, pos = [], 0
    for start, end, _ in _groups(s) or []:  # what is left of them: labels, text-only answers
        pieces.append(s[pos:start])
        pos = end
    outside = " ".join([*pieces, s[pos:]])
    if _unknown_symbol(outside) or _hedged(outside):
        return None
    return read_bases(s)


def _unknown_symbol(outside: str) -> bool:
    """A non-ASCII character outside text that is no letter, space or currency sign, or that is
    a number (`六`, `½`): math-verify's grammar drops or misreads what it does not know."""
    for ch in outside:
        if ch.isascii():
            continue
        kind = unicodedata.category(ch)
        if kind[0] not in "LZ" and kind != "Sc" or unicodedata.numeric(ch, None) is not None:
            return True
    return False


def _hedged(outside: str) -> bool:
    """A hedge word outside text groups in an answer that holds math (`5 maybe`, `at least 5`);
    a word-only answer ("either", "not possible") is text, compared as text. "or" between values
    stays: it is math-verify's list separator ("5 or 6" is the list 5, 6)."""
    if not _MATH.search(outside):
        return False
    return any(w.lower() in HEDGE_WORDS - _CONNECTORS for w in _PLAIN_WORD.findall(outside))


# -- text groups -----------------------------------------------------------------------------


def _groups(s: str) -> list[tuple[int, int, str]] | None:
    """(start, end, content) of the top-level text groups; None for one without braces."""
    out, pos = [], 0
    for m in _TEXT_COMMAND.finditer(s):
        if m.start() < pos:  # inside the previous group
            continue
        close = closing_brace(s, m.end()) if s.startswith("{", m.end()) else -1
        if close < 0:
            return None
        out.append((m.start(), close + 1, s[m.end() + 1 : close]))
        pos = close + 1
    return out


def _words(content: str) -> tuple[str, list[str]] | None:
    """(what a group holds besides its words, its words in lower case); None when it holds
    math or commands, which are no words to read."""
    c = _ESCAPED.sub(" ", _SPACING.sub(" ", content))
    c = _UNIT_POWER.sub(" ", c).replace("{", " ").replace("}", " ")
    if "\\" in c or "$" in c:
        return None
    return c, [w.lower() for w in _WORD.findall(c)]


def _names_number(text: str) -> bool:
    """A digit or any other character that is a number (`六`, `½`, `Ⅵ`)."""
    return any(unicodedata.numeric(ch, None) is not None for ch in text)


def _kind(content: str) -> str:
    """ "space", "connector", "hedge" or "words": what one text group beside math says."""
    read = _words(content)
    if read is None:
        return "hedge"
    c, words = read
    punctuation = re.sub(r"[A-Za-z\s]", "", c)
    if len(words) == 1 and words[0] in _CONNECTORS and not punctuation.strip(",;"):
        return "connector"
    if not words and not punctuation.strip(",;"):
        return "connector" if punctuation else "space"
    hedged = any(w in HEDGE_WORDS or w in _VALUE_WORDS for w in words)
    return "hedge" if hedged or "?" in c or _names_number(c) else "words"


def _text_only_hedge(contents: list[str]) -> bool:
    """An answer that is only text hedges where it names a number and a hedge word or asks
    (`\\text{5 or 6}`, `\\text{5}\\text{ maybe}`); `\\text{5}` and `\\text{Monday}` do not."""
    read = [_words(c) for c in contents]
    if any(r is None for r in read):
        return True
    text = " ".join(c for c, _ in read)  # type: ignore[misc]
    words = [w for _, ws in read for w in ws]  # type: ignore[misc]
    hedged = "?" in text or any(w in HEDGE_WORDS for w in words)
    return _names_number(text) and hedged


def _text_groups(s: str) -> str | None:
    """Read the text groups of `s` (module docstring): units at the end dropped, connectors made
    commas, labels and text-only answers kept; None for a hedge or text between math."""
    groups = _groups(s)
    if groups is None:
        return None
    if not groups:
        return s
    bounds = [0] + [x for start, end, _ in groups for x in (start, end)] + [len(s)]
    between = [s[bounds[2 * k] : bounds[2 * k + 1]] for k in range(len(groups) + 1)]
    valued = [bool(_VALUE.search(_SPACING.sub(" ", b))) for b in between]
    if not any(valued):  # only text: "\text{Monday}", "(\text{C})"; compared as text
        return None if _text_only_hedge([c for _, _, c in groups]) else s
    kinds = [_kind(content) for _, _, content in groups]
    if "hedge" in kinds:
        return None
    # the trailing units: word groups from which on only units and unit glue follow
    first = len(groups)
    while (
        first > 0
        and kinds[first - 1] in ("words", "space")
        and _UNIT_GLUE.fullmatch(between[first])
    ):
        first -= 1
    if "words" in kinds[first:] and any(valued[: first + 1]):
        s, groups = _TRAILING_SPACE.sub("", s[: groups[first][0]]), groups[:first]
    out, pos = [], 0
    for k, (start, end, _) in enumerate(groups):
        out.append(s[pos:start])
        if kinds[k] == "space":
            out.append(" ")
        elif kinds[k] == "connector":
            if not (valued[k] and valued[k + 1]):
                return None  # "5 \text{ or}": a connector with one side is a hedge
            out.append(", ")
        elif k == 0 and not valued[0] and between[1].lstrip().startswith("="):
            out.append(s[start:end])  # a label: "\text{Area} = 5"
        else:
            return None  # text between math: "5 \text{ cm} + \frac{1}{2}"
        pos = end
    out.append(s[pos:])
    return "".join(out)


# -- base numerals ---------------------------------------------------------------------------


def _numeral(digits: str, base: int) -> str | None:
    """The value of `digits` in `base` as LaTeX, or None when it is not a numeral there."""
    if not 2 <= base <= 36:
        return None
    whole, _, fraction = digits.partition(".")
    try:
        value = Fraction(int(whole + fraction, base), base ** len(fraction))
    except ValueError:  # a digit the base does not have
        return None
    if base == 10 or value.denominator == 1:
        return digits if base == 10 else str(value.numerator)
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _base_matches(s: str) -> list[tuple[re.Match, int]] | None:
    """Each numeral with a base subscript and its base; None when a subscript on a number is
    not a base (`5_{x}`, `10_{two}`, `12_10`, whose subscript is the digit 1)."""
    found = []
    for m in _NUMERAL.finditer(s):
        base = int(m.group(3) or m.group(4))
        if base <= 10 and re.search(r"[A-Z]", m.group(1) or m.group(2)):
            continue  # letters in a base up to 10 are no digits: 2A_3 is 2 A_3
        letters = len(s[: m.start()]) - len(s[: m.start()].rstrip(_LETTERS))
        if letters and not s[: m.start() - letters].endswith("\\"):
            continue  # glued to a letter (`A3_{16}`, `x2_3`): no numeral, and unreadable below
        found.append((m, base))
    rest, pos = [], 0
    for m, _ in found:
        rest.append(s[pos : m.start()])
        pos = m.end()
    rest.append(s[pos:])
    if _SUBSCRIPTED_NUMBER.search(" ".join(rest)):
        return None
    return found


def read_bases(s: str) -> str | None:
    """`s` with every base numeral replaced by its value; None when one is not readable (rules
    in the module docstring)."""
    found = _base_matches(s)
    if found is None:
        return None
    out, pos = [], 0
    for m, base in found:
        value = _numeral(m.group(1) or m.group(2), base)
        if value is None:
            return None
        out.extend([s[pos : m.start()], value])
        pos = m.end()
    out.append(s[pos:])
    return "".join(out)


def numeral_bases(s: str) -> frozenset[int]:
    """The bases other than 10 that the numerals of `s` are written in."""
    found = _base_matches(s) or []
    return frozenset(base for _, base in found if base != 10)
