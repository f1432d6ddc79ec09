"""Fuzz the dataset boundary: random and malformed JSONL/JSON, CSV and Parquet files through
`rlvr.data.datasets.load_prompt_dataset` (random `FieldMap`s, held-out fractions and seeds) and
through the SFT row loader (`load_rows` + `rlvr.sft.data.rows_to_texts`).

Pass: a dataset whose every sample has a non-empty string prompt and a string id, split as
documented, or a `DataError`/`UserError` whose message is one line and names the file. Anything
else fails the case. Round-trip targets also check that a well-formed file loads back unchanged.

The bugs the fuzz found are fixed; each keeps a regression test with its minimal reproducer
(`test_fixed_*`, listed in docs/reliability.md), and the generators cover those inputs again.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlvr.data.datasets import FieldMap, PromptDataset, load_prompt_dataset, load_rows
from rlvr.errors import UserError
from rlvr.sft.config import SFTDataConfig
from rlvr.sft.data import rows_to_texts

CASES = 500
FUZZ = settings(
    max_examples=CASES,
    deadline=5000,  # ms per case; a few cases write a 200 kB line
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
COLUMNS = ["prompt", "answer", "tests", "system", "source", "fn_name", "id", "question", "q"]
# Characters str.splitlines() breaks on; JSON strings written with ensure_ascii=False hold
# U+0085, U+2028 and U+2029 raw (test_fixed_jsonl_line_separator_inside_a_string).
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def assert_names_file(error: UserError, path: Path) -> None:
    message = str(error)
    assert not any(c in message for c in "\n\r"), f"message is not one line: {message!r}"
    assert str(path) in message, f"message does not name {path}: {message!r}"


# --- strategies -------------------------------------------------------------------------------

odd_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        [
            "",
            " ",
            "\t",
            "\ufeff",
            "\x00",
            "٣+٥",
            "５",
            "𝟓",
            "e\u0301",
            "\u202e42",
            "日本語",
            "🙂" * 3,
        ]
    ),
)
# json.dumps cannot write ints over Python's 4300-digit limit; EXTREME_JSON has them as text,
# and nesting far past the recursion limit.
EXTREME_JSON = [
    '{"prompt": "x", "answer": ' + "1" * 5000 + "}",
    '{"prompt": "x", "n": -' + "9" * 4400 + ".5e3}",
    "[" * 100_000 + "]" * 100_000,
    '{"a":' * 5000 + "1" + "}" * 5000,
    '{"prompt": "a\u2028b\u0085c\u2029d"}',
]
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**100), 10**100),
    st.floats(allow_nan=True, allow_infinity=True),
    odd_text,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
rows = st.dictionaries(
    st.one_of(st.sampled_from(COLUMNS), st.text(max_size=8)),
    st.one_of(st.text(min_size=1, max_size=20), json_values),
    max_size=6,
)
field_maps = st.builds(
    FieldMap,
    prompt=st.sampled_from(["prompt", "question", "q", "answer", ""]),
    answer=st.sampled_from(["answer", "a", "prompt", "id"]),
    tests=st.sampled_from(["tests", "prompt", "answer"]),
    system=st.sampled_from(["system", "source", "q"]),
    source=st.sampled_from(["source", "system", "id"]),
    fn_name=st.sampled_from(["fn_name", "id"]),
)
eval_fractions = st.one_of(
    st.floats(0.0, 0.99), st.sampled_from([0.0, 0.5, 1.0, -0.1, math.nan, math.inf])
)


@st.composite
def jsonl_bytes(draw: st.DrawFn) -> bytes:
    lines: list[bytes] = []
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.integers(0, 9))
        if kind <= 3:  # an object line, ASCII-escaped or raw UTF-8
            text = json.dumps(draw(rows), ensure_ascii=draw(st.booleans()))
            lines.append(text.encode("utf-8", "surrogatepass"))
        elif kind == 4:  # valid JSON, not an object
            lines.append(json.dumps(draw(json_values)).encode())
        elif kind == 5:  # not JSON, or JSON past Python's limits
            text = draw(st.one_of(st.text(max_size=30), st.sampled_from(EXTREME_JSON)))
            lines.append(text.encode("utf-8", "surrogatepass"))
        elif kind == 6:  # binary garbage
            lines.append(draw(st.binary(max_size=30)))
        elif kind == 7:  # blank
            lines.append(draw(st.sampled_from([b"", b"   ", b"\t"])))
        elif kind == 8:  # a huge line
            size = draw(st.sampled_from([1_000, 50_000, 200_000]))
            lines.append(json.dumps({"prompt": "x" * size, "answer": "1"}).encode())
        else:  # a truncated object
            text = json.dumps(draw(rows))
            lines.append(text[: draw(st.integers(0, len(text)))].encode())
    separator = draw(st.sampled_from([b"\n", b"\r\n", b"\n\n"]))
    return draw(st.sampled_from([b"", b"\xef\xbb\xbf"])) + separator.join(lines)


def check_dataset(ds: PromptDataset, n_rows: int, eval_fraction: float) -> None:
    """Every sample is usable and the split follows load_prompt_dataset's documented rule."""
    for sample in [*ds.train, *ds.eval]:
        assert isinstance(sample["prompt"], str) and sample["prompt"].strip()
        assert isinstance(sample["id"], str)
        for key in ("system", "source", "fn_name", "answer"):
            assert key not in sample or isinstance(sample[key], str)
    n_eval = min(n_rows - 1, max(1, round(eval_fraction * n_rows))) if n_rows >= 2 else 0
    if eval_fraction == 0:
        n_eval = 0
    assert (len(ds.train), len(ds.eval)) == (n_rows - n_eval, n_eval)


def load_and_check(path: Path, fields: FieldMap, eval_fraction: float, seed: int) -> None:
    try:
        ds = load_prompt_dataset(str(path), eval_fraction=eval_fraction, fields=fields, seed=seed)
    except UserError as e:
        assert_names_file(e, path)
        return
    check_dataset(ds, len(load_rows(str(path))), eval_fraction)


def sft_rows_or_error(path: Path, data: st.DataObject) -> None:
    cfg = SFTDataConfig(
        prompt_field=data.draw(st.sampled_from(["prompt", "question", "q"])),
        completion_field=data.draw(st.sampled_from(["completion", "answer", "prompt"])),
        system_field=data.draw(st.sampled_from(["system", "source", "missing"])),
    )
    try:
        texts = rows_to_texts(load_rows(str(path)), cfg, str(path))
    except UserError as e:
        assert_names_file(e, path)
        return
    for prompt, completion, system in texts:
        assert isinstance(prompt, str) and prompt.strip()
        assert isinstance(completion, str) and completion.strip()
        assert system is None or (isinstance(system, str) and system)


# --- JSONL / JSON -----------------------------------------------------------------------------


@FUZZ
@given(
    content=jsonl_bytes(),
    fields=field_maps,
    eval_fraction=eval_fractions,
    seed=st.integers(0, 3),
)
@pytest.mark.slow
def test_random_jsonl_files_load_or_fail_naming_the_file(
    fuzz_dir: Path, content: bytes, fields: FieldMap, eval_fraction: float, seed: int
) -> None:
    path = fuzz_dir / "data.jsonl"
    path.write_bytes(content)
    load_and_check(path, fields, eval_fraction, seed)


@pytest.mark.slow
@FUZZ
@given(
    value=st.one_of(st.lists(st.one_of(rows, json_values), max_size=6), json_values),
    fields=field_maps,
    garble=st.integers(0, 5),
    extreme=st.sampled_from(EXTREME_JSON),
)
def test_random_json_files_load_or_fail_naming_the_file(
    fuzz_dir: Path, value: Any, fields: FieldMap, garble: int, extreme: str
) -> None:
    text = json.dumps(value, ensure_ascii=False)
    if garble == 0:  # a cut-off file
        text = text[: len(text) // 2]
    elif garble == 1:  # past Python's limits: huge numbers, deep nesting
        text = "[" + extreme + "]"
    path = fuzz_dir / "data.json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    load_and_check(path, fields, 0.25, 0)


clean_text = st.text(
    st.one_of(st.characters(exclude_categories=("Cs",)), st.sampled_from(LINE_BREAKS)),
    max_size=20,
)


@FUZZ
@given(
    records=st.lists(
        st.fixed_dictionaries(
            {"prompt": clean_text.filter(str.strip)},
            optional={"answer": st.one_of(clean_text, st.integers(-(10**50), 10**50))},
        ),
        min_size=1,
        max_size=6,
    ),
    ensure_ascii=st.booleans(),
)
@pytest.mark.slow
def test_well_formed_jsonl_loads_back_unchanged(
    fuzz_dir: Path, records: list[dict], ensure_ascii: bool
) -> None:
    path = fuzz_dir / "roundtrip.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=ensure_ascii) + "\n" for r in records))
    assert load_rows(str(path)) == records
    ds = load_prompt_dataset(str(path), eval_fraction=0.0)
    assert [s["prompt"] for s in ds.train] == [r["prompt"] for r in records]
    assert [s.get("answer") for s in ds.train] == [
        None if r.get("answer") is None else str(r["answer"]) for r in records
    ]


# --- CSV --------------------------------------------------------------------------------------

csv_cells = st.one_of(
    st.text(max_size=12), st.sampled_from(['"', '""', ",", "a,b", '"x"', "\t", " 1 ", ""])
)


@st.composite
def csv_bytes(draw: st.DrawFn) -> bytes:
    header = draw(st.lists(st.one_of(st.sampled_from(COLUMNS), csv_cells), max_size=5))
    body = draw(st.lists(st.lists(csv_cells, max_size=6), max_size=6))  # ragged rows
    out = io.StringIO()
    if draw(st.booleans()):
        writer = csv.writer(
            out,
            quoting=draw(st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL, csv.QUOTE_NONNUMERIC])),
            lineterminator=draw(st.sampled_from(["\n", "\r\n"])),
        )
        writer.writerows([header, *body])
        text = out.getvalue()
    else:  # hand-made: unbalanced quotes and stray separators survive
        text = "\n".join(",".join(row) for row in [header, *body])
    if draw(st.booleans()):
        text = "\ufeff" + text
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-16", "latin-1", "cp1252"]))
    return text.encode(encoding, errors="replace")


@FUZZ
@given(content=csv_bytes(), fields=field_maps, eval_fraction=eval_fractions)
def test_random_csv_files_load_or_fail_naming_the_file(
    fuzz_dir: Path, content: bytes, fields: FieldMap, eval_fraction: float
) -> None:
    path = fuzz_dir / "data.csv"
    path.write_bytes(content)
    load_and_check(path, fields, eval_fraction, 0)


csv_clean_cells = st.text(
    st.one_of(st.characters(exclude_categories=("Cs",)), st.sampled_from(LINE_BREAKS)),
    max_size=12,
)


@FUZZ
@given(
    names=st.lists(
        csv_clean_cells.filter(bool),
        min_size=1,
        max_size=4,
        unique=True,
    ),
    data=st.data(),
)
@pytest.mark.slow
def test_well_formed_csv_loads_back_unchanged(
    fuzz_dir: Path, names: list[str], data: st.DataObject
) -> None:
    records = data.draw(
        st.lists(st.fixed_dictionaries({n: csv_clean_cells for n in names}), min_size=1, max_size=5)
    )
    path = fuzz_dir / "roundtrip.csv"
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=names, quoting=csv.QUOTE_ALL)
        writer.writeheader()
        writer.writerows(records)
    assert load_rows(str(path)) == records


# --- Parquet ----------------------------------------------------------------------------------


@functools.cache
def _column_kinds() -> dict[str, tuple[Any, st.SearchStrategy[Any]]]:
    import datetime
    import decimal

    import pyarrow as pa

    small = st.integers(-(2**63), 2**63 - 1)
    return {
        "string": (pa.string(), st.one_of(st.none(), odd_text)),
        "large_string": (pa.large_string(), st.one_of(st.none(), odd_text)),
        "int64": (pa.int64(), st.one_of(st.none(), small)),
        "float64": (pa.float64(), st.one_of(st.none(), st.floats())),
        "bool": (pa.bool_(), st.one_of(st.none(), st.booleans())),
        "binary": (pa.binary(), st.one_of(st.none(), st.binary(max_size=8))),
        "list": (pa.list_(pa.int64()), st.one_of(st.none(), st.lists(small, max_size=3))),
        "struct": (
            pa.struct([("a", pa.int64()), ("b", pa.string())]),
            st.one_of(st.none(), st.fixed_dictionaries({"a": small, "b": st.text(max_size=4)})),
        ),
        "null": (pa.null(), st.none()),
        "timestamp": (
            pa.timestamp("s"),
            st.one_of(st.none(), st.datetimes(datetime.datetime(1900, 1, 1))),
        ),
        "decimal": (
            pa.decimal128(10, 2),
            st.one_of(st.none(), st.decimals(-(10**7), 10**7, places=2).map(decimal.Decimal)),
        ),
    }


@st.composite
def parquet_bytes(draw: st.DrawFn) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    kinds = _column_kinds()
    n = draw(st.integers(0, 5))
    names = draw(
        st.lists(st.one_of(st.sampled_from(COLUMNS), st.text(max_size=6)), max_size=5, unique=True)
    )
    columns = {}
    for name in names:
        pa_type, values = kinds[draw(st.sampled_from(sorted(kinds)))]
        columns[name] = pa.array(draw(st.lists(values, min_size=n, max_size=n)), type=pa_type)
    sink = io.BytesIO()
    pq.write_table(pa.table(columns) if columns else pa.table({"_": pa.nulls(n)}), sink)
    raw = sink.getvalue()
    damage = draw(st.integers(0, 7))
    if damage == 0:  # truncated
        raw = raw[: draw(st.integers(0, len(raw) - 1))]
    elif damage == 1:  # garbage with the magic bytes
        raw = b"PAR1" + draw(st.binary(max_size=64)) + b"PAR1"
    elif damage == 2:  # one flipped byte in the middle
        i = draw(st.integers(0, len(raw) - 1))
        raw = raw[:i] + bytes([raw[i] ^ 0xFF]) + raw[i + 1 :]
    return raw


@pytest.mark.slow
@FUZZ
@given(content=parquet_bytes(), fields=field_maps, data=st.data())
def test_random_parquet_files_load_or_fail_naming_the_file(
    fuzz_dir: Path, content: bytes, fields: FieldMap, data: st.DataObject
) -> None:
    pytest.importorskip("pyarrow")
    path = fuzz_dir / "data.parquet"
    path.write_bytes(content)
    load_and_check(path, fields, 0.5, 0)
    sft_rows_or_error(path, data)


# --- the SFT row loader -----------------------------------------------------------------------


@FUZZ
@given(
    suffix=st.sampled_from([".jsonl", ".csv"]),
    jsonl=jsonl_bytes(),
    csv_content=csv_bytes(),
    data=st.data(),
)
@pytest.mark.slow
def test_sft_rows_load_or_fail_naming_the_file(
    fuzz_dir: Path, suffix: str, jsonl: bytes, csv_content: bytes, data: st.DataObject
) -> None:
    path = fuzz_dir / f"sft{suffix}"
    path.write_bytes(jsonl if suffix == ".jsonl" else csv_content)
    sft_rows_or_error(path, data)


# --- fixed bugs: the fuzz's minimal reproducers, kept as regression tests ---------------------


def _expect_data_error(path: Path) -> None:
    with pytest.raises(UserError) as info:
        load_prompt_dataset(str(path))
    assert_names_file(info.value, path)


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_fixed_huge_number_in_json_is_a_data_error(fuzz_dir: Path, suffix: str) -> None:
    path = fuzz_dir / f"huge{suffix}"
    row = '{"prompt": "x", "answer": ' + "1" * 5000 + "}"
    path.write_text(row + "\n" if suffix == ".jsonl" else f"[{row}]")
    _expect_data_error(path)


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_fixed_deeply_nested_json_is_a_data_error(fuzz_dir: Path, suffix: str) -> None:
    path = fuzz_dir / f"deep{suffix}"
    path.write_text("[" * 100_000 + "]" * 100_000)
    _expect_data_error(path)


@pytest.mark.parametrize("char", ["\u2028", "\x85"])
def test_fixed_jsonl_line_separator_inside_a_string(fuzz_dir: Path, char: str) -> None:
    path = fuzz_dir / "separator.jsonl"
    path.write_text(json.dumps({"prompt": f"a{char}b"}, ensure_ascii=False) + "\n")
    assert load_rows(str(path)) == [{"prompt": f"a{char}b"}]


def test_fixed_csv_with_bom_loads(fuzz_dir: Path) -> None:
    path = fuzz_dir / "bom.csv"
    path.write_bytes("\ufeffprompt,answer\nhi,1\n".encode())
    assert load_prompt_dataset(str(path), eval_fraction=0.0).train[0]["prompt"] == "hi"


def test_fixed_csv_multiline_cell_keeps_its_newline(fuzz_dir: Path) -> None:
    path = fuzz_dir / "multiline.csv"
    path.write_text('prompt,answer\n"a\nb",1\n')
    assert load_rows(str(path)) == [{"prompt": "a\nb", "answer": "1"}]


def test_fixed_csv_long_cell_loads(fuzz_dir: Path) -> None:
    path = fuzz_dir / "long.csv"
    path.write_text("prompt,answer\n" + "a" * 200_000 + ",1\n")
    assert load_rows(str(path))[0]["prompt"] == "a" * 200_000


@pytest.mark.parametrize("answer", [[1, 2], {"a": 1}])
def test_fixed_list_or_object_answer_is_a_data_error(fuzz_dir: Path, answer: Any) -> None:
    path = fuzz_dir / "answer.jsonl"
    path.write_text(json.dumps({"prompt": "x", "answer": answer}) + "\n")
    _expect_data_error(path)


def test_fixed_parquet_error_is_one_line(fuzz_dir: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    sink = io.BytesIO()
    pq.write_table(pa.table({"prompt": ["a", "b", "c"]}), sink)
    raw = bytearray(sink.getvalue())
    raw[4:12] = b"\xea\x04\x15\x00\x15\x02L\x15"  # garbage where the first page header is
    path = fuzz_dir / "damaged.parquet"
    path.write_bytes(bytes(raw))
    _expect_data_error(path)
