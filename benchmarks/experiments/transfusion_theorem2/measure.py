r"""What the ``transfusion_theorem2`` experiment computes: the map of Theorem 2's bound
:math:`\gamma(\rho, \varepsilon)` (:func:`modules.theory.fusion.sharpness_increment_bound`)
and the per-block sharpness of standalone TransFusion models trained on generated
``subspaces`` data (:func:`benchmarks.protocols.fusion.per_layer_fusion`), with each block's
increment :math:`\mathcal{S}(A^{\ell+1}) / \mathcal{S}(A^\ell)` against :math:`\gamma` at the
dataset's measured :math:`\rho`."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.protocols.fusion import layer_affinities, per_layer_fusion
from benchmarks.run.trainer import experiment_trainer
from modules.theory.fusion import delta_and_Delta, sharpness, sharpness_increment_bound

GENERATED = "GENERATED data (subspaces datamodule), not real data"


@dataclass(frozen=True)
class Theorem2Settings:
    """The suite's settings (``benchmarks/transfusion_theorem2.yaml``; no defaults here)."""

    seeds: list[int]
    epochs: int
    eps: list[float]
    n_subspaces: list[int]
    n_samples: int
    ambient_dim: int
    rank: int
    data_seed: int
    batch_size: int
    num_blocks: int
    loss: str
    lr: float
    scores: list[str]
    grid: int


def gamma_map(grid: int) -> dict[str, np.ndarray]:
    """δ, Δ, γ (masked where the bound is vacuous) and the bare formula on a ``grid - 1`` x
    ``grid`` grid of ρ ∈ (0, 1], ε ∈ [0, 0.5] (the paper gives no numeric ranges; ours)."""
    rho = np.linspace(0.0, 1.0, grid)[1:]  # (0, 1]
    eps = np.linspace(0.0, 0.5, grid)
    r, e = np.meshgrid(rho, eps, indexing="ij")  # (rho, eps)
    delta, big_delta = delta_and_Delta(r, e)
    return {"rho": rho, "eps": eps, "delta": delta, "Delta": big_delta,
            "gamma": sharpness_increment_bound(r, e),
            "formula": sharpness_increment_bound(r, e, mask_vacuous=False)}


def summarise_map(m: dict[str, np.ndarray]) -> dict[str, Any]:
    """Cell counts of the map: where the bound applies, its largest γ and where γ ≥ 1."""
    valid = ~np.isnan(m["gamma"])
    i, j = np.unravel_index(np.nanargmax(m["gamma"]), m["gamma"].shape)
    formula_ge_1 = np.nan_to_num(m["formula"], nan=-np.inf) >= 1
    return {"cells": int(m["gamma"].size), "valid_cells": int(valid.sum()),
            "gamma_max": float(m["gamma"][i, j]), "gamma_max_at": (float(m["rho"][i]),
                                                                   float(m["eps"][j])),
            "valid_cells_gamma_ge_1": int((np.nan_to_num(m["gamma"]) >= 1).sum()),
            "formula_cells_ge_1": int(formula_ge_1.sum()),
            "formula_ge_1_with_Delta_le_0": int((formula_ge_1 & (m["Delta"] <= 0)).sum())}


def train_and_measure(cfg: Theorem2Settings, n_subspaces: int, eps: float, seed: int
                      ) -> dict[str, Any]:
    """Train one standalone TransFusion on ``subspaces`` data (``n_subspaces``, noise ``eps``,
    seed ``seed``) and measure every block affinity's sharpness on the test split, per layer
    (:func:`benchmarks.protocols.fusion.per_layer_fusion`) and per batch."""
    import lightning.pytorch as pl

    from datamodules.generated import SubspacesDataModule
    from modules.methods.transfusion import TransFusion

    start = time.perf_counter()
    pl.seed_everything(seed, workers=True, verbose=False)
    # One view and no jitter: the blocks see the generated noisy points as they are, so the
    # noise is exactly the theorem's epsilon (the paper trains its standalone model without
    # augmentation).
    datamodule = SubspacesDataModule(
        n_samples=cfg.n_samples, ambient_dim=cfg.ambient_dim, rank=cfg.rank,
        n_subspaces=n_subspaces, epsilon=eps, data_seed=cfg.data_seed, jitter_std=0.0,
        batch_size=cfg.batch_size, n_views=1, seed=seed)
    rho = datamodule.rho
    model = TransFusion(num_classes=datamodule.num_classes, input_shape=datamodule.input_shape,
                        backbone="flatten", num_blocks=cfg.num_blocks, loss=cfg.loss,
                        optimizer="adam", lr=cfg.lr)
    trainer = experiment_trainer(cfg.epochs, limit_val_batches=0)
    trainer.fit(model, datamodule=datamodule)
    train_seconds = time.perf_counter() - start
    train_loss = float(trainer.callback_metrics.get("train_loss", float("nan")))
    model.eval()
    loader = datamodule.test_dataloader()  # unshuffled, the training batch size
    layers = {s: per_layer_fusion(model, loader, scores=s) for s in cfg.scores}
    # Per-batch sharpness of every block's affinity, for the increments of one batch's pass.
    per_batch = {s: [] for s in cfg.scores}
    for x, y in loader:
        _, affinities = layer_affinities(model, x)
        for s in cfg.scores:
            per_batch[s].append([sharpness(a, y, s) for a in affinities])
    return {"n_subspaces": n_subspaces, "eps": eps, "seed": seed, "rho": rho,
            "source": datamodule.source, "train_seconds": train_seconds,
            "train_loss": train_loss, "test_size": len(loader.dataset),
            "batches": len(per_batch[cfg.scores[0]]), "layers": layers,
            "per_batch": {s: np.asarray(v, dtype=np.float64) for s, v in per_batch.items()},
            "measure_seconds": time.perf_counter() - start - train_seconds}


def increments(per_batch: np.ndarray) -> np.ndarray:
    """(batches, L) sharpness -> (batches, L - 1) ratios S(A^{l+1}) / S(A^l) within a batch."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return per_batch[:, 1:] / per_batch[:, :-1]


def layer_rows(cfg: Theorem2Settings, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per subspace count, noise level, seed, score kind and layer: ρ, δ, Δ and γ of the
    dataset, the layer's silhouette and sharpness, and the block's increment against γ
    (``increment_ge_gamma``: None where it cannot be compared, γ vacuous or no batch defined)."""
    rows = []
    for run in runs:
        delta, big_delta = delta_and_Delta(run["rho"], run["eps"])
        gamma = sharpness_increment_bound(run["rho"], run["eps"])
        for s in cfg.scores:
            inc = increments(run["per_batch"][s])  # (batches, L - 1)
            for row in run["layers"][s]:
                layer = row["layer"]
                values = inc[:, layer - 1] if 1 <= layer <= inc.shape[1] else np.array([])
                defined = values[~np.isnan(values)]
                inc_min = float(defined.min()) if defined.size else float("nan")
                inc_median = float(np.median(defined)) if defined.size else float("nan")
                respects = (None if not defined.size or math.isnan(gamma)
                            else bool(inc_min >= gamma))
                rows.append({
                    "data": "generated", "n_subspaces": run["n_subspaces"], "eps": run["eps"],
                    "rho": round(run["rho"], 6), "delta": round(delta, 6),
                    "Delta": round(big_delta, 6), "gamma": gamma, "seed": run["seed"],
                    "scores": s, "layer": layer, "silhouette_cosine": row["silhouette"],
                    "sharpness_min": row["sharpness_min"],
                    "sharpness_median": row["sharpness_median"],
                    # what a sharpness of 0 hides: the pairs on the wrong side of 0
                    "same_cluster_nonpositive_share": row["same_cluster_nonpositive_share"],
                    "different_cluster_positive_share": row["different_cluster_positive_share"],
                    "increment_min": inc_min, "increment_median": inc_median,
                    "increment_batches_defined": int(defined.size),
                    "increment_ge_gamma": respects, "test_batches": run["batches"],
                    "test_size": run["test_size"], "epochs": cfg.epochs,
                    "train_loss": run["train_loss"],
                    "train_seconds": round(run["train_seconds"], 2)})
    return rows
