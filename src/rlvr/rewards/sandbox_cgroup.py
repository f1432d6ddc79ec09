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
enters the new cgroup, and the cgroup is removed when the launch ends. The runner is moved while
it starts (a thread of rewards/sandbox.py, as soon as bwrap reports its pid), and it forks
nothing of the program before the parent's go, sent once the move is done: the program's
processes are born in the cgroup. A move waits for an RCU grace period (about 11 ms per launch
here); overlapped with the runner's start it adds nothing to a launch.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PREFIX = "rlvr-sandbox-"
_REMOVE_WAIT_S = 2.0  # after the launch is killed, for the kernel to finish its processes


@dataclass(frozen=True)
class CgroupHome:
    """Where launch cgroups are made: cgroup `version` 1 or 2, the directory `path`, and
    whether the v2 pids controller is enabled there."""

    version: int
    path: str
    pids: bool = False


class LaunchCgroup:
    """A cgroup of its own for one sandbox launch, with its limits written; `add(pid)` moves a
    process in (its later children are born there); `close` kills what is left and removes
    it."""

    def __init__(self, home: CgroupHome, memory_bytes: int, processes: int | None) -> None:
        self.home = home
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        self.path = Path(home.path, name)
        self.path.mkdir(mode=0o755)
        try:
            if home.version == 2:
                _write(self.path / "memory.max", memory_bytes)
                _write(self.path / "memory.swap.max", 0, optional=True)
                _write(self.path / "memory.oom.group", 1, optional=True)
                if home.pids and processes is not None:
                    # the runner and the checker of assert-style tests come on top
                    _write(self.path / "pids.max", processes + 2)
            else:
                _write(self.path / "memory.limit_in_bytes", memory_bytes)
                _write(self.path / "memory.memsw.limit_in_bytes", memory_bytes, optional=True)
                _write(self.path / "memory.swappiness", 0, optional=True)
        except OSError:
            self.close()
            raise
        self.procs = str(self.path / "cgroup.procs")

    def add(self, pid: int) -> None:
        """Move process `pid` (all its threads) into the cgroup; OSError if the kernel refuses."""
        with open(self.procs, "w") as f:
            f.write(f"{pid}\n")

    def peak_bytes(self) -> int | None:
        """The most memory the launch's processes held at once, kernel memory included (None
        where the kernel does not record it)."""
        name = "memory.peak" if self.home.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self.path / name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        """SIGKILL every process still in the cgroup, then remove it (retrying while the kernel
        finishes them); a cgroup that stays busy is left for `sweep` to remove later."""
        give_up = time.monotonic() + _REMOVE_WAIT_S
        delay = 0.0005
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > give_up:
                    return
            _kill_members(self.path)
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


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
        cgroup = LaunchCgroup(home, 64 << 20, 4)
    except OSError:
        return False
    try:
        child = subprocess.Popen(["/bin/cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
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
