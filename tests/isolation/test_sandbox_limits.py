"""Hostile programs against the sandbox's limits: memory the rlimits do not see, kernel state
that would outlive a launch, kernel interfaces, devices, and host paths.

Each program prints ESCAPED (or a count past the bound) if its attack worked; the test asserts
it did not. The attacks run only inside the sandbox. The memory tests that need a memory
cgroup (the kernel-memory bound) skip where the machine gives this process none."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlvr.isolation import sandbox as sandbox_module
from rlvr.isolation.cgroup import PREFIX, cgroup_home, pool
from rlvr.isolation.sandbox import Program, Sandbox, SandboxLimits, SandboxUnavailable


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    box = Sandbox(SandboxLimits(timeout_s=3.0, memory_mb=128, tmpfs_mb=16))
    try:
        box.run(Program("pass"), [""])
    except SandboxUnavailable as e:
        pytest.skip(f"bwrap sandbox unavailable here: {e}")
    return box


def run(box: Sandbox, code: str, stdin: str = ""):
    return box.run(Program(textwrap.dedent(code)), [stdin])[0]


def output(box: Sandbox, code: str) -> str:
    result = run(box, code)
    assert result.status == "exited" and result.exit_code == 0, (result.status, result.stderr)
    return result.output.decode()


# A ctypes prelude: the raw system call, returning (result, errno).
SYSCALL = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sys_call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return r, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())
"""


def numbers() -> dict[str, int]:
    from rlvr.isolation.seccomp import SYSCALLS, host_arch

    return SYSCALLS[host_arch()]


# --- memory outside the rlimits ----------------------------------------------------------------


def test_memfd_files_are_refused(sandbox):
    code = """
    import os, mmap
    made = 0
    try:
        for _ in range(48):
            fd = os.memfd_create("x")
            os.ftruncate(fd, 16 << 20)
            m = mmap.mmap(fd, 16 << 20)
            m.write(b"a" * (16 << 20))
            m.close()
            made += 1
    except OSError as e:
        print("refused", e.errno)
    print("ESCAPED" if made else "none", made)
    """
    assert output(sandbox, code).split() == ["refused", "1", "none", "0"]


def test_memfd_through_the_raw_system_call_and_the_x32_abi_is_refused(sandbox):
    nr = numbers()["memfd_create"]
    code = (
        SYSCALL
        + f"""
name = ctypes.create_string_buffer(b"x")
for n in ({nr}, {nr} | 0x40000000):
    r, e = sys_call(n, ctypes.addressof(name), 0)
    print("ESCAPED" if r >= 0 else e)
"""
    )
    lines = output(sandbox, code).split()
    assert "ESCAPED" not in lines and lines[0] == "EPERM", lines


@pytest.mark.parametrize(
    "call, args",
    [
        ("shmget", (0, 32 << 20, 0o1600)),
        ("msgget", (0, 0o1600)),
        ("semget", (0, 4, 0o1600)),
        ("mq_open", ()),
        ("userfaultfd", (0,)),
        ("memfd_secret", (0,)),
    ],
)
def test_sysv_ipc_message_queues_and_other_hidden_memory_are_refused(sandbox, call, args):
    nr = numbers()[call]
    if call == "mq_open":
        args = ("ctypes.addressof(ctypes.create_string_buffer(b'/q'))", 0o100 | 2, 0o600, 0)
    code = SYSCALL + f"r, e = sys_call({nr}, {', '.join(map(str, args))})\n"
    code += "print('ESCAPED' if r >= 0 else e)\n"
    assert output(sandbox, code).strip() == "EPERM"


def test_a_sysv_segment_filled_and_detached_holds_nothing(sandbox):
    # The attack: shmget + shmat + touch + shmdt, repeated; detached segments count against
    # no rlimit and live until the IPC namespace ends.
    code = """
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    held = 0
    for _ in range(8):
        segment = libc.shmget(0, 32 << 20, 0o1600)
        if segment < 0:
            break
        address = libc.shmat(segment, None, 0)
        if address in (None, 2**64 - 1):
            break
        ctypes.memset(address, 1, 32 << 20)
        libc.shmdt(ctypes.c_void_p(address))
        held += 32
    print("ESCAPED" if held else "none", held)
    """
    assert output(sandbox, code).split() == ["none", "0"]


def test_dev_shm_is_bounded_by_its_size(sandbox):
    code = """
    import os
    written = 0
    try:
        with open("/dev/shm/fill", "wb") as f:
            for _ in range(64):
                f.write(b"x" * (1 << 20))
                f.flush()
                written += 1
    except OSError as e:
        print(e.errno)
    print("ESCAPED" if written > 16 else "bounded")
    """
    assert output(sandbox, code).split()[-1] == "bounded"


def test_shared_anonymous_memory_counts_against_the_address_space(sandbox):
    code = """
    import mmap
    try:
        m = mmap.mmap(-1, 512 << 20, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
        print("ESCAPED")
    except OSError as e:
        print("refused", e.errno)
    """
    assert output(sandbox, code).split()[0] == "refused"


# --- namespaces, mounts and the nested-user-namespace tmpfs ------------------------------------


@pytest.mark.parametrize(
    "flags",
    [0x10000000, 0x10000000 | 0x20000, 0x20000, 0x40000000, 0x08000000, 0x04000000, 0x02000000],
    ids=["user", "user+mount", "mount", "net", "ipc", "uts", "cgroup"],
)
def test_no_new_namespace_of_any_kind(sandbox, flags):
    n = numbers()
    code = (
        SYSCALL
        + f"""
print(sys_call({n["unshare"]}, {flags})[1])
r, e = sys_call({n["clone"]}, {flags} | 17, 0, 0, 0, 0)  # fork with the flag
if r == 0:
    os._exit(0)
print("ESCAPED" if r > 0 else e)
"""
    )
    assert output(sandbox, code).split() == ["EPERM", "EPERM"]


def test_the_nested_user_namespace_tmpfs_attack_fails_at_its_first_step(sandbox):
    code = """
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x10000000 | 0x20000) != 0:
        print("refused", ctypes.get_errno())
    else:
        ok = libc.mount(b"none", b"/tmp", b"tmpfs", 0, b"size=800m")
        with open("/tmp/fill", "wb") as f:
            for _ in range(200):
                f.write(b"x" * (1 << 20))
        print("ESCAPED", ok)
    """
    assert output(sandbox, code).split() == ["refused", "1"]


def test_clone3_is_not_available_and_threads_and_processes_still_work(sandbox):
    code = (
        SYSCALL
        + f"""
import subprocess, threading
print(sys_call({numbers()["clone3"]}, 0, 0)[1])
done = []
t = threading.Thread(target=lambda: done.append(1)); t.start(); t.join()
print(len(done), subprocess.run(["/bin/echo", "hi"], capture_output=True, text=True).stdout)
"""
    )
    assert output(sandbox, code).split() == ["ENOSYS", "1", "hi"]


@pytest.mark.parametrize(
    "call, args",
    [
        ("setns", (3, 0)),
        ("mount", (0, 0, 0, 0, 0)),
        ("umount2", (0, 0)),
        ("pivot_root", (0, 0)),
        ("chroot", (0,)),
        ("fsopen", (0, 0)),
        ("open_tree", (-100, 0, 0)),
        ("move_mount", (0, 0, 0, 0, 0)),
    ],
)
def test_mount_and_namespace_calls_are_refused(sandbox, call, args):
    code = SYSCALL + f"print(sys_call({numbers()[call]}, {', '.join(map(str, args))})[1])\n"
    assert output(sandbox, code).strip() == "EPERM"


# --- kernel state that outlives the sandbox ----------------------------------------------------


def key_users() -> set[str]:
    try:
        return {
            line.split(":")[0].strip() for line in Path("/proc/key-users").read_text().splitlines()
        }
    except OSError:
        return set()


def test_keyrings_are_refused_and_nothing_stays_in_the_kernel(sandbox):
    n = numbers()
    before = key_users()
    code = (
        SYSCALL
        + f"""
key, payload = ctypes.create_string_buffer(b"user"), ctypes.create_string_buffer(b"k")
for i in range(50):
    r, e = sys_call({n["add_key"]}, ctypes.addressof(key), ctypes.addressof(payload),
                    ctypes.addressof(payload), 1, -4)
    if r >= 0:
        print("ESCAPED")
        break
print(e)
print(sys_call({n["request_key"]}, ctypes.addressof(key), ctypes.addressof(payload), 0, -4)[1])
print(sys_call({n["keyctl"]}, 1, 0)[1])  # KEYCTL_JOIN_SESSION_KEYRING
"""
    )
    assert output(sandbox, code).split() == ["EPERM", "EPERM", "EPERM"]
    assert {u for u in key_users() - before if u.isdigit() and int(u) >= 2**30} == set()


def _launch_cgroups(home) -> list[Path]:
    mine = f"{PREFIX}{os.getpid()}-"
    return [p for p in Path(home.path).iterdir() if p.name.startswith(mine)]


def test_launch_cgroups_are_reused_emptied_and_removed_at_the_end(sandbox):
    home = cgroup_home()
    if home is None:
        pytest.skip("no memory cgroup for this process here")
    cgroups = pool(home)

    def settled() -> list[Path]:
        deadline = time.monotonic() + 10
        while cgroups.leased and time.monotonic() < deadline:  # given back by a reaping thread
            time.sleep(0.01)
        assert not cgroups.leased
        return _launch_cgroups(home)

    before = settled()  # earlier tests' concurrent launches may have made several
    for _ in range(4):
        run(sandbox, "import os\nfor _ in range(8):\n    os.fork() or os._exit(0)\n")
    made = settled()
    # reused, not one per launch: at most one more, for a launch that starts while the one
    # before is still being reaped
    assert 1 <= len(made) <= max(len(before), 1) + 1
    for path in made:
        assert (path / "cgroup.procs").read_text().split() == []  # nothing of a launch left
    cgroups.close()  # what runs at exit
    assert _launch_cgroups(home) == []
    cgroups.closed = False  # the tests that follow lease from it again


def test_a_reused_launch_cgroup_holds_nothing_of_the_launch_before():
    if cgroup_home() is None:
        pytest.skip("no memory cgroup for this process here")
    # each launch fills both tmpfs (90 MB) under a 150 MB cap: a second launch's worth left
    # charged to the cgroup would kill the next one
    box = Sandbox(SandboxLimits(timeout_s=5.0, memory_mb=128, tmpfs_mb=48, total_memory_mb=150))
    code = """
    for d in ("/tmp", "/dev/shm"):
        with open(d + "/big", "wb") as f:
            f.write(b"x" * (45 << 20))
    print("ok")
    """
    for _ in range(8):
        assert output(box, code).strip() == "ok"


def test_a_child_process_leaves_no_launch_cgroup_behind(tmp_path):
    if cgroup_home() is None:
        pytest.skip("no memory cgroup for this process here")
    script = """
    import os, sys
    from rlvr.isolation.sandbox import Program, Sandbox
    from rlvr.isolation.cgroup import PREFIX, cgroup_home, pool
    Sandbox().run(Program("print(1)"), [""])
    print(cgroup_home().path, f"{PREFIX}{os.getpid()}-")
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, check=True
    )
    home, prefix = out.stdout.split()
    assert [p for p in os.listdir(home) if p.startswith(prefix)] == []


# --- kernel interfaces ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, args",
    [
        ("io_uring_setup", (8, 0)),
        ("bpf", (0, 0, 0)),
        ("perf_event_open", (0, 0, -1, -1, 0)),
        ("ptrace", (0, 0, 0, 0)),  # PTRACE_TRACEME
        ("process_vm_readv", (1, 0, 0, 0, 0, 0)),
        ("kcmp", (1, 1, 0, 0, 0)),
        ("pidfd_getfd", (0, 0, 0)),
        ("init_module", (0, 0, 0)),
        ("kexec_load", (0, 0, 0, 0)),
        ("reboot", (0, 0, 0, 0)),
        ("swapon", (0, 0)),
        ("syslog", (3, 0, 0)),
        ("settimeofday", (0, 0)),
        ("clock_settime", (0, 0)),
        ("sethostname", (0, 0)),
        ("acct", (0,)),
        ("open_by_handle_at", (0, 0, 0)),
        ("fanotify_init", (0, 0)),
        ("vhangup", ()),
        ("io_setup", (32768, 0)),  # the host-wide AIO table (fs.aio-max-nr)
        ("flock", (0, 2)),  # LOCK_EX: would block the host's flock of a shared file
        ("sync", ()),
        ("syncfs", (0,)),
        ("prlimit64", (1, 7, 0, 0)),  # the runner's RLIMIT_NOFILE
        ("setpriority", (0, 1, 19)),  # the runner niced to 19
        ("setpriority", (2, 0, 19)),  # PRIO_USER: every process of the uid
        ("sched_setscheduler", (1, 5, 0)),  # the runner to SCHED_IDLE
        ("modify_ldt", (0, 0, 0)),
    ],
)
def test_kernel_interfaces_no_program_needs_are_refused(sandbox, call, args):
    code = SYSCALL + f"print(sys_call({numbers()[call]}, {', '.join(map(str, args))})[1])\n"
    assert output(sandbox, code).strip() == "EPERM"


def test_a_program_still_sets_its_own_limits_and_priority(sandbox):
    code = """
    import os, resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))
    os.setpriority(os.PRIO_PROCESS, 0, 5)
    os.sched_setaffinity(0, os.sched_getaffinity(0))
    print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], os.getpriority(os.PRIO_PROCESS, 0))
    """
    assert output(sandbox, code).split() == ["32", "5"]


def test_a_lone_surrogate_in_the_source_is_the_programs_error_not_the_sandboxs(sandbox):
    # JSON's "\\ud800" decodes to one; Python cannot compile it (no UTF-8 for it)
    result = run(sandbox, "print(1)  # \ud800")
    assert result.status == "exited" and result.exit_code == 1, result
    assert "surrogates not allowed" in result.stderr


def test_a_4_mb_source_runs(sandbox):
    assert output(sandbox, "x = '" + "a" * (4 << 20) + "'\nprint(len(x))").strip() == str(4 << 20)


def test_a_source_larger_than_the_tmpfs_is_a_failed_case_not_an_unavailable_sandbox(sandbox):
    result = run(sandbox, "# " + "a" * (32 << 20))  # the fixture's tmpfs is 16 MB
    assert result.status == "crashed", result


def test_a_32_bit_system_call_kills_the_process(sandbox):
    if os.uname().machine != "x86_64":
        pytest.skip("the i386 entry point exists on x86-64 only")
    # mov eax, 356 (memfd_create in the i386 table); int 0x80; ret
    code = """
    import ctypes, mmap
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(bytes([0xB8, 0x64, 0x01, 0x00, 0x00, 0xCD, 0x80, 0xC3]))
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    ctypes.CFUNCTYPE(ctypes.c_int)(address)()
    print("ESCAPED")
    """
    result = run(sandbox, code)
    assert b"ESCAPED" not in result.output
    # SIGSYS from the filter (SIGSEGV on a kernel without 32-bit emulation)
    assert result.signal in (signal.SIGSYS, signal.SIGSEGV), (result.signal, result.stderr)


@pytest.mark.parametrize(
    "family, kind, protocol",
    [(40, 1, 0), (17, 3, 0), (38, 5, 0), (16, 3, 9), (16, 3, 15), (16, 3, 16), (4, 2, 0)],
    ids=["vsock", "packet", "alg", "netlink-audit", "netlink-uevent", "netlink-generic", "ipx"],
)
def test_sockets_beyond_the_network_namespace_are_refused(sandbox, family, kind, protocol):
    code = f"""
    import socket
    try:
        socket.socket({family}, {kind}, {protocol})
        print("ESCAPED")
    except OSError as e:
        print(e.errno)
    """
    assert output(sandbox, code).strip() == "97"  # EAFNOSUPPORT


def test_ordinary_sockets_still_work(sandbox):
    code = """
    import socket
    a, b = socket.socketpair()
    a.sendall(b"ping")
    server = socket.socket(socket.AF_UNIX)
    server.bind("server.sock")
    server.listen()
    client = socket.socket(socket.AF_UNIX)
    client.connect("server.sock")
    client.sendall(b"pong")
    print(b.recv(4).decode(), server.accept()[0].recv(4).decode())
    print(sorted(n for _, n in socket.if_nameindex()))
    """
    assert output(sandbox, code).split() == ["ping", "pong", "['lo']"]


@pytest.mark.parametrize("family", ["AF_INET", "AF_INET6"])
@pytest.mark.parametrize("kind", ["SOCK_STREAM", "SOCK_DGRAM"])
def test_tcp_and_udp_sockets_are_refused(sandbox, family, kind):
    # their buffers are kernel memory a cgroup v1 limit does not count (1.4 GB of TCP measured)
    code = f"""
    import socket
    try:
        socket.socket(socket.{family}, socket.{kind})
        print("ESCAPED")
    except OSError as e:
        print(e.errno)
    """
    assert output(sandbox, code).strip() == "97"  # EAFNOSUPPORT


def test_typing_into_a_terminal_is_refused(sandbox):
    code = """
    import fcntl, termios
    try:
        fcntl.ioctl(0, termios.TIOCSTI, b"x")
        print("ESCAPED")
    except OSError as e:
        print(e.errno)
    """
    assert output(sandbox, code).strip() == "1"


# --- devices, rlimits ---------------------------------------------------------------------------


def test_dev_holds_only_the_plain_devices_and_no_terminals(sandbox):
    code = """
    import os, pty
    print(sorted(os.listdir("/dev")))
    try:
        pty.openpty()
        print("ESCAPED")
    except OSError:
        print("no pty")
    print(open("/dev/urandom", "rb").read(4).__len__(), open("/dev/null").read() == "")
    """
    devices = ["fd", "full", "null", "random", "shm", "stderr", "stdin", "stdout", "urandom"]
    assert output(sandbox, code).splitlines() == [str(devices + ["zero"]), "no pty", "4 True"]


def test_locked_memory_realtime_priority_and_negative_nice_are_refused(sandbox):
    code = """
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    print("mlock", libc.mlockall(3) != 0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        print("ESCAPED")
    except OSError:
        print("fifo refused")
    try:
        os.nice(-1)
        print("ESCAPED")
    except OSError:
        print("nice refused")
    """
    assert output(sandbox, code).splitlines() == ["mlock True", "fifo refused", "nice refused"]


# --- host paths ---------------------------------------------------------------------------------


def test_no_host_path_is_readable_anywhere_in_proc(sandbox, tmp_path):
    import rlvr

    markers = {
        str(Path(rlvr.__file__).resolve().parent),  # where the package lives
        sandbox_module.RUNNER_FILE,
        sandbox_module.find_bwrap(),
        os.getcwd(),
        str(tmp_path),
    }
    markers.discard("/")
    code = f"""
    import os, sys
    markers = {sorted(markers)!r}
    seen = []
    def look(path):
        try:
            data = open(path, "rb").read(1 << 20).decode("utf-8", "replace")
        except OSError:
            return
        seen.extend((path, m) for m in markers if m in data)
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    for pid in pids + ["self", "thread-self"]:
        for name in ("cmdline", "environ", "mountinfo", "mounts", "cgroup", "maps", "status",
                     "stat", "comm", "cwd", "exe", "root", "mountstats", "attr/current"):
            look(f"/proc/{{pid}}/{{name}}")
        for link in ("cwd", "exe", "root"):
            try:
                target = os.readlink(f"/proc/{{pid}}/{{link}}")
                seen.extend((link, m) for m in markers if m in target)
            except OSError:
                pass
    for name in ("mounts", "cmdline", "self/mountinfo"):
        look(f"/proc/{{name}}")
    text = repr((os.environ, sys.path, sys.argv, sys.orig_argv, os.getcwd(), sys.executable))
    seen.extend(("interpreter", m) for m in markers if m in text)
    print(sorted(pids), seen or "none")
    """
    pids, seen = output(sandbox, code).rsplit(" ", 1)
    assert seen.strip() == "none", seen
    assert pids.count("'") <= 4  # only the runner (pid 1) and the program's own process


# --- the memory cgroup: kernel memory too -------------------------------------------------------


def peak_mb(code: str, total_memory_mb: int, **limits) -> int:
    """The launch's peak memory (MiB, kernel memory included) under a cgroup limit."""
    if cgroup_home() is None:
        pytest.skip("no memory cgroup for this process here (the kernel-memory bound needs one)")
    box = Sandbox(SandboxLimits(total_memory_mb=total_memory_mb, **limits))
    result = box.run(Program(textwrap.dedent(code)), [""])[0]
    assert result.peak_memory_bytes is not None
    return result.peak_memory_bytes >> 20


def assert_bounded(code: str, cap_mb: int, **limits) -> None:
    """Without the bound the attack holds more than `cap_mb` (so the test can fail); with it,
    never more."""
    assert peak_mb(code, 1 << 20, **limits) > cap_mb
    assert peak_mb(code, cap_mb, **limits) <= cap_mb


def test_an_inode_flood_in_tmp_stops_at_the_launch_memory_limit():
    # Empty files use no tmpfs block: only the kernel's inodes and dentries grow (~1 KB each).
    code = """
    import os
    for i in range(150_000):
        os.close(os.open(f"/tmp/f{i}", os.O_CREAT | os.O_WRONLY))
    """
    assert_bounded(code, 64, timeout_s=20.0, memory_mb=64, tmpfs_mb=16)


def test_socket_buffers_stop_at_the_launch_memory_limit():
    code = """
    import os, socket, time
    for _ in range(8):
        if os.fork() == 0:
            break
    pairs = []
    try:
        while True:
            a, b = socket.socketpair()
            a.setblocking(False)
            pairs.append((a, b))
            try:
                while True:
                    a.send(b"x" * 65536)
            except BlockingIOError:
                pass
    except OSError:
        time.sleep(2)
    """
    assert_bounded(code, 64, timeout_s=3.0, memory_mb=64, tmpfs_mb=16)


@pytest.mark.slow
def test_many_processes_at_their_address_space_limit_stop_at_the_launch_limit():
    code = """
    import os, time
    for _ in range(8):
        if os.fork() == 0:
            block = bytearray(80 << 20)  # touched: 80 MB resident in each of 8 processes
            time.sleep(2)
            os._exit(0)
    time.sleep(2.5)
    """
    assert_bounded(code, 128, timeout_s=3.0, memory_mb=96, processes=16)


def test_the_python_tool_has_the_same_limits():
    from rlvr.environments.python_tool import PythonTool, python_tool_settings

    try:
        tool = PythonTool(python_tool_settings(memory_mb=32, timeout_s=3.0))
        tool.settings.sandbox.run(Program("pass"), [""])
    except SandboxUnavailable as e:
        pytest.skip(f"bwrap sandbox unavailable here: {e}")
    code = "import os\nfds = [os.memfd_create('x') for _ in range(48)]\nprint('ESCAPED')"
    result = tool.step(f"<python>{code}</python>")
    assert "ESCAPED" not in result.observation and "PermissionError" in result.observation


def test_the_sandbox_processes_are_gone_after_a_launch(sandbox):
    marker = "sleep 47.25"
    code = """
    import os
    if os.fork() == 0:
        os.setsid()
        os.execv("/bin/sleep", ["sleep", "47.25"])
    """
    run(sandbox, code)
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert marker not in out
