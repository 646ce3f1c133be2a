r"""TransFusion's Theorem 2: the sharpness-increment map :math:`\gamma(\rho, \varepsilon)` of its
Figure 3 beside the per-layer sharpness a trained TransFusion reaches on ``subspaces`` data.

Liu et al., "TransFusion: Contrastive Learning with Attention Layers", section 3.2: for noisy
points near a union of subspaces (eq. 6's :math:`\rho`, noise :math:`x^\top\tilde x \ge
1-\varepsilon`), Theorem 2 says there *exist* :math:`(W_Q^*, W_K^*)` with which every block
multiplies the sharpness (Definition 1) of its affinity by at least :math:`\gamma(\rho,
\varepsilon)`. This script

1. draws the map of :math:`\gamma` over :math:`\rho \in (0, 1]`, :math:`\varepsilon \in [0,
   0.5]` (the paper's text gives no numeric ranges for Figure 3; these are ours) with its
   :math:`\gamma \ge 1` contour, once where the bound holds (:math:`\Delta > 0`) and once as the
   bare formula everywhere (:func:`modules.theory.fusion.sharpness_increment_bound`);
2. trains a standalone TransFusion (``backbone="flatten"``, 5 blocks, ``jsd_sq`` loss, Adam)
   with Lightning on the CPU on *generated* ``subspaces`` data for a few noise levels, numbers of
   subspaces and seeds, measures the sharpness of every block's affinity on the test split per
   batch (:func:`benchmarks.protocols.fusion.per_layer_fusion`), and compares the measured
   per-block increments :math:`\mathcal{S}(A^{\ell+1}) / \mathcal{S}(A^\ell)` with
   :math:`\gamma` at the dataset's measured :math:`\rho`.

A trained model need not attain the bound: Theorem 2 is an existence statement about some
:math:`(W_Q, W_K)`, and training only shapes the last block's affinity through the loss.

Outputs in ``--out`` (each written atomically): ``gamma_map.png`` and ``gamma_map.csv``,
``layers.csv`` (one row per subspace count, noise, seed, score kind and layer),
``sharpness_per_layer.png``, ``report.md`` and ``config.json`` (the resolved configuration).

Usage::

    python -m benchmarks.transfusion_theorem2 --out results/transfusion-theorem2
    python -m benchmarks.transfusion_theorem2 --epochs 1 --seeds 0 --eps 0.05 --n-subspaces 2
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import math
import statistics
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.infra.atomic import write_atomic
from benchmarks.infra.environment import describe_machine, machine
from benchmarks.infra.plots import png_bytes, pyplot
from benchmarks.protocols.fusion import layer_affinities, per_layer_fusion
from modules.theory.fusion import delta_and_Delta, sharpness, sharpness_increment_bound

GENERATED = "GENERATED data (subspaces datamodule), not real data"


@dataclass
class Config:
    out: str = "results/transfusion-theorem2"
    epochs: int = 30
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    eps: list[float] = field(default_factory=lambda: [0.01, 0.05, 0.1, 0.3])
    n_subspaces: list[int] = field(default_factory=lambda: [2, 4])
    # subspaces data: the datamodule's defaults (m = 16, rank 1) but 1600 points, so the test
    # split (25%) holds 4 full batches of 100.
    n_samples: int = 1600
    ambient_dim: int = 16
    rank: int = 1
    data_seed: int = 0
    batch_size: int = 100
    num_blocks: int = 5  # the paper's FashionMNIST model (section 5.1)
    loss: str = "jsd_sq"  # eq. 4-5
    lr: float = 2e-3  # Adam, per 256 samples (scaled to the batch by RepresentationModule)
    scores: list[str] = field(default_factory=lambda: ["relu", "square"])
    grid: int = 201  # map resolution per axis
    threads: int = 1  # tiny matrices: intra-op threads only add spin-waits


def parse_args(argv: list[str] | None) -> Config:
    defaults = Config()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=defaults.out)
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--seeds", type=int, nargs="+", default=defaults.seeds)
    parser.add_argument("--eps", type=float, nargs="+", default=defaults.eps,
                        help="noise levels epsilon of the subspaces data")
    parser.add_argument("--n-subspaces", type=int, nargs="+", default=defaults.n_subspaces)
    parser.add_argument("--n-samples", type=int, default=defaults.n_samples)
    parser.add_argument("--ambient-dim", type=int, default=defaults.ambient_dim)
    parser.add_argument("--rank", type=int, default=defaults.rank)
    parser.add_argument("--data-seed", type=int, default=defaults.data_seed)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--num-blocks", type=int, default=defaults.num_blocks)
    parser.add_argument("--loss", default=defaults.loss)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--scores", nargs="+", default=defaults.scores,
                        choices=["relu", "raw", "square"])
    parser.add_argument("--grid", type=int, default=defaults.grid)
    parser.add_argument("--threads", type=int, default=defaults.threads)
    args = parser.parse_args(argv)
    return Config(**{k.replace("-", "_"): v for k, v in vars(args).items()})


# -- (1) the map of Figure 3 ---------------------------------------------------------------------
def gamma_map(grid: int) -> dict[str, np.ndarray]:
    rho = np.linspace(0.0, 1.0, grid)[1:]  # (0, 1]
    eps = np.linspace(0.0, 0.5, grid)
    r, e = np.meshgrid(rho, eps, indexing="ij")  # (rho, eps)
    delta, big_delta = delta_and_Delta(r, e)
    return {"rho": rho, "eps": eps, "delta": delta, "Delta": big_delta,
            "gamma": sharpness_increment_bound(r, e),
            "formula": sharpness_increment_bound(r, e, mask_vacuous=False)}


def summarise_map(m: dict[str, np.ndarray]) -> dict[str, Any]:
    valid = ~np.isnan(m["gamma"])
    i, j = np.unravel_index(np.nanargmax(m["gamma"]), m["gamma"].shape)
    formula_ge_1 = np.nan_to_num(m["formula"], nan=-np.inf) >= 1
    return {"cells": int(m["gamma"].size), "valid_cells": int(valid.sum()),
            "gamma_max": float(m["gamma"][i, j]), "gamma_max_at": (float(m["rho"][i]),
                                                                   float(m["eps"][j])),
            "valid_cells_gamma_ge_1": int((np.nan_to_num(m["gamma"]) >= 1).sum()),
            "formula_cells_ge_1": int(formula_ge_1.sum()),
            "formula_ge_1_with_Delta_le_0": int((formula_ge_1 & (m["Delta"] <= 0)).sum())}


def gamma_map_png(m: dict[str, np.ndarray]) -> bytes:
    plt = pyplot()
    from matplotlib.colors import LogNorm

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    extent = dict(shading="auto")
    ax = axes[0]
    mesh = ax.pcolormesh(m["eps"], m["rho"], m["gamma"], cmap="viridis", **extent)
    fig.colorbar(mesh, ax=ax, label=r"$\gamma$")
    ax.contour(m["eps"], m["rho"], m["Delta"], levels=[0.0], colors="white", linewidths=1.2)
    if np.nanmax(m["gamma"]) >= 1:
        ax.contour(m["eps"], m["rho"], m["gamma"], levels=[1.0], colors="red")
    ax.set_title(r"Theorem 2's $\gamma(\rho,\varepsilon)$ where $\Delta>0$ (grey: vacuous)"
                 f"\nmax {np.nanmax(m['gamma']):.3f}: "
                 + (r"$\gamma\geq1$ nowhere" if np.nanmax(m["gamma"]) < 1 else r"red: $\gamma=1$"),
                 fontsize=10)
    ax.set_facecolor("0.8")
    positive = np.where(m["formula"] > 0, m["formula"], np.nan)
    ax = axes[1]
    mesh = ax.pcolormesh(m["eps"], m["rho"], positive, cmap="magma",
                         norm=LogNorm(vmin=1e-3, vmax=max(1.0, np.nanmax(positive))), **extent)
    fig.colorbar(mesh, ax=ax, label=r"bare formula $\gamma$ (log; white: $\leq 0$)")
    ax.contour(m["eps"], m["rho"], np.nan_to_num(m["formula"], nan=-1.0), levels=[1.0],
               colors="cyan", linewidths=1.5)
    ax.contour(m["eps"], m["rho"], m["Delta"], levels=[0.0], colors="lime", linewidths=1.2,
               linestyles="--")
    ax.set_title(r"the formula everywhere: cyan $\gamma=1$, dashed green $\Delta=0$"
                 "\n" r"($\gamma\geq1$ only where $\Delta\leq0$, i.e. where it is vacuous)",
                 fontsize=10)
    for ax in axes:
        ax.set_xlabel(r"noise $\varepsilon$")
        ax.set_ylabel(r"$\rho$ (eq. 6)")
    fig.suptitle("TransFusion Theorem 2 / Figure 3 (analytic, no data)", fontsize=11)
    return png_bytes(fig, dpi=120)


def gamma_map_csv(m: dict[str, np.ndarray], step: int) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["rho", "eps", "delta", "Delta", "gamma", "formula_unmasked"])
    for i in range(0, len(m["rho"]), step):
        for j in range(0, len(m["eps"]), step):
            writer.writerow([f"{m['rho'][i]:.4f}", f"{m['eps'][j]:.4f}"]
                            + [f"{m[k][i, j]:.6g}" for k in ("delta", "Delta", "gamma",
                                                             "formula")])
    return out.getvalue()


# -- (2) the measurement -------------------------------------------------------------------------
def train_and_measure(cfg: Config, n_subspaces: int, eps: float, seed: int) -> dict[str, Any]:
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
    trainer = pl.Trainer(max_epochs=cfg.epochs, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0,
                         num_sanity_val_steps=0)
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


def _mean_std(values: list[float]) -> str:
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return "nan"
    if len(finite) == 1 or any(math.isinf(v) for v in finite):
        return ", ".join(_fmt(v) for v in finite) if len(finite) > 1 else _fmt(finite[0])
    return f"{_fmt(statistics.mean(finite))} ± {_fmt(statistics.stdev(finite))}"


def _fmt(v: float) -> str:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return str(v)
    return f"{v:.3g}"


def layer_rows(cfg: Config, runs: list[dict[str, Any]], env_line: dict[str, str]
               ) -> list[dict[str, Any]]:
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
                respects = ("" if not defined.size or math.isnan(gamma)
                            else str(bool(inc_min >= gamma)))
                rows.append({
                    "data": "generated", "n_subspaces": run["n_subspaces"], "eps": run["eps"],
                    "rho": round(run["rho"], 6), "delta": round(delta, 6),
                    "Delta": round(big_delta, 6), "gamma": gamma, "seed": run["seed"],
                    "scores": s, "layer": layer, "silhouette_cosine": row["silhouette"],
                    "sharpness_min": row["sharpness_min"],
                    "sharpness_median": row["sharpness_median"],
                    "increment_min": inc_min, "increment_median": inc_median,
                    "increment_batches_defined": int(defined.size),
                    "increment_ge_gamma": respects, "test_batches": run["batches"],
                    "test_size": run["test_size"], "epochs": cfg.epochs,
                    "n_seeds": len(cfg.seeds), "train_loss": run["train_loss"],
                    "train_seconds": round(run["train_seconds"], 2), **env_line})
    return rows


def rows_csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    return out.getvalue()


def sharpness_png(cfg: Config, rows: list[dict[str, Any]]) -> bytes:
    plt = pyplot()

    kappas = sorted({r["n_subspaces"] for r in rows})
    columns = [*cfg.scores, "silhouette"]
    fig, axes = plt.subplots(len(kappas), len(columns), squeeze=False,
                             figsize=(4.2 * len(columns), 3.4 * len(kappas)),
                             constrained_layout=True)
    colours = plt.cm.viridis(np.linspace(0, 0.85, len(cfg.eps)))
    for a, kappa in enumerate(kappas):
        for b, column in enumerate(columns):
            ax = axes[a, b]
            not_shown, any_shown = [], False
            for eps, colour in zip(cfg.eps, colours, strict=True):
                score = cfg.scores[0] if column == "silhouette" else column
                selected = [r for r in rows if r["n_subspaces"] == kappa and r["eps"] == eps
                            and r["scores"] == score]
                if not selected:
                    continue
                gamma = selected[0]["gamma"]
                if column == "silhouette":
                    layers = sorted({r["layer"] for r in selected})
                    values = [np.nanmean([r["silhouette_cosine"] for r in selected
                                          if r["layer"] == layer]) for layer in layers]
                    ax.plot(layers, values, "o-", color=colour, label=f"ε={eps}")
                    continue
                layers = sorted({r["layer"] for r in selected})[:-1]  # last: no affinity
                # Median over seeds of each seed's median over batches (values span decades).
                values = np.array([np.nanmedian([r["sharpness_median"] for r in selected
                                                 if r["layer"] == layer]) for layer in layers])
                shown = values > 0  # a log axis; S <= 0 or undefined is listed instead
                not_shown += [f"ε={eps}: ℓ={layer}" for layer, ok in zip(layers, shown,
                                                                         strict=True) if not ok]
                any_shown = any_shown or bool(shown.any())
                ax.plot(np.array(layers)[shown], values[shown], "o-", color=colour,
                        label=f"ε={eps}, γ={gamma:.3g}")
                if not math.isnan(gamma) and shown[0]:
                    # Theorem 2's floor from the measured first affinity: S(A^0) gamma^l.
                    ax.plot(layers, [values[0] * gamma**layer for layer in layers], ":",
                            color=colour)
            if column == "silhouette":
                ax.set_title(f"κ={kappa}: cosine silhouette of X^ℓ (mean over seeds)",
                             fontsize=9)
                ax.set_xlabel("layer ℓ (0 = input)")
            else:
                ax.set_yscale("log")
                ax.set_title(f"κ={kappa}: S(A^ℓ), scores={column}, median over batches and "
                             "seeds\n(dotted: S(A^0) γ^ℓ, Theorem 2's floor)", fontsize=9)
                ax.set_xlabel("block affinity A^ℓ (on layer ℓ)")
                ax.set_xticks(range(cfg.num_blocks))
                if not any_shown:
                    ax.text(0.5, 0.5, "median S(A^ℓ) ≤ 0 or undefined\nat every layer and ε",
                            transform=ax.transAxes, ha="center", va="center", fontsize=9)
                elif not_shown:
                    ax.text(0.02, 0.02, "S ≤ 0 or undefined (not shown):\n"
                            + "\n".join(not_shown[:6]) + ("\n..." if len(not_shown) > 6 else ""),
                            transform=ax.transAxes, fontsize=6, va="bottom")
            if column == "silhouette" or any_shown:
                ax.legend(fontsize=7)
    fig.suptitle(f"Trained TransFusion on {GENERATED}; seeds {cfg.seeds}, {cfg.epochs} "
                 "epochs", fontsize=10)
    return png_bytes(fig, dpi=110)


def report_markdown(cfg: Config, rows: list[dict[str, Any]], map_summary: dict[str, Any],
                    env: dict[str, Any], wall: float, runs: list[dict[str, Any]],
                    argv: list[str]) -> str:
    machine_name = describe_machine(env["machine"])
    versions = env["versions"]
    budget = (f"{machine_name}, torch {versions['torch']}, lightning {versions['lightning']}; "
              f"seeds {cfg.seeds} ({len(cfg.seeds)}); {cfg.epochs} epochs; total wall time "
              f"{wall:.1f} s")
    lines = [
        "# TransFusion Theorem 2: sharpness-increment bound vs measured per-layer sharpness",
        "",
        f"**Data: {GENERATED}.** Every measured number below comes from generated points.",
        "",
        f"- Run: {budget}.",
        f"- Command: `python -m benchmarks.transfusion_theorem2 {' '.join(argv)}`",
        f"- Finished {datetime.now(timezone.utc).isoformat(timespec='seconds')}; numpy "
        f"{versions['numpy']}, scikit-learn {versions['scikit-learn']}, python "
        f"{versions['python']} (no git commit recorded).",
        "- Paper: Liu et al., \"TransFusion: Contrastive Learning with Attention Layers\", "
        "Definition 1, Theorem 2 (proof: appendix D), Figure 3.",
        "",
        "## 1. The map γ(ρ, ε) (Figure 3), analytic",
        "",
        f"Grid: ρ ∈ (0, 1] × ε ∈ [0, 0.5], {cfg.grid - 1} × {cfg.grid} points (the paper gives "
        "no numeric ranges; ours). γ is set to nan where Δ ≤ 0 (equivalently ρ² + (1-ε)² ≤ 1: "
        "the proof's bound x̃ᵀu⊥ ≥ Δ is vacuous) and at ε = 0 (0/0; Theorem 1's regime).",
        "",
        f"- Cells where the bound applies (Δ > 0, ε > 0): {map_summary['valid_cells']} of "
        f"{map_summary['cells']}.",
        f"- Largest γ there: **{map_summary['gamma_max']:.4f}** at ρ = "
        f"{map_summary['gamma_max_at'][0]:.3f}, ε = {map_summary['gamma_max_at'][1]:.4f}; "
        f"cells with γ ≥ 1: **{map_summary['valid_cells_gamma_ge_1']}**.",
        f"- The bare formula (no Δ > 0 mask) is ≥ 1 on {map_summary['formula_cells_ge_1']} "
        f"cells, of which {map_summary['formula_ge_1_with_Delta_le_0']} have Δ ≤ 0.",
        "",
        "So, transcribed exactly from Theorem 2, γ < 1 wherever the theorem's hypotheses hold: "
        "the formula guarantees no sharpness *increase* anywhere on this grid; its γ ≥ 1 "
        "region (Figure 3's highlighted region, as far as we can reconstruct it) lies where "
        "Δ ≤ 0. See `gamma_map.png` (left: masked; right: bare formula, log colour scale).",
        "",
        "## 2. Measured per-layer sharpness of a trained TransFusion",
        "",
        f"Model: standalone TransFusion, `backbone=flatten`, {cfg.num_blocks} blocks, loss "
        f"`{cfg.loss}` on the last block's affinity, Adam (lr {cfg.lr} per 256 samples), batch "
        f"{cfg.batch_size}, {cfg.epochs} epochs, Lightning on the CPU ({cfg.threads} thread). "
        f"Data: `subspaces` (generated), n = {cfg.n_samples}, m = {cfg.ambient_dim}, rank "
        f"{cfg.rank}, data_seed {cfg.data_seed} (fixed across seeds; the seed draws the "
        "initialisation, the validation split and the shuffle), one view, no jitter. ρ is "
        "the datamodule's eq. 6 value measured on the clean points. Sharpness: Definition 1 "
        "per test batch (the blocks mix a batch) on each block's affinity A^ℓ of its input "
        "X^ℓ; `relu` takes the fusion weights ReLU(A) of eq. 2, `square` takes A², what the "
        "loss's g(A) of eq. 5 sees. Increment of block ℓ: S(A^ℓ)/S(A^{ℓ-1}) within a batch.",
        "",
    ]
    for kappa in cfg.n_subspaces:
        for eps in cfg.eps:
            sel = [r for r in rows if r["n_subspaces"] == kappa and r["eps"] == eps]
            if not sel:
                continue
            first = sel[0]
            run_sel = [r for r in runs if r["n_subspaces"] == kappa and r["eps"] == eps]
            seconds = _mean_std([r["train_seconds"] for r in run_sel])
            loss = _mean_std([r["train_loss"] for r in run_sel])
            lines += [
                f"### κ = {kappa} subspaces, ε = {eps}: ρ = {first['rho']:.4f}, "
                f"δ = {first['delta']:.4f}, Δ = {first['Delta']:.4f}, "
                f"γ = {_fmt(first['gamma'])}"
                + (" (vacuous: Δ ≤ 0)" if math.isnan(first["gamma"]) else ""),
                "",
                f"{len(cfg.seeds)} seeds × {first['test_batches']} test batches of "
                f"≤ {cfg.batch_size} ({first['test_size']} points); {cfg.epochs} epochs; "
                f"train time per seed {seconds} s; final train loss {loss}; {machine_name}.",
                "",
                "| scores | layer ℓ | silhouette (cos) | median S(A^ℓ) | min S(A^ℓ) "
                "| median increment | min increment | ≥ γ? |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for s in cfg.scores:
                for layer in range(cfg.num_blocks + 1):
                    cell = [r for r in sel if r["scores"] == s and r["layer"] == layer]
                    cells = [s, str(layer),
                             _mean_std([r["silhouette_cosine"] for r in cell]),
                             _mean_std([r["sharpness_median"] for r in cell]),
                             _fmt(_nanmin([r["sharpness_min"] for r in cell]))]
                    if 1 <= layer < cfg.num_blocks:  # block layer's increment over layer - 1
                        verdicts = [r["increment_ge_gamma"] for r in cell
                                    if r["increment_ge_gamma"]]
                        cells += [_mean_std([r["increment_median"] for r in cell]),
                                  _fmt(_nanmin([r["increment_min"] for r in cell])),
                                  f"{verdicts.count('True')}/{len(verdicts)} seeds"
                                  if verdicts else "n/a"]
                    else:
                        cells += ["", "", ""]
                    lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
    lines += verdict_lines(cfg, rows) + [
        "",
        "## Reading these numbers",
        "",
        "- Theorem 2 is an existence statement: some (W_Q, W_K) make every block sharpen by "
        "γ. Training minimises the loss of the last block's affinity only; nothing asks the "
        "intermediate blocks to follow the construction, so a trained model need not attain "
        "(or respect) the bound, and agreement or disagreement here neither proves nor refutes "
        "the theorem.",
        "- Definition 1 is an infimum over every same-/different-cluster pair of a batch: one "
        "pair decides it. On rank-1 subspace data a cluster holds x and −x, and a bilinear "
        "score (XW_Q)(XW_K)ᵀ flips sign with either point, so some same-cluster pair has a "
        "non-positive score in practically every batch: with `relu` scores S = 0 (or nan/inf) "
        "is structural, not a training failure. `square` scores (sign-blind, as the loss) "
        "give finite values. The datamodule's ρ takes |x̂ᵀu⊥| for the same reason.",
        "- The cosine silhouette on sign-symmetric clusters is near 0 at every layer for the "
        "same reason (x and −x are maximally far apart in cosine distance).",
        "- Increments: x/0 = inf, 0/0 and inf/inf undefined (left out; the count of defined "
        "batches is in `layers.csv`).",
    ]
    return "\n".join(lines) + "\n"


def _nanmin(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return min(finite) if finite else math.nan


def verdict_lines(cfg: Config, rows: list[dict[str, Any]]) -> list[str]:
    lines = ["## Verdict: do the measured increments respect the bound?", "",
             "A (seed, κ, ε, block) cell respects the bound when the block's increment "
             "S(A^ℓ)/S(A^(ℓ-1)) is ≥ γ in every test batch where it is defined (block ℓ = 1 .. "
             f"{cfg.num_blocks - 1}; block {cfg.num_blocks - 1} is the last block, the one the "
             "loss trains).", ""]
    for s in cfg.scores:
        judged = [r for r in rows if r["scores"] == s and r["increment_ge_gamma"]]
        undefined = [r for r in rows if r["scores"] == s and 1 <= r["layer"] < cfg.num_blocks
                     and not r["increment_ge_gamma"]]
        if not judged:
            lines.append(f"- `{s}` scores: **not comparable**: no block increment could be "
                         f"compared with γ ({len(undefined)} cells: γ vacuous or the ratio "
                         "undefined, 0/0, in every batch).")
            continue
        held = sum(r["increment_ge_gamma"] == "True" for r in judged)
        per_block = []
        for layer in range(1, cfg.num_blocks):
            cells = [r for r in judged if r["layer"] == layer]
            held_here = sum(r["increment_ge_gamma"] == "True" for r in cells)
            per_block.append(f"block {layer}: {held_here}/{len(cells)}")
        lines.append(f"- `{s}` scores: the bound holds in **{held} of {len(judged)}** comparable "
                     f"cells ({'; '.join(per_block)}); {len(undefined)} cells not comparable "
                     "(γ vacuous or the ratio undefined in every batch).")
    return lines


def run_environment() -> dict[str, Any]:
    """Machine and versions (as :func:`benchmarks.infra.environment.environment`, without the git
    calls: other checkouts may be operating on the repository while this runs)."""
    from importlib import metadata

    versions = {"torch": torch.__version__, "python": sys.version.split()[0]}
    for package in ("lightning", "numpy", "scikit-learn", "clusterbench"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {"machine": machine(), "versions": versions}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    cfg = parse_args(argv)
    result = compute(cfg)
    out, rows, wall = Path(cfg.out), result["rows"], result["wall_seconds"]
    write_atomic(out / "gamma_map.png", gamma_map_png(result["map"]))
    write_atomic(out / "gamma_map.csv",
                 gamma_map_csv(result["map"], step=max(1, cfg.grid // 50)))
    write_atomic(out / "layers.csv", rows_csv(rows))
    write_atomic(out / "sharpness_per_layer.png", sharpness_png(cfg, rows))
    write_atomic(out / "config.json", json.dumps(
        {"config": asdict(cfg), "argv": argv, "data": GENERATED,
         "sources": sorted({r["source"] for r in result["runs"]}),
         "environment": result["environment"], "map_summary": result["map_summary"],
         "total_wall_seconds": wall}, indent=2, default=str))
    write_atomic(out / "report.md", report_markdown(cfg, rows, result["map_summary"],
                                                    result["environment"], wall, result["runs"],
                                                    argv))
    print(f"wrote {out} in {wall:.1f} s")
    return {"rows": rows, "map_summary": result["map_summary"], "wall_seconds": wall}


def compute(cfg: Config) -> dict[str, Any]:
    """The γ map and the trained models' per-layer rows; writes nothing. Used by :func:`main`
    and by the ``transfusion_theorem2`` experiment suite."""
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*litlogger.*")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        start = time.perf_counter()
        env = run_environment()
        env_line = {"machine": describe_machine(env["machine"]),
                    "torch": env["versions"]["torch"]}
        the_map = gamma_map(cfg.grid)
        runs = []
        for kappa in cfg.n_subspaces:
            for eps in cfg.eps:
                for seed in cfg.seeds:
                    run = train_and_measure(cfg, kappa, eps, seed)
                    runs.append(run)
                    print(f"κ={kappa} ε={eps} seed={seed}: ρ={run['rho']:.4f} "
                          f"train {run['train_seconds']:.1f} s, loss {run['train_loss']:.4f}",
                          flush=True)
        rows = layer_rows(cfg, runs, env_line)
        wall = time.perf_counter() - start
        for row in rows:
            row["total_wall_seconds"] = round(wall, 1)
    finally:
        torch.set_num_threads(threads)
    return {"map": the_map, "map_summary": summarise_map(the_map), "runs": runs, "rows": rows,
            "environment": env, "wall_seconds": wall}


if __name__ == "__main__":
    main()
