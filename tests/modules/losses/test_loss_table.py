"""The one table of contrastive losses (``modules.losses.CONTRASTIVE_LOSSES``) that SimCLR and
MoCo share, and MoCo's objective and queue against per-query float64 loops."""

from __future__ import annotations

import math

import lightning.pytorch as pl
import pytest
import torch
from documented import documented_module

from datamodules import DATAMODULES
from modules.losses import (
    CONTRASTIVE_LOSSES,
    ContrastiveLoss,
    contrastive_criterion,
    nt_xent_loss,
)
from modules.methods import MoCo, SimCLR

TINY = {"num_classes": 10, "input_shape": (1, 8, 8), "backbone_width": 4,
        "projector_hidden": 16, "projector_out": 8}


#: The guide's worked example of a contrastive loss.
doubled_nt_xent = documented_module(
    "For example, twice NT-Xent", "documented_loss",
    preamble="from torch import Tensor\nfrom modules.losses import nt_xent_loss\n").doubled_nt_xent


@pytest.fixture
def throwaway_loss(monkeypatch) -> str:
    """Registers ``doubled_nt_xent`` in the table, as a new loss would be: one table line."""
    monkeypatch.setitem(CONTRASTIVE_LOSSES, "doubled_nt_xent",
                        ContrastiveLoss(doubled_nt_xent, ("temperature",)))
    return "doubled_nt_xent"


def fit_one_batch(model, tmp_path) -> pl.Trainer:
    trainer = pl.Trainer(fast_dev_run=2, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=tmp_path, accelerator="cpu")
    trainer.fit(model, datamodule=DATAMODULES["digits"](batch_size=16))
    return trainer


def test_a_new_table_line_trains_simclr_by_name(throwaway_loss, tmp_path):
    torch.manual_seed(0)
    model = SimCLR(loss=throwaway_loss, temperature=0.3, **TINY)
    features = torch.randn(12, model.backbone.output_dim)
    z1, z2 = model.projector(features).chunk(2)
    torch.testing.assert_close(model.objective(features, 2, torch.zeros(6)),
                               2.0 * nt_xent_loss(z1, z2, 0.3))
    before = [p.clone() for p in model.projector.parameters()]
    trainer = fit_one_batch(model, tmp_path)
    assert torch.isfinite(trainer.callback_metrics["train_loss"])
    assert any(not torch.equal(a, b) for a, b in zip(before, model.projector.parameters(),
                                                     strict=True))


def test_a_new_table_line_trains_moco_by_name(throwaway_loss, tmp_path):
    torch.manual_seed(0)
    model = MoCo(loss=throwaway_loss, temperature=0.3, queue_size=20, bn_splits=2, **TINY)
    features = torch.randn(12, model.backbone.output_dim)
    model._keys = torch.nn.functional.normalize(torch.randn(12, 8), dim=1)
    q1, q2 = model.projector(features).chunk(2)
    k1, k2 = model._keys.chunk(2)  # each query view's own positive keys, in its order
    queue = model.queue.clone()
    expected = (2.0 * nt_xent_loss(q1, k1, 0.3, queue=queue)
                + 2.0 * nt_xent_loss(q2, k2, 0.3, queue=queue))
    torch.testing.assert_close(model.objective(features, 2, torch.zeros(6)), expected)
    trainer = fit_one_batch(model, tmp_path)
    assert torch.isfinite(trainer.callback_metrics["train_loss"])


def test_a_table_loss_checks_its_hyperparameters_when_the_method_is_built(throwaway_loss):
    for cls in (SimCLR, MoCo):
        with pytest.raises(ValueError, match="temperature must be > 0, got -0.5"):
            cls(loss=throwaway_loss, temperature=-0.5, **TINY)
        with pytest.raises(ValueError, match=f"unknown {cls.__name__} loss 'no_such_loss'; "
                                             "available: .*doubled_nt_xent"):
            cls(loss="no_such_loss", **TINY)
    # a hyperparameter the loss does not take is not checked (lam of NT-Xent)
    SimCLR(loss=throwaway_loss, lam=7.0, **TINY)


def test_every_method_loss_name_is_a_table_line():
    assert {"nt_xent", "infonce", "laplacian", "exponential", "sum", "concat_sum"} <= set(
        CONTRASTIVE_LOSSES)
    for name, loss in CONTRASTIVE_LOSSES.items():
        values = {"temperature": 0.5, "gamma": 0.5, "tau1": 0.4, "tau2": 0.6, "lam": 0.3}
        criterion, width = contrastive_criterion(name, **values)
        assert width == (2 if name == "concat_sum" else 1)
        assert set(criterion.keywords) >= set(loss.hyperparameters)


# -- every loss of the table, two-view and against a queue, against float64 loops ---------------
def unit(v: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v]


def naive_logit(a, b, kernel) -> float:
    """cosine / tau (kernel = ("cos", tau)) or -||a - b||^gamma / tau (("exp", gamma, tau))."""
    if kernel[0] == "cos":
        return sum(x * y for x, y in zip(a, b, strict=True)) / kernel[1]
    _, gamma, tau = kernel
    return -math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True))) ** gamma / tau


def naive_infonce(z1, z2, queue, kernel, columns=slice(None)) -> float:
    """Two-view InfoNCE (every row an anchor, all other rows in the denominator) or, with a
    queue, MoCo's eq. 1 (positive plus the queue), row by row in Python floats."""
    rows1 = [unit(r)[columns] for r in z1.tolist()]
    rows2 = [unit(r)[columns] for r in z2.tolist()]
    total = 0.0
    if queue is None:
        rows, n = rows1 + rows2, len(rows1)
        for k in range(2 * n):
            positive = rows[k + n if k < n else k - n]
            denominator = sum(math.exp(naive_logit(rows[k], rows[j], kernel))
                              for j in range(2 * n) if j != k)
            total -= naive_logit(rows[k], positive, kernel) - math.log(denominator)
        return total / (2 * n)
    negatives = [unit(r)[columns] for r in queue.tolist()]
    for q, k in zip(rows1, rows2, strict=True):
        logits = [naive_logit(q, k, kernel)] + [naive_logit(q, m, kernel) for m in negatives]
        total -= logits[0] - math.log(sum(math.exp(v) for v in logits))
    return total / len(rows1)


def naive_table_loss(name: str, z1, z2, queue, values) -> float:
    t, g, t1, t2, lam = (values[k] for k in ("temperature", "gamma", "tau1", "tau2", "lam"))
    half = z1.shape[1] // 2
    if name in ("nt_xent", "infonce"):
        return naive_infonce(z1, z2, queue, ("cos", t))
    if name == "laplacian":
        return naive_infonce(z1, z2, queue, ("exp", 1.0, t))
    if name == "exponential":
        return naive_infonce(z1, z2, queue, ("exp", g, t))
    if name == "sum":
        return (lam * naive_infonce(z1, z2, queue, ("exp", 1.0, t1))
                + (1 - lam) * naive_infonce(z1, z2, queue, ("exp", 2.0, t2)))
    assert name == "concat_sum"
    return (lam * naive_infonce(z1, z2, queue, ("exp", 1.0, t1), slice(None, half))
            + (1 - lam) * naive_infonce(z1, z2, queue, ("exp", 2.0, t2), slice(half, None)))


@pytest.mark.parametrize("queue_size", [None, 1, 7])
@pytest.mark.parametrize("batch, dim", [(1, 4), (3, 6), (8, 10)])
@pytest.mark.parametrize("name", ["nt_xent", "infonce", "laplacian", "exponential", "sum",
                                  "concat_sum"])
def test_table_losses_match_loops_two_view_and_against_a_queue(name, batch, dim, queue_size):
    g = torch.Generator().manual_seed(batch * 100 + dim)
    z1, z2 = (torch.randn(batch, dim, generator=g, dtype=torch.float64) for _ in range(2))
    queue = (None if queue_size is None
             else torch.randn(queue_size, dim, generator=g, dtype=torch.float64))
    values = {"temperature": 0.4, "gamma": 0.7, "tau1": 0.3, "tau2": 0.6, "lam": 0.35}
    criterion, _ = contrastive_criterion(name, **values)
    got = criterion(z1, z2, queue=queue)
    assert got.item() == pytest.approx(naive_table_loss(name, z1, z2, queue, values), rel=1e-10)


# -- MoCo: the objective and the queue -----------------------------------------------------------
@pytest.mark.parametrize("loss", ["infonce", "laplacian", "sum", "concat_sum"])
def test_moco_objective_sums_each_query_views_loss_against_its_keys(loss):
    """l(q1, k_a) + l(q2, k_b), the keys given in the query views' order (symmetric: k2, k1),
    against the queue as it was before the step, each query by a float64 loop; sum and
    concat_sum with the paper's one temperature unless tau1/tau2 are set."""
    torch.manual_seed(0)
    model = MoCo(loss=loss, temperature=0.2, tau2=0.3, lam=0.8, queue_size=11, **TINY).double()
    features = torch.randn(10, model.backbone.output_dim, dtype=torch.float64)
    width = model.projector[-1].out_features
    model._keys = torch.nn.functional.normalize(torch.randn(10, width, dtype=torch.float64), dim=1)
    model.eval()  # BatchNorm with running statistics: the projection the loop sees is the same
    q1, q2 = model.projector(features).detach().chunk(2)
    k1, k2 = model._keys.chunk(2)
    values = {"temperature": 0.2, "gamma": 0.5, "tau1": 0.2, "tau2": 0.3, "lam": 0.8}
    expected = (naive_table_loss(loss, q1, k1, model.queue, values)
                + naive_table_loss(loss, q2, k2, model.queue, values))
    assert model.objective(features, 2, torch.zeros(5)).item() == pytest.approx(expected,
                                                                                  rel=1e-10)


def naive_ring(size: int, batches: list[torch.Tensor], initial: torch.Tensor):
    """A ring buffer written one key at a time: slot ptr, then ptr + 1 (mod size), ..."""
    queue, ptr = [row.clone() for row in initial], 0
    for keys in batches:
        for key in keys:
            queue[ptr] = key.clone()
            ptr = (ptr + 1) % size
    return torch.stack(queue), ptr


@pytest.mark.parametrize("size, batch_sizes", [(6, [2, 2, 2, 2]), (5, [2, 2, 2]), (4, [3, 7, 1]),
                                               (3, [3, 3])])
def test_moco_queue_replaces_the_oldest_keys_in_order_and_wraps(size, batch_sizes):
    torch.manual_seed(1)
    model = MoCo(queue_size=size, **TINY)
    initial = model.queue.clone()
    batches = [torch.randn(b, 8) for b in batch_sizes]
    for keys in batches:
        model._enqueue(keys)
    expected, ptr = naive_ring(size, batches, initial)
    assert torch.equal(model.queue, expected)
    assert int(model.queue_ptr) == ptr


def test_moco_step_scores_against_the_old_queue_then_enqueues_its_keys():
    """A training step's negatives are the queue before the step; its keys (view 2's, then
    view 1's with ``symmetric``) enter after, at the pointer."""
    torch.manual_seed(2)
    model = MoCo(queue_size=12, symmetric=True, bn_splits=2, **TINY)
    seen = []
    real_objective = model.objective

    def recording(features, n_views, labels):
        seen.append(model.queue.clone())
        return real_objective(features, n_views, labels)

    model.objective = recording
    before = model.queue.clone()
    views = [torch.rand(4, 1, 8, 8), torch.rand(4, 1, 8, 8)]
    model.training_step((views, torch.arange(4)), 0)
    assert torch.equal(seen[0], before)
    assert torch.equal(model.queue[:8], model._keys)  # 8 keys from slot 0
    assert torch.equal(model.queue[8:], before[8:])
    assert int(model.queue_ptr) == 8
