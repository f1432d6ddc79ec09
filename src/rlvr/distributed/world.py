"""The data-parallel world of a run: which rank this process is, and the few collectives the
trainer needs. One process is a world of size one, where every collective is a no-op, so the
single-machine path and the `torchrun` path are the same code.

Under `torchrun` (WORLD_SIZE > 1 in the environment) `init_world` joins the process group
(gloo on CPU, NCCL on CUDA). Ranks keep identical replicas of the policy: each generates and
scores its share of the step's prompts, the scored batch is gathered on every rank (so
advantages, metrics and curricula see the whole batch), each rank back-propagates its share of
every mini-batch with the *global* loss normalisers, and `all_reduce_grads` sums the gradients.
The sum over ranks of per-rank gradients of Σ ℓ / N_global is the gradient of the
single-process loss, so token-mean, sequence-mean and constant normalisation are all exact.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist

from rlvr.errors import ConfigError

_BUCKET_BYTES = 32 * 1024 * 1024  # gradients are summed in flat buckets of this size


@dataclass(frozen=True)
class World:
    """rank / size / local_rank of this process; size 1 means no process group. `group`: the
    process group its collectives run on (None: the default one)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    group: Any = None

    def new_group(self) -> World:
        """The same ranks on a process group of their own (gloo), for collectives another
        thread makes while this one makes its own (the background rollouts of
        rollout.max_staleness): each group keeps its own order. A collective: every rank calls
        it, in the same order."""
        if not self.distributed:
            return self
        return replace(self, group=dist.new_group(backend="gloo"))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def shard(self, n: int) -> tuple[int, int]:
        """This rank's contiguous share [lo, hi) of n items (sizes differ by at most one)."""
        base, extra = divmod(n, self.size)
        lo = self.rank * base + min(self.rank, extra)
        return lo, lo + base + (1 if self.rank < extra else 0)

    def rows(self, rows: torch.Tensor) -> torch.Tensor:
        """This rank's share of a list of rows: every size-th one, from the rank's offset."""
        return rows[self.rank :: self.size]

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier(group=self.group)

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def all_gather_object(self, obj: Any) -> list[Any]:
        """[obj of rank 0, obj of rank 1, ...] on every rank."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """In place over ranks: op is sum, max or min. Returns the tensor."""
        if self.distributed:
            ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
            dist.all_reduce(tensor, op=ops[op], group=self.group)
        return tensor

    def broadcast_parameters(self, module: torch.nn.Module) -> None:
        """Every rank starts from rank 0's weights (trainable or not)."""
        if self.distributed:
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor.data, src=0, group=self.group)

    def all_reduce_grads(self, params: Iterable[torch.nn.Parameter]) -> None:
        """Sum the gradients of `params` over ranks (not the mean: the loss of every rank is
        already divided by the global normaliser). A parameter without a gradient on this rank
        (it back-propagated nothing in this mini-batch) contributes zeros."""
        if not self.distributed:
            return
        grads: list[torch.Tensor] = []
        for p in params:
            if p.requires_grad:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                grads.append(p.grad)
        bucket: list[torch.Tensor] = []
        size = 0
        for grad in grads:
            if bucket and (
                size + grad.numel() * grad.element_size() > _BUCKET_BYTES
                or grad.dtype != bucket[0].dtype
            ):
                _sum_bucket(bucket, self.group)
                bucket, size = [], 0
            bucket.append(grad)
            size += grad.numel() * grad.element_size()
        if bucket:
            _sum_bucket(bucket, self.group)


def _sum_bucket(grads: list[torch.Tensor], group: Any) -> None:
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def launched_world_size() -> int:
    """WORLD_SIZE set by torchrun (1 when not launched by it)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise ConfigError(
            f"environment WORLD_SIZE={os.environ['WORLD_SIZE']!r}: expected an integer"
        ) from None


def init_world(backend: str = "auto") -> World:
    """The world this process runs in: size one unless launched by torchrun, in which case the
    default process group is initialised (once) with `backend` (auto = nccl with CUDA, else
    gloo) and, with CUDA, this process's device is cuda:LOCAL_RANK."""
    size = launched_world_size()
    if size <= 1:
        return World()
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl" and not torch.cuda.is_available():
        raise ConfigError("distributed.backend: nccl needs CUDA; use gloo (or auto) on CPUs")
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    return World(rank=rank, size=size, local_rank=local_rank)
