"""The papers' Fashion-MNIST experiments at their own budgets, within one lent GPU call.

A GPU call is short (10 minutes at most) and brings back one folder, so the steps run in order
of value, each a ``clusterbench bench`` child with the time left: on the deadline it gets SIGTERM
(its run saves a checkpoint), after a grace SIGKILL. ``paper_budget.json`` and the page are
written after each step; ``--resume-from`` the folder a call brought back copies it into
``--out`` first, so a finished run is kept and a cut one goes on from its checkpoint.

1. TransFusion section 5.1: ``transfusion_fusion_paper``'s ``fashionmnist/pixels`` (the
   baseline, seconds) then ``fashionmnist/5-blocks`` (200 epochs), seed 0;
2. the cluster-specific paper's Figure 10 (VAE against TVAE): the ``tensorized`` suite's
   ``tvae_fashion`` part alone (on the CPU; an experiment keeps nothing until it ends);
3. ``fashion_cpu``'s SimCLR losses on the GPU for the epochs that fit (from one timed epoch, or
   those a previous call chose, so that its checkpoints resume).

``--cpu`` rehearses the same path at tiny sizes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.infra import stop_signals
from benchmarks.infra.errors import ConfigError
from benchmarks.infra.read_back import load_csv, load_json
from benchmarks.paper_budget_page import GENERATED, render

#: What this module offers besides the plan: the page's first line (its own module,
#: :mod:`benchmarks.paper_budget_page`, draws the page).
__all__ = ["GENERATED", "main", "run_plan", "simclr_runs"]

RECORD = "paper_budget.json"
STEPS = ("transfusion", "tensorized", "simclr")
TITLES = {"transfusion": "TransFusion section 5.1 (transfusion_fusion_paper, seed 0)",
          "tensorized": "Cluster-specific representations, Figure 10 (tensorized: VAE vs TVAE)",
          "simclr": "Kernel-InfoNCE's SimCLR losses (fashion_cpu's runs on the GPU)"}
PAPER_EPOCHS = 200
#: The rehearsal's epochs of the 5-block model: many tiny ones, so that its budget cuts them.
CPU_EPOCHS = 10
#: Seconds between SIGTERM and SIGKILL: the checkpoint of the 5-block model and Adam (~110 MB).
GRACE = {"gpu": 30.0, "cpu": 5.0}
#: Seconds a step needs at least to start (imports, data, a first epoch): less is "not reached".
MIN_START = {"gpu": 45.0, "cpu": 3.0}
#: At most this many SimCLR epochs (Kernel-InfoNCE's 200); the rehearsal keeps --fast's 1 or 2.
MAX_SIMCLR_EPOCHS = {"gpu": 200, "cpu": 2}


class OneLineParser(argparse.ArgumentParser):
    """Bad input is one line and exit 2, as the CLI's."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"clusterbench: error: {message}\n")


def budget_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"--budget {text!r}: accepted: a number of seconds above 0")
    return value


def parse(argv: list[str]) -> argparse.Namespace:
    parser = OneLineParser(prog="python -m benchmarks.paper_budget",
                           description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default=None,
                        help="seconds for the whole call (default 540; --cpu: 20)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the folder to bring back (default $OUT/paper_budget, else "
                        "results/paper_budget)")
    parser.add_argument("--resume-from", type=Path, default=None,
                        help="a folder a previous call brought back: copied into --out first")
    parser.add_argument("--cpu", action="store_true", help="rehearse on the CPU at tiny sizes")
    parser.add_argument("--page", type=Path, default=None, help="the Markdown page (default "
                        "docs/results/fashion-paper-budget.md; --cpu: in --out)")
    parser.add_argument("--data", type=Path, default=None,
                        help="a folder holding FashionMNIST/raw (default: the usual lookup)")
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS),
                        help="only these steps, in the plan's order")
    ns = parser.parse_args(argv)
    ns.device = "cpu" if ns.cpu else "gpu"
    ns.budget = budget_seconds(ns.budget) if ns.budget is not None else (20.0 if ns.cpu
                                                                         else 540.0)
    if ns.out is None:
        ns.out = (Path(os.environ["OUT"]) / "paper_budget" if os.environ.get("OUT")
                  else Path("results/paper_budget"))
    ns.page = ns.page or (ns.out / "fashion-paper-budget.md" if ns.cpu
                          else Path("docs/results/fashion-paper-budget.md"))
    if ns.resume_from is not None and not (ns.resume_from / RECORD).is_file():
        raise ConfigError(f"--resume-from {ns.resume_from}: holds no {RECORD}; accepted: a "
                          "folder a previous call wrote")
    if (ns.resume_from is not None and (ns.out / RECORD).is_file()
            and ns.resume_from.resolve() != ns.out.resolve()):  # never mix two plans' results
        raise ConfigError(f"--out {ns.out}: holds a plan's results already; accepted with "
                          "--resume-from: a new folder, or the --resume-from folder itself")
    if ns.data is not None and not (ns.data / "FashionMNIST" / "raw").is_dir():
        raise ConfigError(f"--data {ns.data}: holds no FashionMNIST/raw folder; accepted: the "
                          "folder above FashionMNIST/raw")
    ns.steps = [s for s in STEPS if s in ns.steps]
    return ns


# -- the folder: copied from the previous call, data for the rehearsal -------------------------
def take_over(source: Path, out: Path) -> None:
    """Copy ``source`` into ``out`` (times kept: a finished result stays as it was), writable:
    a folder brought back from another machine may be read-only."""
    if source.resolve() != out.resolve():
        shutil.copytree(source, out, dirs_exist_ok=True, symlinks=False)
    for folder, dirs, files in os.walk(out):
        for path in (Path(folder) / name for name in [*dirs, *files, "."]):
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def rehearsal_data(out: Path) -> Path:
    """Tiny GENERATED Fashion-MNIST files in the real format, in ``out/data``."""
    from datamodules.sample_files import write_mnist

    root = out / "data"
    if not (root / "FashionMNIST" / "raw").is_dir():
        write_mnist(root, "FashionMNIST", seed=3)
    return root


# -- one bench child with a deadline -------------------------------------------------------------
def bench(ns: argparse.Namespace, args: list[str], log: Path, deadline: float,
          label: str, epochs: int | None = None, watch: Path | None = None) -> str:
    """``clusterbench bench ARGS`` until it ends or ``deadline``: SIGTERM a grace before it, so
    that the checkpoint is saved within the budget, SIGKILL at it. "ended", "cut" or "failed
    (exit N)". Prints a progress line every 30 s (GPU) or 10 s."""
    trust = str(ns.trust) if ns.trust else "-"
    command = [sys.executable, "-m", "benchmarks.paper_budget", "--bench-child", trust, *args]
    env = dict(os.environ, WANDB_MODE="disabled")
    if ns.data_root is not None:
        env["CLUSTERBENCH_DATA"] = str(ns.data_root)
    every, last = (10.0 if ns.cpu else 30.0), 0.0
    with open(log, "a") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
        # a stop of this command (the call's own end) reaches the child, which saves and ends
        with stop_signals.forwarded_to(process, GRACE[ns.device]):
            while process.poll() is None:
                if cut_now(deadline - GRACE[ns.device], watch):
                    return stop(process, GRACE[ns.device])
                if time.monotonic() - last >= every:
                    last = time.monotonic()
                    done = epoch_reached(watch) if watch else None
                    at = f", epoch {done} of {epochs}" if done is not None and epochs else ""
                    print(f"paper_budget: {label}{at}, "
                          f"{max(0.0, deadline - time.monotonic()):.0f} s left", flush=True)
                time.sleep(0.2)
    return "ended" if process.returncode == 0 else f"failed (exit {process.returncode})"


def too_late(ns, deadline: float, starts: int = 1) -> bool:
    """Whether less is left than ``starts`` children need to start and save (not reached)."""
    return deadline - GRACE[ns.device] - time.monotonic() < starts * MIN_START[ns.device]


def cut_now(deadline: float, watch: Path | None) -> bool:
    """Whether the child's time is up (the tests replace it to cut at a known point)."""
    return time.monotonic() >= deadline


def stop(process: subprocess.Popen, grace: float) -> str:
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return "cut"


def epoch_reached(folder: Path) -> int | None:
    """The epoch in progress (1-based) of the unfinished run under ``folder``, from its
    ``metrics.csv``; None before its first row."""
    epochs = []
    for path in folder.glob("**/runs/*/seed-*.attempt/logs/metrics*.csv"):
        epochs += [int(float(row["epoch"])) for row in load_csv(path) if row.get("epoch")]
    return max(epochs) + 1 if epochs else None


def finished(folder: Path) -> dict[str, dict[str, Any]]:
    """The finished runs under ``folder`` by name (their ``result.json``)."""
    from benchmarks.suites.results import load_results

    return {r["run"]: r for r in load_results(folder)} if folder.is_dir() else {}


def outcome(ended: str, done: bool, cut_at: int | None, epochs: int | None) -> str:
    """A run's status from how its child ended."""
    if done:
        return "finished"
    if ended == "cut":
        return f"cut at epoch {cut_at or 0} of {epochs}" if epochs else "cut"
    return ended if ended != "ended" else "failed (no result)"


# -- the steps -------------------------------------------------------------------------------------
def step_transfusion(ns, deadline: float) -> dict[str, Any]:
    folder = ns.out / "transfusion"
    epochs = CPU_EPOCHS if ns.cpu else PAPER_EPOCHS
    common = ["--seeds", "0", "--no-progress", "--results", str(folder), "--checkpoint-every",
              "5"]  # each a checkpoint of ~110 MB
    common += (["--fast", "--accelerator", "cpu", "--set", f"trainer.max_epochs={epochs}"]
               if ns.cpu else [])
    runs = ("fashionmnist/pixels", "fashionmnist/5-blocks")  # the baseline first
    left = [run for run in runs if run not in finished(folder)]
    ended = "ended"
    if left and too_late(ns, deadline):
        ended = "not reached"
    elif left:  # one child for both: the imports once
        ended = bench(ns, ["transfusion_fusion_paper", "--runs", *left, *common],
                      ns.out / "transfusion.log", deadline,
                      f"step 1/3 transfusion {', '.join(left)}", epochs, folder)
    done, status = finished(folder), {}
    for run in runs:  # in order: a cut stops the first unfinished one, a failure goes on
        cut_before = ended == "cut" and any(s != "finished" for s in status.values())
        n = None if run.endswith("pixels") else epochs
        status[run] = ("finished" if run in done else "not reached" if cut_before
                       else outcome(ended, False, epoch_reached(folder), n))
    return {"runs": status, "folder": "transfusion"}


def step_tensorized(ns, deadline: float) -> dict[str, Any]:
    from benchmarks.infra.atomic import write_atomic
    from benchmarks.suites.suite_file import read_suite_file

    _, raw = read_suite_file("tensorized")
    fashion = (raw.get("settings") or {}).get("tvae_fashion")
    if not fashion:
        return {"runs": {}, "status": "skipped: the tensorized suite has no Fashion-MNIST rows"}
    # Figure 10's part alone: every other part null, no table datasets; its own suite name
    others = ("tvae", "underestimated", "tcl", "trbm")
    settings = {**raw["settings"], **dict.fromkeys(others), "datasets": [],
                "workers": 1 if ns.cpu else min(5, os.cpu_count() or 1)}
    fast = raw.get("fast") or {}
    fast = {**fast, "settings": {**{k: v for k, v in fast.get("settings", {}).items()
                                    if k not in others}, "datasets": [], "workers": 1}}
    suite = {**raw, "name": "tensorized_figure10", "settings": settings, "fast": fast,
             "description": "The tensorized suite's Figure 10 part alone (VAE vs TVAE)"}
    path = ns.out / "tensorized_figure10.yaml"
    write_atomic(path, json.dumps(suite, indent=1))  # JSON is YAML
    folder = ns.out / "tensorized"
    name = "tensorized_figure10" + ("-fast" if ns.cpu else "")
    if (folder / name / "result.json").is_file():
        return {"runs": {"figure 10": "finished"}, "folder": f"tensorized/{name}"}
    if too_late(ns, deadline):
        return {"runs": {"figure 10": "not reached"}}
    ended = bench(ns, [str(path), "--results", str(folder), *(["--fast"] if ns.cpu else [])],
                  ns.out / "tensorized.log", deadline, "step 2/3 tensorized figure 10")
    done = (folder / name / "result.json").is_file()
    status = outcome(ended, done, None, None)
    if ended == "cut":
        status += " (an experiment suite keeps nothing until it ends: it starts again)"
    return {"runs": {"figure 10": status}, "folder": f"tensorized/{name}"}


def simclr_runs() -> list[str]:
    from benchmarks.suites.suite_file import read_suite_file

    _, raw = read_suite_file("fashion_cpu")
    return [r["name"] for r in raw["runs"] if r.get("method") == "simclr"]


def step_simclr(ns, deadline: float, earlier: dict[str, Any]) -> dict[str, Any]:
    runs = simclr_runs()

    def args(chosen: list[str], folder: Path, epochs: int) -> list[str]:
        return ["fashion_cpu", "--runs", *chosen, "--seeds", "0", "--no-progress",
                *(["--fast"] if ns.cpu else []), "--results", str(folder), "--set",
                f"trainer.accelerator={'cpu' if ns.cpu else 'cuda'}", "--set",
                f"trainer.max_epochs={epochs}"]

    epochs, timed = earlier.get("epochs"), {}  # a cut step keeps its epochs: its checkpoints
    if epochs is None:  # one measured epoch of the first loss
        if too_late(ns, deadline, 2):
            return {"runs": dict.fromkeys(runs, "not reached")}
        bench(ns, args(runs[:1], ns.out / "simclr-epoch", 1), ns.out / "simclr.log", deadline,
              "step 3/3 simclr: one epoch to time")
        measured = finished(ns.out / "simclr-epoch").get(runs[0])
        if measured is None:
            return {"runs": dict.fromkeys(runs, "not reached (the timed epoch did not finish)")}
        epoch_s = measured["train_seconds"] / max(1, measured["epochs"])
        other_s = measured["wall_seconds"] - measured["train_seconds"]
        left = deadline - time.monotonic() - GRACE[ns.device] - len(runs) * other_s
        epochs = max(1, min(MAX_SIMCLR_EPOCHS[ns.device], int(left / (len(runs) * epoch_s))))
        timed = {"epoch_seconds": round(epoch_s, 2), "other_seconds": round(other_s, 1)}
    folder, done = ns.out / "simclr", finished(ns.out / "simclr")
    if not all(run in done for run in runs) and too_late(ns, deadline):
        return {"runs": dict.fromkeys(runs, "not reached"), "epochs": epochs, **timed}
    ended = "ended" if all(run in done for run in runs) else bench(
        ns, args(runs, folder, epochs), ns.out / "simclr.log", deadline, "step 3/3 simclr",
        epochs, folder)
    done, status = finished(folder), {}
    for run in runs:  # in the suite's order: the first unfinished one is the one cut
        first = all(s == "finished" for s in status.values())
        status[run] = ("finished" if run in done else "not reached" if not first
                       else outcome(ended, False, epoch_reached(folder), epochs))
    return {"runs": status, "folder": "simclr", "epochs": epochs, **timed}


# -- the record and the page (benchmarks.paper_budget_page draws it) -------------------------------
def save(ns, record: dict[str, Any]) -> None:
    from benchmarks.infra.atomic import write_atomic

    write_atomic(ns.out / RECORD, json.dumps(record, indent=2, default=str))
    page = render(record, ns.out, next_command(ns), {key: TITLES[key] for key in STEPS})
    ns.page.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(ns.page, page)
    write_atomic(ns.out / ns.page.name, page)  # the copy that comes back with the folder


def next_command(ns) -> str:
    """Every step: the finished ones are found finished and skipped in a moment."""
    flags = ["--resume-from results/paper_budget-previous"]
    flags += ["--cpu"] if ns.cpu else []
    flags += [f"--data {ns.data}"] if ns.data is not None else []
    return "python -m benchmarks.paper_budget " + " ".join(flags)


def step_status(states: list[str]) -> str:
    """A step's status from its runs': finished, the cut or failed run's, or not reached."""
    if states and all(s == "finished" for s in states):
        return "finished"
    stopped = [s for s in states if s not in ("finished", "not reached")]
    if stopped:
        return stopped[0]
    done = states.count("finished")
    return "not reached" + (f" ({done} of {len(states)} runs finished)" if done else "")


def run_plan(ns) -> dict[str, Any]:
    start = ns.started
    deadline = start + ns.budget
    ns.out.mkdir(parents=True, exist_ok=True)
    if ns.resume_from is not None:
        take_over(ns.resume_from, ns.out)
    record_path = ns.out / RECORD
    record = load_json(record_path) if record_path.is_file() else {"calls": []}
    ns.trust = rehearsal_data(ns.out) if ns.cpu and ns.data is None else None
    ns.data_root = ns.data or ns.trust
    call = {"started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "device": "CPU (rehearsal at tiny sizes)" if ns.cpu else ns.gpu_name,
            "budget": ns.budget, "rehearsal": ns.cpu,
            "data": "GENERATED tiny files" if ns.trust else "real (the usual lookup)"
            if ns.data is None else "real (--data)"}
    record["calls"].append(call)
    steps = record.setdefault("steps", {})
    for key in STEPS:
        steps.setdefault(key, {"title": TITLES[key], "runs": {}, "status": "not reached"})
    for key in ns.steps:
        begun = time.monotonic()
        print(f"paper_budget: step {STEPS.index(key) + 1}/3 {key}, "
              f"{max(0.0, deadline - begun):.0f} s left", flush=True)
        if key == "transfusion":
            result = step_transfusion(ns, deadline)
        elif key == "tensorized":
            result = step_tensorized(ns, deadline)
        else:
            result = step_simclr(ns, deadline, steps[key])
        result.setdefault("status", step_status(list(result["runs"].values())))
        if result["status"].startswith("failed"):
            result["log_tail"] = (ns.out / f"{key}.log").read_text(errors="replace")[-1500:]
        steps[key].update(result, seconds=round(steps[key].get("seconds", 0)
                                                + time.monotonic() - begun, 1),
                          device=call["device"] if key != "tensorized" else "CPU")
        call["seconds"] = round(time.monotonic() - start, 1)
        save(ns, record)
    return record


def bench_child(argv: list[str]) -> int:
    """In the child: trust the rehearsal's generated files (their md5 sums), then ``bench``."""
    trust, args = argv[0], argv[1:]
    if trust != "-":
        from datamodules.sample_files import generated_checksums

        for cls, attr, value in generated_checksums(Path(trust)):
            setattr(cls, attr, value)
    from benchmarks.cli import main as cli_main

    return cli_main(["bench", *args])


def main(argv: list[str] | None = None) -> int:
    """The plan (or, with ``--bench-child``, one of its ``bench`` children). A stop signal ends
    it and its child, which saves its checkpoint, in one line and exit status 128 + the
    signal's number; ``--resume-from`` the same ``--out`` goes on."""
    started = time.monotonic()  # the budget counts from here: imports are part of the call
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--bench-child"]:
        return bench_child(argv[1:])
    with stop_signals.stop_handlers():
        try:
            return run_call(argv, started)
        except KeyboardInterrupt as err:
            signum = stop_signals.received() or getattr(err, "signum", signal.SIGINT)
            detail = str(err)
        line = stop_signals.stopped_line(signum, detail, prog="paper_budget")
        print(line.replace("the same command continues", "the same command with --resume-from "
                           "its --out goes on"), file=sys.stderr, flush=True)
        return stop_signals.exit_status(signum)


def run_call(argv: list[str], started: float) -> int:
    try:
        ns = parse(argv)
        ns.started = started
        if not ns.cpu:
            import torch

            if not torch.cuda.is_available():
                raise ConfigError("no CUDA device here; accepted: a GPU machine, or --cpu to "
                                  "rehearse on the CPU")
            ns.gpu_name = torch.cuda.get_device_name(0)
        record = run_plan(ns)
    except ConfigError as err:
        print(f"clusterbench: error: {err}", file=sys.stderr)
        return 2
    left = [k for k, s in record["steps"].items() if s["status"] != "finished"]
    print(f"paper_budget: {ns.out / RECORD}; page {ns.page}"
          + (f"; still to run: {', '.join(left)}" if left else "; every step finished"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
