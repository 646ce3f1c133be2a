"""What the training benchmarks measure with (:mod:`benchmarks.perf.train_throughput`,
:mod:`benchmarks.perf.step_host`): the host-read counter and the count of every counting pass
entered (so that a timed window shows none ran inside it), the device's synchronisation and peak
memory, the timed windows of Lightning's own loop (:class:`WindowTimer`) and of a plain loop
(:func:`time_loop`), and the load other processes put on the machine meanwhile.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack


class Instruments:
    """Every counting pass here (host reads, FLOPs) is entered through :func:`instrumented`:
    a timed window shows that none ran inside it by these counts staying put."""

    entered = 0
    active = 0


@contextmanager
def instrumented(mode) -> Iterator[Any]:
    """``mode`` (a ``TorchDispatchMode`` or ``FlopCounterMode``) entered, and counted so."""
    Instruments.entered += 1
    Instruments.active += 1
    try:
        with mode:
            yield mode
    finally:
        Instruments.active -= 1


def dispatch_modes() -> int:
    """Python dispatch modes active in this thread (each one intercepts every operation)."""
    return len(_get_current_dispatch_mode_stack())


class CountHostReads(TorchDispatchMode):
    """Counts reads of a tensor's value on the host (each one a GPU synchronisation). The
    optimisers' step counters are host tensors by design (torch keeps them on the CPU unless
    ``capturable``): reading them costs no synchronisation on a GPU and is not counted."""

    def __init__(self, optimizers) -> None:
        super().__init__()
        self.optimizers, self.reads = optimizers, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and not any(
                state.get("step") is args[0] for optimizer in self.optimizers()
                for state in optimizer.state.values()):
            self.reads += 1
        return func(*args, **(kwargs or {}))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_mb(device: torch.device) -> float | None:
    """The GPU's peak allocated memory since the last reset; None on a CPU (the process's peak
    resident size would mix the pipelines)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return None



def busy_cpu_seconds() -> float | None:
    """Seconds the machine's cores have spent busy since boot, over all processes (Linux's
    ``/proc/stat``: user, nice, system, irq, softirq and steal time); None elsewhere."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields)
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """This process's user and system CPU seconds, all its threads."""
    times = os.times()
    return times.user + times.system


def other_load(start: tuple[float, float | None, float], end: tuple[float, float | None, float]
               ) -> float | None:
    """The cores other processes kept busy on average between two ``(wall seconds, busy CPU
    seconds, own CPU seconds)`` readings: what the run shared the machine with (None where the
    busy time cannot be read).

    >>> other_load((0.0, 100.0, 5.0), (10.0, 125.0, 20.0))  # 25 core-seconds, 15 of them ours
    1.0
    """
    if start[1] is None or end[1] is None or end[0] <= start[0]:
        return None
    return max(0.0, (end[1] - start[1]) - (end[2] - start[2])) / (end[0] - start[0])



class WindowTimer(pl.Callback):
    """Times ``repeats`` windows of ``steps`` training steps after ``warmup`` steps, then counts
    the host reads of one more window of ``steps`` (untimed: the counter intercepts every
    operation in Python, which would slow the window it timed) and stops the training."""

    def __init__(self, warmup: int, steps: int, repeats: int, batch: int,
                 device: torch.device) -> None:
        self.warmup, self.steps, self.repeats, self.batch = warmup, steps, repeats, batch
        self.device, self.rates, self.host = device, [], []
        self.counter = CountHostReads(lambda: self.trainer.optimizers)
        self.counting, self.counted = False, False

    @staticmethod
    def batches_needed(warmup: int, steps: int, repeats: int) -> int:
        """The training batches the windows take: the warm-up, the timed windows, the counted
        one."""
        return warmup + steps * (repeats + 1)

    @staticmethod
    def images_needed(batch: int, warmup: int, steps: int, repeats: int) -> int:
        """The images a datamodule holding out 1% for validation needs for every batch the
        windows take, and one batch to spare."""
        return batch * (WindowTimer.batches_needed(warmup, steps, repeats) + 2) * 100 // 99

    def setup(self, trainer, pl_module, stage) -> None:
        self.trainer = trainer

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step - self.warmup
        if step < 0 or step % self.steps:
            return
        if step // self.steps < self.repeats:
            synchronize(self.device)
            self.start, self.host_start = time.perf_counter(), time.thread_time()
        elif step // self.steps == self.repeats and not self.counted:
            self.counter.__enter__()
            self.counting = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step - self.warmup  # already counts this batch's step
        if step <= 0 or step % self.steps:
            return
        window = step // self.steps - 1  # the window that has just ended
        if window < self.repeats:
            host = time.thread_time() - self.host_start
            synchronize(self.device)
            elapsed = time.perf_counter() - self.start
            self.rates.append(self.steps * self.batch / elapsed)
            self.host.append(1000 * host / self.steps)
        elif window == self.repeats and self.counting:
            self.counter.__exit__(None, None, None)
            self.counting, self.counted = False, True
            trainer.should_stop = True

    def on_train_end(self, trainer, pl_module) -> None:
        """Fewer batches than the windows need would leave the host-read counter on (slowing
        every operation after this run, the next pipeline's included): it is switched off, and
        the run fails saying so."""
        if self.counting:
            self.counter.__exit__(None, None, None)
            self.counting = False
        if not self.counted:
            raise RuntimeError(f"the data ran out after {len(self.rates)} of {self.repeats} "
                               "timed windows and the counted one; give the datamodule "
                               f"{self.batches_needed(self.warmup, self.steps, self.repeats)} "
                               "training batches")


def time_loop(step, batches, batch: int, device: torch.device, warmup: int, steps: int,
              repeats: int, optimizer) -> tuple[list[float], list[float], float]:
    """Samples/s and host ms per step over ``repeats`` windows of ``steps`` calls of ``step``
    after ``warmup`` calls; host reads per step over one more window of ``steps`` calls,
    untimed (the counter intercepts every operation in Python)."""
    for _ in range(warmup):
        step(*next(batches))
    rates, host, counter = [], [], CountHostReads(lambda: [optimizer])
    for _ in range(repeats):
        synchronize(device)
        if device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
        start, host_start = time.perf_counter(), time.thread_time()
        for _ in range(steps):
            step(*next(batches))
        host.append(1000 * (time.thread_time() - host_start) / steps)
        if device.type == "cuda":
            end.record()
            torch.cuda.synchronize(device)
            elapsed = begin.elapsed_time(end) / 1000
        else:
            elapsed = time.perf_counter() - start
        rates.append(steps * batch / elapsed)
    with counter:
        for _ in range(steps):
            step(*next(batches))
    synchronize(device)
    return rates, host, counter.reads / steps
