"""What the training-throughput benchmark (:mod:`benchmarks.perf.train_throughput`) reports: each
pipeline's :class:`Timing`, their table (samples/s as mean ± sample std, MFU against the GPU's
dense bf16 peak, host time, host reads, peak memory), and clusterbench's step against the bare
loop with its optimiser and schedule, beside the targets.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.infra.statistics import format_mean_std, mean_std
from benchmarks.perf.throughput import GeneratedImagesDataModule
from benchmarks.perf.train_pipelines import REFERENCE

#: Dense bf16 tensor-core peaks (FLOP/s) by a substring of ``torch.cuda.get_device_name()``.
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A6000": 155e12,
             "L4": 121e12, "A10": 125e12, "V100": 125e12, "T4": 65e12}


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16.items() if key in name), None)



@dataclass
class Timing:
    samples_per_second: list[float]
    host_ms_per_step: list[float]
    reads_per_step: float
    flops_per_step: float | None
    peak_memory_mb: float | None
    compile: str = "eager"
    architecture: str | None = None
    data: str = GeneratedImagesDataModule.source



def mean_std_cell(values: list[float]) -> str:
    """``mean ± sample std`` for a table cell (a std of 0 for one window: the column stays
    numeric)."""
    return format_mean_std(*mean_std(values, std_of_one=0.0), ".4g", ".2g")


def table(results: dict[str, dict[str, Timing]], device: torch.device) -> str:
    peak = peak_flops(device)
    lines = ["| case | pipeline | compile | samples/s | min-max | vs clusterbench | MFU | "
             "host ms/step | host reads/step | peak MB |", "|---" * 10 + "|"]
    for case, timings in results.items():
        batch = int(case.split("batch ")[1].split(",")[0])
        for pipeline, t in timings.items():
            rate = statistics.fmean(t.samples_per_second)
            reference = timings.get(REFERENCE.get(pipeline, "clusterbench"),
                                    timings.get("clusterbench"))
            ours = statistics.fmean(reference.samples_per_second)
            mfu = (f"{100 * t.flops_per_step * rate / batch / peak:.1f}%"
                   if peak and t.flops_per_step else "n/a")
            ratio = "1" if reference is t else f"{ours / rate:.2f}x"
            lines.append(f"| {case} | {pipeline} | {t.compile} | "
                         f"{mean_std_cell(t.samples_per_second)}"
                         f" | {min(t.samples_per_second):.4g}-{max(t.samples_per_second):.4g} | "
                         f"{ratio} | {mfu} | {mean_std_cell(t.host_ms_per_step)} | "
                         f"{t.reads_per_step:.2f} | "
                         + (f"{t.peak_memory_mb:.0f} |" if t.peak_memory_mb else "n/a |"))
    return "\n".join(lines)


#: What clusterbench's step should cost against the bare loop with the same model, optimiser,
#: schedule and compilation: at least this share of its samples/s, at most this multiple of its
#: peak memory.
TARGET_RATE, TARGET_MEMORY = 0.9, 1.3


#: Each clusterbench pipeline and the bare loop with its optimiser, schedule and compilation.
BARE_PAIRS = (("clusterbench", "bare loop"), ("clusterbench, eager", "bare loop, eager"))


def rate_ratios(results: dict[str, dict[str, Timing]]) -> dict[str, dict[str, Any]]:
    """Clusterbench's samples/s over its bare loop's, per case and pair (``"clusterbench, eager
    / bare loop, eager"``): ``ratio`` of the mean rates, and ``per_round`` (each round's window
    of the one over the same round's window of the other: the two ran back to back, under the
    same load) with their ``mean`` and sample ``std`` (None for one round).

    >>> t = lambda *rates: Timing(list(rates), [1.0] * len(rates), 0.0, None, None)
    >>> r = rate_ratios({"c": {"clusterbench": t(90, 45), "bare loop": t(100, 50)}})
    >>> r["c"]["clusterbench / bare loop"]
    {'ratio': 0.9, 'per_round': [0.9, 0.9], 'mean': 0.9, 'std': 0.0}
    """
    out: dict[str, dict[str, Any]] = {}
    for case, timings in results.items():
        for ours, bare in BARE_PAIRS:
            if ours in timings and bare in timings:
                a, b = timings[ours].samples_per_second, timings[bare].samples_per_second
                per_round = [x / y for x, y in zip(a, b, strict=True)]
                mean, std = mean_std(per_round)
                out.setdefault(case, {})[f"{ours} / {bare}"] = {
                    "ratio": statistics.fmean(a) / statistics.fmean(b),
                    "per_round": per_round, "mean": mean, "std": std}
    return out


def against_bare_loop(results: dict[str, dict[str, Timing]]) -> list[str]:
    """One line per case and compilation: clusterbench's samples/s (the ratio of the mean
    rates, then the mean ± sample std of the rounds' ratios, :func:`rate_ratios`), host time per
    step and peak memory as multiples of the same-optimiser bare loop's, beside the targets.

    >>> t = lambda rate, host, peak: Timing([rate, rate], [host] * 2, 0.0, None, peak)
    >>> line, = against_bare_loop({"c": {"clusterbench": t(90, 2.0, 130),
    ...                                  "bare loop": t(100, 1.0, 100)}})
    >>> for part in line.split(": ", 1)[1].split(", "):
    ...     print(part)
    samples/s 0.90x (per round 0.900 ± 0.000 over 2 rounds; target at least 0.9x)
    host ms/step 2.00x
    peak memory 1.30x (target at most 1.3x)
    """
    lines = []
    ratios = rate_ratios(results)
    for case, timings in results.items():
        for ours, bare in BARE_PAIRS:
            if ours not in timings or bare not in timings:
                continue
            a, b = timings[ours], timings[bare]
            r = ratios[case][f"{ours} / {bare}"]
            spread = format_mean_std(r["mean"], r["std"], ".3f")
            host = statistics.fmean(a.host_ms_per_step) / statistics.fmean(b.host_ms_per_step)
            memory = (f"{a.peak_memory_mb / b.peak_memory_mb:.2f}x"
                      if a.peak_memory_mb and b.peak_memory_mb else "n/a")
            lines.append(f"{case}, {ours} against the {bare} with its optimiser and schedule: "
                         f"samples/s {r['ratio']:.2f}x (per round {spread} over "
                         f"{len(r['per_round'])} rounds; target at least {TARGET_RATE}x), host "
                         f"ms/step {host:.2f}x, peak memory {memory} (target at most "
                         f"{TARGET_MEMORY}x)")
    return lines
