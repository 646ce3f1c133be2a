"""The C library's allocator on a CPU training: keep the memory a step frees for the next step.

A CPU training step allocates and frees the same large tensors every step (the five-layer CNN of
``benchmarks/fashion_cpu.yaml`` at batch 512: activations of 12 and 24 MiB, about 150 MiB in
all). With glibc's defaults the freed memory at the top of the heap goes back to the system
whenever it exceeds the trim threshold (twice the largest block freed so far), and the heaps of a
thread's own arena are unmapped as soon as they are empty; the next step then takes its memory
afresh from the kernel, a page fault for each 4 KiB page it touches. On the 2-core CPU that was
5,500 to 22,000 page faults a step in the main thread (about 1.6 us each: 10 to 35 ms of a step
of 170 to 250 ms), and 15,000 in a thread of its own; with the settings below, none to a few
hundred. What the step computes does not change; the process keeps the memory of its largest
step instead of returning it between steps.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

#: ``mallopt`` parameters (glibc's ``malloc.h``).
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
#: What :func:`keep_freed_memory` sets. Free memory at the top of a heap is returned to the
#: system only beyond 1 GiB; blocks below 32 MiB (glibc's largest mmap threshold) come from the
#: heap, not from a mapping of their own that is unmapped when freed; each heap grows by 64 MiB
#: more than asked, the size of a thread arena's heap, which keeps an emptied heap of a thread's
#: arena mapped (glibc unmaps one only when its neighbour has less room than this pad).
KEEP_FREED = {"M_TRIM_THRESHOLD": 1 << 30, "M_MMAP_THRESHOLD": 32 << 20, "M_TOP_PAD": 64 << 20}
_PARAMETERS = {"M_TRIM_THRESHOLD": M_TRIM_THRESHOLD, "M_MMAP_THRESHOLD": M_MMAP_THRESHOLD,
               "M_TOP_PAD": M_TOP_PAD}


@functools.cache
def keep_freed_memory() -> dict[str, int]:
    """Sets :data:`KEEP_FREED` in glibc's allocator, for the whole process, once; returns what
    was set (``{}`` where the C library has no ``mallopt``: musl, macOS, Windows).

    >>> sorted(keep_freed_memory()) in ([], sorted(KEEP_FREED))
    True
    """
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return {}
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return {key: value for key, value in KEEP_FREED.items() if mallopt(_PARAMETERS[key], value)}
