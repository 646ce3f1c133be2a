"""Run a suite: every run for every seed, one result file each, then the leaderboard."""

from __future__ import annotations

import json
import shutil
import sys
import time
import traceback
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import yaml
from rich.console import Console

from benchmarks.atomic import write_atomic
from benchmarks.config import ConfigError, RunSpec, Suite
from benchmarks.environment import environment
from benchmarks.evaluate import evaluate_encoder, evaluate_layers
from benchmarks.leaderboard import display_scale, write_leaderboard

console = Console(stderr=True)
LOGGERS = ("csv", "wandb")


def suite_results_dir(suite: Suite, results_root: str | Path) -> Path:
    """``<root>/<suite>``; a ``--fast`` run goes to ``<root>/<suite>-fast`` so that a tiny budget
    never mixes with, or replaces, full-budget results."""
    return Path(results_root).resolve() / (suite.name + ("-fast" if suite.fast else ""))


def run_dir(suite_dir: Path, run: RunSpec, seed: int) -> Path:
    return suite_dir / "runs" / run.slug / f"seed-{seed}"


def make_logger(kind: str, directory: Path, suite: Suite, run: RunSpec, seed: int,
                config: dict[str, Any]):
    """A CSV logger (``<run>/logs/metrics.csv``), or Lightning's WandbLogger, offline when this
    machine has no W&B login (``WANDB_MODE`` is honoured as usual)."""
    from lightning.pytorch.loggers import CSVLogger, WandbLogger

    if kind == "csv":
        return CSVLogger(save_dir=directory, name="logs", version="")
    if kind == "wandb":
        return WandbLogger(project="clusterbench", group=suite.name, job_type=run.method,
                           name=f"{suite.name}/{run.name}/seed-{seed}", save_dir=str(directory),
                           offline=not wandb_logged_in(), config=config)
    raise ValueError(f"unknown logger {kind!r}; available: {', '.join(LOGGERS)}")


def wandb_logged_in() -> bool:
    import netrc
    import os

    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def instantiate(run: RunSpec, seed: int, model_kwargs: dict[str, Any] | None = None):
    """Seed everything, then build the run's datamodule and its model sized for that data;
    ``model_kwargs`` replaces the run's model arguments (the value check drops the weights)."""
    from datamodules import DATAMODULES
    from modules import METHODS

    pl.seed_everything(seed, workers=True, verbose=False)
    datamodule = DATAMODULES[run.dataset](**run.data_kwargs(), seed=seed)
    model = METHODS[run.method](num_classes=datamodule.num_classes,
                                input_shape=datamodule.input_shape,
                                **(run.model if model_kwargs is None else model_kwargs))
    return datamodule, model


def check_values(suite: Suite, only: list[str] | None = None) -> None:
    """Build every run's datamodule and model on the ``meta`` device (no memory, no data read,
    no weights downloaded) so that a bad *value*, e.g. a negative temperature, is refused before
    anything trains. A failure that is not a ValueError or TypeError is left to the run itself.

    Raises:
        ConfigError: naming the suite, the run and the bad value.
    """
    for run in suite.runs:
        if only and run.name not in only:
            continue
        try:
            with torch.device("meta"):
                instantiate(run, suite.seeds[0], {k: v for k, v in run.model.items()
                                                  if k != "backbone_weights"})
        except (ValueError, TypeError) as err:
            raise ConfigError(f"{suite.path}: run {run.name!r}: {err}") from err
        except Exception:  # noqa: BLE001 - not a bad value; the run will say what it is
            continue


def assignment_ari(model, datamodule) -> float:
    """ARI of the model's arg-min-loss assignment (eq. 2 of the cluster-specific models) of the
    test split against its labels."""
    from sklearn.metrics import adjusted_rand_score

    from benchmarks.protocols import extract_features

    clusters, labels = extract_features(model.assign, datamodule.test_dataloader())
    return float(adjusted_rand_score(labels.numpy(), clusters.long().numpy()))


def run_one(suite: Suite, run: RunSpec, seed: int, suite_dir: Path, logger: str = "csv",
            accelerator: str | None = None, progress: bool = True) -> dict[str, Any]:
    """Train (when the method trains), evaluate, and write ``result.json`` and ``config.yaml``.

    Everything is written into ``seed-N.attempt/`` first, which replaces ``seed-N/`` only once
    the result is complete: a crashing re-run leaves the earlier result, its config, logs and
    figures as they were (and its own logs in ``seed-N.attempt/`` to look at)."""
    final = run_dir(suite_dir, run, seed)
    directory = final.with_name(final.name + ".attempt")
    if directory.exists():  # what an earlier crashed attempt left
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    config = {"suite": suite.name, "suite_file": str(suite.path), "fast": suite.fast,
              "seed": seed, "headline": suite.headline, "plots": suite.plots, "run": asdict(run),
              "evaluation": suite.evaluation}
    write_atomic(directory / "config.yaml", yaml.safe_dump(config, sort_keys=False))

    # The command line's accelerator, when given, overrides the suite's.
    trainer_kwargs = {"max_epochs": 10, "accelerator": "auto", **run.trainer,
                      **({"accelerator": accelerator} if accelerator else {})}
    start = time.perf_counter()
    datamodule, model = instantiate(run, seed)
    trained_epochs, train_steps, online = 0, 0, {}
    if model.requires_training:
        from lightning.pytorch.callbacks import RichProgressBar

        trainer = pl.Trainer(**trainer_kwargs,
                             logger=make_logger(logger, directory, suite, run, seed, config),
                             callbacks=[RichProgressBar()] if progress else [],
                             enable_progress_bar=progress, enable_checkpointing=False,
                             enable_model_summary=False, default_root_dir=directory)
        trainer.fit(model, datamodule=datamodule)
        trained_epochs, train_steps = trainer.current_epoch, trainer.global_step
        online = {k: float(v) for k, v in trainer.callback_metrics.items()
                  if k.startswith("online_val")}
        if logger == "wandb":  # close the W&B run so the next seed starts its own
            trainer.logger.experiment.finish()
    else:
        datamodule.setup("fit")
    train_seconds = time.perf_counter() - start
    use_gpu = (torch.cuda.is_available()
               and trainer_kwargs["accelerator"] in ("auto", "gpu", "cuda"))
    model.to("cuda" if use_gpu else "cpu")
    metrics, notes, figure_bytes = evaluate_encoder(model.encode, datamodule, suite.evaluation,
                                                    seed)
    if hasattr(model, "assign"):  # a cluster-specific model: its own clustering of the test split
        metrics["assignment_ari"] = assignment_ari(model, datamodule)
    per_layer = evaluate_layers(model, datamodule, suite.evaluation, seed)
    for name, png in figure_bytes.items():
        write_atomic(directory / name, png)
    figures = list(figure_bytes)
    if run.searched:  # the search behind this row, in its report
        trials_png = Path(run.searched["directory"]) / "trials.png"
        if trials_png.is_file():
            write_atomic(directory / "search-trials.png", trials_png.read_bytes())
            figures.append("search-trials.png")
    if per_layer is not None:  # TransFusion's Tables 1-2: a t-SNE panel per layer
        from benchmarks.plots import layer_outputs, tsne_panels_png

        arrays, labels = layer_outputs(model, datamodule.test_dataloader())
        titles = [f"layer {r['layer']}: silhouette {r['silhouette']:.3f}" for r in per_layer]
        write_atomic(directory / "per-layer-tsne.png",
                     tsne_panels_png(arrays, labels, titles, seed=seed))
        figures.append("per-layer-tsne.png")
    metrics.update(online)
    env = environment()
    result = {
        "suite": suite.name, "run": run.name, "method": run.method, "dataset": run.dataset,
        "data_provenance": datamodule.provenance, "data_source": datamodule.source,
        "backbone": model.hparams.get("backbone", "none"),
        "seed": seed, "budget": "fast" if suite.fast else "full",
        "epochs": trained_epochs, "train_steps": train_steps,
        "batch_size": datamodule.batch_size, "split_sizes": datamodule.split_sizes(),
        "metrics": metrics, "notes": notes, "per_layer": per_layer, "figures": figures,
        "train_seconds": train_seconds, "wall_seconds": time.perf_counter() - start,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": "gpu" if use_gpu else "cpu",
        "search": run.searched,
        **env, "config": config,
    }
    write_atomic(directory / "result.json", json.dumps(result, indent=2, default=str))
    replace_directory(directory, final)
    return result


def replace_directory(new: Path, target: Path) -> None:
    """Put the finished ``new`` directory in ``target``'s place. The old one is renamed aside
    first and removed after, so ``target`` always holds one whole result."""
    old = target.with_name(target.name + ".replaced")
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        target.rename(old)
    new.rename(target)
    if old.exists():
        shutil.rmtree(old)


def searched_runs(suite: Suite, only: list[str] | None = None) -> list[RunSpec]:
    """The runs ``clusterbench bench`` searches: the search section's ``runs`` (default: every
    trained run), restricted to ``only`` when given."""
    from modules import METHODS

    if suite.search is None or not suite.search.space and not any(r.search for r in suite.runs):
        return []
    names = suite.search.runs or [r.name for r in suite.runs
                                  if METHODS[r.method].requires_training]
    return [suite.run(n) for n in names if not only or n in only]


def search_then_best(suite: Suite, run: RunSpec, suite_dir: Path, address: str | None = None,
                     wandb: bool = False) -> RunSpec:
    """ASHA over ``run``'s search space with the suite's search budget, in
    ``<suite_dir>/search/<run>``; returns the best configuration as a run named
    ``<run>+tuned`` that remembers the search.

    A finished search with the same space, budget and run settings is reused (its
    ``search.yaml`` records them), an interrupted one is resumed; otherwise a new search starts
    and the old one is kept as ``<run>.replaced-<UTC time>``."""
    from ray import tune

    from tune.search import apply_config, read_best_config, run_search

    spec = suite.search
    storage = suite_dir / "search" / run.slug
    signature = {"run": asdict(run), "space": run.search or spec.space,
                 "budget": {k: getattr(spec, k) for k in (
                     "num_samples", "max_epochs", "grace_period", "reduction_factor", "metric",
                     "mode", "workers_per_trial")}}
    signature = json.loads(json.dumps(signature, default=str))
    previous = storage / "search.yaml"
    same = previous.is_file() and yaml.safe_load(previous.read_text()) == signature
    best = read_best_config(storage) if same else None
    if best is not None:
        console.print(f"{run.name}: reusing the finished search in {storage}")
    else:
        resume = same and tune.Tuner.can_restore(str(storage / run.slug))
        if not resume and storage.exists():  # another space or budget: keep the old search aside
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
            storage.rename(storage.with_name(f"{storage.name}.replaced-{stamp}"))
        storage.mkdir(parents=True, exist_ok=True)
        write_atomic(previous, yaml.safe_dump(signature, sort_keys=False))
        console.rule(f"[bold]{suite.name}[/]: searching {run.name} ({spec.num_samples} "
                     f"configurations, ASHA, at most {spec.max_epochs} epochs)"
                     + (" - resuming" if resume else ""))
        run_search(str(suite.path), run_name=run.name, storage=str(storage), fast=suite.fast,
                   resume=resume, address=address, wandb=wandb)
        best = read_best_config(storage)
    config = {f"{section}.{k}": v for section in ("model", "data", "trainer")
              for k, v in best[section].items() if getattr(run, section).get(k, object()) != v}
    tuned = apply_config(run, config)
    tuned.name = f"{run.name}+tuned"
    tuned.paper = {}  # the paper's number belongs to its own configuration
    tuned.searched = {
        "configurations_searched": best["configurations_searched"],
        "trials_failed": best["trials_failed"], "max_epochs": spec.max_epochs,
        "metric": best["metric"], "best_value": best["best_value"],
        "values": config, "directory": str(storage),
    }
    return tuned


def run_suite(suite: Suite, results_root: str | Path = "results", logger: str = "csv",
              accelerator: str | None = None, progress: bool = True,
              only: list[str] | None = None, search: bool = True,
              address: str | None = None) -> tuple[Path, list[str], list[str]]:
    """Run every (run, seed) of ``suite``; a run that crashes, or whose data are missing, is
    reported and leaves no result, and the others go on. With ``search`` and a suite search
    section, each searched run's best configuration is then retrained as ``<run>+tuned`` for the
    suite's full budget and seeds (:func:`search_then_best`). Returns the suite's results
    directory, the crashed run/seed names and those whose data were missing."""
    suite_dir = suite_results_dir(suite, results_root)
    runs = [suite.run(name) for name in only] if only else list(suite.runs)
    failed, missing_data = [], []

    def train(run: RunSpec) -> None:
        for seed in suite.seeds:
            console.rule(f"[bold]{suite.name}[/]: {run.name} on {run.dataset}, seed {seed}")
            try:
                result = run_one(suite, run, seed, suite_dir, logger, accelerator, progress)
            except KeyboardInterrupt:
                raise
            except FileNotFoundError as err:  # missing data: bad input, said in one line
                print(f"clusterbench: {run.name}: {err}", file=sys.stderr)
                missing_data.append(f"{run.name}/seed-{seed}")
                continue
            except Exception:  # one broken run must not cost the others their results
                console.print(traceback.format_exc(), style="red", markup=False)
                failed.append(f"{run.name}/seed-{seed}")
                continue
            shown = ", ".join(f"{k} {display_scale(k) * v:.2f}"
                              for k, v in result["metrics"].items())
            console.print(f"{run.name} seed {seed}: {shown} ({result['wall_seconds']:.1f} s)")

    for run in runs:
        train(run)
    for run in searched_runs(suite, only) if search else []:
        try:
            tuned = search_then_best(suite, run, suite_dir, address=address,
                                     wandb=logger == "wandb")
        except KeyboardInterrupt:
            raise
        except Exception:
            console.print(traceback.format_exc(), style="red", markup=False)
            failed.append(f"{run.name}+tuned (search)")
            continue
        shown = ", ".join(f"{k} = {v:.3g}" if isinstance(v, float) else f"{k} = {v}"
                          for k, v in tuned.searched["values"].items())
        console.print(f"{run.name}: best of {tuned.searched['configurations_searched']} "
                      f"configurations: {shown or 'the suite settings'}")
        train(tuned)
    write_leaderboard(suite_dir)
    return suite_dir, failed, missing_data
