import csv
import json
import random

import pytest

from rlvr.data.datasets import (
    FieldMap,
    PromptDataset,
    filter_long_prompts,
    load_prompt_dataset,
    load_rows,
)
from rlvr.errors import DataError

ROWS = [
    {"prompt": "1+1=", "answer": "2"},
    {"prompt": "2+2=", "answer": "4"},
    {"prompt": "3+3=", "answer": "6"},
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_jsonl_round_trip_skips_blank_lines(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps(ROWS[0]) + "\n\n" + json.dumps(ROWS[1]) + "\n")
    assert load_rows(str(p)) == ROWS[:2]


def test_json_round_trip(tmp_path):
    p = tmp_path / "d.json"
    p.write_text(json.dumps(ROWS))
    assert load_rows(str(p)) == ROWS


def test_csv_round_trip(tmp_path):
    p = tmp_path / "d.csv"
    with open(p, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["prompt", "answer"])
        w.writeheader()
        w.writerows(ROWS)
    assert load_rows(str(p)) == ROWS


def test_parquet_round_trip(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    p = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), p)
    assert load_rows(str(p)) == ROWS


def test_parquet_without_library_names_extra(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.split(".")[0] in ("pyarrow", "pandas"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    p = tmp_path / "d.parquet"
    p.write_bytes(b"PAR1")
    with pytest.raises(DataError, match=r"rlvr\[data\].*pyarrow|pyarrow.*rlvr\[data\]"):
        load_rows(str(p))


def test_malformed_jsonl_names_line(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps(ROWS[1]) + "\n{oops\n")
    with pytest.raises(DataError, match=r"d\.jsonl line 3: invalid JSON"):
        load_rows(str(p))


def test_non_object_row(tmp_path):
    p = tmp_path / "d.json"
    p.write_text(json.dumps([ROWS[0], [1, 2]]))
    with pytest.raises(DataError, match=r"d\.json row 2: expected an object"):
        load_rows(str(p))


def test_unknown_extension_and_missing_file(tmp_path):
    p = tmp_path / "d.txt"
    p.write_text("x")
    with pytest.raises(DataError, match="unknown dataset format"):
        load_rows(str(p))
    with pytest.raises(DataError, match="file not found"):
        load_rows(str(tmp_path / "missing.jsonl"))


def test_field_mapping_and_numeric_answer(tmp_path):
    path = write_jsonl(
        tmp_path / "math.jsonl",
        [{"question": "6*7?", "solution": 42, "origin": "gsm8k", "system": "be brief"}],
    )
    fields = FieldMap(prompt="question", answer="solution", source="origin")
    ds = load_prompt_dataset(path, fields=fields, eval_fraction=0)
    sample = ds.sample_train(random.Random(0))
    assert sample == {
        "prompt": "6*7?",
        "answer": "42",
        "source": "gsm8k",
        "system": "be brief",
        "id": "math-1",
        # the mapped columns are kept under their own names too (a TRL function may name them)
        "question": "6*7?",
        "solution": 42,
        "origin": "gsm8k",
    }


def test_existing_id_is_kept(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": "abc", "prompt": "p"}])
    ds = load_prompt_dataset(path, eval_fraction=0)
    assert ds.sample_train(random.Random(0))["id"] == "abc"


def test_missing_prompt_names_row_and_field(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"question": "ok"}, {"question": ""}])
    with pytest.raises(DataError, match=r"d\.jsonl row 2: field 'question' \(prompt\)"):
        load_prompt_dataset(path, fields=FieldMap(prompt="question"))


def test_tests_json_string_parsed(tmp_path):
    tests = [{"input": "1\n", "output": "2\n"}]
    path = write_jsonl(
        tmp_path / "code.jsonl",
        [{"prompt": "write it", "tests": json.dumps(tests), "fn_name": "f"}],
    )
    ds = load_prompt_dataset(path, eval_fraction=0)
    sample = ds.sample_train(random.Random(0))
    assert sample["tests"] == tests and sample["fn_name"] == "f"


def test_tests_invalid_json_string(tmp_path):
    path = write_jsonl(tmp_path / "code.jsonl", [{"prompt": "p"}, {"prompt": "p", "tests": "[{"}])
    with pytest.raises(DataError, match=r"code\.jsonl row 2: field 'tests'"):
        load_prompt_dataset(path)


def test_empty_file(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text("\n")
    with pytest.raises(DataError, match="no rows"):
        load_prompt_dataset(str(p))


def test_deterministic_split_and_sampling(tmp_path):
    rows = [{"prompt": f"q{i}", "answer": str(i)} for i in range(50)]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    a = load_prompt_dataset(path, eval_fraction=0.2, seed=3)
    b = load_prompt_dataset(path, eval_fraction=0.2, seed=3)
    assert len(a) == 40 and len(a.heldout(10)) == 10
    assert a.heldout(10) == b.heldout(10)
    eval_prompts = {s["prompt"] for s in a.heldout(10)}
    train_prompts = {s["prompt"] for s in a.train}
    assert not eval_prompts & train_prompts and len(eval_prompts | train_prompts) == 50
    draws_a = [a.sample_train(random.Random(7))["id"] for _ in range(3)]
    rng1, rng2 = random.Random(11), random.Random(11)
    assert [a.sample_train(rng1) for _ in range(20)] == [b.sample_train(rng2) for _ in range(20)]
    assert len(set(draws_a)) == 1
    c = load_prompt_dataset(path, eval_fraction=0.2, seed=4)
    assert c.heldout(10) != a.heldout(10)


def test_eval_fraction_zero_and_eval_path(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", ROWS)
    ds = load_prompt_dataset(path, eval_fraction=0)
    assert len(ds) == 3 and ds.heldout(0) == []
    with pytest.raises(ValueError):
        ds.heldout(1)
    eval_path = write_jsonl(tmp_path / "test.jsonl", [{"prompt": "9+9=", "answer": 18}])
    ds = load_prompt_dataset(path, eval_path=eval_path)
    assert len(ds) == 3
    assert ds.heldout(1) == [{"prompt": "9+9=", "answer": "18", "id": "train-1"}]


def test_prompt_dataset_direct():
    ds = PromptDataset(ROWS, ROWS[:1], FieldMap(), name="toy")
    assert len(ds) == 3
    assert ds.heldout(1)[0]["id"] == "toy-1"


def test_filter_long_prompts(tmp_path):
    rows = [{"prompt": "x " * n} for n in (1, 5, 2, 8, 3, 9)]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    ds = load_prompt_dataset(path, eval_fraction=0.5, seed=0)
    n_long_train = sum(len(s["prompt"].split()) > 4 for s in ds.train)
    n_long_eval = sum(len(s["prompt"].split()) > 4 for s in ds.eval)
    report = filter_long_prompts(ds, lambda s: len(s["prompt"].split()), 4)
    assert report == {
        "dropped_train": n_long_train,
        "dropped_eval": n_long_eval,
        "reason": "prompt longer than 4 tokens",
    }
    assert n_long_train + n_long_eval == 3
    assert all(len(s["prompt"].split()) <= 4 for s in ds.train + ds.eval)
    with pytest.raises(DataError, match="every training prompt"):
        filter_long_prompts(ds, lambda s: 100, 4)
