"""How the math verifier reads answers: where a completion states them (the strict reading, in
the calling process) and the notation rewriting of an answer or gold (`normalize`, in the worker).

String scans and regexes in linear time; nothing here parses or evaluates the answer.
1. Reasoning is dropped: everything up to the last `</think>` is ignored, and an unclosed
   `<think>` (a truncated trace) means no answer. An answer written only inside the think block
   does not count.
2. `<answer>...</answer>` tags: each tag's content is an answer, or the `\\boxed{}` contents inside
   it if it has any. Unbalanced or nested tags mean no answer.
3. Minerva's closing line, "The final answer is X. I hope it is correct." (the format of the
   Minerva/MATH few-shot prompts), anywhere else: X, and the boxes are not read (models trained
   on that format box intermediate results on the way). Several such lines are several answers.
4. Otherwise `\\boxed{...}` / `\\fbox{...}` anywhere else (nested braces are matched in one
   linear pass; `\\boxed 5` takes the run of non-space characters after it). An unclosed box, or
   boxes nested more than MAX_BOX_DEPTH deep, mean no answer. A negation or doubt word among the
   words right before a box (`is not \\boxed{5}`, `probably \\boxed{5}`) is a hedge.
5. Only if there is no tag, Minerva line or box: lines matching `answer_pattern` (default:
   "Answer: ...", "Final answer: ...", case-insensitive); None turns this off.
6. After the last tag, box, Minerva line or answer line that was read, an answer stated again is
   one more answer: the math after "answer is", "value is", "answer:", "or", "maybe"
   ("\\boxed{5} Actually the answer is 6"), a box after the last Minerva line, and every number
   in the rest of that sentence and the next one (digits, math spans, number words: "\\boxed{5}
   or six"); a hedge word, "?" or relation there is a hedge ("\\boxed{5}, no wait",
   rlvr.rewards.math.extraction_guard).
A box inside a box is one more answer (`shown_answers`): `\\boxed{\\text{6 } \\boxed{5}}` states
`\\text{6 } 5` and 5, a hedge; `\\boxed{\\boxed{5}}` states 5 twice. Each answer is then
cleaned: whitespace collapsed; markdown bold, one final `.`, `,` or `;` (not an ellipsis) and
`$...$` / `\\(...\\)` / `\\[...\\]` / a box around the whole answer removed.
An answer that still holds math delimiters (the Minerva line "The final answer is $\\frac{14}{3}$.
I hope it is correct.", `\\boxed{The answer is $\\frac13.$}`) is read as its math spans: each
span is an answer, so one span is the answer and two different spans are two answers; the words
around the spans are read only when they are neutral (a lead-in such as "the final answer is",
"and"/"or" between spans, closing words and units after them: math.extraction_guard), so
`not $5$`, `$5$?` and `$5$ or 6` are unreadable, as are delimiters that do not pair up. Math
mode closed and reopened around "and"/"or" alone (`\\boxed{12 $ and $13}`) is the list
`12 \\text{ and } 13`.
All answers found must match the gold, so hedging (`\\boxed{1} or \\boxed{2}`) scores 0 while
repeating one answer scores like saying it once. No answer, an empty answer, more than
`max_answers` distinct answers, an answer longer than `max_answer_chars`, or one with a non-ASCII
digit (full-width `５`, Arabic-Indic `٥`, mathematical bold `𝟓`) is a `problem` (reward 0).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from rlvr.markup import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN
from rlvr.rewards.math.extraction_guard import fold, lead_in_hedge, neutral_pieces, tail_reading
from rlvr.rewards.math.notation import map_relations, read_bases, read_notation

# Greedy `(.+)$`, not a lazy group before `[ \t]*$`: a lazy one is quadratic on a long line.
DEFAULT_ANSWER_PATTERN = r"(?im)^[ \t]*(?:\*\*)?(?:final[ \t]+)?answer(?:\*\*)?[ \t]*:(.+)$"
NO_ANSWER = "no final answer"
_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# Inside a box: a box command, a backslash before one (`\\\\boxed` is still read as a box), an
# escape (`\\{` is no brace), a brace.
_BOX_SCAN = re.compile(
    r"\\(?:boxed|fbox)(?![A-Za-z])|\\(?=\\(?:boxed|fbox)(?![A-Za-z]))|\\.|[{}]", re.DOTALL
)
_SPACE = re.compile(r"\s*")
MAX_BOX_DEPTH = 8
_BOX_TOKEN = re.compile(r"[^\s$]*")
_NESTED_BOX_TOKEN = re.compile(r"[^\s${}]*")
_DELIMITER = re.compile(r"(?<!\\)\$\$|(?<!\\)\$|\\[()\[\]]")
_CLOSER = {"$$": "$$", "$": "$", "\\(": "\\)", "\\[": "\\]"}
_MATH_OUTSIDE = re.compile(r"[0-9]|\\[A-Za-z]")  # around the spans: a digit or a command
_FINAL_PUNCTUATION = re.compile(r"\s*[.,;]$")
_CONNECTOR = re.compile(r"\s*(and|or)\s*")
_DOLLAR_CONNECTOR = re.compile(r"(?<!\\)\$\s*(and|or)\s*(?<!\\)\$")
_RESTATED = re.compile(
    r"(?i)(?:\b(?:answers?|values?|results?|solutions?)\b(?:\*\*)?\s*"
    r"(?:is|was|will be|would be|should be|must be|=|:)(?:\*\*)?"
    r"|(?<![A-Za-z])(?:or|maybe|possibly|perhaps|alternatively|otherwise)(?![A-Za-z]))\s*"
    r"(?:(?:actually|really|therefore|thus|then|now|instead|rather|probably|likely|clearly|maybe"
    r"|perhaps|possibly|definitely|surely|still|also|in fact)\b[\s,]*)*"
)
_MATH_START = re.compile(r"[-+(\[]|\.?\d|\$|\\[A-Za-z(\[{]")
_SPAN_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
MINERVA_OPEN, MINERVA_CLOSE = "final answer is", "i hope it is correct"


@dataclass(frozen=True)
class Extraction:
    """The distinct final answers of a completion, or why it has none (`problem`)."""

    answers: tuple[str, ...] = ()
    problem: str = ""


def box_frames(text: str) -> list[tuple[int, int, int, int, int]] | None:
    """Every `\\boxed`/`\\fbox` of `text` at any depth, in the order they start: (start, content
    start, content end, end, index of the enclosing box or -1); None if one is not closed.

    One pass: outside boxes a regex jumps to the next box command, inside them a brace stack
    follows `{`, `}` and escapes, so the cost is linear in the text however the boxes nest (a
    search for each box's closing brace was quadratic on `\\fbox{` repeated). `\\boxed 5` (no
    braces) takes the run of non-space characters after it, up to a brace inside a box."""
    frames: list[list[int]] = []
    braces: list[int] = []  # inside boxes: for each open `{`, the box it opens or -1
    open_boxes: list[int] = []
    pos = 0
    while True:
        m = (_BOX_SCAN if open_boxes else _BOX).search(text, pos)
        if m is None:
            break
        pos, token = m.end(), m.group()
        if token == "{":
            braces.append(-1)
        elif token == "}":
            if braces and (k := braces.pop()) >= 0:
                frames[k][2:4] = [m.start(), m.end()]
                open_boxes.pop()
        elif len(token) > 2:  # a box command
            parent = open_boxes[-1] if open_boxes else -1
            i = _SPACE.match(text, pos).end()  # type: ignore[union-attr]
            if text.startswith("{", i):
                frames.append([m.start(), i + 1, -1, -1, parent])
                braces.append(len(frames) - 1)
                open_boxes.append(len(frames) - 1)
                pos = i + 1
            else:
                run = (_NESTED_BOX_TOKEN if open_boxes else _BOX_TOKEN).match(text, i)
                pos = run.end()  # type: ignore[union-attr]
                frames.append([m.start(), i, pos, pos, parent])
    if open_boxes:
        return None
    return [tuple(f) for f in frames]  # type: ignore[misc]


def box_spans(text: str) -> list[tuple[int, int, int, int]] | None:
    """(start, content start, content end, end) of every top-level `\\boxed`/`\\fbox` in `text`;
    None if one is not closed. `\\boxed 5` (no braces) takes the run of non-space characters."""
    frames = box_frames(text)
    return None if frames is None else [f[:4] for f in frames if f[4] < 0]


def boxed_contents(text: str) -> list[str] | None:
    """Contents of every top-level `\\boxed`/`\\fbox` in `text`; None if one is not closed."""
    spans = box_spans(text)
    return None if spans is None else [text[lo:hi] for _, lo, hi, _ in spans]


def shown_answers(answer: str) -> list[str] | None:
    """A raw answer as it is shown, with the frame of every box inside it removed, then what
    each of those boxes shows, at any depth: `\\text{6 } \\boxed{5}` -> [`\\text{6 } 5`, `5`].
    Nested boxes are several answers (a box inside a box states its content again), so hedging
    by nesting scores 0 and `\\boxed{\\boxed{5}}` is 5 said twice. None for an unclosed box or
    boxes nested deeper than MAX_BOX_DEPTH (no answer nests so; the bound keeps this linear)."""
    frames = box_frames(answer)
    if frames is None:
        return None
    if not frames:
        return [answer]
    depth: list[int] = []
    for f in frames:
        depth.append(depth[f[4]] + 1 if f[4] >= 0 else 1)
        if depth[-1] > MAX_BOX_DEPTH:
            return None

    def shown(lo: int, hi: int, first: int) -> str:
        cut = []  # the frames of the boxes inside [lo, hi): the frames after `first` in order
        for start, c_lo, c_hi, end, _ in frames[first:]:
            if start >= hi:
                break
            cut += [(start, c_lo), (c_hi, end)]
        out, pos = [], lo
        for a, b in sorted(cut):
            out.append(answer[pos:a])
            pos = b
        out.append(answer[pos:hi])
        return "".join(out)

    return [shown(0, len(answer), 0)] + [
        shown(c_lo, c_hi, k + 1) for k, (_, c_lo, c_hi, _, _) in enumerate(frames)
    ]


def answer_tags(text: str) -> list[str] | None:
    """Contents of the `<answer>` tags of `text`; None if they are unbalanced or nested.

    A scan with str.find, not a lazy regex, which is quadratic on many unclosed tags."""
    out: list[str] = []
    pos = 0
    while True:
        opened, closed = text.find(ANSWER_OPEN, pos), text.find(ANSWER_CLOSE, pos)
        if opened < 0:
            return out if closed < 0 else None
        end = text.find(ANSWER_CLOSE, opened + len(ANSWER_OPEN))
        if closed < opened or end < 0:
            return None
        content = text[opened + len(ANSWER_OPEN) : end]
        if ANSWER_OPEN in content:
            return None
        out.append(content)
        pos = end + len(ANSWER_CLOSE)


def minerva_answers(text: str) -> list[str]:
    """X of every line of `text` that closes with Minerva's "The final answer is X. I hope it is
    correct." (ASCII case-insensitive; the last "final answer is" before the closing words).
    str.rfind per line, linear in the text; `fold` keeps the offsets (`str.lower` does not: `İ`
    becomes two characters)."""
    out = []
    for line in text.splitlines():
        low = fold(line)
        hope = low.rfind(MINERVA_CLOSE)
        start = low.rfind(MINERVA_OPEN, 0, hope) if hope > 0 else -1
        if start >= 0:
            out.append(line[start + len(MINERVA_OPEN) : hope].strip())
    return out


def _outside_tags(text: str) -> str:
    out, pos = [], 0
    while (opened := text.find(ANSWER_OPEN, pos)) >= 0:
        out.append(text[pos:opened])
        pos = text.find(ANSWER_CLOSE, opened) + len(ANSWER_CLOSE)
    return " ".join(out + [text[pos:]])


def strip_final_punctuation(s: str) -> str:
    """`\\frac{1}{3},` -> `\\frac{1}{3}`, `5.` -> `5`; an ellipsis (`1, 2, ...`) and a LaTeX
    space (`5\\,`) stay."""
    m = _FINAL_PUNCTUATION.search(s)
    if m and not s[: m.start()].endswith((".", "\\")):
        return s[: m.start()].strip()
    return s


def clean_answer(answer: str) -> str:
    """Whitespace collapsed; markdown bold, one final punctuation mark, $...$ / \\(...\\) and a
    box around the whole answer removed (a loop: a nest of boxes costs no recursion)."""
    s = answer
    while True:
        s = re.sub(r"\s+", " ", s).strip()
        s = strip_final_punctuation(s.removeprefix("**").removesuffix("**").strip())
        found = math_spans(s)
        if found and len(found[0]) == 1 and not found[1].strip():  # "$...$", not "$5$ or $6$"
            s = strip_final_punctuation(found[0][0].strip())
        inner_boxes = boxed_contents(s)
        if not (
            inner_boxes
            and len(inner_boxes) == 1
            and re.fullmatch(r"\\(?:boxed|fbox)\s*\{.*\}", s, re.DOTALL)
        ):
            return s
        s = inner_boxes[0]


def math_spans(text: str) -> tuple[list[str], str] | None:
    """(contents of the `$...$`, `$$...$$`, `\\(...\\)`, `\\[...\\]` spans of `text`, the text
    outside them); None when the delimiters do not pair up (no nesting, no mixing)."""
    found = span_pieces(text)
    return None if found is None else (found[0], " ".join(found[1]))


def span_pieces(text: str) -> tuple[list[str], list[str]] | None:
    """(the math spans of `text`, the texts before, between and after them: one more than the
    spans); None when the delimiters do not pair up."""
    spans, outside, pos = [], [], 0
    delimiters = list(_DELIMITER.finditer(text))
    for k in range(0, len(delimiters), 2):
        opening = delimiters[k]
        closer = _CLOSER.get(opening.group())
        if closer is None or k + 1 >= len(delimiters) or delimiters[k + 1].group() != closer:
            return None
        closing = delimiters[k + 1]
        outside.append(text[pos : opening.start()])
        spans.append(text[opening.end() : closing.start()])
        pos = closing.end()
    outside.append(text[pos:])
    return spans, outside


def read_answers(raw: list[str], max_answers: int, max_answer_chars: int) -> Extraction:
    """Clean the raw answers found (boxes, tags, lines), read the math spans of those that hold
    some, and check the limits; the rules are in the module docstring. One raw answer at a time,
    stopping at more than `max_answers` different answers: 50,000 boxes are not all read."""
    if not raw:
        return Extraction(problem=NO_ANSWER)
    # Length first: only bounded text reaches the cleaning.
    if any(len(a) > max_answer_chars for a in raw):
        return Extraction(problem=f"answer longer than {max_answer_chars} characters")
    answers: dict[str, None] = {}  # distinct, in order
    seen: set[str] = set()
    for raw_answer in dict.fromkeys(raw):
        shown = shown_answers(raw_answer)
        if shown is None:
            return Extraction((raw_answer,), "unclosed or too deeply nested \\boxed")
        for a in map(clean_answer, dict.fromkeys(shown)):
            if a in seen:
                continue
            seen.add(a)
            found = span_pieces(a)
            if found is None:
                return Extraction((a,), "unbalanced math delimiters in one answer")
            spans, pieces = found
            outside = " ".join(pieces)
            if spans and _MATH_OUTSIDE.search(outside) and all(map(_CONNECTOR.fullmatch, spans)):
                # "12 $ and $13": math mode closed and reopened around a connector: one list
                a, spans = _DOLLAR_CONNECTOR.sub(r" \\text{ \1 } ", a), []
            if spans and _MATH_OUTSIDE.search(outside):  # "$5$ or 6", "$x$ is 34"
                return Extraction((a,), "several expressions in one answer")
            if spans and not neutral_pieces(pieces):  # "not $5$", "$5$ is wrong", "$5$?"
                return Extraction((a,), "words around the answer that are not neutral")
            answers.update(dict.fromkeys(map(clean_answer, spans) if spans else [a]))
            if len(answers) > max_answers:
                return checked_answers(list(answers), max_answers)
    return checked_answers(list(answers), max_answers)


def checked_answers(answers: list[str], max_answers: int) -> Extraction:
    """The distinct answers, or the problem with them: empty, too many, a non-ASCII digit."""
    distinct = tuple(dict.fromkeys(answers))
    if "" in distinct:
        return Extraction(distinct, "empty answer")
    if len(distinct) > max_answers:
        return Extraction(distinct[:max_answers], f"more than {max_answers} different answers")
    for a in distinct:
        if any(unicodedata.category(c) == "Nd" and not c.isascii() for c in a):
            return Extraction(distinct, "non-ASCII digit")
    return Extraction(distinct)


def final_region(completion: str) -> str | None:
    """The text after the last `</think>` (all of it without one); None if a `<think>` is left
    open there (a truncated trace has no answer)."""
    close = completion.rfind(THINK_CLOSE)
    region = completion[close + len(THINK_CLOSE) :] if close >= 0 else completion
    return None if THINK_OPEN in region else region


def extract_answers(
    completion: str,
    answer_pattern: str | None = DEFAULT_ANSWER_PATTERN,
    max_answers: int = 4,
    max_answer_chars: int = 1000,
) -> Extraction:
    """The final answers of a completion (rules in the module docstring)."""
    region = final_region(completion)
    if region is None:
        return Extraction(problem="unclosed <think>")
    raw: list[str] = []
    ends = []  # where the last marker of each kind that was read ends
    tags = answer_tags(region)
    if tags is None:
        return Extraction(problem="unbalanced <answer> tags")
    for content in tags:
        spans = box_spans(content)
        if spans is None:
            return Extraction(problem="unclosed \\boxed")
        if hedge := _lead_in_problem(content, spans):
            return Extraction(problem=hedge)
        raw.extend([content[lo:hi] for _, lo, hi, _ in spans] if spans else [content])
    if tags:
        ends.append(region.rfind(ANSWER_CLOSE) + len(ANSWER_CLOSE))
    outside = _outside_tags(region) if tags else region
    if minerva := minerva_answers(outside):
        raw.extend(minerva)
        ends.append(fold(region).rfind(MINERVA_CLOSE) + len(MINERVA_CLOSE))
    elif (spans := box_spans(outside)) is None:
        return Extraction(problem="unclosed \\boxed")
    else:
        if hedge := _lead_in_problem(outside, spans):
            return Extraction(problem=hedge)
        raw.extend(outside[lo:hi] for _, lo, hi, _ in spans)
        if spans := spans if outside is region else box_spans(region):
            ends.append(spans[-1][3])
    if not raw and not tags and answer_pattern:
        lines = list(re.finditer(answer_pattern, region))
        raw.extend(m.group(1) for m in lines)
        ends.extend(m.end() for m in lines[-1:])
    if ends:
        after = region[max(ends) :]
        if minerva:  # a box after the last Minerva line is no intermediate result
            raw.extend(boxed_contents(after) or [])
        if hedge := read_after(after, raw, max_answers, max_answer_chars):
            return Extraction(read_answers(raw, max_answers, max_answer_chars).answers, hedge)
    return read_answers(raw, max_answers, max_answer_chars)


def read_after(after: str, raw: list[str], max_answers: int, max_answer_chars: int) -> str:
    """Add to `raw` the answers that `after` (the text after the final answer) states again:
    restatements ("the answer is $(1, 2)$") and every number (rlvr.rewards.math.extraction_guard);
    the hedge found there, or ''."""
    raw.extend(restated_answers(after, max_answers, max_answer_chars))
    values, hedge = tail_reading(after, max_answers)
    raw.extend(values)
    return hedge


_CLAUSE_START = re.compile(r"[,;:.!?\n][^,;:.!?\n]*\Z")
_LIST_CONNECTOR = re.compile(r"\s*(?:or|and)\s*\Z", re.IGNORECASE)


def _lead_in_problem(text: str, spans: list[tuple[int, int, int, int]]) -> str:
    """A negation or qualifier in the clause before a box (`not \\boxed{5}`, `probably
    \\boxed{5}`), as a problem, or ''. The clause starts after the last `,;:.!?` or newline (at
    most 100 characters back) or at the previous box, after which "or"/"and" alone are list
    connectors (`\\boxed{1} or \\boxed{2}`: two answers, each compared)."""
    prev = 0
    for start, _, _, end in spans:
        lo = max(prev, start - 100)
        m = _CLAUSE_START.search(text, lo, start)
        clause = text[m.start() + 1 if m else lo : start]
        if not (prev and not m and lo == prev and _LIST_CONNECTOR.fullmatch(clause)):
            if hedge := lead_in_hedge(clause):
                return f"hedge before the answer: {hedge!r}"
        prev = end
    return ""


def restated_answers(text: str, max_answers: int, max_answer_chars: int) -> list[str]:
    """The answers `text` (what follows the last box, tag or answer line) states again: after
    each "answer is", "answer:", "answer =" ("Actually the answer is 6") or hedge word ("or 6",
    "maybe 6"), the math there: a `$...$`, `\\(...\\)` or `\\[...\\]` span, or a run of
    characters up to a space outside brackets that begins like math (a digit, a sign, a bracket
    or a LaTeX command; "the answer is correct" restates nothing). Every answer must match, so
    restating another value is a hedge, and restating the same one is harmless."""
    out: list[str] = []
    for m in _RESTATED.finditer(text):
        i = m.end()
        if not _MATH_START.match(text, i):
            continue
        for opening, closing in _SPAN_DELIMITERS:
            if text.startswith(opening, i):
                close = text.find(closing, i + len(opening), i + max_answer_chars + 2)
                j = len(text) if close < 0 else close + len(closing)
                break
        else:
            depth, j = 0, i
            while j < len(text) and j - i <= max_answer_chars:
                depth += (text[j] in "([{") - (text[j] in ")]}")
                if depth < 0 or depth == 0 and text[j].isspace():
                    break
                j += 1
        out.append(text[i:j])
        if len(out) > max_answers:
            break
    return out


# -- notation (both sides, in the worker) ------------------------------------------------------

# A leading zero group is never a thousands group: "0,111" is never 111.
_SEPARATOR = r"(?:,|\s?\{\s?,\s?\}\s?|\\,|\\ |\\!| |\u2009)"
_THOUSANDS = re.compile(rf"[+-]?[1-9]\d{{0,2}}(?:{_SEPARATOR}\d{{3}})+(?:\.\d+)?")
# Two numbers side by side with only spacing between (`2 \, 3`, `10 \quad -5`, a line break):
# neither a product nor a list, and math-verify sums them. Thousands groups are read first.
_JUXTAPOSED = re.compile(
    r"(?<![_^\d.])\d+(?:\.\d+)?(?:\s|\\[,;:!> ]|\\(?:q?quad|thinspace|medspace|thickspace"
    r"|enspace|negthinspace|nobreakspace)(?![A-Za-z])|~)+[-+]?\.?\d"
)
_PERCENT_WORD = re.compile(
    r"(?<=[\d})])\s*(?:\\(?:text|textnormal|textrm|mathrm|mbox)\s*\{\s*)?"
    r"(?:per\s?cent(?:age)?|pct)(?![A-Za-z])(?:\s*\})?",
    re.IGNORECASE,
)
_SCIENTIFIC = re.compile(r"([+-]?\d+(?:\.\d+)?)[eE]([+-]?\d+)")
_WORDS = re.compile(r"[A-Za-z]{3,}(?: [A-Za-z]+)*")
_PLAIN = [
    (re.compile(r"\*\*"), "^"),
    (re.compile(r"(?<![\\A-Za-z])sqrt\s*\(([^()]*)\)"), r"\\sqrt{\1}"),
    (re.compile(r"(?<![\\A-Za-z])sqrt(?![A-Za-z])"), r"\\sqrt"),
    (re.compile(r"(?<![\\A-Za-z])pi(?![A-Za-z])"), r"\\pi"),
    (re.compile(r"(?<![\\A-Za-z])(?:infinity|inf)(?![A-Za-z])"), r"\\infty"),
]
_UNICODE = {
    "π": "\\pi ",
    "∞": "\\infty ",
    "√": "\\sqrt ",
    "−": "-",
    "×": "\\times ",
    "·": "\\cdot ",
}
_UNICODE.update({"≤": "\\le ", "≥": "\\ge ", "≠": "\\ne "})
UNREADABLE = ""
_PLAIN_WORDS = {"sqrt", "pi", "inf", "infinity", "sin", "cos", "tan", "log", "ln", "exp"}


_DECIMAL = re.compile(r"[+-]?\d+\.\d+")
_DECIMAL_COMMA = re.compile(r"([+-]?\d+)(?:,|\{,\})(\d+)")


def read_decimal_comma(pred: str, gold: str) -> str:
    """A normalised prediction `2,74` (or `2{,}74`) is the decimal 2.74 when the normalised gold
    is one decimal number written with a point; otherwise the prediction is returned unchanged.

    Read in the light of the gold: where the gold is one decimal, a pair is the wrong form and
    would score 0 anyway, so `d,d` can only mean the decimal comma. A comma before a group of
    three digits has already been read as a thousands separator by normalize(), and that reading
    stands (`2,740` is 2740). A gold's own comma is never a decimal comma (gold `1,22` is the
    pair, and `1.22` does not match it): the gold is the reference."""
    if _DECIMAL.fullmatch(gold) and (m := _DECIMAL_COMMA.fullmatch(pred)):
        return f"{m.group(1)}.{m.group(2)}"
    return pred


def normalize(text: str, reference: bool = False) -> str:
    """Notation-only rewriting applied to gold and prediction alike (the rules are in
    rlvr.rewards.math's docstring, "Normalisation", and rlvr.rewards.math.notation); UNREADABLE
    (empty, which matches nothing) for an answer that states no readable value: a hedge inside
    it, hidden content, a numeral its base cannot have. A `reference` (the gold) is trusted: where
    its notation cannot be read that way (a whole solution in prose), it is left to math-verify
    as it is."""
    s = clean_answer(text)
    s = _PERCENT_WORD.sub("%", s)
    s = s.replace("\\%", "").replace("%", "").strip()
    for k, v in _UNICODE.items():
        s = s.replace(k, v)
    s = map_relations(s)
    read = read_notation(s)  # text, hidden content, bases (math.notation)
    if read is None and reference:
        read = read_bases(s)  # a gold in prose still has its numerals read
    if read is None:
        return UNREADABLE
    s = read.strip()
    if _THOUSANDS.fullmatch(s):
        s = re.sub(_SEPARATOR, "", s)
    elif not reference and _JUXTAPOSED.search(s):
        return UNREADABLE
    if m := _SCIENTIFIC.fullmatch(s):
        return f"{m.group(1)}\\times 10^{{{m.group(2)}}}"
    if _WORDS.fullmatch(s) and s.lower() not in _PLAIN_WORDS:
        return f"\\text{{{s}}}"
    for pattern, repl in _PLAIN:
        s = pattern.sub(repl, s)
    return s.strip()
