"""One memory cgroup per sandbox launch, where the machine lets this process make one.

rlimits bound each process's address space; they do not see the kernel memory a program makes
the kernel hold for it: inodes and directory entries of files in its tmpfs (an empty file costs
no tmpfs block), pipe and socket buffers, page tables. A memory cgroup counts all of it (and
page cache, which the kernel reclaims before it refuses anything), for every process of the
launch together. Over the limit the kernel reclaims, then kills a process of that cgroup only:
the case ends as a crash and scores 0; the host is untouched.

Where the cgroup is made (`cgroup_home`, probed once per process, used by every launch):
  - cgroup v2: the nearest ancestor of this process's cgroup that has the memory controller in
    its `cgroup.subtree_control` and that this process may write (a systemd user session's
    `user@UID.service`, a container given a delegated subtree); the new cgroup gets
    `memory.max`, `memory.swap.max` 0, `memory.oom.group` 1 and `pids.max` when enabled there;
  - cgroup v1: this process's own cgroup in the memory hierarchy, when writable (root on a
    host or a privileged container); `memory.limit_in_bytes`, and `memory.memsw.limit_in_bytes`
    when swap is accounted.
Elsewhere there is none and the sandbox runs without it (docs/verifiers-code.md says which
resources are then bounded by what). Nothing of this process moves: only the sandbox's runner
enters a launch cgroup. Launch cgroups are reused (`CgroupPool`: a removed cgroup that still
has page cache charged to it lingers in the kernel as a dying cgroup, and one per launch piles
up), given back once the launch's last process is gone, and removed when this process exits.
The runner is moved while it starts (a thread of isolation/sandbox.py, as soon as bwrap
reports its pid), and it forks nothing of the program before the parent's go, sent once the
move is done: the program's processes are born in the cgroup. A move waits for an RCU grace
period (about 11 ms per launch here); overlapped with the runner's start it adds nothing.
"""

from __future__ import annotations

import atexit
import os
import secrets
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PREFIX = "rlvr-sandbox-"
_EMPTY_WAIT_S = 60.0  # after a launch is killed, for the kernel to finish its processes


@dataclass(frozen=True)
class CgroupHome:
    """Where launch cgroups are made: cgroup `version` 1 or 2, the directory `path`, and
    whether the v2 pids controller is enabled there."""

    version: int
    path: str
    pids: bool = False


class LaunchCgroup:
    """A cgroup for sandbox launches, one launch at a time: `configure` writes a launch's
    limits, `add(pid)` moves a process in (its later children are born there), `empty` tells
    whether the last launch's processes are all gone, `close` kills what is left and removes
    it. `CgroupPool` reuses them: a cgroup removed while pages are still charged to it (the
    page cache a launch read) lingers in the kernel as a dying cgroup, and one per launch would
    pile up over a long run."""

    def __init__(self, home: CgroupHome) -> None:
        self.home = home
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        self.path = Path(home.path, name)
        self.path.mkdir(mode=0o755)
        self.procs = str(self.path / "cgroup.procs")
        self._limits: tuple[int, int | None] | None = None
        try:
            if home.version == 2:
                _write(self.path / "memory.swap.max", 0, optional=True)
                _write(self.path / "memory.oom.group", 1, optional=True)
            else:
                _write(self.path / "memory.swappiness", 0, optional=True)
        except OSError:
            self.close()
            raise

    def configure(self, memory_bytes: int, processes: int | None) -> None:
        """The next launch's limits (written only when they change), and its peak reset."""
        if self._limits != (memory_bytes, processes):
            if self.home.version == 2:
                _write(self.path / "memory.max", memory_bytes)
                if self.home.pids and processes is not None:
                    # the runner and the checker of assert-style tests come on top
                    _write(self.path / "pids.max", processes + 2)
            else:
                # v1 keeps memory+swap >= memory at every moment: order the two writes so
                previous = self._limits[0] if self._limits else 1 << 62
                names = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
                for name in names if memory_bytes < previous else names[::-1]:
                    _write(self.path / name, memory_bytes, optional=name != names[0])
            self._limits = (memory_bytes, processes)
        # the peak since now: v1 takes any write; v2 (Linux 6.12+) resets memory.peak likewise
        name = "memory.peak" if self.home.version == 2 else "memory.max_usage_in_bytes"
        try:
            (self.path / name).write_text("0\n")
        except OSError:
            pass

    def add(self, pid: int) -> None:
        """Move process `pid` (all its threads) into the cgroup; OSError if the kernel refuses."""
        with open(self.procs, "w") as f:
            f.write(f"{pid}\n")

    def peak_bytes(self) -> int | None:
        """The most memory the launch's processes held at once, kernel memory included (None
        where the kernel does not record it; since the cgroup was made where it cannot be
        reset)."""
        name = "memory.peak" if self.home.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self.path / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def empty(self, wait_s: float = _EMPTY_WAIT_S) -> bool:
        """True once no process is left in the cgroup, SIGKILLing stragglers, within `wait_s`
        (tearing down a tmpfs of a million files takes the kernel seconds)."""
        give_up = time.monotonic() + wait_s
        delay = 0.0005
        while True:
            try:
                if not Path(self.procs).read_text().split():
                    return True
            except OSError:
                return False
            if time.monotonic() > give_up:
                return False
            _kill_members(self.path)
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def close(self) -> None:
        """Kill what is left, then remove the cgroup; one that stays busy is left for `sweep`."""
        self.empty()
        try:
            self.path.rmdir()
        except OSError:
            pass


class CgroupPool:
    """This process's launch cgroups: `lease` takes a free one (or makes one) for a launch,
    `give_back` returns it once the launch's processes are gone; at exit (`close`) every one,
    free or still leased, is emptied and removed. One pool per process: a forked child starts
    its own (`pool`)."""

    def __init__(self, home: CgroupHome) -> None:
        self.home = home
        self.free: list[LaunchCgroup] = []
        self.leased: set[LaunchCgroup] = set()
        self.closed = False
        self.owner = os.getpid()
        self.lock = threading.Lock()
        atexit.register(self.close)

    def lease(self, memory_bytes: int, processes: int | None) -> LaunchCgroup:
        with self.lock:
            cgroup = self.free.pop() if self.free else None
        if cgroup is None:
            cgroup = LaunchCgroup(self.home)
        try:
            cgroup.configure(memory_bytes, processes)
        except OSError:
            cgroup.close()
            raise
        with self.lock:
            self.leased.add(cgroup)
        return cgroup

    def give_back(self, cgroup: LaunchCgroup) -> None:
        """Back to the free list once empty (waits; call it off the launch's own path)."""
        empty = cgroup.empty()
        with self.lock:
            self.leased.discard(cgroup)
            keep = empty and not self.closed
            if keep:
                self.free.append(cgroup)
        if not keep:
            cgroup.close()

    def close(self) -> None:
        if os.getpid() != self.owner:  # a forked child that exits normally: not its cgroups
            return
        with self.lock:
            self.closed = True
            cgroups, self.free = [*self.free, *self.leased], []
            self.leased = set()
        for cgroup in cgroups:
            cgroup.close()


_POOLS: dict[tuple[int, str], CgroupPool] = {}
_POOLS_LOCK = threading.Lock()


def pool(home: CgroupHome) -> CgroupPool:
    """This process's pool of launch cgroups under `home` (a forked child gets a new one: the
    parent's free cgroups are the parent's)."""
    key = (os.getpid(), home.path)
    with _POOLS_LOCK:
        if key not in _POOLS:
            _POOLS[key] = CgroupPool(home)
        return _POOLS[key]


def _write(path: Path, value: int, optional: bool = False) -> None:
    try:
        path.write_text(f"{value}\n")
    except FileNotFoundError:
        if not optional:
            raise
    except OSError:
        if not optional or path.exists():
            raise


def _kill_members(path: Path) -> None:
    kill = path / "cgroup.kill"  # v2, Linux 5.14+: the whole cgroup at once
    if kill.exists():
        try:
            kill.write_text("1\n")
            return
        except OSError:
            pass
    try:
        pids = (path / "cgroup.procs").read_text().split()
    except OSError:
        return
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount root, mount point, fs type, super options) of each cgroup mount."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if sep and len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            root, point = _unescape(fields[3]), _unescape(fields[4])
            out.append((root, point, tail[0], set(tail[2].split(","))))
    return out


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per hierarchy: "" for v2, the controller list for v1."""
    out = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        out[controllers] = path
    return out


def _inside(root: str, point: str, path: str) -> Path | None:
    if path != root and not path.startswith(root.rstrip("/") + "/"):
        return None
    return Path(point, os.path.relpath(path, root))


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK | os.X_OK) and os.access(path / "cgroup.procs", os.W_OK)


def _candidates() -> list[CgroupHome]:
    mounts, own = _mounts(), _own_cgroups()
    found = []
    for root, point, fstype, options in mounts:
        if fstype == "cgroup2" and "" in own:
            here = _inside(root, point, own[""])
            while here is not None and here.is_relative_to(point):
                try:
                    enabled = (here / "cgroup.subtree_control").read_text().split()
                except OSError:
                    enabled = []
                if "memory" in enabled and _writable(here):
                    found.append(CgroupHome(2, str(here), pids="pids" in enabled))
                    break
                here = here.parent if here != Path(point) else None
        elif fstype == "cgroup" and "memory" in options:
            path = next((p for c, p in own.items() if "memory" in c.split(",")), None)
            here = _inside(root, point, path) if path is not None else None
            if here is not None and _writable(here):
                found.append(CgroupHome(1, str(here)))
    return sorted(found, key=lambda home: -home.version)  # v2 first


def _works(home: CgroupHome) -> bool:
    """Make a cgroup there, limit it, move a child process into it: the launch path, once."""
    try:
        cgroup = LaunchCgroup(home)
    except OSError:
        return False
    try:
        cgroup.configure(64 << 20, 4)
        child = subprocess.Popen(["/bin/cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        assert child.stdin is not None  # stdin=PIPE
    except OSError:
        cgroup.close()
        return False
    try:
        cgroup.add(child.pid)
        return True
    except OSError:
        return False
    finally:
        child.stdin.close()
        child.wait()
        cgroup.close()


def sweep(home: CgroupHome) -> None:
    """Remove launch cgroups left by processes that no longer exist (a killed trainer)."""
    try:
        entries = list(Path(home.path).iterdir())
    except OSError:
        return
    for entry in entries:
        owner = entry.name[len(PREFIX) :].split("-")[0]
        if entry.name.startswith(PREFIX) and owner.isdigit() and not _alive(int(owner)):
            try:
                entry.rmdir()
            except OSError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


@cache
def cgroup_home() -> CgroupHome | None:
    """Where this process can make launch cgroups (probed once), or None."""
    try:
        candidates = _candidates()
    except (OSError, ValueError):
        return None
    for home in candidates:
        if _works(home):
            sweep(home)
            return home
    return None
