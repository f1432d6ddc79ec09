"""Resumable GRPO checkpoints and LoRA RL whose KL reference is the adapter-disabled base."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.runs.checkpoint import list_checkpoints
from rlvr.training.grpo import GRPOTrainer

VERIFIER = """
def digit_fraction(completion, sample):
    return sum(c.isdigit() for c in completion[:8]) / 8
"""


def _overrides(tmp_path: Path, model_dir: Path, *extra: str) -> list[str]:
    verifier = tmp_path / "digits.py"
    verifier.write_text(VERIFIER)
    return [
        f"model.name_or_path={model_dir}",
        f"reward.verifier={verifier}:digit_fraction",
        "rollout.prompts_per_step=4",
        "rollout.group_size=4",
        "rollout.max_new_tokens=6",
        "optimizer.lr=3e-3",
        "optimizer.warmup_steps=0",
        "optimizer.schedule=linear",
        "training.steps=4",
        "training.ppo_epochs=2",
        "eval.size=4",
        "eval.every=0",
        "eval.t1_samples=1",
        "logging.samples_every=0",
        *extra,
    ]


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "final" / "model.safetensors"))


class _Crash(Exception):
    pass


def test_interrupted_run_resumes_to_the_same_weights_as_an_uninterrupted_one(
    tmp_path, tiny_model_dir
):
    args = _overrides(tmp_path, tiny_model_dir, "checkpoint.every=2", "checkpoint.keep_last=1")
    whole = tmp_path / "whole"
    assert main(["train", "--quiet", "--output-dir", str(whole), *args]) == 0

    cut = tmp_path / "cut"
    cut.mkdir()
    cfg = load_config(None, args)
    trainer = GRPOTrainer(cfg, cut, progress=False, log=lambda _m: None)
    real_update = trainer.update

    def crash_at_step_3(scored):
        if trainer.step == 3:
            raise _Crash
        return real_update(scored)

    trainer.update = crash_at_step_3
    with pytest.raises(_Crash):
        trainer.train()
    assert [p.name for p in list_checkpoints(cut)] == ["step-2"]
    assert not (cut / "final").exists()

    assert main(["train", "--quiet", "--resume", "--output-dir", str(cut), *args]) == 0
    a, b = _weights(whole), _weights(cut)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)
    steps = [row["step"] for row in _jsonl(cut / "metrics.jsonl")]
    # step 0: the evaluation before training, written once; step 3's partial row was never
    # written; no duplicates
    assert steps == [0, 1, 2, 3, 4]
    assert [p.name for p in list_checkpoints(cut)] == ["step-4"]  # keep_last=1


def test_resume_refuses_a_changed_config_or_a_missing_run(tmp_path, tiny_model_dir, capsys):
    args = _overrides(tmp_path, tiny_model_dir, "checkpoint.every=2", "training.steps=2")
    run = tmp_path / "run"
    assert main(["train", "--quiet", "--output-dir", str(run), *args]) == 0
    assert (
        main(["train", "--quiet", "--resume", "--output-dir", str(run), *args, "optimizer.lr=1e-3"])
        == 2
    )
    assert "optimizer.lr" in capsys.readouterr().err
    assert (
        main(["train", "--quiet", "--resume", "--output-dir", str(tmp_path / "none"), *args]) == 2
    )
    assert "nothing to resume" in capsys.readouterr().err


def _jsonl(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_lora_rl_uses_the_adapter_disabled_base_as_reference(tmp_path, tiny_model_dir):
    args = _overrides(
        tmp_path, tiny_model_dir, "model.lora_rank=4", "algorithm.kl_coef=0.1", "training.steps=2"
    )
    cfg = load_config(None, args)
    run = tmp_path / "lora"
    run.mkdir()
    trainer = GRPOTrainer(cfg, run, progress=False, log=lambda _m: None)
    assert trainer.policy.ref_model is None  # no second copy of the weights
    n_models = sum(isinstance(m, torch.nn.Embedding) for m in _all_modules(trainer))
    assert n_models == 1
    base_before = {k: v.clone() for k, v in trainer.model.named_parameters() if "lora_" not in k}
    trainable = [k for k, v in trainer.model.named_parameters() if v.requires_grad]
    assert trainable and all("lora_" in k for k in trainable)

    # The reference log-probs are those of the untouched base model.
    from transformers import AutoModelForCausalLM

    from rlvr.forward.logprobs import completion_logprobs, make_token_batch

    tokens = make_token_batch(
        [torch.tensor([5, 6, 7])], [torch.tensor([8, 9, 10])], trainer.tokenizer.pad_token_id
    )
    summary = trainer.train().summary
    ref = trainer.learner.reference_logprobs(tokens)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    with torch.no_grad():
        expected, _ = completion_logprobs(base, tokens, temperature=1.0)
    torch.testing.assert_close(ref[:, :3], expected, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        policy, _ = completion_logprobs(trainer.model, tokens, temperature=1.0)
    assert not torch.allclose(policy, expected, atol=1e-6)  # the adapters did learn something

    for k, v in trainer.model.named_parameters():
        if "lora_" not in k:
            torch.testing.assert_close(v, base_before[k], rtol=0, atol=0)
    metrics = _jsonl(run / "metrics.jsonl")
    assert all("kl" in row for row in metrics if row["step"] >= 1)  # step 0: eval before
    assert summary["steps"] == 2
    # final/ is a plain HF model with the adapters merged, plus the adapter on its own.
    merged = AutoModelForCausalLM.from_pretrained(run / "final").eval()
    with torch.no_grad():
        merged_lp, _ = completion_logprobs(merged, tokens, temperature=1.0)
    torch.testing.assert_close(merged_lp, policy, rtol=1e-4, atol=1e-4)
    assert (run / "final" / "adapter" / "adapter_config.json").is_file()


def _all_modules(trainer):
    seen = []
    for obj in (trainer.model, trainer.policy.ref_model, trainer.engine.model):
        if obj is None:
            continue
        for m in obj.modules():
            if all(m is not s for s in seen):
                seen.append(m)
    return seen


def test_resume_takes_the_run_dir_and_can_allow_a_changed_config(tmp_path, tiny_model_dir, capsys):
    args = _overrides(tmp_path, tiny_model_dir, "checkpoint.every=1", "training.steps=2")
    run = tmp_path / "run"
    assert main(["train", "--quiet", "--output-dir", str(run), *args]) == 0
    # `--resume RUN_DIR` names the run; more steps with a changed config need the flag.
    more = [*args, "training.steps=3"]
    assert main(["train", "--quiet", "--resume", str(run), *more]) == 2
    assert "training.steps" in capsys.readouterr().err
    assert main(["train", "--quiet", "--resume", str(run), "--allow-config-change", *more]) == 0
    err = capsys.readouterr().err
    assert "warning" in err and "training.steps" in err and "--allow-config-change" in err
    steps = [row["step"] for row in _jsonl(run / "metrics.jsonl")]
    assert steps == [0, 1, 2, 3]  # step 0: the evaluation before training, not repeated
    assert main(["train", "--resume", str(run), "--output-dir", str(tmp_path / "x"), *args]) == 2
    assert "name one run directory" in capsys.readouterr().err
