"""The code sandbox's system-call filter: a seccomp BPF program, built here, installed by the
runner (isolation/sandbox_runner.py) in every process that runs untrusted code.

Namespaces and rlimits bound what a program can reach and how much address space each process
maps; some allocations live outside both. A file from `memfd_create`, a SysV shared-memory
segment or message queue, a POSIX message queue, a key in the kernel's keyrings, a tmpfs
mounted in a nested user namespace: each holds memory that no rlimit of the process counts,
and keys outlive the sandbox (the kernel keeps them per uid). The filter refuses them, and
with them the kernel interfaces no test program needs (io_uring, bpf, perf events, ptrace,
module loading, mounts, clocks):

    architecture is not the host's (a 32-bit `int 0x80` call)  -> the process is killed
    an x86-64 x32 system call (number | 0x40000000)            -> EPERM
    a name in DENIED                                           -> EPERM
    clone with a CLONE_NEW* flag (and unshare, setns: DENIED)  -> EPERM
    clone3: its flags lie behind a pointer the filter cannot   -> ENOSYS (the C library then
            read                                                  falls back to clone)
    socket, socketpair: a family other than unix and netlink's -> EAFNOSUPPORT (no inet:
            routing protocol (which the C library asks for the    nothing to reach, and its
            interfaces)                                            buffers escape a cgroup v1
                                                                   limit; vsock would reach
                                                                   the hypervisor)
    prlimit64, setpriority, sched_set*: another process        -> EPERM (the runner, the
                                                                   checker)
    ioctl TIOCSTI, TIOCLINUX (typing into a terminal)          -> EPERM
    anything else                                              -> allowed

Refused calls fail with an errno, as on a kernel without the feature, so a program sees an
ordinary `OSError`. Numbers are per architecture (x86-64 and AArch64 here; elsewhere the
sandbox refuses to start, see `syscall_filter`); tests/isolation/test_seccomp.py checks them
against libseccomp's tables where that library is installed. Standard library only.
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass
from functools import cache

# Calls refused with EPERM, by what they would give a program.
DENIED_GROUPS: dict[str, tuple[str, ...]] = {
    "memory outside the rlimits": (
        "memfd_create",
        "memfd_secret",
        "shmget",
        "shmat",
        "shmdt",
        "shmctl",
        "msgget",
        "msgsnd",
        "msgrcv",
        "msgctl",
        "semget",
        "semop",
        "semctl",
        "semtimedop",
        "mq_open",
        "mq_unlink",
        "mq_timedsend",
        "mq_timedreceive",
        "mq_notify",
        "mq_getsetattr",
        "userfaultfd",
    ),
    # the host's AIO context table (fs.aio-max-nr) is shared: two io_setup(32768) fill it
    "host-wide tables": (
        "io_setup",
        "io_destroy",
        "io_submit",
        "io_cancel",
        "io_getevents",
        "io_pgetevents",
    ),
    "kernel state that outlives the sandbox": ("add_key", "request_key", "keyctl"),
    "new namespaces and mounts": (
        "unshare",
        "setns",
        "mount",
        "umount2",
        "pivot_root",
        "chroot",
        "mount_setattr",
        "move_mount",
        "open_tree",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
    ),
    "other processes": ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp"),
    # flock on a file of the shared read-only trees blocks the host's flock of it; sync
    # writes back the host's dirty pages
    "the host's files": ("flock", "sync", "syncfs"),
    "kernel attack surface": (
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "bpf",
        "perf_event_open",
        "open_by_handle_at",
        "name_to_handle_at",
        "lookup_dcookie",
        "fanotify_init",
        "vhangup",
        "iopl",
        "ioperm",
        "modify_ldt",
        "uselib",
    ),
    "the machine itself": (
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "reboot",
        "swapon",
        "swapoff",
        "acct",
        "quotactl",
        "quotactl_fd",
        "syslog",
        "settimeofday",
        "clock_settime",
        "clock_adjtime",
        "adjtimex",
        "sethostname",
        "setdomainname",
    ),
}
DENIED: tuple[str, ...] = tuple(name for names in DENIED_GROUPS.values() for name in names)

# Calls allowed on the calling process only: the arguments named must be 0 (the caller; for
# setpriority, PRIO_PROCESS and the caller). Else a program could lower the runner's or the
# checker's limits, or starve them (SCHED_IDLE, nice 19 for the whole uid).
SELF_ONLY: dict[str, tuple[int, ...]] = {
    "prlimit64": (0,),
    "setpriority": (0, 1),
    "sched_setparam": (0,),
    "sched_setscheduler": (0,),
    "sched_setaffinity": (0,),
    "sched_setattr": (0,),
}

# The calls the filter looks into (their arguments) besides the denied ones.
INSPECTED = ("clone", "clone3", "socket", "socketpair", "ioctl", *SELF_ONLY)

# System-call numbers: x86-64 from asm/unistd_64.h, AArch64 from asm-generic/unistd.h (the
# table every new architecture uses). Calls an architecture lacks (iopl on AArch64) are absent.
_COMMON_NEW = {  # numbered alike on every architecture since Linux 5.1
    "pidfd_getfd": 438,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "clone3": 435,
    "mount_setattr": 442,
    "quotactl_fd": 443,
    "memfd_secret": 447,
}
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        **_COMMON_NEW,
        "flock": 73,
        "setpriority": 141,
        "sched_setparam": 142,
        "sched_setscheduler": 144,
        "modify_ldt": 154,
        "sync": 162,
        "sched_setaffinity": 203,
        "io_setup": 206,
        "io_destroy": 207,
        "io_getevents": 208,
        "io_submit": 209,
        "io_cancel": 210,
        "prlimit64": 302,
        "syncfs": 306,
        "sched_setattr": 314,
        "io_pgetevents": 333,
        "ioctl": 16,
        "shmget": 29,
        "shmat": 30,
        "shmctl": 31,
        "socket": 41,
        "socketpair": 53,
        "clone": 56,
        "semget": 64,
        "semop": 65,
        "semctl": 66,
        "shmdt": 67,
        "msgget": 68,
        "msgsnd": 69,
        "msgrcv": 70,
        "msgctl": 71,
        "ptrace": 101,
        "syslog": 103,
        "uselib": 134,
        "vhangup": 153,
        "pivot_root": 155,
        "adjtimex": 159,
        "chroot": 161,
        "acct": 163,
        "settimeofday": 164,
        "mount": 165,
        "umount2": 166,
        "swapon": 167,
        "swapoff": 168,
        "reboot": 169,
        "sethostname": 170,
        "setdomainname": 171,
        "iopl": 172,
        "ioperm": 173,
        "init_module": 175,
        "delete_module": 176,
        "quotactl": 179,
        "lookup_dcookie": 212,
        "semtimedop": 220,
        "clock_settime": 227,
        "mq_open": 240,
        "mq_unlink": 241,
        "mq_timedsend": 242,
        "mq_timedreceive": 243,
        "mq_notify": 244,
        "mq_getsetattr": 245,
        "kexec_load": 246,
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "unshare": 272,
        "perf_event_open": 298,
        "fanotify_init": 300,
        "name_to_handle_at": 303,
        "open_by_handle_at": 304,
        "clock_adjtime": 305,
        "setns": 308,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "kcmp": 312,
        "finit_module": 313,
        "memfd_create": 319,
        "kexec_file_load": 320,
        "bpf": 321,
        "userfaultfd": 323,
    },
    "aarch64": {
        **_COMMON_NEW,
        "io_setup": 0,
        "io_destroy": 1,
        "io_submit": 2,
        "io_cancel": 3,
        "io_getevents": 4,
        "flock": 32,
        "sync": 81,
        "sched_setparam": 118,
        "sched_setscheduler": 119,
        "sched_setaffinity": 122,
        "setpriority": 140,
        "prlimit64": 261,
        "syncfs": 267,
        "sched_setattr": 274,
        "io_pgetevents": 292,
        "lookup_dcookie": 18,
        "ioctl": 29,
        "umount2": 39,
        "mount": 40,
        "pivot_root": 41,
        "chroot": 51,
        "vhangup": 58,
        "quotactl": 60,
        "acct": 89,
        "unshare": 97,
        "kexec_load": 104,
        "init_module": 105,
        "delete_module": 106,
        "clock_settime": 112,
        "syslog": 116,
        "ptrace": 117,
        "reboot": 142,
        "sethostname": 161,
        "setdomainname": 162,
        "settimeofday": 170,
        "adjtimex": 171,
        "mq_open": 180,
        "mq_unlink": 181,
        "mq_timedsend": 182,
        "mq_timedreceive": 183,
        "mq_notify": 184,
        "mq_getsetattr": 185,
        "msgget": 186,
        "msgctl": 187,
        "msgrcv": 188,
        "msgsnd": 189,
        "semget": 190,
        "semctl": 191,
        "semtimedop": 192,
        "semop": 193,
        "shmget": 194,
        "shmctl": 195,
        "shmat": 196,
        "shmdt": 197,
        "socket": 198,
        "socketpair": 199,
        "add_key": 217,
        "request_key": 218,
        "keyctl": 219,
        "clone": 220,
        "swapon": 224,
        "swapoff": 225,
        "perf_event_open": 241,
        "fanotify_init": 262,
        "name_to_handle_at": 264,
        "open_by_handle_at": 265,
        "clock_adjtime": 266,
        "setns": 268,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "kcmp": 272,
        "finit_module": 273,
        "memfd_create": 279,
        "bpf": 280,
        "userfaultfd": 282,
        "kexec_file_load": 294,
    },
}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_BIT = 0x40000000

# Every CLONE_NEW* flag: NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET.
CLONE_NEW_FLAGS = 0x80 | 0x20000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
CLONE_NEW_FLAGS |= 0x20000000 | 0x40000000
# AF_UNIX only of the address families: no inet (a private loopback has nothing to reach, and
# TCP/UDP buffers escape a cgroup v1 memory limit: measured, 1.4 GB of TCP under a 544 MB cap)
ALLOWED_SOCKET_FAMILIES = (1,)
AF_NETLINK, NETLINK_ROUTE = 16, 0  # allowed with this protocol only
TERMINAL_IOCTLS = (0x5412, 0x541C)  # TIOCSTI, TIOCLINUX

# Classic BPF, as seccomp runs it: A is the accumulator, seccomp_data the packet.
_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = data[k]
_JEQ, _JGE, _JSET = 0x15, 0x35, 0x45  # BPF_JMP | op | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data
_ARG0, _ARG1, _ARG2 = (
    16,
    24,
    32,
)  # args[i] at 16 + 8 i: the low 32 bits first on little-endian machines
RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000


def ret_errno(code: int) -> int:
    return _RET_ERRNO | code


@dataclass(frozen=True)
class _Insn:
    code: int
    k: int = 0
    true: str | None = None  # label to jump to when the test holds (None: the next insn)
    false: str | None = None


def _program(arch: str) -> list[tuple[int, int, int, int]]:
    """The filter for `arch` as (code, jt, jf, k) tuples."""
    numbers = SYSCALLS[arch]
    insns: list[_Insn | str] = []  # a str is a label: the position of the next instruction

    def test(op: int, k: int, true: str | None = None, false: str | None = None) -> None:
        insns.append(_Insn(op, k, true, false))

    def ret(value: int) -> None:
        insns.append(_Insn(_RET, value))

    insns.append(_Insn(_LD_ABS, _ARCH))
    test(_JEQ, AUDIT_ARCH[arch], false="kill")
    insns.append(_Insn(_LD_ABS, _NR))
    if arch == "x86_64":
        test(_JGE, _X32_BIT, true="eperm")
    for name in DENIED:
        if name in numbers:
            test(_JEQ, numbers[name], true="eperm")
    test(_JEQ, numbers["clone3"], true="enosys")
    test(_JEQ, numbers["clone"], false="not_clone")
    insns.append(_Insn(_LD_ABS, _ARG0))
    test(_JSET, CLONE_NEW_FLAGS, true="eperm", false="allow")
    insns.append("not_clone")
    for call, zero_args in SELF_ONLY.items():
        label = f"not_{call}"
        test(_JEQ, numbers[call], false=label)
        for arg in zero_args:
            insns.append(_Insn(_LD_ABS, _ARG0 + 8 * arg))
            test(_JEQ, 0, false="eperm")
        ret(RET_ALLOW)
        insns.append(label)
    for call in ("socket", "socketpair"):
        test(_JEQ, numbers[call], true="check_family")
    test(_JEQ, numbers["ioctl"], false="allow")
    insns.append(_Insn(_LD_ABS, _ARG1))
    for request in TERMINAL_IOCTLS:
        test(_JEQ, request, true="eperm")
    ret(RET_ALLOW)
    insns.append("check_family")
    insns.append(_Insn(_LD_ABS, _ARG0))
    for family in ALLOWED_SOCKET_FAMILIES:
        test(_JEQ, family, true="allow")
    test(_JEQ, AF_NETLINK, false="no_family")
    insns.append(_Insn(_LD_ABS, _ARG2))
    test(_JEQ, NETLINK_ROUTE, true="allow")
    insns.append("no_family")
    ret(ret_errno(errno.EAFNOSUPPORT))
    for label, value in (
        ("allow", RET_ALLOW),
        ("eperm", ret_errno(errno.EPERM)),
        ("enosys", ret_errno(errno.ENOSYS)),
        ("kill", RET_KILL_PROCESS),
    ):
        insns.append(label)
        ret(value)

    at: dict[str, int] = {}
    position = 0
    for item in insns:
        if isinstance(item, str):
            at[item] = position
        else:
            position += 1
    out: list[tuple[int, int, int, int]] = []
    for item in insns:
        if isinstance(item, str):
            continue
        here = len(out)
        offsets = [0 if t is None else at[t] - here - 1 for t in (item.true, item.false)]
        if not all(0 <= o <= 255 for o in offsets):  # classic BPF jumps only forward, 8 bits
            raise AssertionError(f"seccomp filter: jump out of range at {here}")
        out.append((item.code, offsets[0], offsets[1], item.k))
    return out


def host_arch() -> str:
    return platform.machine().lower()


@cache
def syscall_filter(arch: str | None = None) -> bytes | None:
    """The filter for `arch` (default: this machine's) as the bytes of a `struct sock_filter`
    array, or None where no table exists for the architecture."""
    arch = arch or host_arch()
    if arch not in SYSCALLS:
        return None
    return b"".join(struct.pack("=HBBI", *insn) for insn in _program(arch))
