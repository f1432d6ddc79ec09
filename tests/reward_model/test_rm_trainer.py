"""`rlvr rm` end to end on a tiny model: pairwise accuracy rises, the run directory is rlvr
sft's, final/ is what rm:PATH scores with, and a run resumes."""

from __future__ import annotations

import json
import random

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from rlvr.cli import main
from rlvr.config import Config
from rlvr.reward_model.scoring import learned_reward_resolver
from rlvr.rewards.compose import build_verifier
from rlvr.rewards.scoring import Scorer

GOOD, BAD = ("yes", "ok", "fine", "sure"), ("no", "bad", "wrong", "nope")


def word_pairs(n: int, seed: int = 0) -> list[dict]:
    """Trivially separable pairs: a good word is chosen over a bad one, after random digits."""
    rng = random.Random(seed)
    return [
        {
            "prompt": "".join(rng.choice("0123456789") for _ in range(4)) + "=",
            "chosen": rng.choice(GOOD),
            "rejected": rng.choice(BAD),
        }
        for _ in range(n)
    ]


RUN = [
    "optimizer.lr=3e-3",
    "optimizer.warmup_steps=0",
    "training.batch_size=16",
    "training.micro_batch_size=8",
    "training.epochs=4",
    "data.eval_fraction=0.25",
]


def test_training_raises_heldout_pairwise_accuracy(
    tmp_path, capsys, tiny_model_dir, make_pairs_file
):
    path = make_pairs_file(word_pairs(96))
    run = tmp_path / "run"
    args = ["rm", f"data.path={path}", f"model.name_or_path={tiny_model_dir}", *RUN]
    assert main([*args, "checkpoint.every=9", "--output-dir", str(run)]) == 0
    err = capsys.readouterr().err
    assert "eval before: pairwise accuracy" in err and "eval after: pairwise accuracy" in err
    summary = json.loads((run / "summary.json").read_text())
    before, after = summary["eval_before"], summary["eval_after"]
    assert after["accuracy"] >= 0.95 and after["accuracy"] > before["accuracy"], (before, after)
    assert after["loss"] < before["loss"] and after["n"] == 24
    assert summary["pairs"] == 72 and summary["steps"] == 4 * 5 and summary["layout"] == "text"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    assert rows[0] == {"step": 0, **{f"eval_{k}": v for k, v in before.items()}}
    assert [r["step"] for r in rows[1:]] == list(range(1, 21))
    assert rows[-1]["eval_accuracy"] == after["accuracy"]  # the last row holds the evaluation
    for key in ("loss", "accuracy", "margin", "lr", "grad_norm", "pairs", "tokens_per_s"):
        assert all(key in r for r in rows[1:]), key
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-18", "step-9"]

    # final/ is a plain HF reward model, and rm: scores with it: chosen above rejected
    final = run / "final"
    model = AutoModelForSequenceClassification.from_pretrained(final)
    assert model.config.num_labels == 1 and model.config.rlvr_rm_format == "text"
    verifier = build_verifier(
        f"rm:{final}", resolve=learned_reward_resolver(Config(), torch.device("cpu"))
    )
    held = word_pairs(8, seed=1)
    texts = [p["chosen"] for p in held] + [p["rejected"] for p in held]
    rewards, _ = Scorer(verifier)(texts, [{"prompt": p["prompt"]} for p in held] * 2)
    assert sum(c > r for c, r in zip(rewards[:8], rewards[8:])) >= 7

    # --resume of a finished run continues from its checkpoint (step 18) to the end
    assert main(["rm", "--output-dir", str(run), "--resume", "--quiet"]) == 0
    resumed = json.loads((run / "summary.json").read_text())
    assert resumed["resumed_from_step"] == 18 and resumed["eval_before"] == before
    rows = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    assert [r["step"] for r in rows] == list(range(0, 21))


def test_an_existing_run_is_not_clobbered(tmp_path, capsys, make_pairs_file):
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text("{}")
    path = make_pairs_file(word_pairs(4))
    assert main(["rm", f"data.path={path}", "--output-dir", str(run), "--quiet"]) == 2
    assert "already holds a run" in capsys.readouterr().err


def test_lora_trains_adapters_and_saves_merged_weights(tmp_path, tiny_model_dir, make_pairs_file):
    pytest.importorskip("peft")
    from rlvr.config import load_config
    from rlvr.reward_model.config import RMConfig
    from rlvr.reward_model.trainer import run_rm

    path = make_pairs_file(word_pairs(64))
    cfg = load_config(
        None,
        [f"data.path={path}", f"model.name_or_path={tiny_model_dir}", "model.lora_rank=4", *RUN],
        schema=RMConfig,
    )
    summary = run_rm(cfg, tmp_path / "run", log=lambda _m: None, progress=False)
    assert 0 < summary["trainable_parameters"] < 10_000
    assert summary["eval_after"]["accuracy"] > summary["eval_before"]["accuracy"]
    merged = AutoModelForSequenceClassification.from_pretrained(tmp_path / "run" / "final")
    assert not any("lora" in name for name, _ in merged.named_parameters())
    assert (tmp_path / "run" / "final" / "adapter" / "adapter_config.json").is_file()
