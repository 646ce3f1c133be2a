"""NT-Xent against an independent naive implementation (explicit loops, float64)."""

from __future__ import annotations

import math

import pytest
import torch

from modules.losses import nt_xent_loss


def naive_nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> float:
    """SimCLR eq. 1 written out anchor by anchor, in Python floats (float64)."""
    rows = [[float(v) for v in row] for row in torch.cat([z1, z2]).double()]
    rows = [[v / math.sqrt(sum(u * u for u in row)) for v in row] for row in rows]
    two_n, n = len(rows), len(rows) // 2

    def sim(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    total = 0.0
    for k in range(two_n):
        positive = k + n if k < n else k - n
        denominator = sum(math.exp(sim(rows[k], rows[j]) / temperature)
                          for j in range(two_n) if j != k)
        numerator = math.exp(sim(rows[k], rows[positive]) / temperature)
        total += -math.log(numerator / denominator)
    return total / two_n


@pytest.mark.parametrize("temperature", [0.05, 0.2, 0.5, 1.0])
@pytest.mark.parametrize("dim", [2, 8, 33])
@pytest.mark.parametrize("batch", [1, 2, 5, 16])
def test_matches_naive_loop_implementation(batch: int, dim: int, temperature: float) -> None:
    generator = torch.Generator().manual_seed(1000 * batch + 10 * dim + int(100 * temperature))
    z1 = torch.randn(batch, dim, generator=generator, dtype=torch.float64)
    z2 = torch.randn(batch, dim, generator=generator, dtype=torch.float64)
    expected = naive_nt_xent(z1, z2, temperature)
    loss = nt_xent_loss(z1, z2, temperature)
    assert loss.dim() == 0
    assert loss.dtype == torch.float64
    assert loss.item() == pytest.approx(expected, rel=1e-10, abs=1e-10)
    # float32 inputs agree with the float64 reference to float32 precision.
    loss32 = nt_xent_loss(z1.float(), z2.float(), temperature)
    assert loss32.dtype == torch.float32
    assert loss32.item() == pytest.approx(expected, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("temperature", [0.1, 0.5, 1.0, 2.0])
@pytest.mark.parametrize("n", [1, 2, 4, 7])
def test_closed_form_with_identical_one_hot_views(n: int, temperature: float) -> None:
    # Each anchor: similarity 1 with itself (excluded) and its positive, 0 with the 2N - 2 others.
    z = torch.eye(n, dtype=torch.float64)
    expected = -math.log(math.exp(1 / temperature) / (math.exp(1 / temperature) + 2 * n - 2))
    assert nt_xent_loss(z, z.clone(), temperature).item() == pytest.approx(expected, rel=1e-12)


def test_invariant_to_rescaling_each_row() -> None:
    generator = torch.Generator().manual_seed(0)
    z1 = torch.randn(6, 5, generator=generator, dtype=torch.float64)
    z2 = torch.randn(6, 5, generator=generator, dtype=torch.float64)
    scales1 = torch.rand(6, 1, generator=generator, dtype=torch.float64) * 100 + 0.01
    scales2 = torch.rand(6, 1, generator=generator, dtype=torch.float64) * 100 + 0.01
    base = nt_xent_loss(z1, z2, 0.3)
    assert nt_xent_loss(z1 * scales1, z2 * scales2, 0.3).item() == pytest.approx(base.item(),
                                                                                  rel=1e-12)
    assert nt_xent_loss(1e-3 * z1, 1e3 * z2, 0.3).item() == pytest.approx(base.item(), rel=1e-12)


def test_symmetric_under_swapping_views() -> None:
    generator = torch.Generator().manual_seed(1)
    z1 = torch.randn(9, 4, generator=generator, dtype=torch.float64)
    z2 = torch.randn(9, 4, generator=generator, dtype=torch.float64)
    assert nt_xent_loss(z1, z2, 0.2).item() == pytest.approx(nt_xent_loss(z2, z1, 0.2).item(),
                                                             rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_inputs_give_float32_loss(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(2)
    z1 = torch.randn(8, 16, generator=generator).to(dtype)
    z2 = torch.randn(8, 16, generator=generator).to(dtype)
    loss = nt_xent_loss(z1, z2, 0.1)
    assert loss.dtype == torch.float32
    # The same (rounded) inputs scored in float64: the loss is computed in float32, not in dtype.
    expected = naive_nt_xent(z1.double(), z2.double(), 0.1)
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_gradients_are_finite_and_reach_both_views() -> None:
    generator = torch.Generator().manual_seed(3)
    z1 = torch.randn(5, 7, generator=generator, requires_grad=True)
    z2 = torch.randn(5, 7, generator=generator, requires_grad=True)
    nt_xent_loss(z1, z2, 0.05).backward()
    for grad in (z1.grad, z2.grad):
        assert grad is not None
        assert torch.isfinite(grad).all()
        assert grad.abs().sum() > 0


def test_gradient_matches_finite_differences() -> None:
    generator = torch.Generator().manual_seed(4)
    z1 = torch.randn(3, 4, generator=generator, dtype=torch.float64, requires_grad=True)
    z2 = torch.randn(3, 4, generator=generator, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: nt_xent_loss(a, b, 0.5), (z1, z2))


@pytest.mark.parametrize("shapes", [((4, 8), (5, 8)), ((4, 8), (4, 9)), ((4,), (4,)),
                                    ((2, 4, 8), (2, 4, 8))])
def test_rejects_mismatched_or_non_matrix_shapes(shapes) -> None:
    z1, z2 = torch.randn(*shapes[0]), torch.randn(*shapes[1])
    with pytest.raises(ValueError, match="shape"):
        nt_xent_loss(z1, z2, 0.5)


@pytest.mark.parametrize("temperature", [0.0, -0.5, float("nan")])
def test_rejects_non_positive_temperature(temperature: float) -> None:
    z = torch.randn(4, 8)
    with pytest.raises(ValueError, match="temperature") as info:
        nt_xent_loss(z, z, temperature)
    assert str(temperature) in str(info.value)
