"""Scaling out: data-parallel learners under torchrun (`world`, `fsdp`) and rollout and reward
workers as Ray actors (`ray_rollouts`, a rollout source). The package sits below `training`: the
trainer imports its parts, none of them imports the trainer. `ray_rollouts` is imported only
when `distributed.ray=true` (it needs the `ray` extra)."""

from rlvr.distributed.world import World, init_world, launched_world_size

__all__ = ["World", "init_world", "launched_world_size"]
