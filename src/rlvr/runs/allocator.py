"""Keep the memory a CPU training process frees for its own reuse.

A GRPO step on the CPU frees and allocates the same large blocks every step: the gradients
(freed after each update), the rollout engine's packed weight copies (dropped after each
rollout), the logits of the log-prob head, the activations. glibc's malloc serves blocks above
its mmap threshold (128 KiB to 32 MiB, adjusted as it goes) with fresh `mmap`s that `free` hands
back to the kernel, and trims the top of the heap when more than the trim threshold is free. The
next step then touches those pages anew, one page fault each (the kernel zero-fills every 4 KiB
page). SmolLM2-135M: ~190k minor page faults per step, about 0.5 s of kernel time of a ~7 s step
on the 2-core machine the project is tested on.

`keep_freed_memory` sets glibc's M_MMAP_MAX to 0 (every block comes from the heap) and
M_TRIM_THRESHOLD to its maximum (freed memory is not returned), so freed blocks stay with the
process and later allocations reuse them. Not each one at once: a freed block that smaller
ones were allocated after is a hole the same request does not quite fit (glibc adds alignment
padding), so the heap grows for the first few steps until the holes cover the step's pattern;
from then on a step faults little (measured on SmolLM2: faults per step ~190k -> ~23k; process
peak 3323-3345 -> 3357-3392 MiB; with the vocabulary-blocked log-prob head later, 3315-3317 MiB
and flat from the third step to the twelfth). Memory freed after the peak stays with the
process instead of going back to the system. It is process-wide, it is what PyTorch's caching
allocators do on GPUs, and it is a no-op where the C library is not glibc.
`training.keep_freed_memory` switches it (on by default for a model on the CPU). Decision:
mallopt rather than asking users for LD_PRELOAD=jemalloc, so that `rlvr train` is fast without a
setup step.

Long rows are the exception (`map_large_blocks`). A micro-batch of the packed update then holds
one or a few rows of thousands of tokens, so its blocks are few and megabytes each (a row's
hidden states: tokens x hidden size x 4 bytes); a heap that keeps them all leaves holes the
next micro-batch's blocks do not fit, and the peak climbs micro-batch by micro-batch
(docs/memory.md). With `map_large_blocks` every block of `LARGE_BLOCK` (2 MiB) or more is mapped
and handed back when freed; smaller ones still come from the kept heap. Measured on
benchmarks/memory.py's random 4-layer model (hidden size 256), training steps alone, all blocks
kept -> large blocks mapped: 2k-token completions peak 874-892 -> 692 MiB, 4k 1,277-1,317 -> 930,
8k 2,091 -> 1,405 (`rlvr estimate`: 753, 985, 1,454), and the steps were no slower (8k: 167-180
-> 128-141 s). An 8 MiB threshold was not enough (4k: 1,437 MiB; its 4 MB blocks stayed in the
heap). At short rows mapping costs: SmolLM2 (48 new tokens), whose 11 MB blocks are per
micro-batch of many short rows and alike every step, took ~15% longer per step with an 8 MiB
threshold (each step faulting its pages in anew). So the trainer asks for it only from
`training.map_large_blocks_from` new tokens on (default 2048).
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
_INT_MAX = 2**31 - 1  # mallopt takes an int
_DEFAULT_MMAP_MAX = 65536  # glibc's own default: mapping allowed
LARGE_BLOCK = 2 * 2**20  # bytes: blocks from this size on are mapped under map_large_blocks

_applied: bool | None = None  # the map_large_blocks in effect, None before the first call


def glibc_mallopt() -> Any | None:
    """glibc's `mallopt` of this process (int, int) -> int, or None off Linux or without glibc."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)  # the symbols already loaded into this process
        libc.gnu_get_libc_version  # noqa: B018  glibc only (musl has a no-op mallopt)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt


def keep_freed_memory(map_large_blocks: bool = False) -> bool:
    """Make glibc's malloc keep freed memory for reuse (see the module docstring); with
    `map_large_blocks`, blocks of LARGE_BLOCK bytes or more are mapped and returned to the
    kernel when freed instead. Returns whether the setting is in effect: False off Linux or
    without glibc. Idempotent; a later call with the other choice switches to it."""
    global _applied
    if _applied == map_large_blocks:  # never while None: nothing applied yet
        return True
    mallopt = glibc_mallopt()
    if mallopt is None:
        return False
    if map_large_blocks:
        mapping = mallopt(_M_MMAP_MAX, _DEFAULT_MMAP_MAX) and mallopt(
            _M_MMAP_THRESHOLD, LARGE_BLOCK
        )
    else:
        mapping = mallopt(_M_MMAP_MAX, 0)
    if mapping == 1 and mallopt(_M_TRIM_THRESHOLD, _INT_MAX) == 1:
        _applied = map_large_blocks
        return True
    return False
