"""The GPU acceptance check: one command that answers what clusterbench does on a GPU.

Each section runs in its own process, in order of value, within the time left of ``--budget``
seconds; after each one the results so far are written to ``gpu_check.json`` and to a Markdown
page ready to commit as ``docs/results/gpu-<device>.md``, so a command cut off at any point
keeps every section it finished (a section cut at its own limit is marked so).

1. ``machine``: device, memory, driver, CUDA, cuDNN, NCCL, torch, bf16 and TF32 support.
2. ``throughput``: :mod:`benchmarks.perf.train_throughput`'s GPU cases (clusterbench, the bare
   loop, the anchors' pipeline).
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

Usage::

    python -m benchmarks.gpu_check --output results/gpu_check            # on a GPU machine
    python -m benchmarks.gpu_check --cpu --sections machine correctness   # rehearsal
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

SECTIONS = ("machine", "throughput", "protocols", "correctness", "suites", "trial_memory",
            "fashion_paper")
#: The sections whose seconds are the result: run before the background training starts.
TIMED = ("machine", "throughput", "protocols")
#: Each section's own limit in seconds on a GPU (on the CPU rehearsal: a quarter); never more
#: than what is left of the budget.
LIMITS = {"machine": 30, "throughput": 150, "correctness": 120, "protocols": 90,
          "suites": 250, "trial_memory": 60, "fashion_paper": 600}
NEEDS_CUDA = "needs CUDA"
#: One suite's ``--fast`` run at most (seconds).
SUITE_LIMIT = 240


# -- the sections (each runs in a child process: ``--section NAME``) ---------------------------
def section_machine(ctx: argparse.Namespace) -> dict[str, Any]:
    import torch

    from benchmarks.perf.throughput import cpu_name

    info: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                            "cpu": cpu_name(), "cpu_cores": os.cpu_count()}
    if not ctx.cuda:
        return info | {k: NEEDS_CUDA for k in ("device", "memory_gib", "capability", "driver",
                                               "cuda", "cudnn", "nccl", "bf16", "tf32")}
    props = torch.cuda.get_device_properties(0)
    try:
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        driver = subprocess.run(query, capture_output=True, text=True,
                                timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError) as err:
        driver = f"unknown ({err})"
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    except (AttributeError, RuntimeError) as err:
        nccl = f"unknown ({err})"
    return info | {"device": props.name, "memory_gib": round(props.total_memory / 2**30, 1),
                   "capability": f"{props.major}.{props.minor}",
                   "multiprocessors": props.multi_processor_count, "driver": driver,
                   "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                   "nccl": nccl, "bf16": torch.cuda.is_bf16_supported(),
                   "tf32": props.major >= 8}


def section_throughput(ctx: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.perf import train_throughput

    argv = (["--repeats", "2", "--warmup", "10", "--steps", "40"] if ctx.cuda
            else ["--tiny", "--device", "cpu", "--repeats", "2", "--warmup", "1", "--steps", "2"])
    record = train_throughput.main(argv)
    timings = {case: {pipeline: train_throughput.Timing(**t) for pipeline, t in rows.items()}
               for case, rows in record["results"].items()}
    import torch

    device = torch.device("cuda" if ctx.cuda else "cpu")
    return {"record": record, "table": train_throughput.table(timings, device),
            "note": ("without torch.compile (the compiled step's speed is in the correctness "
                     "section)")}


#: The correctness tolerances, stated and justified on the page.
TOLERANCE = {
    "first_step": 0.01,
    "every_step": 0.05,
    "why": ("bf16 keeps 8 significant bits (a relative rounding of 2^-9, about 0.2%, per "
            "operation); at the first step the weights are the same, so the losses differ only "
            "by the rounding carried through the network and the loss, which averages it over "
            "all 2B x 2B logits: 1% leaves five times that. Each later step starts from weights "
            "the earlier steps' rounding moved, and SGD with momentum carries the difference on: "
            "5% bounds 20 steps of that while catching a wrong graph, dtype or memory format, "
            "which change the loss by far more (a different model or batch moves it by tens "
            "of percent)."),
}


def simclr_trajectory(case, fast: bool, steps: int, compile_model: bool, device) -> dict:
    """SimCLR losses over ``steps`` SGD steps from seed 0 on the same generated images and the
    same views: eager float32 (TF32 off) or bf16 autocast + channels-last (+ torch.compile)."""
    import torch

    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = fast
    try:
        return _trajectory(case, fast, steps, compile_model, device)
    finally:  # the later checks run at the process's defaults
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def _trajectory(case, fast: bool, steps: int, compile_model: bool, device) -> dict:
    import torch

    from benchmarks.perf.train_throughput import datamodule, endless, simclr_model

    torch.manual_seed(0)
    model = simclr_model(case, channels_last=fast).to(device)
    dm = datamodule(case, case.batch_size * 4)
    compiled = "off"
    if compile_model:
        try:
            model.backbone = torch.compile(model.backbone)
            compiled = "on"
        except Exception as err:  # recorded, never hidden
            compiled = f"failed ({type(err).__name__}: {str(err).splitlines()[0][:200]})"
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(1)  # the views' randomness, the same for both
    losses, seconds = [], []
    batches = endless(dm.train_dataloader())
    for _ in range(steps):
        x, y = next(batches)
        x, y = x.to(device), y.to(device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        views = dm.make_views(x)  # outside autocast, as the runner augments the batch
        try:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=fast):
                features = model.backbone(model._backbone_input(torch.cat(views)))
                loss = model.objective(features.float(), len(views), y)
            loss.backward()
        except Exception as err:
            if compiled != "on":
                raise
            compiled = f"failed ({type(err).__name__}: {str(err).splitlines()[0][:200]})"
            model.backbone = model.backbone._orig_mod
            optimizer.zero_grad(set_to_none=True)
            continue
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        seconds.append(time.perf_counter() - start)
    return {"losses": losses, "seconds": seconds, "compile": compiled}


def check_probe(device) -> dict[str, Any]:
    """The CUDA-graph probe against the same steps run eagerly with the same device-tensor
    learning rates (the same kernels in the same order: the weights must agree to float32's
    last bits), and against the plain loop with Python-float rates (other rounding of each
    update, which the probe's large steps on unnormalised features amplify: the accuracy must
    agree, the weights need not)."""
    from benchmarks.perf.eval_speed import generated_features
    from benchmarks.protocols import linear_probe as lp

    train_x, train_y, test_x, test_y = generated_features(0.2, dim=256)
    heads = {}
    for name in ("graph", "eager, tensor rates", "plain, float rates"):
        captured = {}

        def capture(state, chunk, name=name, captured=captured):
            if name != "graph":
                raise RuntimeError("eager on purpose")
            captured["graph"] = True
            return lp._capture(state, chunk)

        if name == "plain, float rates":
            w, b = lp.train_linear_head(train_x, train_y, 10, epochs=10, device=device,
                                        cuda_graph=False)
        else:
            original = lp._capture
            lp._capture = capture
            try:
                w, b = lp.train_linear_head(train_x, train_y, 10, epochs=10, device=device)
            finally:
                lp._capture = original
        acc = float(((test_x.to(device) @ w.T + b).argmax(1).cpu() == test_y).float().mean())
        heads[name] = {"weight": w.cpu(), "top1": acc, "captured": bool(captured)}
    exact = float((heads["graph"]["weight"] - heads["eager, tensor rates"]["weight"]).abs().max())
    loose = float((heads["graph"]["weight"] - heads["plain, float rates"]["weight"]).abs().max())
    top1 = {k: v["top1"] for k, v in heads.items()}
    return {"features": f"GENERATED {len(train_y):,} x {train_x.shape[1]}, 10 epochs",
            "top1": top1, "captured": heads["graph"]["captured"],
            "graph_vs_eager_max_weight_difference": exact,
            "graph_vs_float_rates_max_weight_difference": loose,
            "passed": heads["graph"]["captured"] and exact <= 1e-6
            and abs(top1["graph"] - top1["plain, float rates"]) <= 0.01,
            "tolerance": ("graph against the same eager steps: 1e-6 on each weight; against "
                          "float rates: 1 point of top-1")}


def check_svm_kmeans(device) -> dict[str, Any]:
    """The torch SVM and k-means on ``device`` against the same on the CPU."""
    from benchmarks.perf.eval_speed import generated_features
    from benchmarks.protocols import cluster_scores, svm_accuracy

    cuda = device.type == "cuda"
    train_x, train_y, test_x, test_y = generated_features(0.2 if cuda else 0.01,
                                                          dim=256 if cuda else 32)
    cpu = {"svm_top1": svm_accuracy(train_x, train_y, test_x, test_y, device="cpu"),
           **cluster_scores(test_x, test_y, device="cpu")}
    if not cuda:
        return {"cpu": cpu, "gpu": NEEDS_CUDA}
    gpu = {"svm_top1": svm_accuracy(train_x, train_y, test_x, test_y, device=device),
           **cluster_scores(test_x, test_y, device=device)}
    gaps = {k: abs(cpu[k] - gpu[k]) for k in cpu}
    return {"cpu": cpu, "gpu": gpu, "gaps": gaps, "passed": all(g <= 0.01 for g in gaps.values()),
            "tolerance": "0.01 on each score (float32 sums in another order)"}


def section_correctness(ctx: argparse.Namespace) -> dict[str, Any]:
    import torch

    from benchmarks.perf.train_throughput import Case

    device = torch.device("cuda" if ctx.cuda else "cpu")
    out: dict[str, Any] = {"tolerance": TOLERANCE}
    # 1. the GPU defaults against eager float32
    case = Case("resnet18", 256, 32) if ctx.cuda else Case("small_cnn", 16, 16, width=8)
    steps = 20 if ctx.cuda else 4
    eager = simclr_trajectory(case, fast=False, steps=steps, compile_model=False, device=device)
    fast = simclr_trajectory(case, fast=True, steps=steps, compile_model=ctx.cuda, device=device)
    n = min(len(eager["losses"]), len(fast["losses"]))
    gaps = [abs(a - b) / abs(a) for a, b in zip(eager["losses"][:n], fast["losses"][:n],
                                                    strict=True)]
    warm = max(1, steps // 4)  # compilation and cuDNN's autotuning happen in the first steps
    out["defaults"] = {
        "case": case.name + ("" if ctx.cuda else f" (width {case.width})"),
        "steps": steps, "eager_float32": eager["losses"], "bf16_channels_last": fast["losses"],
        "compile": fast["compile"] if ctx.cuda else NEEDS_CUDA,
        "first_step_gap": gaps[0] if gaps else None, "max_gap": max(gaps) if gaps else None,
        "passed": bool(gaps) and gaps[0] <= TOLERANCE["first_step"]
        and max(gaps) <= TOLERANCE["every_step"],
        "ms_per_step": {"eager_float32": 1000 * statistics.fmean(eager["seconds"][warm:]),
                        "bf16_channels_last" + ("_compiled" if ctx.cuda else ""):
                        1000 * statistics.fmean(fast["seconds"][warm:])},
        "first_step_s": {"eager_float32": eager["seconds"][0], "fast": fast["seconds"][0]},
    }
    ctx.save(out)
    # 2. the CUDA-graph linear probe against the same steps run eagerly, 3. SVM and k-means
    out["probe"] = check_probe(device) if ctx.cuda else NEEDS_CUDA
    ctx.save(out)
    out["svm_kmeans"] = check_svm_kmeans(device)
    out["failures"] = [k for k in ("defaults", "probe", "svm_kmeans")
                       if isinstance(out[k], dict) and out[k].get("passed") is False]
    return out


def section_protocols(ctx: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.perf import eval_speed

    scale, dim = (1.0, 2048) if ctx.cuda else (0.01, 64)
    result = eval_speed.run(scale=scale, dim=dim, device="cuda" if ctx.cuda else "cpu",
                            current_only=True, probe_epochs=100 if ctx.cuda else 2)
    return {"record": result, "table": eval_speed.table(result)}


def prepare_data(ctx: argparse.Namespace) -> tuple[Path, str]:
    """GENERATED CIFAR-10/100 and TinyImageNet files (big enough for a real batch) in
    ``<workdir>/data``, and the real Fashion-MNIST beside them when its files are found."""
    from datamodules.mnist import FashionMNISTDataModule
    from datamodules.sample_files import (
        write_cifar10,
        write_cifar100,
        write_mnist,
        write_tiny_imagenet,
    )

    root = ctx.workdir / "data"
    marker = root / ".written"
    fashion = "generated"
    real = [Path(ctx.data) / "FashionMNIST" / "raw"] if ctx.data else []
    real += [Path(f) for f in FashionMNISTDataModule.system_folders]
    found = next((f for f in real if f.is_dir() and len(list(f.glob("*idx*"))) >= 4), None)
    if found is not None:
        fashion = f"real ({found})"
    if not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        big = ctx.cuda  # a searched configuration's batch (512) needs that many images
        write_cifar10(root, per_batch=240 if big else 20)
        write_cifar100(root, n_train=1200 if big else 300)
        write_tiny_imagenet(root, per_class=3 if big else 2)
        write_mnist(root, "MNIST", seed=2)
        if found is None:
            write_mnist(root, "FashionMNIST", seed=3)
        else:
            (root / "FashionMNIST").mkdir()
            shutil.copytree(found, root / "FashionMNIST" / "raw")
        marker.write_text(fashion)
    return root, marker.read_text()


def trust_generated(root: Path) -> None:
    """This process's loaders expect the generated files' checksums (the checks still run)."""
    from datamodules.sample_files import generated_checksums

    real_fashion = "generated" not in (root / ".written").read_text()
    for cls, attr, value in generated_checksums(root, fashion=not real_fashion):
        setattr(cls, attr, value)


def fast_suite(ctx: argparse.Namespace, name: str) -> dict[str, Any]:
    """One suite's ``--fast`` run in this process (a child of the suites section)."""
    import torch

    from benchmarks.cli import main as cli_main
    from benchmarks.suites.config import suite_kind

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
    from benchmarks.suites.config import suites

    _, fashion = prepare_data(ctx)
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


def section_trial_memory(ctx: argparse.Namespace) -> dict[str, Any]:
    from dataclasses import replace

    import lightning.pytorch as pl
    import torch

    from benchmarks.run.one import apply_gpu_speed_settings, instantiate
    from benchmarks.suites.config import load_suite, suite_kind, suites

    if not ctx.cuda:
        return {"status": NEEDS_CUDA}
    root, _ = prepare_data(ctx)
    trust_generated(root)
    os.environ["CLUSTERBENCH_DATA"] = str(root)
    total = torch.cuda.get_device_properties(0).total_memory
    out: dict[str, Any] = {"rows": []}
    for name in sorted(suites()):
        if suite_kind(name) != "training":
            continue
        suite = load_suite(name)
        if suite.search is None or not suite.search.gpus_per_trial:
            continue
        seen = set()
        for run in suite.searched_runs():
            data = {**run.data, "data_dir": str(root)}
            key = (run.method, run.model.get("backbone"), run.dataset, data.get("batch_size"))
            if key in seen:
                continue
            seen.add(key)
            run = replace(run, data=data)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            try:
                dm, model = instantiate(run, seed=0)
                apply_gpu_speed_settings(model, {"cudnn_benchmark": True, "tf32": True,
                                                 "channels_last": True, "compile": False})
                trainer = pl.Trainer(accelerator="gpu", devices=1, max_epochs=1,
                                     limit_train_batches=3,
                                     precision="bf16-mixed", logger=False,
                                     enable_checkpointing=False, enable_progress_bar=False,
                                     enable_model_summary=False, limit_val_batches=0,
                                     num_sanity_val_steps=0)
                trainer.fit(model, datamodule=dm)
                peak, error = torch.cuda.max_memory_allocated(), None
            except Exception as err:
                peak, error = None, f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
            share = suite.search.gpus_per_trial * total
            out["rows"].append({
                "suite": name, "run": run.name, "backbone": key[1], "dataset": key[2],
                "batch": key[3], "peak_gib": peak / 2**30 if peak else None,
                "gpus_per_trial": suite.search.gpus_per_trial, "share_gib": share / 2**30,
                "share_of_80gib": suite.search.gpus_per_trial * 80,
                "fits": None if peak is None else peak <= share, "error": error})
            ctx.save(out)
            del dm, model
    return out


def fashion_paper_command(ctx: argparse.Namespace) -> list[str]:
    return [sys.executable, "-m", "benchmarks.cli", "bench", "transfusion_fusion_paper",
            "--runs", "fashionmnist/5-blocks", "fashionmnist/pixels", "--seeds", "0",
            "--no-progress", "--results", str(ctx.workdir / "fashion_paper")]


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


def device_slug(record: dict[str, Any]) -> str:
    machine = record["sections"].get("machine", {})
    device = machine.get("device", NEEDS_CUDA)
    if device == NEEDS_CUDA or not isinstance(device, str):
        return "cpu-rehearsal"
    return "-".join(device.lower().replace("nvidia", "").split()) or "gpu"


def last_line(text: str) -> str:
    """The last line of a log that is not a warning or a traceback's frame, shortened."""
    lines = [line.strip() for line in text.splitlines() if line.strip()
             and "Warning" not in line and not line.startswith(("  ", "File "))]
    return lines[-1][:160].replace("|", "/") if lines else ""


def fmt(value: Any, spec: str = ".3g") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def render(record: dict[str, Any]) -> str:
    """The Markdown page of everything measured so far."""
    s = record["sections"]
    lines = [f"# GPU acceptance check: {record['title']}", "",
             f"`python -m benchmarks.gpu_check {' '.join(record['argv'])}`, {record['started']}; "
             f"{record['elapsed']:.0f} s of a {record['budget']:.0f} s budget. Every number below "
             "comes from this one run on this machine; GENERATED data is named so.", ""]
    if "machine" in s:
        m = s["machine"]
        lines += ["## Machine", "", "| | |", "|---|---|"]
        lines += [f"| {k} | {fmt(v)} |" for k, v in m.items() if k not in ("status",)]
        lines.append("")
    if "throughput" in s:
        t = s["throughput"]
        lines += ["## Training throughput", "", f"Status: {t['status']}, {t['seconds']} s; "
                  f"{t.get('note', '')}.", ""]
        if "table" in t:
            r = t["record"]
            lines += [f"Data generated (uniform random uint8); {r['repeats']} windows of "
                      f"{r['steps']} steps after {r['warmup']} warm-up steps; loader workers of "
                      f"the anchors' pipeline: {r['workers']}.", "", t["table"], ""]
    if "correctness" in s:
        c = s["correctness"]
        lines += ["## Correctness under the GPU defaults", "", f"Status: {c['status']}, "
                  f"{c['seconds']} s.", ""]
        if "defaults" in c:
            d = c["defaults"]
            lines += [f"**SimCLR, {d['case']}, seed 0, {d['steps']} SGD steps**: eager float32 "
                      f"(TF32 off) against bf16 autocast + channels-last + torch.compile "
                      f"(compile: {d['compile']}). First-step gap {fmt(d['first_step_gap'])}, "
                      f"largest gap {fmt(d['max_gap'])} (relative); tolerance "
                      f"{TOLERANCE['first_step']:.0%} at the first step and "
                      f"{TOLERANCE['every_step']:.0%} at every step: "
                      f"**{'passed' if d['passed'] else 'FAILED'}**. {TOLERANCE['why']}", "",
                      "| step | eager float32 | bf16 + channels-last |", "|---:|---:|---:|"]
            lines += [f"| {i} | {a:.4f} | {b:.4f} |" for i, (a, b) in
                      enumerate(zip(d["eager_float32"], d["bf16_channels_last"],
                                    strict=False))]
            lines += ["", "ms per step after the first quarter: "
                      + ", ".join(f"{k} {v:.1f}" for k, v in d["ms_per_step"].items())
                      + "; first step (compilation, autotuning): "
                      + ", ".join(f"{k} {v:.1f} s" for k, v in d["first_step_s"].items()), ""]
        if isinstance(c.get("probe"), dict) and "top1" not in c["probe"]:  # the first record
            p = c["probe"]
            lines += [f"**Linear probe, CUDA graphs against the float-rate loop** "
                      f"({p['features']}): top-1 {p['graph_top1']:.4f} / {p['plain_top1']:.4f}, "
                      f"largest weight difference {p['max_weight_difference']:.2e} (tolerance "
                      f"1e-4): **{'passed' if p['passed'] else 'FAILED'}**.", ""]
        elif isinstance(c.get("probe"), dict):
            p = c["probe"]
            lines += [f"**Linear probe, CUDA graphs** ({p['features']}; {p['tolerance']}): "
                      "top-1 " + ", ".join(f"{k} {v:.4f}" for k, v in p["top1"].items())
                      + "; largest weight difference, graph against the same steps eager "
                      f"{p['graph_vs_eager_max_weight_difference']:.2e}, against the float-rate "
                      f"loop {p['graph_vs_float_rates_max_weight_difference']:.2e}: "
                      f"**{'passed' if p['passed'] else 'FAILED'}**.", ""]
        elif "probe" in c:
            lines += [f"**Linear probe, CUDA graphs**: {c['probe']}.", ""]
        if "svm_kmeans" in c:
            k = c["svm_kmeans"]
            if isinstance(k["gpu"], dict):
                lines += [f"**Torch SVM and k-means, GPU against CPU** ({k['tolerance']}): "
                          + ", ".join(f"{n} {k['cpu'][n]:.4f} / {k['gpu'][n]:.4f}"
                                      for n in k["cpu"])
                          + f": **{'passed' if k['passed'] else 'FAILED'}**.", ""]
            else:
                lines += ["**Torch SVM and k-means, GPU against CPU**: CPU side ran ("
                          + ", ".join(f"{n} {v:.4f}" for n, v in k["cpu"].items())
                          + f"); GPU side {k['gpu']}.", ""]
    if "protocols" in s:
        p = s["protocols"]
        lines += ["## Evaluation protocols", "", f"Status: {p['status']}, {p['seconds']} s.", ""]
        if "table" in p:
            lines += [p["table"], ""]
    if "suites" in s:
        u = s["suites"]
        lines += ["## Every suite's `--fast` run", "", f"Status: {u['status']}, {u['seconds']} s; "
                  f"data: {u.get('data', '-')}; {u.get('jobs', 1)} suites at a time (their "
                  "seconds overlap); torch.compile in `smoke` only (the others eager, for "
                  "time).", "",
                  "| suite | result | s | peak MB |", "|---|---|---:|---:|"]
        for name, r in u.get("runs", {}).items():
            why = last_line(r.get("log_tail", "")) if r["status"] != "passed" else ""
            lines.append(f"| {name} | {r['status']}{': ' + why if why else ''} | "
                         f"{r['seconds']} | {fmt(r.get('peak_mb'))} |")
        lines.append("")
    if "trial_memory" in s:
        t = s["trial_memory"]
        lines += ["## One search trial's memory against its share of the card", "",
                  f"Status: {t['status']}, {t['seconds']} s. Three training steps at the run's "
                  "batch and image size, bf16, channels-last, generated images.", ""]
        if t.get("rows"):
            lines += ["| suite | configuration | batch | peak GiB | gpus_per_trial | share GiB "
                      "(this card) | share of an 80 GiB card | fits |", "|---|---|---:|---:|---:|"
                      "---:|---:|---|"]
            for r in t["rows"]:
                fits = r["error"] or ("yes" if r["fits"] else "**no**")
                lines.append(f"| {r['suite']} | {r['backbone']} on {r['dataset']} | "
                             f"{r['batch']} | {fmt(r['peak_gib'], '.2f')} | "
                             f"{r['gpus_per_trial']} | {r['share_gib']:.1f} | "
                             f"{r['share_of_80gib']:.0f} | {fits} |")
            lines.append("")
    if "fashion_paper" in s:
        f = s["fashion_paper"]
        lines += ["## Real Fashion-MNIST at the paper's budget", "",
                  f"Status: {f['status']}, {f['seconds']} s.", ""]
        if f.get("leaderboard"):
            lines += [f["leaderboard"], ""]
    tails = {**s, **{f"suites: {n}": r for n, r in s.get("suites", {}).get("runs", {}).items()},
             **{f"trial_memory: {r['run']}": {"log_tail": r["error"]}
                for r in s.get("trial_memory", {}).get("rows", []) if r.get("error")}}
    for name, r in tails.items():
        if r.get("log_tail"):
            lines += [f"<details><summary>{name}: last lines of its log</summary>", "",
                      "```", r["log_tail"], "```", "</details>", ""]
    return "\n".join(lines)


def portable(text: str) -> str:
    """``text`` without this machine's folders: every absolute path keeps its last part."""
    import re

    return re.sub(r"(?<![\w.:/])/(?:[\w.+\-]+/)+", ".../", text)


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
    scale = 1.0 if ctx.cuda else 0.5
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
            background = start_fashion_paper(ctx, record)
        print(f"gpu_check: {name} ({left:.0f} s left)", flush=True)
        ctx.limit = min(LIMITS[name] * scale, left)
        record["sections"][name] = child(ctx, ["--section", name],
                                         ctx.workdir / f"{name}.json", ctx.limit,
                                         ctx.workdir / f"{name}.log")
        if name == "machine":
            record["title"] = title if not ctx.cuda else record["sections"][name].get("device",
                                                                                      title)
        save_record(record, output)
    if "fashion_paper" in ctx.sections:
        if background is None:
            background = start_fashion_paper(ctx, record)
        record["sections"]["fashion_paper"] = finish_fashion_paper(ctx, background, deadline)
        save_record(record, output)
    return record


def start_fashion_paper(ctx: argparse.Namespace, record: dict[str, Any]):
    if not ctx.cuda:
        record["sections"]["fashion_paper"] = {"status": NEEDS_CUDA, "seconds": 0}
        return None
    root, fashion = prepare_data(ctx)
    env = dict(os.environ, CLUSTERBENCH_DATA=str(root), WANDB_MODE="disabled")
    log = open(ctx.workdir / "fashion_paper.log", "w")
    print("gpu_check: fashion_paper started in the background", flush=True)
    return (subprocess.Popen(fashion_paper_command(ctx), stdout=log, stderr=subprocess.STDOUT,
                             env=env, start_new_session=True), time.perf_counter(), fashion)


def finish_fashion_paper(ctx: argparse.Namespace, background, deadline: float) -> dict:
    if background is None:
        return {"status": NEEDS_CUDA, "seconds": 0}
    process, start, fashion = background
    try:
        code = process.wait(timeout=max(1.0, deadline - time.perf_counter()))
        status = "passed" if code == 0 else f"failed (exit {code})"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait()
        status = "cut at the budget's end"
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
    parser.add_argument("--budget", type=float, default=540.0,
                        help="seconds for the whole check (default 540)")
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
