"""A CPU training step reuses the memory the step before it freed: no page faults once steady."""

from __future__ import annotations

import resource
import sys

import pytest
import torch

from benchmarks.infra.allocator import keep_freed_memory

#: A step's tensors, in MiB: the five-layer CNN's activations at batch 512 (two views), as its
#: step allocates and frees them (108 MiB, 27,648 pages of 4 KiB).
STEP_MIB = (24, 24, 12, 12, 12, 12, 6, 6)


def step_faults(steps: int) -> list[int]:
    """Page faults of each of ``steps`` steps that allocate, write and free :data:`STEP_MIB`,
    counted in the calling thread."""
    faults = []
    for _ in range(steps):
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        tensors = [torch.ones(mib << 18) for mib in STEP_MIB]  # float32: 2**18 values a MiB
        del tensors
        faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
    return faults


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread page faults: Linux")
def test_a_steady_step_in_the_main_thread_takes_no_memory_from_the_kernel():
    """The runner fits in the main thread. With glibc's defaults the steps' memory went back to
    the system after every step and came back a page fault at a time: 16,864 faults a step,
    every step, 101,184 over six. With the setting, once the heap holds a step, mostly none
    (glibc still places a block on untouched pages now and then: 0 to 3,072 over six steps
    here); the bound is one step's pages over six steps."""
    if not keep_freed_memory():
        pytest.skip("no glibc mallopt here")
    faults = step_faults(12)
    pages = sum(STEP_MIB) << 8
    assert sum(faults[-6:]) < pages, faults
