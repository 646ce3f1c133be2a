"""Calder & Lee (arXiv:2503.10812): the generalised NT-Xent (eq. 4), the maps of eq. 17-19, the
two dynamics (eq. 14-15, Theorem 4.2), the kernel (eq. 12, Propositions 4.3-4.4); Tan et al.
(arXiv:2303.15103, appendix C) for the graph pieces. Naive references are loops over Python
floats, independent of the vectorised code.
"""

from __future__ import annotations

import math

import pytest
import torch
from scipy.special import ive

from modules.theory.contrastive_dynamics import (
    OneHiddenLayerEmbedding,
    augmented_nt_xent_cost,
    closed_form_kernel,
    empirical_neural_kernel,
    evenly_spaced_circle,
    first_layer_weight,
    free_particle_descent,
    gaussian_infonce_loss,
    infinite_width_kernel,
    invariant_initialisation_,
    mlp_embedding,
    network_descent,
    network_velocity,
    nt_xent_cost,
    nt_xent_cost_over_views,
    orthogonal_noise_augmentation,
    out_edge_sampler,
    population_nt_xent,
    spectral_embedding,
    stochastic_block_graph,
    uniform_sphere_uniformity,
    uniformity,
)

F64 = torch.float64


def unit(row: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in row))
    return [v / norm for v in row]


def sq_dist(a: list[float], b: list[float]) -> float:
    return sum((u - v) ** 2 for u, v in zip(a, b, strict=True))


def naive_nt_xent(z: torch.Tensor, z_prime: torch.Tensor, tau: float) -> float:
    """eq. 4 with Psi = log(1 + t), eta(t) = exp(-t / tau), eta_f = eta(|f(x) - f(y)|^2 / 2)."""
    u = [unit(r) for r in z.tolist()]
    v = [unit(r) for r in z_prime.tolist()]
    n = len(u)

    def eta_f(a, b):
        return math.exp(-(sq_dist(a, b) / 2) / tau)

    total = 0.0
    for i in range(n):
        numerator = sum(eta_f(u[i], v[j]) for j in range(n)) / n
        total += math.log(1 + numerator / eta_f(u[i], v[i]))
    return total / n


def naive_population(atoms: torch.Tensor, weights: list[float], tau: float) -> float:
    a = [unit(r) for r in atoms.tolist()]
    return sum(w_k * math.log(1 + sum(w_l * math.exp(-sq_dist(a_k, a_l) / (2 * tau))
                                      for a_l, w_l in zip(a, weights, strict=True)))
               for a_k, w_k in zip(a, weights, strict=True))


# ------------------------------------------------------------------------------------------
# The cost


@pytest.mark.parametrize("n", [1, 3, 8])
@pytest.mark.parametrize("d", [2, 5])
@pytest.mark.parametrize("tau", [0.1, 0.5, 2.0])
def test_nt_xent_cost_matches_naive_loops(n, d, tau):
    g = torch.Generator().manual_seed(n * 100 + d)
    z = torch.randn(n, d, generator=g, dtype=F64) * 3  # any norm: the cost normalises
    z_prime = torch.randn(n, d, generator=g, dtype=F64)
    assert nt_xent_cost(z, z_prime, tau).item() == pytest.approx(
        naive_nt_xent(z, z_prime, tau), rel=1e-12, abs=1e-14)


def test_collapsed_embedding_costs_log_2():
    # every point at one place: the ratio in eq. 4 is 1, whatever tau
    z = torch.tensor([[0.6, 0.8]], dtype=F64).repeat(7, 1)
    for tau in (0.05, 1.0):
        assert nt_xent_cost(z, z * 5, tau).item() == pytest.approx(math.log(2), abs=1e-15)


def test_invariant_sample_cost_equals_the_population_cost_of_its_measure():
    # Proposition 2.1: for an invariant map the cost depends on f_# mu only
    atoms = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=F64)
    counts = torch.tensor([1, 2, 3, 4])
    z = atoms.repeat_interleave(counts, dim=0)  # (10, 3): an empirical measure on 4 atoms
    weights = counts.to(F64) / counts.sum()
    for tau in (0.2, 0.7):
        assert nt_xent_cost(z, z, tau).item() == pytest.approx(
            population_nt_xent(atoms, weights, tau).item(), rel=1e-12)


@pytest.mark.parametrize("tau", [0.1, 0.5, 1.0])
def test_population_cost_matches_naive_loops_and_the_uniform_limit(tau):
    g = torch.Generator().manual_seed(1)
    atoms = torch.randn(5, 2, generator=g, dtype=F64)
    weights = torch.rand(5, generator=g, dtype=F64)
    weights = weights / weights.sum()
    assert population_nt_xent(atoms, weights, tau).item() == pytest.approx(
        naive_population(atoms, weights.tolist(), tau), rel=1e-12)
    # many evenly spaced atoms: the uniform measure on S^1, log(1 + e^{-1/tau} I_0(1/tau))
    many = population_nt_xent(evenly_spaced_circle(500), temperature=tau).item()
    assert many == pytest.approx(math.log1p(ive(0, 1 / tau)), rel=1e-10)
    # Figure 3: more evenly spaced atoms never cost more
    values = [population_nt_xent(evenly_spaced_circle(k), temperature=tau).item()
              for k in range(1, 30)]
    assert all(b <= a + 1e-15 for a, b in zip(values, values[1:], strict=False))


def test_cost_gradient_matches_finite_differences():
    g = torch.Generator().manual_seed(2)
    z = torch.randn(6, 3, generator=g, dtype=F64, requires_grad=True)
    z_prime = torch.randn(6, 3, generator=g, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: nt_xent_cost(a, b, 0.3), (z, z_prime))
    atoms = torch.randn(4, 2, generator=g, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a: population_nt_xent(a, temperature=0.4), (atoms,))


def test_gradient_of_the_mean_cost_by_central_differences_in_each_coordinate():
    # an explicit check of the value autograd returns (not only gradcheck's verdict)
    g = torch.Generator().manual_seed(3)
    z = torch.randn(5, 2, generator=g, dtype=F64)
    live = z.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(nt_xent_cost(live, live, 0.5), live)
    h = 1e-6
    for i in range(5):
        for k in range(2):
            up, down = z.clone(), z.clone()
            up[i, k] += h
            down[i, k] -= h
            fd = (naive_nt_xent(up, up, 0.5) - naive_nt_xent(down, down, 0.5)) / (2 * h)
            assert grad[i, k].item() == pytest.approx(fd, abs=1e-8)


def test_an_invariant_map_costs_the_same_whatever_augmentations_are_drawn():
    x = torch.randn(12, 5, generator=torch.Generator().manual_seed(4), dtype=F64)
    f = invariant_initialisation_(OneHiddenLayerEmbedding(5, 2, 6, bias=True, dtype=F64), 2)
    augment = orthogonal_noise_augmentation(clean_dim=2, std=3.0)
    with torch.no_grad():
        clean = nt_xent_cost(f(x), f(x), 0.5)
        noisy = augmented_nt_xent_cost(f, x, augment, 0.5, pairs=3,
                                       generator=torch.Generator().manual_seed(5))
    assert noisy.item() == pytest.approx(clean.item(), rel=1e-13)


def test_uniformity_matches_naive_loops_and_the_uniform_measure():
    z = torch.randn(9, 3, generator=torch.Generator().manual_seed(6), dtype=F64)
    u = [unit(r) for r in z.tolist()]
    pairs = [math.exp(-2 * sq_dist(u[i], u[j])) for i in range(9) for j in range(i + 1, 9)]
    assert uniformity(z).item() == pytest.approx(math.log(sum(pairs) / len(pairs)), rel=1e-12)
    # n evenly spaced points: the mean over all n^2 ordered pairs is the uniform measure's
    # e^{-4} I_0(4) (up to aliasing terms I_n(4)); uniformity drops the n self-pairs
    n, mean_all = 300, math.exp(uniform_sphere_uniformity(2))
    assert uniformity(evenly_spaced_circle(n)).item() == pytest.approx(
        math.log((n * mean_all - 1) / (n - 1)), rel=1e-12)
    sphere = torch.randn(4000, 3, generator=torch.Generator().manual_seed(7), dtype=F64)
    assert uniformity(sphere).item() == pytest.approx(uniform_sphere_uniformity(3), abs=0.02)


# ------------------------------------------------------------------------------------------
# The maps


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("bias", [False, True])
def test_one_hidden_layer_is_eq_18(activation, bias):
    f = OneHiddenLayerEmbedding(3, 2, 4, activation, bias=bias,
                                generator=torch.Generator().manual_seed(8), dtype=F64)
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(9), dtype=F64)
    sigma = {"relu": lambda t: max(t, 0.0), "tanh": math.tanh}[activation]
    B, c = f.B.tolist(), (f.c.tolist() if bias else [0.0] * 8)
    out = f(x)
    for i, xi in enumerate(x.tolist()):
        for k in range(2):  # f^k = (1 / sqrt(M)) sum over block k of sigma(b_p . x + c_p)
            expected = sum(sigma(sum(b * v for b, v in zip(B[p], xi, strict=True)) + c[p])
                           for p in range(4 * k, 4 * k + 4)) / 2
            assert out[i, k].item() == pytest.approx(expected, rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("make", [
    lambda: OneHiddenLayerEmbedding(5, 2, 8, bias=True, dtype=F64),
    lambda: mlp_embedding(5, 2, hidden=16, dtype=F64),
])
def test_invariant_initialisation_ignores_the_orthogonal_coordinates(make):
    f = invariant_initialisation_(make(), clean_dim=2)
    assert torch.all(first_layer_weight(f)[:, 2:] == 0)
    x = torch.randn(10, 5, generator=torch.Generator().manual_seed(10), dtype=F64)
    view = orthogonal_noise_augmentation(2, 5.0)(x, torch.Generator().manual_seed(11))
    assert not torch.equal(view, x)
    with torch.no_grad():
        assert torch.equal(f(view), f(x))


# ------------------------------------------------------------------------------------------
# The kernel


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("bias", [False, True])
def test_closed_form_kernel_is_autograds_jacobian_product(activation, bias):
    g = torch.Generator().manual_seed(12)
    f = OneHiddenLayerEmbedding(4, 3, 5, activation, bias=bias, generator=g, dtype=F64)
    x = torch.randn(7, 4, generator=g, dtype=F64)
    empirical = empirical_neural_kernel(f, x)  # (7, 7, 3, 3), autograd
    # an independent product of per-sample gradients, one backward pass per output
    grads = []
    for i in range(7):
        for k in range(3):
            f.zero_grad()
            f(x[i:i + 1])[0, k].backward()
            grads.append(torch.cat([p.grad.flatten() for p in f.parameters()]))
    jac = torch.stack(grads).reshape(7, 3, -1)
    assert torch.allclose(empirical, torch.einsum("ikp,jlp->ijkl", jac, jac), atol=1e-13)
    closed = closed_form_kernel(x, f.B.detach(), 3, f.c.detach() if bias else None, activation)
    assert torch.allclose(closed, empirical, rtol=1e-12, atol=1e-13)
    off_diagonal = ~torch.eye(3, dtype=torch.bool)
    assert torch.all(closed[:, :, off_diagonal] == 0)  # Proposition 4.3: K_ij is diagonal


@pytest.mark.parametrize("bias", [False, True])
def test_width_m_kernel_converges_to_the_infinite_width_limit(bias):
    g = torch.Generator().manual_seed(13)
    x = torch.randn(6, 3, generator=g, dtype=F64)
    limit = infinite_width_kernel(x, 2, bias=bias)

    def error(width: int) -> float:
        values = []
        for _ in range(4):
            B = torch.randn(2 * width, 3, generator=g, dtype=F64)
            c = torch.randn(2 * width, generator=g, dtype=F64) if bias else None
            values.append(((closed_form_kernel(x, B, 2, c) - limit).norm() / limit.norm()).item())
        return sum(values) / len(values)

    small, large = error(4), error(40000)
    assert large < 0.02 < small
    assert large < small / 30  # about sqrt(10000) = 100 for an O(M^-1/2) Monte-Carlo error


def test_infinite_width_kernel_is_the_gaussian_orthant_probability():
    # independent of the arccos formula: P(b.x_i > 0, b.x_j > 0) by counting over many b
    x = torch.tensor([[1.0, 0.0], [1.0, 1.0], [-1.0, 0.2]], dtype=F64)
    b = torch.randn(400000, 2, generator=torch.Generator().manual_seed(14), dtype=F64)
    positive = (b @ x.T > 0).to(F64)  # (draws, 3)
    monte_carlo = (x @ x.T) * (positive.T @ positive) / b.shape[0]
    assert torch.allclose(infinite_width_kernel(x, 1)[:, :, 0, 0], monte_carlo, atol=5e-3)


def test_network_velocity_is_eq_11():
    g = torch.Generator().manual_seed(15)
    f = OneHiddenLayerEmbedding(4, 2, 6, "tanh", bias=True, generator=g, dtype=F64)
    x = torch.randn(9, 4, generator=g, dtype=F64)

    def cost(z):
        return nt_xent_cost(z, z, 0.5)

    velocity = network_velocity(f, x, cost)
    z = f(x).detach().requires_grad_(True)
    (dcost,) = torch.autograd.grad(cost(z), z)  # (9, 2): dL/dz_j
    kernel = empirical_neural_kernel(f, x)  # (9, 9, 2, 2)
    assert torch.allclose(velocity, -torch.einsum("ijkl,jl->ik", kernel, dcost), atol=1e-13)
    # and it is the first-order motion of the outputs under one small gradient step on w
    step = 1e-7
    before = f(x).detach()
    grads = torch.autograd.grad(cost(f(x)), list(f.parameters()))
    with torch.no_grad():
        for p, grad in zip(f.parameters(), grads, strict=True):
            p.sub_(step * grad)
        moved = (f(x) - before) / step
    assert torch.allclose(moved, velocity, atol=1e-5)


# ------------------------------------------------------------------------------------------
# The dynamics (Theorem 4.2)


def test_free_particle_descent_from_an_invariant_start_stays_invariant():
    # one particle per (sample, augmentation): f is a free table on the augmented points
    g = torch.Generator().manual_seed(16)
    n, views, d = 10, 3, 2
    z0 = torch.randn(n, 1, d, generator=g, dtype=F64).repeat(1, views, 1)  # invariant
    run = free_particle_descent(z0, lambda z: nt_xent_cost_over_views(z, 0.5), lr=0.2,
                                steps=150, record=[150])
    z = run.embeddings[0]  # (n, views, d)
    assert (z - z[:, :1]).abs().max().item() < 1e-12
    start = torch.nn.functional.normalize(z0[:, 0], dim=-1)
    assert (z[:, 0] - start).norm(dim=-1).mean().item() > 0.1  # the particles did move


def test_free_particle_descent_spreads_points_toward_uniform():
    g = torch.Generator().manual_seed(17)
    z0 = torch.tensor([1.0, 0.2], dtype=F64) + 0.05 * torch.randn(40, 2, generator=g, dtype=F64)
    run = free_particle_descent(z0, lambda z: nt_xent_cost(z, z, 0.5), lr=0.2, steps=300,
                                record=[0, 300])
    first, last = (uniformity(z).item() for z in run.embeddings)
    assert first > -0.1  # nearly collapsed
    # 40 evenly spaced points on the circle (distinct pairs only; see the test above)
    evenly = math.log((40 * math.exp(uniform_sphere_uniformity(2)) - 1) / 39)
    assert last == pytest.approx(evenly, abs=0.01)


def test_network_descent_from_an_invariant_start_loses_invariance():
    # Theorem 4.2, second part: the neural kernel couples the noise coordinates back in
    g = torch.Generator().manual_seed(18)
    f = invariant_initialisation_(OneHiddenLayerEmbedding(4, 2, 8, bias=True, generator=g,
                                                          dtype=F64), clean_dim=2)
    x = torch.zeros(20, 4, dtype=F64)
    x[:, :2] = torch.randn(20, 2, generator=g, dtype=F64)
    augment = orthogonal_noise_augmentation(2, 1.0)
    view = augment(x, g)
    with torch.no_grad():
        assert torch.equal(f(view), f(x))
    network_descent(f, x, augment, lambda a, b: nt_xent_cost(a, b, 0.5), lr=0.1, steps=10,
                    generator=g)
    assert f.B[:, 2:].abs().max().item() > 1e-3
    with torch.no_grad():
        assert (f(view) - f(x)).abs().max().item() > 1e-4


# ------------------------------------------------------------------------------------------
# arXiv:2303.15103, appendix C


def test_gaussian_infonce_matches_naive_loops():
    g = torch.Generator().manual_seed(19)
    z1, z2 = torch.randn(4, 2, generator=g, dtype=F64), torch.randn(4, 2, generator=g, dtype=F64)
    rows = torch.cat([z1, z2]).tolist()
    total = 0.0
    for k in range(8):
        positive = (k + 4) % 8

        def kernel(a, b):
            return math.exp(-sq_dist(a, b) / (2 * 0.5))

        total -= math.log(kernel(rows[k], rows[positive])
                          / sum(kernel(rows[k], rows[j]) for j in range(8) if j != k))
    assert gaussian_infonce_loss(z1, z2, 0.5).item() == pytest.approx(total / 8, rel=1e-12)


def test_out_edges_are_uniform_over_neighbours():
    adjacency, labels = stochastic_block_graph(3, 5, p=0.8, q=0.1,
                                               generator=torch.Generator().manual_seed(20))
    assert torch.equal(adjacency, adjacency.T) and torch.all(adjacency.diagonal() == 0)
    sample = out_edge_sampler(adjacency)
    g = torch.Generator().manual_seed(21)
    draws = torch.stack([sample(g) for _ in range(4000)])  # (4000, n)
    counts = torch.zeros_like(adjacency)
    for i in range(adjacency.shape[0]):
        counts[i] = torch.bincount(draws[:, i], minlength=adjacency.shape[0]).to(F64)
    assert torch.all(counts[adjacency == 0] == 0)  # only edges of pi
    frequency = counts / 4000
    expected = adjacency / adjacency.sum(dim=1, keepdim=True)
    assert torch.allclose(frequency, expected, atol=0.04)


def test_spectral_embedding_of_disjoint_cliques_separates_them():
    adjacency, labels = stochastic_block_graph(4, 6, p=1.0, q=0.0)
    u = spectral_embedding(adjacency, 4)  # (24, 4), unit rows
    gram = u @ u.T
    same = labels[:, None] == labels[None, :]
    assert torch.allclose(gram[same], torch.ones_like(gram[same]), atol=1e-10)
    assert torch.allclose(gram[~same], torch.zeros_like(gram[~same]), atol=1e-10)


# ------------------------------------------------------------------------------------------
# The suite, on its fast budget


def test_suite_fast_budget_runs_and_reports():
    from benchmarks.experiments import EXPERIMENTS
    from benchmarks.suites.experiment import check_output, load_experiment_suite

    suite = load_experiment_suite("contrastive_dynamics", EXPERIMENTS, fast=True)
    out = check_output(suite.function(seeds=suite.seeds, **suite.settings), "fast run")
    final = out.tables["Final iteration: silhouette and uniformity (mean, sample std over seeds)"]
    assert {r["dynamics"] for r in final} == {"network", "free"}
    assert {r["setting"] for r in final} >= {"eq. 18, ReLU, 2-D", "4-layer MLP, 3-D"}
    by_setting: dict[str, dict[str, float]] = {}
    for row in final:
        by_setting.setdefault(row["setting"], {})[row["dynamics"]] = row["silhouette it0 mean"]
        assert row["uniformity final mean"] <= 0.0
    for start in by_setting.values():  # both dynamics start from the same embedding
        assert start["network"] == start["free"]
    for name in ("fig5_one_hidden_layer_relu.png", "fig6_mlp_3d.png", "dynamics_curves.png",
                 "fig3_population_cost.png", "kernel_convergence.png", "spectral_clustering.png",
                 "imbalanced_clusters.png"):
        assert out.figures[name].startswith(b"\x89PNG")
    (check,) = out.tables["Kernel: autograd (eq. 12) against Proposition 4.3"]
    assert check["max rel |K_autograd - K_prop4.3| mean"] < 1e-12
    population = out.tables["Figure 3: population NT-Xent of K atoms on the circle"]
    assert all(r["loss K=1"] == pytest.approx(math.log(2), abs=1e-5) for r in population)
    assert any("Central claim" in note for note in out.notes)


def test_the_costs_are_the_losses_of_modules_losses():
    """One home for losses: the cost of eq. 4 and the Gaussian InfoNCE of the graph experiment
    are the functions of modules.losses, not second implementations."""
    from modules import losses
    from modules.theory import contrastive_dynamics

    assert contrastive_dynamics.nt_xent_cost is losses.generalised_nt_xent_loss
    assert contrastive_dynamics.gaussian_infonce_loss is losses.gaussian_infonce_loss
