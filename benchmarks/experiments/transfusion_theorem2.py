r"""TransFusion's Theorem 2 (Liu et al., "TransFusion: Contrastive Learning with Attention
Layers", section 3.2, Figure 3) as an experiment suite: the map of the sharpness-increment bound
:math:`\gamma(\rho, \varepsilon)` and the per-block sharpness increments that standalone
TransFusion models trained on *generated* ``subspaces`` data reach, compared with
:math:`\gamma` at each dataset's measured :math:`\rho`.

The computation is :func:`benchmarks.transfusion_theorem2.compute` (also behind the script
``python -m benchmarks.transfusion_theorem2``, which writes its own ``report.md``); this function
turns it into the tables, notes and figures of an experiment report.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from benchmarks.suites.experiment import ExperimentOutput
from benchmarks.transfusion_theorem2 import (
    GENERATED,
    Config,
    compute,
    gamma_map_png,
    sharpness_png,
    verdict_lines,
)


def _mean(values: list[float]) -> float:
    finite = [v for v in values if v == v]  # NaN where a ratio is undefined
    return statistics.fmean(finite) if finite else float("nan")


def run(seeds: Sequence[int], epochs: int | None = None, eps: list[float] | None = None,
        n_subspaces: list[int] | None = None, n_samples: int | None = None,
        ambient_dim: int | None = None, rank: int | None = None, data_seed: int | None = None,
        batch_size: int | None = None, num_blocks: int | None = None, loss: str | None = None,
        lr: float | None = None, scores: list[str] | None = None, grid: int | None = None,
        threads: int | None = None) -> ExperimentOutput:
    """The γ map and the per-layer table over ``seeds`` (one trained model per seed, noise
    level and number of subspaces). Every other argument is the field of
    :class:`benchmarks.transfusion_theorem2.Config` of the same name; None keeps its default.
    """
    given = {k: v for k, v in locals().items() if k != "seeds" and v is not None}
    cfg = Config(seeds=list(seeds), **given)
    result = compute(cfg)
    rows, summary = result["rows"], result["map_summary"]
    output = ExperimentOutput()
    output.tables["The bound γ(ρ, ε) over the map (Figure 3)"] = [{
        "cells": summary["cells"], "cells where Δ > 0": summary["valid_cells"],
        "max γ where Δ > 0": summary["gamma_max"],
        "at (ρ, ε)": "({:.3g}, {:.3g})".format(*summary["gamma_max_at"]),
        "cells with γ ≥ 1 where Δ > 0": summary["valid_cells_gamma_ge_1"],
        "formula ≥ 1 anywhere": summary["formula_cells_ge_1"],
        "of those with Δ ≤ 0": summary["formula_ge_1_with_Delta_le_0"]}]
    table = []
    groups = sorted({(r["scores"], r["n_subspaces"], r["eps"], r["layer"]) for r in rows})
    for scores, kappa, eps, layer in groups:
        cell = [r for r in rows if (r["scores"], r["n_subspaces"], r["eps"], r["layer"])
                == (scores, kappa, eps, layer)]
        judged = [r for r in cell if r["increment_ge_gamma"]]
        held = sum(r["increment_ge_gamma"] == "True" for r in judged)
        table.append({
            "scores": scores, "subspaces": kappa, "ε": eps, "layer": layer,
            "ρ mean": _mean([r["rho"] for r in cell]), "γ mean": _mean([r["gamma"] for r in cell]),
            "silhouette mean": _mean([r["silhouette_cosine"] for r in cell]),
            "sharpness median, mean": _mean([r["sharpness_median"] for r in cell]),
            "increment min, mean": _mean([r["increment_min"] for r in cell]),
            "seeds where increment ≥ γ": f"{held}/{len(judged)}" if judged else "n/a",
            "seeds": len(cell)})
    output.tables["Per-layer sharpness against the bound (means over seeds)"] = table
    output.notes.append(f"Data: {GENERATED}, {cfg.n_samples} points in R^{cfg.ambient_dim}.")
    output.notes.append(
        f"Model: standalone TransFusion, {cfg.num_blocks} blocks, {cfg.loss} loss, Adam lr "
        f"{cfg.lr:g}, {cfg.epochs} epoch{'s' * (cfg.epochs != 1)}, batch {cfg.batch_size}; "
        "sharpness per test batch.")
    output.notes.extend(line.lstrip("- ").replace("**", "")
                        for line in verdict_lines(cfg, rows)[2:] if line)
    output.notes.append(
        "Theorem 2 is an existence statement about some (W_Q, W_K): a trained model need not "
        "attain the bound, and training only shapes the last block's affinity through the loss.")
    output.figures["gamma_map.png"] = gamma_map_png(result["map"])
    output.figures["sharpness_per_layer.png"] = sharpness_png(cfg, rows)
    return output
