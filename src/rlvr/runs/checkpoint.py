"""Saving models in HF save_pretrained format, atomically (a temp dir renamed into place), and
resumable training checkpoints."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from rlvr.errors import UserError


class CheckpointError(UserError):
    """A checkpoint could not be written (e.g. the disk is full); earlier ones are intact."""


def save_model(model: Any, tokenizer: Any, path: Path) -> None:
    """Write `model` and `tokenizer` to `path` so AutoModelForCausalLM can load it.

    A LoRA model is written merged (plain HF weights) with its adapter alone in `path/adapter`.
    A model loaded from GGUF (which transformers refuses to save) is copied into a fresh model
    of the same config first. The files go to a sibling temp dir; a crash mid-save leaves no
    half-written model.
    """
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    _write_model(model, tokenizer, tmp)
    _fsync_tree(tmp)
    if path.exists():
        old = path.with_name(path.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        path.rename(old)
        tmp.rename(path)
        shutil.rmtree(old)
    else:
        tmp.rename(path)


def _write_model(model: Any, tokenizer: Any, directory: Path) -> None:
    from rlvr.models.saving import write_pretrained

    write_pretrained(model, tokenizer, directory)


def _fsync_tree(directory: Path) -> None:
    """Flush every file below `directory`, and the directory entries, to disk."""
    for root, _dirs, files in os.walk(directory):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(root))


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


# --- resumable training checkpoints -------------------------------------------------------------
#
# RUN_DIR/checkpoints/step-N/ holds the model in HF format (loadable on its own) plus
# trainer_state.pt: the exact weights being trained (for LoRA, base + adapters), optimizer,
# scheduler, step, every RNG, the data position and the diagnostics history, so a resumed run
# continues bit-for-bit where it stopped. The whole checkpoint is written into step-N.tmp/,
# fsync'd, then renamed to step-N/ (one atomic rename): a crash at any moment leaves either the
# complete new checkpoint or none, and the earlier ones are never touched before it is complete.

CHECKPOINTS = "checkpoints"
STATE_FILE = "trainer_state.pt"


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: Any,
    tokenizer: Any,
    state: dict,
    keep_last: int,
    *,
    weights_in_state: bool = True,
) -> Path:
    """Write checkpoints/step-`step`; keep only the newest `keep_last` complete ones.

    With `weights_in_state` the exact trained state_dict (LoRA: base + adapters) goes into
    trainer_state.pt as "model"; without it a resume reloads the HF files of the checkpoint.
    A failed write (a full disk) removes its partial files and raises CheckpointError; the
    earlier checkpoints are untouched.
    """
    import torch

    root = Path(run_dir) / CHECKPOINTS
    path = root / f"step-{step}"
    tmp = root / f"step-{step}.tmp"
    root.mkdir(parents=True, exist_ok=True)
    payload = {"step": step, **state}
    if weights_in_state:
        payload["model"] = model.state_dict()
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        _write_model(model, tokenizer, tmp)
        torch.save(payload, tmp / STATE_FILE)
        _fsync_tree(tmp)
        if path.exists():  # a rerun of the same step (resume after a crash right after it)
            shutil.rmtree(path)
        tmp.rename(path)
        _fsync_dir(root)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        kept = [p.name for p in list_checkpoints(run_dir)]
        raise CheckpointError(
            f"checkpoint {path}: could not be written ({e.strerror or e}); "
            f"earlier checkpoints are intact: {', '.join(kept) or 'none'}"
        ) from None
    for old in list_checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(old)
    return path


def incomplete_checkpoints(run_dir: Path) -> list[str]:
    """Names of checkpoint directories a crash left unfinished (ignored by resume)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    complete = {p.name for p in list_checkpoints(run_dir)}
    return sorted(p.name for p in root.iterdir() if p.is_dir() and p.name not in complete)


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints (with trainer_state.pt), oldest first."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        name = p.name
        if name.startswith("step-") and name[5:].isdigit() and (p / STATE_FILE).is_file():
            found.append((int(name[5:]), p))
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load_checkpoint_state(path: Path) -> dict:
    import torch

    return torch.load(Path(path) / STATE_FILE, map_location="cpu", weights_only=False)


def rng_state(python_rngs: dict[str, Any], torch_gens: dict[str, Any]) -> dict:
    """RNG states to store: random.Random objects and torch.Generators by name, plus the global
    python, numpy and torch (and CUDA) generators."""
    import random

    import numpy as np
    import torch

    state = {
        "python": {k: r.getstate() for k, r in python_rngs.items()},
        "torch_gens": {k: g.get_state() for k, g in torch_gens.items()},
        "torch_global": torch.get_rng_state(),
        "python_global": random.getstate(),
        "numpy_global": np.random.get_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict, python_rngs: dict[str, Any], torch_gens: dict[str, Any]):
    import torch

    for k, r in python_rngs.items():
        r.setstate(state["python"][k])
    import random

    import numpy as np

    for k, g in torch_gens.items():
        if k in state["torch_gens"]:  # a generator added since the checkpoint keeps its seed
            g.set_state(state["torch_gens"][k])
    torch.set_rng_state(state["torch_global"])
    if "python_global" in state:
        random.setstate(state["python_global"])
        np.random.set_state(state["numpy_global"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# Config keys that change how fast a run computes, not what it computes.
RESULT_NEUTRAL_KEYS = frozenset({"training.keep_freed_memory", "training.map_large_blocks_from"})


def check_same_config(
    config: dict,
    run_dir: Path,
    *,
    allow_change: bool = False,
    warn: Any = print,
    defaults: dict | None = None,
    normalise: Any = None,
) -> None:
    """Resuming with another config would not reach the run's result: name the differing keys.

    `logging.*` keys may differ (where metrics go does not change the weights), and so may
    `RESULT_NEUTRAL_KEYS`, also when the run's config.yaml predates them. A key the run's
    config.yaml predates is the same when it now holds its default (`defaults`: the schema's
    default tree), as the run behaved before the key existed. `normalise` (a tree -> tree
    function) is applied to the recorded tree before comparing: the relative paths of a run
    recorded before they were made absolute (`rlvr.runs.run_dir.absolute_paths`). With
    `allow_change` (--allow-config-change) the difference is passed to `warn` instead.
    """
    from rlvr.config import read_yaml

    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise UserError(f"--resume: {path} not found; nothing to resume")
    saved = read_yaml(path, f"--resume: {path}") or {}
    if not isinstance(saved, dict):
        raise UserError(f"--resume: {path}: expected a mapping of config sections")
    saved = _flat(normalise(saved) if normalise is not None else saved)
    now = _flat(config)
    diff = [k for k in sorted(set(saved) | set(now)) if saved.get(k) != now.get(k)]
    diff = [k for k in diff if not k.startswith("logging.") and k not in RESULT_NEUTRAL_KEYS]
    default = _flat(defaults or {})
    diff = [k for k in diff if k in saved or k not in default or now.get(k) != default[k]]
    if diff:
        k = diff[0]
        what = (
            f"--resume: the config differs from {path} at {', '.join(diff[:5])} "
            f"({k}: run has {saved.get(k)!r}, now {now.get(k)!r})"
        )
        if not allow_change:
            raise UserError(f"{what}; resume with the same config")
        warn(f"warning: {what}; continuing (--allow-config-change)")


def _flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def truncate_jsonl(path: Path, last_step: int) -> None:
    """Drop rows with "step" > last_step (a resumed run rewrites the steps after its checkpoint)."""
    import json

    path = Path(path)
    if not path.is_file():
        return
    keep = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by the crash
        if row.get("step", 0) <= last_step:
            keep.append(line)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in keep))
    tmp.replace(path)
