"""Fuzz pipeline files: random trees through `rlvr.pipeline.spec.parse_pipeline` (with random
`--MODEL` overrides) and random YAML text through `load_pipeline`.

Pass: a `PipelineSpec` whose stages obey the documented rules (unique identifier names that are
not model names, known kinds, references only to earlier stages, models or paths), or a
`ConfigError` whose message is one line and starts with "pipeline ". Anything else fails.

The bugs the fuzz found are fixed; each keeps a regression test with its minimal reproducer
(`test_fixed_*`, listed in docs/reliability.md), and the generators cover those inputs again.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlvr.errors import ConfigError, UserError
from rlvr.pipeline.spec import (
    KINDS,
    STAGE_KEYS,
    TOP_KEYS,
    PipelineSpec,
    load_pipeline,
    parse_pipeline,
)

CASES = 500
FUZZ = settings(
    max_examples=CASES,
    deadline=2000,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"

# Keys and names: any unicode but surrogates (YAML cannot write them); line breaks come often.
safe_text = st.text(
    st.one_of(st.characters(exclude_categories=("Cs",)), st.sampled_from(LINE_BREAKS)),
    max_size=12,
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**300), 10**300),
    st.floats(),
    safe_text,
    st.text(max_size=8),
)
junk = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(safe_text, inner, max_size=3)
    ),
    max_leaves=6,
)
NAMES = [
    "base",
    "teacher",
    "s1",
    "s2",
    "cold_start",
    "rs",
    "grpo",
    "_x",
    "a-b",
    "1bad",
    "a.b",
    "",
    "with space",
    "a\n",
    "s1\n",
    "b\u2028",
]
names = st.one_of(st.sampled_from(NAMES), safe_text)
refs = st.one_of(
    st.sampled_from(
        NAMES
        + [
            "s1.kept",
            "s1.curriculum",
            "s1.samples",
            "s1.bad",
            "rs.kept",
            "./model",
            "~/m",
            "data.jsonl",
            "/abs/path",
            "embedded",
        ]
    ),
    junk,
)
kinds = st.one_of(st.sampled_from([*KINDS, "SFT", "train", ""]), junk)


@st.composite
def stages(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 19)) == 0:
        return draw(junk)
    keys = draw(st.lists(st.sampled_from([*STAGE_KEYS, "junk"]), unique=True, max_size=6))
    stage: dict[Any, Any] = {}
    for key in keys:
        value = {
            "name": names,
            "kind": kinds,
            "model": refs,
            "data": refs,
            "config": st.one_of(st.dictionaries(safe_text, junk, max_size=3), junk),
            "junk": junk,
        }[key]
        stage[draw(safe_text) if key == "junk" else key] = draw(value)
    return stage


@st.composite
def pipeline_trees(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 19)) == 0:
        return draw(junk)
    keys = draw(st.lists(st.sampled_from([*TOP_KEYS, "junk"]), unique=True, max_size=9))
    tree: dict[Any, Any] = {}
    for key in keys:
        value = {
            "name": st.one_of(safe_text, junk),
            "models": st.one_of(st.dictionaries(names, st.one_of(refs, junk), max_size=3), junk),
            "model": st.one_of(refs, junk),
            "task": st.one_of(st.dictionaries(safe_text, junk, max_size=3), junk),
            "reward": st.one_of(st.fixed_dictionaries({"verifier": safe_text}), junk),
            "eval": st.one_of(st.dictionaries(safe_text, junk, max_size=3), junk),
            "defaults": st.one_of(
                st.dictionaries(
                    st.sampled_from([*KINDS, "SFT", ""]) | safe_text,
                    st.one_of(st.dictionaries(safe_text, junk, max_size=2), junk),
                    max_size=3,
                ),
                junk,
            ),
            "stages": st.one_of(st.lists(stages(), max_size=6), junk),
            "junk": junk,
        }[key]
        tree[draw(safe_text) if key == "junk" else key] = draw(value)
    return tree


@st.composite
def plausible_trees(draw: st.DrawFn) -> dict:
    """A tree shaped like a real pipeline (so the reference checks are reached), then 0-2
    fields replaced by junk."""
    stage_list: list[dict] = []
    earlier: dict[str, str] = {}  # name -> kind
    consistent = draw(st.booleans())  # refs that follow the rules (else any earlier name)
    for i in range(draw(st.integers(1, 5))):
        if consistent:
            name = f"s{i + 1}"
        else:
            name = draw(st.sampled_from(["s1", "s2", "s3", "cold_start", "rs", "base"]))
        kind = draw(st.sampled_from(KINDS))
        stage: dict[str, Any] = {"name": name, "kind": kind}
        data_stages = [
            n for n, k in earlier.items() if k in ("sample", "rejection_sample", "filter")
        ]
        model_stages = [n for n, k in earlier.items() if k in ("sft", "grpo")]
        if consistent:
            models = [None] if kind in ("filter", "eval") else [None, "base", *model_stages]
            datas = [] if kind == "eval" else [*data_stages, *(f"{n}.kept" for n in data_stages)]
            datas += [] if kind in ("filter", "eval") else [None, "x.jsonl"]
            datas = datas or [None]
        else:
            models = [None, "base", "teacher", "./m", *earlier]
            datas = [
                None,
                "x.jsonl",
                *earlier,
                *(f"{e}.kept" for e in earlier),
                *(f"{e}.nope" for e in earlier),
            ]
        model = draw(st.sampled_from(models))
        if model is not None:
            stage["model"] = model
        data = draw(st.sampled_from(datas))
        if data is not None:
            stage["data"] = data
        if draw(st.booleans()):
            stage["config"] = {"training.steps": draw(st.integers(0, 3))}
        stage_list.append(stage)
        earlier[name] = kind
    tree: dict[str, Any] = {"stages": stage_list}
    if draw(st.booleans()):
        tree["models"] = {"base": "embedded", "teacher": "embedded-small"}
    if draw(st.booleans()):
        tree["defaults"] = {draw(st.sampled_from(KINDS)): {"training.steps": 2}}
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        target = draw(st.sampled_from(["top", "stage"]))
        node = tree if target == "top" else draw(st.sampled_from(stage_list))
        keys = list(TOP_KEYS) if target == "top" else list(STAGE_KEYS)
        node[draw(st.sampled_from(keys))] = draw(st.one_of(refs, junk))
    return tree


trees = st.one_of(pipeline_trees(), plausible_trees())


def check_spec(spec: PipelineSpec) -> None:
    """The rules of docs/pipelines.md, re-checked on what parse_pipeline accepted."""
    assert spec.stages and spec.name and isinstance(spec.name, str)
    assert "base" in spec.models
    seen: dict[str, Any] = {}
    for stage in spec.stages:
        assert IDENTIFIER.fullmatch(stage.name), f"stage name {stage.name!r}"
        assert stage.name not in seen and stage.name not in spec.models
        assert stage.kind in KINDS and stage.kind != "rejection_sample"
        assert isinstance(stage.config, dict)
        if stage.model is not None:
            assert stage.kind not in ("filter", "eval")
            earlier = seen.get(stage.model)
            assert earlier is None or earlier.produces_model
        if stage.data is not None:
            assert stage.kind != "eval"
            head = stage.data.partition(".")[0]
            assert head not in seen or seen[head].produces_data
        elif stage.kind == "filter":
            raise AssertionError("a filter stage without data was accepted")
        seen[stage.name] = stage


def parse_or_error(tree: Any, source: str, overrides: dict[str, str] | None) -> None:
    try:
        spec = parse_pipeline(tree, source, overrides)
    except UserError as e:
        message = str(e)
        assert isinstance(e, ConfigError), type(e).__name__
        assert message.startswith("pipeline "), message
        assert not any(c in message for c in "\n\r"), f"message is not one line: {message!r}"
        return
    check_spec(spec)


@FUZZ
@given(
    tree=trees,
    overrides=st.one_of(st.none(), st.dictionaries(st.sampled_from(NAMES), safe_text, max_size=2)),
    huge=st.sampled_from([None, None, None, None, "model name", "model path", "model", "name"]),
)
@pytest.mark.slow
def test_random_pipeline_trees_parse_or_fail_with_one_line(
    tree: Any, overrides: dict[str, str] | None, huge: str | None
) -> None:
    if huge is not None and isinstance(tree, dict):  # an int over Python's 4300-digit limit
        big = 10**5000
        if huge == "model name":
            tree["models"] = {big: "x"}
        elif huge == "model path":
            tree["models"] = {"base": big}
        else:
            tree[huge] = big
    parse_or_error(tree, "fuzz.yaml", overrides)


YAML_PIECES = [
    "- ",
    ": ",
    "[",
    "]",
    "{",
    "}",
    "&a ",
    "*a",
    "<<: *a\n",
    "'",
    '"',
    "#",
    "\t",
    "---\n",
    "~",
    "\n",
    "  ",
    "é",
    "\x00",
    "!!str ",
    "!!set ",
    "!!timestamp x",
    "!!int x",
    "!!bool maybe",
    "1" * 5000,
    "[" * 700,
    "\udcff",
    "kind: eval\n",
    "  - name: s9\n",
]


@st.composite
def pipeline_texts(draw: st.DrawFn) -> str:
    """A dumped tree with up to 4 random edits (insert a YAML piece, delete a slice)."""
    text = yaml.safe_dump(draw(trees), allow_unicode=True, sort_keys=False)
    for _ in range(draw(st.integers(0, 4))):
        i = draw(st.integers(0, len(text)))
        if draw(st.booleans()):
            text = text[:i] + draw(st.one_of(st.sampled_from(YAML_PIECES), safe_text)) + text[i:]
        else:
            text = text[:i] + text[i + draw(st.integers(1, 8)) :]
    return text


@pytest.mark.slow
@FUZZ
@given(text=pipeline_texts())
def test_random_pipeline_files_load_or_fail_with_one_line(fuzz_dir: Path, text: str) -> None:
    path = fuzz_dir / "pipeline.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")  # '\udcff': not UTF-8
    try:
        spec = load_pipeline(path)
    except UserError as e:
        message = str(e)
        assert message.startswith("pipeline ") and not any(c in message for c in "\n\r"), message
        return
    check_spec(spec)


# --- fixed bugs: the fuzz's minimal reproducers, kept as regression tests ---------------------


def _expect_pipeline_error(fn: Any) -> None:
    with pytest.raises(ConfigError) as info:
        fn()
    message = str(info.value)
    assert message.startswith("pipeline ") and "\n" not in message, repr(message)


def test_fixed_stage_name_with_trailing_newline() -> None:
    _expect_pipeline_error(
        lambda: parse_pipeline({"stages": [{"name": "a\n", "kind": "sft"}]}, "p")
    )


def test_fixed_key_with_newline_gives_one_line() -> None:
    _expect_pipeline_error(lambda: parse_pipeline({"x\ny": 1}, "p"))


def test_fixed_huge_int_model_name() -> None:
    tree = {"models": {10**5000: "x"}, "stages": [{"name": "a", "kind": "sft"}]}
    _expect_pipeline_error(lambda: parse_pipeline(tree, "p"))


@pytest.mark.parametrize("content", [b"\xff\xfe\x00", b"name: !!timestamp x\n"])
def test_fixed_unreadable_pipeline_file(fuzz_dir: Path, content: bytes) -> None:
    path = fuzz_dir / "bad-pipeline.yaml"
    path.write_bytes(content)
    _expect_pipeline_error(lambda: load_pipeline(path))
