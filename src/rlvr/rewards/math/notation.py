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
  between two values is a list separator (`12 \\text{ and } 13` is the list 12, 13). Known
  words (rlvr.rewards.math.value_units, and the gold's own words) are units where they end the
  answer (`5 \\text{ cm}^2`, `5\\,\\text{m}/\\text{s}` read 5) and a label where they start it
  before `=` (`\\text{Area} = 5`); any other word (`5\\text{k}`, `5 \\text{ millones}`,
  `5\\text{-ish}`) and text between math is unreadable. An answer that is only text
  (`\\text{Monday}`, `(\\text{C})`) is left as it is.
  A math-font letter (`\\mathrm{e}`, `\\mathbf{i}`) is that letter, not a unit.
- Plain words after a bare number and a space are units on the same terms (`5 cm`, `12 apples`
  read 5, 12; `5 thousand`, `5 increase` are unreadable); elsewhere letters are variables (`2c`
  is 2c: math-verify's own unit stripping, which read `2c` as 2, is turned off by the verifier).
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
  `loose_relations`, with the logical connectives (`\\lor`, `\\land`, `\\neg`, `\\forall`, ...)
  and ellipses (`\\ldots`, `\\cdots`), which math-verify drops (`x = 3 \\lor x = 4` read 4):
  the verifier accepts one only where the gold holds the same ones, compared side by side
  (`relation_pieces`).

Regexes and string scans in linear time; nothing here parses or evaluates the answer.
"""

from __future__ import annotations

import contextlib
import re
import unicodedata
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from fractions import Fraction

from rlvr.rewards.math.value_units import known_word

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
    "double triple thrice squared cubed factorial inverse reciprocal negative pair pairs couple "
    "couples score scores gross".split()
)
# Inside a text group these name a value too (`5 \text{ e}` is no unit).
_VALUE_WORDS = frozenset({"e", "i", "pi", "infinity", "infty", "inf"})
_CONNECTORS = frozenset({"and", "or"})
_WORD = re.compile(r"[A-Za-z]+")
_MATH = re.compile(r"\d|\\[A-Za-z]")
_PLAIN_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}(?![A-Za-z])")
_SPACING = re.compile(r"\\[ ,;:!>]|~|\\(?:quad|qquad|enspace|thinspace|medspace)(?![A-Za-z])")
_ESCAPED = re.compile(r"\\[$&%#_{}]")
_DEGREE = re.compile(r"\^\s*(?:\{\s*\\circ\s*\}|\\circ(?![A-Za-z]))")  # `\text{°C}`, mapped
_UNIT_POWER = re.compile(r"(?<=[A-Za-z])\^\s*(?:\{\s*-?\s*\d+\s*\}|-?\d)")  # `\text{m^2}`
# What may follow a unit: more units, powers, `/`, `\cdot`, spaces, degrees.
_UNIT_GLUE = re.compile(
    r"(?:\s|\\[ ,;:!]|~|/|\.|\\cdot(?![A-Za-z])|\^\s*(?:\{\s*-?\s*\d+\s*\}|-?\d"
    r"|\{?\s*\\circ\s*\}?))*"
)
_VALUE = re.compile(r"[A-Za-z0-9]|\\(?!left|right|[bB]igg?[lr]?)[A-Za-z]")
_TRAILING_SPACE = re.compile(r"(?:\s|\\[ ,;:!]|~)+$")
_LETTER_RUN = re.compile(r"[^\W\d_]+")  # any script: `más`, `или`, `μm`
_UNIT_PUNCTUATION = frozenset(" ./-()'°,")
# Before plain unit words: math with no plain letter (an assigned `x =` aside): `3\sqrt{2} cm`.
_ASSIGNED = re.compile(r"\s*[A-Za-z]\s*=")
_COMMAND = re.compile(r"\\[A-Za-z]+")
_UNIT_RUN_CHARS = frozenset(" .'/-")
# The words of the gold itself, known as units and labels while its answers are read.
_GOLD_WORDS: ContextVar[frozenset[str]] = ContextVar("gold_words", default=frozenset())

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
    r"|implies|impliedby|iff|Leftrightarrow|leftrightarrow|Leftarrow|leftarrow|gets|mapsto"
    r"|lor|vee|land|wedge|lnot|neg|veebar|barwedge|oplus|therefore|because|forall|exists"
    r"|nexists|ldots|dots|cdots|dotsc|dotsb|dotsm|dotsi|dotso|vdots|ddots|iddots)"
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


def relation_pieces(text: str) -> tuple[list[str], list[str]]:
    """(the pieces between the relations at brace depth 0, those relations) of `text`; the
    relations are the ones loose_relations names."""
    pieces, relations, pos, depth, scanned = [], [], 0, 0, 0
    for m in _LOOSE_RELATION.finditer(text):
        depth += _depth_change(text, scanned, m.start())
        scanned = m.start()
        if depth == 0:
            pieces.append(text[pos : m.start()].strip())
            relations.append(m.group(1) or m.group(2))
            pos = m.end()
    pieces.append(text[pos:].strip())
    return pieces, relations


def _depth_change(text: str, lo: int, hi: int) -> int:
    """Braces opened minus closed in `text[lo:hi]`, escaped braces (`\\{`) not counted."""
    chunk = text[lo:hi].replace("\\{", "").replace("\\}", "")
    return chunk.count("{") - chunk.count("}")


def read_notation(s: str) -> str | None:
    """`s` with its text groups and base numerals read (rules in the module docstring); None
    when it is unreadable."""
    s = s.replace("{\\rm d}", "d")  # math-verify's own reading of the old-style differential
    if _HIDDEN.search(s) or _OLD_FONT.search(s):
        return None
    for symbol, latex in _SUPERSCRIPTS.items():
        s = s.replace(symbol, latex)
    text = _text_groups(_MATH_FONT.sub(r" \1 ", s))
    if text is None:
        return None
    pieces, pos = [], 0
    for start, end, _ in _groups(text) or []:  # what is left of them: labels, text-only answers
        pieces.append(text[pos:start])
        pos = end
    outside = " ".join([*pieces, text[pos:]])
    if _unknown_symbol(outside) or _hedged(outside):
        return None
    unit_free = drop_plain_unit(text.strip())
    return None if unit_free is None else read_bases(unit_free)


@contextlib.contextmanager
def gold_words_known(words: Iterable[str]) -> Iterator[None]:
    """Within the block, the (lower-case) `words` are known units and labels: the gold's own
    words (`5 \\text{ widgets}` for a gold `5 widgets`); see rlvr.rewards.math.value_units."""
    token = _GOLD_WORDS.set(frozenset(words))
    try:
        yield
    finally:
        _GOLD_WORDS.reset(token)


def words_of(gold: str) -> frozenset[str]:
    """The lower-case words a gold writes as words, which may be units or labels: those of its
    text groups, of the prose around its math spans (`$125$ miles`) and the plain words that end
    it (`300 K`, `5 widgets`); not its variables (`x \\le 5`), no hedge or value word."""
    found = _math_spans_outside(gold)
    parts = [found[1]] if found else []
    for math in found[0] if found else [gold]:
        parts.extend(content for _, _, content in _groups(math) or [])
        start = _unit_run_start(math)
        if _rstrip_spacing(math[:start]) != math[:start]:
            parts.append(math[start:])
    words = {w.lower() for part in parts for w in _LETTER_RUN.findall(part)}
    return frozenset(words - HEDGE_WORDS - _VALUE_WORDS)


def _math_spans_outside(text: str) -> tuple[list[str], str] | None:
    """(the `$...$` spans of `text`, the prose outside them) where it has spans, else None."""
    parts = re.split(r"(?<!\\)\$+", text)
    if len(parts) < 3 or len(parts) % 2 == 0:
        return None
    return parts[1::2], " ".join(parts[0::2])


def _known_text(content: str, label: bool = False) -> bool:
    """Whether a text group is only known unit words (or, with `label`, label words) and the
    punctuation units are written with; rlvr.rewards.math.value_units decides the words."""
    read = _words(content)
    if read is None:
        return False
    text = read[0]
    rest = _LETTER_RUN.sub(" ", text)
    if any(ch not in _UNIT_PUNCTUATION and unicodedata.category(ch) != "Sc" for ch in rest):
        return False
    extra = _GOLD_WORDS.get()
    return all(known_word(w, extra, label=label) for w in _LETTER_RUN.findall(text))


def drop_plain_unit(s: str) -> str | None:
    """`5 cm`, `12 apples`, `3\\sqrt{2}\\, cm`, `x = \\frac{1}{2} hours`: math without plain
    letters, a space and known unit words is that math; None where the words after it are no
    known unit (`5 thousand`). Anywhere else plain letters are variables (`2c` is 2c, `x + 2 m`
    is x + 2m, `5 m` and `5 o` are products): the verifier turns off math-verify's unit
    stripping, which reads `2c` as 2 and `5 increase` as 5. Scans from the end, linear in `s`."""
    start = _unit_run_start(s)
    head, words = s[:start], s[start:]
    stripped = _rstrip_spacing(head)
    if not words or stripped == head:  # no space before the words
        return s
    assigned = _ASSIGNED.match(stripped)
    math = stripped[assigned.end() :] if assigned else stripped
    if not math or re.search(r"[A-Za-z]", _COMMAND.sub("", math)) or math[-1] in "+-*/=^_({[,\\":
        return s  # letters are variables; after an operator the words are an operand
    single = words.strip()
    if len(single) == 1 and single.lower() not in _GOLD_WORDS.get():
        return s  # `5 x`: a product, not a unit
    return stripped if _known_text(words) else None


def _unit_run_start(s: str) -> int:
    """Where the run of plain words (letters, spaces, `.`, `'`, `/`, `-`) that ends `s` starts,
    at a letter; a LaTeX command's name (`\\pi`) is no word."""
    start = len(s)
    while start > 0 and (s[start - 1].isalpha() or s[start - 1] in _UNIT_RUN_CHARS):
        start -= 1
    while True:
        while start < len(s) and not s[start].isalpha():
            start += 1
        if start == 0 or s[start - 1] != "\\":
            return start
        while start < len(s) and s[start].isalpha():  # skip the command's name
            start += 1


def _rstrip_spacing(s: str) -> str:
    """`s` without the spaces and LaTeX spacing (`\\,`, `\\ `, `~`, `\\quad`) it ends with.
    Moves an index, so a long run of spacing costs its length, not its square."""
    end = len(s)
    while True:
        while end > 0 and s[end - 1].isspace() and not s.endswith("\\ ", 0, end):
            end -= 1
        for spacing in ("\\,", "\\;", "\\:", "\\!", "\\ ", "~", "\\quad", "\\qquad"):
            if s.endswith(spacing, 0, end) and not s.endswith("\\" + spacing, 0, end):
                end -= len(spacing)
                break
        else:
            return s[:end]


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
    c = _DEGREE.sub(" ° ", _UNIT_POWER.sub(" ", c)).replace("{", " ").replace("}", " ")
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
        if not all(_known_text(content) for _, _, content in groups[first:]):
            return None  # `5 \text{ thousand}`, `5\text{-ish}`: no unit, unreadable
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
            if not _known_text(groups[0][2], label=True):
                return None  # `\text{falsch} = 5`: no label known
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


def numeral_skeleton(s: str) -> str:
    """`s` with each numeral that carries a base subscript (`12_3`, `(12)_3`, `5_{10}`) made
    `#` and the spaces removed: `-12_3` -> `-#`, `5\\cdot 1_3` -> `5\\cdot#`. The verifier
    compares the skeletons of an answer and a gold written in bases."""
    out, pos = [], 0
    for m, _ in _base_matches(s) or []:
        out.extend([s[pos : m.start()], "#"])
        pos = m.end()
    out.append(s[pos:])
    return re.sub(r"\s+", "", _SPACING.sub(" ", "".join(out)))
