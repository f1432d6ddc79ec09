"""The policy being trained and the copies that serve it, built in one place.

model          the learner's weights (under FSDP2 sharded over the ranks)
reference      what KL is measured against: a frozen second copy, the LoRA policy with its
               adapters switched off (no second copy), or nothing when kl_coef = 0
rollout_model  the weights generation reads: the model itself, or a whole-weight replica
               synced from it when the learner is sharded (FSDP) or generation runs off-policy
               on a snapshot
whole_model    FSDP with off-policy rollouts only: a second whole-weight copy that evaluation
               and saving gather into, since the rollout replica is busy in the background
fsdp_root      FSDP2's root unit; a log-prob function called through it runs with the root's
               parameters gathered (rlvr.distributed.fsdp)
compute_dtype  bf16 under model.precision=bf16-mixed: the learner's passes run under
               torch.autocast (`autocast`) over fp32 weights; None: in the weights' dtype
precision      model.precision as resolved (`run_precision`: measured under auto on a CPU)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.config import Config
from rlvr.distributed.world import World
from rlvr.environments import PYTHON_TOOL_SCHEMA
from rlvr.errors import ConfigError
from rlvr.models.loading import (
    Precision,
    PromptEncoder,
    load_model,
    load_tokenizer,
    uses_chat_template,
)
from rlvr.models.lora import is_lora, reference_context
from rlvr.rollout import Engine, build_engine
from rlvr.rollout.engines import engine_options
from rlvr.rollout.multi_turn import with_environment
from rlvr.runs.run import run_precision


@dataclass
class Policy:
    model: torch.nn.Module
    tokenizer: Any
    encode: PromptEncoder  # a task sample -> the prompt's token ids
    ref_model: torch.nn.Module | None
    use_reference: bool
    rollout_model: torch.nn.Module
    fsdp_root: Any
    world: World
    device: torch.device
    precision: Precision
    compute_dtype: torch.dtype | None = None
    whole_model: torch.nn.Module | None = None

    @property
    def sharded(self) -> bool:
        return self.fsdp_root is not None

    @property
    def rollout_cast(self) -> bool:
        """The rollout replica holds the weights in another dtype than the learner's
        (rollout.dtype): its log-probs are not the learner's, and it is stale between syncs."""
        param = next(self.rollout_model.parameters())
        return param.dtype != next(self.model.parameters()).dtype

    @property
    def whole(self) -> torch.nn.Module:
        """A module with the whole current weights (after `gather_whole` under FSDP)."""
        if self.whole_model is not None:
            return self.whole_model
        return self.rollout_model if self.sharded else self.model

    def run(self, fn: Callable[..., Any], model: torch.nn.Module, *args: Any, **kw: Any) -> Any:
        """`fn(model, *args, **kw)`; for the sharded policy inside the FSDP root's forward, so
        its parameters are gathered around the call."""
        if self.fsdp_root is not None and model is self.model:
            return self.fsdp_root(fn, *args, **kw)
        return fn(model, *args, **kw)

    def autocast(self) -> AbstractContextManager:
        """The context of the learner's forward passes: torch.autocast to `compute_dtype` on the
        policy's device under mixed precision; under fp32 and pure 16-bit no context at all,
        so those runs take exactly the code path they took before mixed precision existed.

        Without autocast's cache of weight casts: each context holds one forward, which casts
        each weight once anyway, and the cache would keep a bf16 copy of every weight alive to
        the end of the forward, even in no-grad passes and in layers whose activations
        gradient checkpointing frees (under FSDP, copies of the gathered, whole weights)."""
        if self.compute_dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute_dtype, cache_enabled=False)

    @contextmanager
    def reference(self) -> Iterator[torch.nn.Module]:
        """The reference policy (only with use_reference)."""
        if self.ref_model is not None:
            yield self.ref_model
            return
        with reference_context(self.model) as base:
            yield base

    def sync_rollout_weights(self) -> None:
        """The rollout replica (off-policy snapshot, FSDP's whole-weight copy) takes the
        learner's current weights; under FSDP a collective every rank makes."""
        if self.rollout_model is self.model:
            return
        with torch.no_grad():
            self.rollout_model.load_state_dict(self._learner_state())

    def full_state(self) -> dict[str, torch.Tensor]:
        """The learner's state_dict, whole (under FSDP gathered: a collective every rank
        makes)."""
        return self._learner_state()

    def _learner_state(self) -> dict[str, torch.Tensor]:
        """The learner's state_dict, whole (under FSDP gathered: a collective every rank
        makes)."""
        if self.sharded:
            from rlvr.distributed.fsdp import full_model_state

            return full_model_state(self.model)
        return self.model.state_dict()

    def rollout_weights_copy(self) -> dict[str, torch.Tensor]:
        """A copy of the learner's current weights, for the replica to take later (a batch
        queued behind others, rlvr.training.schedules.StaleRollouts); under FSDP the gathered
        whole weights (a collective every rank makes)."""
        if self.sharded:
            return self._learner_state()  # gathered: fresh tensors already
        with torch.no_grad():
            return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def load_rollout_weights(self, state: dict[str, torch.Tensor]) -> None:
        """The rollout replica takes `state` (a `rollout_weights_copy`)."""
        with torch.no_grad():
            self.rollout_model.load_state_dict(state)

    def gather_whole(self) -> None:
        """Make `whole` current: under FSDP the replica takes the sharded weights (a collective
        every rank makes); otherwise `whole` is the model itself."""
        if self.whole_model is not None:
            with torch.no_grad():
                self.whole_model.load_state_dict(self._learner_state())
        elif self.sharded:
            self.sync_rollout_weights()

    def full_optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict:
        """The optimizer state to checkpoint (gathered unsharded under FSDP: a collective)."""
        if self.sharded:
            from rlvr.distributed.fsdp import full_optimizer_state

            return full_optimizer_state(self.model, optimizer)
        return optimizer.state_dict()

    def load_state(
        self, model_state: dict, optimizer: torch.optim.Optimizer, optimizer_state: dict
    ) -> None:
        """Restore a checkpoint's unsharded model and optimizer states."""
        if self.sharded:
            from rlvr.distributed.fsdp import load_full_state

            load_full_state(self.model, optimizer, model_state, optimizer_state)
        else:
            self.model.load_state_dict(model_state)
            optimizer.load_state_dict(optimizer_state)


def check_policy_config(cfg: Config, world: World) -> None:
    """What the world makes impossible, said before any weights load."""
    if cfg.rollout.staleness > 0 and world.distributed and cfg.rollout.async_mode == "free":
        raise ConfigError(
            "rollout.async_mode=free: not supported under torchrun (which weights a batch is "
            "drawn from depends on timing, so the ranks would disagree); use deterministic"
        )
    if world.distributed and cfg.distributed.strategy == "fsdp" and cfg.model.lora_rank:
        raise ConfigError(
            "distributed.strategy=fsdp: LoRA adapters are small enough to replicate; use "
            "distributed.strategy=ddp with model.lora_rank"
        )


def build_policy(
    cfg: Config,
    world: World,
    device: torch.device,
    *,
    resumed: Path | None = None,
    log: Callable[[str], None] = lambda _msg: None,
) -> Policy:
    """Tokenizer, model (replicas start identical), reference, rollout copy, FSDP sharding.

    The weights load in model.precision's weight dtype (fp32 masters under bf16-mixed); the
    reference and the rollout replica take the same dtype, so the reference's log-probs match
    the policy's at step 0 and the engines generate from the weights as trained (fp32 under
    bf16-mixed: engines run no autocast). LoRA under bf16-mixed loads its frozen base in bf16:
    only the adapters train, and peft keeps them in fp32 over a 16-bit base.

    The precision is rank 0's (`run_precision`; `resumed`: the run directory being resumed,
    whose recorded precision is kept), so the ranks agree whatever each would measure; its
    line goes to `log` when a probe measured it."""
    check_policy_config(cfg, world)
    m = cfg.model
    precision = world.broadcast_object(run_precision(m, device, resumed) if world.is_main else None)
    line = precision.line()
    if line:
        log(line)
    dtype = precision.compute if m.lora_rank and precision.compute else precision.weights
    tokenizer = load_tokenizer(m.name_or_path, m.trust_remote_code, m.gguf_file)
    model = load_model(m, device, dtype, train=True)
    world.broadcast_parameters(model)
    # kl_coef = 0 needs no reference at all; with LoRA the reference is the policy's own frozen
    # base with its adapters switched off, so no second copy of the weights is held.
    use_reference = cfg.algorithm.kl_coef > 0
    ref_model = (
        load_model(m, device, dtype, train=False) if use_reference and not is_lora(model) else None
    )
    fsdp = world.distributed and cfg.distributed.strategy == "fsdp"
    rollout_model = model
    sampler = rollout_dtype(cfg.rollout.dtype, precision, dtype, cfg.distributed.ray)
    if cfg.rollout.staleness > 0 or fsdp or sampler != dtype:
        # FSDP shards the policy and off-policy generation runs while the update changes it:
        # both need whole weights of their own, a replica synced per step; so does decoding
        # in another dtype (a cast copy)
        rollout_model = copy.deepcopy(model).to(sampler).eval().requires_grad_(False)
    # FSDP with background rollouts or a cast replica: evaluation and saving gather into a copy
    # of their own, in the trained dtype
    whole_model = None
    if fsdp and (cfg.rollout.staleness > 0 or sampler != dtype):
        whole_model = copy.deepcopy(model).eval().requires_grad_(False)
    fsdp_root = None
    if fsdp:
        from rlvr.distributed.fsdp import shard_policy

        fsdp_root = shard_policy(model)
    return Policy(
        model=model,
        tokenizer=tokenizer,
        encode=prompt_encoder(cfg, tokenizer),
        ref_model=ref_model,
        use_reference=use_reference,
        rollout_model=rollout_model,
        fsdp_root=fsdp_root,
        world=world,
        device=device,
        precision=precision,
        compute_dtype=precision.compute,
        whole_model=whole_model,
    )


def rollout_dtype(
    choice: str, precision: Precision, weights: torch.dtype, ray: bool
) -> torch.dtype:
    """rollout.dtype as a dtype. auto: the precision's compute dtype (bf16 under bf16-mixed:
    half the K/V cache and weight reads, as every peer decodes; on a CPU bf16-mixed is chosen
    only where the start-up probe measured bf16 faster), else, and in the Ray mode (the actors
    load model.dtype's weights), the weights as loaded (`weights`). Measured on an
    AVX-512-BF16 EPYC with SmolLM2 (vs_trl's step): bf16-mixed decoding a bf16 copy 4.41 s a
    step against 7.29 s decoding the fp32 masters; with one update per batch the cast sampler
    costs the learner no log-prob pass (docs/memory.md)."""
    if choice == "auto":
        return weights if ray else precision.compute or weights
    return getattr(torch, choice)


def prompt_encoder(cfg: Config, tokenizer: Any) -> PromptEncoder:
    """How the run encodes a task sample's prompt: the chat template when model.chat_template
    says so, data.system_prompt unless the sample has its own, environment's declared tools."""
    return PromptEncoder(
        tokenizer,
        chat=uses_chat_template(tokenizer, cfg.model.chat_template),
        system_prompt=cfg.data.system_prompt,
        tools=declared_tools(cfg.environment),
    )


def declared_tools(env: Any) -> list[dict] | None:
    """The tools a chat template is told of: the python tool's schema in its hermes format."""
    if env.name == "python" and env.format == "hermes":
        return [PYTHON_TOOL_SCHEMA]
    return None


def build_rollout_engine(
    cfg: Config, model: torch.nn.Module, tokenizer: Any, *, cast: bool = False
) -> Engine:
    """The engine `cfg.rollout` names over `model`, wrapped in the multi-turn loop of
    `cfg.environment` when one is named (the trainer's rollouts, its evaluation, `rlvr eval`).

    cast: `model` is a replica in another dtype than the learner's (`rollout.dtype`), whose
    log-probs the learner recomputes, so the fast engine may take its fastest kernels instead
    of HF's rounding (`FastEngine(hf_rounding=False)`)."""
    r = cfg.rollout
    options = engine_options(r)
    if cast and r.engine == "fast":
        options["hf_rounding"] = False
    engine = build_engine(r.engine, model, tokenizer, **options)
    return with_environment(engine, tokenizer, cfg.environment)
