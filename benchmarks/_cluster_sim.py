"""The simulation of benchmarks/cluster_model.py: costs, cluster, schedule, workload, and the
discrete-event loop that runs a schedule over them (`simulate`, `predict`). Pure standard
library; the formulas and what is modelled are in cluster_model.py's docstring."""

from __future__ import annotations

import heapq
import math
import random
import statistics
from collections import deque
from dataclasses import dataclass, field

# -- costs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Costs:
    """Seconds per unit of work (see the module docstring for the formulas)."""

    a: float  # per decode step of a generator's batch
    b: float  # per active row per decode step
    c: float  # per trained token, one learner
    d: float = 0.0  # per learner step
    w: float = 0.0  # per weight sync of a generator
    p: float = 0.0  # per prompt token prefilled
    score: float = 0.0  # per completion scored
    mu: float = 1.0  # trained tokens per generated token (ppo_epochs)
    allreduce: float = 0.0  # per learner step per doubling of the learners (r)


@dataclass(frozen=True)
class Cluster:
    n_generators: int = 1
    m_learners: int = 1
    placement: str = "separate"  # or "shared": both sides on the same cores
    contention: float = 1.0  # shared: slowdown of every job while both sides are busy


@dataclass(frozen=True)
class Schedule:
    mode: str = "sync"  # sync | deterministic | free
    staleness: int = 0  # K
    unit: str = "batch"  # batch | group


@dataclass(frozen=True)
class Workload:
    """Per step, the completion lengths in prompt-major order (G consecutive rows per group)."""

    lengths: tuple[tuple[int, ...], ...]
    group_size: int = 1
    prompt_tokens: int = 0  # per completion row

    @property
    def steps(self) -> int:
        return len(self.lengths)


def make_workload(lengths, group_size: int = 1, prompt_tokens: int = 0) -> Workload:
    """A `Workload` from any nested sequence of lengths (every step >= 1 row, whole groups)."""
    steps = tuple(tuple(int(x) for x in step) for step in lengths)
    if not steps or any(not s or len(s) % group_size for s in steps):
        raise ValueError(f"every step needs a positive multiple of group_size={group_size} rows")
    return Workload(steps, group_size, prompt_tokens)


def generation_time(lengths, a: float, b: float, p: float = 0.0, prompt_tokens: int = 0) -> float:
    """Rows decoded together: p * prompt_tokens + sum_{t=1..max} (a + b * active(t)).

    sum_t active(t) = sum(lengths), so this is p * prompt_tokens + a * max + b * sum."""
    if not lengths:
        return 0.0
    return p * prompt_tokens + a * max(lengths) + b * sum(lengths)


def generator_work(lengths, costs: Costs, prompt_tokens: int = 0, sync: bool = False) -> float:
    """A generator's job: [w] + gen(rows) + score * rows (prompt_tokens per row)."""
    gen = generation_time(lengths, costs.a, costs.b, costs.p, prompt_tokens * len(lengths))
    return (costs.w if sync else 0.0) + gen + costs.score * len(lengths)


def wave_offsets(groups, costs: Costs, prompt_tokens: int = 0, sync: bool = False) -> list[float]:
    """Groups decoded together on one generator, each handed out when its longest row ends.

    Group g (longest row m_g) is released after
        [w] + p * prompt_tokens * rows + sum_{t=1..m_g} (a + b * active(t)) + score * done_g,
    active(t) over every row of the wave, done_g = rows of the groups released by then; the
    last release is `generator_work` of all the rows."""
    rows = [x for group in groups for x in group]
    base = (costs.w if sync else 0.0) + costs.p * prompt_tokens * len(rows)
    out = []
    for group in groups:
        m = max(group)
        decode = costs.a * m + costs.b * sum(min(x, m) for x in rows)
        done = sum(len(h) for h in groups if max(h) <= m)
        out.append(base + decode + costs.score * done)
    return out


def learner_time(tokens: float, m: int, costs: Costs) -> float:
    """learn(T, M) = c * mu * tokens / M + d + r * log2(M) (tokens: generated tokens)."""
    return costs.c * costs.mu * tokens / m + costs.d + costs.allreduce * math.log2(m)


def learner_efficiency(tokens: float, m: int, costs: Costs) -> float:
    """Data-parallel efficiency: (c T / M) / (c T / M + r log2 M), T = mu * tokens."""
    work = costs.c * costs.mu * tokens / m
    sync = costs.allreduce * math.log2(m)
    return 1.0 if work + sync == 0 else work / (work + sync)


def contiguous_shares(n_items: int, n_parts: int) -> list[tuple[int, int]]:
    """Part k gets items [k*n // N, (k+1)*n // N): contiguous, sizes differing by at most 1."""
    return [(k * n_items // n_parts, (k + 1) * n_items // n_parts) for k in range(n_parts)]


# -- the event loop ---------------------------------------------------------------------------


@dataclass
class StepRecord:
    step: int
    start: float  # the learner starts the update
    end: float  # the update is done
    ready_at: float  # the batch was complete
    staleness: int
    wait: float  # learner idle before the step
    generate_s: float = 0.0  # the batch's first start to its completion (time_generate_s)


@dataclass
class SimResult:
    steps: list[StepRecord]
    makespan: float
    learner_busy: float
    generator_busy: list[float]
    dropped_batches: int = 0
    dropped_groups: int = 0

    @property
    def step_times(self) -> list[float]:
        """end_s - end_{s-1} (end_0 = 0): what rlvr logs as step_time_s."""
        ends = [0.0] + [r.end for r in self.steps]
        return [b - a for a, b in zip(ends, ends[1:])]

    @property
    def learner_idle_fraction(self) -> float:
        return 1.0 - self.learner_busy / self.makespan if self.makespan else 0.0

    @property
    def generator_idle_fraction(self) -> float:
        if not self.makespan:
            return 0.0
        return 1.0 - statistics.fmean(self.generator_busy) / self.makespan

    @property
    def staleness(self) -> list[int]:
        return [r.staleness for r in self.steps]


@dataclass
class _Unit:
    """A batch (unit=batch) or a group (unit=group) in the pipeline."""

    index: int  # batch number from 1, or group number from 0
    rows: tuple[int, ...]
    version: int
    parts: list[tuple[int, ...]] = field(default_factory=list)  # batch: per-generator rows
    pending: int = 0  # parts (or groups, for a deterministic batch) not done yet
    started: float = -1.0  # the first generator started on it
    ready_at: float = -1.0


def _check(work: Workload, cluster: Cluster, sched: Schedule) -> None:
    """Refuse what the event loop does not model."""
    if sched.mode not in ("sync", "deterministic", "free") or sched.unit not in ("batch", "group"):
        raise ValueError(f"unknown schedule {sched}")
    if sched.mode == "free" and sched.staleness < 1:
        raise ValueError("free-running needs staleness K >= 1")
    if cluster.placement not in ("separate", "shared") or cluster.contention < 1:
        raise ValueError(f"unknown placement, or contention < 1: {cluster}")
    if min(cluster.n_generators, cluster.m_learners) < 1:
        raise ValueError(f"a cluster needs a generator and a learner: {cluster}")
    if sched.unit == "group" and len({len(s) for s in work.lengths}) > 1:
        raise ValueError("unit=group needs the same number of groups in every step")


class _Sim:
    """State of one simulation; `run` drives it. Times in seconds from the first step's start."""

    def __init__(self, work: Workload, costs: Costs, cluster: Cluster, sched: Schedule, extra):
        _check(work, cluster, sched)
        self.work, self.costs, self.cl, self.sched = work, costs, cluster, sched
        self.k = 0 if sched.mode == "sync" else sched.staleness
        self.free = sched.mode == "free"
        self.n = cluster.n_generators
        self.extra = list(extra) if extra is not None else [0.0] * work.steps
        self.groups_per_batch = len(work.lengths[0]) // work.group_size
        self.t = 0.0
        self.clock = {"gen": 0.0, "learn": 0.0}  # work done by a job running since t=0
        self.rate = {"gen": 1.0, "learn": 1.0}
        # (finish clock, sequence, generator, unit, the generator's last release of its job)
        self.heap: list[tuple[float, int, int, _Unit, bool]] = []
        self.seq = 0
        self.started_at = [0.0] * self.n
        self.idle = set(range(self.n))
        self.loaded: list[int | None] = [None] * self.n
        self.busy = [0.0] * self.n
        self.learner: tuple[float, StepRecord] | None = None
        self.learner_busy = 0.0
        self.version = 0  # updates done
        self.records: list[StepRecord] = []
        self.dropped = 0
        self.made = 0  # batches (unit=batch) or groups (unit=group) admitted
        self.wanted = work.steps if sched.unit == "batch" else work.steps * self.groups_per_batch
        self.admitted: list[_Unit] = []  # unit=batch: in order
        self.next_part = [0] * self.n  # unit=batch: generator k's next batch (index in admitted)
        self.ready: deque[_Unit] = deque()  # finished, not taken (free mode)
        self.queue: deque[_Unit] = deque()  # unit=group: admitted groups not started
        self.batches: dict[int, _Unit] = {}  # deterministic: step -> batch
        self.partial: list[_Unit] = []  # free groups held for the next step
        self.in_flight = 0

    # admission --------------------------------------------------------------------------------

    def _batch_rows(self, number: int) -> tuple[int, ...]:
        return self.work.lengths[(number - 1) % self.work.steps]

    def _group_rows(self, j: int) -> tuple[int, ...]:
        g = self.work.group_size
        rows = self._batch_rows(j // self.groups_per_batch + 1)
        i = j % self.groups_per_batch
        return rows[i * g : (i + 1) * g]

    def _new_batch(self, number: int, version: int) -> _Unit:
        rows = self._batch_rows(number)
        unit = _Unit(number, rows, version)
        unit.parts = [rows[i:j] for i, j in contiguous_shares(len(rows), self.n)]
        unit.pending = sum(1 for part in unit.parts if part)
        self.admitted.append(unit)
        self.in_flight += 1
        self.made += 1
        return unit

    def _admit_deterministic(self) -> None:
        """Batch s (its groups, unit=group) may start once update s-1-K is done."""
        while self.made < self.work.steps and self.made - self.k <= self.version:
            number = self.made + 1
            version = max(0, number - 1 - self.k)
            if self.sched.unit == "batch":
                self.batches[number] = self._new_batch(number, version)
                continue
            self.made += 1
            batch = _Unit(number, self._batch_rows(number), version)
            batch.pending = self.groups_per_batch
            self.batches[number] = batch
            for i in range(self.groups_per_batch):
                j = (number - 1) * self.groups_per_batch + i
                self.queue.append(_Unit(j, self._group_rows(j), version))

    def _can_admit_free(self) -> bool:
        """Admission control: fewer than K batches (K*B groups) ready or being made."""
        if self.made >= self.wanted:
            return False
        if self.sched.unit == "batch":
            return len(self.ready) + self.in_flight < self.k
        held = len(self.ready) + len(self.partial) + self.in_flight
        return held < self.k * self.groups_per_batch

    # dispatch ---------------------------------------------------------------------------------

    def _start_generator(self, g: int, units: list[_Unit], groups: list[tuple[int, ...]]) -> None:
        """Generator g starts one job: a batch's share (one unit) or a wave of groups, each
        unit released at its offset on the generators' work clock."""
        sync = self.loaded[g] != units[0].version
        self.loaded[g] = units[0].version
        if self.sched.unit == "batch":
            offsets = [generator_work(groups[0], self.costs, self.work.prompt_tokens, sync)]
        else:
            offsets = wave_offsets(groups, self.costs, self.work.prompt_tokens, sync)
        last = max(range(len(offsets)), key=lambda i: (offsets[i], i))
        self.idle.discard(g)
        self.started_at[g] = self.t
        for unit in units:
            self._mark_started(unit)
        for i, (unit, offset) in enumerate(zip(units, offsets)):
            self.seq += 1
            entry = (self.clock["gen"] + offset, self.seq, g, unit, i == last)
            heapq.heappush(self.heap, entry)

    def _mark_started(self, unit: _Unit) -> None:
        """When work on a unit (and, for a deterministic group, on its batch) began."""
        owners = [unit]
        if self.sched.unit == "group" and not self.free:
            owners.append(self.batches[unit.index // self.groups_per_batch + 1])
        for u in owners:
            if u.started < 0:
                u.started = self.t

    def _next_batch_part(self, g: int) -> _Unit | None:
        while True:
            while self.next_part[g] < len(self.admitted):
                unit = self.admitted[self.next_part[g]]
                self.next_part[g] += 1
                if unit.parts[g]:
                    return unit
            if not (self.free and self._can_admit_free()):
                return None
            self._new_batch(self.made + 1, self.version)

    def _next_wave(self) -> list[_Unit]:
        """Up to ceil(B / N) groups of one weight version: queued ones (sync, deterministic)
        or groups admitted now (free)."""
        wave: list[_Unit] = []
        while len(wave) < -(-self.groups_per_batch // self.n):
            if not self.queue and self.free and self._can_admit_free():
                self.queue.append(_Unit(self.made, self._group_rows(self.made), self.version))
                self.made += 1
            if not self.queue or (wave and self.queue[0].version != wave[0].version):
                break
            wave.append(self.queue.popleft())
            self.in_flight += 1
        return wave

    def _dispatch_generators(self) -> None:
        if not self.free:
            self._admit_deterministic()
        for g in sorted(self.idle):
            if self.sched.unit == "batch":
                unit = self._next_batch_part(g)
                if unit is not None:
                    self._start_generator(g, [unit], [unit.parts[g]])
            else:
                wave = self._next_wave()
                if wave:
                    self._start_generator(g, wave, [u.rows for u in wave])

    def _take_free(self, step: int) -> list[_Unit] | None:
        """The oldest ready batch (or B groups) at most K versions stale; older ones dropped."""
        want = 1 if self.sched.unit == "batch" else self.groups_per_batch
        while len(self.partial) < want and self.ready:
            unit = self.ready.popleft()
            if step - 1 - unit.version > self.k:
                self.dropped += 1
                self.wanted += 1  # and another one made in its place
                continue
            self.partial.append(unit)
        if len(self.partial) < want:
            return None
        taken, self.partial = self.partial, []
        return taken

    def _dispatch_learner(self) -> None:
        step = self.version + 1
        if self.learner is not None or step > self.work.steps:
            return
        if self.free:
            taken = self._take_free(step)
        else:
            batch = self.batches.get(step)
            taken = [batch] if batch is not None and batch.pending == 0 else None
        if taken is None:
            return
        tokens = sum(sum(u.rows) for u in taken)
        work = learner_time(tokens, self.cl.m_learners, self.costs) + self.extra[step - 1]
        last_end = self.records[-1].end if self.records else 0.0
        record = StepRecord(
            step=step,
            start=self.t,
            end=-1.0,
            ready_at=max(u.ready_at for u in taken),
            staleness=max(step - 1 - u.version for u in taken),
            wait=self.t - last_end,
            generate_s=max(u.ready_at for u in taken) - min(u.started for u in taken),
        )
        self.learner = (self.clock["learn"] + work, record)

    def _set_rates(self) -> None:
        both = len(self.idle) < self.n and self.learner is not None
        slow = self.cl.placement == "shared" and both
        rate = 1.0 / self.cl.contention if slow else 1.0
        self.rate = {"gen": rate, "learn": rate}

    # events -----------------------------------------------------------------------------------

    def _finish_generator(self, g: int, unit: _Unit, last: bool) -> None:
        if last:
            self.busy[g] += self.t - self.started_at[g]
            self.idle.add(g)
        if self.sched.unit == "batch":
            unit.pending -= 1
            if unit.pending:
                return
            self.in_flight -= 1
            unit.ready_at = self.t
            if self.free:
                self.ready.append(unit)
            return
        self.in_flight -= 1
        unit.ready_at = self.t
        if self.free:
            self.ready.append(unit)
            return
        batch = self.batches[unit.index // self.groups_per_batch + 1]
        batch.pending -= 1
        batch.ready_at = max(batch.ready_at, self.t)

    def _finish_learner(self) -> None:
        assert self.learner is not None
        _, record = self.learner
        record.end = self.t
        self.learner_busy += record.end - record.start
        self.records.append(record)
        self.learner = None
        self.version += 1

    def _advance(self) -> None:
        """Move to the next completion; finish every job that completes then."""
        waits = []
        if self.heap:
            waits.append(((self.heap[0][0] - self.clock["gen"]) / self.rate["gen"], "gen"))
        if self.learner is not None:
            waits.append(((self.learner[0] - self.clock["learn"]) / self.rate["learn"], "learn"))
        if not waits:
            raise RuntimeError(f"the schedule stalled at step {self.version + 1}: {self.sched}")
        dt, side = min(waits)
        dt = max(dt, 0.0)
        self.t += dt
        for name in self.clock:
            self.clock[name] += dt * self.rate[name]
        if side == "gen":
            self.clock["gen"] = self.heap[0][0]  # exactly: no drift
        elif self.learner is not None:
            self.clock["learn"] = self.learner[0]
        eps = 1e-12 * max(1.0, abs(self.clock["gen"]), abs(self.clock["learn"]))
        while self.heap and self.heap[0][0] <= self.clock["gen"] + eps:
            _, _, g, unit, last = heapq.heappop(self.heap)
            self._finish_generator(g, unit, last)
        if self.learner is not None and self.learner[0] <= self.clock["learn"] + eps:
            self._finish_learner()

    def run(self) -> SimResult:
        while self.version < self.work.steps:
            self._dispatch_learner()
            self._dispatch_generators()
            self._set_rates()
            self._advance()
        for g in range(self.n):  # generators still busy at the end (free: nothing to finish)
            if g not in self.idle:
                self.busy[g] += self.t - self.started_at[g]
        return SimResult(
            steps=self.records,
            makespan=self.t,
            learner_busy=self.learner_busy,
            generator_busy=self.busy,
            dropped_batches=self.dropped if self.sched.unit == "batch" else 0,
            dropped_groups=self.dropped if self.sched.unit == "group" else 0,
        )


def simulate(
    work: Workload,
    costs: Costs,
    cluster: Cluster = Cluster(),
    schedule: Schedule = Schedule(),
    learner_extra=None,
) -> SimResult:
    """Run the schedule over the workload's steps; `learner_extra[s-1]`: seconds added to update
    s (a held-out evaluation inside the step)."""
    return _Sim(work, costs, cluster, schedule, learner_extra).run()


def summarize(result: SimResult) -> dict:
    """The numbers `predict` reports for one simulation."""
    stale = result.staleness
    return {
        "step_time_s": result.makespan / len(result.steps),
        "wall_s": result.makespan,
        "learner_idle_fraction": result.learner_idle_fraction,
        "generator_idle_fraction": result.generator_idle_fraction,
        "staleness_mean": statistics.fmean(stale),
        "staleness_max": max(stale),
        "dropped_batches": result.dropped_batches,
        "dropped_groups": result.dropped_groups,
    }


def predict(
    n_generators: int,
    m_learners: int,
    lengths,
    costs: Costs,
    staleness: int,
    mode: str,
    *,
    group_size: int = 1,
    unit: str = "batch",
    placement: str = "separate",
    contention: float = 1.0,
) -> dict:
    """`summarize` of the schedule on N generators and M learners, with the synchronous step
    time on the same cluster and speedup_vs_sync = sync step time / this step time."""
    work = lengths if isinstance(lengths, Workload) else make_workload(lengths, group_size)
    cluster = Cluster(n_generators, m_learners, placement, contention)
    k = 0 if mode == "sync" else staleness
    out = summarize(simulate(work, costs, cluster, Schedule(mode, k, unit)))
    base = Schedule("sync", 0, unit)
    sync = out if mode == "sync" else summarize(simulate(work, costs, cluster, base))
    out["sync_step_time_s"] = sync["step_time_s"]
    out["speedup_vs_sync"] = sync["step_time_s"] / out["step_time_s"]
    return out


# -- length distributions ---------------------------------------------------------------------

Z99 = statistics.NormalDist().inv_cdf(0.99)


def lognormal_lengths(
    steps: int,
    rows: int,
    median: float,
    max_new_tokens: int,
    seed: int = 0,
    spread: float = 10.0,
) -> list[list[int]]:
    """Long-tailed lengths: median * exp(sigma * Z), sigma = ln(spread) / z_0.99 (p99 = spread
    x median), rounded, clipped to [1, max_new_tokens]; iid rows, random.Random(seed)."""
    sigma = math.log(spread) / Z99
    rng = random.Random(seed)

    def one() -> int:
        return min(max_new_tokens, max(1, round(median * math.exp(sigma * rng.gauss(0.0, 1.0)))))

    return [[one() for _ in range(rows)] for _ in range(steps)]


def scaled_lengths(work: Workload, factor: float, max_new_tokens: int | None = None) -> Workload:
    """The run's own lengths times `factor`, rounded, clipped to [1, max_new_tokens]."""
    cap = max_new_tokens or math.inf
    steps = [[int(min(cap, max(1, round(x * factor)))) for x in s] for s in work.lengths]
    return make_workload(steps, work.group_size, work.prompt_tokens)


def repeat_groups(work: Workload, times: int) -> Workload:
    """Each step's batch `times` times over (a batch that grows with the cluster)."""
    return make_workload([s * times for s in work.lengths], work.group_size, work.prompt_tokens)
