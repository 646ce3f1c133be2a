"""Kernel-InfoNCE losses against independent naive implementations (explicit loops, float64).

Tan et al., arXiv:2303.15103: eq. 7-8, Algorithm 2 (with eq. 7's minus sign) and Table 2.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from modules.losses import (
    concat_sum_kernel_loss,
    kernel_infonce_loss,
    moco_loss,
    nt_xent_loss,
    sum_kernel_loss,
)

Rows = list[list[float]]


def unit_rows(z1: torch.Tensor, z2: torch.Tensor) -> Rows:
    """The 2N stacked views as Python float rows, each divided by its Euclidean norm."""
    rows = [[float(v) for v in row] for row in torch.cat([z1, z2]).detach().double()]
    return [[v / math.sqrt(sum(u * u for u in row)) for v in row] for row in rows]


def naive_core(rows: Rows, gamma: float, temperature: float) -> float:
    """Algorithm 2's core loss C on the rows as given (no normalisation), anchor by anchor."""
    two_n, n = len(rows), len(rows) // 2

    def kernel(a: list[float], b: list[float]) -> float:
        distance = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))
        return math.exp(-(distance**gamma) / temperature)

    total = 0.0
    for k in range(two_n):
        positive = k + n if k < n else k - n
        denominator = sum(kernel(rows[k], rows[j]) for j in range(two_n) if j != k)
        total += -math.log(kernel(rows[k], rows[positive]) / denominator)
    return total / two_n


def naive_kernel_infonce(z1, z2, gamma: float, temperature: float) -> float:
    return naive_core(unit_rows(z1, z2), gamma, temperature)


def naive_sum(z1, z2, tau1: float, tau2: float, lam: float) -> float:
    rows = unit_rows(z1, z2)
    return lam * naive_core(rows, 1.0, tau1) + (1 - lam) * naive_core(rows, 2.0, tau2)


def naive_concat_sum(z1, z2, tau1: float, tau2: float, lam: float,
                     renormalise_halves: bool = False) -> float:
    """Table 2: normalise the full vector, split it (optionally re-normalising each half)."""
    rows = unit_rows(z1, z2)
    half = len(rows[0]) // 2
    left, right = [r[:half] for r in rows], [r[half:] for r in rows]
    if renormalise_halves:
        left = [[v / math.sqrt(sum(u * u for u in r)) for v in r] for r in left]
        right = [[v / math.sqrt(sum(u * u for u in r)) for v in r] for r in right]
    return lam * naive_core(left, 1.0, tau1) + (1 - lam) * naive_core(right, 2.0, tau2)


def random_views(batch: int, dim: int, seed: int, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    z1 = torch.randn(batch, dim, generator=generator, dtype=torch.float64)
    z2 = torch.randn(batch, dim, generator=generator, dtype=torch.float64)
    return z1.to(dtype), z2.to(dtype)


# --- agreement with the naive loops -------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("gamma", [0.5, 1.0, 2.0, 3.0])
@pytest.mark.parametrize("dim", [2, 7, 24])
@pytest.mark.parametrize("batch", [1, 2, 5, 9])
def test_kernel_infonce_matches_naive(batch: int, dim: int, gamma: float,
                                      temperature: float) -> None:
    z1, z2 = random_views(batch, dim, seed=1000 * batch + 10 * dim + int(10 * gamma))
    expected = naive_kernel_infonce(z1, z2, gamma, temperature)
    loss = kernel_infonce_loss(z1, z2, gamma, temperature)
    assert loss.dim() == 0 and loss.dtype == torch.float64
    assert loss.item() == pytest.approx(expected, rel=1e-10, abs=1e-10)
    loss32 = kernel_infonce_loss(z1.float(), z2.float(), gamma, temperature)
    assert loss32.dtype == torch.float32
    assert loss32.item() == pytest.approx(expected, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("taus", [(0.1, 0.5), (0.5, 0.2), (1.0, 1.0)])
@pytest.mark.parametrize("dim", [3, 16])
@pytest.mark.parametrize("batch", [1, 3, 6])
def test_sum_kernel_matches_naive(batch: int, dim: int, taus: tuple[float, float],
                                  lam: float) -> None:
    z1, z2 = random_views(batch, dim, seed=7 * batch + dim)
    expected = naive_sum(z1, z2, *taus, lam)
    assert sum_kernel_loss(z1, z2, *taus, lam).item() == pytest.approx(expected, rel=1e-10)
    loss32 = sum_kernel_loss(z1.float(), z2.float(), *taus, lam)
    assert loss32.dtype == torch.float32
    assert loss32.item() == pytest.approx(expected, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("taus", [(0.1, 0.5), (0.5, 0.2), (1.0, 1.0)])
@pytest.mark.parametrize("dim", [2, 6, 16])
@pytest.mark.parametrize("batch", [1, 3, 6])
def test_concat_sum_kernel_matches_naive(batch: int, dim: int, taus: tuple[float, float],
                                         lam: float) -> None:
    z1, z2 = random_views(batch, dim, seed=11 * batch + dim)
    expected = naive_concat_sum(z1, z2, *taus, lam)
    assert concat_sum_kernel_loss(z1, z2, *taus, lam).item() == pytest.approx(expected,
                                                                               rel=1e-10)
    loss32 = concat_sum_kernel_loss(z1.float(), z2.float(), *taus, lam)
    assert loss32.dtype == torch.float32
    assert loss32.item() == pytest.approx(expected, rel=1e-4, abs=1e-5)


def test_concat_sum_does_not_renormalise_the_halves() -> None:
    # Halves of a normalised vector have norms below 1 that vary by row; re-normalising them
    # would change both terms (the gamma = 1 term is not scale-free).
    z1, z2 = random_views(6, 8, seed=5)
    z1[:, :4] *= 3.0  # make the halves' norms clearly unequal
    loss = concat_sum_kernel_loss(z1, z2, 0.3, 0.4, 0.5).item()
    assert loss == pytest.approx(naive_concat_sum(z1, z2, 0.3, 0.4, 0.5), rel=1e-10)
    renormalised = naive_concat_sum(z1, z2, 0.3, 0.4, 0.5, renormalise_halves=True)
    assert abs(loss - renormalised) > 1e-2


# --- closed forms and identities ----------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.1, 0.5, 2.0])
@pytest.mark.parametrize("gamma", [0.5, 1.0, 2.0, 3.0])
@pytest.mark.parametrize("n", [1, 2, 4, 7])
def test_kernel_closed_form_with_identical_one_hot_views(n: int, gamma: float,
                                                         temperature: float) -> None:
    # Each anchor: its positive at distance 0 (kernel 1), the 2N - 2 others at sqrt(2).
    z = torch.eye(n, dtype=torch.float64)
    expected = math.log(1 + (2 * n - 2) * math.exp(-(2 ** (gamma / 2)) / temperature))
    assert kernel_infonce_loss(z, z.clone(), gamma, temperature).item() == pytest.approx(
        expected, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("lam", [0.0, 0.25, 1.0])
@pytest.mark.parametrize("n", [1, 3, 6])
def test_sum_kernel_closed_form_with_identical_one_hot_views(n: int, lam: float) -> None:
    z = torch.eye(n, dtype=torch.float64)
    tau1, tau2 = 0.3, 0.7
    laplacian = math.log(1 + (2 * n - 2) * math.exp(-math.sqrt(2) / tau1))
    gaussian = math.log(1 + (2 * n - 2) * math.exp(-2 / tau2))
    expected = lam * laplacian + (1 - lam) * gaussian
    assert sum_kernel_loss(z, z, tau1, tau2, lam).item() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("lam", [0.0, 0.25, 1.0])
@pytest.mark.parametrize("n", [1, 3, 6])
def test_concat_sum_closed_form_with_repeated_one_hot_halves(n: int, lam: float) -> None:
    # [e_i, e_i] normalised is [e_i, e_i] / sqrt(2): in each (not re-normalised) half the other
    # rows are at distance 1, not sqrt(2).
    e = torch.eye(n, dtype=torch.float64)
    z = torch.cat([e, e], dim=1)
    tau1, tau2 = 0.3, 0.7
    expected = (lam * math.log(1 + (2 * n - 2) * math.exp(-1 / tau1))
                + (1 - lam) * math.log(1 + (2 * n - 2) * math.exp(-1 / tau2)))
    assert concat_sum_kernel_loss(z, z, tau1, tau2, lam).item() == pytest.approx(expected,
                                                                                 rel=1e-12)


@pytest.mark.parametrize("temperature", [0.05, 0.3, 1.0])
@pytest.mark.parametrize("dim", [2, 9, 64])
@pytest.mark.parametrize("batch", [1, 2, 6, 20])
def test_gamma_two_is_nt_xent_at_half_the_temperature(batch: int, dim: int,
                                                      temperature: float) -> None:
    # On unit vectors ||a - b||^2 = 2 - 2 a.b: the constant cancels in the softmax.
    z1, z2 = random_views(batch, dim, seed=batch + 100 * dim)
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    kernel = kernel_infonce_loss(z1, z2, 2.0, temperature)
    reference = nt_xent_loss(z1, z2, temperature / 2)
    assert kernel.item() == pytest.approx(reference.item(), rel=1e-12, abs=1e-12)
    kernel_grads = torch.autograd.grad(kernel, (z1, z2))
    reference_grads = torch.autograd.grad(reference, (z1, z2))
    for got, want in zip(kernel_grads, reference_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)


def test_sum_kernel_is_the_weighted_sum_of_its_two_kernel_losses() -> None:
    z1, z2 = random_views(7, 5, seed=3)
    expected = (0.4 * kernel_infonce_loss(z1, z2, 1.0, 0.2)
                + 0.6 * kernel_infonce_loss(z1, z2, 2.0, 0.9))
    assert sum_kernel_loss(z1, z2, 0.2, 0.9, 0.4).item() == pytest.approx(expected.item(),
                                                                          rel=1e-12)


# --- numerics: coinciding embeddings, gradients, precision, scale -------------------------


def views_with_coincidences() -> tuple[torch.Tensor, torch.Tensor]:
    """Identical views (positives at distance 0) plus duplicates between distinct rows."""
    z1, _ = random_views(5, 6, seed=8)
    z1[1] = z1[0]  # two anchors coincide: a negative pair at distance 0
    z2 = z1.clone()
    z2[3] = z1[0]  # a view of sample 3 coincides with sample 0
    return z1, z2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("gamma", [0.5, 1.0])
def test_kernel_values_and_gradients_finite_when_embeddings_coincide(
        gamma: float, dtype: torch.dtype) -> None:
    z1, z2 = views_with_coincidences()
    a = z1.to(dtype).requires_grad_(True)
    b = z2.to(dtype).requires_grad_(True)
    loss = kernel_infonce_loss(a, b, gamma, 0.2)
    loss.backward()
    assert torch.isfinite(loss)
    # Exact duplicates give the exact value: distance 0, whatever the Gram matrix's rounding.
    tolerance = 1e-12 if dtype == torch.float64 else 1e-5
    assert loss.item() == pytest.approx(naive_kernel_infonce(z1, z2, gamma, 0.2),
                                        rel=tolerance)
    for grad in (a.grad, b.grad):
        assert torch.isfinite(grad).all()
        assert grad.abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("gamma", [0.5, 1.0])
def test_kernel_gradients_finite_for_rows_with_the_same_direction(
        gamma: float, dtype: torch.dtype) -> None:
    # c z and z normalise to rows that differ by rounding only: from the Gram matrix their
    # squared distance is a few machine epsilons, or slightly negative.
    z1, _ = random_views(5, 6, seed=9, dtype=dtype)
    z1[2] = 2.5 * z1[0]
    z2 = (3.0 * z1).requires_grad_(True)
    z1.requires_grad_(True)
    loss = kernel_infonce_loss(z1, z2, gamma, 0.1)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(z1.grad).all() and torch.isfinite(z2.grad).all()
    if dtype == torch.float64:
        # Such a distance is resolved to about (machine epsilon)^(gamma / 2) only: here a
        # logit error of at most about 1e-3, the limit of the Gram-matrix formula.
        expected = naive_kernel_infonce(z1, z2, gamma, 0.1)
        assert loss.item() == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize("loss_fn", [
    lambda a, b: sum_kernel_loss(a, b, 0.2, 0.5, 0.5),
    lambda a, b: concat_sum_kernel_loss(a, b, 0.2, 0.5, 0.5),
])
def test_sum_losses_gradients_finite_when_embeddings_coincide(loss_fn) -> None:
    z1, z2 = views_with_coincidences()
    a, b = z1.float().requires_grad_(True), z2.float().requires_grad_(True)
    loss = loss_fn(a, b)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()


@pytest.mark.parametrize("gamma", [0.5, 1.0, 1.5, 2.0])
def test_kernel_gradient_matches_finite_differences(gamma: float) -> None:
    z1, z2 = random_views(3, 4, seed=4)
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: kernel_infonce_loss(a, b, gamma, 0.5),
                                    (z1, z2))


def test_sum_losses_gradients_match_finite_differences() -> None:
    z1, z2 = random_views(3, 4, seed=6)
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: sum_kernel_loss(a, b, 0.3, 0.6, 0.7),
                                    (z1, z2))
    assert torch.autograd.gradcheck(lambda a, b: concat_sum_kernel_loss(a, b, 0.3, 0.6, 0.7),
                                    (z1, z2))


ALL_TWO_VIEW_LOSSES = {
    "nt_xent": lambda a, b: nt_xent_loss(a, b, 0.1),
    "kernel_gamma_0.5": lambda a, b: kernel_infonce_loss(a, b, 0.5, 0.1),
    "kernel_gamma_1": lambda a, b: kernel_infonce_loss(a, b, 1.0, 0.1),
    "sum": lambda a, b: sum_kernel_loss(a, b, 0.1, 0.2, 0.5),
    "concat_sum": lambda a, b: concat_sum_kernel_loss(a, b, 0.1, 0.2, 0.5),
}


@pytest.mark.parametrize("name", list(ALL_TWO_VIEW_LOSSES))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_inputs_give_float32_loss(dtype: torch.dtype, name: str) -> None:
    loss_fn = ALL_TWO_VIEW_LOSSES[name]
    z1, z2 = random_views(8, 16, seed=2, dtype=dtype)
    loss = loss_fn(z1, z2)
    assert loss.dtype == torch.float32
    # The same rounded inputs in float64: the computation itself ran in float32.
    expected = loss_fn(z1.double(), z2.double()).item()
    assert loss.item() == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("name", list(ALL_TWO_VIEW_LOSSES))
def test_float32_under_bf16_autocast(name: str) -> None:
    # Under autocast a float32 matmul would run in bf16 (about 3 significant digits) unless
    # the loss turns autocast off; the loss must match the float32 value, not the bf16 one.
    loss_fn = ALL_TWO_VIEW_LOSSES[name]
    z1, z2 = random_views(16, 32, seed=12, dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = loss_fn(z1, z2)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(loss_fn(z1, z2).item(), rel=1e-6)


@pytest.mark.parametrize("name", [n for n in ALL_TWO_VIEW_LOSSES if n != "nt_xent"])
def test_invariant_to_rescaling_each_row(name: str) -> None:
    loss_fn = ALL_TWO_VIEW_LOSSES[name]
    z1, z2 = random_views(6, 8, seed=0)
    generator = torch.Generator().manual_seed(1)
    scales1 = torch.rand(6, 1, generator=generator, dtype=torch.float64) * 100 + 0.01
    scales2 = torch.rand(6, 1, generator=generator, dtype=torch.float64) * 100 + 0.01
    base = loss_fn(z1, z2).item()
    assert loss_fn(z1 * scales1, z2 * scales2).item() == pytest.approx(base, rel=1e-10)
    assert loss_fn(1e-3 * z1, 1e3 * z2).item() == pytest.approx(base, rel=1e-10)


# --- argument checks ----------------------------------------------------------------------

SHAPE_CASES = [((4, 8), (5, 8)), ((4, 8), (4, 10)), ((4,), (4,)), ((2, 4, 8), (2, 4, 8))]


@pytest.mark.parametrize("shapes", SHAPE_CASES)
def test_rejects_mismatched_or_non_matrix_shapes(shapes) -> None:
    z1, z2 = torch.randn(*shapes[0]), torch.randn(*shapes[1])
    for loss_fn in (lambda a, b: kernel_infonce_loss(a, b, 1.0, 0.5),
                    lambda a, b: sum_kernel_loss(a, b, 0.5, 0.5, 0.5),
                    lambda a, b: concat_sum_kernel_loss(a, b, 0.5, 0.5, 0.5)):
        with pytest.raises(ValueError, match="shape"):
            loss_fn(z1, z2)


@pytest.mark.parametrize("dim", [1, 5, 127])
def test_concat_sum_rejects_odd_dimension(dim: int) -> None:
    z = torch.randn(4, dim)
    with pytest.raises(ValueError, match=f"even; got d={dim}"):
        concat_sum_kernel_loss(z, z, 0.5, 0.5, 0.5)


@pytest.mark.parametrize("temperature", [0.0, -0.5, float("nan")])
def test_rejects_non_positive_temperatures(temperature: float) -> None:
    z = torch.randn(4, 8)
    cases = [("temperature", lambda: kernel_infonce_loss(z, z, 1.0, temperature)),
             ("tau1", lambda: sum_kernel_loss(z, z, temperature, 0.5, 0.5)),
             ("tau2", lambda: sum_kernel_loss(z, z, 0.5, temperature, 0.5)),
             ("tau1", lambda: concat_sum_kernel_loss(z, z, temperature, 0.5, 0.5)),
             ("tau2", lambda: concat_sum_kernel_loss(z, z, 0.5, temperature, 0.5))]
    for name, call in cases:
        with pytest.raises(ValueError, match=name) as info:
            call()
        assert str(temperature) in str(info.value)


@pytest.mark.parametrize("gamma", [0.0, -1.0, float("nan"), float("inf")])
def test_rejects_invalid_gamma(gamma: float) -> None:
    z = torch.randn(4, 8)
    with pytest.raises(ValueError, match="gamma") as info:
        kernel_infonce_loss(z, z, gamma, 0.5)
    assert str(gamma) in str(info.value)


@pytest.mark.parametrize("lam", [-0.1, 1.5, float("nan")])
def test_rejects_weight_outside_unit_interval(lam: float) -> None:
    z = torch.randn(4, 8)
    for loss_fn in (sum_kernel_loss, concat_sum_kernel_loss):
        with pytest.raises(ValueError, match=r"lam must be in \[0, 1\]") as info:
            loss_fn(z, z, 0.5, 0.5, lam)
        assert str(lam) in str(info.value)


# -- MoCo's queue InfoNCE ----------------------------------------------------------------------
def naive_moco(q, k, queue, temperature: float, gamma: float | None) -> float:
    """MoCo eq. 1 with cosine or kernel logits, one query at a time, in Python floats."""
    def unit(v):
        norm = math.sqrt(sum(x * x for x in v))
        return [x / norm for x in v]

    def logit(a, b):
        if gamma is None:
            return sum(x * y for x, y in zip(a, b, strict=True)) / temperature
        distance = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))
        return -distance**gamma / temperature

    queue = [unit(n) for n in queue.tolist()]
    total = 0.0
    for qi, ki in zip(q.tolist(), k.tolist(), strict=True):
        qi, ki = unit(qi), unit(ki)
        positive = logit(qi, ki)
        denominator = math.exp(positive) + sum(math.exp(logit(qi, n)) for n in queue)
        total += -(positive - math.log(denominator))
    return total / len(q)


@pytest.mark.parametrize("gamma", [None, 1.0, 2.0, 0.5])
@pytest.mark.parametrize("temperature", [0.1, 0.5])
def test_moco_loss_matches_naive(gamma: float | None, temperature: float) -> None:
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(6, 5, generator=g, dtype=torch.float64), torch.randn(6, 5, generator=g,
                                                                             dtype=torch.float64)
    queue = torch.randn(9, 5, generator=g, dtype=torch.float64)
    got = moco_loss(q, k, queue, temperature=temperature, gamma=gamma).item()
    assert got == pytest.approx(naive_moco(q, k, queue, temperature, gamma), rel=1e-10)


def test_moco_loss_is_computed_in_float32_under_bf16_autocast() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, queue = (torch.randn(n, 64, generator=g) for n in (32, 32, 512))
    exact = moco_loss(q.double(), k.double(), queue.double(), temperature=0.05).item()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = moco_loss(q, k, queue, temperature=0.05)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(exact, rel=1e-6)  # bf16 matmuls: 8e-5 off (measured)


# -- near-duplicate positives in float32 -------------------------------------------------------
def loop_kernel_loss(z1: torch.Tensor, z2: torch.Tensor, terms, queue=None,
                     normalise: bool = True) -> torch.Tensor:
    """sum of w * Kernel-InfoNCE(gamma, tau) on column blocks, anchor by anchor in float64
    torch (differentiable), every distance the norm of an explicit float64 difference.
    ``terms``: (w, gamma, tau, columns). Two-view without ``queue``, MoCo's eq. 1 with it.
    ``normalise=False`` takes ``z1``, ``z2`` as already normalised."""
    z1, z2 = z1.double(), z2.double()
    u1 = [row / row.norm() if normalise else row for row in z1]
    u2 = [row / row.norm() if normalise else row for row in z2]
    negatives = [row / row.norm() for row in queue.double()] if queue is not None else None
    total = torch.zeros((), dtype=torch.float64)
    for w, gamma, tau, cols in terms:
        def logit(a, b, gamma=gamma, tau=tau, cols=cols):
            return -(a[cols] - b[cols]).norm() ** gamma / tau

        if negatives is None:
            rows = u1 + u2
            n = len(u1)
            term = torch.zeros((), dtype=torch.float64)
            for k in range(2 * n):
                positive = k + n if k < n else k - n
                logits = torch.stack([logit(rows[k], rows[j]) for j in range(2 * n) if j != k])
                term = term - (logit(rows[k], rows[positive]) - torch.logsumexp(logits, 0))
            total = total + w * term / (2 * n)
        else:
            term = torch.zeros((), dtype=torch.float64)
            for q, k in zip(u1, u2, strict=True):
                logits = torch.stack([logit(q, k)] + [logit(q, m) for m in negatives])
                term = term - (logits[0] - torch.logsumexp(logits, 0))
            total = total + w * term / len(u1)
    return total


def near_duplicate_views(relative_distance: float, n: int = 6, d: int = 16, seed: int = 0):
    """float32 views whose positives lie ``relative_distance`` apart (relative to the norm)."""
    g = torch.Generator().manual_seed(seed)
    z1 = torch.randn(n, d, generator=g)
    step = torch.randn(n, d, generator=g, dtype=torch.float64)
    step = step / step.norm(dim=1, keepdim=True) * z1.double().norm(dim=1, keepdim=True)
    z2 = (z1.double() + relative_distance * step).float()
    return z1, z2, torch.randn(9, d, generator=g)


WHOLE, LEFT, RIGHT = slice(None), slice(None, 8), slice(8, None)
NEAR_DUPLICATE_CASES = {
    "laplacian": (lambda a, b, q: kernel_infonce_loss(a, b, 1.0, 0.5, queue=q),
                  [(1.0, 1.0, 0.5, WHOLE)]),
    "gamma0.5": (lambda a, b, q: kernel_infonce_loss(a, b, 0.5, 0.5, queue=q),
                 [(1.0, 0.5, 0.5, WHOLE)]),
    "gamma1.5": (lambda a, b, q: kernel_infonce_loss(a, b, 1.5, 0.5, queue=q),
                 [(1.0, 1.5, 0.5, WHOLE)]),
    "sum": (lambda a, b, q: sum_kernel_loss(a, b, 0.5, 0.3, 0.6, queue=q),
            [(0.6, 1.0, 0.5, WHOLE), (0.4, 2.0, 0.3, WHOLE)]),
    "concat_sum": (lambda a, b, q: concat_sum_kernel_loss(a, b, 0.5, 0.3, 0.6, queue=q),
                   [(0.6, 1.0, 0.5, LEFT), (0.4, 2.0, 0.3, RIGHT)]),
}


@pytest.mark.parametrize("with_queue", [False, True])
@pytest.mark.parametrize("relative_distance", [1e-3, 1e-4, 1e-5])
@pytest.mark.parametrize("name", list(NEAR_DUPLICATE_CASES))
def test_near_duplicate_positives_keep_value_and_gradient_in_float32(
        name: str, relative_distance: float, with_queue: bool) -> None:
    """A positive pair that nearly coincides (what training drives it to): the float32 loss
    and its gradient agree with the float64 loop to 1e-4 relative, for gamma < 2 too, where
    distances from the Gram matrix lose the pair (value ~1e-2 and gradient ~100% off at 1e-4)."""
    loss_fn, terms = NEAR_DUPLICATE_CASES[name]
    z1, z2, queue = near_duplicate_views(relative_distance)
    queue = queue if with_queue else None
    live1, live2 = z1.clone().requires_grad_(True), z2.clone().requires_grad_(True)
    loss = loss_fn(live1, live2, queue)
    loss.backward()
    assert loss.dtype == torch.float32
    ref1, ref2 = z1.double().requires_grad_(True), z2.double().requires_grad_(True)
    expected = loop_kernel_loss(ref1, ref2, terms, queue)
    expected.backward()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4)
    for got, want in ((live1.grad, ref1.grad), (live2.grad, ref2.grad)):
        torch.testing.assert_close(got.double(), want, rtol=1e-4,
                                   atol=1e-4 * want.abs().max().item())


def test_moco_loss_near_duplicate_positive_keeps_its_gradient_in_float32() -> None:
    z1, z2, queue = near_duplicate_views(1e-4)
    live = z1.clone().requires_grad_(True)
    moco_loss(live, z2, queue, temperature=0.5, gamma=1.0).backward()
    ref = z1.double().requires_grad_(True)
    loop_kernel_loss(ref, z2, [(1.0, 1.0, 0.5, WHOLE)], queue).backward()
    torch.testing.assert_close(live.grad.double(), ref.grad, rtol=1e-4,
                               atol=1e-4 * ref.grad.abs().max().item())


def test_coinciding_positive_has_zero_gradient_from_its_own_distance() -> None:
    """At the cusp (gamma < 2, d = 0) the positive's subgradient is 0: with identical views the
    gradient is that of the negatives alone, finite, for both modes."""
    z1, _, queue = near_duplicate_views(0.0)
    for q in (None, queue):
        live = z1.clone().requires_grad_(True)
        kernel_infonce_loss(live, z1, 0.5, 0.5, queue=q).backward()
        assert torch.isfinite(live.grad).all()


@pytest.mark.parametrize("with_queue", [False, True])
def test_a_zero_embedding_is_normalised_to_zero_as_elsewhere(with_queue: bool) -> None:
    """A zero row (F.normalize leaves it 0): the positive's distance is that of the normalised
    rows, and value and gradients stay finite."""
    z1, z2, queue = near_duplicate_views(0.3)
    z1[2] = 0.0
    queue = queue if with_queue else None
    live = z1.clone().requires_grad_(True)
    loss = kernel_infonce_loss(live, z2, 1.0, 0.5, queue=queue)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(live.grad).all()
    u1, u2 = F.normalize(z1.double(), dim=1), F.normalize(z2.double(), dim=1)
    expected = loop_kernel_loss(u1, u2, [(1.0, 1.0, 0.5, WHOLE)], queue, normalise=False)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
