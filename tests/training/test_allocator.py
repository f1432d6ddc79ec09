"""training.keep_freed_memory: freed blocks are reused without page faults; the trainer applies
the setting only when asked and only for a policy on the CPU."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import rlvr.training.grpo as grpo
import rlvr.training.sft as sft
from rlvr.config import load_config, to_dict
from rlvr.errors import UserError
from rlvr.training.allocator import glibc_mallopt
from rlvr.training.checkpoint import check_same_config

# In a child process, so the setting does not leak into this one: the minor page faults of
# filling a 64 MiB tensor after the same allocation was made and freed a few times (the heap
# takes a few rounds to settle: the first blocks come from growing it).
_REFILL_FAULTS = textwrap.dedent(
    """
    import resource, sys
    import torch
    from rlvr.training.allocator import keep_freed_memory
    if sys.argv[1] == "keep":
        assert keep_freed_memory() and keep_freed_memory()  # idempotent
    n = 16 * 2**20  # floats: 64 MiB
    for _ in range(4):
        torch.ones(n).sum()  # allocated, touched, freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.ones(n).sum()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)


def _refill_faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _REFILL_FAULTS, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(glibc_mallopt() is None, reason="glibc malloc settings: Linux/glibc only")
def test_a_freed_block_is_reused_without_page_faults():
    pages = 64 * 2**20 // 4096
    # glibc's default: a 64 MiB block is an mmap that free() unmaps, so every page faults again
    assert _refill_faults("default") > pages // 2
    assert _refill_faults("keep") < pages // 20


@pytest.mark.parametrize("enabled", [True, False])
def test_the_trainer_keeps_freed_memory_only_when_asked(train_embedded, monkeypatch, enabled):
    calls = []
    monkeypatch.setattr(grpo, "keep_freed_memory", lambda: calls.append(1) or True)
    train_embedded("run", "training.steps=1", f"training.keep_freed_memory={enabled}")
    assert calls == ([1] if enabled else [])


def test_resuming_may_change_the_setting_or_predate_it(tmp_path):
    import yaml

    saved = to_dict(load_config(None, []))
    del saved["training"]["keep_freed_memory"]  # a run from before the key existed
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    for value in (True, False):
        check_same_config(
            to_dict(load_config(None, [f"training.keep_freed_memory={value}"])), tmp_path
        )
    with pytest.raises(UserError, match="optimizer.lr"):  # what changes results still counts
        check_same_config(to_dict(load_config(None, ["optimizer.lr=1e-3"])), tmp_path)


@pytest.mark.parametrize("enabled", [True, False])
def test_sft_keeps_freed_memory_only_when_asked(tmp_path, tiny_model_dir, monkeypatch, enabled):
    calls = []
    monkeypatch.setattr(sft, "keep_freed_memory", lambda: calls.append(1) or True)
    overrides = [
        f"model.name_or_path={tiny_model_dir}",
        "data.num_examples=8",
        "training.batch_size=8",
        "eval.size=0",
        f"training.keep_freed_memory={enabled}",
    ]
    cfg = load_config(None, overrides, schema=sft.SFTConfig)
    sft.run_sft(cfg, tmp_path / "run", log=lambda _: None, progress=False)
    assert calls == ([1] if enabled else [])
