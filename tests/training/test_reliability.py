"""Surviving crashes: SIGKILL at any point then --resume gives the same result bit for bit,
a crash mid-checkpoint falls back to the previous one, a full disk keeps earlier checkpoints,
SIGTERM saves and says how to resume."""

import errno
import hashlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.config import load_config
from rlvr.runs import checkpoint
from rlvr.training.grpo import GRPOTrainer

ARGS = [
    "rollout.prompts_per_step=4",
    "rollout.group_size=4",
    "rollout.max_new_tokens=16",
    "eval.size=0",
    "logging.samples_every=0",
    "optimizer.warmup_steps=0",
    "checkpoint.deterministic=true",
]


def _cli(run: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rlvr.cli",
        "train",
        "--quiet",
        "--output-dir",
        str(run),
        *ARGS,
        *extra,
    ]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    t0 = time.monotonic()
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"run ended (rc {proc.returncode}) before {path} appeared")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            raise AssertionError(f"{path} did not appear in {timeout} s")
        time.sleep(0.01)


@pytest.mark.slow
@pytest.mark.parametrize(
    "schedule",
    [
        [],
        ["rollout.max_staleness=2"],
        ["rollout.max_staleness=3", "rollout.partial_rollouts=true", "rollout.partial_switch_at=4"],
    ],
    ids=["on-policy", "k-step-deterministic", "k-step-partial"],
)
def test_sigkill_then_resume_matches_an_uninterrupted_run_bit_for_bit(tmp_path, schedule):
    """K-step deterministic too: the checkpoint holds the batches already handed to the
    background worker, so the resumed run trains on exactly the uninterrupted run's; with
    partial rollouts a checkpoint publishes the weights a pending batch waits to switch to."""
    steps = ["training.steps=6", "checkpoint.every=2", *schedule]
    straight = tmp_path / "straight"
    subprocess.run(_cli(straight, *steps), check=True, capture_output=True)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(_cli(killed, *steps), stderr=subprocess.PIPE)
    _wait_for(killed / "checkpoints" / "step-2" / "trainer_state.pt", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (killed / "final").exists()
    done = subprocess.run(_cli(killed, *steps, "--resume"), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

    assert _sha(killed / "final" / "model.safetensors") == _sha(
        straight / "final" / "model.safetensors"
    )
    a = (straight / "metrics.jsonl").read_text().splitlines()
    b = (killed / "metrics.jsonl").read_text().splitlines()
    assert a == b and len(a) == 6  # every line, the last one included, identical
    assert "time_generate_s" in json.loads((killed / "timings.jsonl").read_text().splitlines()[0])


def test_a_crash_while_writing_a_checkpoint_resumes_from_the_previous_one(
    tmp_path, monkeypatch, capsys
):
    args = [
        *ARGS,
        "training.steps=4",
        "checkpoint.every=2",
        "checkpoint.keep_last=3",
        "rollout.max_new_tokens=8",
    ]
    straight = tmp_path / "straight"
    assert main(["train", "--quiet", "--output-dir", str(straight), *args]) == 0

    run = tmp_path / "run"
    run.mkdir()
    trainer = GRPOTrainer(load_config(None, args), run, progress=False, log=lambda _m: None)
    real = checkpoint._fsync_tree

    class Died(BaseException):
        pass

    def die_during_step_4(directory):
        if directory.name == "step-4.tmp":
            raise Died  # the process dies with the checkpoint half written
        return real(directory)

    monkeypatch.setattr(checkpoint, "_fsync_tree", die_during_step_4)
    with pytest.raises(Died):
        trainer.train()
    monkeypatch.setattr(checkpoint, "_fsync_tree", real)
    assert [p.name for p in checkpoint.list_checkpoints(run)] == ["step-2"]
    assert checkpoint.incomplete_checkpoints(run) == ["step-4.tmp"]

    assert main(["train", "--resume", "--output-dir", str(run), *args]) == 0
    err = capsys.readouterr().err
    assert "ignoring incomplete checkpoint(s) left by a crash: step-4.tmp" in err
    assert "resumed from checkpoint at step 2" in err
    assert _sha(run / "final" / "model.safetensors") == _sha(
        straight / "final" / "model.safetensors"
    )
    assert checkpoint.incomplete_checkpoints(run) == []  # step 4 was written again, whole


def test_a_full_disk_during_a_save_keeps_earlier_checkpoints_and_says_so(
    tmp_path, monkeypatch, capsys
):
    import torch

    real_save = torch.save

    def full_disk_at_step_4(obj, f, *a, **k):
        if isinstance(obj, dict) and obj.get("step") == 4:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", full_disk_at_step_4)
    run = tmp_path / "run"
    args = [*ARGS, "training.steps=6", "checkpoint.every=2", "rollout.max_new_tokens=8"]
    assert main(["train", "--quiet", "--output-dir", str(run), *args]) == 2
    err = capsys.readouterr().err
    assert "could not be written (No space left on device)" in err
    assert "earlier checkpoints are intact: step-2" in err
    assert len(err.strip().splitlines()) == 1
    assert [p.name for p in checkpoint.list_checkpoints(run)] == ["step-2"]
    assert checkpoint.incomplete_checkpoints(run) == []  # the partial step-4 was removed
    monkeypatch.setattr(torch, "save", real_save)
    state = checkpoint.load_checkpoint_state(run / "checkpoints" / "step-2")
    assert state["step"] == 2


@pytest.mark.slow
def test_sigterm_finishes_the_step_saves_a_checkpoint_and_says_how_to_resume(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(_cli(run, "training.steps=200"), stderr=subprocess.PIPE, text=True)
    _wait_for(run / "metrics.jsonl", proc)
    while not (run / "metrics.jsonl").read_text().strip():
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM
    assert "SIGTERM: stopped after step" in err and "rlvr train --resume --output-dir" in err
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    assert [p.name for p in checkpoint.list_checkpoints(run)] == [f"step-{last}"]
    assert last < 200


def test_out_of_memory_in_generation_retries_with_smaller_batches(tmp_path):
    import torch

    args = [*ARGS, "training.steps=2", "rollout.max_new_tokens=8", "rollout.max_batch_size=64"]
    messages = []
    trainer = GRPOTrainer(load_config(None, args), tmp_path, progress=False, log=messages.append)
    real = trainer.engine.generate
    sizes = []

    def fits_only_8_rows(*a, **k):
        sizes.append(trainer.engine.max_batch_size)
        if trainer.engine.max_batch_size > 8:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(*a, **k)

    trainer.engine.generate = fits_only_8_rows
    summary = trainer.train().summary
    assert summary["steps"] == 2
    assert sizes == [64, 32, 16, 8, 8]  # halved until it fits, then kept for the rest of the run
    oom = [m for m in messages if "[oom]" in m]
    assert len(oom) == 3 and "rollout.max_batch_size=8" in oom[-1]
    rows = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 2


def _nan_from(monkeypatch, trainer, steps):
    """Make the policy loss NaN on the given steps (as a numerical blow-up would)."""
    import rlvr.training.update as update_module

    real = update_module.aggregate_loss

    def maybe_nan(*a, **k):
        loss = real(*a, **k)
        return loss * float("nan") if trainer.step in steps else loss

    monkeypatch.setattr(update_module, "aggregate_loss", maybe_nan)


def test_a_nan_loss_skips_that_update_and_the_run_goes_on(tmp_path, monkeypatch):
    import torch

    args = [*ARGS, "training.steps=3", "rollout.max_new_tokens=8"]
    messages = []
    trainer = GRPOTrainer(load_config(None, args), tmp_path, progress=False, log=messages.append)
    _nan_from(monkeypatch, trainer, {2})
    trainer.train()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["skipped_updates"] for r in rows] == [0, 1, 0]
    assert any("warning [nonfinite] step 2" in m for m in messages)
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_repeated_nan_updates_abort_with_the_last_good_checkpoint_intact(
    tmp_path, monkeypatch, capsys
):
    import torch

    args = [
        *ARGS,
        "training.steps=8",
        "checkpoint.every=1",
        "checkpoint.keep_last=10",
        "rollout.max_new_tokens=8",
        "training.max_consecutive_skips=2",
    ]
    run = tmp_path / "run"
    run.mkdir()
    trainer = GRPOTrainer(load_config(None, args), run, progress=False, log=lambda _m: None)
    _nan_from(monkeypatch, trainer, set(range(3, 9)))
    with pytest.raises(Exception, match="2 consecutive updates had a NaN/inf") as info:
        trainer.train()
    assert "checkpoints/step-3" in str(info.value)  # steps 3 and 4 skipped: abort at step 4
    rows = (run / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 4  # the aborting step's row is written too
    state = checkpoint.load_checkpoint_state(run / "checkpoints" / "step-3")
    assert all(torch.isfinite(v).all() for v in state["model"].values())


HOSTILE_VERIFIER = """
import os, signal, time

def hostile(completion, sample):
    kind = len(completion) % 3
    if kind == 0:
        time.sleep(60)  # hangs: killed at reward.timeout_s
    if kind == 1:
        os.kill(os.getpid(), signal.SIGSEGV)  # its worker process dies
    return 1.0
"""


def test_a_hanging_and_a_segfaulting_verifier_do_not_stop_training(tmp_path, tiny_model_dir):
    verifier = tmp_path / "hostile.py"
    verifier.write_text(HOSTILE_VERIFIER)
    run = tmp_path / "run"
    args = [
        f"model.name_or_path={tiny_model_dir}",
        f"reward.verifier={verifier}:hostile",
        "reward.workers=2",
        "reward.timeout_s=0.5",
        "rollout.prompts_per_step=2",
        "rollout.group_size=4",
        "rollout.max_new_tokens=6",
        "training.steps=2",
        "eval.size=0",
        "logging.samples_every=0",
    ]
    assert main(["train", "--quiet", "--output-dir", str(run), *args]) == 0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    failures = sum(r["verifier_failures"] for r in rows)
    assert 0 < failures < 16  # hung and crashed samples scored 0 and counted, the rest scored
    assert (run / "final" / "model.safetensors").is_file()


def test_time_based_checkpoints(tmp_path):
    run = tmp_path / "run"
    args = [
        *ARGS,
        "training.steps=3",
        "rollout.max_new_tokens=8",
        "checkpoint.every_minutes=0.00001",
        "checkpoint.keep_last=5",
    ]
    assert main(["train", "--quiet", "--output-dir", str(run), *args]) == 0
    # every step outlasts 0.6 ms, so each one is followed by a save
    assert [p.name for p in checkpoint.list_checkpoints(run)] == ["step-1", "step-2", "step-3"]


@pytest.mark.slow
def test_sft_on_sigterm_finishes_the_step_saves_a_checkpoint_and_resumes_to_the_same_weights(
    tmp_path,
):
    sft = ["training.batch_size=8", "eval.size=0", "checkpoint.deterministic=true"]
    full = tmp_path / "full"
    assert main(["sft", "--quiet", "--output-dir", str(full), *sft, "training.max_steps=30"]) == 0
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "rlvr.cli", "sft", "--quiet", "--output-dir", str(run), *sft]
    proc = subprocess.Popen([*cmd, "training.max_steps=30"], stderr=subprocess.PIPE, text=True)
    _wait_for(run / "metrics.jsonl", proc)
    while not (run / "metrics.jsonl").read_text().strip():
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM: stopped after step" in err and "rlvr sft --resume --output-dir" in err
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    assert [p.name for p in checkpoint.list_checkpoints(run)] == [f"step-{last}"]
    if last < 30:  # the run stopped early: continue it
        resume = ["sft", "--quiet", "--resume", str(run), *sft, "training.max_steps=30"]
        assert main(resume) == 0
    weights = "final/model.safetensors"
    assert _sha(run / weights) == _sha(full / weights)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 31))


@pytest.mark.parametrize("text", ["training: [", "training:\n  steps: !!int\n", "- a\n"])
def test_a_damaged_config_yaml_in_the_resumed_run_is_a_one_line_error(tmp_path, text):
    from rlvr.config import to_dict
    from rlvr.errors import UserError

    (tmp_path / "config.yaml").write_text(text)
    with pytest.raises(UserError) as info:
        checkpoint.check_same_config(to_dict(load_config(None, [])), tmp_path)
    assert str(tmp_path / "config.yaml") in str(info.value)
    assert "\n" not in str(info.value)
