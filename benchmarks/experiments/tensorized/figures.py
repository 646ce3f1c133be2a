"""The figures of the tensorized experiment: the Figure 2/7 bars, the VAE and TVAE latent spaces
(Figures 3 and 10), the TVAE with under-estimated k (Figure 11) and the TRBM reconstructions
(Figure 5). Each returns PNG bytes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from benchmarks.infra.plots import png_bytes, pyplot

#: The rows of the Figure 2/7 table, in the order the bars are drawn.
TABLE_MODELS = ("k-means", "AE1", "AE2", "AE3", "TAE1", "TAE2", "PTAE")

def table_figure(summary: dict, infos: dict) -> bytes:
    plt = pyplot()
    datasets = list(summary)
    names = [infos[d]["source"] if d == "digits5" else d for d in datasets]
    models = list(TABLE_MODELS)
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


def latent_grid(model, cluster: int, steps: int, limit: float = 2.0) -> np.ndarray:
    """Images decoded from a ``steps`` x ``steps`` grid of 2-D codes in [-limit, limit]^2."""
    values = torch.linspace(-limit, limit, steps)
    grid_y, grid_x = torch.meshgrid(values.flip(0), values, indexing="ij")
    codes = torch.stack([grid_x.flatten(), grid_y.flatten()], dim=1)
    images = model.decode(codes, cluster)[:, 0].numpy()  # (steps^2, H, W)
    h, w = images.shape[1:]
    return images.reshape(steps, steps, h, w).transpose(0, 2, 1, 3).reshape(steps * h, steps * w)


def tvae_figure(trained, x_train, y_train, x_test, y_test, settings, source) -> bytes:
    plt = pyplot()
    tvae, vae = trained["TVAE"], trained["VAE"]
    k = tvae.n_clusters
    fig, axes = plt.subplots(3, k + 1, figsize=(3 * (k + 1), 9))
    classes = settings["classes"]
    colours = plt.cm.tab10(np.arange(len(classes)))
    # Each model's assignment (eq. 2) and assigned means, once per split: (n,), (n, 2).
    embedded = {}
    with torch.no_grad():
        for name, model in (("VAE", vae), ("TVAE", tvae)):
            for split, x in (("train", x_train), ("test", x_test)):
                assignment, means = model.assign_and_encode(x)
                embedded[(name, split)] = assignment.numpy(), means.numpy()
    columns = [("VAE", vae, 0), *[("TVAE", tvae, j) for j in range(k)]]
    for column, (name, model, cluster) in enumerate(columns):
        title = "VAE" if column == 0 else f"TVAE cluster {cluster + 1}"
        axes[0, column].imshow(latent_grid(model, cluster, settings["grid_steps"]), cmap="gray")
        axes[0, column].set_title(f"{title}: latent samples", fontsize=9)
        axes[0, column].axis("off")
        for row, (y, split) in enumerate(((y_train, "train"), (y_test, "test")), start=1):
            assignment, means = embedded[(name, split)]
            keep = assignment == cluster
            ax = axes[row, column]
            for index, original in enumerate(classes):
                chosen = keep & (y.numpy() == index)
                ax.scatter(means[chosen, 0], means[chosen, 1], s=5, color=colours[index],
                           label=str(original))
            ax.set_title(f"{title}: {split} means ({int(keep.sum())} pts)", fontsize=9)
    axes[1, 0].legend(fontsize=7, title="digit" if source in ("mnist", "digits") else "class")
    fig.suptitle(f"VAE vs TVAE latent spaces ({source} {classes}, {settings['encoder']} shared "
                 "encoder and decoder)", fontsize=10)
    fig.tight_layout()
    return png_bytes(fig)


def trbm_figure(trbm, rbm, x_test, y_test, classes, settings) -> bytes:
    plt = pyplot()
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


def underestimated_figure(model, groups: list[list[int]], classes: Sequence[int], source: str,
                          grid_steps: int) -> bytes:
    """Figure 11: images decoded from every cluster's latent grid of a TVAE with fewer clusters
    than classes, titled with the classes each cluster took."""
    plt = pyplot()
    k = len(groups)
    fig, axes = plt.subplots(1, k, figsize=(3.2 * k, 3.4))
    for j, ax in enumerate(np.atleast_1d(axes)):
        ax.imshow(latent_grid(model, j, grid_steps), cmap="gray")
        ax.set_title(f"cluster {j + 1}: classes {{{','.join(map(str, groups[j]))}}}",
                     fontsize=9)
        ax.axis("off")
    fig.suptitle(f"TVAE with k={k} on {source} {classes}", fontsize=10)
    fig.tight_layout()
    return png_bytes(fig)
