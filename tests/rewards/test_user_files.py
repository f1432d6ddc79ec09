"""A verifier file (`reward.verifier=my_file.py:fn`) imports a module beside it without
PYTHONPATH, and loading it leaves the import path as it was."""

from __future__ import annotations

import sys

import pytest

from rlvr.errors import ConfigError
from rlvr.rewards.compose import build_verifier
from rlvr.rewards.pool import VerifierPool


def write_pair(folder, helper: str):
    folder.mkdir()
    (folder / f"{helper}.py").write_text("def parse(text):\n    return text.strip()\n")
    (folder / "my_reward.py").write_text(
        f"import {helper}\n\n"
        "def score(completion, sample):\n"
        f"    return float({helper}.parse(completion) == sample['answer'])\n"
    )
    return folder / "my_reward.py"


def test_a_verifier_file_imports_a_module_beside_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the file's directory, and nothing on PYTHONPATH
    path = write_pair(tmp_path / "rewards", "helpers_beside_a")
    before = list(sys.path)
    verifier = build_verifier(f"{path}:score")
    assert verifier(" 4 ", {"answer": "4"}) == 1.0
    assert sys.path == before  # the file's directory was on the path only while it loaded


def test_a_verifier_file_imports_its_neighbour_in_worker_processes_too(tmp_path):
    path = write_pair(tmp_path / "rewards", "helpers_beside_b")
    with VerifierPool(f"{path}:score", workers=1) as pool:
        assert pool.score_batch(["4", "5"], [{"answer": "4"}] * 2).rewards == [1.0, 0.0]


def test_a_file_whose_import_fails_is_a_one_line_config_error(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("import no_such_module_beside_it\n")
    with pytest.raises(ConfigError, match=r"broken\.py' cannot import: No module named"):
        build_verifier(f"{path}:score")
