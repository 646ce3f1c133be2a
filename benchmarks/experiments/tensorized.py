"""The experiments of "Cluster Specific Representation Learning" (Sabanayagam, Al-Dabooni, Esser,
arXiv:2412.03471): its Figure 2 and Figure 7 table, and the TVAE, TCL, TRBM and under-estimated-k
experiments (Figures 3, 4, 5 and 11).

- **Figure 2/7 table.** On ``parallel_lines``, ``lines3d``, ``orthogonal``, ``triangle``
  (generated), ``iris``, ``penguins`` and five digit classes (real): k-means on the raw data,
  k-means on the AE1/AE2/AE3 embeddings, and the TAE1/TAE2/PTAE assignments :math:`S`. Columns:
  ARI (training split, as the paper reports, and the held-out test split through eq. 2 or
  k-means' prediction), de-noising MSE (test inputs plus :math:`\\mathcal N(0, 0.1^2)` noise,
  MSE of the reconstruction against the clean inputs), number of parameters and wall time per
  epoch. Mean and standard deviation over the seeds (the seed draws the validation split, the
  shuffle, the initialisation and the noise; the data and test split are fixed).
- **TVAE latent spaces** (Figure 3): a VAE (k = 1) and a TVAE (k = 3) with a 2-D latent space on
  digits 0, 1 and 9; images decoded from a grid of latent codes of every cluster, and the means
  of training and test points.
- **TCL t-SNE** (Figure 4): CL (k = 1) and TCL (k = C), without and with labels, 128-D
  embeddings of the test digits in t-SNE.
- **TRBM reconstructions** (Figure 5, 13): a TRBM (k = 2) and an RBM on digits 0 and 1, every
  RBM's reconstruction of test digits.
- **Under-estimated k** (Figure 11): a TVAE with k = 2 on digits {0, 1, 3, 6, 7, 9}; which
  classes share a cluster.

Every model is a LightningModule of :mod:`modules.methods.tensorized` trained by a plain Lightning
Trainer on the suite's datamodules. The function returns numbers and figures; it writes nothing.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from benchmarks.experiments.kit import mean_std
from benchmarks.infra.plots import png_bytes, pyplot, tsne_panels_png
from benchmarks.suites.experiment import ExperimentOutput

#: The Figure 2 / Figure 7 datasets; ``digits5`` is five digit classes (see ``image_dataset``).
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


# -- plumbing --------------------------------------------------------------------------------------
class _Quiet:
    """Silences Lightning's banners and the small-data warnings of Lightning and scikit-learn
    while the experiment runs; the logging levels are restored afterwards."""

    names = ("lightning.pytorch", "lightning.fabric")

    def __enter__(self) -> None:
        import lightning.pytorch  # noqa: F401  (it sets its loggers' levels when imported)

        self.levels = {name: logging.getLogger(name).level for name in self.names}
        for name in self.names:
            logging.getLogger(name).setLevel(logging.ERROR)
        self.warnings = warnings.catch_warnings()
        self.warnings.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc) -> None:
        self.warnings.__exit__(*exc)
        for name, level in self.levels.items():
            logging.getLogger(name).setLevel(level)


def _image_datamodule(classes: Sequence[int], seed: int, batch_size: int, source: str,
                      limit_per_class: int | None):
    """Digit images of ``classes``: MNIST when ``source`` is ``"mnist"`` or ``"auto"`` and its
    files are on disk, else scikit-learn's 8x8 digits. Returns ``(datamodule, name)``."""
    from datamodules import DATAMODULES

    kwargs = {"classes": list(classes), "seed": seed, "batch_size": batch_size, "n_views": 1,
              "augmentation": "none", "val_fraction": 0.1, "limit_per_class": limit_per_class}
    if source in ("auto", "mnist"):
        dm = DATAMODULES["mnist"](**kwargs)
        try:
            dm.setup()
            return dm, "mnist"
        except FileNotFoundError:
            if source == "mnist":
                raise
    elif source != "digits":
        raise ValueError(f"image_dataset must be auto, mnist or digits, got {source!r}")
    dm = DATAMODULES["digits"](**kwargs)
    dm.setup()
    return dm, "digits"


def _vector_datamodule(name: str, seed: int, batch_size: int):
    from datamodules import DATAMODULES

    dm = DATAMODULES[name](seed=seed, batch_size=batch_size, n_views=1, augmentation="none",
                           val_fraction=0.1)
    dm.setup()
    return dm


def _split(dm, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    loader = {"train": dm.train_eval_dataloader, "test": dm.test_dataloader,
              "val": dm.val_dataloader}[split]()
    xs, ys = zip(*loader, strict=True)
    return torch.cat(xs), torch.cat(ys)


def _fit(model, dm, epochs: int) -> float:
    """Train with a plain Lightning Trainer (validation once, at the end); seconds per epoch."""
    import lightning.pytorch as pl

    trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False,
                         enable_progress_bar=False, enable_checkpointing=False,
                         enable_model_summary=False, num_sanity_val_steps=0,
                         check_val_every_n_epoch=max(1, epochs))
    start = time.perf_counter()
    trainer.fit(model, datamodule=dm)
    seconds = time.perf_counter() - start
    model.eval()
    return seconds / max(1, trainer.current_epoch)


def _build(method: str, dm, seed: int, **kwargs):
    import lightning.pytorch as pl

    from modules.methods import METHODS

    pl.seed_everything(seed, verbose=False)
    return METHODS[method](num_classes=dm.num_classes, input_shape=dm.input_shape, **kwargs)


def _ari(labels, assignment) -> float:
    from sklearn.metrics import adjusted_rand_score

    return float(adjusted_rand_score(np.asarray(labels), np.asarray(assignment)))


def _fmt(mean: float, std: float, digits: int = 2) -> str:
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


# -- Figure 2 / 7 ----------------------------------------------------------------------------------
def _table_one(dataset: str, seed: int, settings: dict[str, Any]) -> tuple[dict, dict]:
    """Every row's numbers on one dataset and seed; returns ``(per-model metrics, info)``."""
    from sklearn.cluster import KMeans

    if dataset == "digits5":
        dm, source = _image_datamodule(settings["digit_classes"], seed,
                                       settings["image_batch_size"], settings["image_dataset"],
                                       settings["limit_per_class"])
        epochs = settings["image_epochs"]
    else:
        dm, source = _vector_datamodule(dataset, seed, settings["batch_size"]), dataset
        epochs = settings["epochs"]
    k = dm.num_classes
    x_train, y_train = _split(dm, "train")
    x_test, y_test = _split(dm, "test")
    generator = torch.Generator().manual_seed(seed)
    x_noisy = x_test + settings["noise_std"] * torch.randn(x_test.shape, generator=generator)
    metrics: dict[str, dict[str, float]] = {}
    kmeans = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(x_train.flatten(1).numpy())
    metrics["k-means"] = {"ari_train": _ari(y_train, kmeans.labels_),
                          "ari_test": _ari(y_test, kmeans.predict(x_test.flatten(1).numpy()))}
    for name, method, kwargs in model_specs(k, settings["penalty"]):
        model = _build(method, dm, seed, lr=settings["lr"], **kwargs)
        seconds = _fit(model, dm, epochs)
        with torch.no_grad():
            if method == "ae":  # k-means on the embedding, as the paper scores the AEs
                km = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(
                    model.encode(x_train).double().numpy())
                ari_train = _ari(y_train, km.labels_)
                ari_test = _ari(y_test, km.predict(model.encode(x_test).double().numpy()))
            else:  # the learnt assignment S, and eq. 2 on the test points
                ari_train = _ari(y_train, model.train_assignment)
                ari_test = _ari(y_test, model.assign(x_test))
            mse = float((model.reconstruct(x_noisy) - x_test).pow(2).mean())
        metrics[name] = {"ari_train": ari_train, "ari_test": ari_test, "mse": mse,
                         "parameters": sum(p.numel() for p in model.parameters()),
                         "ms_per_epoch": 1000 * seconds}
    info = {"source": source, "provenance": dm.provenance, "d": int(np.prod(dm.input_shape)),
            "C": k, "n_train": len(y_train), "n_test": len(y_test), "epochs": epochs}
    return metrics, info


def _table(results: dict[tuple[str, int], tuple[dict, dict]], seeds: Sequence[int],
           settings: dict[str, Any]) -> tuple[list[dict], dict, dict]:
    """The table rows (mean and std over seeds) from every (dataset, seed) job's numbers."""
    rows, summary, infos = [], {}, {}
    for dataset in settings["datasets"]:
        runs = [results[(dataset, seed)][0] for seed in seeds]
        info = infos[dataset] = results[(dataset, seeds[0])][1]
        label = dataset
        if dataset == "digits5":
            label = f"{info['source']} {{{','.join(map(str, settings['digit_classes']))}}}"
        summary[dataset] = {}
        for row_name in runs[0]:
            per_seed = [run[row_name] for run in runs]
            stats = {key: mean_std([r[key] for r in per_seed]) for key in per_seed[0]}
            summary[dataset][row_name] = stats
            model = "k-means (raw data)" if row_name == "k-means" else (
                f"k-means on {row_name} embedding" if row_name in AE_MODELS
                else f"{row_name} assignment")
            row = {"dataset": label, "data": info["provenance"],
                   "d / C / n_train": f"{info['d']} / {info['C']} / {info['n_train']}",
                   "model": model}
            for key, title in (("ari_train", "ARI train"), ("ari_test", "ARI test"),
                               ("mse", "denoising MSE"), ("ms_per_epoch", "ms per epoch")):
                if key in stats:
                    row[f"{title} mean"], row[f"{title} std"] = stats[key]
                else:
                    row[f"{title} mean"] = row[f"{title} std"] = "n/a"
            row["parameters"] = int(stats["parameters"][0]) if "parameters" in stats else "n/a"
            row["seeds"] = len(per_seed)
            rows.append(row)
    return rows, summary, infos


def _verdict(better: int, tied: int) -> str:
    """``held`` when all three tensorized models beat the best AE, ``tied`` when none is worse
    but some only equal it, ``did not hold`` otherwise.

    >>> _verdict(3, 0), _verdict(0, 3), _verdict(2, 0)
    ('held', 'tied', 'did not hold')
    """
    if better == 3:
        return "held"
    return "tied" if better + tied == 3 else "did not hold"


def _ordering_notes(summary: dict, infos: dict) -> list[str]:
    """Whether the paper's orderings held, dataset by dataset, from the means over seeds: every
    tensorized model (TAE1, TAE2, PTAE) against the best of AE1-AE3."""
    notes, counts = [], {"ari": {}, "mse": {}}
    for dataset, rows in summary.items():
        ari = {m: rows[m]["ari_train"][0] for m in (*AE_MODELS, *TENSORIZED_MODELS)}
        mse = {m: rows[m]["mse"][0] for m in (*AE_MODELS, *TENSORIZED_MODELS)}
        best_ae_ari = max(AE_MODELS, key=lambda m: ari[m])
        best_ae_mse = min(AE_MODELS, key=lambda m: mse[m])
        tolerance = 1e-9
        above = sum(ari[m] > ari[best_ae_ari] + tolerance for m in TENSORIZED_MODELS)
        ari_ties = sum(abs(ari[m] - ari[best_ae_ari]) <= tolerance for m in TENSORIZED_MODELS)
        below = sum(mse[m] < mse[best_ae_mse] - tolerance for m in TENSORIZED_MODELS)
        mse_ties = sum(abs(mse[m] - mse[best_ae_mse]) <= tolerance for m in TENSORIZED_MODELS)
        ari_verdict, mse_verdict = _verdict(above, ari_ties), _verdict(below, mse_ties)
        counts["ari"][ari_verdict] = counts["ari"].get(ari_verdict, 0) + 1
        counts["mse"][mse_verdict] = counts["mse"].get(mse_verdict, 0) + 1
        name = infos[dataset]["source"] if dataset == "digits5" else dataset
        tensorized_ari = ", ".join(f"{m} {ari[m]:.2f}" for m in TENSORIZED_MODELS)
        tensorized_mse = ", ".join(f"{m} {mse[m]:.3g}" for m in TENSORIZED_MODELS)
        notes.append(
            f"{name}: ARI {tensorized_ari} vs the best AE {best_ae_ari} {ari[best_ae_ari]:.2f} "
            f"(k-means on raw data {rows['k-means']['ari_train'][0]:.2f}): TAE/PTAE above AE "
            f"{ari_verdict} ({above}/3 above, {ari_ties} tied); de-noising MSE {tensorized_mse} "
            f"vs the best AE {best_ae_mse} {mse[best_ae_mse]:.3g}: TAE/PTAE below AE "
            f"{mse_verdict} ({below}/3 below).")
    total = len(summary)

    def tally(kind: str) -> str:
        return ", ".join(f"{verdict} on {counts[kind][verdict]}/{total}"
                         for verdict in ("held", "tied", "did not hold") if verdict in counts[kind])

    notes.insert(0, "Paper's orderings, from the means over seeds (training-split ARI; every one "
                    "of TAE1, TAE2 and PTAE against the best of AE1-AE3): TAE/PTAE above AE in "
                    f"ARI {tally('ari')} datasets; below AE in de-noising MSE {tally('mse')} "
                    "datasets.")
    return notes


def _parameter_and_time_notes(summary: dict, infos: dict, workers: int) -> list[str]:
    notes = []
    equal = [d for d, rows in summary.items()
             if rows["AE3"]["parameters"][0] == rows["PTAE"]["parameters"][0]]
    counts = "; ".join(f"{d} {int(rows['AE3']['parameters'][0])}/"
                       f"{int(rows['PTAE']['parameters'][0])}" for d, rows in summary.items())
    notes.append(f"AE3 and PTAE have the same number of parameters, as the paper states, on "
                 f"{len(equal)}/{len(summary)} datasets (AE3/PTAE: {counts}); both are 4d + 4C "
                 "without biases, as the authors' code builds them.")
    ratios = []
    for rows in summary.values():
        ae = rows["AE2"]["ms_per_epoch"][0]
        ratios.append((rows["TAE2"]["ms_per_epoch"][0] / ae, rows["PTAE"]["ms_per_epoch"][0] / ae))
    tae_ratio, ptae_ratio = np.median([r[0] for r in ratios]), np.median([r[1] for r in ratios])
    notes.append(f"Time per epoch (fit wall time / epochs, including the Lloyd step over the "
                 f"training split and one final validation; {workers} worker process(es) of 1 "
                 f"torch thread; other processes shared the machine, so absolute times are "
                 f"noisy): median ratio to AE2 of "
                 f"{tae_ratio:.2f} for TAE2 and {ptae_ratio:.2f} for PTAE over the datasets. The "
                 "paper's Figure 8 found TAE and PTAE much slower than AE and blamed its "
                 "sequential loop over clusters; here the clusters run in one einsum, and the "
                 "remaining overhead is mostly the per-epoch Lloyd pass.")
    return notes


def _table_figure(summary: dict, infos: dict) -> bytes:
    plt = pyplot()


    datasets = list(summary)
    names = [infos[d]["source"] if d == "digits5" else d for d in datasets]
    models = ["k-means", *AE_MODELS, *TENSORIZED_MODELS]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    width = 0.8 / len(models)
    for panel, (key, title, log) in enumerate((("ari_train", "clustering ARI (higher is better)",
                                                False),
                                               ("mse", "de-noising MSE (lower is better)", True),
                                               ("parameters", "number of parameters", True))):
        ax = axes[panel]
        for i, model in enumerate(models):
            if key not in summary[datasets[0]][model]:
                continue
            means = [summary[d][model][key][0] for d in datasets]
            stds = [summary[d][model][key][1] for d in datasets]
            ax.bar(np.arange(len(datasets)) + (i - len(models) / 2 + 0.5) * width, means,
                   width, yerr=stds if key != "parameters" else None, label=model,
                   color=plt.cm.tab10(i))
        ax.set_xticks(np.arange(len(datasets)))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
        if log:
            ax.set_yscale("log")
    axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return png_bytes(fig)


# -- TVAE (Figure 3) and under-estimated k (Figure 11) ---------------------------------------------
def _latent_grid(model, cluster: int, steps: int, limit: float = 2.0) -> np.ndarray:
    """Images decoded from a ``steps`` x ``steps`` grid of 2-D codes in [-limit, limit]^2."""
    values = torch.linspace(-limit, limit, steps)
    grid_y, grid_x = torch.meshgrid(values.flip(0), values, indexing="ij")
    codes = torch.stack([grid_x.flatten(), grid_y.flatten()], dim=1)
    images = model.decode(codes, cluster)[:, 0].numpy()  # (steps^2, H, W)
    h, w = images.shape[1:]
    return images.reshape(steps, steps, h, w).transpose(0, 2, 1, 3).reshape(steps * h, steps * w)


def _cluster_classes(labels: np.ndarray, assignment: np.ndarray, classes: Sequence[int],
                     k: int) -> list[list[int]]:
    """The classes each cluster takes: every class goes to the cluster that holds most of it.

    >>> _cluster_classes(np.array([0, 0, 1, 2]), np.array([1, 1, 0, 1]), [3, 5, 8], k=2)
    [[5], [3, 8]]
    """
    groups: list[list[int]] = [[] for _ in range(k)]
    for index, original in enumerate(classes):
        members = assignment[labels == index]
        if len(members):
            groups[int(np.bincount(members, minlength=k).argmax())].append(int(original))
    return groups


def _pyplot():
    plt = pyplot()

    return plt


def _tvae_seed(seed: int, settings: dict[str, Any], image_dataset: str,
               figure: bool) -> dict[str, Any]:
    """One seed of Figure 3: a VAE (k = 1) and a TVAE (k = C) on the same data."""
    dm, source = _image_datamodule(settings["classes"], seed, settings["batch_size"],
                                   image_dataset, settings["limit_per_class"])
    x_train, y_train = _split(dm, "train")
    x_test, y_test = _split(dm, "test")
    trained, entries = {}, {}
    for name, k in (("VAE", 1), ("TVAE", dm.num_classes)):
        model = _build("tvae", dm, seed, n_clusters=k, **_tvae_kwargs(settings))
        seconds = _fit(model, dm, settings["epochs"])
        trained[name] = model
        with torch.no_grad():
            entries[name] = {
                "ari_train": _ari(y_train, model.train_assignment),
                "ari_test": _ari(y_test, model.assign(x_test)),
                "test_loss": float(model.assignment_losses(x_test).min(1).values.mean()),
                "ms_per_epoch": 1000 * seconds,
                "groups": _cluster_classes(y_train.numpy(), model.train_assignment.numpy(),
                                           settings["classes"], k)}
    png = None
    if figure and len(dm.input_shape) == 3 and settings["embedding_dim"] == 2:
        png = _tvae_figure(trained, x_train, y_train, x_test, y_test, settings, source)
    return {"source": source, "entries": entries, "figure": png}


def _tvae_kwargs(settings: dict[str, Any]) -> dict[str, Any]:
    return {key: settings[key] for key in ("embedding_dim", "hidden_dim", "reconstruction", "lr")}


def _tvae_figure(trained, x_train, y_train, x_test, y_test, settings, source) -> bytes:

    plt = _pyplot()
    tvae, vae = trained["TVAE"], trained["VAE"]
    k = tvae.n_clusters
    fig, axes = plt.subplots(3, k + 1, figsize=(3 * (k + 1), 9))
    classes = settings["classes"]
    colours = plt.cm.tab10(np.arange(len(classes)))
    for column, (model, cluster) in enumerate([(vae, 0), *[(tvae, j) for j in range(k)]]):
        title = "VAE" if column == 0 else f"TVAE cluster {cluster + 1}"
        axes[0, column].imshow(_latent_grid(model, cluster, settings["grid_steps"]), cmap="gray")
        axes[0, column].set_title(f"{title}: latent samples", fontsize=9)
        axes[0, column].axis("off")
        for row, (x, y, split) in enumerate(((x_train, y_train, "train"),
                                             (x_test, y_test, "test")), start=1):
            assignment = model.assign(x).numpy()
            means = model.encode(x).numpy()
            keep = assignment == cluster
            ax = axes[row, column]
            for index, original in enumerate(classes):
                chosen = keep & (y.numpy() == index)
                ax.scatter(means[chosen, 0], means[chosen, 1], s=5, color=colours[index],
                           label=str(original))
            ax.set_title(f"{title}: {split} means ({int(keep.sum())} pts)", fontsize=9)
    axes[1, 0].legend(fontsize=7, title="digit")
    fig.suptitle(f"VAE vs TVAE latent spaces ({source} {classes})", fontsize=10)
    fig.tight_layout()
    return png_bytes(fig)


def _tvae_summary(seeds: Sequence[int], per_seed: list[dict], settings: dict[str, Any]
                  ) -> tuple[list[dict], list[str]]:
    source = per_seed[0]["source"]
    rows = []
    for name in ("VAE", "TVAE"):
        entries = [result["entries"][name] for result in per_seed]
        row = {"model": f"{name} (k={1 if name == 'VAE' else len(settings['classes'])})",
               "data": f"{source} {{{','.join(map(str, settings['classes']))}}}"}
        for key, title in (("ari_train", "assignment ARI train"),
                           ("ari_test", "assignment ARI test"),
                           ("test_loss", "test negative ELBO"), ("ms_per_epoch", "ms per epoch")):
            row[f"{title} mean"], row[f"{title} std"] = mean_std([e[key] for e in entries])
        row["classes per cluster (first seed)"] = " | ".join(
            "{" + ",".join(map(str, g)) + "}" for g in entries[0]["groups"])
        row["seeds"] = len(entries)
        rows.append(row)
    tvae = [result["entries"]["TVAE"] for result in per_seed]
    one_class = sum(all(len(g) == 1 for g in e["groups"]) for e in tvae)
    note = (f"TVAE (Figure 3, {source} {settings['classes']}, 2-D latent space, "
            f"{settings['reconstruction'].upper()} reconstruction): the learnt assignment matches "
            f"the classes with ARI {_fmt(*mean_std([e['ari_train'] for e in tvae]))} over "
            f"{len(seeds)} seeds; every cluster took exactly one class on {one_class}/"
            f"{len(seeds)} seeds (the paper's Figure 3 shows one class per latent space). Test "
            f"negative ELBO: VAE {rows[0]['test negative ELBO mean']:.2f}, TVAE "
            f"{rows[1]['test negative ELBO mean']:.2f} (nats per image).")
    return rows, [note]


def _underestimated_seed(seed: int, settings: dict[str, Any], under: dict[str, Any],
                         image_dataset: str, figure: bool) -> dict[str, Any]:
    """One seed of Figure 11: a TVAE with fewer clusters than classes."""
    classes, k = under["classes"], under["n_clusters"]
    dm, source = _image_datamodule(classes, seed, settings["batch_size"], image_dataset,
                                   settings["limit_per_class"])
    x_train, y_train = _split(dm, "train")
    model = _build("tvae", dm, seed, n_clusters=k, **_tvae_kwargs(settings))
    _fit(model, dm, under.get("epochs", settings["epochs"]))
    assignment = model.train_assignment.numpy()
    groups = _cluster_classes(y_train.numpy(), assignment, classes, k)
    png = None
    if figure and settings["embedding_dim"] == 2 and len(dm.input_shape) == 3:
        from benchmarks.infra.plots import png_bytes

        plt = _pyplot()
        fig, axes = plt.subplots(1, k, figsize=(3.2 * k, 3.4))
        for j, ax in enumerate(np.atleast_1d(axes)):
            ax.imshow(_latent_grid(model, j, settings["grid_steps"]), cmap="gray")
            ax.set_title(f"cluster {j + 1}: classes {{{','.join(map(str, groups[j]))}}}",
                         fontsize=9)
            ax.axis("off")
        fig.suptitle(f"TVAE with k={k} on {source} {classes}", fontsize=10)
        fig.tight_layout()
        png = png_bytes(fig)
    return {"source": source, "groups": groups, "ari": _ari(y_train, assignment), "figure": png}


def _underestimated_summary(seeds: Sequence[int], per_seed: list[dict], under: dict[str, Any]
                            ) -> tuple[list[dict], list[str]]:
    classes, k = under["classes"], under["n_clusters"]
    source = per_seed[0]["source"]

    def text(groups):
        return " | ".join("{" + ",".join(map(str, sorted(g))) + "}"
                          for g in sorted(groups, key=lambda g: (len(g), sorted(g))))

    paper = under.get("paper_partition", [[0, 6], [1, 3, 7, 9]])
    matches = sum(text(r["groups"]) == text(paper) for r in per_seed)
    zero_six = sum(any(0 in g and 6 in g for g in r["groups"]) for r in per_seed)
    rows = [{"seed": seed, "data": f"{source} {classes}", "k": k,
             "classes per cluster": text(r["groups"]), "ARI vs classes": r["ari"]}
            for seed, r in zip(seeds, per_seed, strict=True)]
    note = (f"Under-estimated k (Figure 11): a TVAE with k={k} on {source} {classes} grouped the "
            f"classes as the paper's {text(paper)} on {matches}/{len(seeds)} seeds; 0 and 6 "
            f"shared a cluster on {zero_six}/{len(seeds)} (partitions: "
            f"{'; '.join(row['classes per cluster'] for row in rows)}).")
    return rows, [note]


# -- TCL (Figure 4) --------------------------------------------------------------------------------
TCL_VARIANTS = (("CL", 1, False), ("TCL", None, False), ("CL + labels", 1, True),
                ("TCL + labels", None, True))


def _tcl_seed(seed: int, settings: dict[str, Any], image_dataset: str,
              figure: bool) -> dict[str, Any]:
    """One seed of Figure 4: CL and TCL, without and with labels."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score


    dm, source = _image_datamodule(settings["classes"], seed, settings["batch_size"],
                                   image_dataset, settings["limit_per_class"])
    x_train, y_train = _split(dm, "train")
    x_test, y_test = _split(dm, "test")
    entries, arrays, titles = {}, [], []
    for name, k, supervised in TCL_VARIANTS:
        model = _build("tcl", dm, seed, n_clusters=k or dm.num_classes, supervised=supervised,
                       embedding_dim=settings["embedding_dim"], lr=settings["lr"])
        seconds = _fit(model, dm, settings["epochs"])
        with torch.no_grad():
            z = torch.nn.functional.normalize(model.encode(x_test), dim=1).numpy()
        km = KMeans(n_clusters=dm.num_classes, n_init=10, random_state=seed).fit_predict(z)
        entry = {"kmeans_ari": _ari(y_test, km),
                 "silhouette": float(silhouette_score(z, y_test.numpy(), metric="cosine")),
                 "ms_per_epoch": 1000 * seconds}
        if k != 1:
            entry["assignment_ari"] = _ari(y_train, model.train_assignment)
        entries[name] = entry
        arrays.append(z)
        titles.append(f"{name}: silhouette {entry['silhouette']:.2f}")
    png = (tsne_panels_png(arrays, y_test.numpy(), titles, seed=seed,
                           max_points=settings["tsne_points"]) if figure else None)
    return {"source": source, "entries": entries, "figure": png}


def _tcl_summary(seeds: Sequence[int], per_seed: list[dict], settings: dict[str, Any]
                 ) -> tuple[list[dict], list[str]]:
    source = per_seed[0]["source"]
    rows = []
    for name, _, _ in TCL_VARIANTS:
        entries = [r["entries"][name] for r in per_seed]
        row = {"model": name, "data": f"{source} {settings['classes']}"}
        for key, title in (("assignment_ari", "assignment ARI train"),
                           ("kmeans_ari", "k-means ARI test embedding"),
                           ("silhouette", "label silhouette test (cosine)"),
                           ("ms_per_epoch", "ms per epoch")):
            if key in entries[0]:
                row[f"{title} mean"], row[f"{title} std"] = mean_std([e[key] for e in entries])
            else:
                row[f"{title} mean"] = row[f"{title} std"] = "n/a"
        row["seeds"] = len(entries)
        rows.append(row)
    sil = {row["model"]: row["label silhouette test (cosine) mean"] for row in rows}
    best = max(sil, key=sil.get)
    note = (f"TCL (Figure 4, {source} {settings['classes']}, {settings['embedding_dim']}-D "
            f"embeddings, bounded triplet loss on normalised embeddings): label silhouette of the "
            f"test embeddings CL {sil['CL']:.2f}, TCL {sil['TCL']:.2f}, CL + labels "
            f"{sil['CL + labels']:.2f}, TCL + labels {sil['TCL + labels']:.2f}. The paper judges "
            f"Figure 4 by eye (with labels, TCL groups the classes best); here the best-separated "
            f"of the four is {best}.")
    return rows, [note]


# -- TRBM (Figure 5, 13) ---------------------------------------------------------------------------
def _trbm_seed(seed: int, settings: dict[str, Any], image_dataset: str,
               figure: bool) -> dict[str, Any]:
    """One seed of Figure 5: a TRBM with one RBM per class and a standard RBM."""
    classes = settings["classes"]
    dm, source = _image_datamodule(classes, seed, settings["batch_size"], image_dataset,
                                   settings["limit_per_class"])
    x_train, y_train = _split(dm, "train")
    x_test, y_test = _split(dm, "test")
    kwargs = {"hidden_dim": settings["hidden_dim"], "cd_steps": settings["cd_steps"],
              "lr": settings["lr"]}
    trbm = _build("trbm", dm, seed, n_clusters=len(classes), **kwargs)
    _fit(trbm, dm, settings["epochs"])
    rbm = _build("trbm", dm, seed, n_clusters=1, **kwargs)
    _fit(rbm, dm, settings["epochs"])
    ari = _ari(y_train, trbm.train_assignment)
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
                     "assignment ARI train": ari})
    png = _trbm_figure(trbm, rbm, x_test, y_test, classes, settings) if figure else None
    return {"source": source, "rows": rows, "ari": ari, "figure": png}


def _trbm_figure(trbm, rbm, x_test, y_test, classes, settings) -> bytes:

    plt = _pyplot()
    per_class = settings["figure_per_class"]
    chosen = torch.cat([torch.nonzero(y_test == c).flatten()[:per_class]
                        for c in range(len(classes))])
    x = x_test[chosen]
    with torch.no_grad():
        panels = [trbm.scale.to_unit(x)[:, 0],
                  *[trbm.reconstruct_all(x)[:, j, 0] for j in range(trbm.n_clusters)],
                  rbm.reconstruct_all(x)[:, 0, 0]]
    titles = ["input", *[f"TRBM cluster {j + 1}" for j in range(trbm.n_clusters)],
              "standard RBM"]
    fig, axes = plt.subplots(len(panels), 1, figsize=(1.0 * len(chosen), 1.2 * len(panels)))
    for ax, images, title in zip(axes, panels, titles, strict=True):
        ax.imshow(np.concatenate(list(images.numpy()), axis=1), cmap="gray", vmin=0, vmax=1)
        ax.set_ylabel(title, rotation=0, ha="right", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    return png_bytes(fig)


def _trbm_summary(seeds: Sequence[int], per_seed: list[dict], settings: dict[str, Any]
                  ) -> tuple[list[dict], list[str]]:
    seed_rows = [row for r in per_seed for row in r["rows"]]
    own = float(np.mean([r["MSE by its cluster's RBM"] for r in seed_rows]))
    other = float(np.mean([r["MSE by the other RBM(s)"] for r in seed_rows]))
    standard = float(np.mean([r["MSE by a standard RBM"] for r in seed_rows]))
    source = per_seed[0]["source"]
    rows = []
    for digit in settings["classes"]:
        mine = [r for r in seed_rows if r["digit"] == digit]
        row = {"data": f"{source} {settings['classes']}", "digit": digit}
        for key in ("MSE by its cluster's RBM", "MSE by the other RBM(s)",
                    "MSE by a standard RBM", "assignment ARI train"):
            row[f"{key} mean"], row[f"{key} std"] = mean_std([r[key] for r in mine])
        row["seeds"] = len(mine)
        rows.append(row)
    note = (f"TRBM (Figure 5, {source} {settings['classes']}, {settings['hidden_dim']} hidden "
            f"units, CD-{settings['cd_steps']}): assignment ARI "
            f"{_fmt(*mean_std([r['ari'] for r in per_seed]))} over {len(seeds)} seeds; test "
            f"reconstruction MSE (pixels in [0, 1]) {own:.4f} by the RBM of the digit's own "
            f"cluster vs {other:.4f} by the other cluster's RBM (ratio {other / own:.1f}) and "
            f"{standard:.4f} by a standard RBM. The paper's claim that each RBM reconstructs only "
            f"its own class {'held' if other > 2 * own else 'did not clearly hold'} (criterion: "
            "the other RBM's error at least twice its own); the other RBM's reconstructions look "
            "like its own class rather than the paper's 'random noise' (see the figure).")
    return rows, [note]


# -- jobs ------------------------------------------------------------------------------------------
def _worker_init(threads: int) -> None:
    torch.set_num_threads(threads)
    _Quiet().__enter__()  # for the worker's lifetime


def _call(job: tuple) -> Any:
    function, args = job
    return function(*args)


def _run_jobs(jobs: dict[Any, tuple], workers: int, threads: int) -> dict[Any, Any]:
    """Every job ``key -> (function, args)``, in ``workers`` processes (spawned, ``threads``
    torch threads each) or in this one when ``workers <= 1``; the results by key."""
    if workers <= 1 or len(jobs) <= 1:
        return {key: _call(job) for key, job in jobs.items()}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_worker_init,
                             initargs=(threads,)) as pool:
        futures = {key: pool.submit(_call, job) for key, job in jobs.items()}
        return {key: future.result() for key, future in futures.items()}


# -- the suite's function --------------------------------------------------------------------------
def run(seeds: Sequence[int] = (0, 1, 2, 3, 4),
        datasets: Sequence[str] = TABLE_DATASETS,
        epochs: int = 150, image_epochs: int = 60, batch_size: int = 32,
        image_batch_size: int = 64, lr: float = 0.01,
        penalty: float = 0.1, noise_std: float = 0.1, image_dataset: str = "auto",
        digit_classes: Sequence[int] = (0, 1, 2, 3, 4), limit_per_class: int | None = 200,
        tvae: dict[str, Any] | None = None, underestimated: dict[str, Any] | None = None,
        tcl: dict[str, Any] | None = None, trbm: dict[str, Any] | None = None,
        workers: int = 1, torch_threads: int = 1) -> ExperimentOutput:
    """The paper's Figure 2/7 table and its TVAE, TCL, TRBM and under-estimated-k experiments.

    Args:
        seeds: one run per seed of every model (mean and std over them).
        datasets: rows of the table, from :data:`TABLE_DATASETS`.
        epochs, image_epochs: training epochs on the vector sets and on the digits.
        batch_size, image_batch_size, lr: of every AE/TAE/PTAE (Adam, no weight decay), on the
            vector sets and on the digits.
        penalty: :math:`\\lambda` of TAE1/TAE2/PTAE (0.1 in the authors' notebook).
        noise_std: standard deviation of the de-noising noise, in the model's input units.
        image_dataset: ``"auto"`` (MNIST when on disk, else scikit-learn's digits), ``"mnist"``
            or ``"digits"``.
        digit_classes, limit_per_class: the five-digit set (200 training images a class at
            most).
        tvae, underestimated, tcl, trbm: settings of the other experiments (``enabled: false``
            skips one; ``seeds`` caps how many of the seeds it runs).
        workers: processes that run the (dataset, seed) and (experiment, seed) jobs; 1 runs
            them here. Every job seeds itself, so the numbers do not depend on it. The
            processes are spawned: a script that calls ``run`` with ``workers > 1`` needs the
            ``if __name__ == "__main__":`` guard.
        torch_threads: torch's intra-op threads in each process (1: these models are tiny, and
            thread synchronisation costs more than it gains on a shared 2-core machine).

    Returns:
        The tables, figures and notes (see the module docstring).
    """
    tvae = {"enabled": True, "classes": [0, 1, 9], "epochs": 50, "batch_size": 32, "lr": 1e-3,
            "embedding_dim": 2, "hidden_dim": 200, "reconstruction": "bce", "grid_steps": 10,
            "limit_per_class": limit_per_class, **(tvae or {})}
    underestimated = {"enabled": True, "classes": [0, 1, 3, 6, 7, 9], "n_clusters": 2,
                      **(underestimated or {})}
    tcl = {"enabled": True, "classes": list(digit_classes), "epochs": 15, "batch_size": 128,
           "lr": 1e-3, "embedding_dim": 128, "tsne_points": 1000,
           "limit_per_class": limit_per_class, **(tcl or {})}
    trbm = {"enabled": True, "classes": [0, 1], "epochs": 50, "batch_size": 32, "lr": 1e-2,
            "hidden_dim": 64, "cd_steps": 1, "figure_per_class": 8,
            "limit_per_class": limit_per_class, **(trbm or {})}
    settings = {"datasets": list(datasets), "epochs": epochs, "image_epochs": image_epochs,
                "batch_size": batch_size, "image_batch_size": image_batch_size, "lr": lr,
                "penalty": penalty, "noise_std": noise_std, "image_dataset": image_dataset,
                "digit_classes": list(digit_classes), "limit_per_class": limit_per_class}
    seeds = list(seeds)
    under_on = tvae["enabled"] and underestimated["enabled"]

    def seeds_of(part: dict[str, Any]) -> list[int]:
        return seeds[:part.get("seeds", len(seeds))]

    # The slowest jobs first, so that the workers finish together.
    jobs: dict[tuple, tuple] = {}
    if tcl["enabled"]:
        jobs.update({("tcl", s): (_tcl_seed, (s, tcl, image_dataset, s == seeds[0]))
                     for s in seeds_of(tcl)})
    for dataset in sorted(settings["datasets"], key=lambda d: d != "digits5"):
        jobs.update({(dataset, s): (_table_one, (dataset, s, settings)) for s in seeds})
    if tvae["enabled"]:
        jobs.update({("tvae", s): (_tvae_seed, (s, tvae, image_dataset, s == seeds[0]))
                     for s in seeds_of(tvae)})
    if under_on:
        jobs.update({("under", s): (_underestimated_seed,
                                    (s, tvae, underestimated, image_dataset, s == seeds[0]))
                     for s in seeds_of(tvae)})
    if trbm["enabled"]:
        jobs.update({("trbm", s): (_trbm_seed, (s, trbm, image_dataset, s == seeds[0]))
                     for s in seeds_of(trbm)})

    threads = torch.get_num_threads()
    torch.set_num_threads(torch_threads)
    start = time.perf_counter()
    quiet = _Quiet()
    quiet.__enter__()
    try:
        results = _run_jobs(jobs, workers, torch_threads)
    finally:
        quiet.__exit__(None, None, None)
        torch.set_num_threads(threads)
    wall = time.perf_counter() - start

    out = ExperimentOutput()
    if settings["datasets"]:
        rows, summary, infos = _table(results, seeds, settings)
        out.tables["Figure 2/7: clustering and de-noising"] = rows
        out.figures["figure2-7.png"] = _table_figure(summary, infos)
        out.notes += _ordering_notes(summary, infos)
        out.notes += _parameter_and_time_notes(summary, infos, workers)
    parts = [("tvae", tvae["enabled"], "Figure 3: VAE vs TVAE", "tvae-latent-spaces.png",
              lambda s, r: _tvae_summary(s, r, tvae)),
             ("under", under_on, "Figure 11: TVAE with under-estimated k",
              "tvae-underestimated-k.png", lambda s, r: _underestimated_summary(
                  s, r, underestimated)),
             ("tcl", tcl["enabled"], "Figure 4: CL vs TCL", "tcl-tsne.png",
              lambda s, r: _tcl_summary(s, r, tcl)),
             ("trbm", trbm["enabled"], "Figure 5: TRBM reconstructions",
              "trbm-reconstructions.png", lambda s, r: _trbm_summary(s, r, trbm))]
    for key, enabled, title, figure_name, summarise in parts:
        if not enabled:
            continue
        part_seeds = sorted(s for k, s in results if k == key)
        per_seed = [results[(key, s)] for s in part_seeds]
        rows, notes = summarise(part_seeds, per_seed)
        out.tables[title] = rows
        out.notes += notes
        if per_seed[0]["figure"] is not None:
            out.figures[figure_name] = per_seed[0]["figure"]
    out.notes += _departure_notes(settings)
    out.notes.append(f"Wall time of the whole experiment: {wall:.0f} s for {len(seeds)} seed(s), "
                     f"{workers} worker process(es) of {torch_threads} torch thread(s).")
    return out


def _departure_notes(settings: dict[str, Any]) -> list[str]:
    return [
        "Departures from the paper, each for a reason: (1) the data have a fixed held-out test "
        "split (25%) and a 10% validation split; ARI is reported on the training split (the "
        "paper's setting: the learnt S) and on the test split. (2) De-noising: the paper's code "
        "trains separate de-noising AEs on noisy inputs and reports their training loss; here "
        "the clustering models themselves reconstruct noisy *test* inputs (noise std "
        f"{settings['noise_std']} in the model's input units), scored against the clean inputs. "
        f"(3) One optimiser for all models (Adam, lr {settings['lr']}, batch "
        f"{settings['batch_size']} on the vector sets and {settings['image_batch_size']} on the "
        f"digits, {settings['epochs']} and {settings['image_epochs']} epochs, no weight decay; "
        "the authors' AEs used weight decay 0.1 and per-sample steps, they swept lr over "
        "{0.001, 0.01, 0.1}, and trained 200 epochs on MNIST). (4) The five digit "
        "classes come from scikit-learn's 8x8 digits when MNIST is not on disk (about 120 "
        "training images a class instead of 200). (5) The iris and penguins features are "
        "standardised by the datamodules; the generated line sets are used as generated.",
    ]
