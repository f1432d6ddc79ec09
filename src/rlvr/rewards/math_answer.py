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
4. Otherwise `\\boxed{...}` / `\\fbox{...}` anywhere else (nested braces are matched; `\\boxed 5`
   takes the run of non-space characters after it). An unclosed box means no answer.
5. Only if there is no tag, Minerva line or box: lines matching `answer_pattern` (default:
   "Answer: ...", "Final answer: ...", case-insensitive); None turns this off.
6. After the last tag, box, Minerva line or answer line that was read, an answer stated again is
   one more answer: the math after "answer is", "answer:", "or", "maybe" ("\\boxed{5} Actually the
   answer is 6", "\\boxed{5} or 6"), and a box after the last Minerva line.
A box inside a box is one more answer (`shown_answers`): `\\boxed{\\text{6 } \\boxed{5}}` states
`\\text{6 } 5` and 5, a hedge; `\\boxed{\\boxed{5}}` states 5 twice. Each answer is then
cleaned: whitespace collapsed; markdown bold, one final `.`, `,` or `;` (not an ellipsis) and
`$...$` / `\\(...\\)` / `\\[...\\]` / a box around the whole answer removed.
An answer that still holds math delimiters (the Minerva line "The final answer is $\\frac{14}{3}$.
I hope it is correct.", `\\boxed{The answer is $\\frac13.$}`) is read as its math spans: each
span is an answer, so one span is the answer and two different spans are two answers; the words
around the spans are dropped, but words around them that hold a digit or a LaTeX command
(`$5$ or 6`) make the answer unreadable, as do delimiters that do not pair up. Math mode closed
and reopened around "and"/"or" alone (`\\boxed{12 $ and $13}`) is the list `12 \\text{ and } 13`.
All answers found must match the gold, so hedging (`\\boxed{1} or \\boxed{2}`) scores 0 while
repeating one answer scores like saying it once. No answer, an empty answer, more than
`max_answers` distinct answers, an answer longer than `max_answer_chars`, or one with a non-ASCII
digit (full-width `５`, Arabic-Indic `٥`, mathematical bold `𝟓`) is a `problem` (reward 0).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from rlvr.rewards.math_notation import closing_brace, map_relations, read_bases, read_notation

# Greedy `(.+)$`, not a lazy group before `[ \t]*$`: a lazy one is quadratic on a long line.
DEFAULT_ANSWER_PATTERN = r"(?im)^[ \t]*(?:\*\*)?(?:final[ \t]+)?answer(?:\*\*)?[ \t]*:(.+)$"
NO_ANSWER = "no final answer"
_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BOX_TOKEN = re.compile(r"[^\s$]*")
_NESTED_BOX_TOKEN = re.compile(r"[^\s${}]*")
_DELIMITER = re.compile(r"(?<!\\)\$\$|(?<!\\)\$|\\[()\[\]]")
_CLOSER = {"$$": "$$", "$": "$", "\\(": "\\)", "\\[": "\\]"}
_MATH_OUTSIDE = re.compile(r"[0-9]|\\[A-Za-z]")  # around the spans: a digit or a command
_FINAL_PUNCTUATION = re.compile(r"\s*[.,;]$")
_CONNECTOR = re.compile(r"\s*(and|or)\s*")
_DOLLAR_CONNECTOR = re.compile(r"(?<!\\)\$\s*(and|or)\s*(?<!\\)\$")
_RESTATED = re.compile(
    r"(?i)(?:\banswers?\b(?:\*\*)?\s*(?:is|was|will be|would be|should be|must be|=|:)(?:\*\*)?"
    r"|(?<![A-Za-z])(?:or|maybe|possibly|perhaps|alternatively|otherwise)(?![A-Za-z]))\s*"
    r"(?:(?:actually|really|therefore|thus|then|now|instead|rather|probably|likely|clearly|maybe"
    r"|perhaps|possibly|definitely|surely|still|also|in fact)\b[\s,]*)*"
)
_MATH_START = re.compile(r"[-+(\[]|\.?\d|\$|\\[A-Za-z(\[{]")
_SPAN_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
TAG_OPEN, TAG_CLOSE = "<answer>", "</answer>"
MINERVA_OPEN, MINERVA_CLOSE = "final answer is", "i hope it is correct"
THINK_CLOSE, THINK_OPEN = "</think>", "<think>"


@dataclass(frozen=True)
class Extraction:
    """The distinct final answers of a completion, or why it has none (`problem`)."""

    answers: tuple[str, ...] = ()
    problem: str = ""


def box_spans(text: str) -> list[tuple[int, int, int, int]] | None:
    """(start, content start, content end, end) of every top-level `\\boxed`/`\\fbox` in `text`;
    None if one is not closed. `\\boxed 5` (no braces) takes the run of non-space characters."""
    out, end = [], 0
    for m in _BOX.finditer(text):
        if m.start() < end:  # a box nested in the previous one is part of its content
            continue
        i = m.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i < len(text) and text[i] == "{":
            close = closing_brace(text, i)
            if close < 0:
                return None
            out.append((m.start(), i + 1, close, close + 1))
            end = close + 1
        else:
            token = _BOX_TOKEN.match(text, i).group(0)  # type: ignore[union-attr]
            end = i + len(token)
            out.append((m.start(), i, end, end))
    return out


def boxed_contents(text: str) -> list[str] | None:
    """Contents of every top-level `\\boxed`/`\\fbox` in `text`; None if one is not closed."""
    spans = box_spans(text)
    return None if spans is None else [text[lo:hi] for _, lo, hi, _ in spans]


def shown_answers(answer: str) -> list[str] | None:
    """A raw answer as it is shown, with the frame of every box inside it removed, then what
    each of those boxes shows, at any depth: `\\text{6 } \\boxed{5}` -> [`\\text{6 } 5`, `5`].
    Nested boxes are several answers (a box inside a box states its content again), so hedging
    by nesting scores 0 and `\\boxed{\\boxed{5}}` is 5 said twice. None for an unclosed box.
    Iterative, so a deep nest costs no recursion; the caller bounds the answer's length."""
    frames = []  # (start, content start, content end, end) of every box, at any depth
    for m in _BOX.finditer(answer):
        i = m.end()
        while i < len(answer) and answer[i] in " \t":
            i += 1
        if answer.startswith("{", i):
            close = closing_brace(answer, i)
            if close < 0:
                return None
            frames.append((m.start(), i + 1, close, close + 1))
        else:  # `\boxed 5`: inside a group the token ends at a brace
            token = _NESTED_BOX_TOKEN.match(answer, i).group(0)  # type: ignore[union-attr]
            frames.append((m.start(), i, i + len(token), i + len(token)))
    if not frames:
        return [answer]

    def shown(lo: int, hi: int) -> str:
        cut = sorted(
            (a, b)
            for start, c_lo, c_hi, end in frames
            if lo <= start and end <= hi
            for a, b in ((start, c_lo), (c_hi, end))
        )
        out, pos = [], lo
        for a, b in cut:
            out.append(answer[pos:a])
            pos = b
        out.append(answer[pos:hi])
        return "".join(out)

    return [shown(0, len(answer))] + [shown(c_lo, c_hi) for _, c_lo, c_hi, _ in frames]


def answer_tags(text: str) -> list[str] | None:
    """Contents of the `<answer>` tags of `text`; None if they are unbalanced or nested.

    A scan with str.find, not a lazy regex, which is quadratic on many unclosed tags."""
    out, pos = [], 0
    while True:
        opened, closed = text.find(TAG_OPEN, pos), text.find(TAG_CLOSE, pos)
        if opened < 0:
            return out if closed < 0 else None
        end = text.find(TAG_CLOSE, opened + len(TAG_OPEN))
        if closed < opened or end < 0:
            return None
        content = text[opened + len(TAG_OPEN) : end]
        if TAG_OPEN in content:
            return None
        out.append(content)
        pos = end + len(TAG_CLOSE)


def minerva_answers(text: str) -> list[str]:
    """X of every line of `text` that closes with Minerva's "The final answer is X. I hope it is
    correct." (case-insensitive; the last "final answer is" before the closing words). str.rfind
    per line, linear in the text."""
    out = []
    for line in text.splitlines():
        low = line.lower()
        hope = low.rfind(MINERVA_CLOSE)
        start = low.rfind(MINERVA_OPEN, 0, hope) if hope > 0 else -1
        if start >= 0:
            out.append(line[start + len(MINERVA_OPEN) : hope].strip())
    return out


def _outside_tags(text: str) -> str:
    out, pos = [], 0
    while (opened := text.find(TAG_OPEN, pos)) >= 0:
        out.append(text[pos:opened])
        pos = text.find(TAG_CLOSE, opened) + len(TAG_CLOSE)
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
    box around the whole answer removed."""
    s = re.sub(r"\s+", " ", answer).strip()
    s = strip_final_punctuation(s.removeprefix("**").removesuffix("**").strip())
    found = math_spans(s)
    if found and len(found[0]) == 1 and not found[1].strip():  # "$...$", not "$5$ or $6$"
        s = strip_final_punctuation(found[0][0].strip())
    inner_boxes = boxed_contents(s)
    if (
        inner_boxes
        and len(inner_boxes) == 1
        and re.fullmatch(r"\\(?:boxed|fbox)\s*\{.*\}", s, re.DOTALL)
    ):
        return clean_answer(inner_boxes[0])
    return s


def math_spans(text: str) -> tuple[list[str], str] | None:
    """(contents of the `$...$`, `$$...$$`, `\\(...\\)`, `\\[...\\]` spans of `text`, the text
    outside them); None when the delimiters do not pair up (no nesting, no mixing)."""
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
    return spans, " ".join(outside)


def read_answers(raw: list[str], max_answers: int, max_answer_chars: int) -> Extraction:
    """Clean the raw answers found (boxes, tags, lines), read the math spans of those that hold
    some, and check the limits; the rules are in the module docstring."""
    if not raw:
        return Extraction(problem=NO_ANSWER)
    # Length first: cleaning recurses into nested boxes, so only bounded text reaches it.
    if any(len(a) > max_answer_chars for a in raw):
        return Extraction(problem=f"answer longer than {max_answer_chars} characters")
    expanded: list[str] = []
    for a in dict.fromkeys(raw):
        shown = shown_answers(a)
        if shown is None:
            return Extraction((a,), "unclosed \\boxed")
        expanded.extend(shown)
    answers: dict[str, None] = {}  # distinct, in order
    for a in map(clean_answer, dict.fromkeys(expanded)):
        found = math_spans(a)
        if found is None:
            return Extraction((a,), "unbalanced math delimiters in one answer")
        spans, outside = found
        if spans and _MATH_OUTSIDE.search(outside) and all(map(_CONNECTOR.fullmatch, spans)):
            # "12 $ and $13": math mode closed and reopened around a connector: one list
            a, spans = _DOLLAR_CONNECTOR.sub(r" \\text{ \1 } ", a), []
        if spans and _MATH_OUTSIDE.search(outside):  # "$5$ or 6", "$x$ is 34"
            return Extraction((a,), "several expressions in one answer")
        answers.update(dict.fromkeys(map(clean_answer, spans) if spans else [a]))
        if len(answers) > max_answers:  # 50,000 boxes are not all read
            break
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
        boxes = boxed_contents(content)
        if boxes is None:
            return Extraction(problem="unclosed \\boxed")
        raw.extend(boxes if boxes else [content])
    if tags:
        ends.append(region.rfind(TAG_CLOSE) + len(TAG_CLOSE))
    outside = _outside_tags(region) if tags else region
    if minerva := minerva_answers(outside):
        raw.extend(minerva)
        ends.append(region.lower().rfind(MINERVA_CLOSE) + len(MINERVA_CLOSE))
    elif (boxes := boxed_contents(outside)) is None:
        return Extraction(problem="unclosed \\boxed")
    else:
        raw.extend(boxes)
        if spans := box_spans(region):
            ends.append(spans[-1][3])
    if not raw and not tags and answer_pattern:
        lines = list(re.finditer(answer_pattern, region))
        raw.extend(m.group(1) for m in lines)
        ends.extend(m.end() for m in lines[-1:])
    if ends:
        after = region[max(ends) :]
        if minerva:  # a box after the last Minerva line is no intermediate result
            raw.extend(boxed_contents(after) or [])
        raw.extend(restated_answers(after, max_answers, max_answer_chars))
    return read_answers(raw, max_answers, max_answer_chars)


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
    rlvr.rewards.math's docstring, "Normalisation", and rlvr.rewards.math_notation); UNREADABLE
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
    read = read_notation(s)  # text, hidden content, bases (math_notation)
    if read is None and reference:
        read = read_bases(s)  # a gold in prose still has its numerals read
    if read is None:
        return UNREADABLE
    s = read.strip()
    if _THOUSANDS.fullmatch(s):
        s = re.sub(_SEPARATOR, "", s)
    if m := _SCIENTIFIC.fullmatch(s):
        return f"{m.group(1)}\\times 10^{{{m.group(2)}}}"
    if _WORDS.fullmatch(s) and s.lower() not in _PLAIN_WORDS:
        return f"\\text{{{s}}}"
    for pattern, repl in _PLAIN:
        s = pattern.sub(repl, s)
    return s.strip()
