"""The tables and notes of the ``transfusion_theorem2`` experiment, from the map's summary and
the per-layer rows of :mod:`.measure`."""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.experiments.transfusion_theorem2.measure import GENERATED, Theorem2Settings

#: The table titles, in the report's order.
BOUND_TABLE = "The bound γ(ρ, ε) over the map (Figure 3)"
LAYER_TABLE = "Per-layer sharpness against the bound (means over seeds)"
SEED_TABLE = "Per-layer rows: one per subspace count, ε, seed, scores and layer"


def finite_mean(values: list[float]) -> float:
    """The mean of the values that are not NaN (a ratio is NaN where it is undefined); NaN
    when none is left.

    >>> finite_mean([1.0, float("nan"), 3.0])
    2.0
    """
    finite = [v for v in values if v == v]
    return statistics.fmean(finite) if finite else float("nan")


def bound_table(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row: the map's cells, where Δ > 0, the largest γ there and the cells with γ ≥ 1."""
    return [{
        "cells": summary["cells"], "cells where Δ > 0": summary["valid_cells"],
        "max γ where Δ > 0": summary["gamma_max"],
        "at (ρ, ε)": "({:.3g}, {:.3g})".format(*summary["gamma_max_at"]),
        "cells with γ ≥ 1 where Δ > 0": summary["valid_cells_gamma_ge_1"],
        "formula ≥ 1 anywhere": summary["formula_cells_ge_1"],
        "of those with Δ ≤ 0": summary["formula_ge_1_with_Delta_le_0"]}]


def layer_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per score kind, subspace count, noise level and layer: means over the seeds."""
    table = []
    groups = sorted({(r["scores"], r["n_subspaces"], r["eps"], r["layer"]) for r in rows})
    for scores, kappa, eps, layer in groups:
        cell = [r for r in rows if (r["scores"], r["n_subspaces"], r["eps"], r["layer"])
                == (scores, kappa, eps, layer)]
        judged = [r for r in cell if r["increment_ge_gamma"] is not None]
        held = sum(r["increment_ge_gamma"] for r in judged)
        table.append({
            "scores": scores, "subspaces": kappa, "ε": eps, "layer": layer,
            "ρ mean": finite_mean([r["rho"] for r in cell]),
            "γ mean": finite_mean([r["gamma"] for r in cell]),
            "silhouette mean": finite_mean([r["silhouette_cosine"] for r in cell]),
            "sharpness median, mean": finite_mean([r["sharpness_median"] for r in cell]),
            "same-cluster A ≤ 0, mean share": finite_mean(
                [r["same_cluster_nonpositive_share"] for r in cell]),
            "different-cluster A > 0, mean share": finite_mean(
                [r["different_cluster_positive_share"] for r in cell]),
            "increment min, mean": finite_mean([r["increment_min"] for r in cell]),
            "seeds where increment ≥ γ": f"{held}/{len(judged)}" if judged else "n/a",
            "seeds": len(cell)})
    return table


def verdict_notes(cfg: Theorem2Settings, rows: list[dict[str, Any]]) -> list[str]:
    """Whether the measured increments respect the bound, per score kind and block."""
    notes = ["A (seed, κ, ε, block) cell respects the bound when the block's increment "
             "S(A^ℓ)/S(A^(ℓ-1)) is ≥ γ in every test batch where it is defined (block ℓ = 1 .. "
             f"{cfg.num_blocks - 1}; block {cfg.num_blocks - 1} is the last block, the one the "
             "loss trains)."]
    for s in cfg.scores:
        judged = [r for r in rows if r["scores"] == s and r["increment_ge_gamma"] is not None]
        undefined = [r for r in rows if r["scores"] == s and 1 <= r["layer"] < cfg.num_blocks
                     and r["increment_ge_gamma"] is None]
        if not judged:
            notes.append(f"`{s}` scores: not comparable: no block increment could be compared "
                         f"with γ ({len(undefined)} cells: γ vacuous or the ratio undefined, "
                         "0/0, in every batch).")
            continue
        held = sum(r["increment_ge_gamma"] for r in judged)
        per_block = []
        for layer in range(1, cfg.num_blocks):
            cells = [r for r in judged if r["layer"] == layer]
            per_block.append(f"block {layer}: {sum(r['increment_ge_gamma'] for r in cells)}/"
                             f"{len(cells)}")
        notes.append(f"`{s}` scores: the bound holds in {held} of {len(judged)} comparable "
                     f"cells ({'; '.join(per_block)}); {len(undefined)} cells not comparable "
                     "(γ vacuous or the ratio undefined in every batch).")
    return notes


def setup_notes(cfg: Theorem2Settings) -> list[str]:
    """The data, the model and the reading of the numbers."""
    return [
        f"Data: {GENERATED}, {cfg.n_samples} points in R^{cfg.ambient_dim} (rank {cfg.rank}, "
        f"data_seed {cfg.data_seed}, fixed across seeds; the seed draws the initialisation, the "
        "validation split and the shuffle), one view, no jitter.",
        f"Model: standalone TransFusion, {cfg.num_blocks} blocks, {cfg.loss} loss, Adam lr "
        f"{cfg.lr:g}, {cfg.epochs} epoch{'s' * (cfg.epochs != 1)}, batch {cfg.batch_size}; "
        "sharpness per test batch.",
        f"Map grid: ρ ∈ (0, 1] × ε ∈ [0, 0.5], {cfg.grid - 1} × {cfg.grid} points (the paper "
        "gives no numeric ranges; ours). γ is NaN where Δ ≤ 0 (the bound is vacuous) and at "
        "ε = 0.",
    ]


def reading_notes() -> list[str]:
    return [
        "Theorem 2 is an existence statement about some (W_Q, W_K): a trained model need not "
        "attain the bound, and training only shapes the last block's affinity through the loss.",
        "On rank-1 subspace data a cluster holds x and −x, and a bilinear score flips sign with "
        "either point, so with `relu` scores S = 0 (or NaN/inf) is structural; `square` scores "
        "(sign-blind, as the loss) give finite values. The share columns count the pairs that "
        "make it so: same-cluster pairs with A ≤ 0 (fused with weight 0) and different-cluster "
        "pairs with A > 0, per test batch, averaged. Increments: x/0 = inf, 0/0 and inf/inf "
        "undefined (left out; the per-seed table counts the defined batches).",
    ]
