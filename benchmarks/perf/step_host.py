"""A small model's training step, where the host sets the pace: TransFusion's standalone blocks.

The standalone TransFusion of the paper's section 5.1 (Liu et al., "TransFusion: Contrastive
Learning with Attention Layers", a submission under double-blind review, no arXiv id; 5 blocks
on Fashion-MNIST's 784 pixels, batch 256, Adam) does a few GFLOP a step: a GPU finishes it in
microseconds, and the step lasts as long as Python takes to issue it. Three ways to train the
same model on the same GENERATED images (uniform random ``uint8`` of Fashion-MNIST's shape;
pixel content does not change the cost), timed side by side in one run:

- ``clusterbench``: the step as the suite runner trains it: the Lightning Trainer with the
  runner's callbacks and a CSV logger, the method's training step, optimiser and schedule, the
  run's precision, the training images on the device (``data.on_device``, as the suite keeps
  them).
- ``before``: the same with the two host costs the step no longer has: ``self.log`` in every
  step (Lightning's bookkeeping, although it writes a step's values only every
  ``log_every_n_steps`` steps) and a second pass through the blocks for the online probe.
- ``bare loop``: the model's loss, the online probe, backward and Adam in a plain PyTorch loop
  over batches already on the device: what Lightning and the runner cost.

For each: samples per second and host (Python thread) milliseconds per step, mean ± sample std
over its timed windows (``--rounds`` rounds of the three in turn, each round in another order
so that a machine whose speed drifts slows all three alike; ``--repeats`` windows each, after a
warm-up), and each pipeline's samples/s against clusterbench's. On a GPU the windows are timed
with CUDA events; on a CPU with the wall clock, at toy sizes (``--tiny``: 8 x 8 images, batch
16) where the arithmetic is negligible and the host's time is what is measured.

Usage::

    python -m benchmarks.perf.step_host          # Fashion-MNIST's shape, batch 256, on the GPU
    python -m benchmarks.perf.step_host --tiny   # seconds on a CPU
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from contextlib import contextmanager, nullcontext
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger

from benchmarks.perf.instruments import WindowTimer, peak_memory_mb, time_loop
from benchmarks.perf.throughput import GeneratedImagesDataModule, cpu_name
from benchmarks.perf.train_cases import endless
from benchmarks.perf.train_report import Timing, mean_std_cell

#: The suite's run (transfusion_fusion_paper, fashionmnist/5-blocks): the model's arguments.
MODEL = {"backbone": "flatten", "num_blocks": 5, "loss": "jsd_sq", "include_diagonal": False,
         "optimizer": "adam", "lr": 1.0e-4, "weight_decay": 0.0, "probe_lr": 1.0e-2}
PIPELINES = ("clusterbench", "before", "bare loop")


def datamodule(side: int, batch: int, n: int) -> GeneratedImagesDataModule:
    rng = np.random.default_rng(0)
    dm = GeneratedImagesDataModule(rng.integers(0, 256, (n, 1, side, side), dtype=np.uint8),
                                   rng.integers(0, 10, n), batch_size=batch, val_fraction=0.01,
                                   augmentation="none", n_views=1, on_device=True)
    dm.setup("fit")
    return dm


def model(side: int):
    from modules.methods.transfusion import TransFusion

    return TransFusion(num_classes=10, input_shape=(1, side, side), **MODEL)


@contextmanager
def as_before():
    """The training step as it was: every step logs its values, and the online probe's input
    goes through the blocks a second time."""
    from modules.methods.base import RepresentationModule
    from modules.methods.transfusion import TransFusion

    read, probe = RepresentationModule.step_values_read, TransFusion.probe_embedding
    RepresentationModule.step_values_read = lambda self, batch_idx: True
    TransFusion.probe_embedding = RepresentationModule.probe_embedding
    try:
        yield
    finally:
        RepresentationModule.step_values_read, TransFusion.probe_embedding = read, probe


def time_runner(side: int, batch: int, device: torch.device, warmup: int, steps: int,
                repeats: int) -> Timing:
    """The runner's Trainer, callbacks, logger and precision (no validation: only steps)."""
    from benchmarks.run.checkpoint import EpochCheckpoint
    from benchmarks.run.spec import RunSpec
    from benchmarks.run.trainer import RunOptions, build_trainer

    on_gpu = device.type == "cuda"
    dm = datamodule(side, batch, WindowTimer.images_needed(batch, warmup, steps, repeats))
    net = model(side)
    timer = WindowTimer(warmup, steps, repeats, batch, device)
    # the precision the runner's GPU default gives, set here as the only speed setting timed
    run = RunSpec(name="step_host", method="simclr",
                  trainer={"accelerator": "gpu" if on_gpu else "cpu", "devices": 1,
                           "max_epochs": 1, "precision": "bf16-mixed" if on_gpu else "32-true",
                           "log_every_n_steps": 50, "limit_val_batches": 0})
    with tempfile.TemporaryDirectory() as folder:
        trainer = build_trainer(run, "perf", net, options=RunOptions(fast_gpu=False),
                                callbacks=[EpochCheckpoint(Path(folder) / "c", every=10**6),
                                           timer],
                                logger=CSVLogger(folder, name="log"),
                                default_root_dir=folder).trainer
        if on_gpu:
            torch.cuda.reset_peak_memory_stats(device)
        trainer.fit(net, datamodule=dm)
    return Timing(timer.rates, timer.host, timer.counter.reads / steps, None,
                  peak_memory_mb(device))


def time_bare(side: int, batch: int, device: torch.device, warmup: int, steps: int,
              repeats: int) -> Timing:
    on_gpu = device.type == "cuda"
    dm = datamodule(side, batch, batch * 4)
    net = model(side).to(device)
    optimizer = torch.optim.Adam([p for p in net.parameters() if p.requires_grad],
                                 lr=MODEL["lr"])

    def step(x, y):
        views = dm.make_views(x)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=on_gpu):
            features = net.backbone(net._backbone_input(torch.cat(views)))
            loss = net.objective(features, len(views), y)
            with torch.no_grad():
                probe_input = net.probe_embedding(features, len(y))
            loss = loss + F.cross_entropy(net.online_probe(probe_input), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    # the batches already on the device, as the runner's are (data.on_device)
    held = [(x.to(device), y.to(device)) for x, y in dm.train_dataloader()]
    if on_gpu:
        torch.cuda.reset_peak_memory_stats(device)
    rates, host, reads = time_loop(step, endless(held), batch, device, warmup, steps, repeats,
                                   optimizer)
    return Timing(rates, host, reads, None, peak_memory_mb(device))


def table(results: dict[str, Timing]) -> str:
    ours = statistics.fmean(results["clusterbench"].samples_per_second)
    lines = ["| pipeline | samples/s | vs clusterbench | host ms/step | host reads/step |",
             "|---|---|---|---|---|"]
    for pipeline, t in results.items():
        rate = statistics.fmean(t.samples_per_second)
        ratio = "1" if pipeline == "clusterbench" else f"{ours / rate:.2f}x"
        lines.append(f"| {pipeline} | {mean_std_cell(t.samples_per_second)} | {ratio} | "
                     f"{mean_std_cell(t.host_ms_per_step)} | {t.reads_per_step:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true",
                        help="toy sizes (8 x 8 images, batch 16): the host's time in seconds")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first")
    parser.add_argument("--steps", type=int, default=None, help="steps per timed window")
    parser.add_argument("--repeats", type=int, default=2,
                        help="timed windows per pipeline and round")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of every pipeline, each round in another order")
    parser.add_argument("--output", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    tiny = args.tiny or device.type == "cpu"
    side, batch = (8, 16) if tiny else (28, 256)
    warmup = args.warmup if args.warmup is not None else (5 if tiny else 20)
    steps = args.steps or (40 if tiny else 100)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    start = time.perf_counter()
    runs: dict[str, list[Timing]] = {p: [] for p in PIPELINES}
    for round_ in range(args.rounds):  # each round in another order: a drifting machine
        turn = round_ % len(PIPELINES)
        for pipeline in PIPELINES[turn:] + PIPELINES[:turn]:  # slows all alike
            torch.manual_seed(0)
            if pipeline == "bare loop":
                runs[pipeline].append(time_bare(side, batch, device, warmup, steps,
                                                args.repeats))
                continue
            with as_before() if pipeline == "before" else nullcontext():
                runs[pipeline].append(time_runner(side, batch, device, warmup, steps,
                                                  args.repeats))
    results = {p: Timing([r for t in ts for r in t.samples_per_second],
                         [h for t in ts for h in t.host_ms_per_step],
                         statistics.fmean(t.reads_per_step for t in ts), None,
                         max((t.peak_memory_mb for t in ts if t.peak_memory_mb), default=None))
               for p, ts in runs.items()}
    machine = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    case = (f"TransFusion standalone, {MODEL['num_blocks']} blocks, batch {batch}, "
            f"1x{side}x{side}")
    header = (f"Machine: {machine} ({platform.machine()}, {torch.get_num_threads()} threads); "
              f"torch {torch.__version__}; {case}; data generated (uniform random uint8); "
              f"{args.rounds} rounds of the pipelines in turn, each {args.repeats} windows of "
              f"{steps} steps after {warmup} warm-up steps; mean ± sample std over the "
              f"windows; {time.perf_counter() - start:.0f} s in all")
    print(header)
    print(table(results))
    record = {"machine": machine, "device": device.type, "torch": torch.__version__,
              "threads": torch.get_num_threads(), "case": case, "repeats": args.repeats,
              "rounds": args.rounds,
              "steps": steps, "warmup": warmup, "data": "generated",
              "results": {p: asdict(t) for p, t in results.items()}}
    if args.output:
        from benchmarks.infra.atomic import write_atomic

        write_atomic(args.output, json.dumps(record, indent=2))
    return record


if __name__ == "__main__":
    main()
