"""Memory arithmetic of a run: what `rlvr estimate CONFIG` prints.

A run's memory is what stays resident plus the largest of three phases, each of which frees
what it allocated before the next begins (the fast engine's K/V buffers and weight copies are
released after every training rollout, the gradients after every optimizer step):

    total = runtime + weights + optimizer + reference + replica + critic + reward_model
            + max(generation, evaluation, update)

Per device, for a policy of N parameters (T of them trainable), L layers of hidden size h,
query width q (heads x head_dim), K/V width k (kv_heads x head_dim), MLP width f, vocabulary V;
a run of P prompt tokens (the longest held-out prompt as the policy encodes it), C new tokens,
G completions per prompt, R rows decoded together (rollout.max_batch_size, by default the rows
of one step):

  runtime         440 MiB           what a run holds besides its model (Python, torch,
                                    transformers, the verifiers, malloc's slack): the embedded
                                    default run peaks at 520 MiB, 82 MiB of it planned for its
                                    2.5 MB model; on a GPU read it as the CUDA context
  weights         N * b_w           b_w: 4 (fp32, and bf16-mixed: the fp32 masters) or 2 (pure
                                    bf16/fp16); LoRA: a frozen base of (N - T) * b_w, b_w = 2
                                    under bf16-mixed too, and T * 4 of fp32 adapters
  optimizer       T * 2 * b_t       AdamW's two moments in the trained weights' dtype b_t
                                    (b_w; LoRA: 4)
  reference       N * b_w           only with algorithm.kl_coef > 0 and without LoRA (LoRA's
                                    reference is the adapter-disabled policy: no copy)
  replica         N * b_r + c * N * b_w
                                    the replica the engine generates from (under FSDP, under
                                    background rollouts, and whenever b_r != b_w: a copy cast
                                    to rollout.dtype; b_r: 2 for bf16; auto: on CUDA 2 unless
                                    fp32, on a CPU b_w),
                                    plus c = K - 1 weight copies queued batches carry under
                                    rollout.max_staleness=K, and one more with FSDP when the
                                    replica is stale or cast (evaluation and saving gather
                                    into a whole copy of their own)

  critic          N_c * b_w + T_c * 2 * b_t
                                    algorithm.advantage=gae: the value model's weights and
                                    AdamW moments (N_c = the decoder's parameters + h + 1: no
                                    LM head; LoRA as the policy's); its update (gradients,
                                    compute copy, the policy's activations without the
                                    vocabulary blocks) runs after the policy's gradients are
                                    freed, so the update phase is the larger of the two

  reward_model    N_rm * b_i        each learned reward (`rm:PATH` in reward.verifier or
                                    reward.mix_verifier): its weights in the inference dtype
                                    b_i (model.dtype's: 4 on a CPU, 2 on CUDA); its forward
                                    passes' activations are not planned

  generation (and evaluation, with eval's length and samples): the engine's own memory, in
  b_r (evaluation: b_w when the replica is cast or stale: it decodes the trained weights)
  kv_cache        2 * L * k * ceil64(P + C) * R * b_w
                                    the fast engine's slot buffers (length rounded up to 64);
                                    vllm: rollout.vllm_kv_cache_gb
  prefill         T_p * (2 * L * k + 2h + 2q + 2k + 3f) * b_w
                                    one prefill's compact K/V and one layer's activations,
                                    T_p = P x (prompts per prefill: R / samples per prompt,
                                    at most rollout.max_prefill_tokens / P); hf: R * P
  weight_copies   L * h * (q + 2k + 2f) * b_w
                                    the fast engine's fused q/k/v and gate/up; on a CPU with
                                    h >= 512 in fp32 also oneDNN-packed o/down and head
                                    (L * h * (q + f) + V * h); vllm: its own N * b_w

  update: the largest micro-batch's forward and backward
  gradients       T * b_t
  compute_copy    T' * 2 (/ L)      bf16-mixed only (T' = N, LoRA: T): autocast's bf16 casts
                                    of the fp32 weights saved for the backward; one layer's
                                    with gradient checkpointing
  activations     S * L * (6h + 4q + 4f) * b_a + S * 3h * 4 (+ attention)
                                    S = packed tokens of the largest micro-batch: whole
                                    sequences of a prompt with its G completions (P + G * C,
                                    shared prompts; fewer completions when that exceeds
                                    training.token_budget), as many as the budget holds (at
                                    least one); 6h + 4q + 4f elements per token and layer is what
                                    autograd keeps (measured, `activation_elements`); b_a = 4
                                    in fp32, 2 under bf16; h * b_a per token and layer with
                                    gradient checkpointing; attention: the dense mask's
                                    S * W * 8 bytes where packed_attention=auto keeps it (up to
                                    width 384, or 4096 when G rows of P + C would attend over
                                    more pairs than W²), else the mask-free path's per-row
                                    copies of a shared prompt's keys
  backward        S * (2f + h) * b_a (+ S * (6h + 4q + 4f) * b_a)
                                    the backward's own tensors on top of the saved
                                    activations and the gradients (one layer's MLP and
                                    hidden-state gradients at a time: `backward_elements`);
                                    with gradient checkpointing also the layer's recomputed
                                    activations
  logits          16 MiB            the fused log-prob head's vocabulary blocks; the padded
                                    path (token_budget=0): rows * (P + C) * V * 8

With FSDP over W ranks, weights, gradients and optimizer state are divided by W.

Full fine-tuning with AdamW costs 16 bytes per trainable parameter in fp32 and in bf16-mixed
(weights 4 + gradients 4 + moments 8, plus the transient 2-byte compute copy), 8 in pure
bf16: a 7B model in bf16-mixed needs 108 GB for them alone.

Decision: the estimate is what rlvr itself would allocate for the configuration (precision
"auto" = model.precision as `rlvr train` resolves it: bf16-mixed on CUDA; on a CPU the layout
the start-up probe of rlvr.models.precision_probe measures faster here, at the model's shapes),
planned for the worst step (every completion at C tokens, every group with a signal), with
`--precision` to plan other layouts. Parameter counts come from building the model on the meta
device, so no weights are read or downloaded. benchmarks/memory.py measures it against runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PRECISIONS = ("auto", "fp32", "bf16-mixed", "bf16")  # model.precision's choices
LAYOUTS = ("fp32", "bf16-mixed", "bf16", "fp16")  # what auto resolves to (fp16: model.dtype)
GIB = 2**30


@dataclass
class ModelShape:
    num_parameters: int
    trainable_parameters: int
    num_layers: int
    hidden_size: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    num_heads: int = 1
    intermediate_size: int = 0  # 0: 4 x hidden

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def ffn(self) -> int:
        return self.intermediate_size or 4 * self.hidden_size

    @property
    def linear_weights(self) -> int:
        """Elements of the decoder layers' projections (q, k, v, o, gate, up, down)."""
        h = self.hidden_size
        return self.num_layers * h * (2 * self.q_dim + 2 * self.kv_dim + 3 * self.ffn)


@dataclass
class RunPlan:
    """What a run does, per rank, in the terms the memory model needs (`plan_of(cfg)`)."""

    prompt_tokens: int  # P: the longest prompt planned for
    max_new_tokens: int  # C: rollout.max_new_tokens
    prompts: int  # prompts per step per rank
    group_size: int  # G
    decoded_rows: int  # rows the engine decodes together (rollout.max_batch_size or auto)
    engine: str = "fast"
    max_prefill_tokens: int = 4096
    token_budget: int = 2048  # 0: padded micro-batches of micro_batch_rows rows
    micro_batch_rows: int = 64
    packed_attention: str = "auto"
    share_prompts: bool = True
    eval_new_tokens: int = 0  # 0: no evaluation; else its completion limit
    eval_samples: int = 1  # completions per held-out prompt in the widest evaluation pass
    replicas: int = 0  # whole copies of the weights for generation (off-policy, FSDP)
    staleness: int = 0  # rollout.max_staleness (or off_policy_steps)
    sharded: bool = False  # FSDP over more than one rank
    rollout_dtype: str = "auto"  # rollout.dtype
    vllm_kv_bytes: float = 0.0  # vllm: its KV cache (CPU: rollout.vllm_kv_cache_gb)
    device: str = "cpu"  # "cpu" or "cuda"


def lora_trainable(config: Any, rank: int, targets: list[str]) -> int:
    """Trainable parameters of LoRA adapters r * (in + out) on the targeted linear layers."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    head = model.get_output_embeddings()
    total = 0
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or module is head:
            continue
        leaf = name.rsplit(".", 1)[-1]
        if targets == ["all-linear"] or leaf in targets:
            total += rank * (module.in_features + module.out_features)
    return total


def model_shape(config: Any, lora_rank: int = 0, lora_targets: list[str] | None = None):
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    n = sum(p.numel() for p in model.parameters())
    trainable = (
        lora_trainable(config, lora_rank, lora_targets or ["all-linear"]) if lora_rank else n
    )
    heads = getattr(config, "num_attention_heads", 1)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    hidden = config.hidden_size
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    return ModelShape(
        num_parameters=n + (trainable if lora_rank else 0),
        trainable_parameters=trainable,
        num_layers=config.num_hidden_layers,
        hidden_size=hidden,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=config.vocab_size,
        num_heads=heads,
        intermediate_size=getattr(config, "intermediate_size", None)
        or getattr(config, "n_inner", None)
        or 4 * hidden,
    )


def critic_shape(config: Any, lora_rank: int = 0, lora_targets: list[str] | None = None):
    """The shape of PPO's value model over `config`'s decoder (rlvr.models.value): the decoder's
    parameters and a scalar head of h + 1, no LM head; LoRA adapters as the policy's."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    head = config.hidden_size + 1
    n = sum(p.numel() for p in model.get_decoder().parameters()) + head
    shape = model_shape(config, lora_rank, lora_targets)
    trainable = shape.trainable_parameters + head if lora_rank else n
    shape.num_parameters = n + (trainable if lora_rank else 0)
    shape.trainable_parameters = trainable
    return shape


RUNTIME_BYTES = 440 * 2**20  # a run's memory besides its model: measured, docs/memory.md
KV_LENGTH_QUANTUM = 64  # the fast engine rounds its cache length up to this


def activation_elements(shape: ModelShape) -> int:
    """Elements autograd keeps per token and decoder layer in the packed update of a
    Llama-family layer: 6h + 4q + 4f (h hidden, q = heads x head_dim, f the MLP width).
    Fitted to the saved-tensor bytes of the update's forward (saved_tensors_hooks, unique
    storages) on SmolLM2-135M's, Qwen2.5-0.5B's and the embedded model's layer shapes, where
    it is within 0.5% of each (tests/training/test_memory.py measures it again)."""
    return 6 * shape.hidden_size + 4 * shape.q_dim + 4 * shape.ffn


def backward_elements(shape: ModelShape) -> int:
    """Elements per token the backward of the packed update holds at its peak beyond the saved
    activations and the parameters' gradients: 2f + h (one layer's MLP gradients and a
    hidden-state gradient; the layers' backwards run one after another, so it does not grow
    with depth). Measured as the peak of the live bytes torch's profiler records during the
    backward, gradients allocated beforehand: exactly 2f + h on the embedded, SmolLM2-135M and
    8k-benchmark layer shapes, 1 and 2 layers (tests/training/test_memory.py measures it)."""
    return 2 * shape.ffn + shape.hidden_size


def estimate(
    shape: ModelShape,
    plan: RunPlan,
    *,
    precision: str,
    kl_coef: float,
    lora: bool,
    gradient_checkpointing: bool,
    world_size: int = 1,
    fsdp: bool = False,
    critic: ModelShape | None = None,
    reward_model_bytes: float = 0.0,
) -> dict[str, float]:
    """Bytes per device of each part, of each phase ("phase_generation", "phase_evaluation",
    "phase_update"), "total" and "peak_phase" (the index of the widest phase in PHASES); the
    module docstring has every formula. `critic`: the value model's shape (`critic_shape`),
    when algorithm.advantage needs one; `reward_model_bytes`: the learned reward models'
    weights (`rm:PATH` items), held for inference."""
    if precision not in LAYOUTS:
        raise ValueError(f"precision must be one of {', '.join(LAYOUTS)}, got {precision!r}")
    pure16 = precision in ("bf16", "fp16")
    # a 16-bit frozen base in the pure layouts, and under bf16-mixed with LoRA (build_policy)
    b_w = 2 if pure16 or (lora and precision == "bf16-mixed") else 4
    b_t = 4 if lora else b_w
    b_a = 4 if precision == "fp32" else 2
    moments = 2 * b_t
    # the engine's weights and K/V: rollout.dtype (auto: the compute dtype, bf16 but in fp32)
    compute = 4 if precision == "fp32" else 2
    auto = compute
    b_r = {"float32": 4, "bfloat16": 2}.get(plan.rollout_dtype, auto)
    cast = b_r != b_w  # a replica cast to it, even on-policy (build_policy)
    # FSDP with background rollouts or a cast replica: the whole copy evaluation and saving
    # gather into, in the trained dtype
    whole = plan.sharded and (plan.staleness > 0 or cast)
    shard = world_size if fsdp else 1
    n, t = shape.num_parameters, shape.trainable_parameters
    base = n - t if lora else n  # frozen base weights under LoRA are never sharded apart
    parts = {
        "runtime": float(RUNTIME_BYTES),
        "weights": (base * b_w + (t * b_t if lora else 0)) / shard,
        "optimizer": t * moments / shard,
        "reference": (n * b_w / shard) if (kl_coef > 0 and not lora) else 0.0,
        # the replica in b_r, the K - 1 copies queued batches carry and the whole copy in b_w
        "replica": (
            int(plan.replicas > 0 or cast) * n * b_r
            + (max(plan.replicas - 1, 0) + int(whole)) * n * b_w
        ),
    }
    generation = _generation(shape, plan, plan.max_new_tokens, plan.group_size, b_r)
    # evaluation decodes the trained weights when the replica is cast (or stale)
    b_e = b_w if cast or plan.staleness else b_r
    evaluation = (
        _generation(shape, plan, plan.eval_new_tokens, plan.eval_samples, b_e)
        if plan.eval_new_tokens
        else {"kv_cache": 0.0, "prefill": 0.0, "weight_copies": 0.0}
    )
    update = {
        "gradients": t * b_t / shard,
        "compute_copy": (
            (t if lora else n) * 2.0 / (shape.num_layers if gradient_checkpointing else 1)
            if precision == "bf16-mixed"
            else 0.0
        ),
        **_update(shape, plan, b_a, gradient_checkpointing),
    }
    parts["reward_model"] = float(reward_model_bytes)
    parts["critic"] = 0.0
    critic_update = 0.0
    if critic is not None:
        nc, tc = critic.num_parameters, critic.trainable_parameters
        parts["critic"] = ((nc - tc if lora else nc) * b_w + (tc * b_t if lora else 0)) / shard
        parts["critic"] += tc * moments / shard
        copy = (tc if lora else nc) * 2.0 / (shape.num_layers if gradient_checkpointing else 1)
        critic_update = tc * b_t / shard + (copy if precision == "bf16-mixed" else 0.0)
        critic_update += update["activations"] + update["backward"]
    phases = {
        "generation": sum(generation.values()),
        "evaluation": sum(evaluation.values()),
        "update": max(sum(update.values()), critic_update),
    }
    widest = max(phases, key=phases.__getitem__)
    for key, value in generation.items():
        parts[key] = max(value, evaluation[key])
    parts.update(update)
    parts.update({f"phase_{k}": v for k, v in phases.items()})
    resident = sum(parts[k] for k in RESIDENT)
    parts["total"] = resident + phases[widest]
    parts["peak_phase"] = float(list(phases).index(widest))
    # weight + gradient + moments of one trainable parameter, before sharding
    parts["bytes_per_trainable_parameter"] = float(2 * b_t + moments)
    return parts


def _generation(
    shape: ModelShape, plan: RunPlan, new_tokens: int, samples: int, b_w: int
) -> dict[str, float]:
    """The engine's memory while it decodes: K/V of the rows decoded together, one prefill's
    activations and compact K/V, and the fast engine's fused/packed weight copies."""
    kv_token = 2.0 * shape.num_layers * shape.kv_dim * b_w
    length = plan.prompt_tokens + new_tokens
    if plan.engine == "vllm":
        return {
            "kv_cache": plan.vllm_kv_bytes,
            "prefill": 0.0,
            "weight_copies": shape.num_parameters * b_w,
        }
    if plan.engine == "fast":
        length = -(-length // KV_LENGTH_QUANTUM) * KV_LENGTH_QUANTUM
        prompts = max(1, -(-plan.decoded_rows // samples))
        fits = max(1, plan.max_prefill_tokens // plan.prompt_tokens)
        prefill_tokens = min(prompts, fits) * plan.prompt_tokens
        h = shape.hidden_size
        copies = shape.num_layers * h * (shape.q_dim + 2 * shape.kv_dim + 2 * shape.ffn)
        from rlvr.models.precision_probe import bf16_kernels  # torch: only when planning

        if h >= 512 and plan.device == "cpu" and (b_w == 4 or bf16_kernels()):
            # oneDNN-packed copies of o/down and the head too (fast_engine.PACK_MIN_HIDDEN;
            # bf16 weights where oneDNN has bf16 kernels, llama_decoder.can_pack)
            copies += shape.num_layers * h * (shape.q_dim + shape.ffn) + shape.vocab_size * h
    else:  # hf: each row prefilled on its own, no kept copies
        prefill_tokens = plan.decoded_rows * plan.prompt_tokens
        copies = 0
    transient = 2 * shape.hidden_size + 2 * shape.q_dim + 2 * shape.kv_dim + 3 * shape.ffn
    return {
        "kv_cache": kv_token * length * plan.decoded_rows,
        "prefill": prefill_tokens * (kv_token + transient * b_w),
        "weight_copies": float(copies * b_w),
    }


def _update(
    shape: ModelShape, plan: RunPlan, b_a: int, gradient_checkpointing: bool
) -> dict[str, float]:
    """Activations of the largest micro-batch of the update and its vocabulary temporaries."""
    from rlvr.forward.segment_attention import auto_attention  # torch: only when planning

    p, c, g = plan.prompt_tokens, plan.max_new_tokens, plan.group_size
    layers, h = shape.num_layers, shape.hidden_size
    per_layer = b_a * (h if gradient_checkpointing else activation_elements(shape))
    # one layer's backward on top of the saved activations (and its recomputed forward)
    recomputed = activation_elements(shape) if gradient_checkpointing else 0
    transient = b_a * (backward_elements(shape) + recomputed)
    if plan.token_budget:
        # A sequence is a prompt with as many of its completions as fit the budget (all G
        # when they do; shared prompts), or one row; a micro-batch holds whole sequences.
        rows = g if plan.share_prompts else 1
        if plan.share_prompts and p + g * c > plan.token_budget:
            rows = max(1, min(g, (plan.token_budget - p) // c))
        unit = p + rows * c if plan.share_prompts else p + c
        units = max(1, plan.token_budget // unit)
        units = min(units, plan.prompts * g // rows, max(1, plan.micro_batch_rows // rows))
        tokens, width = units * unit, unit
        extra = 0.0
        # the segment rows: each completion with its prompt (shared), or each row alone
        pairs = rows * (p + c) ** 2 if plan.share_prompts else unit**2
        dense = plan.packed_attention == "dense" or (
            plan.packed_attention == "auto" and auto_attention(width, 1, pairs) == "dense"
        )
        if dense:  # the [S, 1, W, W] additive mask and its boolean temporaries
            extra = tokens * width * 4.0 * 2
        elif plan.share_prompts and not gradient_checkpointing:
            # mask-free attention gathers a shared prompt's keys for each of its rows
            extra = units * rows * p * layers * b_a * (1.6 * shape.q_dim + 2.1 * shape.kv_dim)
        return {
            "activations": tokens * layers * per_layer + tokens * 3 * h * 4 + extra,
            "backward": tokens * transient,
            "logits": 2.0 * 2**21 * 4,  # the fused head's vocabulary blocks (logprobs.py)
        }
    rows = min(plan.micro_batch_rows, plan.prompts * g)
    tokens = rows * (p + c)
    return {
        "activations": tokens * layers * per_layer + rows * (p + c) ** 2 * 4.0,
        "backward": tokens * transient,
        "logits": tokens * shape.vocab_size * 4.0 * 2,  # the model's own head: [B, T, V] fp32
    }


def planned_precision(
    precision: str, model: Any, device: str, shape: ModelShape
) -> tuple[str, str]:
    """(the layout to plan, a note on it): `precision` (the --precision flag) unless 'auto',
    then what `rlvr train` would use for the config's model section on `device` ('cpu'/'cuda';
    a CUDA device is assumed to support bf16): under auto with model.dtype auto on a CPU, what
    the start-up probe measures on this machine at `shape`'s sizes (another CPU may differ)."""
    if precision != "auto":
        return precision, ""
    if device != "cpu" or (model.precision, model.dtype) != ("auto", "auto"):
        return model.training_precision(device), ""
    from rlvr.models.precision_probe import probe

    found = probe(shape.hidden_size, shape.ffn, shape.kv_dim)
    return (
        found.choice,
        f"(precision auto on a CPU: rlvr train probes at start-up; here {found.reason})",
    )


def _count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit} ({n:,})"
    return f"{n:,}"


def _bytes(b: float) -> str:
    return f"{b / GIB:.2f} GiB" if b >= GIB else f"{b / 2**20:.1f} MiB"


def plan_of(
    cfg: Any, prompt_tokens: int, world_size: int = 1, fsdp: bool = False, device: str = "cpu"
) -> RunPlan:
    """The RunPlan of a Config on one of `world_size` data-parallel ranks on `device`."""
    from rlvr.rollout.engines import decoded_rows

    r, t, e = cfg.rollout, cfg.training, cfg.eval
    prompts = -(-r.prompts_per_step // world_size)
    sharded = fsdp and world_size > 1
    evaluates = e.size > 0 and (e.before or e.after or e.every > 0)
    return RunPlan(
        prompt_tokens=prompt_tokens,
        max_new_tokens=r.max_new_tokens,
        prompts=prompts,
        group_size=r.group_size,
        decoded_rows=min(decoded_rows(r), prompts * r.group_size),
        engine=r.engine,
        max_prefill_tokens=r.max_prefill_tokens,
        token_budget=t.token_budget,
        micro_batch_rows=t.micro_batch_size,
        packed_attention=t.packed_attention,
        share_prompts=t.share_prompts,
        eval_new_tokens=(e.max_new_tokens or r.max_new_tokens) if evaluates else 0,
        eval_samples=max(1, e.t1_samples, e.k),
        replicas=max(r.staleness, int(sharded)),
        staleness=r.staleness,
        sharded=sharded,
        rollout_dtype=r.dtype,
        vllm_kv_bytes=r.vllm_kv_cache_gb * GIB if r.engine == "vllm" else 0.0,
        device=device,
    )


PHASES = ("generation", "evaluation", "update")
RESIDENT = ("runtime", "weights", "optimizer", "reference", "replica", "critic", "reward_model")
PHASE_PARTS = {
    "generation": ("kv_cache", "prefill", "weight_copies"),
    "update": ("gradients", "compute_copy", "activations", "backward", "logits"),
}


def format_report(shape: ModelShape, parts: dict[str, float], precision: str, note: str) -> str:
    """The table `rlvr estimate` prints: what stays resident, then each phase's own memory
    (generation and evaluation share the engine's parts, shown at the larger of the two), the
    peak and the phase it falls in."""
    rows = [
        ("parameters", _count(shape.num_parameters)),
        ("trainable", _count(shape.trainable_parameters)),
        ("precision", precision),
    ]
    # the critic's and the reward model's lines only when there is one: other tables unchanged
    optional = ("critic", "reward_model")
    rows += [(key, _bytes(parts[key])) for key in RESIDENT if key not in optional or parts[key]]
    for phase in PHASES:
        rows.append((f"{phase} phase", _bytes(parts[f"phase_{phase}"])))
        rows += [(key, _bytes(parts[key])) for key in PHASE_PARTS.get(phase, ())]
    peak = PHASES[int(parts["peak_phase"])]
    rows.append(("total", f"{_bytes(parts['total'])} (peak in the {peak} phase)"))
    rows.append(("bytes/trainable param", f"{parts['bytes_per_trainable_parameter']:.1f}"))
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    if note:
        lines.append(note)
    return "\n".join(lines)
