"""Hostile programs against the code verifier's sandbox.

Each attack is written so that, if it worked, the program would print the expected output and
score 1; the test asserts the reward it gets instead, and that the check ends within its time
limit plus 1 s. Every bomb here runs only inside the sandbox, under rlimits.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from rlvr.errors import UserError
from rlvr.isolation import sandbox as sandbox_module
from rlvr.isolation.sandbox import Program, Sandbox, SandboxLimits, SandboxUnavailable
from rlvr.rewards.code import CodeVerifier

TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def verifier() -> CodeVerifier:
    v = CodeVerifier(timeout_s=TIMEOUT_S, memory_mb=256)
    try:
        v.sandbox.run(Program("pass"), [""])
    except SandboxUnavailable as e:
        pytest.skip(f"bwrap sandbox unavailable here: {e}")
    return v


def check(verifier, code: str, expected: str = "", *, tests=None, fn_name=None, timeout_s=None):
    """Score `code` and assert the whole check ended within its limit + 1 s."""
    sample = {"id": "attack", "tests": tests or [{"input": "", "output": expected}]}
    if fn_name:
        sample["fn_name"] = fn_name
    completion = "Here:\n```python\n" + textwrap.dedent(code).strip() + "\n```\n"
    started = time.monotonic()
    score = verifier.score(completion, sample)
    wall = time.monotonic() - started
    limit = (timeout_s or TIMEOUT_S) * len(sample["tests"]) + 1.0
    assert wall < limit, f"check took {wall:.2f} s (limit {limit:.2f} s): {score}"
    return score


def host_processes_with(marker: str) -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline and "pytest" not in cmdline:
            found.append(f"{pid}: {cmdline[:80]}")
    return found


def sandbox_uids() -> set[int]:
    """The root-mode sandbox uids (>= 2**30, a fresh one per launch) host processes run as."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
        if uid >= 2**30:
            found.add(uid)
    return found


def assert_no_sandbox_left(wait_s: float = 10.0) -> None:
    """No sandbox uid seen now still has a process `wait_s` later. Tests running at the same
    time (pytest -n) start sandboxes of their own, each under a fresh uid that comes and goes;
    a contained fork bomb's uid must go too, and one that escaped the kill stays."""
    seen = sandbox_uids()
    deadline = time.monotonic() + wait_s
    while seen and time.monotonic() < deadline:
        time.sleep(0.1)
        seen &= sandbox_uids()
    assert not seen, f"sandbox uids still running processes: {sorted(seen)}"


WRONG = "0/1 tests passed; test 1: wrong answer"


# --- network -------------------------------------------------------------------------------------


def test_connecting_to_a_port_the_parent_listens_on_fails_and_reaches_nothing(verifier):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = f"""
        import socket
        try:
            s = socket.socket()
            s.settimeout(0.5)
            s.connect(("127.0.0.1", {port}))
            print("connected")
        except OSError as e:
            print(type(e).__name__)
        """
        score = check(verifier, code, "connected")
        assert score.reward == 0.0 and score.detail == WRONG
        with pytest.raises(BlockingIOError):
            listener.accept()


def test_the_only_network_interface_is_a_private_loopback(verifier):
    # Proves external addresses are unreachable without ever targeting one.
    code = "import socket; print(sorted(name for _, name in socket.if_nameindex()))"
    assert check(verifier, code, "['lo']").reward == 1.0


def test_name_resolution_fails(verifier):
    code = """
    import socket
    try:
        socket.getaddrinfo("pypi.org", 443)
        print("resolved")
    except OSError:
        print("failed")
    """
    assert check(verifier, code, "resolved").reward == 0.0


# --- reading the host ----------------------------------------------------------------------------


READ_FILE = """
try:
    print(open({path!r}).read(), end="")
except OSError as e:
    print(type(e).__name__)
"""


def test_etc_shadow_is_not_visible(verifier):
    score = check(verifier, READ_FILE.format(path="/etc/shadow"), "root:*")
    assert score.reward == 0.0 and score.detail == WRONG


def test_the_project_source_is_not_visible(verifier):
    here = Path(__file__).resolve()
    score = check(verifier, READ_FILE.format(path=str(here)), here.read_text())
    assert score.reward == 0.0 and score.detail == WRONG


def test_the_home_directory_is_not_visible(verifier):
    home = str(Path.home())
    code = (
        f"import os\nhome = {home!r}\nprint(sorted(os.listdir(home)) if os.path.isdir(home) else 0)"
    )
    score = check(verifier, code, str(sorted(os.listdir(home))))
    assert score.reward == 0.0 and score.detail == WRONG


def test_the_hidden_tests_on_disk_are_not_readable(verifier, tmp_path):
    secret = secrets.token_hex(8)
    hidden = tmp_path / "hidden_tests.jsonl"
    hidden.write_text(f'{{"input": "", "output": "{secret}"}}\n')
    code = f"""
    import json
    try:
        print(json.loads(open({str(hidden)!r}).readline())["output"])
    except OSError as e:
        print(type(e).__name__)
    """
    score = check(verifier, code, secret)
    assert score.reward == 0.0 and score.detail == WRONG


def test_searching_the_whole_filesystem_finds_no_test_file(verifier, tmp_path):
    name = f"hidden_{secrets.token_hex(4)}.jsonl"
    (tmp_path / name).write_text("{}")
    code = f"""
    import os
    for root, dirs, files in os.walk("/"):
        if root == "/" :
            dirs[:] = [d for d in dirs if d not in ("proc", "sys")]
        if {name!r} in files:
            print("found")
            break
    else:
        print("nothing")
    """
    assert check(verifier, code, "found", timeout_s=5.0).reward == 0.0


def test_environment_secrets_are_not_passed_in(verifier, monkeypatch):
    monkeypatch.setenv("RLVR_TEST_SECRET", "hunter2")
    code = "import os; print(os.environ.get('RLVR_TEST_SECRET', 'absent'))"
    score = check(verifier, code, "hunter2")
    assert score.reward == 0.0 and score.detail == WRONG


def test_no_process_environment_in_proc_holds_secrets(verifier, monkeypatch):
    monkeypatch.setenv("RLVR_TEST_SECRET", "hunter2")
    code = """
    import os
    leaked = False
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            leaked |= b"hunter2" in open(f"/proc/{pid}/environ", "rb").read()
        except OSError:
            pass
    print("hunter2" if leaked else "clean")
    """
    assert check(verifier, code, "hunter2").reward == 0.0


def test_host_processes_are_not_visible(verifier):
    code = "import os; print(len([p for p in os.listdir('/proc') if p.isdigit()]) < 5)"
    assert check(verifier, code, "True").reward == 1.0


# --- writing the host ----------------------------------------------------------------------------


def test_writing_outside_tmp_fails(verifier, tmp_path):
    targets = ["/usr/pwned", "/pwned", "/etc/pwned", "/root/pwned", "/dev/pwned", "/proc/pwned"]
    targets.append(str(Path(__file__).resolve().parent / "pwned"))
    code = f"""
    wrote = []
    for path in {targets!r}:
        try:
            open(path, "w").write("x")
            wrote.append(path)
        except OSError:
            pass
    print(wrote or "nothing")
    """
    score = check(verifier, code, str(targets))
    assert score.reward == 0.0 and score.detail == WRONG
    assert not (Path(__file__).resolve().parent / "pwned").exists()


def test_writes_to_a_host_tmp_path_land_in_the_private_tmpfs(verifier, tmp_path):
    target = tmp_path / "pwned.txt"
    code = f"""
    import os
    os.makedirs({str(tmp_path)!r}, exist_ok=True)
    open({str(target)!r}, "w").write("x")
    print("wrote")
    """
    assert check(verifier, code, "wrote").reward == 1.0
    assert not target.exists()


# --- resources -----------------------------------------------------------------------------------


def test_python_fork_bomb_is_contained_and_leaves_nothing(verifier):
    code = """
    import os
    while True:
        try:
            os.fork()
        except OSError:
            pass
    """
    score = check(verifier, code, "done")
    assert score.reward == 0.0
    assert_no_sandbox_left()


def test_shell_fork_bomb_is_contained_and_leaves_nothing(verifier):
    marker = f"bomb{secrets.token_hex(4)}"
    code = f"""
    import os
    os.execv("/bin/sh", ["sh", "-c", ":(){{ :|:& }};:", {marker!r}])
    """
    assert check(verifier, code, "done").reward == 0.0
    time.sleep(0.2)
    assert host_processes_with(marker) == []


def test_the_process_limit_applies_to_the_sandbox_user(verifier):
    # As root, RLIMIT_NPROC is ignored even in a user namespace; the sandbox must drop to a
    # uid of its own for the limit to hold.
    code = """
    import os, time
    children = 0
    try:
        for _ in range(200):
            if os.fork() == 0:
                time.sleep(5)
                os._exit(0)
            children += 1
    except OSError:
        pass
    print("limited" if children < 200 else "unlimited")
    """
    assert check(verifier, code, "limited").reward == 1.0


def test_the_program_runs_without_privileges(verifier):
    code = """
    import os
    status = open("/proc/self/status").read()
    capeff = [l for l in status.splitlines() if l.startswith("CapEff")][0].split()[1]
    nnp = [l for l in status.splitlines() if l.startswith("NoNewPrivs")][0].split()[1]
    print(os.getuid() != 0, os.geteuid() != 0, capeff == "0" * 16, nnp)
    """
    assert check(verifier, code, "True True True 1").reward == 1.0


def test_memory_bomb_hits_the_address_space_limit(verifier):
    # bytes(n) is calloc'd: the limit is hit without touching (and using) the host's memory.
    code = """
    chunks = []
    while True:
        chunks.append(bytes(10**8))
    """
    score = check(verifier, code, "done")
    assert score.reward == 0.0 and "MemoryError" in score.detail


def test_one_huge_allocation_fails(verifier):
    score = check(verifier, "x = bytearray(10**10)\nprint('done')", "done")
    assert score.reward == 0.0 and "MemoryError" in score.detail


def test_infinite_loop_is_stopped_at_the_time_limit(verifier):
    score = check(verifier, "while True:\n    pass", "done")
    assert score.reward == 0.0 and "time limit" in score.detail


def test_ignoring_sigxcpu_does_not_extend_the_time_limit(verifier):
    code = """
    import signal
    signal.signal(signal.SIGXCPU, signal.SIG_IGN)
    while True:
        pass
    """
    score = check(verifier, code, "done")
    assert score.reward == 0.0 and "time limit" in score.detail


def test_sleeping_past_the_wall_limit_is_stopped(verifier):
    score = check(verifier, "import time\ntime.sleep(60)\nprint('done')", "done")
    assert score.reward == 0.0 and score.detail.endswith("time limit exceeded")


def test_huge_output_is_cut_off_early(verifier):
    started = time.monotonic()
    score = check(verifier, "while True:\n    print('x' * 1000)", "x")
    assert score.reward == 0.0 and "output limit" in score.detail
    assert time.monotonic() - started < TIMEOUT_S


def test_huge_stderr_is_cut_off_early(verifier):
    code = "import sys\nwhile True:\n    sys.stderr.write('x' * 1000)"
    assert check(verifier, code, "x").reward == 0.0


def test_filling_tmp_stops_at_its_size(verifier):
    code = """
    written = 0
    try:
        with open("/tmp/fill", "wb") as f:
            for _ in range(1000):
                f.write(b"x" * 2**20)
                written += 1
    except OSError:
        pass
    print("filled" if written >= 1000 else "stopped")
    """
    assert check(verifier, code, "filled").reward == 0.0


# --- attacking the runner and the parent ---------------------------------------------------------


def test_signals_from_the_program_do_not_reach_the_runner(verifier):
    # The runner is the namespace's pid 1: the kernel drops signals to it from inside (were it
    # killed or stopped, the test would fail or time out; it neither fails nor stalls).
    code = """
    import os, signal
    for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
                signal.SIGUSR1, signal.SIGSEGV, signal.SIGPIPE, signal.SIGXFSZ):
        os.kill(os.getppid(), sig)
        os.kill(1, sig)
    print(os.getppid(), flush=True)
    """
    assert check(verifier, code, "1").reward == 1.0
    assert os.getppid() != 1  # pytest is alive and was not reparented


def test_kill_minus_one_cannot_reach_outside_the_sandbox(verifier):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        score = check(verifier, "import os\nos.kill(-1, 9)\nprint('done')", "done")
        assert score.reward == 0.0
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_after_a_timeout_the_remaining_tests_run_in_a_fresh_sandbox():
    v = CodeVerifier(timeout_s=TIMEOUT_S, all_or_nothing=False)
    code = """
    import os, time
    if input() == 'hang':
        open('/tmp/left-behind', 'w').close()
        time.sleep(60)
    print('fresh' if not os.path.exists('/tmp/left-behind') else 'stale')
    """
    tests = [{"input": "hang", "output": "fresh"}, {"input": "fine", "output": "fresh"}]
    assert check(v, code, tests=tests).reward == 0.5


def test_a_background_process_does_not_survive_or_hold_the_pipes(verifier):
    marker = f"31.{secrets.randbelow(10**6)}"
    code = f"""
    import os
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv("/bin/sleep", ["sleep", {marker!r}])
        os._exit(0)
    print("done")
    """
    started = time.monotonic()
    assert check(verifier, code, "done").reward == 1.0
    assert time.monotonic() - started < 0.9
    time.sleep(0.1)
    assert host_processes_with(f"sleep {marker}") == []


def test_a_background_process_of_a_timed_out_program_does_not_survive(verifier):
    marker = f"32.{secrets.randbelow(10**6)}"
    code = f"""
    import os, time
    if os.fork() == 0:
        os.setsid()
        os.execv("/bin/sleep", ["sleep", {marker!r}])
    time.sleep(60)
    """
    assert check(verifier, code, "done").reward == 0.0
    time.sleep(0.2)
    assert host_processes_with(f"sleep {marker}") == []


def test_the_runner_fds_and_memory_are_closed_to_the_program(verifier):
    code = """
    import os
    ppid, reached = os.getppid(), []
    for name in ("fd/0", "fd/1", "fd/2", "fd/3", "fd/4", "fd/5", "mem", "environ"):
        try:
            open(f"/proc/{ppid}/{name}", "rb").close()
            reached.append(name)
        except OSError:
            pass
    try:
        reached += os.listdir(f"/proc/{ppid}/fd")
    except OSError:
        pass
    print(reached or "denied")
    """
    assert check(verifier, code, "denied").reward == 1.0


def test_the_runner_is_its_own_file_run_by_path_and_nothing_else_of_rlvr_is_visible(verifier):
    import hashlib

    import rlvr

    assert "getsource" not in Path(sandbox_module.__file__).read_text(encoding="utf-8")
    runner, package = sandbox_module.RUNNER_PATH, Path(rlvr.__file__).resolve().parent
    code = f"""
    import hashlib, os, sys
    print(sys.orig_argv[-4])  # the interpreter's own argv, inherited by the forked case
    print(sorted(os.listdir(os.path.dirname({runner!r}))))
    print(hashlib.sha256(open({runner!r}, "rb").read()).hexdigest())
    try:
        open({runner!r}, "a").close()
        print("runner writable")
    except OSError:
        print("runner read-only")
    print([p for p in ({str(package)!r}, {str(package.parent)!r}) if os.path.exists(p)])
    try:
        import rlvr
        print("imported", rlvr.__file__)
    except ImportError:
        print("no rlvr")
    """
    result = verifier.sandbox.run(Program(textwrap.dedent(code)), [""])[0]
    digest = hashlib.sha256(Path(sandbox_module.RUNNER_FILE).read_bytes()).hexdigest()
    listing = "['sandbox_checker.py', 'sandbox_runner.py']"
    expected = [runner, listing, digest, "runner read-only", "[]", "no rlvr"]
    assert result.output.decode().splitlines() == expected, result.stderr


def test_forged_frames_written_to_every_fd_do_not_count(verifier):
    code = """
    import os, struct, json
    frame = b"\\0" * 16 + struct.pack(">cII", b"R", 0, 40) + b'{"status": "exited"}\\n[3]'
    for fd in range(3, 256):
        try:
            os.write(fd, frame)
        except OSError:
            pass
    print("All tests passed")
    def add(a, b):
        return 0
    """
    tests = [{"args": [1, 2], "expected": 3}]
    assert check(verifier, code, tests=tests, fn_name="add").reward == 0.0


# --- cheating the judge --------------------------------------------------------------------------


def test_printing_a_pass_marker_does_not_pass(verifier):
    code = "print('3/3 tests passed')\nprint('PASSED')\nprint('{\"passed\": true}')"
    assert check(verifier, code, "6").reward == 0.0


def test_printing_the_json_result_on_stdout_does_not_count(verifier):
    code = """
    import json
    print(json.dumps(3))
    print('{"result": 3, "passed": true}')
    def add(a, b):
        print(3)
        return None
    """
    tests = [{"args": [1, 2], "expected": 3}]
    score = check(verifier, code, tests=tests, fn_name="add")
    assert score.reward == 0.0 and score.detail == WRONG


def test_a_result_with_a_rigged_eq_cannot_pass(verifier):
    code = """
    class Anything:
        def __eq__(self, other):
            return True
    def add(a, b):
        return Anything()
    """
    tests = [{"args": [1, 2], "expected": 3}]
    score = check(verifier, code, tests=tests, fn_name="add")
    assert score.reward == 0.0 and "not JSON-serialisable" in score.detail


def test_an_int_subclass_with_a_rigged_eq_is_judged_by_its_value(verifier):
    code = """
    class Liar(int):
        def __eq__(self, other):
            return True
        __hash__ = int.__hash__
    def add(a, b):
        return Liar(0)
    """
    tests = [{"args": [1, 2], "expected": 3}]
    assert check(verifier, code, tests=tests, fn_name="add").reward == 0.0


def test_exiting_early_with_status_zero_is_a_wrong_answer(verifier):
    score = check(verifier, "import sys\nsys.exit(0)\nprint(6)", "6")
    assert score.reward == 0.0 and score.detail == WRONG


def test_only_a_prefix_of_the_lines_is_a_wrong_answer(verifier):
    assert check(verifier, "print(1)\nprint(2)", "1\n2\n3\n").reward == 0.0
    assert check(verifier, "print(1)\nprint(2)\nprint(3)\nprint(4)", "1\n2\n3\n").reward == 0.0


# --- refusing to run without a sandbox -----------------------------------------------------------


def test_without_bwrap_the_verifier_refuses_with_one_line(monkeypatch):
    monkeypatch.setattr(sandbox_module, "find_bwrap", lambda: None)
    with pytest.raises(SandboxUnavailable) as e:
        CodeVerifier().score("```python\nprint(1)\n```", {"tests": [{"input": "", "output": "1"}]})
    assert isinstance(e.value, UserError) and "\n" not in str(e.value)


def test_a_bwrap_that_cannot_start_is_refused(monkeypatch):
    monkeypatch.setattr(sandbox_module, "find_bwrap", lambda: "/bin/false")
    with pytest.raises(SandboxUnavailable):
        Sandbox(SandboxLimits()).run(Program("print(1)"), [""])


def test_unsandboxed_fallback_runs_only_when_allowed_and_warns(monkeypatch, capsys):
    monkeypatch.setattr(sandbox_module, "find_bwrap", lambda: None)
    v = CodeVerifier(allow_unsandboxed=True, timeout_s=2.0)
    sample = {"tests": [{"input": "2 3", "output": "5"}]}
    program = "```python\nprint(sum(map(int, input().split())))\n```"
    assert v(program, sample) == 1.0
    assert "WITHOUT isolation" in capsys.readouterr().err
