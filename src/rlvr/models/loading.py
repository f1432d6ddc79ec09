"""Load any Hugging Face causal LM and its tokenizer, and turn task prompts into token ids."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.config import ModelConfig
from rlvr.data.fewshot import chat_turns, render_plain
from rlvr.errors import ModelLoadError, UserError
from rlvr.models import precision_probe
from rlvr.models.precision_probe import ProbeResult

EMBEDDED = "embedded"
EMBEDDED_SMALL = "embedded-small"
EMBEDDED_TOOLS = "embedded-tools"
# model name -> variant of rlvr.models.embedded (a directory shipped in the package)
EMBEDDED_VARIANTS = {EMBEDDED: "base", EMBEDDED_SMALL: "small", EMBEDDED_TOOLS: "tools"}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("model.device: 'cuda' requested but no CUDA device is available")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """fp32 on CPU by default: bf16 matmuls are ~100x slower than fp32 on common CPUs."""
    if name == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


@dataclass(frozen=True)
class Precision:
    """How `rlvr train` stores and computes the policy (model.precision, docs/memory.md).

    name     fp32 | bf16-mixed | bf16 | fp16 (the last from model.dtype=float16)
    weights  the dtype the trained weights are loaded in: AdamW steps these (fp32 masters under
             bf16-mixed), and its moments and the gradients follow them
    compute  the dtype the learner's forward passes run in under torch.autocast, or None for no
             autocast (the weights' own dtype)
    probe    model.precision=auto on a CPU: the start-up probe that chose `name`
    """

    name: str
    weights: torch.dtype
    compute: torch.dtype | None
    probe: ProbeResult | None = None

    def record(self) -> dict[str, Any]:
        """summary.json's and precision.json's keys: precision, and precision_probe (ratio,
        fp32_s, bf16_s, reason) when the probe decided."""
        out: dict[str, Any] = {"precision": self.name}
        if self.probe is not None:
            out["precision_probe"] = self.probe.as_dict()
        return out

    @classmethod
    def from_record(cls, record: Any, where: str) -> Precision:
        """The Precision a `record` (read from `where`) holds."""
        name = record.get("precision") if isinstance(record, dict) else None
        if name not in PRECISION_DTYPES:
            raise UserError(f"{where}: expected a precision of {', '.join(PRECISION_DTYPES)}")
        p = record.get("precision_probe")
        probed = None
        if isinstance(p, dict):
            probed = ProbeResult(
                name, p.get("ratio"), p.get("fp32_s"), p.get("bf16_s"), str(p.get("reason"))
            )
        return cls(name, *PRECISION_DTYPES[name], probed)

    def line(self) -> str | None:
        """The one line a run logs when the probe timed its choice; None otherwise."""
        if self.probe is None or self.probe.ratio is None:
            return None
        return f"precision: auto -> {self.name} ({self.probe.reason})"


PRECISION_DTYPES = {
    "fp32": (torch.float32, None),
    "bf16-mixed": (torch.float32, torch.bfloat16),
    "bf16": (torch.bfloat16, None),
    "fp16": (torch.float16, None),
}


def resolve_precision(cfg: ModelConfig, device: torch.device, *, probe: bool = True) -> Precision:
    """model.precision on `device` (`ModelConfig.training_precision`): auto = bf16-mixed on CUDA
    with bf16, or the pure layout of an explicit model.dtype; on a CPU, auto with model.dtype
    auto is what the start-up probe (rlvr.models.precision_probe) measures faster for the
    model's layer sizes, fp32 or bf16-mixed (with `probe=False`: fp32)."""
    bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    name = cfg.training_precision(device.type, bf16_supported=bf16)
    if not probe or device.type != "cpu" or (cfg.precision, cfg.dtype) != ("auto", "auto"):
        return Precision(name, *PRECISION_DTYPES[name])
    result = _probe(cfg)
    return Precision(result.choice, *PRECISION_DTYPES[result.choice], result)


def _probe(cfg: ModelConfig) -> ProbeResult:
    """The precision probe at the layer sizes of the model's config.json."""
    from transformers import AutoConfig

    path, extra = _source(cfg.name_or_path, cfg.gguf_file, cfg.trust_remote_code)
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=cfg.trust_remote_code, **extra)
    except (OSError, ValueError) as e:
        raise ModelLoadError(
            f"model.name_or_path: cannot read a config from '{path}': {_first_line(e)}"
        ) from None
    return precision_probe.probe(*precision_probe.layer_sizes(config))


def resolve_model_path(name_or_path: str, gguf_file: str | None = None) -> str:
    """'embedded' (and its siblings 'embedded-small', 'embedded-tools') -> a shipped tiny model;
    a path must exist; anything else is a hub id.

    With `gguf_file`, a local directory must hold that file instead of a config.json.
    """
    if name_or_path in EMBEDDED_VARIANTS:
        from rlvr.models.embedded import embedded_model_path

        return str(embedded_model_path(EMBEDDED_VARIANTS[name_or_path]))
    looks_like_path = (
        name_or_path.startswith((".", "/", "~"))
        or os.sep in name_or_path.strip("/").split("/", 1)[-1]
        or name_or_path.count("/") > 1
    )
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(
                f"model.name_or_path: {path} is a file; expected a model directory"
            )
        if gguf_file:
            if not (path / gguf_file).is_file():
                raise ModelLoadError(f"model.gguf_file: {path / gguf_file} not found")
            return str(path)
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"model.name_or_path: {path} has no config.json; expected a directory written by "
                "save_pretrained"
            )
        return str(path)
    if looks_like_path:
        raise ModelLoadError(f"model.name_or_path: directory {path} not found")
    return name_or_path


GGUF_CACHE_VERSION = 1  # bump when what a converted directory holds changes


def gguf_cache_root() -> Path:
    """Where converted GGUF files are kept: $RLVR_CACHE_DIR/gguf, by default
    ~/.cache/rlvr/gguf (beside the embedded model's rebuild)."""
    base = os.environ.get("RLVR_CACHE_DIR") or Path.home() / ".cache" / "rlvr"
    return Path(base).expanduser() / "gguf"


def _gguf_cache_dir(path: str, gguf_file: str) -> Path:
    """The cache directory of one GGUF file: named by its stem and a hash of its absolute path,
    size and modification time, the transformers version and GGUF_CACHE_VERSION, so a changed
    file or converter gets a directory of its own."""
    import hashlib

    import transformers

    source = (Path(path) / gguf_file).resolve()
    stat = source.stat()
    key = f"{source}|{stat.st_size}|{stat.st_mtime_ns}|{transformers.__version__}"
    digest = hashlib.sha256(f"{key}|{GGUF_CACHE_VERSION}".encode()).hexdigest()[:16]
    return gguf_cache_root() / f"{source.stem}-{digest}"


def converted_gguf(path: str, gguf_file: str, trust_remote_code: bool = False) -> Path | None:
    """A plain Hugging Face directory with `path/gguf_file`'s config, tokenizer and weights
    dequantized to float32, converted on first use and kept in `gguf_cache_root()`; None when
    the cache cannot be written (then the GGUF file is read directly, as transformers does).

    transformers converts a GGUF file on every load: its tokenizer (SmolLM2-135M: ~15 s) and
    its weights (~25 s). The directory loads in about a second, with the same tensors (float32
    dequantized once, as every load would) and the same tokenizer (written by save_pretrained,
    as rlvr writes any checkpoint of a GGUF model). Written under a temporary name and renamed,
    so processes converting at once (torchrun ranks) each see a whole directory."""
    import shutil
    import tempfile

    target = _gguf_cache_dir(path, gguf_file)
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.models.saving import write_pretrained

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    except OSError as e:
        warnings.warn(f"model.gguf_file: not caching the conversion ({e})", stacklevel=2)
        return None
    try:
        try:
            tokenizer = AutoTokenizer.from_pretrained(
                path, gguf_file=gguf_file, trust_remote_code=trust_remote_code
            )
            model: Any = AutoModelForCausalLM.from_pretrained(
                path, gguf_file=gguf_file, dtype=torch.float32, trust_remote_code=trust_remote_code
            )
        except Exception as e:  # the GGUF reader's errors for a file it cannot read are many
            raise ModelLoadError(
                f"model.gguf_file: cannot read {Path(path) / gguf_file}: {_first_line(e)}"
            ) from None
        model._rlvr_from_gguf = True
        try:
            write_pretrained(model, tokenizer, scratch)
            scratch.rename(target)
        except OSError as e:
            if (target / "config.json").is_file():  # another process renamed its copy first
                return target
            warnings.warn(f"model.gguf_file: not caching the conversion ({e})", stacklevel=2)
            return None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _source(name_or_path: str, gguf_file: str | None, trust_remote_code: bool) -> tuple[str, dict]:
    """(directory, from_pretrained keywords) to load a model or tokenizer from: a GGUF file's
    converted directory when it can be cached, else the file itself."""
    path = resolve_model_path(name_or_path, gguf_file)
    if not gguf_file:
        return path, {}
    converted = converted_gguf(path, gguf_file, trust_remote_code)
    if converted is None:
        return path, {"gguf_file": gguf_file}
    return str(converted), {}


def load_tokenizer(
    name_or_path: str, trust_remote_code: bool = False, gguf_file: str | None = None
) -> Any:
    from transformers import AutoTokenizer

    path, extra = _source(name_or_path, gguf_file, trust_remote_code)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            path, trust_remote_code=trust_remote_code, **extra
        )
    except (OSError, ValueError) as e:
        raise ModelLoadError(
            f"model.name_or_path: cannot load a tokenizer from '{path}': {_first_line(e)}"
        ) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    cfg: ModelConfig, device: torch.device, dtype: torch.dtype, *, train: bool = True
) -> Any:
    """An AutoModelForCausalLM on `device` in `dtype`; in train mode unless `train=False`."""
    from transformers import AutoModelForCausalLM

    path, extra = _source(cfg.name_or_path, cfg.gguf_file, cfg.trust_remote_code)
    try:
        model: Any = AutoModelForCausalLM.from_pretrained(  # a PEFT wrapper under LoRA
            path, dtype=dtype, trust_remote_code=cfg.trust_remote_code, **extra
        )
    except (OSError, ValueError) as e:
        raise ModelLoadError(
            f"model.name_or_path: cannot load a causal LM from '{path}': {_first_line(e)}"
        ) from None
    model.to(device)
    if extra.get("gguf_file"):
        model._rlvr_from_gguf = True  # transformers refuses save_pretrained; see checkpoint.py
    if cfg.lora_rank and train:
        from rlvr.models.lora import apply_lora

        model = apply_lora(model, cfg)
    if cfg.gradient_checkpointing and train:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    model.train(train)
    if not train:
        model.requires_grad_(False)
    return model


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def uses_chat_template(tokenizer: Any, mode: str) -> bool:
    has = bool(getattr(tokenizer, "chat_template", None))
    if mode == "always" and not has:
        raise ModelLoadError("model.chat_template: 'always' but the tokenizer has no chat template")
    return has if mode == "auto" else mode == "always"


@dataclass(frozen=True)
class PromptEncoder:
    """A task sample's prompt as the token ids a run sends to the model: `encode_prompt` with the
    sample's own system message (else the run's `system_prompt`), its few-shot examples and
    the tools declared to the chat template. One object, so the trainer, evaluation, rejection
    sampling and `rlvr estimate` encode a sample the same way."""

    tokenizer: Any
    chat: bool
    system_prompt: str | None = None
    tools: list[dict] | None = None

    def __call__(self, sample: Mapping[str, Any]) -> list[int]:
        return encode_prompt(
            self.tokenizer,
            sample["prompt"],
            chat=self.chat,
            system_prompt=sample.get("system") or self.system_prompt,
            tools=self.tools,
            shots=sample.get("shots"),
        )


def encode_prompt(
    tokenizer: Any,
    prompt: str,
    *,
    chat: bool,
    system_prompt: str | None = None,
    tools: list[dict] | None = None,
    shots: list[Mapping[str, str]] | None = None,
) -> list[int]:
    """Token ids of a prompt: through the chat template for instruct models, plain otherwise.

    Plain prompts get the tokenizer's BOS token when it adds one by default; chat templates
    carry their own special tokens, so nothing else is added. `tools` (JSON schemas of
    functions) are declared to a chat template that takes them (the python tool in its
    `hermes` format). `shots` (solved examples, `data.fewshot`: rlvr/data/fewshot.py) come
    before the question: as user/assistant turns after the system message, or as plain text.
    """
    if chat:
        messages = []
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        messages.extend(chat_turns(shots or []))
        messages.append({"role": "user", "content": prompt})
        extra = {"tools": tools} if tools else {}
        ids = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, **extra
        )
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return list(ids)
    return list(tokenizer(render_plain(shots or [], prompt))["input_ids"])
