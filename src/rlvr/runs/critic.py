"""PPO's value model, built like the policy it sits beside (`critic.*`, docs/ppo.md).

`build_critic` loads the critic's starting weights (`critic.name_or_path`, by default the
policy's own, `model.name_or_path`) with the policy's loader, precision, LoRA settings and
gradient checkpointing, keeps the decoder under a zero scalar head (rlvr.models.value), gives
every rank rank 0's weights, and under `distributed.strategy=fsdp` shards it layer by layer as
the policy is. It is held as a `Policy` (its weights, FSDP root, precision and device, with no
reference and no rollout copy), which is what `rlvr.training.learner.Learner` trains; so the
critic's passes, gradient sums, FSDP pass matching, clipping, NaN skipping and checkpoints are
the policy's own code.
"""

from __future__ import annotations

from dataclasses import replace

from rlvr.config import Config
from rlvr.distributed.world import World
from rlvr.errors import ConfigError
from rlvr.models.loading import load_model, load_tokenizer
from rlvr.models.value import value_model_from_lm
from rlvr.runs.policy import Policy


def critic_model_config(cfg: Config) -> Config:
    """The model section the critic loads with: `critic.name_or_path` (its own GGUF file only
    when it is the policy's model) and `critic.lora_rank` where set."""
    m, c = cfg.model, cfg.critic
    name = c.name_or_path or m.name_or_path
    own = name != m.name_or_path
    model = replace(
        m,
        name_or_path=name,
        gguf_file=None if own else m.gguf_file,
        lora_rank=m.lora_rank if c.lora_rank is None else c.lora_rank,
    )
    return replace(cfg, model=model)


def build_critic(cfg: Config, policy: Policy, world: World) -> Policy:
    """The value model of a run whose `algorithm.advantage` needs one, beside `policy`."""
    m = critic_model_config(cfg).model
    if m.name_or_path != cfg.model.name_or_path:
        _check_tokenizer(m.name_or_path, m.trust_remote_code, policy.tokenizer)
    precision = policy.precision
    dtype = precision.compute if m.lora_rank and precision.compute else precision.weights
    value = value_model_from_lm(load_model(m, policy.device, dtype, train=True))
    value.train()
    world.broadcast_parameters(value)
    fsdp_root = None
    if policy.sharded:
        from rlvr.distributed.fsdp import shard_policy

        fsdp_root = shard_policy(value)  # type: ignore[arg-type]  # what it reads: get_decoder
    return Policy(
        model=value,
        tokenizer=policy.tokenizer,
        encode=policy.encode,
        ref_model=None,
        use_reference=False,
        rollout_model=value,
        fsdp_root=fsdp_root,
        world=world,
        device=policy.device,
        precision=precision,
        compute_dtype=policy.compute_dtype,
    )


def _check_tokenizer(path: str, trust_remote_code: bool, tokenizer: object) -> None:
    """The critic reads the policy's token ids: its vocabulary must be the policy's."""
    own = load_tokenizer(path, trust_remote_code, None)
    if own.get_vocab() != tokenizer.get_vocab():  # type: ignore[attr-defined]
        raise ConfigError(
            f"critic.name_or_path: '{path}' has another vocabulary than the policy's "
            "(model.name_or_path); the critic reads the policy's token ids, so it needs the "
            "same tokenizer"
        )
