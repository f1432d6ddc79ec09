"""The configuration tree of `rlvr serve` (docs/guides/serve.md): the model, the rollout engine
that generates for it, and the server's request defaults and limits."""

from __future__ import annotations

from dataclasses import dataclass, field

from rlvr.config import ModelConfig, option, validate_model


@dataclass
class ServeRolloutConfig:
    """The engine's options, named as in a training config's rollout section (the keys
    `rlvr.rollout.engines.engine_options` reads)."""

    engine: str = option(
        "fast",
        "generation engine: fast (Llama, Mistral, Qwen2, else it falls back to hf), hf (the "
        "reference loop) or vllm (in-process vLLM, the 'vllm' extra); docs/rollout.md",
        choices=["hf", "fast", "vllm"],
    )
    max_batch_size: int = option(
        64, "rows (prompts x n) decoded together; a request with more runs in turns", ge=1
    )
    max_prefill_tokens: int = option(
        4096,
        "fast engine: padded prompt tokens prefilled in one forward (at least one prompt)",
        ge=1,
    )
    vllm_kv_cache_gb: float = option(1.0, "vllm on a CPU: KV cache size, GiB", gt=0.0)
    vllm_gpu_memory_utilization: float = option(
        0.8, "vllm on CUDA: share of the GPU it may take", gt=0.0, le=1.0
    )
    vllm_max_model_len: int = option(
        0,
        "vllm: longest prompt + completion, tokens (0 = the model's context length); also the "
        "server's context limit when set",
        ge=0,
    )
    vllm_sleep: bool = option(
        False, "vllm on CUDA: sleep mode (frees the KV cache between calls; off for serving)"
    )


@dataclass
class ServeSection:
    name: str = option(
        "", "the model name responses and /v1/models report ('' = model.name_or_path)"
    )
    max_tokens: int = option(
        0,
        "chat completions without max_tokens: at most this many new tokens (0 = the rest of "
        "the context window, as OpenAI does); completions without it get OpenAI's 16",
        ge=0,
    )
    max_n: int = option(64, "the largest n (completions per prompt) a request may ask", ge=1)
    seed: int = option(
        0,
        "seed of the server's generator: a request without `seed` takes one draw from it, so "
        "a fresh server answers the same unseeded requests in the same order the same way",
    )


@dataclass
class ServeConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: ServeRolloutConfig = field(default_factory=ServeRolloutConfig)
    serve: ServeSection = field(default_factory=ServeSection)

    def validate(self) -> None:
        """Checks that involve more than one field (called by load_config)."""
        validate_model(self.model)

    @property
    def served_name(self) -> str:
        return self.serve.name or self.model.name_or_path
