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
- **TVAE on Fashion-MNIST** (appendix C, Figure 10: "same setup as Figure 3, however for FMNIST
  with BCE loss and CNN encoder and decoder"): the same VAE and TVAE, with the suite's classes
  and the CNN shared encoder and decoder (``encoder: cnn``); skipped with a one-line note when
  the dataset's files are missing.
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

import time
from collections.abc import Sequence
from typing import Any

from benchmarks.experiments.kit import QuietLightning, TorchThreads, run_jobs, section
from benchmarks.experiments.tensorized.figures import table_figure
from benchmarks.experiments.tensorized.seeds import (
    IMAGE_DATASETS,
    table_seed,
    tcl_seed,
    trbm_seed,
    tvae_seed,
    underestimated_seed,
)
from benchmarks.experiments.tensorized.tables import (
    departure_notes,
    fashion_departure_note,
    ordering_notes,
    parameter_and_time_notes,
    table_rows,
    tcl_summary,
    trbm_summary,
    tvae_summary,
    underestimated_summary,
)
from benchmarks.infra.errors import ConfigError
from benchmarks.suites.experiment import ExperimentOutput

#: The keys of the suite's nested settings (every one set by the suite file; null skips a part).
TVAE_KEYS = ("classes", "epochs", "batch_size", "lr", "embedding_dim", "hidden_dim",
             "reconstruction", "encoder", "grid_steps")
#: Figure 10's part: the TVAE's settings and the image data it runs on (a name of
#: :data:`~.seeds.IMAGE_DATASETS`).
TVAE_FASHION_KEYS = ("dataset", *TVAE_KEYS)
UNDERESTIMATED_KEYS = ("classes", "n_clusters", "epochs")
TCL_KEYS = ("classes", "epochs", "batch_size", "lr", "embedding_dim", "tsne_points")
TRBM_KEYS = ("classes", "epochs", "batch_size", "lr", "hidden_dim", "cd_steps",
             "figure_per_class")


def run(seeds: Sequence[int], datasets: Sequence[str], epochs: int, image_epochs: int,
        batch_size: int, image_batch_size: int, lr: float, penalty: float, noise_std: float,
        image_dataset: str, digit_classes: Sequence[int], limit_per_class: int | None,
        tvae: dict[str, Any] | None, tvae_fashion: dict[str, Any] | None,
        underestimated: dict[str, Any] | None, tcl: dict[str, Any] | None,
        trbm: dict[str, Any] | None, workers: int, torch_threads: int) -> ExperimentOutput:
    """The paper's Figure 2/7 table and its TVAE (Figures 3 and 10), TCL, TRBM and
    under-estimated-k experiments. Every setting comes from the suite file
    (``benchmarks/tensorized.yaml``).

    Args:
        seeds: one run per seed of every model (mean and sample std over them).
        datasets: rows of the table, from :data:`~.seeds.TABLE_DATASETS`.
        epochs, image_epochs: training epochs on the vector sets and on the digits.
        batch_size, image_batch_size, lr: of every AE/TAE/PTAE (Adam, no weight decay), on the
            vector sets and on the digits.
        penalty: :math:`\\lambda` of TAE1/TAE2/PTAE (0.1 in the authors' notebook).
        noise_std: standard deviation of the de-noising noise, in the model's input units.
        image_dataset: of every part but Figure 10's: ``"auto"`` (MNIST when on disk, else
            scikit-learn's digits) or a name of :data:`~.seeds.IMAGE_DATASETS` (``"mnist"``,
            ``"digits"``, ``"fashionmnist"``), whose missing files are an error.
        digit_classes, limit_per_class: the five-digit set (``limit_per_class`` training images
            a class at most, in every part).
        tvae, tvae_fashion, underestimated, tcl, trbm: settings of the other experiments (the
            keys of :data:`TVAE_KEYS`, :data:`TVAE_FASHION_KEYS`, :data:`UNDERESTIMATED_KEYS`,
            :data:`TCL_KEYS` and :data:`TRBM_KEYS`); null skips one (the under-estimated k
            needs ``tvae``'s model settings too). ``tvae_fashion`` runs on its own
            ``dataset``; when that dataset's files are missing the part is skipped with a note.
        workers: processes that run the (dataset, seed) and (experiment, seed) jobs; 1 runs
            them here. Every job seeds itself, so the numbers do not depend on it. The
            processes are spawned: a script that calls ``run`` with ``workers > 1`` needs the
            ``if __name__ == "__main__":`` guard.
        torch_threads: torch's intra-op threads in each process (1: these models are tiny, and
            thread synchronisation costs more than it gains on a shared 2-core machine).

    Returns:
        The tables, figures and notes (see the package docstring).
    """
    def part(given: dict[str, Any] | None, keys: Sequence[str], name: str
             ) -> dict[str, Any] | None:
        if given is None:
            return None
        return {**section(given, keys, f"settings: {name}"), "limit_per_class": limit_per_class}

    tvae = part(tvae, TVAE_KEYS, "tvae")
    tvae_fashion = part(tvae_fashion, TVAE_FASHION_KEYS, "tvae_fashion")
    if tvae_fashion is not None and tvae_fashion["dataset"] not in IMAGE_DATASETS:
        raise ConfigError(f"settings: tvae_fashion: dataset must be one of "
                          f"{', '.join(IMAGE_DATASETS)}, got {tvae_fashion['dataset']!r}")
    underestimated = part(underestimated, UNDERESTIMATED_KEYS, "underestimated")
    tcl = part(tcl, TCL_KEYS, "tcl")
    trbm = part(trbm, TRBM_KEYS, "trbm")
    settings = {"datasets": list(datasets), "epochs": epochs, "image_epochs": image_epochs,
                "batch_size": batch_size, "image_batch_size": image_batch_size, "lr": lr,
                "penalty": penalty, "noise_std": noise_std, "image_dataset": image_dataset,
                "digit_classes": list(digit_classes), "limit_per_class": limit_per_class}
    seeds = list(seeds)
    under_on = tvae is not None and underestimated is not None

    # The slowest jobs first, so that the workers finish together.
    jobs: dict[tuple, tuple] = {}
    if tvae_fashion is not None:  # CNNs on 28x28 images: the slowest part
        jobs.update({("tvae_fashion", s): (tvae_seed, (s, tvae_fashion, tvae_fashion["dataset"],
                                                       s == seeds[0], True))
                     for s in seeds})
    if tcl is not None:
        jobs.update({("tcl", s): (tcl_seed, (s, tcl, image_dataset, s == seeds[0]))
                     for s in seeds})
    for dataset in sorted(settings["datasets"], key=lambda d: d != "digits5"):
        jobs.update({(dataset, s): (table_seed, (dataset, s, settings)) for s in seeds})
    if tvae is not None:
        jobs.update({("tvae", s): (tvae_seed, (s, tvae, image_dataset, s == seeds[0], False))
                     for s in seeds})
    if under_on:
        jobs.update({("under", s): (underestimated_seed,
                                    (s, tvae, underestimated, image_dataset, s == seeds[0]))
                     for s in seeds})
    if trbm is not None:
        jobs.update({("trbm", s): (trbm_seed, (s, trbm, image_dataset, s == seeds[0]))
                     for s in seeds})

    start = time.perf_counter()
    with TorchThreads(torch_threads), QuietLightning():
        results = run_jobs(jobs, workers, torch_threads)
    wall = time.perf_counter() - start

    out = ExperimentOutput()
    if settings["datasets"]:
        rows, summary, infos = table_rows(results, seeds, settings)
        out.tables["Figure 2/7: clustering and de-noising"] = rows
        out.figures["figure2-7.png"] = table_figure(summary, infos)
        out.notes += ordering_notes(summary, infos)
        out.notes += parameter_and_time_notes(summary, infos, workers)
    fashion_title = (f"Figure 10: VAE vs TVAE on {tvae_fashion['dataset']}"
                     if tvae_fashion is not None else "")

    def fashion_summary(part_seeds: list[int], per_seed: list[dict]) -> tuple[list, list]:
        rows, notes = tvae_summary(part_seeds, per_seed, tvae_fashion, "Figure 10")
        return rows, [*notes, fashion_departure_note(tvae_fashion)]

    parts = [("tvae", tvae is not None, "Figure 3: VAE vs TVAE", "tvae-latent-spaces.png",
              lambda s, r: tvae_summary(s, r, tvae, "Figure 3")),
             ("tvae_fashion", tvae_fashion is not None, fashion_title,
              "tvae-fashion-latent-spaces.png", fashion_summary),
             ("under", under_on, "Figure 11: TVAE with under-estimated k",
              "tvae-underestimated-k.png", lambda s, r: underestimated_summary(
                  s, r, underestimated)),
             ("tcl", tcl is not None, "Figure 4: CL vs TCL", "tcl-tsne.png",
              lambda s, r: tcl_summary(s, r, tcl)),
             ("trbm", trbm is not None, "Figure 5: TRBM reconstructions",
              "trbm-reconstructions.png", lambda s, r: trbm_summary(s, r, trbm))]
    for key, enabled, title, figure_name, summarise in parts:
        if not enabled:
            continue
        part_seeds = sorted(s for k, s in results if k == key)
        per_seed = [results[(key, s)] for s in part_seeds]
        skipped = [r["skipped"] for r in per_seed if "skipped" in r]
        if skipped:  # the data are missing (the same files for every seed)
            out.notes.append(f"{title}: skipped, {skipped[0]}")
            continue
        rows, notes = summarise(part_seeds, per_seed)
        out.tables[title] = rows
        out.notes += notes
        if per_seed[0]["figure"] is not None:
            out.figures[figure_name] = per_seed[0]["figure"]
    out.notes += departure_notes(settings)
    out.notes.append(f"Wall time of the whole experiment: {wall:.0f} s for {len(seeds)} seed(s), "
                     f"{workers} worker process(es) of {torch_threads} torch thread(s).")
    return out
