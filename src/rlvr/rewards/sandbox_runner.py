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
    if spec["fn_name"] is not None or spec["checked"]:
        import json  # noqa: F401  (imported once here, before the forks, not once per case)

    # Kill everything else visible after each case, but only inside our own pid namespace.
    kill_all = spec["pid_namespace"] and os.getpid() == 2
    send_frame(result_fd, read_exact(control_fd, 16), b"H", 0)
    try:
        if spec["checked"]:  # one case: the program's process and the test's process
            run_checked_case(spec, path, control_fd, result_fd, kill_all)
        for index, case in enumerate(spec["cases"] if not spec["checked"] else ()):
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


def kill_leftovers(pgid, kill_all) -> None:
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
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


def send_result(result_fd, nonce, index, wait_status, status, wall_s, stderr, output) -> None:
    exit_code = os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else -1
    signal_number = os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else -1
    status_code = 1 if status == "output_limit" else 0
    header = RESULT.pack(status_code, exit_code, signal_number, wall_s, len(stderr))
    send_frame(result_fd, nonce, b"R", index, header + stderr + output)


def run_checked_case(spec, path, control_fd, result_fd, kill_all) -> None:
    """Assert-style tests, in two processes (docs/verifiers-code.md, "Assert-style tests").

    The program's process is forked first and serves calls of its functions; only then is the
    test code read from the control memfd, and the checker process forked with it. The checker
    runs the test with stubs in place of the program's functions: each call's arguments go to
    the program's process and its result comes back as a plain value (see encode_value), so
    nothing of the program runs in the checker and nothing of the test is in the program's
    memory. The verdict is the checker's alone, written on a pipe the program never held."""
    calls_r, calls_w = os.pipe()  # checker -> program: calls
    replies_r, replies_w = os.pipe()  # program -> checker: results
    err_r, err_w = os.pipe()
    program_pid = fork()
    if program_pid == 0:
        serve_calls(spec, path, calls_r, replies_w, err_w)
    os.close(calls_r)
    os.close(replies_w)
    nonce = read_exact(control_fd, 16)
    (size,) = struct.unpack(">Q", read_exact(control_fd, 8))
    test = marshal.loads(read_exact(control_fd, size))
    verdict_r, verdict_w = os.pipe()
    checker_pid = fork()
    if checker_pid == 0:
        run_checker(spec, test, calls_w, replies_r, verdict_w, err_w)
    for fd in (calls_w, replies_r, verdict_w, err_w):
        os.close(fd)
    for pid in (program_pid, checker_pid):  # one process group, killed as one when unsandboxed
        try:
            os.setpgid(pid, program_pid)
        except OSError:
            pass
    send_frame(result_fd, nonce, b"S", 0, struct.pack(">I", program_pid))
    started = time.monotonic()
    verdict, stderr, status = collect_output(
        checker_pid, verdict_r, err_r, spec["limits"]["output_bytes"]
    )
    wall_s = time.monotonic() - started
    _, wait_status = os.waitpid(checker_pid, 0)
    try:  # reaped before kill_leftovers, which waits until nothing is left to kill
        os.kill(program_pid, signal.SIGKILL)
    except OSError:
        pass
    os.waitpid(program_pid, 0)
    kill_leftovers(program_pid, kill_all)
    send_result(result_fd, nonce, 0, wait_status, status, wall_s, stderr, verdict)


def serve_calls(spec, path, calls_r, replies_w, err_w) -> None:
    """The program's process: run the program as module `solution`, then answer each call
    `[seq, name, args, kwargs]` on fd 3 with `[seq, "ok", value]` or `[seq, "error", text]` on
    fd 4. Everything here shares an interpreter with the program, so whatever it writes is only
    a claim about its functions' results. Never returns."""
    status = 1
    try:
        os.setpgid(0, 0)
        devnull = os.open(os.devnull, os.O_RDWR)
        wire_fds([devnull, devnull, err_w, calls_r, replies_w])
        cpu = spec["limits"]["cpu_s"]
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        from json import dumps, loads

        open_std_streams(path)
        namespace = new_module("solution", path)
        exec(compile(spec["source"], path, "exec"), namespace)
        while True:
            request = read_message(3, None)
            if request is None:
                break
            seq, name, args, kwargs = loads(request)
            try:
                fn = namespace.get(name)
                if fn is None and isinstance(namespace.get("Solution"), type):
                    fn = getattr(namespace["Solution"](), name, None)
                if not callable(fn):
                    raise NameError(f"function {name!r} is not defined")
                value = fn(*decode_value(args), **decode_value(kwargs))
                reply = [seq, "ok", encode_value(value)]
            except BaseException as e:  # the program's own error is the test's failure
                reply = [seq, "error", f"{type(e).__name__}: {e}"[:300]]
            payload = dumps(reply).encode()
            write_all(4, struct.pack(">I", len(payload)) + payload)
        status = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        flush_and_exit(status)


def run_checker(spec, test, calls_w, replies_r, verdict_w, err_w) -> None:
    """The checker's process: trusted test code only. Signals are blocked (a signal from the
    program can only kill it, which fails the test). Writes `passed total` and a short reason
    on fd 5. Never returns."""
    status = 1
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        devnull = os.open(os.devnull, os.O_RDWR)
        wire_fds([devnull, devnull, err_w, calls_w, replies_r, verdict_w])
        cpu = spec["limits"]["cpu_s"]
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        passed, total, reason = run_test(test, spec["limits"]["output_bytes"])
        write_all(5, f"{passed} {total}\n{reason}".encode("utf-8", "replace"))
        status = 0
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        os._exit(status)


class CandidateError(Exception):
    """A call of the program's function failed: it raised, or its process died or lied."""


def run_test(test, cap):
    """(passed, total, reason) of the test description `test` (rewards/code_asserts.py)."""
    import builtins
    import json

    seq = [0]

    def remote(name):
        def call(*args, **kwargs):
            seq[0] += 1
            request = json.dumps([seq[0], name, encode_value(args), encode_value(kwargs)])
            try:
                write_all(3, struct.pack(">I", len(request)) + request.encode())
                reply = read_message(4, cap)
            except OSError:
                reply = None
            if reply is None:
                raise CandidateError(f"the program's process ended during a call of {name}")
            try:
                got_seq, kind, value = json.loads(reply)
                if got_seq != seq[0] or kind not in ("ok", "error"):
                    raise ValueError("out of order")
                if kind == "error":
                    raise CandidateError(str(value)[:300])
                return decode_value(value)
            except (ValueError, TypeError, RecursionError, MemoryError):
                raise CandidateError(f"{name} returned no plain value") from None

        call.__name__ = call.__qualname__ = name
        return call

    namespace = {"__name__": "__rlvr_test__", "__builtins__": builtins}
    if test["setup"]:
        try:
            setup = compile(test["setup"], "<setup>", "exec", dont_inherit=True, optimize=0)
        except SyntaxError:
            setup = None  # a prompt that is not code: no helpers to define
            if test["kind"] != "check":
                raise
        if setup is not None:
            exec(setup, namespace)
    for name in test["modules"]:
        if name not in namespace:
            try:
                namespace[name] = __import__(name)
            except ImportError:
                pass
    for name in test["stubs"]:
        namespace[name] = remote(name)
    if test["kind"] == "check":
        exec(compile(test["test"], "<test>", "exec", dont_inherit=True, optimize=0), namespace)
        namespace[test["entry_point"]] = candidate = remote(test["entry_point"])
        try:
            namespace["check"](candidate)
        except Exception as e:
            return 0, 1, failure(e, "<test>")
        return 1, 1, ""
    passed, reason = 0, ""
    for i, source in enumerate(test["asserts"]):
        where = f"<assert {i + 1}>"
        try:
            exec(compile(source, where, "exec", dont_inherit=True, optimize=0), namespace)
            passed += 1
        except Exception as e:
            reason = reason or f"assert {i + 1}: " + failure(e, where)
            if test["stop_at_first_failure"]:
                break
    return passed, len(test["asserts"]), reason


def failure(error, filename) -> str:
    """'AssertionError at test line 7', or the program's error for a failed call."""
    if isinstance(error, CandidateError):
        return str(error)
    line = None
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    where = f" at test line {line}" if line is not None and filename == "<test>" else ""
    return f"{type(error).__name__}{where}"


def read_message(fd, cap):
    """One length-prefixed message, or None at EOF (or when it is longer than `cap`)."""
    header = b""
    while len(header) < 4:
        chunk = os.read(fd, 4 - len(header))
        if not chunk:
            return None
        header += chunk
    (size,) = struct.unpack(">I", header)
    if cap is not None and size > cap:
        return None
    try:
        return read_exact(fd, size)
    except EOFError:
        return None


# Plain values cross between the checker and the program as JSON with tags: a JSON object is
# always a tag, so the checker builds only exact builtin types (no subclass, no __eq__ of the
# program's) and only the types below. Floats keep their exact value (repr round-trips).
_TAGS = {"tuple": tuple, "set": set, "frozenset": frozenset}


def encode_value(value, depth=0):
    kind = type(value)
    if depth > 100:
        raise ValueError("a value nested more than 100 levels deep")
    if value is None or kind in (bool, str, float):
        return value
    if kind is int:
        return value if -(2**53) < value < 2**53 else {"int": hex(value)}
    if kind is list:
        return [encode_value(v, depth + 1) for v in value]
    if kind in (tuple, set, frozenset):
        return {kind.__name__: [encode_value(v, depth + 1) for v in value]}
    if kind is dict:
        return {
            "dict": [
                [encode_value(k, depth + 1), encode_value(v, depth + 1)] for k, v in value.items()
            ]
        }
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind is complex:
        return {"complex": [value.real, value.imag]}
    raise TypeError(f"a value of type {kind.__name__} is not a plain value")


def decode_value(obj):
    kind = type(obj)
    if obj is None or kind in (bool, str, float, int):
        return obj
    if kind is list:
        return [decode_value(v) for v in obj]
    if kind is not dict or len(obj) != 1:
        raise ValueError("not an encoded value")
    ((tag, body),) = obj.items()
    if tag in _TAGS and type(body) is list:
        return _TAGS[tag](decode_value(v) for v in body)
    if tag == "dict" and type(body) is list:
        return {decode_value(k): decode_value(v) for k, v in body}
    if tag == "int" and type(body) is str:
        return int(body, 16)
    if tag == "bytes" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "complex" and type(body) is list and len(body) == 2:
        return complex(float(body[0]), float(body[1]))
    raise ValueError(f"unknown tag {tag!r}")


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
    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", closefd=False)
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
