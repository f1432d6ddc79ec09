"""The generation side of the configuration tree: the `rollout` (engines, sampling, staleness),
`reward` (verifier, its workers, shaping) and `environment` (multi-turn tools) sections. Part of
`rlvr.config.tree`'s `Config`; every name is importable from `rlvr.config`."""

from __future__ import annotations

from dataclasses import dataclass

from rlvr.config.fields import option


@dataclass
class RewardConfig:
    verifier: str = option(
        "exact_answer",
        "exact_answer, math, code, format, language, countdown, gym, 'module:function', "
        "'path/file.py:function', a TRL reward function ('trl:file.py:function', or detected "
        "from its signature), or a weighted sum like 'math:1.0,format:0.1'; from Python also "
        "a function or a list of functions and (function, weight) pairs",
        from_python="a function, or a list of functions, names and (function, weight) pairs",
    )
    rm_batch_size: int = option(
        64,
        "rm:PATH components (learned reward models, rlvr train only): sequences scored per "
        "forward pass, on the learner's device",
        ge=1,
    )
    rm_normalize: str = option(
        "none",
        "rm:PATH components: none = the model's raw score; batch = z-scored over the "
        "completions scored together (a step's round), (s - mean) / std",
        choices=["none", "batch"],
    )
    workers: int = option(0, "verifier worker processes (0 = score in the trainer process)", ge=0)
    timeout_s: float = option(10.0, "per-sample limit in the worker pool, seconds", gt=0.0)
    overlong_buffer: int = option(
        0, "DAPO overlong shaping: penalty buffer before rollout.max_new_tokens (0 = off)", ge=0
    )
    overlong_penalty_factor: float = option(1.0, "DAPO overlong shaping: maximal penalty", ge=0.0)
    mask_truncated: bool = option(False, "drop truncated completions from the loss (DAPO)")
    mix_verifier: str | None = option(
        None,
        "the verifier of data.mix_path's prompts instead of reward.verifier: a learned reward "
        "'rm:PATH', an LLM judge 'judge:URL', or any reward.verifier spec",
    )
    # LLM judges: reward.verifier=judge:URL or judge:serve (docs/guides/judges.md). rlvr train
    # writes these into each judge item's settings (rlvr.rewards.judge.spec), where a setting
    # the item names itself wins.
    judge_model: str = option(
        "", "LLM judge: the model name sent in each request ('' = none: a one-model server)"
    )
    judge_rubric: str = option(
        "",
        "LLM judge: a rubric file with {prompt}, {completion} and {reference} placeholders "
        "('' = the built-in rubric, a 0-10 grade on a final 'SCORE: N' line)",
    )
    judge_format: str = option(
        "score_line",
        "LLM judge: how its answer states the score: score_line (the last line is 'SCORE: N'), "
        'json (the answer is {"score": N}), number (the answer is one number)',
        choices=["score_line", "json", "number"],
    )
    judge_max_score: float = option(
        10.0, "LLM judge: the top of its scale; reward = score / judge_max_score", gt=0.0
    )
    judge_timeout_s: float = option(
        30.0,
        "LLM judge: hard wall-clock limit per request, connecting, retries and a slow answer "
        "included, seconds (past it: reward 0, a verifier failure)",
        gt=0.0,
    )
    judge_concurrency: int = option(
        8, "LLM judge: requests in flight at once over a batch", ge=1, le=256
    )
    judge_retries: int = option(
        1,
        "LLM judge: new attempts after a connection error before any answer (refused, reset, "
        "closed), within judge_timeout_s",
        ge=0,
        le=10,
    )
    judge_max_tokens: int = option(512, "LLM judge: max_tokens of its answer", ge=1)
    judge_temperature: float = option(0.0, "LLM judge: sampling temperature", ge=0.0, le=2.0)
    judge_seed: int = option(0, "LLM judge: the seed sent with each request")
    judge_cache_size: int = option(
        4096,
        "LLM judge: answers to identical requests kept in memory for the run (LRU); 0 = off",
        ge=0,
    )
    judge_api_key_env: str = option(
        "",
        "LLM judge: the NAME of the environment variable holding its API key, sent as a "
        "bearer token ('' = none); the key itself never goes in a config",
    )
    judge_serve: str = option(
        "",
        "LLM judge: a model rlvr loads (embedded, a hub id, a run's final/) that rlvr train "
        "serves on 127.0.0.1 for the judge:serve items of reward.verifier",
    )


@dataclass
class RolloutConfig:
    engine: str = option(
        "fast",
        "generation engine: fast (static KV cache, prefix sharing, continuous batching; Llama, "
        "Mistral, Qwen2, else it falls back to hf), hf (the reference loop) or vllm (an "
        "in-process vLLM engine, the 'vllm' extra; docs/guides/vllm.md); docs/rollout.md",
        choices=["hf", "fast", "vllm"],
    )
    prompts_per_step: int = option(16, "prompts drawn per step", ge=1)
    group_size: int = option(8, "completions per prompt (G)", ge=1)
    temperature: float = option(1.0, "sampling temperature (0 = greedy)", ge=0.0)
    top_p: float = option(1.0, "nucleus sampling threshold (1 = off)", gt=0.0, le=1.0)
    top_k: int = option(0, "top-k sampling (0 = off)", ge=0)
    max_new_tokens: int = option(64, "completion length limit, tokens", ge=1)
    stop: list[str] = option([], "extra stop strings (EOS always stops)")
    max_batch_size: int = option(
        0,
        "rows decoded together (0 = auto: the rows of one step, prompts_per_step x group_size, "
        "so held-out evaluation decodes no more rows at once than a training rollout); "
        "docs/memory.md",
        ge=0,
    )
    max_prefill_tokens: int = option(
        4096,
        "fast engine: padded prompt tokens prefilled in one forward (at least one prompt); "
        "bounds the memory of prompt prefills",
        ge=1,
    )
    off_policy_steps: int = option(
        0,
        "0 = on-policy; 1 = generate the next batch while the current one trains (one step "
        "stale; docs/distributed.md), the same as rollout.max_staleness=1",
        ge=0,
        le=1,
    )
    max_staleness: int = option(
        0,
        "K > 0: batches are generated in the background, at most K updates stale (corrected by "
        "algorithm.token_correction); 0 = on-policy (docs/concepts/async-rl.md)",
        ge=0,
        le=64,
    )
    async_mode: str = option(
        "deterministic",
        "with max_staleness K: deterministic (batch s from the weights of update s-1-K) or free "
        "(a generator thread on the newest weights, at most K batches ahead)",
        choices=["deterministic", "free"],
    )
    async_unit: str = option(
        "batch",
        "async_mode=free: what the generator buffers. batch = whole batches; group = groups, "
        "streamed: the fast engine generates without batch boundaries, each group enters "
        "the buffer when its last completion ends, and a step trains on the prompts_per_step "
        "groups that finished first, so a slow group holds back only itself (needs "
        "partial_rollouts=true)",
        choices=["batch", "group"],
    )
    partial_rollouts: bool = option(
        False,
        "with max_staleness K: the generator takes the weights the learner publishes in the "
        "middle of a batch, at a token boundary, and continues the unfinished rows with them "
        "(free: as soon as published; deterministic: one update fresher at a fixed decode "
        "step, partial_switch_at; fast and vllm engines; the K/V cache is kept; "
        "docs/concepts/async-rl.md)",
    )
    partial_switch_at: int = option(
        16,
        "deterministic partial rollouts: the decode forward of a batch's generation at which "
        "it moves to the next version (waiting for it if need be)",
        ge=1,
    )
    dtype: str = option(
        "auto",
        "the rollout engine's weights and K/V cache: auto = the compute dtype of "
        "model.precision (bfloat16 under bf16-mixed, which a CPU's start-up probe chooses only "
        "where bf16 is faster), in the Ray mode the trained weights' own; a dtype other than "
        "the trained weights' decodes from a copy cast to it, synced before each rollout, and "
        "the update corrects for the sampler (docs/memory.md)",
        choices=["auto", "float32", "bfloat16"],
    )
    max_logprob_drift: float = option(
        0.1,
        "when the sampler is not the learner's own code (rollout.engine=vllm): a mean "
        "|log pi_learner - log pi_sampler| per token above this, on a batch drawn right after "
        "a weight sync, stops the run (the weights are probably not synced); 0 = off",
        ge=0.0,
    )
    vllm_kv_cache_gb: float = option(1.0, "vllm on a CPU: KV cache size, GiB", gt=0.0)
    vllm_gpu_memory_utilization: float = option(
        0.3,
        "vllm on CUDA: share of the GPU it may take, colocated with the learner",
        gt=0.0,
        le=1.0,
    )
    vllm_max_model_len: int = option(
        0, "vllm: longest prompt + completion, tokens (0 = the model's context length)", ge=0
    )
    vllm_sleep: bool = option(
        True, "vllm on CUDA: free its KV cache while the learner updates (sleep mode)"
    )

    @property
    def staleness(self) -> int:
        """K of the K-step schedule (0: on-policy); off_policy_steps=1 is K = 1."""
        return self.max_staleness or self.off_policy_steps


@dataclass
class EnvironmentConfig:
    name: str = option(
        "",
        "multi-turn rollouts: '' = none (single-turn), 'python' = a sandboxed python tool the "
        "model calls mid-reasoning, a user environment 'module:Class' / 'file.py:Class' "
        "(docs/guides/tools.md), or another library's: 'verifiers:ENV_ID', 'openenv:URL', "
        "'skyrl-gym:ENV_ID', 'textarena:ENV_ID' (docs/environments/)",
    )
    args: list[str] = option(
        [],
        "another library's environment: its loader's settings as KEY=VALUE items, values read "
        "as YAML, e.g. [num_examples=200,max_turns=3]",
    )
    max_turns: int = option(4, "model turns per completion (tool calls + 1)", ge=1)
    format: str = option(
        "tags",
        "python tool call format: tags (<python>..</python> -> <output>..</output>), fenced "
        "(```python blocks), hermes (<tool_call> JSON, output as a chat tool message)",
        choices=["tags", "fenced", "hermes"],
    )
    timeout_s: float = option(5.0, "python tool: wall-clock limit per call, seconds", gt=0.0)
    memory_mb: int = option(256, "python tool: address-space limit per process, MB", ge=32)
    max_output_chars: int = option(
        1000, "python tool: output shown to the model, characters", ge=16
    )
    workers: int = option(4, "environment steps (tool calls) run at once", ge=1)
