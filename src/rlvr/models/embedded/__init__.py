"""The embedded models: tiny Llamas pretrained from scratch, shipped in the package.

- `base/` (model name "embedded"): 0.67M parameters (8 heads of 32 over hidden 128), pretrained
  on 3-digit addition; the model `rlvr train` starts from.
- `small/` ("embedded-small"): 0.14M parameters (hidden 64, 4 heads), pretrained the same way;
  the default student of `rlvr distill`, smaller than its teacher.
- `tools/` ("embedded-tools"): the base architecture pretrained on 3-digit x 2-digit
  multiplication, answered directly (wrong) or, rarely, with a `<python>` tool call (right);
  the model of examples/tools.yaml.

None needs a download. See docs/embedded-model.md for what they were trained on and measure.
"""

from __future__ import annotations

import sys
from pathlib import Path

EMBEDDED_MODEL_NAME = "embedded:addition"
EMBEDDED_MODEL_VERSION = "2"  # 2: heads of 32 (vLLM's CPU kernels need >= 32), was 8 x 16
_HERE = Path(__file__).resolve().parent
# variant -> build.py arguments beyond --out (the shipped weights were built with exactly these)
VARIANTS: dict[str, list[str]] = {
    "base": ["--set", "head_dim=32"],
    "small": ["--threads", "1"]
    + ["--set", "hidden_size=64", "--set", "intermediate_size=256", "--set", "num_heads=4"],
    "tools": ["--task", "tools", "--set", "head_dim=32"],
}
_REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def _is_complete(path: Path) -> bool:
    return all((path / name).is_file() for name in _REQUIRED_FILES)


def embedded_model_path(variant: str = "base") -> Path:
    """Directory of an embedded model, loadable with `AutoModelForCausalLM.from_pretrained`.

    The shipped weights are used when present. Otherwise (e.g. a checkout without the binary
    artefacts) the model is rebuilt once, in a few minutes, into
    ~/.cache/rlvr/embedded-<variant>-<version> and that directory is returned.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown embedded model variant {variant!r}; expected one of {VARIANTS}")
    shipped = _HERE / variant
    if _is_complete(shipped):
        return shipped
    suffix = "" if variant == "base" else f"-{variant}"
    cache = Path.home() / ".cache" / "rlvr" / f"embedded{suffix}-{EMBEDDED_MODEL_VERSION}"
    if not _is_complete(cache):
        from rlvr.models.embedded import build

        print(
            f"rlvr: embedded model weights missing from {shipped}; "
            f"building them into {cache} (a few minutes on a CPU)",
            file=sys.stderr,
        )
        build.main(["--out", str(cache), *VARIANTS[variant]])
    return cache


__all__ = ["EMBEDDED_MODEL_NAME", "EMBEDDED_MODEL_VERSION", "embedded_model_path"]
