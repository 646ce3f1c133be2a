r"""The per-layer fusion protocol of TransFusion (section 5.1, Tables 1-2; Theorem 2): every
layer's silhouette and the sharpness of its affinity on a trained model, with the signs of the
scores that the sharpness of their ReLU hides.

Reference: Liu et al., "TransFusion: Contrastive Learning with Attention Layers" (a submission
under double-blind review, no arXiv id). The maths (Definition 1, Theorem 2) is in
:mod:`modules.theory.fusion`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from benchmarks.infra.plots import check_tsne_iterations
from benchmarks.protocols.features import full_batches
from benchmarks.protocols.protocol import EvaluationInputs, EvaluationProtocol, ProtocolOutput
from modules.methods.base import eval_mode
from modules.methods.capabilities import LayerwiseModel
from modules.theory.fusion import (
    SHARPNESS_SCORES,
    different_cluster_positive_share,
    same_cluster_nonpositive_share,
    sharpness,
)

#: The metrics of the layers' silhouette: scikit-learn's pairwise distances.
SILHOUETTE_METRICS = ("cosine", "euclidean", "manhattan")


@torch.no_grad()
def layer_affinities(model: nn.Module, x: Tensor) -> tuple[list[Tensor], list[Tensor]]:
    r"""Every layer's representation and its affinity on one batch ``x``.

    ``model`` exposes ``layer_outputs(x)`` (the input of every block: :math:`X^0, \dots,
    X^{L-1}`, the last the embedding) and ``blocks`` (each with ``affinity``, eq. 1).

    Returns:
        ``outputs`` (L tensors (n, m)) and ``affinities`` (L tensors (n, n)),
        ``affinities[l] = blocks[l].affinity(outputs[l])``: :math:`A^\ell` on :math:`X^\ell`.
    """
    outputs = model.layer_outputs(x)
    affinities = [block.affinity(layer) for layer, block in zip(outputs, model.blocks,
                                                                 strict=True)]
    return outputs, affinities


def layer_name(layer: int, layers: int) -> str:
    r"""The row label of layer ``layer`` of ``layers``: :math:`X^\ell`, the first marked as the
    input and the last as the embedding (TransFusion's "the final embeddings are X^{d-1}").

    >>> [layer_name(i, 3) for i in range(3)], layer_name(0, 1)
    (['X^0 (input)', 'X^1', 'X^2 (embedding)'], 'X^0 (input, embedding)')
    """
    roles = [role for role, yes in (("input", layer == 0), ("embedding", layer == layers - 1))
             if yes]
    return f"X^{layer}" + (f" ({', '.join(roles)})" if roles else "")


#: The per-batch statistics of a layer's affinity that :func:`per_layer_fusion` reports, with how
#: they are summarised over the batches: sharpness by its minimum and median, shares by the mean.
SHARPNESS_KEYS = ("sharpness", "sharpness_raw")
SHARE_KEYS = ("same_cluster_nonpositive_share", "different_cluster_positive_share")


def _affinity_statistics(a: Tensor, y: Tensor, scores: str) -> dict[str, float]:
    return {"sharpness": sharpness(a, y, scores), "sharpness_raw": sharpness(a, y, "raw"),
            "same_cluster_nonpositive_share": same_cluster_nonpositive_share(a, y),
            "different_cluster_positive_share": different_cluster_positive_share(a, y)}


def per_layer_fusion(model: nn.Module, dataloader: Iterable[tuple[Tensor, Tensor]],
                     silhouette_metric: str = "cosine", scores: str = "relu",
                     max_silhouette_samples: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    r"""The per-layer fusion protocol (TransFusion section 5.1, Tables 1-2; Theorem 2): how
    clustered each layer's output is, how sharp its affinity is, and what the sharpness hides.

    The model runs in eval mode under ``no_grad`` on each ``(x, y)`` batch (every submodule's
    mode is restored afterwards). Blocks mix the samples of a batch (eq. 2 sums over the batch),
    so representations depend on the batch: use the evaluation loader with the training batch
    size, unshuffled. A last batch smaller than the first is filled up with the split's first
    samples (:func:`~benchmarks.protocols.features.full_batches`): its own rows are fused in a
    batch of the same size as every other's. Per layer :math:`X^\ell`, :math:`\ell = 0, \dots,
    L-1` (the input of block :math:`\ell`; the last is the embedding):

    - ``silhouette``: scikit-learn's ``silhouette_score`` of the layer's outputs of all batches,
      concatenated, against the labels (``silhouette_metric``; the paper's Silhouette Index,
      Rousseeuw 1987). Above ``max_silhouette_samples`` points it is computed on a random
      subsample of that size drawn with ``seed`` (deterministic). ``nan`` with fewer than 2
      labels.
    - ``sharpness_min``, ``sharpness_median``: :func:`sharpness` (Definition 1, with ``scores``)
      of :math:`A^\ell`, the affinity block :math:`\ell` computes on this layer, per batch (an
      affinity only relates samples of one batch), then the minimum and the median over the
      batches where it is defined (both kinds of pair present).
    - ``sharpness_raw_min``, ``sharpness_raw_median``: the same on the signed scores of eq. 1
      (``scores="raw"``), which the ReLU of the default hides.
    - ``same_cluster_nonpositive_share``, ``different_cluster_positive_share``:
      :func:`same_cluster_nonpositive_share` and :func:`different_cluster_positive_share` of
      :math:`A^\ell` per batch, averaged over the batches where defined (the batches have one
      size): how many pairs make the ReLU sharpness 0, where it is.

    Args:
        model: a model with ``blocks`` and ``layer_outputs`` (the standalone
            :class:`~modules.methods.transfusion.TransFusion`).
        dataloader: ``(x, y)`` batches.
        silhouette_metric: metric of ``silhouette_score`` (``"cosine"``, ``"euclidean"``, ...).
        scores: how :func:`sharpness` treats negative affinities (default ``"relu"``).
        max_silhouette_samples: subsample size above which the silhouette is subsampled.
        seed: seed of that subsample.

    Returns:
        One dict per layer: ``layer`` (its index), ``name`` (:func:`layer_name`), and the
        statistics above.

    >>> from modules.methods.transfusion import TransFusion
    >>> _ = torch.manual_seed(0)
    >>> model = TransFusion(num_classes=2, input_shape=(4,), backbone="flatten", num_blocks=2)
    >>> x, y = torch.randn(12, 4) + 3 * torch.eye(4)[torch.arange(12) % 2], torch.arange(12) % 2
    >>> rows = per_layer_fusion(model, [(x[:6], y[:6]), (x[6:], y[6:])])
    >>> [row["name"] for row in rows]
    ['X^0 (input)', 'X^1 (embedding)']
    >>> sorted(rows[0])  # doctest: +NORMALIZE_WHITESPACE
    ['different_cluster_positive_share', 'layer', 'name', 'same_cluster_nonpositive_share',
     'sharpness_median', 'sharpness_min', 'sharpness_raw_median', 'sharpness_raw_min',
     'silhouette']
    """
    from sklearn.metrics import silhouette_score

    device = next(iter(model.parameters()), torch.empty(0)).device
    outputs: list[list[Tensor]] = []
    labels: list[Tensor] = []
    per_batch: list[list[dict[str, float]]] = []  # (batches, L)
    with eval_mode(model):
        for x, y, n in full_batches(dataloader):  # the last batch filled up to the others' size
            layers, affinities = layer_affinities(model, x.to(device))
            if not outputs:
                outputs = [[] for _ in layers]
            for i, layer in enumerate(layers):
                outputs[i].append(layer[:n].double().cpu())
            labels.append(y[:n].cpu())
            per_batch.append([_affinity_statistics(a, y, scores) for a in affinities])
    if not outputs:
        raise ValueError("the dataloader yielded no batch")
    y_all = torch.cat(labels).numpy()
    rows = []
    for layer, parts in enumerate(outputs):
        features = torch.cat(parts).flatten(1).numpy()
        silhouette = float("nan")
        if 2 <= len(np.unique(y_all)) < len(y_all):
            subsample = max_silhouette_samples if len(y_all) > max_silhouette_samples else None
            silhouette = float(silhouette_score(features, y_all, metric=silhouette_metric,
                                                sample_size=subsample, random_state=seed))
        row: dict[str, Any] = {"layer": layer, "name": layer_name(layer, len(outputs)),
                                 "silhouette": silhouette}
        for key in (*SHARPNESS_KEYS, *SHARE_KEYS):
            values = np.array([batch[layer][key] for batch in per_batch], dtype=np.float64)
            values = values[~np.isnan(values)]
            if key in SHARE_KEYS:
                row[key] = float(values.mean()) if values.size else float("nan")
            else:
                row[f"{key}_min"] = float(values.min()) if values.size else float("nan")
                row[f"{key}_median"] = (float(np.median(values)) if values.size
                                        else float("nan"))
        rows.append(row)
    return rows


@dataclass(frozen=True)
class PerLayerSettings:
    """``silhouette_metric``: the distance of every layer's silhouette, one of
    :data:`SILHOUETTE_METRICS`; ``scores``: what :func:`sharpness` takes the ratios of, one of
    :data:`modules.theory.fusion.SHARPNESS_SCORES`; ``tsne_iterations``: the t-SNE panels'
    ``max_iter`` (1,000 is scikit-learn's default, a --fast budget takes fewer)."""

    silhouette_metric: str
    scores: str
    tsne_iterations: int

    def __post_init__(self) -> None:
        check_tsne_iterations("per_layer.tsne_iterations", self.tsne_iterations)
        for name, value, accepted in (("silhouette_metric", self.silhouette_metric,
                                       SILHOUETTE_METRICS),
                                      ("scores", self.scores, SHARPNESS_SCORES)):
            if not isinstance(value, str) or value not in accepted:
                raise ValueError(f"{name} must be one of {', '.join(accepted)}, got {value!r}")


def run_per_layer(settings: PerLayerSettings, inputs: EvaluationInputs) -> ProtocolOutput:
    """:func:`per_layer_fusion` on the test split, and a t-SNE panel of every layer's outputs
    titled with its silhouette (TransFusion's Tables 1-2)."""
    from benchmarks.infra.plots import tsne_panels_png
    from benchmarks.protocols.features import layer_outputs

    model, test = inputs.model, inputs.datamodule.test_dataloader()
    rows = per_layer_fusion(model, test, seed=inputs.seed,
                            silhouette_metric=settings.silhouette_metric, scores=settings.scores)
    arrays, labels = layer_outputs(model, inputs.datamodule.test_dataloader())
    titles = [f"{r['name']}: silhouette {r['silhouette']:.3f}" for r in rows]
    return ProtocolOutput(records={"per_layer": rows}, figures={
        "per-layer-tsne.png": tsne_panels_png(arrays, labels, titles, seed=inputs.seed,
                                              iterations=settings.tsne_iterations)})


PER_LAYER = EvaluationProtocol(
    name="per_layer",
    summary="every layer's silhouette and its affinity's sharpness (TransFusion's Definition 1, "
            "of ReLU(A) and of the raw scores) and pair signs on the test split, with a t-SNE "
            "panel per layer",
    settings=PerLayerSettings, needs=LayerwiseModel, run=run_per_layer,
    example={"silhouette_metric": "cosine", "scores": "relu", "tsne_iterations": 1000},
)
