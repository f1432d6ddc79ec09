"""The sandbox's seccomp filter, outside any sandbox: its numbers against libseccomp's tables,
and its verdicts by running the BPF program in a small interpreter written here.

tests/isolation/test_sandbox_limits.py makes the same calls for real inside the sandbox."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import struct

import pytest

from rlvr.isolation import seccomp
from rlvr.isolation.seccomp import (
    AUDIT_ARCH,
    DENIED,
    RET_ALLOW,
    RET_KILL_PROCESS,
    SYSCALLS,
    ret_errno,
    syscall_filter,
)

EPERM, ENOSYS, EAFNOSUPPORT = (
    ret_errno(e) for e in (errno.EPERM, errno.ENOSYS, errno.EAFNOSUPPORT)
)


def run_filter(program: bytes, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """Classic BPF as the kernel runs a seccomp filter, over one struct seccomp_data."""
    args = tuple(args) + (0,) * (6 - len(args))
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args)
    insns = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35, 0x45):  # jeq, jge, jset
            hit = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if hit else jf)
        elif code == 0x06:  # ret k
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x} at {pc}")


@pytest.mark.parametrize("arch", sorted(SYSCALLS))
def test_every_denied_call_is_refused_with_eperm(arch):
    program, numbers = syscall_filter(arch), SYSCALLS[arch]
    for name in DENIED:
        if name in numbers:
            assert run_filter(program, AUDIT_ARCH[arch], numbers[name]) == EPERM, name


@pytest.mark.parametrize("arch", sorted(SYSCALLS))
def test_ordinary_calls_are_allowed(arch):
    program = syscall_filter(arch)
    numbers = SYSCALLS[arch]
    denied_or_inspected = {numbers[n] for n in (*DENIED, *seccomp.INSPECTED) if n in numbers}
    ordinary = [nr for nr in range(0, 460) if nr not in denied_or_inspected]
    for nr in ordinary:
        assert run_filter(program, AUDIT_ARCH[arch], nr) == RET_ALLOW, nr


@pytest.mark.parametrize("arch", sorted(SYSCALLS))
def test_clone_with_a_namespace_flag_is_refused_and_a_thread_is_not(arch):
    program, nr = syscall_filter(arch), SYSCALLS[arch]["clone"]
    thread = 0x3D0F00  # CLONE_VM | FS | FILES | SIGHAND | THREAD | SYSVSEM | SETTLS | ...
    fork = 17  # SIGCHLD
    assert run_filter(program, AUDIT_ARCH[arch], nr, (thread,)) == RET_ALLOW
    assert run_filter(program, AUDIT_ARCH[arch], nr, (fork,)) == RET_ALLOW
    for flag in (0x80, 0x20000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000):
        assert run_filter(program, AUDIT_ARCH[arch], nr, (fork | flag,)) == EPERM, hex(flag)
    assert run_filter(program, AUDIT_ARCH[arch], nr, (0x40000000 | fork,)) == EPERM
    # the flags' high word is not where any namespace flag lives
    assert run_filter(program, AUDIT_ARCH[arch], nr, (fork | 1 << 40,)) == RET_ALLOW


@pytest.mark.parametrize("arch", sorted(SYSCALLS))
def test_clone3_says_enosys_so_the_c_library_falls_back_to_clone(arch):
    program = syscall_filter(arch)
    assert run_filter(program, AUDIT_ARCH[arch], SYSCALLS[arch]["clone3"]) == ENOSYS


@pytest.mark.parametrize("arch", sorted(SYSCALLS))
@pytest.mark.parametrize("call", ["socket", "socketpair"])
def test_only_unix_and_netlink_routing_sockets_are_allowed(arch, call):
    program, nr = syscall_filter(arch), SYSCALLS[arch][call]
    a = AUDIT_ARCH[arch]
    assert run_filter(program, a, nr, (1, 1, 0)) == RET_ALLOW  # unix
    assert run_filter(program, a, nr, (1 | 1 << 32, 1, 0)) == RET_ALLOW  # `int family`: low word
    assert run_filter(program, a, nr, (16, 3, 0)) == RET_ALLOW  # netlink, NETLINK_ROUTE
    for protocol in (9, 15, 16):  # netlink audit, kobject uevent, generic
        assert run_filter(program, a, nr, (16, 3, protocol)) == EAFNOSUPPORT
    for family in (2, 10, 17, 38, 40, 4, 5, 0, 44, 2 | 1 << 32):  # inet, inet6, packet, alg, ...
        assert run_filter(program, a, nr, (family, 1, 0)) == EAFNOSUPPORT, family


@pytest.mark.parametrize("arch", sorted(SYSCALLS))
def test_limits_priorities_and_scheduling_of_another_process_are_refused(arch):
    program, numbers = syscall_filter(arch), SYSCALLS[arch]
    a = AUDIT_ARCH[arch]
    for call, zero_args in seccomp.SELF_ONLY.items():
        assert run_filter(program, a, numbers[call], (0, 0, 0)) == RET_ALLOW, call
        for arg in zero_args:
            args = [0, 0, 0]
            args[arg] = 1  # pid 1: the runner (setpriority: which=PRIO_PGRP, or who=1)
            assert run_filter(program, a, numbers[call], tuple(args)) == EPERM, (call, arg)


@pytest.mark.parametrize("arch", sorted(SYSCALLS))
def test_aio_flock_and_sync_are_refused(arch):
    program, numbers = syscall_filter(arch), SYSCALLS[arch]
    for call in ("io_setup", "io_submit", "io_getevents", "flock", "sync", "syncfs"):
        assert run_filter(program, AUDIT_ARCH[arch], numbers[call]) == EPERM, call


@pytest.mark.parametrize("arch", sorted(SYSCALLS))
def test_typing_into_a_terminal_is_refused(arch):
    program, nr = syscall_filter(arch), SYSCALLS[arch]["ioctl"]
    assert run_filter(program, AUDIT_ARCH[arch], nr, (0, 0x5412)) == EPERM  # TIOCSTI
    assert run_filter(program, AUDIT_ARCH[arch], nr, (0, 0x541C)) == EPERM  # TIOCLINUX
    assert run_filter(program, AUDIT_ARCH[arch], nr, (0, 0x5401)) == RET_ALLOW  # TCGETS


def test_x32_calls_are_refused_on_x86_64():
    program = syscall_filter("x86_64")
    for nr in (0, 1, 319, 59):  # read, write, memfd_create, execve through the x32 ABI
        assert run_filter(program, AUDIT_ARCH["x86_64"], nr | 0x40000000) == EPERM


@pytest.mark.parametrize("arch", sorted(SYSCALLS))
def test_another_architecture_kills_the_process(arch):
    program = syscall_filter(arch)
    for foreign in (0x40000003, 0x40000028, 0xC000003E, 0xC00000B7):  # i386, arm, the others
        if foreign != AUDIT_ARCH[arch]:
            for nr in (0, 3, 356):
                assert run_filter(program, foreign, nr) == RET_KILL_PROCESS


def test_an_unknown_architecture_has_no_filter():
    assert syscall_filter("sparc64") is None


def _libseccomp():
    name = ctypes.util.find_library("seccomp")
    if name is None:
        return None
    lib = ctypes.CDLL(name)
    lib.seccomp_syscall_resolve_name_arch.argtypes = [ctypes.c_uint32, ctypes.c_char_p]
    lib.seccomp_syscall_resolve_name_arch.restype = ctypes.c_int
    return lib


@pytest.mark.parametrize("arch", sorted(SYSCALLS))
def test_the_numbers_match_libseccomp(arch):
    lib = _libseccomp()
    if lib is None:
        pytest.skip("libseccomp is not installed here")
    for name in (*DENIED, *seccomp.INSPECTED):
        number = lib.seccomp_syscall_resolve_name_arch(AUDIT_ARCH[arch], name.encode())
        if name in SYSCALLS[arch]:
            assert number == SYSCALLS[arch][name], (arch, name)
        else:  # the call does not exist there (libseccomp: a negative pseudo number)
            assert number < 0, (arch, name)
