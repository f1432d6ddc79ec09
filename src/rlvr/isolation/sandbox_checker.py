"""The checker of assert-style tests (HumanEval, MBPP) inside the code sandbox: standard
library only, loaded by path by the runner (isolation/sandbox_runner.py, which it imports back as
`sandbox_runner`: the runner registers itself under that name first) when a launch has a test.

Two processes per sample (docs/verifiers-code.md, "Assert-style tests"): the program's, which
serves calls of its functions, and the checker's, which runs the test with stubs that forward
each call and receive plain values back. The test code is read from the control memfd only
after the program's process is forked, so it is never in that process's memory.
"""

import marshal
import os
import resource
import signal
import struct
import time

from sandbox_runner import (
    collect_output,
    flush_and_exit,
    fork,
    kill_leftovers,
    new_module,
    open_std_streams,
    read_exact,
    send_frame,
    send_result,
    wire_fds,
    write_all,
)


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
        signal.signal(signal.SIGINT, signal.default_int_handler)
        spec["confine"]()
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
        spec["confine"]()
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
    """(passed, total, reason) of the test description `test` (rewards/code/asserts.py)."""
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
            except CandidateError:
                raise
            except Exception:  # anything the reply's bytes make decoding raise (a float
                # of a huge int is an OverflowError): the program's fault, not the checker's
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
