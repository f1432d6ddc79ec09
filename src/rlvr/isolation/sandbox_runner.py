"""The runner inside the code sandbox: stdlib only, executed by path, never imported there.

    python -I -S -X utf8 sandbox_runner.py CONTROL_FD RESULT_FD GO_FD

isolation/sandbox.py binds this one file read-only into the bubblewrap namespace at a fixed path
(`RUNNER_PATH` there) and runs it with the host's interpreter in isolated mode without site: no
other file of rlvr is visible or importable inside the sandbox, so every name used here comes
from the standard library. The host imports this module only for the frame format (`FRAME`,
`RESULT`) and `write_all`, so the two sides cannot disagree on it.

What it does: reads the spec (marshal) and the nonces from the control memfd, sets the rlimits,
drops to its own uid when started as root, makes itself non-dumpable, writes the program to the
work directory, then forks one fresh process per case and streams `S` (started: the case's pid)
and `R` (result: status, exit code, signal, wall seconds, stderr tail, output) frames back on the
result pipe. Every process that runs untrusted code (the case, the program's process and the
checker of assert-style tests) installs the spec's seccomp filter (isolation/seccomp.py) before
it does. Sandboxed, the runner is the pid namespace's pid 1: signals from the program do not
reach it, and it reaps what the program leaves behind. Nothing is judged here: the parent
compares outputs (see rewards/code/__init__.py).
"""

import ctypes
import marshal
import os
import resource
import selectors
import signal
import struct
import sys
import time
import types

FRAME = struct.Struct(">16scII")  # nonce, kind (H hello, S start, R result), case index, length
# R payload: status (0 exited, 1 output limit), exit code, signal (-1: none), wall s, stderr size;
# then stderr, then output.
RESULT = struct.Struct(">BiidI")


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_exact(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise EOFError("control channel closed early")
        data += chunk
    return data


def send_frame(fd: int, nonce: bytes, kind: bytes, index: int, payload: bytes = b"") -> None:
    write_all(fd, FRAME.pack(nonce, kind, index, len(payload)) + payload)


def main() -> None:
    control_fd, result_fd, go_fd = (int(arg) for arg in sys.argv[1:4])
    (size,) = struct.unpack(">Q", read_exact(control_fd, 8))
    spec = marshal.loads(read_exact(control_fd, size))
    limits = spec["limits"]
    # No handler of ours for the program to trigger (as pid 1 the rest are ignored already).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name, value in (
        ("RLIMIT_AS", limits["memory_bytes"]),
        ("RLIMIT_FSIZE", limits["file_bytes"]),
        ("RLIMIT_NOFILE", limits["open_files"]),
        ("RLIMIT_CORE", 0),
        ("RLIMIT_NPROC", limits["processes"]),
        ("RLIMIT_MEMLOCK", 0),  # no pages pinned out of reclaim's reach
        ("RLIMIT_MSGQUEUE", 0),
        ("RLIMIT_RTPRIO", 0),  # no realtime scheduling that would starve the host
        ("RLIMIT_NICE", 0),
    ):
        if value is not None:
            resource.setrlimit(getattr(resource, name), (value, value))
    uid = spec["drop_to_uid"]
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        status = open("/proc/self/status").read()
        if os.getresuid() != (uid,) * 3 or "CapEff:\t0000000000000000" not in status:
            raise SystemExit("runner: could not drop privileges")
    libc = ctypes.CDLL(None, use_errno=True)
    # PR_SET_DUMPABLE 0 closes /proc/<runner>/{fd,mem} and ptrace to the program; 38 is
    # PR_SET_NO_NEW_PRIVS (no setuid or file-capability gains through exec).
    if libc.prctl(4, 0, 0, 0, 0) != 0 or libc.prctl(38, 1, 0, 0, 0) != 0:
        raise SystemExit("runner: prctl failed")
    spec["confine"] = confiner(libc, spec["seccomp"])
    # Kill everything else visible after each case, but only inside our own pid namespace.
    kill_all = spec["pid_namespace"] and os.getpid() == 1
    send_frame(result_fd, read_exact(control_fd, 16), b"H", 0)
    # The parent moves this process into the launch's memory cgroup (when there is one) before
    # the go: every process of the program is forked after it, so is born in the cgroup.
    if not os.read(go_fd, 1):
        raise SystemExit("runner: the parent closed the launch before the go")
    os.close(go_fd)
    # From here on what happens depends on the program (its size, its text): a failure is this
    # launch's crash, which the parent scores as a failed case, never a sandbox that cannot
    # start (which would stop a run).
    workdir = spec["workdir"]
    if workdir is None:  # unsandboxed: a private directory instead of the sandbox's tmpfs
        import tempfile

        workdir = tempfile.mkdtemp(prefix="rlvr-run-")
    try:
        os.chdir(workdir)
        path = os.path.join(workdir, spec["file_name"])
        # surrogatepass: a lone surrogate (JSON's "\ud800") is written, as compile() takes it
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(spec["source"])
        if spec["fn_name"] is not None or spec["checked"]:
            import json  # noqa: F401  (imported once here, before the forks, not once per case)
        if spec["checked"]:  # one case: the program's process and the test's process
            load_checker().run_checked_case(spec, path, control_fd, result_fd, kill_all)
        for index, case in enumerate(spec["cases"] if not spec["checked"] else ()):
            run_case(spec, index, case, path, control_fd, result_fd, kill_all)
    finally:
        if spec["workdir"] is None:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)


def load_checker():
    """sandbox_checker.py, beside this file, loaded by path (no directory is put on sys.path:
    unsandboxed, this file's directory is rlvr's own, whose math.py would shadow the stdlib's)."""
    import importlib.util

    sys.modules.setdefault("sandbox_runner", sys.modules[__name__])
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_checker.py")
    spec = importlib.util.spec_from_file_location("sandbox_checker", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_case(spec, index, case, path, control_fd, result_fd, kill_all) -> None:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    if spec["fn_name"] is None:
        stdin_fd = os.memfd_create("stdin")
        write_all(stdin_fd, case.encode("utf-8", "surrogateescape"))
        os.lseek(stdin_fd, 0, os.SEEK_SET)
    else:
        stdin_fd = os.open(os.devnull, os.O_RDONLY)
    pid = fork()
    if pid == 0:
        run_child(spec, case, path, stdin_fd, out_w, err_w)
    for fd in (stdin_fd, out_w, err_w):
        os.close(fd)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    # Read this case's nonce only now: the forked program never has it in memory.
    nonce = read_exact(control_fd, 16)
    send_frame(result_fd, nonce, b"S", index, struct.pack(">I", pid))
    started = time.monotonic()
    output, stderr, status = collect_output(pid, out_r, err_r, spec["limits"]["output_bytes"])
    wall_s = time.monotonic() - started
    if status == "output_limit":
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    _, wait_status = os.waitpid(pid, 0)
    kill_leftovers(pid, kill_all)
    send_result(result_fd, nonce, index, wait_status, status, wall_s, stderr, output)


def fork() -> int:
    give_up = time.monotonic() + 1.0
    while True:  # right after a fork bomb the killed processes may still hold RLIMIT_NPROC
        try:
            return os.fork()
        except BlockingIOError:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.01)


def confiner(libc, program):
    """A function that installs the seccomp filter `program` (bytes of a sock_filter array) in
    the calling process and its future children; the structures are built once, here, so the
    forked case only makes the one call."""
    if program is None:  # unsandboxed on an architecture without a table
        return lambda: None
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))

    def confine():
        # PR_SET_SECCOMP (22), SECCOMP_MODE_FILTER (2); NO_NEW_PRIVS is already set
        if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:
            raise SystemExit(f"runner: seccomp filter refused (errno {ctypes.get_errno()})")

    confine.keep = (buffer, fprog)  # alive as long as the function
    return confine


def kill_leftovers(pgid, kill_all) -> None:
    if kill_all:  # pid 1 of the namespace: what the case left is ours to kill and reap
        give_up = time.monotonic() + 1.0
        while time.monotonic() < give_up:
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                break
            try:
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            except ChildProcessError:
                pass
            time.sleep(0.001)
    else:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


def send_result(result_fd, nonce, index, wait_status, status, wall_s, stderr, output) -> None:
    exit_code = os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else -1
    signal_number = os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else -1
    status_code = 1 if status == "output_limit" else 0
    header = RESULT.pack(status_code, exit_code, signal_number, wall_s, len(stderr))
    send_frame(result_fd, nonce, b"R", index, header + stderr + output)


def collect_output(pid, out_r, err_r, cap):
    """Read the case's stdout and stderr until the process exits (not until EOF: a background
    child may hold the pipes open), then drain what is already buffered. Returns (stdout,
    stderr tail, status)."""
    pidfd = os.pidfd_open(pid)
    selector = selectors.DefaultSelector()
    for fd in (out_r, err_r, pidfd):
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    output, stderr, stderr_total = bytearray(), bytearray(), 0
    status, exited, pipes = "exited", False, {out_r, err_r}
    while not exited or pipes:
        if exited:
            ready = list(pipes)
        else:
            ready = [key.fd for key, _ in selector.select()]
            exited = pidfd in ready
        for fd in pipes.intersection(ready):
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                if exited:  # drained; later writes from leftover processes are ignored
                    pipes.discard(fd)
                continue
            if not chunk:
                pipes.discard(fd)
                selector.unregister(fd)
            elif fd == out_r:
                output += chunk
            else:
                stderr_total += len(chunk)
                stderr = (stderr + chunk)[-2048:]
        if len(output) > cap or stderr_total > cap:
            status = "output_limit"
            break
    selector.close()
    for fd in (out_r, err_r, pidfd):
        os.close(fd)
    return bytes(output[:cap]), bytes(stderr), status


def run_child(spec, case, path, stdin_fd, out_w, err_w) -> None:
    """The forked case process: wire fds 0-2 (and 3: the JSON result of a call), close every
    other fd, set the CPU limit, then run the program. Never returns."""
    status = 1
    try:
        os.setpgid(0, 0)
        fn_mode = spec["fn_name"] is not None
        devnull = os.open(os.devnull, os.O_WRONLY)
        wire_fds([stdin_fd, devnull if fn_mode else out_w, err_w] + ([out_w] if fn_mode else []))
        cpu = spec["limits"]["cpu_s"]
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        signal.signal(signal.SIGINT, signal.default_int_handler)
        spec["confine"]()
        if spec["command"] is not None:
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            argv = [arg.replace("{file}", path) for arg in spec["command"]]
            os.execvp(argv[0], argv)
        open_std_streams(path)
        namespace = new_module("solution" if fn_mode else "__main__", path)
        if fn_mode:  # bound before the program runs (it can still replace it: see the docs)
            from json import dumps
        status = 0
        try:
            exec(compile(spec["source"], path, "exec"), namespace)
            if fn_mode:
                fn = namespace.get(spec["fn_name"])
                if fn is None and isinstance(namespace.get("Solution"), type):
                    fn = getattr(namespace["Solution"](), spec["fn_name"], None)
                if not callable(fn):
                    raise NameError(f"function {spec['fn_name']!r} is not defined")
                value = fn(*case)
                try:
                    text = dumps(value, allow_nan=False)
                except (TypeError, ValueError) as e:
                    raise TypeError(f"the result is not JSON-serialisable: {e}") from None
                write_all(3, text.encode())
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                status = e.code or 0
            else:
                print(e.code, file=sys.stderr)
                status = 1
    except BaseException:
        import traceback  # only on failure: importing it costs ~3 ms per launch

        traceback.print_exc()
        status = 1
    finally:
        threading = sys.modules.get("threading")
        if threading is not None:  # as at interpreter exit: wait for non-daemon threads (the
            try:  # competitive-programming idiom runs main() in a big-stack thread, unjoined)
                threading._shutdown()
            except BaseException:
                pass
        flush_and_exit(status)


def wire_fds(fds) -> None:
    """Make fds[i] the process's fd i and close every other fd."""
    import fcntl

    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in fds]  # no source is overwritten early
    for target, fd in enumerate(moved):
        os.dup2(fd, target, inheritable=target < 3)
    for name in os.listdir("/proc/self/fd"):
        if int(name) >= len(fds):
            try:
                os.close(int(name))
            except OSError:
                pass


def open_std_streams(path) -> None:
    # sys.__std*__ are replaced too (final in the stubs): fds 0-2 are the case's own.
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.__stdin__ = sys.stdin  # type: ignore[misc]
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.__stdout__ = sys.stdout  # type: ignore[misc]
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
    sys.__stderr__ = sys.stderr  # type: ignore[misc]
    sys.argv = [path]


def new_module(name, path) -> dict:
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    return module.__dict__


def flush_and_exit(status) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(status & 0xFF)


if __name__ == "__main__":
    main()
