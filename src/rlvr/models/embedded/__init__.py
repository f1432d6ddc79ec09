"""The embedded base model: a ~0.5M-parameter Llama pretrained on 3-digit addition.

It ships inside the package (`base/`), so `rlvr train` needs no download. See
docs/embedded-model.md for what it was trained on and what it measures.
"""

from __future__ import annotations

import sys
from pathlib import Path

EMBEDDED_MODEL_NAME = "embedded:addition"
EMBEDDED_MODEL_VERSION = "1"
_SHIPPED_DIR = Path(__file__).resolve().parent / "base"
_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def _is_complete(path: Path) -> bool:
    return all((path / name).is_file() for name in _REQUIRED_FILES)


def embedded_model_path() -> Path:
    """Directory of the embedded base model, loadable with `AutoModelForCausalLM.from_pretrained`.

    The shipped weights are used when present. Otherwise (e.g. a checkout without the binary
    artefacts) the model is rebuilt once, in a few minutes, into
    ~/.cache/rlvr/embedded-<version> and that directory is returned.
    """
    if _is_complete(_SHIPPED_DIR):
        return _SHIPPED_DIR
    cache = Path.home() / ".cache" / "rlvr" / f"embedded-{EMBEDDED_MODEL_VERSION}"
    if not _is_complete(cache):
        from rlvr.models.embedded import build

        print(
            f"rlvr: embedded model weights missing from {_SHIPPED_DIR}; "
            f"building them into {cache} (a few minutes on a CPU)",
            file=sys.stderr,
        )
        build.main(["--out", str(cache)])
    return cache


__all__ = ["EMBEDDED_MODEL_NAME", "EMBEDDED_MODEL_VERSION", "embedded_model_path"]
