"""The GPU acceptance check: one command that answers what clusterbench does on a GPU.

Each section runs in its own process, in order of value, within the time left of ``--budget``
seconds; after each one the results so far are written to ``gpu_check.json`` and to a Markdown
page ready to commit as ``docs/results/gpu-<device>.md``, so a command cut off at any point
keeps every section it finished (a section cut at its own limit is marked so).

1. ``machine``: device, memory, driver, CUDA, cuDNN, NCCL, torch, bf16 and TF32 support.
2. ``throughput``: :mod:`benchmarks.perf.train_throughput`'s GPU cases (clusterbench and the
   bare loop, compiled and eager, and the anchors' pipeline, in interleaved windows; the
   section fails when a rule of its measurement is broken), and
   :mod:`benchmarks.perf.step_host`'s small model (the standalone TransFusion at Fashion-MNIST's
   size: the runner's step now and before, a bare loop).
3. ``protocols``: every evaluation protocol on 50,000 x 2,048 GENERATED features, seconds each.
4. ``correctness``: SimCLR from one seed, eager float32 against bf16 + channels-last +
   ``torch.compile``, the losses step by step (and the seconds per step of each, with and
   without compilation); the CUDA-graph linear probe against the plain one on the same
   features; the torch SVM and k-means on the GPU against the same on the CPU.
5. ``suites``: every suite's ``--fast`` run on CUDA, on GENERATED CIFAR-10/100 and TinyImageNet
   files in the real on-disk formats and on the real Fashion-MNIST when its files are found
   (else generated ones): pass or fail, seconds, peak memory.
6. ``trial_memory``: the peak memory of a few training steps of each searched configuration of
   the suites that set ``gpus_per_trial``, at the real batch and image size, against the share
   of the card the suite asks for.
7. ``fashion_paper`` (with ``--fashion-paper``): ``transfusion_fusion_paper``'s Fashion-MNIST
   rows at the paper's 200 epochs on the real files, started in the background once the timed
   sections (1-3) are done, so it shares the GPU with sections 4-6 only; collected at the end.

``--cpu`` rehearses the same sections at tiny sizes on the CPU (CI runs it): what only a GPU
can answer is marked "needs CUDA".

This module is the parent and its command line: it runs each section in a child process,
within its limit and the budget, and writes the record and the page after each. The sections
themselves are :mod:`benchmarks.gpu_check_sections` (the suites section apart, here: it starts a
child per suite), the page :mod:`benchmarks.gpu_check_page`.

Usage::

    python -m benchmarks.gpu_check --output results/gpu_check            # on a GPU machine
    python -m benchmarks.gpu_check --cpu --sections machine correctness   # rehearsal
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.gpu_check_page import GENERATED, device_slug, portable, render
from benchmarks.gpu_check_sections import (
    NEEDS_CUDA,
    data_marker,
    prepare_data,
    section_correctness,
    section_machine,
    section_protocols,
    section_throughput,
    section_trial_memory,
    trust_generated,
)
from benchmarks.infra import stop_signals

#: What this module offers besides the check itself: its sections (their own module,
#: :mod:`benchmarks.gpu_check_sections`) and its page (:mod:`benchmarks.gpu_check_page`).
__all__ = ["GENERATED", "NEEDS_CUDA", "child", "device_slug", "finish_fashion_paper", "main",
           "parse", "portable", "render", "run_all", "save_record", "section_correctness",
           "section_machine", "section_protocols", "section_suites", "section_throughput",
           "section_trial_memory"]

SECTIONS = ("machine", "throughput", "protocols", "correctness", "suites", "trial_memory",
            "fashion_paper")
#: The sections whose seconds are the result: run before the background training starts.
TIMED = ("machine", "throughput", "protocols")
#: Each section's own limit in seconds, on a GPU and in the CPU rehearsal alike (the rehearsal's
#: `machine` section, a cold start of torch and Lightning and little else, took 12.7 s on a
#: 2-core CPU, and longer beside other work); never more than what is left of the budget.
#: The throughput section: see gpu_check_sections.THROUGHPUT_CASES_WITHIN.
LIMITS = {"machine": 60, "throughput": 240, "correctness": 120, "protocols": 90,
          "suites": 250, "trial_memory": 60, "fashion_paper": 600}
#: Sections that measure only a GPU: a CPU rehearsal marks them without running them.
CUDA_ONLY = ("trial_memory",)
#: One suite's ``--fast`` run at most (seconds).
SUITE_LIMIT = 240


# -- the suites section: each suite's --fast run in a child of its own --------------------------
def fast_suite(ctx: argparse.Namespace, name: str) -> dict[str, Any]:
    """One suite's ``--fast`` run in this process (a child of the suites section)."""
    import torch

    from benchmarks.cli import main as cli_main
    from benchmarks.suites.suite_file import suite_kind

    root, _ = prepare_data(ctx)
    trust_generated(root)
    os.environ["CLUSTERBENCH_DATA"] = str(root)
    os.environ.setdefault("WANDB_MODE", "disabled")
    start = time.perf_counter()
    args = ["bench", name, "--fast", "--results", str(ctx.workdir / "suites")]
    if suite_kind(name) == "training":  # an experiment suite places nothing: no more options
        compiled = name == "smoke"  # the runner's compile path once; the rest eager, for time
        args += ["--no-search", "--no-progress", "--accelerator", "gpu" if ctx.cuda else "cpu"]
        args += [] if compiled else ["--no-compile"]
    code = cli_main(args)
    peak = torch.cuda.max_memory_allocated() / 2**20 if ctx.cuda else None
    return {"exit": code, "seconds": time.perf_counter() - start, "peak_mb": peak}


def section_suites(ctx: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.suites.suite_file import suites

    # the parent wrote the data before starting this section (prepare_data): this process
    # imports no torch, each suite's child imports what it runs
    fashion = data_marker(ctx.workdir / "data").read_text()
    names = ctx.suites or sorted(suites())
    out: dict[str, Any] = {"data": f"CIFAR-10/100, TinyImageNet GENERATED; Fashion-MNIST {fashion}",
                           "jobs": ctx.jobs, "runs": {}}
    deadline = time.perf_counter() + ctx.limit - 5  # room to save before the section's end

    def one(name: str) -> tuple[str, dict[str, Any]]:
        limit = min(SUITE_LIMIT, deadline - time.perf_counter())
        if limit < 5:
            return name, {"status": "not reached (section's time spent)", "seconds": 0}
        # The suites at a time share the cores: OpenMP pools that each take them all
        # spin against each other (t-SNE stalled so on a 16-core host).
        threads = max(1, (os.cpu_count() or 1) // ctx.jobs)
        result = child(ctx, ["--suite-fast", name], ctx.workdir / f"suite-{name}.json",
                       limit, ctx.workdir / f"suite-{name}.log", threads)
        return name, result

    with ThreadPoolExecutor(ctx.jobs) as pool:
        for name, result in pool.map(one, names):
            out["runs"][name] = result
            out["failures"] = [n for n, r in out["runs"].items() if r["status"] != "passed"]
            ctx.save(out)
    return out



#: Seconds the Fashion-MNIST run has, after SIGTERM at the budget's end, to save its checkpoint
#: (about 106 MB) before it is killed.
FASHION_GRACE = 30.0


def fashion_paper_command(ctx: argparse.Namespace) -> list[str]:
    return [sys.executable, "-m", "benchmarks.cli", "bench", "transfusion_fusion_paper",
            "--runs", "fashionmnist/5-blocks", "fashionmnist/pixels", "--seeds", "0",
            "--no-progress", "--checkpoint-every", "10",
            "--results", str(ctx.workdir / "fashion_paper")]


SECTION_FUNCTIONS = {"machine": section_machine, "throughput": section_throughput,
                     "correctness": section_correctness, "protocols": section_protocols,
                     "suites": section_suites, "trial_memory": section_trial_memory}


# -- the parent: sections in child processes, the page after each ------------------------------
def child(ctx: argparse.Namespace, args: list[str], into: Path, limit: float,
          log: Path, threads: int | None = None) -> dict[str, Any]:
    """Run ``python -m benchmarks.gpu_check ARGS`` with ``limit`` seconds (on ``threads`` CPU
    threads when given); what it saved in ``into`` (also a partial save), with its status,
    seconds and, on failure, its last lines."""
    env = dict(os.environ)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    into.unlink(missing_ok=True)
    command = [sys.executable, "-m", "benchmarks.gpu_check", *args, "--into", str(into),
               *common_args(ctx)]
    start = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True, env=env)
        # a stop of this check is forwarded to the child, which ends with it
        with stop_signals.forwarded_to(process):
            try:
                code = process.wait(timeout=max(1.0, limit))
                status = "passed" if code == 0 else f"failed (exit {code})"
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
                code, status = None, f"cut at its {limit:.0f} s limit"
    result = json.loads(into.read_text()) if into.is_file() else {}
    result = result if isinstance(result, dict) else {"value": result}
    if result.get("exit", 0) != 0:
        status = f"failed (exit {result['exit']})"
    elif result.get("failures") and status == "passed":
        status = "failed: " + ", ".join(result["failures"])
    result["status"] = NEEDS_CUDA if result.get("status") == NEEDS_CUDA and code == 0 else status
    result["seconds"] = round(time.perf_counter() - start, 1)
    if result["status"] != "passed":
        result["log_tail"] = log.read_text(errors="replace")[-1500:]
    return result


def common_args(ctx: argparse.Namespace) -> list[str]:
    args = ["--workdir", str(ctx.workdir), "--limit", str(ctx.limit), "--jobs", str(ctx.jobs)]
    args += ["--cpu"] if not ctx.cuda else []
    args += ["--data", ctx.data] if ctx.data else []
    args += ["--suites", *ctx.suites] if ctx.suites else []
    return args




def save_record(record: dict[str, Any], output: Path, elapsed: bool = True) -> None:
    from benchmarks.infra.atomic import write_atomic

    if elapsed:
        record["elapsed"] = time.time() - record["t0"]
    write_atomic(output / "gpu_check.json", json.dumps(record, indent=2, default=str))
    write_atomic(output / f"gpu-{device_slug(record)}.md", portable(render(record)))


def run_all(ctx: argparse.Namespace) -> dict[str, Any]:
    output = ctx.output
    output.mkdir(parents=True, exist_ok=True)
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    title = "CPU rehearsal (tiny sizes)" if not ctx.cuda else "GPU"
    record: dict[str, Any] = {"title": title, "argv": ctx.argv, "budget": ctx.budget,
                              "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "t0": time.time(), "sections": {}}
    deadline = time.perf_counter() + ctx.budget
    with ExitStack() as children:  # the background training ends with a stopped check too
        return run_sections(ctx, record, deadline, children)


def run_sections(ctx: argparse.Namespace, record: dict[str, Any], deadline: float,
                 children: ExitStack) -> dict[str, Any]:
    output = ctx.output
    title = record["title"]
    background = None
    for name in ctx.sections:
        left = deadline - time.perf_counter()
        if name == "fashion_paper":
            continue
        if left < 5:
            record["sections"][name] = {"status": "not reached (budget spent)", "seconds": 0}
            save_record(record, output)
            continue
        if name not in TIMED and background is None and "fashion_paper" in ctx.sections:
            background = start_fashion_paper(ctx, record, children)
        if name in CUDA_ONLY and not ctx.cuda:  # nothing to rehearse: no child to start
            record["sections"][name] = {"status": NEEDS_CUDA, "seconds": 0}
            save_record(record, output)
            continue
        print(f"gpu_check: {name} ({left:.0f} s left)", flush=True)
        ctx.limit = min(LIMITS[name], left)
        try:
            if name == "suites":
                prepare_data(ctx)
            record["sections"][name] = child(ctx, ["--section", name],
                                             ctx.workdir / f"{name}.json", ctx.limit,
                                             ctx.workdir / f"{name}.log")
        except KeyboardInterrupt:  # a stop signal: the sections so far are kept, this one said
            signum = stop_signals.received() or signal.SIGINT
            record["sections"][name] = {"status": f"stopped by {stop_signals.signal_name(signum)}",
                                        "seconds": 0}
            save_record(record, output)
            raise KeyboardInterrupt(f"in section {name}; the sections before it are in "
                                    f"{output / 'gpu_check.json'}") from None
        if name == "machine":
            record["title"] = title if not ctx.cuda else record["sections"][name].get("device",
                                                                                      title)
        save_record(record, output)
    if "fashion_paper" in ctx.sections:
        if background is None:
            background = start_fashion_paper(ctx, record, children)
        record["sections"]["fashion_paper"] = finish_fashion_paper(ctx, background, deadline)
        save_record(record, output)
    return record


def start_fashion_paper(ctx: argparse.Namespace, record: dict[str, Any],
                        children: ExitStack):
    if not ctx.cuda:
        record["sections"]["fashion_paper"] = {"status": NEEDS_CUDA, "seconds": 0}
        return None
    root, fashion = prepare_data(ctx)
    env = dict(os.environ, CLUSTERBENCH_DATA=str(root), WANDB_MODE="disabled")
    log = open(ctx.workdir / "fashion_paper.log", "w")
    print("gpu_check: fashion_paper started in the background", flush=True)
    process = subprocess.Popen(fashion_paper_command(ctx), stdout=log, stderr=subprocess.STDOUT,
                               env=env, start_new_session=True)
    children.enter_context(stop_signals.forwarded_to(process, FASHION_GRACE))
    return process, time.perf_counter(), fashion


def finish_fashion_paper(ctx: argparse.Namespace, background, deadline: float) -> dict:
    if background is None:
        return {"status": NEEDS_CUDA, "seconds": 0}
    process, start, fashion = background
    try:
        code = process.wait(timeout=max(1.0, deadline - FASHION_GRACE - time.perf_counter()))
        status = "passed" if code == 0 else f"failed (exit {code})"
    except subprocess.TimeoutExpired:
        # SIGTERM first: the run saves its checkpoint after the step in flight, so the same
        # command (on the same machine, the same --workdir) goes on from that step
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=FASHION_GRACE)
            status = "cut at the budget's end (its checkpoint saved)"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            status = "cut at the budget's end (killed)"
    out: dict[str, Any] = {"status": status, "seconds": round(time.perf_counter() - start, 1),
                           "data": fashion}
    board = ctx.workdir / "fashion_paper" / "transfusion_fusion_paper" / "leaderboard.md"
    if board.is_file():
        out["leaderboard"] = board.read_text()
    if status != "passed":
        out["log_tail"] = (ctx.workdir / "fashion_paper.log").read_text(errors="replace")[-1500:]
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true",
                        help="rehearse on the CPU at tiny sizes (what needs a GPU is marked so)")
    parser.add_argument("--output", type=Path, default=Path("results/gpu_check"),
                        help="where gpu_check.json and gpu-<device>.md go")
    parser.add_argument("--budget", type=float, default=480.0,
                        help="seconds for the whole check (default 480: 8 minutes)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS,
                        default=[s for s in SECTIONS if s != "fashion_paper"])
    parser.add_argument("--fashion-paper", action="store_true",
                        help="also train transfusion_fusion_paper's Fashion-MNIST rows at 200 "
                        "epochs in the background")
    parser.add_argument("--data", default=None,
                        help="a data root holding the real FashionMNIST/raw files")
    parser.add_argument("--suites", nargs="+", default=None,
                        help="only these suites in the suites section (default: every one)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="suites run at a time (default: 4 on a GPU, 1 on the CPU)")
    parser.add_argument("--render", type=Path, default=None,
                        help="only write the page again from this gpu_check.json (into --output)")
    parser.add_argument("--workdir", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--section", choices=SECTIONS, help=argparse.SUPPRESS)
    parser.add_argument("--suite-fast", help=argparse.SUPPRESS)
    parser.add_argument("--into", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=float, default=60.0, help=argparse.SUPPRESS)
    ctx = parser.parse_args(argv)
    ctx.argv = list(argv if argv is not None else sys.argv[1:])
    if not ctx.cpu and not ctx.render:
        import torch

        if not torch.cuda.is_available():
            parser.exit(2, "gpu_check: no CUDA device here; --cpu rehearses on the CPU\n")
    ctx.cuda = not ctx.cpu
    ctx.jobs = ctx.jobs or (4 if ctx.cuda else 1)
    ctx.workdir = ctx.workdir or ctx.output / "work"
    if ctx.fashion_paper and "fashion_paper" not in ctx.sections:
        ctx.sections.append("fashion_paper")
    return ctx


def main(argv: list[str] | None = None) -> int:
    """The check (or, with the hidden options, one of its children). A stop signal ends it and
    every child it started within their grace, said in one line, with exit status 128 + the
    signal's number; the same command runs the check again."""
    with stop_signals.stop_handlers():
        try:
            return check(argv)
        except KeyboardInterrupt as err:
            signum = stop_signals.received() or getattr(err, "signum", signal.SIGINT)
            detail = str(err)
        stop_signals.end_helpers()
        line = stop_signals.stopped_line(signum, detail, prog="gpu_check")
        print(line.replace("the same command continues", "the same command runs the check "
                           "again"), file=sys.stderr, flush=True)
        return stop_signals.exit_status(signum)


def check(argv: list[str] | None) -> int:
    ctx = parse(argv)
    if ctx.render:
        record = json.loads(ctx.render.read_text())
        ctx.output.mkdir(parents=True, exist_ok=True)
        save_record(record, ctx.output, elapsed=False)
        print(f"gpu_check: {ctx.output / f'gpu-{device_slug(record)}.md'}")
        return 0
    if ctx.section or ctx.suite_fast:  # a child: one section, saved as it goes

        def save(value: dict[str, Any]) -> None:
            from benchmarks.infra.atomic import write_atomic

            write_atomic(ctx.into, json.dumps(value, indent=2, default=str))

        ctx.save = save
        if ctx.suite_fast:
            result = fast_suite(ctx, ctx.suite_fast)
        else:
            result = SECTION_FUNCTIONS[ctx.section](ctx)
        save(result)
        return 0
    record = run_all(ctx)
    failed = [n for n, r in record["sections"].items()
              if not (r["status"] == "passed" or r["status"] == NEEDS_CUDA)]
    page = ctx.output / f"gpu-{device_slug(record)}.md"
    print(f"gpu_check: {len(record['sections'])} sections in {record['elapsed']:.0f} s; "
          f"{page}" + (f"; not passed: {', '.join(failed)}" if failed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
