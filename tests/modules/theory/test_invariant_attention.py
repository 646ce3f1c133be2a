"""Invariant attention (modules.theory.invariant_attention) against independent naive
implementations.

"Invariant Attention: Provable Clustering Under Transformations" (anonymous ICLR submission):
the SE(2) warp with Keys' cubic convolution (section 2.1) against loops and exact pixel
permutations, registration and kappa_max (eq. 2.2) against known transformations, the invariant
mean (Algorithm 1) of transformed copies of one image, kernel attention (eq. 2.1) against loops,
and the experiment suite on its fast budget.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import yaml
from repository import ROOT

from modules.theory.invariant_attention import (
    column_normalise,
    gaussian_smooth,
    invariant_attention,
    invariant_mean,
    invariant_means,
    invariant_similarity,
    kernel_attention,
    keys_cubic,
    register,
    se2_warp,
    unit_normalise,
)
from modules.theory.invariant_attention.warp import se2_warp_with_jacobian

# many tiny operations: one intra-op thread (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("one_thread")


def digit(cls: int, size: int = 24, inner: int = 14) -> torch.Tensor:
    """A real scikit-learn digit (the first of its class), upscaled and centred: (1, 1, S, S)."""
    from sklearn.datasets import load_digits

    from benchmarks.experiments.invariant_attention.run import place_digit

    data = load_digits()
    image = torch.tensor(data.images[list(data.target).index(cls)] / 16.0, dtype=torch.float64)
    return place_digit(image[None], size, inner).double()


# -- the warp ----------------------------------------------------------------------------------
def naive_keys(s: float, a: float = -0.5) -> float:
    """Keys (1981), eq. 15, written out again."""
    t = abs(s)
    if t <= 1:
        return (a + 2) * t**3 - (a + 3) * t**2 + 1
    if t < 2:
        return a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a
    return 0.0


def naive_warp(image: np.ndarray, angle: float, dx: float, dy: float) -> np.ndarray:
    """Output pixel (row y, column x) reads the input at R(-angle) (x - c - b) + c, with the
    rotation counter-clockwise on screen, summing every pixel's Keys weight (zero outside)."""
    height, width = image.shape
    cx, cy = (width - 1) / 2, (height - 1) / 2
    out = np.zeros_like(image)
    for y in range(height):
        for x in range(width):
            px, py = x - cx - dx, y - cy - dy
            u = math.cos(angle) * px - math.sin(angle) * py + cx
            v = math.sin(angle) * px + math.cos(angle) * py + cy
            out[y, x] = sum(image[row, col] * naive_keys(u - col) * naive_keys(v - row)
                            for row in range(height) for col in range(width))
    return out


@pytest.mark.parametrize("height, width", [(5, 5), (6, 7)])
@pytest.mark.parametrize("angle, dx, dy", [(0.3, 0.4, -1.2), (-2.1, 1.5, 0.25), (0.0, 0.5, 0.0)])
def test_warp_matches_a_naive_loop(height, width, angle, dx, dy):
    image = torch.rand(1, 1, height, width, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(height * width))
    ours = se2_warp(image, torch.tensor([angle], dtype=torch.float64),
                    torch.tensor([[dx, dy]], dtype=torch.float64))
    expected = naive_warp(image[0, 0].numpy(), angle, dx, dy)
    np.testing.assert_allclose(ours[0, 0].numpy(), expected, atol=1e-12)


@pytest.mark.parametrize("size", [6, 7])
@pytest.mark.parametrize("quarter_turns", [1, 2, 3, -1])
def test_quarter_turn_is_the_exact_pixel_rotation(size, quarter_turns):
    x = torch.rand(3, 2, size, size, dtype=torch.float64)
    angle = torch.full((3,), quarter_turns * math.pi / 2, dtype=torch.float64)
    ours = se2_warp(x, angle, torch.zeros(3, 2, dtype=torch.float64))
    # torch.rot90 with k = 1 turns counter-clockwise as displayed (rows down), as se2_warp does.
    torch.testing.assert_close(ours, torch.rot90(x, quarter_turns, dims=(-2, -1)),
                               atol=1e-12, rtol=0)


@pytest.mark.parametrize("dx, dy", [(2, -3), (-1, 0), (0, 4), (9, 0)])
def test_integer_shift_is_the_exact_pixel_permutation(dx, dy):
    x = torch.rand(2, 3, 7, 8, dtype=torch.float64)
    ours = se2_warp(x, torch.zeros(2, dtype=torch.float64),
                    torch.tensor([[dx, dy]] * 2, dtype=torch.float64))
    expected = torch.zeros_like(x)
    for row in range(7):
        for col in range(8):
            src_row, src_col = row - dy, col - dx  # output (row, col) reads the input there
            if 0 <= src_row < 7 and 0 <= src_col < 8:
                expected[..., row, col] = x[..., src_row, src_col]
    torch.testing.assert_close(ours, expected, atol=1e-12, rtol=0)


def test_keys_kernel_interpolates_and_reproduces_quadratics():
    t = torch.linspace(0, 1, 11, dtype=torch.float64)[:-1]
    taps = torch.arange(-3, 5, dtype=torch.float64)
    weights = keys_cubic(t[:, None] - taps)  # sample at t from pixels at the taps
    torch.testing.assert_close(weights.sum(1), torch.ones_like(t))  # partition of unity
    torch.testing.assert_close(weights @ taps, t)  # linear functions reproduced
    torch.testing.assert_close(weights @ taps**2, t**2)  # and quadratics (a = -1/2)
    integers = keys_cubic(torch.tensor([0.0, 1.0, -1.0, 2.0, -2.0, 3.0]))
    assert integers.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_warp_gradients_match_finite_differences():
    x = torch.rand(2, 2, 6, 5, dtype=torch.float64, requires_grad=True)
    angle = torch.tensor([0.3, -1.2], dtype=torch.float64, requires_grad=True)
    shift = torch.tensor([[0.4, -0.7], [2.3, 1.1]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(se2_warp, (x, angle, shift))
    index = torch.tensor([1, 0, 1])
    angle3 = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64, requires_grad=True)
    shift3 = torch.tensor([[0.4, -0.7], [2.3, 1.1], [9.0, 0.0]], dtype=torch.float64,
                          requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, c: se2_warp(a, b, c, index),
                                    (x, angle3, shift3))


def test_explicit_jacobian_matches_autograd():
    x = digit(4, 16, 10)
    angle = torch.tensor([0.7], dtype=torch.float64)
    shift = torch.tensor([[1.3, -0.4]], dtype=torch.float64)
    _, jacobian = se2_warp_with_jacobian(x, angle, shift)
    params = torch.cat([angle, shift[0]])
    expected = torch.autograd.functional.jacobian(
        lambda p: se2_warp(x, p[:1], p[None, 1:]), params)  # (1, 1, H, W, 3)
    torch.testing.assert_close(jacobian, expected)


@pytest.mark.parametrize("sigma", [0.6, 1.5])
def test_gaussian_smoothing_matches_a_naive_zero_padded_convolution(sigma):
    x = torch.rand(1, 1, 6, 9, dtype=torch.float64)
    radius = max(1, math.ceil(3 * sigma))
    kernel = [math.exp(-0.5 * (t / sigma) ** 2) for t in range(-radius, radius + 1)]
    kernel = [k / sum(kernel) for k in kernel]
    expected = np.zeros((6, 9))
    for r in range(6):
        for c in range(9):
            expected[r, c] = sum(
                kernel[i + radius] * kernel[j + radius] * float(x[0, 0, r + i, c + j])
                for i in range(-radius, radius + 1) for j in range(-radius, radius + 1)
                if 0 <= r + i < 6 and 0 <= c + j < 9)
    np.testing.assert_allclose(gaussian_smooth(x, sigma)[0, 0].numpy(), expected, atol=1e-12)


# -- registration and kappa_max ------------------------------------------------------------------
def test_registration_recovers_known_transformations():
    base = digit(7)
    angles = torch.tensor([0.0, 0.8, -1.1, 2.6], dtype=torch.float64)  # 2.6 rad: 149 degrees
    shifts = torch.tensor([[0.0, 0.0], [2.5, -1.5], [-3.0, 1.0], [1.0, 2.0]],
                          dtype=torch.float64)
    moved = se2_warp(base.expand(4, -1, -1, -1), angles, shifts)
    found = register(moved, base.expand(4, -1, -1, -1).contiguous())
    error = torch.remainder(found.angle - angles + math.pi, 2 * math.pi) - math.pi
    assert error.abs().max() < math.radians(0.5)
    assert (found.shift - shifts).abs().max() < 0.1
    assert found.sq_distance.max() < 1e-3 * base.square().sum()


def test_kmax_is_symmetric_with_unit_diagonal_and_above_the_plain_kernel():
    x = torch.cat([digit(7, 16, 10), digit(4, 16, 10), digit(0, 16, 10)]).float()
    x = torch.cat([x, se2_warp(x, torch.tensor([0.5, -0.9, 1.4]), torch.zeros(3, 2))])
    k = invariant_similarity(x)
    torch.testing.assert_close(k, k.T)
    torch.testing.assert_close(k.diagonal(), torch.ones(6))
    flat = unit_normalise(x).flatten(1)
    plain = torch.exp(-2.0 * torch.cdist(flat, flat) ** 2)
    assert (k >= plain - 1e-4).all()  # the identity is one of the transformations searched
    assert (k[torch.arange(3), torch.arange(3) + 3] > 0.97).all()  # transformed copies match


def test_kmax_barely_moves_when_one_input_is_transformed_again():
    x = torch.cat([digit(7, 32, 20), digit(4, 32, 20), digit(0, 32, 20)]).float()
    x = se2_warp(torch.cat([x, x]), torch.tensor([0.0, 0.4, -0.6, 1.0, -0.3, 0.9]),
                 torch.tensor([[0.0, 0.0], [1.0, -2.0], [0.5, 0.5], [-1.5, 1.0], [2.0, 0.0],
                               [0.0, -1.0]]))
    before = invariant_similarity(x)
    moved = x.clone()
    moved[1] = se2_warp(x[1:2], torch.tensor([0.7]), torch.tensor([[1.5, -1.0]]))[0]
    after = invariant_similarity(moved)
    assert ((after - before).abs() / before).max() < 0.03


# -- the invariant mean ----------------------------------------------------------------------------
def test_invariant_mean_of_transformed_copies_is_the_image_up_to_a_transformation():
    base = digit(3, 24, 14)
    true_angle = torch.tensor([0.0, 0.6, -0.5, 0.3, -0.7], dtype=torch.float64)
    true_shift = torch.tensor([[0.0, 0.0], [1.5, -1.0], [-2.0, 0.5], [0.5, 2.0], [-1.0, -1.5]],
                              dtype=torch.float64)
    copies = unit_normalise(se2_warp(base.expand(5, -1, -1, -1), true_angle, true_shift))
    out = invariant_mean(copies, torch.ones(5, dtype=torch.float64), iterations=30)
    assert out.objective[-1] < 0.03 * out.objective[0]
    assert torch.all(out.objective[1:] <= out.objective[:-1])  # never a step uphill
    # The mean is the base up to SE(2): register it onto the base.
    gap = register(unit_normalise(base), unit_normalise(out.mean[None])).sq_distance
    assert gap < 0.01
    # Image i was moved by its true transform and then by the one found: the composition is one
    # common transformation (the mean's pose), so the angles add to a constant.
    total = torch.remainder(out.angle + true_angle + math.pi, 2 * math.pi) - math.pi
    assert (total - total.mean()).abs().max() < math.radians(2)


def test_batched_means_match_one_column_at_a_time():
    x = unit_normalise(torch.cat([digit(7, 16, 10), digit(4, 16, 10), digit(0, 16, 10)]))
    x = torch.cat([x, se2_warp(x, torch.tensor([0.3, -0.4, 0.5], dtype=torch.float64),
                               torch.zeros(3, 2, dtype=torch.float64))])
    weights = torch.rand(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    batched = invariant_means(x, weights, iterations=3)
    for j in range(3):
        single = invariant_mean(x, weights[:, j], iterations=3)
        torch.testing.assert_close(batched.mean[j], single.mean)
        torch.testing.assert_close(batched.angle[j], single.angle)


def test_invariant_attention_weights_are_column_normalised_and_block_structured():
    x = torch.cat([digit(7, 16, 10), digit(0, 16, 10)]).float()
    x = se2_warp(torch.cat([x, x]), torch.tensor([0.0, 0.0, 1.0, -0.8]), torch.zeros(4, 2))
    out = invariant_attention(x, iterations=1, mean_iterations=3)
    w = out.weights[0]
    torch.testing.assert_close(w.sum(0), torch.ones(4))
    same = torch.tensor([[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 1, 0], [0, 1, 0, 1]], dtype=torch.bool)
    assert w[same].min() > w[~same].max()
    assert len(out.history) == 2 and out.points.shape == x.shape


def test_registration_start_keeps_every_mean_in_its_image_pose():
    x = torch.cat([digit(7, 32, 20), digit(0, 32, 20)]).float()
    x = unit_normalise(se2_warp(torch.cat([x, x]), torch.tensor([0.0, 0.0, 1.2, -0.9]),
                                torch.tensor([[0.0, 0.0], [0.0, 0.0], [2.0, -1.0], [0.0, 1.5]])))
    out = invariant_attention(x, iterations=1, bandwidth=8.0, init="registration",
                              mean_iterations=3)
    gap = (unit_normalise(out.points) - x).square().flatten(1).sum(1)
    assert gap.max() < 0.1  # mean j sits where image j is (the paper's identity start does not)
    with pytest.raises(ValueError, match="init"):
        invariant_attention(x, iterations=1, init="random")


# -- kernel attention ------------------------------------------------------------------------------
@pytest.mark.parametrize("n, d, beta", [(5, 2, 0.5), (7, 3, 2.0)])
def test_kernel_attention_matches_naive_loops(n, d, beta):
    x = torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(n))
    points = [list(map(float, row)) for row in x]
    for _ in range(2):
        gamma = [[math.exp(-beta * sum((a - b) ** 2 for a, b in zip(p, q, strict=True)))
                  for q in points] for p in points]
        column = [sum(gamma[l_][j] for l_ in range(n)) for j in range(n)]
        points = [[sum(points[i][c] * gamma[i][j] / column[j] for i in range(n))
                   for c in range(d)] for j in range(n)]
    ours = kernel_attention(x, 2, beta)
    np.testing.assert_allclose(ours.points.numpy(), np.array(points), atol=1e-12)
    torch.testing.assert_close(ours.weights.sum(1), torch.ones(2, n, dtype=torch.float64))


def test_column_normalise_columns_sum_to_one():
    w = column_normalise(torch.rand(5, 5) + 0.1)
    torch.testing.assert_close(w.sum(0), torch.ones(5))


# -- the experiment suite --------------------------------------------------------------------------
def fast_settings() -> tuple[list[int], dict]:
    from benchmarks.suites.config import merge

    path = ROOT / "benchmarks" / "invariant_attention.yaml"
    suite = yaml.safe_load(path.read_text())
    return suite["fast"]["seeds"], merge(suite["settings"], suite["fast"]["settings"])


def test_suite_runs_on_its_fast_budget():
    from benchmarks.experiments.invariant_attention import run

    seeds, settings = fast_settings()
    out = run(seeds=seeds, **settings)
    assert {"experiment1_images_beta2.png", "experiment2_invariant_mean.png", "figure2_blobs.png",
            "scaling.png"} <= set(out.figures)
    assert all(png.startswith(b"\x89PNG") for png in out.figures.values())
    ari = out.tables["Experiment 1: spectral clustering of the weights (ARI) and their structure"]
    assert all(-1 <= row["ARI mean"] <= 1 and row["seeds"] == len(seeds) for row in ari)
    exp2 = out.tables["Experiment 2: invariant mean of transformed 3s"]
    assert exp2[-1]["objective (eq. 2.3) mean"] < exp2[0]["objective (eq. 2.3) mean"]
    blobs = out.tables["Figure 2: kernel attention on Gaussian blobs (generated)"]
    assert blobs[-1]["within-blob spread / initial mean"] < 0.1
    scaling = out.tables["Scaling: invariant_similarity wall time"]
    assert all(row["seconds"] > 0 and row["pairs"] == row["n"] * (row["n"] - 1) // 2
               for row in scaling)
    assert any("Experiment 2" in note for note in out.notes)


def test_suite_rejects_unknown_and_missing_nested_settings():
    """The suite file is the settings' one home: a misspelt key or a missing one is an error
    naming it, raised before anything is computed."""
    from benchmarks.experiments.invariant_attention import run
    from benchmarks.infra.errors import ConfigError

    seeds, settings = fast_settings()
    misspelt = {**settings, "experiment1": {**settings["experiment1"], "bandwith": 2.0}}
    with pytest.raises(ConfigError, match="unknown key 'bandwith' in settings: experiment1"):
        run(seeds=seeds, **misspelt)
    registration = {k: v for k, v in settings["experiment1"]["registration"].items()
                    if k != "starts"}
    missing = {**settings, "experiment1": {**settings["experiment1"],
                                           "registration": registration}}
    with pytest.raises(ConfigError, match="registration is missing 'starts'"):
        run(seeds=seeds, **missing)


@pytest.mark.slow
def test_experiment1_ia_clusters_where_kernel_attention_does_not():
    """The paper's criterion on one seed of the full Experiment 1 data (one round, beta = 2)."""
    from benchmarks.experiments.invariant_attention.run import (
        experiment1_seed,
        place_digit,
        typical_digits,
    )

    path = ROOT / "benchmarks" / "invariant_attention.yaml"
    full = yaml.safe_load(path.read_text())["settings"]["experiment1"]
    settings = {**full, "iterations": 1, "bandwidths": [2.0], "mean_iterations": 3}
    bases = unit_normalise(place_digit(typical_digits(settings["classes"]),
                                       settings["image_size"], settings["digit_size"]))
    draw = experiment1_seed(0, settings, bases, torch.device("cpu"))
    assert draw["runs"]["IA", 2.0]["ari"] == [1.0]
    assert draw["runs"]["KA", 2.0]["ari"][0] < 0.5
