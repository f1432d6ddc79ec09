"""Saving models in HF save_pretrained format, atomically (a temp dir renamed into place)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any


def save_model(model: Any, tokenizer: Any, path: Path) -> None:
    """Write `model` and `tokenizer` to `path` so AutoModelForCausalLM can load it.

    The files go to a sibling temp dir first; a crash mid-save leaves no half-written model.
    """
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    if path.exists():
        old = path.with_name(path.name + ".old")
        if old.exists():
            shutil.rmtree(old)
        path.rename(old)
        tmp.rename(path)
        shutil.rmtree(old)
    else:
        tmp.rename(path)
