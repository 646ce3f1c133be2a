"""One seed of each part of the tensorized experiment: the Figure 2/7 table's models on one
dataset, the TVAE (Figure 3, and Figure 10 on Fashion-MNIST), the TVAE with under-estimated k
(Figure 11), CL and TCL (Figure 4) and the TRBM (Figure 5). Each trains the registered methods of
:mod:`modules.methods.tensorized` with a quiet Lightning Trainer and returns plain numbers (and
the first seed's figure); a job of :func:`benchmarks.experiments.tensorized.run.run`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from benchmarks.experiments.kit import ari
from benchmarks.experiments.tensorized.figures import (
    trbm_figure,
    tvae_figure,
    underestimated_figure,
)
from benchmarks.infra.plots import tsne_panels_png
from benchmarks.run.trainer import experiment_trainer

TABLE_DATASETS = ("parallel_lines", "lines3d", "orthogonal", "triangle", "iris", "penguins",
                  "digits5")


AE_MODELS = ("AE1", "AE2", "AE3")


TENSORIZED_MODELS = ("TAE1", "TAE2", "PTAE")


def model_specs(n_clusters: int, penalty: float) -> list[tuple[str, str, dict[str, Any]]]:
    """(row name, registered method, model arguments) of the paper's AE1-AE3, TAE1, TAE2 and
    PTAE (section III-B): linear, bias-free, hidden size 2, embedding size 1 (AE3: C).

    >>> [(name, method) for name, method, _ in model_specs(3, 0.1)][:4]
    [('AE1', 'ae'), ('AE2', 'ae'), ('AE3', 'ae'), ('TAE1', 'tae')]
    """
    return [
        ("AE1", "ae", {"num_layers": 1, "embedding_dim": 1}),
        ("AE2", "ae", {"num_layers": 2, "hidden_dim": 2, "embedding_dim": 1}),
        ("AE3", "ae", {"num_layers": 2, "hidden_dim": 2, "embedding_dim": n_clusters}),
        ("TAE1", "tae", {"num_layers": 1, "embedding_dim": 1, "penalty": penalty}),
        ("TAE2", "tae", {"num_layers": 2, "hidden_dim": 2, "embedding_dim": 1,
                         "penalty": penalty}),
        ("PTAE", "ptae", {"num_layers": 2, "hidden_dim": 2, "embedding_dim": 1,
                          "penalty": penalty}),
    ]


#: The image data a part can name: ``auto`` (MNIST, else scikit-learn's digits) or a dataset.
IMAGE_DATASETS = ("auto", "mnist", "digits", "fashionmnist")


def image_datamodule(classes: Sequence[int], seed: int, batch_size: int, source: str,
                      limit_per_class: int | None):
    """Images of ``classes``: MNIST when ``source`` is ``"mnist"`` or ``"auto"`` and its files
    are on disk, else (``"auto"``, ``"digits"``) scikit-learn's 8x8 digits; Fashion-MNIST for
    ``"fashionmnist"``. A named dataset whose files are missing raises ``FileNotFoundError``.
    Returns ``(datamodule, name)``."""
    from datamodules import DATAMODULES

    kwargs = {"classes": list(classes), "seed": seed, "batch_size": batch_size, "n_views": 1,
              "augmentation": "none", "val_fraction": 0.1, "limit_per_class": limit_per_class}
    if source not in IMAGE_DATASETS:
        raise ValueError(f"the image dataset must be one of {', '.join(IMAGE_DATASETS)}, got "
                         f"{source!r}")
    if source == "fashionmnist":
        dm = DATAMODULES["fashionmnist"](**kwargs)
        dm.setup()
        return dm, "fashionmnist"
    if source in ("auto", "mnist"):
        dm = DATAMODULES["mnist"](**kwargs)
        try:
            dm.setup()
            return dm, "mnist"
        except FileNotFoundError:
            if source == "mnist":
                raise
    dm = DATAMODULES["digits"](**kwargs)
    dm.setup()
    return dm, "digits"


def vector_datamodule(name: str, seed: int, batch_size: int):
    from datamodules import DATAMODULES

    dm = DATAMODULES[name](seed=seed, batch_size=batch_size, n_views=1, augmentation="none",
                           val_fraction=0.1)
    dm.setup()
    return dm


def split_tensors(dm, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    loader = {"train": dm.train_eval_dataloader, "test": dm.test_dataloader,
              "val": dm.val_dataloader}[split]()
    xs, ys = zip(*loader, strict=True)
    return torch.cat(xs), torch.cat(ys)


def fit_seconds_per_epoch(model, dm, epochs: int) -> float:
    """Train with a plain Lightning Trainer (validation once, at the end); seconds per epoch."""
    trainer = experiment_trainer(epochs, check_val_every_n_epoch=max(1, epochs))
    start = time.perf_counter()
    trainer.fit(model, datamodule=dm)
    seconds = time.perf_counter() - start
    model.eval()
    return seconds / max(1, trainer.current_epoch)


def build_model(method: str, dm, seed: int, **kwargs):
    import lightning.pytorch as pl

    from modules.methods import METHODS

    pl.seed_everything(seed, verbose=False)
    return METHODS[method](num_classes=dm.num_classes, input_shape=dm.input_shape, **kwargs)


def table_seed(dataset: str, seed: int, settings: dict[str, Any]) -> tuple[dict, dict]:
    """Every row's numbers on one dataset and seed; returns ``(per-model metrics, info)``."""
    from sklearn.cluster import KMeans

    if dataset == "digits5":
        dm, source = image_datamodule(settings["digit_classes"], seed,
                                       settings["image_batch_size"], settings["image_dataset"],
                                       settings["limit_per_class"])
        epochs = settings["image_epochs"]
    else:
        dm, source = vector_datamodule(dataset, seed, settings["batch_size"]), dataset
        epochs = settings["epochs"]
    k = dm.num_classes
    x_train, y_train = split_tensors(dm, "train")
    x_test, y_test = split_tensors(dm, "test")
    generator = torch.Generator().manual_seed(seed)
    x_noisy = x_test + settings["noise_std"] * torch.randn(x_test.shape, generator=generator)
    metrics: dict[str, dict[str, float]] = {}
    kmeans = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(x_train.flatten(1).numpy())
    metrics["k-means"] = {"ari_train": ari(y_train, kmeans.labels_),
                          "ari_test": ari(y_test, kmeans.predict(x_test.flatten(1).numpy()))}
    for name, method, kwargs in model_specs(k, settings["penalty"]):
        model = build_model(method, dm, seed, lr=settings["lr"], **kwargs)
        seconds = fit_seconds_per_epoch(model, dm, epochs)
        with torch.no_grad():
            if method == "ae":  # k-means on the embedding, as the paper scores the AEs
                km = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(
                    model.encode(x_train).double().numpy())
                ari_train = ari(y_train, km.labels_)
                ari_test = ari(y_test, km.predict(model.encode(x_test).double().numpy()))
            else:  # the learnt assignment S, and eq. 2 on the test points
                ari_train = ari(y_train, model.train_assignment)
                ari_test = ari(y_test, model.assign(x_test))
            mse = float((model.reconstruct(x_noisy) - x_test).pow(2).mean())
        metrics[name] = {"ari_train": ari_train, "ari_test": ari_test, "mse": mse,
                         "parameters": sum(p.numel() for p in model.parameters()),
                         "ms_per_epoch": 1000 * seconds}
    info = {"source": source, "provenance": dm.provenance, "d": int(np.prod(dm.input_shape)),
            "C": k, "n_train": len(y_train), "n_test": len(y_test), "epochs": epochs}
    return metrics, info


def cluster_classes(labels: np.ndarray, assignment: np.ndarray, classes: Sequence[int],
                     k: int) -> list[list[int]]:
    """The classes each cluster takes: every class goes to the cluster that holds most of it.

    >>> cluster_classes(np.array([0, 0, 1, 2]), np.array([1, 1, 0, 1]), [3, 5, 8], k=2)
    [[5], [3, 8]]
    """
    groups: list[list[int]] = [[] for _ in range(k)]
    for index, original in enumerate(classes):
        members = assignment[labels == index]
        if len(members):
            groups[int(np.bincount(members, minlength=k).argmax())].append(int(original))
    return groups


def tvae_seed(seed: int, settings: dict[str, Any], image_dataset: str, figure: bool,
              skip_missing: bool) -> dict[str, Any]:
    """One seed of Figure 3 (or 10): a VAE (k = 1) and a TVAE (k = C) on the same data. With
    ``skip_missing``, data whose files are missing give ``{"skipped": reason}`` (one line)."""
    try:
        dm, source = image_datamodule(settings["classes"], seed, settings["batch_size"],
                                       image_dataset, settings["limit_per_class"])
    except FileNotFoundError as err:
        if not skip_missing:
            raise
        return {"skipped": " ".join(str(err).split())}
    x_train, y_train = split_tensors(dm, "train")
    x_test, y_test = split_tensors(dm, "test")
    trained, entries = {}, {}
    for name, k in (("VAE", 1), ("TVAE", dm.num_classes)):
        model = build_model("tvae", dm, seed, n_clusters=k, **tvae_arguments(settings))
        seconds = fit_seconds_per_epoch(model, dm, settings["epochs"])
        trained[name] = model
        with torch.no_grad():
            best, test_assignment = model.assignment_losses(x_test).min(1)  # eq. 2
            rows = torch.arange(len(test_assignment))
            entries[name] = {
                "ari_train": ari(y_train, model.train_assignment),
                "ari_test": ari(y_test, test_assignment),
                "test_loss": float(best.mean()),
                # the reconstruction term alone, by the assigned cluster at z = mu
                "test_reconstruction": float(
                    model.reconstruction_losses(x_test)[rows, test_assignment].mean()),
                "ms_per_epoch": 1000 * seconds,
                "groups": cluster_classes(y_train.numpy(), model.train_assignment.numpy(),
                                           settings["classes"], k)}
    png = None
    if figure and len(dm.input_shape) == 3 and settings["embedding_dim"] == 2:
        png = tvae_figure(trained, x_train, y_train, x_test, y_test, settings, source)
    return {"source": source, "provenance": dm.provenance, "data_source": dm.source,
            "n_train": len(y_train), "n_test": len(y_test), "entries": entries, "figure": png}


def tvae_arguments(settings: dict[str, Any]) -> dict[str, Any]:
    return {key: settings[key]
            for key in ("embedding_dim", "hidden_dim", "reconstruction", "encoder", "lr")}


def underestimated_seed(seed: int, settings: dict[str, Any], under: dict[str, Any],
                         image_dataset: str, figure: bool) -> dict[str, Any]:
    """One seed of Figure 11: a TVAE with fewer clusters than classes."""
    classes, k = under["classes"], under["n_clusters"]
    dm, source = image_datamodule(classes, seed, settings["batch_size"], image_dataset,
                                   settings["limit_per_class"])
    x_train, y_train = split_tensors(dm, "train")
    model = build_model("tvae", dm, seed, n_clusters=k, **tvae_arguments(settings))
    fit_seconds_per_epoch(model, dm, under["epochs"])
    assignment = model.train_assignment.numpy()
    groups = cluster_classes(y_train.numpy(), assignment, classes, k)
    png = None
    if figure and settings["embedding_dim"] == 2 and len(dm.input_shape) == 3:
        png = underestimated_figure(model, groups, classes, source, settings["grid_steps"])
    return {"source": source, "groups": groups, "ari": ari(y_train, assignment), "figure": png}


TCL_VARIANTS = (("CL", 1, False), ("TCL", None, False), ("CL + labels", 1, True),
                ("TCL + labels", None, True))


def tcl_seed(seed: int, settings: dict[str, Any], image_dataset: str,
              figure: bool) -> dict[str, Any]:
    """One seed of Figure 4: CL and TCL, without and with labels."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    dm, source = image_datamodule(settings["classes"], seed, settings["batch_size"],
                                   image_dataset, settings["limit_per_class"])
    x_train, y_train = split_tensors(dm, "train")
    x_test, y_test = split_tensors(dm, "test")
    entries, arrays, titles = {}, [], []
    for name, k, supervised in TCL_VARIANTS:
        model = build_model("tcl", dm, seed, n_clusters=k or dm.num_classes, supervised=supervised,
                       embedding_dim=settings["embedding_dim"], lr=settings["lr"])
        seconds = fit_seconds_per_epoch(model, dm, settings["epochs"])
        with torch.no_grad():
            z = torch.nn.functional.normalize(model.encode(x_test), dim=1).numpy()
        km = KMeans(n_clusters=dm.num_classes, n_init=10, random_state=seed).fit_predict(z)
        entry = {"kmeans_ari": ari(y_test, km),
                 "silhouette": float(silhouette_score(z, y_test.numpy(), metric="cosine")),
                 "ms_per_epoch": 1000 * seconds}
        if k != 1:
            entry["assignment_ari"] = ari(y_train, model.train_assignment)
        entries[name] = entry
        arrays.append(z)
        titles.append(f"{name}: silhouette {entry['silhouette']:.2f}")
    png = (tsne_panels_png(arrays, y_test.numpy(), titles, seed=seed,
                           max_points=settings["tsne_points"]) if figure else None)
    return {"source": source, "entries": entries, "figure": png}


def trbm_seed(seed: int, settings: dict[str, Any], image_dataset: str,
               figure: bool) -> dict[str, Any]:
    """One seed of Figure 5: a TRBM with one RBM per class and a standard RBM."""
    classes = settings["classes"]
    dm, source = image_datamodule(classes, seed, settings["batch_size"], image_dataset,
                                   settings["limit_per_class"])
    x_train, y_train = split_tensors(dm, "train")
    x_test, y_test = split_tensors(dm, "test")
    kwargs = {"hidden_dim": settings["hidden_dim"], "cd_steps": settings["cd_steps"],
              "lr": settings["lr"]}
    trbm = build_model("trbm", dm, seed, n_clusters=len(classes), **kwargs)
    fit_seconds_per_epoch(trbm, dm, settings["epochs"])
    rbm = build_model("trbm", dm, seed, n_clusters=1, **kwargs)
    fit_seconds_per_epoch(rbm, dm, settings["epochs"])
    assignment_ari = ari(y_train, trbm.train_assignment)
    with torch.no_grad():
        target = trbm.scale.to_unit(x_test).flatten(1)
        errors = (trbm.reconstruct_all(x_test).flatten(2) - target.unsqueeze(1)).pow(2).mean(2)
        rbm_error = (rbm.reconstruct_all(x_test).flatten(2)[:, 0] - target).pow(2).mean(1)
    # Each class's RBM: the cluster that holds most of its training points.
    assignment = trbm.train_assignment.numpy()
    rows = []
    for c, original in enumerate(classes):
        owner = int(np.bincount(assignment[y_train.numpy() == c],
                                minlength=trbm.n_clusters).argmax())
        chosen = y_test == c
        others = [j for j in range(trbm.n_clusters) if j != owner]
        rows.append({"seed": seed, "data": f"{source} {classes}", "digit": original,
                     "its cluster": owner + 1,
                     "MSE by its cluster's RBM": float(errors[chosen, owner].mean()),
                     "MSE by the other RBM(s)": float(errors[chosen][:, others].mean()),
                     "MSE by a standard RBM": float(rbm_error[chosen].mean()),
                     "assignment ARI train": assignment_ari})
    png = trbm_figure(trbm, rbm, x_test, y_test, classes, settings) if figure else None
    return {"source": source, "rows": rows, "ari": assignment_ari, "figure": png}
