"""Scaling out: data-parallel learners under torchrun (`world`) and, in `ray_mode`, rollout and
reward workers as Ray actors. `world` sits below `training` (the trainer imports it); `ray_mode`
sits above it (it drives a trainer), so it is never imported from here."""

from rlvr.distributed.world import World, init_world, launched_world_size

__all__ = ["World", "init_world", "launched_world_size"]
