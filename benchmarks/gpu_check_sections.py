"""The sections of the GPU acceptance check (:mod:`benchmarks.gpu_check`), each run in a child
process of its own (``--section NAME``): the machine, the training throughput, the correctness
of the GPU defaults, the evaluation protocols' seconds and one search trial's memory; and the
data every section that trains reads (GENERATED CIFAR-10/100 and TinyImageNet files in the real
on-disk formats, the real Fashion-MNIST where its files are found).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

#: What a section, or one of its figures, says where only a GPU can answer.
NEEDS_CUDA = "needs CUDA"


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


#: The SimCLR cases start only within this many seconds of the section's start. Its defaults
#: on a GPU: five pipelines a case, each 8 warm-up steps, 3 for its peak, 16 counted and 5
#: timed windows of 16 (107 steps); with the first run's rates (ResNet18: 2e4 to 3e4
#: samples/s at 32 px, 8e3 at 64 px; ResNet50: 5e3 to 7e3) about 15 to 20 s of steps a case,
#: and compilation (inductor: 17 s for ResNet18 in the correctness section, a second model of
#: the same graph from its cache) and the Trainers' starts 25 to 50 s: about 160 s for the
#: three cases, then 25 s for the small model. A case not started by then is marked so; the
#: cases finished are saved as they finish.
THROUGHPUT_CASES_WITHIN = 150


def section_throughput(ctx: argparse.Namespace) -> dict[str, Any]:
    import torch

    from benchmarks.perf import step_host, train_throughput
    from benchmarks.perf.train_report import Timing, table

    device = torch.device("cuda" if ctx.cuda else "cpu")
    out: dict[str, Any] = {"note": "torch.compile (the GPU default) is the headline, eager "
                           "beside it" if ctx.cuda else "compiled with dynamo's eager backend "
                           "(CPU rehearsal)"}

    def keep(record: dict[str, Any]) -> None:
        timings = {case: {p: Timing(**t) for p, t in rows.items()}
                   for case, rows in record["results"].items()}
        out.update(record=record, table=table(timings, device))
        ctx.save(out)

    argv = (["--seconds", str(THROUGHPUT_CASES_WITHIN)] if ctx.cuda
            else ["--tiny", "--device", "cpu"])
    record = train_throughput.main(argv, on_case=keep)
    keep(record)
    small = step_host.main(["--rounds", "3", "--repeats", "2", "--warmup", "20", "--steps", "50"]
                           if ctx.cuda else ["--tiny", "--rounds", "1", "--repeats", "2",
                                             "--warmup", "2", "--steps", "3"])
    out.update(small=small, small_table=step_host.table(
        {p: Timing(**t) for p, t in small["results"].items()}),
        failures=record["failures"])
    return out


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

    from benchmarks.perf.train_cases import datamodule, endless, simclr_model

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

    from benchmarks.perf.train_cases import Case

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


def data_marker(root: Path) -> Path:
    """The file ``prepare_data`` writes last in ``root``: what Fashion-MNIST it holds."""
    return root / ".written"


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
    marker = data_marker(root)
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

    real_fashion = "generated" not in data_marker(root).read_text()
    for cls, attr, value in generated_checksums(root, fashion=not real_fashion):
        setattr(cls, attr, value)


def section_trial_memory(ctx: argparse.Namespace) -> dict[str, Any]:
    from dataclasses import replace

    import torch

    from benchmarks.run.one import instantiate
    from benchmarks.run.trainer import RunOptions, build_trainer
    from benchmarks.suites.config import load_suite
    from benchmarks.suites.suite_file import suite_kind, suites
    from tune.memory import estimate_trial_memory

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
        if suite.search is None or not (suite.search.gpus_per_trial
                                        or suite.search.gpus_per_trial_for):
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
                # a trial's Trainer on one GPU, eager: compiling every model would take minutes
                trainer = build_trainer(run, "trial", model, options=RunOptions(
                    accelerator="gpu", devices=1, compile=False), max_epochs=1,
                    limit_train_batches=3, limit_val_batches=0, logger=False).trainer
                trainer.fit(model, datamodule=dm)
                peak, error = torch.cuda.max_memory_allocated(), None
            except Exception as err:
                peak, error = None, f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
            gpus = suite.search.gpus_for(run)
            share = gpus * total
            out["rows"].append({
                "suite": name, "run": run.name, "backbone": key[1], "dataset": key[2],
                "batch": key[3], "peak_gib": peak / 2**30 if peak else None,
                "estimate_gib": estimate_trial_memory(run)["gib"],
                "gpus_per_trial": gpus, "share_gib": share / 2**30,
                "share_of_80gib": gpus * 80,
                "fits": None if peak is None else peak <= share, "error": error})
            ctx.save(out)
            del dm, model
    return out
