"""The optimizer side of the policy: log-prob passes over a step's rows and the optimizer steps.

A learner trains one module held as a `Policy` (rlvr.runs.policy: its weights, sharding and
precision): the policy itself, whose pass is the forward path's `logprobs`, or PPO's value model
(rlvr.runs.critic), whose pass is `values` (`Learner(..., outputs="values")`). Everything below
reads the same for both.

The update (rlvr.training.update) prepares a batch and says what the loss of a micro-batch is;
the learner runs the passes: `logprobs` (no gradient: old and reference log-probs) and
`minibatch_step` (one optimizer update: micro-batches, backward, FSDP's idle passes or DDP's
gradient sum, clipping, the step). Data parallelism lives here, so the update reads the same
with one process or many:
  - every rank runs its share of the rows (`world.rows`), with the *global* loss normalisers;
  - replicated (DDP) learners sum their gradients (`world.all_reduce_grads`); a sharded (FSDP2)
    learner reduce-scatters inside backward, and every rank must make as many forward/backward
    passes as the busiest one, so a rank with fewer units pads with zero-weight passes;
  - a NaN/inf loss or gradient skips that optimizer update (the weights stay; the schedule
    still advances, so it remains a function of the step) and is counted; too many in a row
    stop the run with the last good checkpoint named.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlvr.distributed.world import World
from rlvr.forward.logprobs import TokenBatch
from rlvr.forward.paths import PackedForward, PaddedForward
from rlvr.runs.checkpoint import latest_checkpoint
from rlvr.runs.optim import optimizer_step
from rlvr.runs.policy import Policy
from rlvr.runs.run import TrainingAborted

# (rows of the mini-batch, the pass's outputs [R, W]: log-probs and entropies, or values and
# None) -> (loss, stats, weight)
UnitLoss = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, dict[str, Any], float]
]


@dataclass
class MiniBatchStep:
    """What one optimizer update on a mini-batch did."""

    loss: float = 0.0  # the micro-batches' losses summed, over ranks too
    grad_norm: float | None = None  # None: a NaN/inf loss or gradient skipped the update
    unit_stats: list[tuple[dict[str, Any], float]] = field(default_factory=list)  # (stats, weight)
    forward_tokens: int = 0  # this rank's forward tokens, padding included
    padding_tokens: int = 0


class Learner:
    def __init__(
        self,
        policy: Policy,
        forward: PaddedForward | PackedForward,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        *,
        max_grad_norm: float,
        max_consecutive_skips: int,
        outputs: str = "logprobs",
    ) -> None:
        self.policy, self.forward = policy, forward
        # the forward path's pass of this module: log-probs (a policy) or values (a critic)
        self.pass_fn = forward.values if outputs == "values" else forward.logprobs
        self.optimizer, self.scheduler = optimizer, scheduler
        self.world: World = policy.world
        self.max_grad_norm = max_grad_norm if max_grad_norm > 0 else math.inf
        self.max_consecutive_skips = max_consecutive_skips
        self.consecutive_skips = 0  # optimizer updates skipped in a row for a NaN/inf

    @property
    def model(self) -> torch.nn.Module:
        return self.policy.model

    # -- log-prob passes ---------------------------------------------------------------------------

    def unit_logprobs(
        self, model: Any, unit: Any, **options: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[R, width] completion log-probs (and entropies) of one unit's rows under `model` (a
        critic's learner: values, and None): every pass of the update (the gradient pass, old
        and reference log-probs, FSDP's idle passes) runs here, under the policy's autocast
        when mixed precision is on; the outputs come back in fp32 (the head and log-softmax run
        outside autocast, rlvr.forward.logprobs) and the loss and backward run after the
        context is left."""
        with self.policy.autocast():
            return self.policy.run(self.pass_fn, model, unit, **options)

    @torch.no_grad()
    def logprobs(self, model: Any, tokens: TokenBatch) -> torch.Tensor:
        """[N, T] completion log-probs of every row, no gradient; each rank computes its share
        of the rows and the others' shares arrive by a sum over ranks (zero elsewhere)."""
        out = torch.zeros(tokens.completion_mask.shape)
        units = self.forward.micro_batches(tokens, self.world.rows(torch.arange(len(tokens))))
        sharded = self.policy.sharded and model is self.policy.model
        idle = self.passes_behind(len(units)) if sharded else 0
        for rows, unit in units:
            lp, _ = self.unit_logprobs(model, unit)
            out[rows, : lp.shape[1]] = lp.float().cpu()
        self.idle_passes(tokens, idle)
        return self.world.all_reduce(out)

    def reference_logprobs(self, tokens: TokenBatch) -> torch.Tensor:
        with self.policy.reference() as reference:
            return self.logprobs(reference, tokens)

    def passes_behind(self, mine: int) -> int:
        """FSDP gathers and reduce-scatters inside every forward/backward, so all ranks must make
        as many passes: how many fewer this rank, which makes `mine`, makes than the busiest. A
        collective, so asked before any pass (a rank still in its passes could not answer)."""
        return int(self.world.all_reduce(torch.tensor(mine), "max")) - mine

    def idle_passes(self, tokens: TokenBatch, count: int, backward: bool = False) -> None:
        """`count` passes of one row with zero weight, to match the busiest rank's passes."""
        for _ in range(count):
            lp, _ = self.unit_logprobs(
                self.model, self.forward.micro_batches(tokens, torch.arange(1))[0][1]
            )
            if backward:
                (lp.sum() * 0.0).backward()

    # -- the optimizer step --------------------------------------------------------------------

    def minibatch_step(
        self, tokens: TokenBatch, rows: torch.Tensor, unit_loss: UnitLoss, **pass_options: bool
    ) -> MiniBatchStep:
        """One optimizer update on the mini-batch `rows`: this rank's share of them in
        micro-batches, each's loss (`unit_loss`, with the mini-batch's global normalisers)
        backward, the other ranks' gradients summed in, then the clipped step. `pass_options`
        go to the pass (the policy's: with_entropy, entropy_grad)."""
        self.optimizer.zero_grad(set_to_none=True)
        out = MiniBatchStep()
        units = self.forward.micro_batches(tokens, self.world.rows(rows))
        idle = self.passes_behind(len(units)) if self.policy.sharded else 0
        for unit_rows, unit in units:
            total, real = self.forward.token_counts(unit)
            out.forward_tokens += total
            out.padding_tokens += total - real
            out_a, out_b = self.unit_logprobs(self.model, unit, **pass_options)
            loss, stats, weight = unit_loss(unit_rows, out_a, out_b)
            self.backward(loss)
            out.loss += float(loss.detach())
            out.unit_stats.append((stats, weight))
        self.finish_gradients(tokens, idle)
        out.loss = float(self.world.all_reduce(torch.tensor(out.loss, dtype=torch.float64)))
        out.grad_norm = self.step(out.loss)
        return out

    def backward(self, loss: torch.Tensor) -> None:
        # FSDP averages gradients over ranks: scaled, the mean is the sum
        (loss * self.world.size if self.policy.sharded else loss).backward()

    def finish_gradients(self, tokens: TokenBatch, idle: int) -> None:
        """After this rank's micro-batches: FSDP's matching passes, or DDP's gradient sum."""
        if self.policy.sharded:
            self.idle_passes(tokens, idle, backward=True)
        else:
            self.world.all_reduce_grads(self.model.parameters())

    def step(self, loss: float) -> float | None:
        """Clip and apply the accumulated gradients; returns the gradient norm, or None when a
        NaN/inf loss or gradient skipped the update."""
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        if hasattr(grad_norm, "full_tensor"):  # FSDP: a DTensor
            grad_norm = grad_norm.full_tensor()
        if not (math.isfinite(float(grad_norm)) and math.isfinite(loss)):
            self.optimizer.zero_grad(set_to_none=True)
            self.scheduler.step()
            self.consecutive_skips += 1
            return None
        self.consecutive_skips = 0
        optimizer_step(self.optimizer)
        self.scheduler.step()
        return float(grad_norm)

    def check_skips(
        self, step: int, skipped: int, run_dir: Path, log: Callable[[str], None]
    ) -> None:
        """Say that `skipped` updates of `step` were skipped; stop when too many in a row."""
        limit = self.max_consecutive_skips
        log(
            f"warning [nonfinite] step {step}: {skipped} update(s) skipped for a NaN/inf "
            f"loss or gradient ({self.consecutive_skips} in a row, limit {limit})"
        )
        if self.consecutive_skips >= limit:
            last = latest_checkpoint(run_dir)
            where = f"the last good checkpoint is {last}" if last else "no checkpoint was saved"
            raise TrainingAborted(
                f"aborting at step {step}: {self.consecutive_skips} consecutive updates had "
                f"a NaN/inf loss or gradient (training.max_consecutive_skips={limit}); {where}"
            )
