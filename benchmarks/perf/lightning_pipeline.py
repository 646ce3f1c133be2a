"""clusterbench's training step as the training-throughput benchmark
(:mod:`benchmarks.perf.train_throughput`) times it: the runner's Trainer, which cannot hand
control back between two of its steps, fits in a thread of its own that a callback
(:class:`Pace`) holds between the steps the benchmark asks for (:class:`LightningPipeline`; a
suite's run as the runner builds it, :class:`SuiteRunPipeline`).
"""

from __future__ import annotations

import tempfile
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import lightning.pytorch as pl
import torch

from benchmarks.perf.instruments import dispatch_modes, instrumented
from benchmarks.perf.train_cases import (
    Case,
    architecture,
    datamodule,
    simclr_model,
    suite_device,
    suite_model_and_data,
)
from benchmarks.perf.train_pipelines import (
    Pipeline,
    Span,
    compile_model,
    compile_status,
    optimizer_signature,
)


class Pace(pl.Callback):
    """Holds a Trainer between steps: the fit waits at its start, and after ``left`` more
    training steps, until :meth:`LightningPipeline.run` allows more. Between two pauses the
    stepping thread's host time is measured and the run's ``mode`` (a counter) is active."""

    def __init__(self) -> None:
        self.go, self.paused = threading.Semaphore(0), threading.Semaphore(0)
        self.left, self.mode, self.stop = 0, None, False
        self.context, self.span, self.total_steps = None, None, 0
        self.host_start, self.modes_start = 0.0, 0

    def on_train_start(self, trainer, pl_module) -> None:
        self.total_steps = int(trainer.estimated_stepping_batches)
        self.pause(trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.left -= 1
        if self.left <= 0:
            self.pause(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self.end_span()

    def end_span(self) -> None:
        if self.context is not None:
            self.context.__exit__(None, None, None)
            self.context = None
            self.span = Span(time.thread_time() - self.host_start,
                             max(self.modes_start, dispatch_modes()))

    def pause(self, trainer) -> None:
        self.end_span()
        self.paused.release()
        self.go.acquire()
        if self.stop:
            trainer.should_stop = True
            return
        self.modes_start = dispatch_modes()
        self.context = instrumented(self.mode) if self.mode is not None else nullcontext()
        self.context.__enter__()
        self.host_start = time.thread_time()


class LightningPipeline(Pipeline):
    """clusterbench's step: the runner's Trainer, callbacks, datamodule and precision, in a
    thread of its own that trains only while :meth:`run` lets it."""

    def __init__(self, name: str, case: Case, device: torch.device, compiled: bool,
                 batches: int) -> None:
        from benchmarks.run.spec import RunSpec
        from benchmarks.run.trainer import RunOptions, build_trainer

        on_gpu = device.type == "cuda"
        self.name, self.case, self.device = name, case, device
        # one epoch of exactly the batches the runs take, and one to spare
        self.dm = datamodule(case, case.batch_size * (batches + 2) * 100 // 99)
        torch.manual_seed(0)
        self.model = simclr_model(case, channels_last=on_gpu)
        self.compile_status = compile_model(self.model, compiled, device)
        self.pace = Pace()
        # the speed settings are this benchmark's own (compile_model): the factory adds none
        run = RunSpec(name=name, method="simclr",
                      trainer={"accelerator": "gpu" if on_gpu else "cpu", "devices": 1,
                               "max_epochs": 1,
                               "precision": "bf16-mixed" if on_gpu else "32-true",
                               "limit_val_batches": 0})
        self.attach(build_trainer(run, "perf", self.model, options=RunOptions(fast_gpu=False),
                                  callbacks=[self.pace], explicit_interval=True,
                                  logger=False).trainer)

    def attach(self, trainer: pl.Trainer) -> None:
        """``trainer`` (its callbacks holding :attr:`pace`) fits in a thread of its own."""
        self.trainer = trainer
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._fit, name=f"fit: {self.name}", daemon=True)

    def _fit(self) -> None:
        try:
            self.trainer.fit(self.model, datamodule=self.dm)
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            self.error = err
        finally:
            self.pace.end_span()
            self.pace.paused.release()

    def start(self) -> None:
        self.thread.start()
        self._wait()

    def _wait(self) -> None:
        self.pace.paused.acquire()
        if self.error is not None:
            raise RuntimeError(f"{self.name}: the training failed") from self.error

    def run(self, steps: int, mode=None) -> Span:
        if not self.thread.is_alive():
            raise RuntimeError(f"{self.name}: the training has ended")
        self.pace.left, self.pace.mode, self.pace.span = steps, mode, None
        self.pace.go.release()
        self._wait()
        if self.pace.left > 0:
            raise RuntimeError(f"{self.name}: the data ran out {self.pace.left} steps early")
        return self.pace.span

    @property
    def total_steps(self) -> int:
        """The steps of the Trainer's fit: the length of its schedule."""
        return self.pace.total_steps

    @property
    def steps_per_epoch(self) -> float:
        """The schedule's steps an epoch, as :meth:`RepresentationModule.configure_optimizers`
        computes them."""
        return self.pace.total_steps / max(1, self.trainer.max_epochs or 1)

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return self.trainer.optimizers

    def signature(self) -> dict:
        config = self.trainer.lr_scheduler_configs[0]
        return optimizer_signature(self.trainer.optimizers[0], config.scheduler, config.interval)

    def architecture(self) -> str:
        return architecture(self.model.backbone)

    def data(self) -> str:
        return self.dm.source

    def close(self) -> None:
        if self.thread.is_alive():
            self.pace.stop = True
            self.pace.go.release()
            self.thread.join(timeout=60)


class SuiteRunPipeline(LightningPipeline):
    """clusterbench's step for a suite's run: the run's model and datamodule as the runner
    instantiates them (:func:`suite_model_and_data`) and the Trainer the runner's
    :func:`benchmarks.run.one.train` fits them with (:func:`benchmarks.run.one.run_trainer`:
    the run's Trainer settings, the runner's callbacks, the checkpoint saver, the CSV logger, in
    a temporary attempt folder; no progress bar, as a bench run whose output is not a terminal),
    :attr:`pace` after them. Its training stays within one epoch: ``batches`` more than an
    epoch holds is refused."""

    def __init__(self, name: str, case: Case, batches: int, generated: int | None = None
                 ) -> None:
        from benchmarks.run.curves import make_logger
        from benchmarks.run.one import run_trainer
        from benchmarks.run.trainer import RunOptions, trainer_settings

        self.name, self.case, self.device = name, case, suite_device(case)
        suite, run, seed, self.model, self.dm = suite_model_and_data(case, generated)
        epoch = len(self.dm.train_dataloader())
        if batches > epoch:
            raise ValueError(f"{case.name}: the pipeline takes {batches} steps, more than the "
                             f"run's first epoch of {epoch}; fewer --windows or --steps (an "
                             "epoch's end validates, which is not the step)")
        self.folder = tempfile.TemporaryDirectory(prefix="train_throughput.")
        attempt = Path(self.folder.name)
        options = RunOptions(progress=False)
        self.pace = Pace()
        logger = make_logger("csv", attempt, suite.settings, run, seed, {}, options.wandb)
        built, _ = run_trainer(self.model, run, seed, attempt, trainer_settings(run, options),
                               options, logger, callbacks=[self.pace])
        self.compile_status = compile_status(built.compiled)
        self.attach(built.trainer)

    def close(self) -> None:
        super().close()
        self.folder.cleanup()

