"""The runner inside the code sandbox: stdlib only, executed by path, never imported there.

    python -I -S -X utf8 sandbox_runner.py CONTROL_FD RESULT_FD

rewards/sandbox.py binds this one file read-only into the bubblewrap namespace at a fixed path
(`RUNNER_PATH` there) and runs it with the host's interpreter in isolated mode without site: no
other file of rlvr is visible or importable inside the sandbox, so every name used here comes
from the standard library. The host imports this module only for the frame format (`FRAME`,
`RESULT`) and `write_all`, so the two sides cannot disagree on it.

What it does: reads the spec (marshal) and the nonces from the control memfd, sets the rlimits,
drops to its own uid when started as root, makes itself non-dumpable, writes the program to the
work directory, then forks one fresh process per case and streams `S` (started: the case's pid)
and `R` (result: status, exit code, signal, wall seconds, stderr tail, output) frames back on the
result pipe. Nothing is judged here: the parent compares outputs (see rewards/code.py).
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
    control_fd, result_fd = int(sys.argv[1]), int(sys.argv[2])
    (size,) = struct.unpack(">Q", read_exact(control_fd, 8))
    spec = marshal.loads(read_exact(control_fd, size))
    limits = spec["limits"]
    for name, value in (
        ("RLIMIT_AS", limits["memory_bytes"]),
        ("RLIMIT_FSIZE", limits["file_bytes"]),
        ("RLIMIT_NOFILE", limits["open_files"]),
        ("RLIMIT_CORE", 0),
        ("RLIMIT_NPROC", limits["processes"]),
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
    workdir = spec["workdir"]
    if workdir is None:  # unsandboxed: a private directory instead of the sandbox's tmpfs
        import tempfile

        workdir = tempfile.mkdtemp(prefix="rlvr-run-")
    os.chdir(workdir)
    path = os.path.join(workdir, spec["file_name"])
    with open(path, "w", encoding="utf-8") as f:
        f.write(spec["source"])
    if spec["fn_name"] is not None:
        import json  # noqa: F401  (imported once here, before the forks, not once per case)

    # Kill everything else visible after each case, but only inside our own pid namespace.
    kill_all = spec["pid_namespace"] and os.getpid() == 2
    send_frame(result_fd, read_exact(control_fd, 16), b"H", 0)
    try:
        for index, case in enumerate(spec["cases"]):
            run_case(spec, index, case, path, control_fd, result_fd, kill_all)
    finally:
        if spec["workdir"] is None:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)


def run_case(spec, index, case, path, control_fd, result_fd, kill_all) -> None:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    if spec["fn_name"] is None:
        stdin_fd = os.memfd_create("stdin")
        write_all(stdin_fd, case.encode("utf-8", "surrogateescape"))
        os.lseek(stdin_fd, 0, os.SEEK_SET)
    else:
        stdin_fd = os.open(os.devnull, os.O_RDONLY)
    give_up = time.monotonic() + 1.0
    while True:  # right after a fork bomb the killed processes may still hold RLIMIT_NPROC
        try:
            pid = os.fork()
            break
        except BlockingIOError:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.01)
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
    if kill_all:
        give_up = time.monotonic() + 1.0
        while time.monotonic() < give_up:
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                break
            time.sleep(0.001)
    else:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
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
        os.dup2(stdin_fd, 0)
        os.dup2(devnull if fn_mode else out_w, 1)
        os.dup2(err_w, 2)
        if fn_mode:
            os.dup2(out_w, 3, inheritable=False)
        first_closed = 4 if fn_mode else 3
        for name in os.listdir("/proc/self/fd"):
            if int(name) >= first_closed:
                try:
                    os.close(int(name))
                except OSError:
                    pass
        cpu = spec["limits"]["cpu_s"]
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        if spec["command"] is not None:
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            argv = [arg.replace("{file}", path) for arg in spec["command"]]
            os.execvp(argv[0], argv)
        sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", closefd=False)
        sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", closefd=False)
        sys.argv = [path]
        module = types.ModuleType("solution" if fn_mode else "__main__")
        module.__file__ = path
        sys.modules[module.__name__] = module
        namespace = module.__dict__
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
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(status & 0xFF)


if __name__ == "__main__":
    main()
