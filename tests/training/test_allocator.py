"""training.keep_freed_memory: freed blocks stay with the process for reuse, large ones are
mapped and returned when a run plans long rows (training.map_large_blocks_from); the trainers
apply the setting only when asked; resuming may change it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import rlvr.sft.trainer as sft
import rlvr.training.grpo as grpo
from rlvr.config import load_config, to_dict
from rlvr.errors import UserError
from rlvr.runs.allocator import glibc_mallopt
from rlvr.runs.checkpoint import check_same_config

# In a child process, so the setting does not leak into this one: how much of a 64 MiB block
# (allocated, touched and freed after the same was done a few times) leaves the resident set
# when it is freed. glibc's default serves it with an mmap that free() unmaps; kept, the block
# stays in the heap for later allocations to reuse. (Whether the very next allocation reuses it
# depends on what was allocated around it, so page faults per allocation are not asserted here;
# the trainer's steady state is measured in docs/training-speed.md, item 9.)
_RELEASED_MIB = textwrap.dedent(
    """
    import sys
    import torch
    from rlvr.runs.allocator import keep_freed_memory
    if sys.argv[1] == "keep":
        assert keep_freed_memory() and keep_freed_memory()  # idempotent
    elif sys.argv[1] == "map":  # switched after the all-heap setting, as a second run would
        assert keep_freed_memory() and keep_freed_memory(map_large_blocks=True)
    n = int(sys.argv[2]) // 4 if len(sys.argv) > 2 else 16 * 2**20  # floats
    def resident_mib():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 // 2**20
    for _ in range(3):
        torch.ones(n).sum()
    block = torch.ones(n)
    held = resident_mib()
    del block
    print(held - resident_mib())
    """
)


def _released_mib(mode: str, nbytes: int = 64 * 2**20) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _RELEASED_MIB, mode, str(nbytes)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(glibc_mallopt() is None, reason="glibc malloc settings: Linux/glibc only")
def test_a_freed_block_stays_with_the_process_for_reuse():
    assert _released_mib("default") >= 60  # unmapped: its pages fault again when reallocated
    assert _released_mib("keep") <= 4


@pytest.mark.slow
@pytest.mark.skipif(glibc_mallopt() is None, reason="glibc malloc settings: Linux/glibc only")
def test_with_long_rows_large_blocks_go_back_and_small_ones_stay():
    from rlvr.runs.allocator import LARGE_BLOCK

    assert _released_mib("map") >= 60  # 64 MiB >= LARGE_BLOCK: unmapped when freed
    small = LARGE_BLOCK // 2  # from the kept heap, as without long rows
    assert _released_mib("map", small) <= 1


@pytest.mark.parametrize(
    "max_new_tokens, from_tokens, mapped", [(16, 2048, False), (16, 16, True), (16, 0, False)]
)
def test_the_trainer_maps_large_blocks_only_for_long_rows(
    train_embedded, monkeypatch, max_new_tokens, from_tokens, mapped
):
    calls = []
    monkeypatch.setattr(grpo, "keep_freed_memory", lambda *a: calls.append(a) or True)
    train_embedded(
        "run",
        "training.steps=1",
        f"rollout.max_new_tokens={max_new_tokens}",
        f"training.map_large_blocks_from={from_tokens}",
    )
    assert calls == [(mapped,)]


@pytest.mark.parametrize("enabled", [True, False])
def test_the_trainer_keeps_freed_memory_only_when_asked(train_embedded, monkeypatch, enabled):
    calls = []
    monkeypatch.setattr(grpo, "keep_freed_memory", lambda *_: calls.append(1) or True)
    train_embedded("run", "training.steps=1", f"training.keep_freed_memory={enabled}")
    assert calls == ([1] if enabled else [])


def test_resuming_may_change_the_setting_or_predate_it(tmp_path):
    import yaml

    saved = to_dict(load_config(None, []))
    del saved["training"]["keep_freed_memory"]  # a run from before the keys existed
    del saved["training"]["map_large_blocks_from"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    for value in (True, False):
        check_same_config(
            to_dict(load_config(None, [f"training.keep_freed_memory={value}"])), tmp_path
        )
    check_same_config(to_dict(load_config(None, ["training.map_large_blocks_from=16"])), tmp_path)
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


def test_a_key_the_run_predates_matches_only_while_it_holds_its_default(tmp_path):
    import yaml

    saved = to_dict(load_config(None, []))
    del saved["algorithm"]["policy_loss"]  # a run from before the key existed
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    defaults = to_dict(load_config(None, []))
    check_same_config(to_dict(load_config(None, [])), tmp_path, defaults=defaults)
    with pytest.raises(UserError, match="algorithm.policy_loss"):
        check_same_config(
            to_dict(load_config(None, ["algorithm.policy_loss=cispo"])),
            tmp_path,
            defaults=defaults,
        )
    with pytest.raises(UserError, match="algorithm.policy_loss"):  # no defaults: any new key
        check_same_config(to_dict(load_config(None, [])), tmp_path)
