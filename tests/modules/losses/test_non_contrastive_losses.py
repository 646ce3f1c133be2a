"""BYOL's, Barlow Twins' and VICReg's losses against independent loops in Python floats
(float64), against faithful transcriptions of peers' published losses, and in closed-form
cases.

The transcriptions (read through the code search, written out here so that the project does not
depend on either library):

- solo-learn, ``solo/losses/byol.py`` (commit 2269ce642e166eca444bb8a74cf88a7b0afeda24),
  ``byol_loss_func``, summed over the pairs of views as its ``solo/methods/byol.py`` does
  (``byol_loss_func(P[v2], Z_momentum[v1])`` for every ``v1 != v2``);
- solo-learn, ``solo/losses/barlow.py`` (same commit), ``barlow_loss_func``, with
  ``scale_loss=1`` (its default 0.025 scales the whole loss, which the paper does not) and its
  BatchNorm built in the inputs' dtype;
- lightly, ``lightly/loss/vicreg_loss.py`` (commit 2c485e423ee0c8c08b85a6f100eb95d7a1386f5d),
  ``VICRegLoss`` on one process (``gather_distributed=False``), which follows the VICReg
  authors' code.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from modules.losses import barlow_twins_loss, byol_loss, vicreg_loss


def rows(t: torch.Tensor) -> list[list[float]]:
    return [[float(v) for v in row] for row in t.double()]


def column(m: list[list[float]], j: int) -> list[float]:
    return [row[j] for row in m]


# -- naive float64 loops ------------------------------------------------------------------------
def naive_byol(p1, p2, z1, z2) -> float:
    """BYOL eq. 2 row by row, both directions summed: 2 - 2 cos(p_i, z'_i), meaned over i."""

    def direction(p, z) -> float:
        total = 0.0
        for a, b in zip(rows(p), rows(z), strict=True):
            dot = sum(x * y for x, y in zip(a, b, strict=True))
            total += 2 - 2 * dot / (math.sqrt(sum(x * x for x in a))
                                    * math.sqrt(sum(y * y for y in b)))
        return total / len(p)

    return direction(p1, z2) + direction(p2, z1)


def naive_barlow_twins(z1, z2, lam: float, eps: float = 1e-5) -> float:
    """Barlow Twins eq. 1 with each dimension standardised by its batch mean and biased
    variance (+ eps), the cross-correlation summed entry by entry."""
    a, b = rows(z1), rows(z2)
    n, d = len(a), len(a[0])

    def standardised(m: list[list[float]]) -> list[list[float]]:
        out = [[0.0] * d for _ in range(n)]
        for j in range(d):
            values = column(m, j)
            mean = sum(values) / n
            var = sum((v - mean) ** 2 for v in values) / n
            for i in range(n):
                out[i][j] = (values[i] - mean) / math.sqrt(var + eps)
        return out

    a, b = standardised(a), standardised(b)
    loss = 0.0
    for i in range(d):
        for j in range(d):
            c = sum(a[k][i] * b[k][j] for k in range(n)) / n
            loss += (1 - c) ** 2 if i == j else lam * c * c
    return loss


def naive_vicreg(z1, z2, lam: float, mu: float, nu: float, gamma: float, eps: float) -> float:
    """VICReg eq. 1-6 term by term, with the authors' code's normalisation: the invariance a
    mean over rows and dimensions, the variance term the mean of the two views'."""
    a, b = rows(z1), rows(z2)
    n, d = len(a), len(a[0])
    invariance = sum((x - y) ** 2 for ra, rb in zip(a, b, strict=True)
                     for x, y in zip(ra, rb, strict=True)) / (n * d)

    def variance(m) -> float:
        total = 0.0
        for j in range(d):
            values = column(m, j)
            mean = sum(values) / n
            var = sum((v - mean) ** 2 for v in values) / (n - 1)
            total += max(0.0, gamma - math.sqrt(var + eps))
        return total / d

    def covariance(m) -> float:
        means = [sum(column(m, j)) / n for j in range(d)]
        total = 0.0
        for i in range(d):
            for j in range(d):
                if i != j:
                    c = sum((m[k][i] - means[i]) * (m[k][j] - means[j])
                            for k in range(n)) / (n - 1)
                    total += c * c
        return total / d

    return (lam * invariance + mu * (variance(a) + variance(b)) / 2
            + nu * (covariance(a) + covariance(b)))


def random_pair(batch: int, dim: int, seed: int, scale: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    return tuple(scale * torch.randn(batch, dim, generator=g, dtype=torch.float64)
                 for _ in range(2))


@pytest.mark.parametrize("batch, dim", [(1, 3), (2, 1), (5, 4), (9, 17)])
def test_byol_loss_matches_a_float64_loop(batch, dim):
    g = torch.Generator().manual_seed(10 * batch + dim)
    p1, p2, z1, z2 = (torch.randn(batch, dim, generator=g, dtype=torch.float64)
                      for _ in range(4))
    loss = byol_loss(p1, p2, z1, z2)
    assert loss.dtype == torch.float64 and loss.dim() == 0
    assert loss.item() == pytest.approx(naive_byol(p1, p2, z1, z2), rel=1e-12, abs=1e-12)
    loss32 = byol_loss(p1.float(), p2.float(), z1.float(), z2.float())
    assert loss32.dtype == torch.float32
    assert loss32.item() == pytest.approx(naive_byol(p1, p2, z1, z2), rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("lam", [0.0, 5e-3, 0.0051, 1.0])
@pytest.mark.parametrize("batch, dim", [(2, 1), (3, 5), (8, 6), (16, 11)])
def test_barlow_twins_loss_matches_a_float64_loop(batch, dim, lam):
    z1, z2 = random_pair(batch, dim, seed=100 * batch + dim, scale=3.0)
    z2 = z2 + 0.5 * z1  # correlated views
    loss = barlow_twins_loss(z1, z2, off_diagonal_weight=lam)
    assert loss.dtype == torch.float64
    assert loss.item() == pytest.approx(naive_barlow_twins(z1, z2, lam), rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("weights", [(25.0, 25.0, 1.0), (1.0, 0.0, 0.0), (0.0, 1.0, 0.0),
                                     (0.0, 0.0, 1.0), (2.0, 3.0, 0.5)])
@pytest.mark.parametrize("batch, dim, gamma, eps", [(2, 1, 1.0, 1e-4), (4, 5, 1.0, 1e-4),
                                                    (10, 8, 2.0, 1e-2), (7, 3, 0.5, 0.0)])
def test_vicreg_loss_matches_a_float64_loop(batch, dim, gamma, eps, weights):
    z1, z2 = random_pair(batch, dim, seed=batch * 31 + dim, scale=0.7)
    lam, mu, nu = weights
    loss = vicreg_loss(z1, z2, invariance_weight=lam, variance_weight=mu, covariance_weight=nu,
                       target_std=gamma, eps=eps)
    assert loss.dtype == torch.float64
    expected = naive_vicreg(z1, z2, lam, mu, nu, gamma, eps)
    assert loss.item() == pytest.approx(expected, rel=1e-10, abs=1e-12)


# -- peers' published losses, transcribed -------------------------------------------------------
def solo_learn_byol_loss_func(p, z, simplified: bool = True):
    """solo/losses/byol.py (2269ce6), ``byol_loss_func``."""
    if simplified:
        return 2 - 2 * F.cosine_similarity(p, z.detach(), dim=-1).mean()
    p = F.normalize(p, dim=-1)
    z = F.normalize(z, dim=-1)
    return 2 - 2 * (p * z.detach()).sum(dim=1).mean()


def solo_learn_barlow_loss_func(z1, z2, lamb: float = 5e-3, scale_loss: float = 0.025):
    """solo/losses/barlow.py (2269ce6), ``barlow_loss_func`` on one process (no all_reduce);
    its BatchNorm in the inputs' dtype so that float64 stays float64."""
    n, d = z1.size()
    bn = torch.nn.BatchNorm1d(d, affine=False, dtype=z1.dtype).to(z1.device)
    z1 = bn(z1)
    z2 = bn(z2)
    corr = torch.einsum("bi, bj -> ij", z1, z2) / n
    diag = torch.eye(d, device=corr.device)
    cdif = (corr - diag).pow(2)
    cdif[~diag.bool()] *= lamb
    return scale_loss * cdif.sum()


def lightly_vicreg_loss(z_a, z_b, lambda_param=25.0, mu_param=25.0, nu_param=1.0, eps=0.0001):
    """lightly/loss/vicreg_loss.py (2c485e4), ``VICRegLoss.forward`` with its
    ``invariance_loss``, ``variance_loss`` and ``covariance_loss``, on one process."""

    def invariance_loss(x, y):
        return F.mse_loss(x, y)

    def variance_loss(x, eps):
        x = x - x.mean(dim=0)
        std = torch.sqrt(x.var(dim=0) + eps)
        return torch.mean(F.relu(1.0 - std))

    def covariance_loss(x):
        x = x - x.mean(dim=0)
        batch_size = x.size(0)
        dim = x.size(-1)
        nondiag_mask = ~torch.eye(dim, device=x.device, dtype=torch.bool)
        cov = torch.einsum("b...c,b...d->...cd", x, x) / (batch_size - 1)
        loss = cov[..., nondiag_mask].pow(2).sum(-1) / dim
        return loss.mean()

    inv_loss = invariance_loss(z_a, z_b)
    var_loss = 0.5 * (variance_loss(z_a, eps) + variance_loss(z_b, eps))
    cov_loss = covariance_loss(z_a) + covariance_loss(z_b)
    return lambda_param * inv_loss + mu_param * var_loss + nu_param * cov_loss


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("batch, dim", [(2, 3), (16, 8), (64, 32)])
def test_the_losses_agree_with_solo_learn_and_lightly_on_random_inputs(batch, dim, seed):
    g = torch.Generator().manual_seed(seed)
    p1, p2, z1, z2 = (torch.randn(batch, dim, generator=g, dtype=torch.float64)
                      for _ in range(4))
    solo_byol = solo_learn_byol_loss_func(p2, z1) + solo_learn_byol_loss_func(p1, z2)
    assert byol_loss(p1, p2, z1, z2).item() == pytest.approx(solo_byol.item(), abs=1e-12)
    # the unsimplified form too, in float32 (its normalise-then-dot path)
    solo_byol32 = (solo_learn_byol_loss_func(p2.float(), z1.float(), simplified=False)
                   + solo_learn_byol_loss_func(p1.float(), z2.float(), simplified=False))
    assert byol_loss(p1.float(), p2.float(), z1.float(), z2.float()).item() == pytest.approx(
        solo_byol32.item(), abs=1e-5)
    for lam in (5e-3, 0.0051):
        solo_barlow = solo_learn_barlow_loss_func(z1, z2 + p1, lamb=lam, scale_loss=1.0)
        assert barlow_twins_loss(z1, z2 + p1, off_diagonal_weight=lam).item() == pytest.approx(
            solo_barlow.item(), rel=1e-10)
    lightly = lightly_vicreg_loss(z1, 0.3 * z1 + z2)
    assert vicreg_loss(z1, 0.3 * z1 + z2).item() == pytest.approx(lightly.item(), rel=1e-10)


# -- closed forms -------------------------------------------------------------------------------
def test_byol_closed_forms_and_scale_invariance():
    z = torch.eye(4, dtype=torch.float64)
    assert byol_loss(z, z, z, z).item() == 0.0  # each prediction on its target
    assert byol_loss(-z, -z, z, z).item() == pytest.approx(8.0)  # opposite: 4 per direction
    assert byol_loss(z.roll(1, 1), z, z, z).item() == pytest.approx(2.0)  # orthogonal one way
    p1, p2, z1, z2 = (torch.randn(6, 3, dtype=torch.float64) for _ in range(4))
    scaled = byol_loss(7.0 * p1, 0.01 * p2, 3.0 * z1, 100.0 * z2)
    assert scaled.item() == pytest.approx(byol_loss(p1, p2, z1, z2).item(), rel=1e-12)


def test_byol_never_trains_the_target():
    p1, p2 = (torch.randn(5, 3, requires_grad=True) for _ in range(2))
    z1, z2 = (torch.randn(5, 3, requires_grad=True) for _ in range(2))
    byol_loss(p1, p2, z1, z2).backward()
    assert p1.grad is not None and p2.grad is not None
    assert z1.grad is None and z2.grad is None


def test_barlow_twins_closed_forms():
    """Decorrelated standardised dimensions, identical in both views: C is the identity up to
    BatchNorm's eps, so the loss is d (1 - 1/(1 + eps))^2; with the second view negated C = -I
    and every diagonal term is (1 - (-c))^2."""
    z = torch.tensor([[1.0, 1.0, 1.0], [1.0, -1.0, -1.0], [-1.0, 1.0, -1.0], [-1.0, -1.0, 1.0]],
                     dtype=torch.float64)
    c = 1 / (1 + 1e-5)  # each column: mean 0, biased variance 1
    assert barlow_twins_loss(z, z).item() == pytest.approx(3 * (1 - c) ** 2, rel=1e-9)
    assert barlow_twins_loss(z, -z).item() == pytest.approx(3 * (1 + c) ** 2, rel=1e-12)
    # a view's per-dimension scale and shift do not matter (standardised over the batch)
    z1, z2 = random_pair(8, 5, seed=3)
    shifted = barlow_twins_loss(4.0 * z1 + 2.0, 0.5 * z2 - 1.0).item()
    assert shifted == pytest.approx(barlow_twins_loss(z1, z2).item(), rel=1e-6)


def test_vicreg_closed_forms():
    """Spread, decorrelated, identical views cost nothing; a collapsed batch costs
    mu (gamma - sqrt(eps)), the variance term of every dimension at its floor."""
    z = 2.0 * torch.tensor([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]],
                           dtype=torch.float64)
    assert vicreg_loss(z, z).item() == 0.0
    collapsed = torch.ones(6, 4, dtype=torch.float64)
    assert vicreg_loss(collapsed, collapsed).item() == pytest.approx(25.0 * (1 - 0.01),
                                                                     rel=1e-12)
    # the collapsed batch keeps finite gradients through eps
    live = collapsed.clone().requires_grad_(True)
    vicreg_loss(live, collapsed).backward()
    assert torch.isfinite(live.grad).all()


@pytest.mark.parametrize("loss", [
    lambda a, b: byol_loss(a, b, b.flip(0), a.flip(0)),
    barlow_twins_loss,
    vicreg_loss,
])
def test_under_bf16_autocast_the_losses_are_float32_and_close_to_float64(loss):
    z1, z2 = random_pair(32, 16, seed=7)
    exact = loss(z1, z2).item()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = loss(z1.float(), z2.float())
    assert low.dtype == torch.float32
    assert low.item() == pytest.approx(exact, rel=1e-4)


def test_bad_shapes_batches_and_weights_are_refused_in_one_line():
    z = torch.randn(4, 3)
    with pytest.raises(ValueError, match=r"z1 and z2 must both have shape \(N, d\); got "
                                         r"\(4, 3\) and \(4, 2\)"):
        barlow_twins_loss(z, z[:, :2])
    for function in (barlow_twins_loss, vicreg_loss):
        with pytest.raises(ValueError, match="need at least 2 rows: the loss reads the batch's "
                                             "statistics, got 1"):
            function(z[:1], z[:1])
    with pytest.raises(ValueError, match="off_diagonal_weight must be >= 0, got -1"):
        barlow_twins_loss(z, z, off_diagonal_weight=-1)
    with pytest.raises(ValueError, match="covariance_weight must be >= 0, got -0.5"):
        vicreg_loss(z, z, covariance_weight=-0.5)
    with pytest.raises(ValueError, match="target_std must be > 0, got 0"):
        vicreg_loss(z, z, target_std=0)
    with pytest.raises(ValueError, match=r"p1 and z2 must both have shape"):
        byol_loss(z, z, z, z[:3])
