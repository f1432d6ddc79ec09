"""The lenient reading of the math verifier: the answer a grader would read from any completion.

`MathVerifier(lenient=True)` ("math_lenient" in the registry) is for evaluating models that were
never taught the answer format (a base model's baseline); RL rewards use the strict reading,
which teaches the format. Both read after the last `</think>` (an unclosed `<think>` has no
answer) and compare answers the same way; the lenient reading finds them, in this order:
1-3. `<answer>` tags, Minerva's closing line ("The final answer is X. I hope it is correct.",
   read before any boxes ahead of it), `\\boxed{}` / `\\fbox{}`: as the strict reading does
   (`extract_answers`; every box is an answer).
4. "Answer: ..." lines (the strict `answer_pattern`): each line as the strict reading takes it
   when that is math (`Answer: 2^{10}`, no word of two letters or more outside LaTeX commands),
   else math-verify's extraction from it ("Answer: The largest $n$ is 34." reads 34, "Answer: the
   value is 7" reads 7), else the strict reading (`Answer: Monday`); an answer restated after the
   last line ("Actually, the answer is 6") is one more, as in the strict reading.
5. Otherwise the whole text, by math-verify's extraction: its last math expression.
math-verify's extraction is its own regexes in its own order, with both of its targets (LaTeX
and plain numbers or expressions): patterns are tried by priority ("final answer ... is",
"answer: ...", "answer ...", then any `$...$`, `\\(...\\)`, `\\[...\\]`, `$$...$$` or number);
within the first priority that matches, the match ending last (then starting first) is the answer.
Hedging still scores 0: every math span of that match is an answer (math-verify itself joins
`$a$, $b$ and $c$` into one match), and so is every plain expression joined to it by "and",
"or" (also "o", "oder", "ou", ...) or a comma alone (`5 or 6` is two answers); several Minerva
lines or answer lines are several answers. A hedge around the chosen answer scores 0
(`hedged_in_prose`): a negation, qualifier or "or" among the words right before it ("not 5", "no
less than 5", "either 5 or 6", "nicht $5$"), a hedge word in the rest of its sentence ("5 give or
take", "5 (approx.)"), a sign ("~5", "5+", "5-ish", "5?"), and second thoughts in the sentence
after it ("5. Hmm, maybe 6"). What rlvr changes: the match's raw text, not math-verify's parse
of it, is the answer, read like a strict answer (cleaning, limits, exact numbers, "1,22" a
pair). math-verify's plain-expression parser (sympy's `parse_expr`, which evaluates Python)
is never called.

All of this runs in the verifier's worker process, inside one time limit with the comparison:
the regexes scan model text of any length and not all of them run in linear time.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from itertools import groupby
from typing import Any

from rlvr.rewards.math.answer import (
    NO_ANSWER,
    Extraction,
    checked_answers,
    extract_answers,
    read_after,
    read_answers,
)
from rlvr.rewards.math.extraction_guard import (
    HEDGES,
    PROSE_LEAD_HEDGES,
    lead_in_hedge,
    scanned,
    tail_reading,
)

# Between two values: list connectors, and hedges ("5 (or 6)", "5, though 6", "5 \\approx 6").
_HEDGE = (
    r"or|and|either|nor|though|although|but|however|possibly|maybe|perhaps|probably|also"
    r"|alternatively|otherwise|else|instead|approximately|approx|about|around|roughly|nearly"
    r"|almost|vs|versus|to|through"
    # "or" in other languages: "5 o 6", "5 oder 6", "5 ou 6"
    r"|o|u|oder|ou|oppure|или|либо|lub|albo|eller|veya|sau|nebo|vagy|或|或者|还是|または|또는"
)
_RELATION = r"\\(?:approx|sim|simeq|cong|equiv|propto|ll|gg)(?![A-Za-z])|[≈≃≅∼≡∝~]"
_CONNECTOR = re.compile(
    rf"\s*(?:(?:[,;:()]|\.\.\.|(?<![A-Za-z])(?:{_HEDGE})(?![A-Za-z])|{_RELATION})\s*)+",
    re.IGNORECASE,
)
# A qualifier before or after a value makes it no value: "about 5", "at least $5$", "5 or more".
_QUALIFIER_BEFORE = re.compile(
    r"(?<![A-Za-z])(?P<q>approximately|approx\.?|about|around|roughly|nearly|almost|circa|maybe"
    r"|perhaps|possibly|probably|at\s+(?:least|most)|(?:more|less|fewer|greater|smaller)\s+than"
    r"|up\s+to|over|under|below|above)\s*(?:\$|\\\(|\\\[)?\s*$",
    re.IGNORECASE,
)
_QUALIFIER_AFTER = re.compile(
    r"\s*(?:\$|\\\)|\\\])?\s*(?P<q>or\s+(?:more|less|fewer|so|greater|smaller|higher|lower|above"
    r"|below)|at\s+(?:least|most)|(?:or\s+)?(?:approximately|roughly|about|maybe|perhaps))"
    r"(?![A-Za-z])",
    re.IGNORECASE,
)
_SUBSCRIPT = re.compile(r"\s*_\s*(?:\{[^{}]*\}|\(\w*\)|\w)")  # a base: "10_2", "12_{3}"
_TEXT = re.compile(r"\\(?:text|textbf|textnormal|textrm|mathrm|mbox)\s*\{[^{}]*\}")
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
_FUNCTION_WORDS = {"sqrt", "pi", "inf", "infinity", "sin", "cos", "tan", "log", "ln", "exp"}
PLAIN_PRIORITY = 300  # math-verify's patterns without an anchor: any math span or number
Span = tuple[int, int, str]  # start, end in the text, the answer text


@lru_cache(maxsize=1)
def extraction_patterns() -> list[tuple[Any, bool, int]]:
    """(compiled pattern, whether it is a LaTeX one, priority) of math-verify's extraction,
    lowest priority number (tried first) first."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig
    from math_verify.parser import get_extraction_regexes

    targets = get_extraction_regexes([LatexExtractionConfig(), ExprExtractionConfig()])
    found = [
        (p, isinstance(cfg, LatexExtractionConfig), prio)
        for patterns, cfg in targets
        for p, prio in patterns
    ]
    return sorted(found, key=lambda t: t[2])


def _spans(match: re.Match, latex: bool) -> list[Span]:
    """The answer texts of one math-verify match, with their places; a percent kept as `%`."""
    groups = match.groupdict()
    if latex:
        out = []
        for name, value in groups.items():
            if value and "_latex" in name:
                percent = "%" if groups.get(f"{name.split('_', 1)[0]}_percent") else ""
                out.append((match.start(name), match.end(name), value + percent))
        return out
    parts = [n for n, v in groups.items() if v and n.startswith(("integer", "decimal", "expr"))]
    if not parts:
        return []
    start, end = min(match.start(n) for n in parts), max(match.end(n) for n in parts)
    if based := _SUBSCRIPT.match(match.string, end):  # "10_2" is 2, never the 10 before it
        end = based.end()
    return [(start, end, match.string[start:end] + ("%" if groups.get("percent") else ""))]


def _joined(text: str, chosen: list[Span], plain: list[tuple[int, int, list[Span]]]) -> list[Span]:
    """`chosen` plus the spans of every plain match that overlaps them or is joined to them by a
    connector ("5 or 6", "$-2$ and $1$"), transitively; numbers inside an answer's own span
    (the 3 of `$x \\geq 3$`) are part of it, not answers."""
    spans = {(s, e): a for s, e, a in chosen}
    lo, hi = min(s for s, _, _ in chosen), max(e for _, e, _ in chosen)
    grown = True
    while grown and len(spans) <= 64:
        grown = False
        for start, end, found in plain:
            if lo <= start and end <= hi:
                continue
            overlaps = start < hi and end > lo
            before = end <= lo and _CONNECTOR.fullmatch(text, end, lo)
            after = start >= hi and _CONNECTOR.fullmatch(text, hi, start)
            if overlaps or before or after:
                spans.update({(s, e): a for s, e, a in found if not (lo <= s and e <= hi)})
                lo, hi, grown = min(lo, start), max(hi, end), True
    return [(s, e, spans[s, e]) for s, e in sorted(spans)]


def extracted_spans(text: str) -> list[Span]:
    """The answers math-verify's extraction finds in `text` (rules in the module docstring)."""
    targets = extraction_patterns()
    plain = []
    for pattern, latex, prio in targets:
        if prio == PLAIN_PRIORITY:
            for m in pattern.finditer(text):
                if found := _spans(m, latex):  # a LaTeX match with its delimiters
                    start = m.start() if latex else min(s for s, _, _ in found)
                    end = m.end() if latex else max(e for _, e, _ in found)
                    plain.append((start, end, found))
    for _, group in groupby(targets, key=lambda t: t[2]):
        matches = [(m, latex) for pattern, latex, _ in group for m in pattern.finditer(text)]
        matches.sort(key=lambda t: (t[0].end(), -t[0].start()), reverse=True)
        for m, latex in matches[:1]:
            if chosen := _spans(m, latex):
                return [_qualified(text, span) for span in _joined(text, chosen, plain)]
    return []


def _qualified(text: str, span: Span) -> Span:
    """The span with a qualifier around it ("about 5", "at least $5$", "5 or more") made part
    of its answer, which then reads as a hedge (rlvr.rewards.math.notation)."""
    start, end, answer = span
    if before := _QUALIFIER_BEFORE.search(text, max(0, start - 40), start):
        answer = f"{before['q']} {answer}"
    if after := _QUALIFIER_AFTER.match(text, end):
        answer = f"{answer} {after['q']}"
    return start, end, answer


def lenient_answers(
    region: str, answer_pattern: str | None, max_answers: int = 4, max_answer_chars: int = 1000
) -> Extraction:
    """The final answers of `region` (the text after the last `</think>`) in the lenient reading
    (rules in the module docstring)."""
    strict = extract_answers(region, None, max_answers, max_answer_chars)  # tags, Minerva, boxes
    if strict.problem != NO_ANSWER:
        return strict
    found = list(re.finditer(answer_pattern, region)) if answer_pattern else []
    if not found:
        return _read_prose(region, max_answers, max_answer_chars)
    lines = [m.group(1) for m in found]  # and what is restated after the last ("Actually 6")
    if hedge := read_after(region[found[-1].end() :], lines, max_answers, max_answer_chars):
        return Extraction(problem=hedge)
    answers: dict[str, None] = {}  # distinct, in order
    for line in lines:
        read = _read_line(line, max_answers, max_answer_chars)
        if read.problem:
            return read
        answers.update(dict.fromkeys(read.answers))
        if len(answers) > max_answers:
            break
    return checked_answers(list(answers), max_answers)


def _read_prose(text: str, max_answers: int, max_answer_chars: int) -> Extraction:
    """math-verify's extraction from `text`, with the words around the answer read: a hedge in
    its sentence or in the sentence after it scores 0 (`hedged_in_prose`)."""
    spans = extracted_spans(text)
    answers = [a for _, _, a in spans]
    if spans and (hedge := hedged_in_prose(text, spans[0][0], spans[-1][1])):
        return Extraction(tuple(answers), hedge)
    return read_answers(answers, max_answers, max_answer_chars)


_SENTENCE_REST = re.compile(r"[^.!?\n]*(?:[.!?\n](?![0-9])|\Z)")
_WORD_TOKEN = re.compile(r"(?<![\\\w])[^\W\d_]+")
_SIGN_BEFORE = re.compile(
    r"(?:[~≈≃≅∼<>≤≥±]|\\(?:approx|sim|simeq|lt|gt|le|leq|ge|geq|pm)(?![A-Za-z]))"
    r"\s*(?:\$|\\\(|\\\[)?\s*\Z"
    r"|[-+]\s*(?:\$|\\\(|\\\[)\s*\Z"  # "-$5$": a sign outside the math
)
_SIGN_AFTER = re.compile(r"\s*(?:\$|\\\)|\\\])?\s*(?:\+|-\s*ish|~|\?)")
_REJECTED = re.compile(r"\s*(?:\$|\\\)|\\\])?\s*,\s*not\s+\$?[-+]?\d[\d.,]*\$?")  # "5, not 6"


def hedged_in_prose(text: str, lo: int, hi: int) -> str:
    """The hedge around the answer at text[lo:hi] in prose, or '': a negation, qualifier, doubt
    word or "or" (any of several languages) among the words right before it ("The answer is not
    5", "no less than 5", "either 5 or 6") or in the rest of its sentence ("5 give or take", "5
    (approx.)", "5-ish"), a sign before or after it ("~5", "5+", "5?"), and the hedges after
    the final answer that the strict reading refuses ("5. Hmm, maybe 6"). ", not 6" right after
    it rejects a value; "not 10 which is 7" rejects 10 and states 7."""
    start = max(0, lo - 100)
    if joined := _joined_character(text, lo, hi):
        return joined
    if _SIGN_BEFORE.search(text, start, lo):
        return "a sign before the answer"
    if hedge := lead_in_hedge(text[start:lo], PROSE_LEAD_HEDGES):
        return f"hedge before the answer: {hedge!r}"
    after_end = min(len(text), hi + 400)
    rest = hi
    if rejected := _REJECTED.match(text, hi, after_end):
        rest = rejected.end()
    if _SIGN_AFTER.match(text, hi, after_end):
        return "a sign after the answer"
    after = _SENTENCE_REST.match(text, rest, after_end)
    for word in _WORD_TOKEN.findall(scanned(after.group() if after else "")):
        if word.lower() in HEDGES:
            return f"hedge after the answer: {word!r}"
    # what follows in its sentence and the next, as after a box: another value ("5 | 6", "5
    # [6]", "5 when n is odd and 6 when n is even") or a second thought is a hedge
    values, problem = tail_reading(text[rest:], 4)
    if problem:
        return problem
    if values:
        return f"another value after the answer: {values[0]!r}"
    return ""


def _joined_character(text: str, lo: int, hi: int) -> str:
    """A character that joins the answer at text[lo:hi] to more, or hides what it is: a
    non-ASCII sign, digit form, dash or mark right beside it ("5−6", "5·6", "5⁶", "5⅚", "5̸"),
    or an invisible format character (U+200B, U+00AD, a bidirectional override) in its
    sentence. The lenient reading would take the ASCII number and drop the rest. A currency
    sign or a degree sign beside it is a unit ("1,000.99€", "90°")."""
    for ch in (text[hi : hi + 1], text[lo - 1 : lo] if lo else ""):
        if ch and not ch.isascii() and not ch.isspace():
            kind = unicodedata.category(ch)
            if kind[0] not in "LZ" and kind != "Sc" and ch not in "°℃℉" or kind == "Lm":
                return f"a character joined to the answer: {ch!r}"
    around = text[max(0, lo - 100) : hi + 100]
    if any(unicodedata.category(ch) == "Cf" for ch in around):
        return "an invisible format character beside the answer"
    return ""


def _read_line(line: str, max_answers: int, max_answer_chars: int) -> Extraction:
    """An answer line: the strict reading when that is math (`Answer: 2^{10}`), else
    math-verify's extraction from it (`Answer: the value is 7`, `The largest $n$ is 34`), else
    the strict reading (`Answer: Monday`)."""
    strict = read_answers([line], max_answers, max_answer_chars)
    if len(line) > max_answer_chars or not strict.problem and all(map(_is_math, strict.answers)):
        return strict
    if extracted_spans(line):
        return _read_prose(line, max_answers, max_answer_chars)
    return strict


def _is_math(answer: str) -> bool:
    """No word of two letters or more outside LaTeX commands and \\text{} (`2^{10}`, `x = 5`,
    `\\frac{3}{4}`, `5 \\text{ cm}`, `sqrt(2)`; not `the value is 7`)."""
    text = _TEXT.sub(" ", answer)
    return not any(w.lower() not in _FUNCTION_WORDS for w in _WORD.findall(text))
