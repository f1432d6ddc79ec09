"""What the math verifier accepts around an answer it reads (rlvr.rewards.math.answer).

A policy under RL pressure keeps the marked answer and changes its meaning with the words around
it: `Answer: not $5$`, `\\boxed{5} or six`, `\\boxed{5}, no wait, 6`. So:
- Words beside a math span inside an answer (`neutral_pieces`) are read only when every one is a
  known neutral lead-in ("the final answer is", "so", "x ="), a list connector between spans
  ("and", "or") or, after the last span, closing words and units ("is the answer", "cm"). Any
  other word or sign (`not`, `maybe`, `?`, `-`) makes the answer unreadable.
- The text after the final answer (`tail_reading`) is closing prose: a hedge, negation or doubt
  word in any of several languages (`or`, `no`, `wait`, `actually`, `oder`, `ou`, `或`), a `?`, a
  relation or `\\pm` is a hedge; every number in it (digits, a math span, a number word such as
  "six") is one more answer, which must match like the others. "I hope it is correct.", "square
  units", "Done." state nothing. `, not 6` right after the answer rejects a value and `\\approx
  0.333` approximates it (neither is read); "or equivalently" restates.
- The clause before a box (`lead_in_hedge`) holds no negation or qualifier (`not \\boxed{5}`,
  `probably \\boxed{5}`).
The scanned copy is NFKC-folded, stripped of invisible format characters (zero-width spaces)
and read with Latin lookalikes (Cyrillic `о`, Greek `ο`) as the letters they imitate. Markers
are matched with ASCII-only case folding (`fold`), which keeps every offset: `str.lower()` turns
`İ` into two characters. Regexes and scans in linear time.
"""

from __future__ import annotations

import re
import unicodedata

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold(text: str) -> str:
    """`text` with A-Z lower-cased and nothing else changed: same length, same offsets."""
    return text.translate(_ASCII_LOWER)


# -- words beside a math span ------------------------------------------------------------------

_NEUTRAL = frozenset(
    "the a an final answer answers is are was be equals equal to so thus therefore hence then "
    "finally and it its this that which we get gets got have has find found obtain obtained "
    "gives yields result results value values solution solutions number total sum product "
    "difference quotient remainder area perimeter volume length width height radius diameter "
    "distance probability ratio expression simplified simplest form exact exactly correct "
    "required desired our here in of can see conclude".split()
)
_UNITS = frozenset(
    "cm mm m km in inch inches ft foot feet yd yard yards mi mile miles meter meters metre metres "
    "centimeter centimeters millimeter millimeters kilometer kilometers unit units square sq "
    "cubic g kg gram grams kilogram kilograms lb lbs pound pounds oz ounce ounces l ml liter "
    "liters litre litres s sec second seconds min minute minutes h hr hour hours day days week "
    "weeks month months year years degree degrees deg radian radians rad dollar dollars cent "
    "cents percent mph per ways people students".split()
)
_CONNECTORS = frozenset({"and", "or"})
_CLOSING = re.compile(r"(?i)\bI hope (?:it|this) is correct\b")
_VARIABLE = re.compile(r"(?<![A-Za-z])[A-Za-z]\s*=")  # "x = $5$"
_PIECE_TOKEN = re.compile(r"[A-Za-z]+|\s+|\*\*|\\\"|.", re.DOTALL)
_PUNCTUATION = frozenset(".,:;!()`*\"'") | {"**", '\\"'}


def neutral_pieces(pieces: list[str]) -> bool:
    """Whether the text around the math spans of one answer is only neutral: `pieces` are the
    texts before the first span, between spans and after the last (rules in the docstring)."""
    last = len(pieces) - 1
    for k, piece in enumerate(pieces):
        if k == 0:
            words, signs = _NEUTRAL, _PUNCTUATION | {"="}
            piece = _VARIABLE.sub(" ", piece)
        elif k == last:
            words, signs = _NEUTRAL | _UNITS, _PUNCTUATION | {"/"}
            piece = _CLOSING.sub(" ", piece)
        else:
            words, signs = _CONNECTORS, frozenset({",", ";"})
        for tok in _PIECE_TOKEN.findall(piece):
            if tok.isspace() or tok in signs:
                continue
            if not (tok.isascii() and tok.isalpha() and tok.lower() in words):
                return False
    return True


# -- the scanned copy ----------------------------------------------------------------------------

_LOOKALIKE = str.maketrans(
    "аеорсухіјѕԁһӏԛԝАВЕКМНОРСТХІЈЅαονικρτυχεΑΒΕΖΗΙΚΜΝΟΡΤΥΧ",
    "aeopcyxijsdhlqwABEKMHOPCTXIJSaovikptuxeABEZHIKMNOPTYX",
)
_SUPERSCRIPT = {"²": "^2", "³": "^3", "°": "^\\circ "}


def scanned(text: str) -> str:
    """NFKC, without format characters (zero-width spaces, joiners, bidi marks)."""
    for sup, latex in _SUPERSCRIPT.items():
        text = text.replace(sup, latex)
    text = unicodedata.normalize("NFKC", text)
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf")


# -- hedges ----------------------------------------------------------------------------------

# Words that negate, qualify, doubt or offer another value; read in any clause before a box and
# anywhere after the final answer.
HEDGES = frozenset(
    "or nor either neither not no nope nah never none cannot isn aren wasn weren doesn don didn "
    "won wouldn shouldn couldn hasn haven maybe perhaps possibly probably likely unlikely "
    "presumably apparently might may could unsure uncertain doubt doubtful guess guessing "
    "estimate estimated approximately approx about around roughly nearly almost circa ish least "
    "most more less fewer than between otherwise instead alternatively alternative alternatives "
    "another wrong incorrect false mistake mistaken erroneous typo unless depending depends "
    # other languages: or, not, maybe, about, but
    "o u oder ou oppure ovvero или либо lub albo eller veya yoksa sau nebo vagy ή أو או या "
    "non ne pas nicht kein keine nein não nao nie не нет nem "
    "vielleicht wahrscheinlich ungefähr etwa quizás quizá quiza talvez acaso peut environ forse "
    "probabilmente может возможно примерно около наверное aber mais pero".split()
)
# Only after the final answer: doubt and second thoughts ("\\boxed{5}, no wait, 6").
_TAIL_ONLY = frozenset(
    "wait actually hmm hm hmmm um uh oops think thinking believe suspect suppose except rather "
    "else vs versus but also too though although however whereas when whenever if thru through "
    "till until up".split()
)
_CJK_HEDGES = ("或", "还是", "還是", "可能", "也许", "也許", "大概", "大约", "左右", "不", "没",
               "吗", "嗎", "または", "もしくは", "たぶん", "多分", "おそらく", "約", "또는", "혹은",
               "아마", "아니")  # fmt: skip
_HEDGE_COMMAND = re.compile(
    r"\\(?:approx|approxeq|sim|simeq|cong|equiv|propto|ne|neq|not|le|leq|ge|geq|lt|gt|ll|gg"
    r"|lesssim|gtrsim|pm|mp|lor|vee|neg|lnot|mathrm\s*\{\s*or)(?![A-Za-z])"
)
_WORD = re.compile(r"(?<![\\\w])[^\W\d_]+")
_LEAD_TOKEN = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?|\$\$|\\[(\[]|\*\*|\S")
# Before a box: negations, doubt and "or" ("6 or \\boxed{5}"); an approximation is no hedge
# there ("approximately $\\boxed{16386.16}$ dollars": a rounded amount).
_LEAD_HEDGES = frozenset(
    "or nor either neither not no never cannot isn aren wasn weren doesn don didn won maybe "
    "perhaps possibly probably likely unlikely unsure guess wrong incorrect oder ou oppure или "
    "либо non ne pas nicht kein keine não nao nie не нет vielleicht quizás quizá talvez "
    "peut forse возможно может".split()
)
# Before an answer in prose, qualifiers too ("no less than 5", "roughly 5").
PROSE_LEAD_HEDGES = _LEAD_HEDGES | frozenset(
    "about approximately approx around roughly nearly almost circa least most more less fewer "
    "than under over below above exceeding within ungefähr etwa environ circa примерно около "
    "unos alrededor thru through till until except".split()
)
_HEDGE_SIGN = re.compile(r"[?¿±∓≈≃≅≠≤≥]")
_PLUS = re.compile(r"\s*\$?\s*\+")  # "\\boxed{5}+": five or more


def _hedge_word(word: str, words: frozenset[str]) -> bool:
    """`word` (lower-cased, also with lookalike letters read as Latin; "isn't" as "isn") is one
    of `words`, or a "hmm"."""
    low = re.split("['’]", word.lower())[0]
    return low in words or low.translate(_LOOKALIKE) in words or bool(re.fullmatch(r"h+m+", low))


def lead_in_hedge(clause: str, words: frozenset[str] | None = None) -> str:
    """The negation or doubt word among the words right before a box (`is not \\boxed{5}`,
    `probably $\\boxed{5}$`), or ''. Only the run of words that ends at the box is read: "not 10
    which is \\boxed{7}" rejects 10 and states 7."""
    tokens = _LEAD_TOKEN.findall(scanned(clause))
    while tokens and tokens[-1] in ("$", "$$", "\\(", "\\[", "*", "**"):
        tokens.pop()
    for tok in reversed(tokens):
        if not tok[0].isalpha():
            break
        if _hedge_word(tok, _LEAD_HEDGES if words is None else words):
            return tok
    return ""


# -- numbers after the final answer ------------------------------------------------------------

_NUMBER_WORDS = {
    w: str(v)
    for v, ws in enumerate(
        [
            "zero cero null nulle ноль",
            "one",
            "two dos deux zwei dois duas два",
            "three tres trois drei três tre три",
            "four cuatro quatre vier quatro quattro четыре",
            "five cinco cinq fünf funf cinque пять",
            "six seis sechs sei шесть",
            "seven siete sept sieben sete sette семь",
            "eight ocho huit acht oito otto восемь",
            "nine nueve neuf neun nove девять",
            "ten diez dix zehn dez dieci десять",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
            "twenty",
        ]
    )
    for w in ws.split()
}
_NUMBER_WORDS.update({w: str(10 * k) for k, w in enumerate("thirty forty fifty sixty".split(), 3)})
_NUMBER_WORDS.update({w: str(10 * k) for k, w in enumerate("seventy eighty ninety".split(), 7)})
# Words that scale or change a number: a hedge, not a value to compare.
_MULTIPLIERS = frozenset(
    "half halves hundred hundreds thousand thousands million millions billion billions trillion "
    "dozen dozens twice triple thrice squared cubed quarter quarters pair pairs couple couples "
    "gross".split()
)
# "one" as a pronoun: "the one", "one can check".
_PRONOUN_ONE = re.compile(
    r"(?i)\b(?:the|this|that|each|every|any|no|which|only|single|correct|right)\s+one\b"
    r"|\bone\s+(?:can|could|should|must|gets|finds|sees|checks|verifies|obtains|has|of)\b"
)
_LEADING_CLOSER = re.compile(r"^\s*(?:\$\$|\$|\\\)|\\\])")
_UNIT_POWER = re.compile(
    r"(?<=[A-Za-z}])\s*\$?\s*\^\s*(?:\{\s*-?[1-3]\s*\}|-?[1-3])\s*\$?|\^\s*\{?\s*\\circ\s*\}?"
)
_NUMBER = r"[-+]?(?:\d+(?:[.,]\d+)*|\.\d+)"
_APPROXIMATION = re.compile(
    r"(?i)(?:\\approx|≈|approximately|approx\.?)\s*\$?\s*[-+]?\d*\.\d+(?![\d.])\s*\$?"
)
_REJECTION = re.compile(rf"^[\s,;]*(?:and\s+)?not\s+\$?{_NUMBER}\$?(?=\s*[.!]?\s*$)", re.I)
# A number that counts something: a word follows it, other than one that states it ("6 is").
# Words that state a value or offer it ("6 also works", "6 would fit") are no count.
_COUNTED = re.compile(
    r"\s*-?\s*(?!(?:is|are|was|were|be|been|equals|also|too|works?|fits?|instead|would|could"
    r"|might|may|will|shall|should|must|can|seems?|looks?|does|did|do|as|makes?|gives?|holds?"
    r"|satisfies|satisfy|solves?|checks?|matches|match|remains?|stays?)\b)[^\W\d_]{2}",
    re.IGNORECASE,
)
# "\\boxed{9} \\pmod{11}": the modulus of a congruence, no other value
_MODULUS = re.compile(r"\\[pb]?mod(?![A-Za-z])\s*(?:\{[^{}]{0,40}\}|\d+)")
_EQUIVALENTLY = re.compile(r"(?i)\bor\s*,?\s*(?=equivalently\b)")
_SPAN = re.compile(r"\$\$(.*?)\$\$|\$(.*?)\$|\\\((.*?)\\\)|\\\[(.*?)\\\]", re.DOTALL)
_VALUE_COMMAND = re.compile(r"\d|\\(?:[dt]?frac|sqrt|pi|infty|binom)(?![A-Za-z])")
_BARE_VALUE = re.compile(
    rf"[(\[]\s*{_NUMBER}(?:\s*,\s*{_NUMBER})+\s*[)\]]"
    r"|\\[dt]?frac\s*\{[^{}]{0,80}\}\s*\{[^{}]{0,80}\}|\\sqrt\s*\{[^{}]{0,80}\}|\\pi(?![A-Za-z])"
    r"|\\infty(?![A-Za-z])"
    rf"|{_NUMBER}(?:\s*[/^]\s*(?:\{{[^{{}}]{{0,40}}\}}|[-+]?\d+(?:\.\d+)?))*"
)


TAIL_WINDOW = 400
_SENTENCE_END = re.compile(r"[.!?\n](?![0-9])|$")


def closing_window(tail: str) -> str:
    """The rest of the final answer's sentence and the sentence after it (at most
    TAIL_WINDOW characters): where a second thought about the answer stands ("\\boxed{5}.
    Hmm, 6?", "\\boxed{5}\nThe correct value is 6."). A "sentence" of no letter or digit (a
    blank line, a `---` rule) is not the next one ("\\boxed{5}\n\n---\n\n6" reads the 6). Notes
    further on ("Note that $13_5$ divided by $2_5$ is $4_5$") explain; restatements there are
    still read."""
    text = tail[:TAIL_WINDOW]
    first = _SENTENCE_END.search(text)
    pos = first.end() if first else len(text)
    while pos < len(text):
        second = _SENTENCE_END.search(text, pos)
        end = second.end() if second else len(text)
        if _CONTENT.search(text, pos, end) or end >= len(text):
            return text[:end]
        pos = max(end, pos + 1)  # a sentence with nothing in it: the next one
    return text


_CONTENT = re.compile(r"[^\W_]")


def tail_reading(tail: str, max_values: int) -> tuple[list[str], str]:
    """(the values the text after the final answer names, a problem: the hedge found there or
    '') (rules in the module docstring). At most `max_values` values are collected: more are
    too many answers anyway."""
    text = _LEADING_CLOSER.sub("", scanned(closing_window(tail)))
    text = _REJECTION.sub(" ", _APPROXIMATION.sub(" ", text))
    text = _UNIT_POWER.sub(" ", _EQUIVALENTLY.sub(" ", _MODULUS.sub(" ", text)))
    if m := _HEDGE_SIGN.search(text) or _HEDGE_COMMAND.search(text) or _PLUS.match(text):
        return [], f"hedge after the final answer: {m.group()!r}"
    if cjk := next((h for h in _CJK_HEDGES if h in text), None):
        return [], f"hedge after the final answer: {cjk!r}"
    values: dict[str, None] = {}
    pronouns = {m.end() for m in _PRONOUN_ONE.finditer(text)}
    pronouns |= {m.start() for m in _PRONOUN_ONE.finditer(text)}
    for m in _WORD.finditer(text):
        word = m.group().lower()
        plain = word.translate(_LOOKALIKE)
        if _hedge_word(word, HEDGES | _TAIL_ONLY) or plain in _MULTIPLIERS:
            return [], f"hedge after the final answer: {m.group()!r}"
        if (
            plain in _NUMBER_WORDS
            and not _COUNTED.match(text, m.end())
            and not (plain == "one" and pronouns & {m.start(), m.end()})
        ):
            values[_NUMBER_WORDS[plain]] = None
    if any(not ch.isascii() and unicodedata.numeric(ch, None) is not None for ch in text):
        return [], "a number after the final answer"
    return list(_values(text, values, max_values)), ""


def _values(text: str, values: dict[str, None], max_values: int) -> dict[str, None]:
    """`values` plus the math spans of `text` that hold a number and the numbers outside them
    (all numbers when its delimiters do not pair up). A number or span directly followed by a
    word counts something ("after 5 years", "the 5-year period", "$3$ and"): no answer."""
    pieces, pos = [], 0
    if text.count("$") % 2 == 0:
        for m in _SPAN.finditer(text):
            content = next(g for g in m.groups() if g is not None)
            if _VALUE_COMMAND.search(content) and not _COUNTED.match(text, m.end()):
                values[content.strip()] = None
            pieces.append(text[pos : m.start()])
            pos = m.end()
            if len(values) > max_values:
                return values
    pieces.append(text[pos:])
    rest = " ".join(pieces)
    for m in _BARE_VALUE.finditer(rest):
        if not _COUNTED.match(rest, m.end()):
            values[m.group().strip()] = None
        if len(values) > max_values:
            break
    return values
