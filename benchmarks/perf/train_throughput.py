"""SimCLR training throughput: clusterbench's step against a bare loop and the anchors' pipeline.

Ways to train the same SimCLR configuration (ResNet, NT-Xent, two views per image) on the same
generated images (uniform random ``uint8``: pixel content does not change the cost), timed side
by side in one run (the GPU cases, and ``--tiny`` on a CPU):

- ``clusterbench``: the training step as the suite runner builds it: the Lightning Trainer with
  the runner's callbacks, the DataModule's ``uint8`` batches and its on-device augmentation, the
  method's optimiser (LARS, its parameter groups) and per-step schedule, the online probe, the
  run's precision and the runner's GPU settings, ``torch.compile`` of the backbone and projector
  included (:func:`benchmarks.run.trainer.apply_gpu_speed_settings`).
- ``bare loop``: the same model, augmentation, loss, online probe, optimiser groups and
  schedule in a plain PyTorch loop (no Lightning, no callbacks, no logging), compiled the same
  way: what the framework alone costs.
- ``clusterbench, eager`` and ``bare loop, eager``: the two without ``torch.compile``.
- ``anchors' pipeline``: how lightly's and solo-learn's SimCLR benchmarks feed a GPU:
  per-sample torchvision transforms on PIL images in DataLoader workers, torchvision's ResNet of
  the case's depth with the CIFAR stem and a Linear-BatchNorm-ReLU-Linear projector, the loss
  under autocast (AMP), SGD, eager.

How it is timed, so that a figure measures what it names:

- Each pipeline is built, warmed up (compilation, cuDNN's autotuning for its own shapes) and
  measured alone before any timing: its peak memory over a few steady steps (the peak reset
  after its warm-up and measured from what was allocated before it was built), then its host
  reads of device values over a window of their own (``aten._local_scalar_dense``, counted
  with a ``TorchDispatchMode``, which intercepts every operation in Python).
- Then the pipelines take turns, window by window (each round in another order), for at least
  :data:`MIN_WINDOWS` timed windows each: other work on the machine, or a drifting clock,
  hits them alike. No counter and no hook is active in a timed window.
- The anchors' DataLoader workers fill their queue while the other pipelines run: before each
  of its windows the pipeline throws that queue away and takes as many untimed training steps
  as it holds (:meth:`AnchorsPipeline.before_window`), so that the window starts from its own
  steady state rather than with every worker idle; a window's steps are whole rounds of the
  workers.
- FLOPs of a step come from ``torch.utils.flop_counter`` in a pass after every window and
  peak, on an eager model (float32; the count does not depend on the precision); model FLOP
  utilisation divides them by the GPU's dense bf16 peak, from a table by device name ("n/a" on
  a CPU).
- Reported per pipeline: samples per second as mean ± sample std and min-max over the windows,
  host (stepping thread) milliseconds per step, host reads per step and peak memory; the ratio
  of clusterbench's samples/s to each other pipeline's with the same compilation (the anchors'
  against compiled clusterbench). On a GPU the windows are timed with CUDA events; on a CPU
  with the wall clock. Every run records its order of events (:class:`Timeline`) and checks
  these rules on it (:func:`check_rules`).

Clusterbench's Trainer cannot hand control back between two of its steps, so it trains in a
thread of its own that steps only when told (:class:`LightningPipeline`); one pipeline runs at a
time.

``--case fashion-cpu`` times a suite's own run instead: ``benchmarks/fashion_cpu.yaml``'s
``simclr/nt_xent`` (the five-layer CNN, AdamW, the warm-up-stable-decay schedule, batch 512, the
``simclr`` grey-scale augmentation of ``uint8`` batches, bf16 autocast and channels-last on the
CPU), every setting read from the suite file (:func:`suite_case`). clusterbench is the run's
model, datamodule and Trainer as the suite runner builds them
(:func:`benchmarks.run.one.instantiate`, :func:`benchmarks.run.one.run_trainer`: its callbacks,
checkpoint saver and CSV logger); the bare loop is the same model, datamodule, augmentation,
precision, optimiser and schedule without Lightning. The runner compiles nothing on a CPU
(:func:`benchmarks.run.trainer.gpu_speed_settings`), so the two run eagerly; no anchors'
pipeline. The data: the real Fashion-MNIST training split where it is installed, else (or with
``--generated``) uniform random ``uint8`` images of its shape, named so. The timed steps stay
within the run's first epoch (the epoch's end validates, which is not the step).

Usage::

    python -m benchmarks.perf.train_throughput        # the GPU cases, when there is one
    python -m benchmarks.perf.train_throughput --tiny               # seconds on a CPU
    python -m benchmarks.perf.train_throughput --case fashion-cpu   # a minute on a CPU
    python -m benchmarks.perf.train_throughput --output results/throughput/train.json

The parts, each in a module of its own: the cases and what each trains
(:mod:`benchmarks.perf.train_cases`), the pipelines (:mod:`benchmarks.perf.train_pipelines`, and
clusterbench's in :mod:`benchmarks.perf.lightning_pipeline`), the counters and timers
(:mod:`benchmarks.perf.instruments`), the rules of the measurement
(:mod:`benchmarks.perf.train_rules`) and the table and ratios (:mod:`benchmarks.perf.train_report`);
this module measures a case and runs the benchmark, and offers those parts by their names too.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from benchmarks.perf.instruments import (
    CountHostReads,
    Instruments,
    WindowTimer,
    busy_cpu_seconds,
    other_load,
    own_cpu_seconds,
    peak_memory_mb,
    synchronize,
    time_loop,
)
from benchmarks.perf.lightning_pipeline import LightningPipeline, SuiteRunPipeline
from benchmarks.perf.throughput import cpu_name
from benchmarks.perf.train_cases import (
    FASHION_CPU,
    GENERATED_IMAGES,
    GPU_CASES,
    TINY_CASES,
    Case,
    architecture,
    datamodule,
    endless,
    load_run,
    simclr_model,
    suite_case,
    suite_device,
    suite_speed,
)
from benchmarks.perf.train_pipelines import (
    ANCHORS,
    PIPELINES,
    REFERENCE,
    AnchorsPipeline,
    BareLoop,
    Pipeline,
    Span,
    SuiteBareLoop,
)
from benchmarks.perf.train_report import (
    Timing,
    against_bare_loop,
    mean_std_cell,
    rate_ratios,
    table,
)
from benchmarks.perf.train_rules import MIN_WINDOWS, Timeline, check_rules

#: What this module offers: the benchmark (:func:`main`, :func:`parse`, :func:`measure_case`),
#: and the parts that tests and the GPU check reach through it, from their own modules.
__all__ = [
    "ANCHORS", "FASHION_CPU", "MIN_WINDOWS", "PIPELINES", "TINY_CASES", "AnchorsPipeline",
    "BareLoop", "Case", "CountHostReads", "LightningPipeline", "SuiteBareLoop",
    "SuiteRunPipeline", "Timeline", "Timing", "WindowTimer", "architecture", "case_pipelines",
    "check_rules", "datamodule", "endless", "load_run", "main", "mean_std_cell", "measure_case",
    "parse", "peak_memory_mb", "simclr_model", "suite_case", "table", "time_loop",
    "timed_window",
]

#: Steady steps whose peak memory is a pipeline's (after its warm-up, before any timing); one
#: on a CPU, where no peak is read.
PEAK_STEPS = 3
#: ``--case fashion-cpu``'s warm-up steps, steps a window and windows: 92 steps a pipeline,
#: within the run's first epoch (111 steps of Fashion-MNIST's 57,000 training images at 512).
SUITE_DEFAULTS = (3, 8, 10)


def timed_window(pipeline: Pipeline, steps: int, device: torch.device
                 ) -> tuple[float, Span, int, int]:
    """Seconds of ``steps`` steps of ``pipeline`` (CUDA events on a GPU, after a
    synchronisation; the wall clock on a CPU), its span, the counting passes entered meanwhile,
    and the untimed steps its :meth:`Pipeline.before_window` ran first."""
    warm_steps = pipeline.before_window()
    entered = Instruments.entered
    synchronize(device)
    if device.type == "cuda":
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
    start = time.perf_counter()
    span = pipeline.run(steps)
    if device.type == "cuda":
        end.record()
        torch.cuda.synchronize(device)
        seconds = begin.elapsed_time(end) / 1000
    else:
        seconds = time.perf_counter() - start
    return seconds, span, Instruments.entered - entered, warm_steps


def case_pipelines(case: Case) -> tuple[str, ...]:
    """The pipelines of ``case``: all of :data:`PIPELINES`; for a suite's run, clusterbench and
    the bare loop, compiled as the runner compiles it (eager on a CPU)."""
    if case.suite_run is None:
        return PIPELINES
    if suite_speed(case).get("compile"):
        return ("clusterbench", "bare loop")
    return ("clusterbench, eager", "bare loop, eager")


def build(name: str, case: Case, device: torch.device, workers: int, batches: int,
          reference: Pipeline | None, generated: int | None = None) -> Pipeline:
    """Pipeline ``name`` of ``case``; a bare loop takes its schedule's length from
    ``reference``, its clusterbench."""
    if name == ANCHORS:
        return AnchorsPipeline(case, device, workers)
    compiled = not name.endswith(", eager")
    if name.startswith("clusterbench"):
        if case.suite_run is not None:
            return SuiteRunPipeline(name, case, batches, generated)
        return LightningPipeline(name, case, device, compiled, batches)
    total, per_epoch = ((reference.total_steps, reference.steps_per_epoch)
                        if isinstance(reference, LightningPipeline) else (0, None))
    if case.suite_run is not None:
        return SuiteBareLoop(name, case, total, per_epoch, generated)
    return BareLoop(name, case, device, compiled, total, per_epoch)


def measure_case(case: Case, device: torch.device, warmup: int, steps: int, windows: int,
                 workers: int, timeline: Timeline, peak_steps: int = PEAK_STEPS,
                 generated: int | None = None) -> dict[str, Timing]:
    """Every pipeline of ``case``, measured alone and then timed in turns (module docstring);
    ``generated`` images in place of a suite run's data when given."""
    on_gpu = device.type == "cuda"
    names = case_pipelines(case)
    # the Trainer's epoch holds every step any call takes: the schedule's length is the same
    # for the bare loops, which read it from the Trainer
    batches = warmup + peak_steps + steps + windows * steps
    pipelines: dict[str, Pipeline] = {}
    peaks: dict[str, float | None] = {}
    reads: dict[str, float] = {}
    try:
        for name in names:  # one at a time: its own memory, its own autotuning
            reference = pipelines.get(REFERENCE[name])
            base = torch.cuda.memory_allocated(device) if on_gpu else 0
            timeline.add("build", name)
            pipeline = pipelines[name] = build(name, case, device, workers, batches, reference,
                                               generated)
            pipeline.start()
            timeline.add("warm-up", name, steps=warmup,
                         cudnn_benchmark=torch.backends.cudnn.benchmark)
            pipeline.run(warmup)
            synchronize(device)
            if on_gpu:
                torch.cuda.reset_peak_memory_stats(device)
            timeline.add("reset peak", name)
            pipeline.run(peak_steps)
            synchronize(device)
            peaks[name] = (torch.cuda.max_memory_allocated(device) - base) / 2**20 if on_gpu \
                else None
            timeline.add("read peak", name)
            counter = CountHostReads(pipeline.optimizers)
            timeline.add("count host reads", name, steps=steps)
            pipeline.run(steps, mode=counter)
            synchronize(device)
            reads[name] = counter.reads / steps
        rates: dict[str, list[float]] = {name: [] for name in names}
        host: dict[str, list[float]] = {name: [] for name in names}
        for round_ in range(windows):
            turn = round_ % len(names)  # each round in another order
            for name in names[turn:] + names[:turn]:
                pipeline = pipelines[name]
                seconds, span, entered, warm = timed_window(pipeline, steps, device)
                rates[name].append(steps * case.batch_size / seconds)
                host[name].append(1000 * span.host_seconds / steps)
                timeline.add("window", name, round=round_, seconds=seconds, steps=steps,
                             workers=pipeline.workers, queue=pipeline.queue, warm_steps=warm,
                             dispatch_modes=span.dispatch_modes, counting_passes=entered)
        signatures = {name: p.signature() for name, p in pipelines.items()}
        model_flops = anchors_flops = None
        if "bare loop, eager" in pipelines:
            timeline.add("flops", "bare loop, eager")
            model_flops = pipelines["bare loop, eager"].flops()
        if ANCHORS in pipelines:
            timeline.add("flops", ANCHORS)
            anchors_flops = pipelines[ANCHORS].flops()
    finally:
        for pipeline in pipelines.values():
            pipeline.close()
    timings = {name: Timing(rates[name], host[name], reads[name],
                            anchors_flops if name == ANCHORS else model_flops, peaks[name],
                            p.compile_status, p.architecture(), p.data())
               for name, p in pipelines.items()}
    timeline.add("signatures", "", signatures=signatures)
    del pipelines
    gc.collect()
    if on_gpu:
        torch.cuda.empty_cache()
    return timings



#: ``--case``: the GPU ResNets, their toy sizes on a CPU, or a suite's run.
CASES = {"gpu": GPU_CASES, "tiny": TINY_CASES, "fashion-cpu": [FASHION_CPU]}


def default_workers(device: str) -> int:
    """The anchors' loader workers without ``--workers``: 8 on a GPU, none on a CPU."""
    return 0 if torch.device(device).type == "cpu" else 8


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=CASES, default=None,
                        help="gpu: SimCLR ResNets on generated 32 and 64 px images (the default "
                        "on a GPU); tiny: toy sizes (the default on a CPU); fashion-cpu: "
                        "benchmarks/fashion_cpu.yaml's simclr/nt_xent run, its settings read "
                        "from the suite file, on its own device (the CPU)")
    parser.add_argument("--tiny", action="store_true",
                        help="toy sizes (ResNet50, batch 4, 8 px): the code paths in seconds "
                        "(--case tiny)")
    parser.add_argument("--generated", action="store_true",
                        help=f"--case fashion-cpu on {GENERATED_IMAGES:,} generated images even "
                        "where Fashion-MNIST is installed")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="the device of the gpu and tiny cases (a suite's run trains on its "
                        "own)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed steps first (compilation, autotuning; default 8 on a GPU, "
                        f"1 for tiny, {SUITE_DEFAULTS[0]} for fashion-cpu)")
    parser.add_argument("--steps", type=int, default=None,
                        help=f"steps per timed window (default {SUITE_DEFAULTS[1]} for "
                        "fashion-cpu)")
    parser.add_argument("--windows", type=int, default=None,
                        help=f"timed windows per pipeline (at least {MIN_WINDOWS}, the default; "
                        f"{SUITE_DEFAULTS[2]} for fashion-cpu)")
    parser.add_argument("--workers", type=int, default=None,
                        help="DataLoader workers of the anchors' pipeline (default: 8 on a GPU, "
                        "0 on a CPU)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="start no further case once this many seconds have passed")
    parser.add_argument("--output", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.tiny and args.case not in (None, "tiny"):
        parser.error(f"--tiny is --case tiny, not --case {args.case}")
    if args.case is None:
        args.case = "tiny" if args.tiny or args.device == "cpu" else "gpu"
    if args.generated and args.case != "fashion-cpu":
        parser.error("--generated is for --case fashion-cpu (the other cases are generated)")
    suite = args.case == "fashion-cpu"
    if args.windows is None:
        args.windows = SUITE_DEFAULTS[2] if suite else MIN_WINDOWS
    if args.windows < MIN_WINDOWS:
        parser.error(f"--windows {args.windows}: at least {MIN_WINDOWS} timed windows per "
                     "pipeline (fewer give no useful spread)")
    for name in ("warmup", "steps", "workers"):
        value = getattr(args, name)
        if value is not None and value < (1 if name != "workers" else 0):
            parser.error(f"--{name} {value}: a whole number of at least "
                         f"{1 if name != 'workers' else 0}")
    workers = args.workers if args.workers is not None else default_workers(args.device)
    if not suite and args.steps is not None and args.steps % max(workers, 1):
        parser.error(f"--steps {args.steps}: a multiple of the anchors' {workers} loader "
                     "workers (whole rounds of them a window, as a steady loader takes)")
    return args


def main(argv: list[str] | None = None,
         on_case: Callable[[dict], None] | None = None) -> dict:
    """Run the cases and print their table; ``on_case`` gets the record after each case (the
    GPU check saves it, so a run cut short keeps the cases it finished)."""
    args = parse(argv)
    suite = args.case == "fashion-cpu"
    cases = [suite_case(*c) if isinstance(c, tuple) else c for c in CASES[args.case]]
    device = suite_device(cases[0]) if suite else torch.device(args.device)
    tiny = args.case == "tiny"
    workers = args.workers if args.workers is not None else default_workers(device.type)
    if suite:
        warmup, steps = args.warmup or SUITE_DEFAULTS[0], args.steps or SUITE_DEFAULTS[1]
    else:
        warmup = args.warmup if args.warmup is not None else (1 if tiny else 8)
        # a multiple of the anchors' workers (see AnchorsPipeline.before_window)
        steps = args.steps or (1 if tiny else 2) * max(workers, 1)
    peak_steps = PEAK_STEPS if device.type == "cuda" else 1
    torch.backends.cudnn.benchmark = True  # every pipeline autotunes in its own warm-up
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    start = time.perf_counter()
    busy_start = (start, busy_cpu_seconds(), own_cpu_seconds())
    machine = (torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name())
    record: dict[str, Any] = {
        "machine": machine, "device": device.type, "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(), "case": args.case, "windows": args.windows,
        "steps": steps, "warmup": warmup, "peak_steps": peak_steps, "workers": workers,
        "data": {}, "method": "interleaved windows", "load_average": {"start": os.getloadavg()},
        "results": {}, "ratios": {}, "rules": {}, "timelines": {}, "not_reached": []}
    for case in cases:
        if args.seconds is not None and time.perf_counter() - start > args.seconds:
            record["not_reached"].append(case.name)
            continue
        timeline = Timeline()
        timings = measure_case(case, device, warmup, steps, args.windows, workers, timeline,
                               peak_steps, GENERATED_IMAGES if args.generated else None)
        record["data"][case.name] = sorted({t.data for t in timings.values()})
        record["ratios"].update(rate_ratios({case.name: timings}))
        record["results"][case.name] = {p: asdict(t) for p, t in timings.items()}
        record["timelines"][case.name] = timeline.events
        record["rules"][case.name] = check_rules(case.name, record["results"][case.name],
                                                 timeline.events, device.type)
        record["seconds"] = time.perf_counter() - start
        if on_case is not None:
            on_case(record)
    record["failures"] = sorted({f"{rule} ({case})" for case, rules in record["rules"].items()
                                 for rule, r in rules.items() if not r["passed"]})
    if suite and device.type == "cpu":  # what the runner's Trainer set (build_trainer)
        from benchmarks.infra.allocator import keep_freed_memory

        record["allocator"] = keep_freed_memory()
    record["load_average"]["end"] = os.getloadavg()
    load = record["load_average"]
    others = record["other_processes_cores"] = other_load(
        busy_start, (time.perf_counter(), busy_cpu_seconds(), own_cpu_seconds()))
    header = (f"Machine: {machine} ({platform.machine()}, {torch.get_num_threads()} threads, "
              f"{os.cpu_count()} cores, CPU capability {record['cpu_capability']}); torch "
              f"{torch.__version__}; {args.windows} interleaved windows of {steps} steps per "
              f"pipeline after {warmup} warm-up steps, mean ± sample std and min-max"
              + (f"; anchors' loader workers: {workers}" if not suite else "")
              + f"; {time.perf_counter() - start:.0f} s in all; load average (1 min) "
              f"{load['start'][0]:.2f} at the start, {load['end'][0]:.2f} at the end; other "
              "processes kept "
              + (f"{others:.2f} of its {os.cpu_count()} cores busy on average" if others
                 is not None else "an unknown share of its cores busy"))
    print(header)
    for case, data in record["data"].items():
        print(f"{case}: data: {'; '.join(data)}")
    timings = {c: {p: Timing(**t) for p, t in rows.items()}
               for c, rows in record["results"].items()}
    print(table(timings, device))
    print("\n".join(against_bare_loop(timings)))
    for case, rules in record["rules"].items():
        for rule, r in rules.items():
            print(f"{case}: {rule}: {'passed' if r['passed'] else 'FAILED'} ({r['detail']})")
    if record["not_reached"]:
        print(f"not reached within {args.seconds:.0f} s: {', '.join(record['not_reached'])}")
    if args.output:
        from benchmarks.infra.atomic import write_atomic

        write_atomic(args.output, json.dumps(record, indent=2))
    return record



if __name__ == "__main__":
    main()
