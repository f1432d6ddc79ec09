"""Every metric a real training run writes is named in docs/metrics.md."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
METRICS_DOC = REPO / "docs" / "metrics.md"
EVALUATION_DOC = REPO / "docs" / "evaluation.md"
RUN = [
    "training.steps=2",
    "rollout.prompts_per_step=2",
    "rollout.group_size=2",
    "eval.size=4",
    "eval.every=1",
    "eval.k=2",  # pass@k, maj@k, accuracy/<source>, accuracy_within_<b>
    "algorithm.kl_coef=0.01",  # kl
]


def name_patterns(doc: Path) -> list[re.Pattern[str]]:
    """The `code` names of a page as patterns: `<name>` matches any text, `@k` any number.

    Only metric-like names count, and a bare placeholder such as `<think>` is no name."""
    patterns = []
    for name in re.findall(r"`([\w/@<>.]+)`", doc.read_text(encoding="utf-8")):
        if re.fullmatch(r"<[^>]*>", name):
            continue
        pattern = re.sub(r"<[^>]+>", ".+", re.escape(name).replace(r"\<", "<").replace(r"\>", ">"))
        patterns.append(re.compile(pattern.replace("@k", r"@\d+")))
    return patterns


def documented(key: str, metrics: list[re.Pattern[str]], evaluation: list[re.Pattern[str]]) -> bool:
    """Named in metrics.md, or an `eval_`-prefixed evaluation key named in evaluation.md."""
    if any(p.fullmatch(key) for p in metrics):
        return True
    prefix = "eval_"
    return (
        key.startswith(prefix)
        and any(p.fullmatch(prefix) for p in metrics)
        and any(p.fullmatch(key.removeprefix(prefix)) for p in evaluation)
    )


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["algorithm.advantage=gae"]], ids=["grpo", "ppo"])
def test_every_metric_of_a_training_run_is_documented(tmp_path: Path, extra: list[str]) -> None:
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "rlvr", "train", *RUN, *extra]
    result = subprocess.run(
        [*cmd, "--output-dir", str(run_dir), "--quiet"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert result.returncode == 0, result.stdout
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    keys = sorted(set().union(*rows))
    metrics, evaluation = name_patterns(METRICS_DOC), name_patterns(EVALUATION_DOC)
    missing = [key for key in keys if not documented(key, metrics, evaluation)]
    assert not missing, f"metrics.jsonl keys not documented in docs/metrics.md: {missing}"
    assert any(key.startswith("eval_pass@") for key in keys)  # the eval keys were exercised
