"""TransFusion's fusion analysis: sharpness (Definition 1), the Theorem 2 bound, per-layer fusion.

Every expected value is computed independently: quadruple loops for the sharpness, the paper's
formulas transcribed here with numbers worked out by hand for the bound, scikit-learn and an
explicit forward pass of eq. 1-2 for the per-layer protocol.
"""

from __future__ import annotations

import csv
import itertools
import math

import numpy as np
import pytest
import torch
from sklearn.metrics import silhouette_score

from benchmarks.protocols.fusion import per_layer_fusion
from modules.methods.transfusion import TransFusion
from modules.theory.fusion import (
    delta_and_Delta,
    different_cluster_positive_share,
    same_cluster_nonpositive_share,
    sharpness,
    sharpness_increment_bound,
)

# -- sharpness (Definition 1) ---------------------------------------------------------------------


def naive_sharpness(a: np.ndarray, labels: np.ndarray) -> float:
    """inf over i != j same-cluster and k, h different-cluster of a_ij / a_kh, quadruple by
    quadruple; x / 0 = sign(x) inf, 0 / 0 left out, nan when no ratio is defined."""
    n = len(labels)
    best = None
    for i in range(n):
        for j in range(n):
            if i == j or labels[i] != labels[j]:
                continue
            for k in range(n):
                for h in range(n):
                    if labels[k] == labels[h]:
                        continue
                    num, den = float(a[i, j]), float(a[k, h])
                    if den == 0.0:
                        if num == 0.0:
                            continue
                        ratio = math.inf if num > 0 else -math.inf
                    else:
                        ratio = num / den
                    best = ratio if best is None else min(best, ratio)
    return math.nan if best is None else best


def random_labels(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    labels = np.concatenate([np.arange(k), rng.integers(0, k, n - k)])  # every label present
    return rng.permutation(labels)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n,k", [(4, 2), (6, 3), (7, 2)])
def test_sharpness_matches_quadruple_loop_on_non_negative_matrices(seed: int, n: int,
                                                                   k: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.0, 2.0, (n, n))
    a[rng.uniform(size=(n, n)) < 0.2] = 0.0  # some zero scores: inf and 0/0 cases
    labels = random_labels(rng, n, k)
    expected = naive_sharpness(a, labels)
    for scores in ("relu", "raw"):  # identical on non-negative scores
        assert sharpness(a, labels, scores) == pytest.approx(expected, rel=1e-12, nan_ok=True)
    assert sharpness(torch.from_numpy(a).float(), torch.from_numpy(labels), "raw") == (
        pytest.approx(expected, rel=1e-6, nan_ok=True))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("scores", ["relu", "raw", "square"])
def test_sharpness_matches_quadruple_loop_on_signed_matrices(seed: int, scores: str) -> None:
    rng = np.random.default_rng(100 + seed)
    n = 6
    a = rng.normal(size=(n, n))
    a[rng.uniform(size=(n, n)) < 0.15] = 0.0
    labels = random_labels(rng, n, 2)
    transformed = {"relu": np.maximum(a, 0.0), "raw": a, "square": a * a}[scores]
    expected = naive_sharpness(transformed, labels)
    assert sharpness(a, labels, scores) == pytest.approx(expected, rel=1e-12, nan_ok=True)


def test_sharpness_of_a_hand_made_block_matrix() -> None:
    # Clusters {0, 1} and {2, 3, 4}: within-cluster scores 3..7, across 0.5..1.5, so
    # S = min within / max across = 3 / 1.5. The diagonal (-9, 100) must be ignored.
    a = np.array([[-9.0, 3.0, 0.5, 1.0, 0.5],
                  [3.0, 100., 1.5, 0.5, 1.0],
                  [0.5, 1.5, -9.0, 4.0, 5.0],
                  [1.0, 0.5, 4.0, 100., 7.0],
                  [0.5, 1.0, 5.0, 7.0, -9.0]])
    labels = np.array([0, 0, 1, 1, 1])
    assert sharpness(a, labels) == 2.0
    assert sharpness(a, labels, "raw") == 2.0
    assert sharpness(a, labels, "square") == 9.0 / 2.25
    # Relabelled and permuted, the same matrix has the same sharpness.
    order = np.array([4, 2, 0, 3, 1])
    assert sharpness(a[np.ix_(order, order)], 7 - labels[order]) == 2.0


def test_sharpness_of_appendix_d_worst_case_is_alpha_over_beta() -> None:
    # Appendix D: S^t = 2 [[D^2 + d^2, 2 D d], [2 D d, D^2 + d^2]] blockwise, whose sharpness
    # it states to be alpha / beta with alpha = 2 (D^2 + d^2), beta = 4 D d.
    big, small = 0.7, 0.2
    within, across = 2 * (big**2 + small**2), 2 * (2 * big * small)
    a = np.array([[within, within, across, across],
                  [within, within, across, across],
                  [across, across, within, within],
                  [across, across, within, within]])
    assert sharpness(a, [0, 0, 1, 1]) == pytest.approx(
        (2 * (big**2 + small**2)) / (4 * big * small), rel=1e-14)


def test_sharpness_conventions_for_zero_and_negative_scores() -> None:
    labels = [0, 0, 1, 1]
    block_diagonal = np.array([[1.0, 2.0, 0.0, 0.0], [2.0, 1.0, 0.0, 0.0],
                               [0.0, 0.0, 1.0, 3.0], [0.0, 0.0, 3.0, 1.0]])
    assert sharpness(block_diagonal, labels) == math.inf  # Theorem 1's case
    negative_across = block_diagonal - 4.0 * (block_diagonal == 0)  # across scores -4
    assert sharpness(negative_across, labels) == math.inf  # ReLU: they fuse nothing
    assert sharpness(negative_across, labels, "raw") == pytest.approx(3.0 / -4.0)
    assert sharpness(negative_across, labels, "square") == pytest.approx(4.0 / 16.0)
    a_same_pair_negative = block_diagonal + 0.5 * (block_diagonal == 0)  # across 0.5
    a_same_pair_negative[0, 1] = a_same_pair_negative[1, 0] = -1.0
    assert sharpness(a_same_pair_negative, labels) == 0.0  # that pair gets no fusion weight
    assert sharpness(a_same_pair_negative, labels, "raw") == -2.0
    assert math.isnan(sharpness(np.zeros((4, 4)), labels))  # only 0 / 0
    assert math.isnan(sharpness(block_diagonal, [0, 0, 0, 0]))  # no different-cluster pair
    assert math.isnan(sharpness(block_diagonal, [0, 1, 2, 3]))  # no same-cluster pair
    with pytest.raises(ValueError, match="scores"):
        sharpness(block_diagonal, labels, "softmax")
    with pytest.raises(ValueError, match="n, n"):
        sharpness(block_diagonal[:3], labels)


# -- what the sharpness hides: the signs of the pairs ---------------------------------------------


def naive_sign_shares(a: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """(share of ordered same-cluster pairs i != j with a_ij <= 0, share of ordered
    different-cluster pairs with a_kh > 0), pair by pair in float64; nan for no such pair."""
    same = same_nonpositive = different = different_positive = 0
    for i in range(len(labels)):
        for j in range(len(labels)):
            score = float(a[i, j])
            if labels[i] == labels[j] and i != j:
                same += 1
                same_nonpositive += score <= 0.0
            elif labels[i] != labels[j]:
                different += 1
                different_positive += score > 0.0
    return (same_nonpositive / same if same else math.nan,
            different_positive / different if different else math.nan)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n,k", [(4, 2), (7, 3), (9, 2), (12, 5)])
def test_sign_shares_match_a_pair_loop(seed: int, n: int, k: int) -> None:
    rng = np.random.default_rng(200 + seed)
    a = rng.normal(size=(n, n))
    a[rng.uniform(size=(n, n)) < 0.2] = 0.0  # zeros: not positive, so counted as <= 0
    labels = random_labels(rng, n, k)
    same, different = naive_sign_shares(a, labels)
    assert same_cluster_nonpositive_share(a, labels) == pytest.approx(same, abs=1e-15)
    assert different_cluster_positive_share(a, labels) == pytest.approx(different, abs=1e-15)
    tensors = torch.from_numpy(a).float(), torch.from_numpy(labels)
    assert same_cluster_nonpositive_share(*tensors) == pytest.approx(same, abs=1e-15)
    assert different_cluster_positive_share(*tensors) == pytest.approx(different, abs=1e-15)


@pytest.mark.parametrize("plus,minus,cosine", [((3, 2), (1, 4), 0.0), ((2, 2), (3, 0), 0.4),
                                               ((5, 1), (1, 1), -0.3)])
def test_sign_shares_of_sign_symmetric_clusters_in_closed_form(plus, minus, cosine) -> None:
    # Cluster c holds plus[c] copies of u_c and minus[c] of -u_c, with u_0 . u_1 = cosine, and
    # A = X X^T (W_Q = W_K = I). A same-cluster pair is <= 0 exactly when it has opposite signs:
    # 2 p_c m_c of n_c (n_c - 1) ordered pairs. A different-cluster pair scores
    # (sign_i sign_j) cosine: positive for equal signs when cosine > 0, for opposite ones when
    # cosine < 0, never when cosine = 0; of 2 n_0 n_1 ordered pairs.
    u0 = np.array([1.0, 0.0])
    u1 = np.array([cosine, math.sqrt(1 - cosine**2)])
    x = np.concatenate([np.tile(u0, (plus[0], 1)), np.tile(-u0, (minus[0], 1)),
                        np.tile(u1, (plus[1], 1)), np.tile(-u1, (minus[1], 1))])
    labels = np.repeat([0, 0, 1, 1], [plus[0], minus[0], plus[1], minus[1]])
    n = [p + m for p, m in zip(plus, minus, strict=True)]
    same = sum(2 * p * m for p, m in zip(plus, minus, strict=True)) / sum(c * (c - 1) for c in n)
    equal_signs = plus[0] * plus[1] + minus[0] * minus[1]
    positive = (0 if cosine == 0 else equal_signs if cosine > 0
                else plus[0] * minus[1] + minus[0] * plus[1])
    a = x @ x.T
    assert same_cluster_nonpositive_share(a, labels) == pytest.approx(same, abs=1e-15)
    assert different_cluster_positive_share(a, labels) == pytest.approx(
        2 * positive / (2 * n[0] * n[1]), abs=1e-15)
    # Definition 1 on ReLU(A) says 0 (a same-cluster weight is 0 and a different one positive)
    # or inf (no different-cluster weight): the shares above are what it hides.
    assert sharpness(a, labels) == (0.0 if positive else math.inf)


def test_sign_shares_of_appendix_d_worst_case_and_edge_cases() -> None:
    # Appendix D's S^t: every score positive, Theorem 2's premise: no same-cluster pair <= 0,
    # every different-cluster pair > 0.
    within, across = 2 * (0.7**2 + 0.2**2), 2 * (2 * 0.7 * 0.2)
    a = np.array([[within, within, across, across], [within, within, across, across],
                  [across, across, within, within], [across, across, within, within]])
    assert same_cluster_nonpositive_share(a, [0, 0, 1, 1]) == 0.0
    assert different_cluster_positive_share(a, [0, 0, 1, 1]) == 1.0
    assert math.isnan(same_cluster_nonpositive_share(a, [0, 1, 2, 3]))  # no same-cluster pair
    assert math.isnan(different_cluster_positive_share(a, [0, 0, 0, 0]))  # one cluster
    assert same_cluster_nonpositive_share(-a, [0, 0, 0, 0]) == 1.0  # the diagonal is no pair
    with pytest.raises(ValueError, match="n, n"):
        same_cluster_nonpositive_share(a[:3], [0, 0, 1, 1])


# -- Theorem 2's bound --------------------------------------------------------------------------


def gamma_transcribed(rho: float, eps: float) -> float:
    """Theorem 2 and section 3.2, written out again independently of the module."""
    d = math.sqrt(1 - (1 - eps) ** 2)
    big = (1 - eps) * rho - math.sqrt((1 - (1 - eps) ** 2) * (1 - rho**2))
    alpha, beta = 2 * (big**2 + d**2), 4 * big * d
    return ((alpha**2 + beta**2) * big**2 * beta
            / (2 * alpha * (alpha**2 + beta**2) * d + 2 * alpha**2 * beta * (1 + d**2)))


def test_delta_and_Delta_by_hand() -> None:
    # 1 - eps = 0.8: delta = sqrt(1 - 0.64) = 0.6; rho = 0.8: Delta = 0.64 - 0.6 * 0.6 = 0.28.
    delta, big = delta_and_Delta(0.8, 0.2)
    assert delta == pytest.approx(0.6, abs=1e-14) and big == pytest.approx(0.28, abs=1e-14)
    delta, big = delta_and_Delta(0.6, 0.0)  # no noise: delta = 0, Delta = rho
    assert delta == 0.0 and big == pytest.approx(0.6)


@pytest.mark.parametrize("rho,eps,delta,big", [
    (1.0, 0.2, 0.6, 0.8),    # by hand: 1 - eps = 0.8, sqrt(1 - rho^2) = 0
    (0.8, 0.2, 0.6, 0.28),   # 0.8 * 0.8 - 0.6 * 0.6
    (0.5, 0.2, 0.6, 0.4 - 0.6 * math.sqrt(0.75)),  # Delta = -0.12 < 0: vacuous
])
def test_gamma_at_hand_computed_points(rho: float, eps: float, delta: float, big: float) -> None:
    assert delta_and_Delta(rho, eps) == pytest.approx((delta, big), abs=1e-14)
    alpha, beta = 2 * (big**2 + delta**2), 4 * big * delta
    by_hand = ((alpha**2 + beta**2) * big**2 * beta
               / (2 * alpha * (alpha**2 + beta**2) * delta
                  + 2 * alpha**2 * beta * (1 + delta**2)))
    gamma = sharpness_increment_bound(rho, eps)
    if big > 0:
        assert gamma == pytest.approx(by_hand, rel=1e-12)
        assert gamma == pytest.approx(gamma_transcribed(rho, eps), rel=1e-12)
    else:
        assert math.isnan(gamma)  # Delta <= 0: vacuous


def test_gamma_first_point_in_numbers() -> None:
    # rho = 1, eps = 0.2: alpha = 2, beta = 1.92, numerator (4 + 3.6864) * 0.64 * 1.92,
    # denominator 2 * 2 * 7.6864 * 0.6 + 2 * 4 * 1.92 * 1.36.
    assert sharpness_increment_bound(1.0, 0.2) == pytest.approx(9.44504832 / 39.33696,
                                                                rel=1e-12)


def test_gamma_is_vectorised() -> None:
    rho = np.array([[0.3], [0.6], [0.9], [1.0]])
    eps = np.array([0.01, 0.05, 0.1, 0.3])
    gamma = sharpness_increment_bound(rho, eps)
    assert gamma.shape == (4, 4)
    for i in range(4):
        for j in range(4):
            scalar = sharpness_increment_bound(float(rho[i, 0]), float(eps[j]))
            assert gamma[i, j] == pytest.approx(scalar, rel=1e-14, nan_ok=True)
    delta, big = delta_and_Delta(rho, eps)
    assert delta.shape == big.shape == (4, 4)


def test_gamma_is_nan_exactly_where_the_bound_is_vacuous() -> None:
    rho, eps = np.meshgrid(np.linspace(0.01, 1.0, 60), np.linspace(0.0, 0.5, 51), indexing="ij")
    gamma = sharpness_increment_bound(rho, eps)
    # Delta > 0  <=>  rho^2 + (1 - eps)^2 > 1 (Delta = 0 solved by hand); eps = 0 is 0 / 0.
    valid = (rho**2 + (1 - eps) ** 2 > 1 + 1e-12) & (eps > 0)
    edge = np.abs(rho**2 + (1 - eps) ** 2 - 1) < 1e-9  # rounding decides on the curve
    assert np.array_equal(np.isnan(gamma)[~edge], ~valid[~edge])
    assert valid.any() and (~valid).any()
    bare = sharpness_increment_bound(rho, eps, mask_vacuous=False)
    assert np.allclose(bare[valid], gamma[valid])
    assert np.isfinite(bare[(~valid) & (eps > 0) & ~edge]).any()  # the bare formula goes on


@pytest.mark.parametrize("rho", [0.3, 0.5, 0.7, 0.9, 0.99])
def test_gamma_decreases_as_the_noise_grows(rho: float) -> None:
    eps = np.linspace(1e-3, 0.5, 400)
    gamma = sharpness_increment_bound(rho, eps)
    valid = ~np.isnan(gamma)
    assert valid.sum() >= 5
    assert np.all(np.diff(gamma[valid]) < 0)
    assert np.all(gamma[valid] > 0)


@pytest.mark.parametrize("rho", [0.4, 0.8, 1.0])
def test_gamma_tends_to_rho_squared_over_rho_plus_two_without_noise(rho: float) -> None:
    # delta -> 0: alpha ~ 2 rho^2, beta ~ 4 rho delta, so gamma -> rho^2 / (rho + 2) (by hand).
    assert sharpness_increment_bound(rho, 1e-9) == pytest.approx(rho**2 / (rho + 2), rel=1e-3)
    assert math.isnan(sharpness_increment_bound(rho, 0.0))


def test_gamma_stays_below_one_wherever_delta_is_positive() -> None:
    # What the report states: transcribed exactly, Theorem 2 never guarantees an increase
    # where its hypotheses hold; the bare formula's gamma >= 1 lies where Delta <= 0.
    rho, eps = np.meshgrid(np.linspace(0.001, 1.0, 400), np.linspace(0.0, 0.5, 401),
                           indexing="ij")
    gamma = sharpness_increment_bound(rho, eps)
    assert np.nanmax(gamma) < 0.35
    bare = sharpness_increment_bound(rho, eps, mask_vacuous=False)
    at_least_one = np.nan_to_num(bare, nan=-1.0) >= 1
    _, big = delta_and_Delta(rho, eps)
    assert at_least_one.any() and np.all(big[at_least_one] <= 0)


def test_gamma_rejects_values_outside_the_unit_interval() -> None:
    with pytest.raises(ValueError):
        sharpness_increment_bound(1.2, 0.1)
    with pytest.raises(ValueError):
        delta_and_Delta(0.5, -0.1)


# -- per-layer fusion ---------------------------------------------------------------------------


def tiny_transfusion(dim: int, blocks: int, seed: int, value_scale: float) -> TransFusion:
    torch.manual_seed(seed)
    model = TransFusion(num_classes=3, input_shape=(dim,), backbone="flatten", num_blocks=blocks,
                        fusion_scale="sum")  # eq. 2 as printed, as the expectations assume
    with torch.no_grad():
        for block in model.blocks:  # W_V starts at zero: give the blocks something to do
            block.value.weight.normal_(0.0, value_scale)
    return model


def clustered_points(seed: int, n: int, dim: int, classes: int = 3):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    y[:classes] = np.arange(classes)
    centres = rng.normal(size=(classes, dim)) * 2
    x = centres[y] + rng.normal(size=(n, dim))
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y)


@torch.no_grad()
def explicit_forward(model: TransFusion, x: torch.Tensor):
    """Eq. 1-2 with the blocks' matrices: X^l, and A^l = (X^l W_Q)(X^l W_K)^T."""
    xs, affinities = [x.double()], []
    for block in model.blocks:
        wq, wk, wv = (block.query.weight.double().T, block.key.weight.double().T,
                      block.value.weight.double().T)
        a = (xs[-1] @ wq) @ (xs[-1] @ wk).T
        affinities.append(a)
        xs.append(torch.relu(a) @ (xs[-1] @ wv) + xs[-1])
    return xs, affinities


@pytest.mark.parametrize("scores", ["relu", "raw", "square"])
def test_per_layer_fusion_layers_silhouette_and_sharpness(scores: str) -> None:
    # float64 throughout: the square scores of near-zero affinities cancel in float32.
    model = tiny_transfusion(dim=5, blocks=3, seed=0, value_scale=0.05).double()
    x, y = clustered_points(0, 48, 5)
    x = x.double()
    batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 48, 16)]
    rows = per_layer_fusion(model, batches, scores=scores)
    # X^0 .. X^(d-1), the input of every block: the last block's output is no layer
    assert [row["layer"] for row in rows] == [0, 1, 2]
    assert [row["name"] for row in rows] == ["X^0 (input)", "X^1", "X^2 (embedding)"]
    assert rows[0]["silhouette"] == pytest.approx(
        silhouette_score(x.numpy(), y.numpy(), metric="cosine"), rel=1e-12)
    transform = {"relu": lambda a: np.maximum(a, 0.0), "raw": lambda a: a,
                 "square": lambda a: a * a}[scores]
    per_batch = []  # (batches, blocks, 4), from the explicit forward pass and the loops
    layers = [[] for _ in range(3)]
    for xb, yb in batches:
        xs, affinities = explicit_forward(model, xb)
        per_batch.append([[naive_sharpness(transform(a.numpy()), yb.numpy()),
                           naive_sharpness(a.numpy(), yb.numpy()),
                           *naive_sign_shares(a.numpy(), yb.numpy())] for a in affinities])
        for i in range(3):
            layers[i].append(xs[i])
    per_batch = np.array(per_batch)
    for layer in range(3):
        row = rows[layer]
        for key, column in (("sharpness", 0), ("sharpness_raw", 1)):
            assert row[f"{key}_min"] == pytest.approx(per_batch[:, layer, column].min(),
                                                      rel=1e-9)
            assert row[f"{key}_median"] == pytest.approx(
                np.median(per_batch[:, layer, column]), rel=1e-9)
        assert row["same_cluster_nonpositive_share"] == pytest.approx(
            per_batch[:, layer, 2].mean(), abs=1e-12)
        assert row["different_cluster_positive_share"] == pytest.approx(
            per_batch[:, layer, 3].mean(), abs=1e-12)
        assert row["silhouette"] == pytest.approx(silhouette_score(
            torch.cat(layers[layer]).numpy(), y.numpy(), metric="cosine"), rel=1e-9)
    # random W_Q, W_K: signs mixed on both sides, so S(ReLU(A)) = 0 and the raw one negative
    assert 0 < per_batch[:, :, 2].min() and per_batch[:, :, 3].max() < 1
    assert (per_batch[:, :, 1] < 0).all()
    if scores != "relu":  # random W_Q, W_K: some same-cluster ReLU weight is 0, so S = 0
        assert len(np.unique(per_batch[:, 0, 0])) == 3  # min and median are different batches
    assert rows[1]["silhouette"] != pytest.approx(rows[0]["silhouette"])  # the blocks act


def test_per_layer_fusion_skips_batches_without_both_kinds_of_pair() -> None:
    model = tiny_transfusion(dim=4, blocks=1, seed=3, value_scale=0.05).double()
    x, y = clustered_points(3, 40, 4)
    x = x.double()
    order = torch.argsort(y, stable=True)
    x, y = x[order], y[order]
    one_label = y == y[0]  # a batch of a single cluster: no different-cluster pair
    batches = [(x[one_label], y[one_label]), (x[~one_label][::2], y[~one_label][::2]),
               (x[~one_label][1::2], y[~one_label][1::2])]
    rows = per_layer_fusion(model, batches, scores="square")
    expected = [naive_sharpness(explicit_forward(model, xb)[1][0].numpy() ** 2, yb.numpy())
                for xb, yb in batches[1:]]
    assert math.isnan(sharpness(explicit_forward(model, batches[0][0])[1][0], batches[0][1]))
    assert rows[0]["sharpness_min"] == pytest.approx(min(expected), rel=1e-9)
    assert rows[0]["sharpness_median"] == pytest.approx(float(np.median(expected)), rel=1e-9)


def test_per_layer_fusion_restores_modes_and_metric() -> None:
    model = tiny_transfusion(dim=4, blocks=2, seed=1, value_scale=0.05)
    model.train()
    x, y = clustered_points(1, 30, 4)
    rows = per_layer_fusion(model, [(x, y)], silhouette_metric="euclidean")
    assert model.training and all(m.training for m in model.modules())
    assert rows[0]["silhouette"] == pytest.approx(silhouette_score(x.numpy(), y.numpy()),
                                                  rel=1e-5)


def test_per_layer_fusion_subsamples_the_silhouette_deterministically() -> None:
    model = tiny_transfusion(dim=4, blocks=1, seed=2, value_scale=0.01)
    x, y = clustered_points(2, 90, 4)
    batches = [(x[i:i + 30], y[i:i + 30]) for i in range(0, 90, 30)]
    first = per_layer_fusion(model, batches, max_silhouette_samples=40, seed=3)
    again = per_layer_fusion(model, batches, max_silhouette_samples=40, seed=3)
    other = per_layer_fusion(model, batches, max_silhouette_samples=40, seed=4)
    full = per_layer_fusion(model, batches)
    np.testing.assert_equal(first, again)  # nan == nan here
    assert first[0]["silhouette"] != other[0]["silhouette"]
    assert first[0]["silhouette"] != full[0]["silhouette"]
    assert first[0]["silhouette"] == pytest.approx(full[0]["silhouette"], abs=0.2)


def test_a_trained_models_layers_differ_and_end_at_its_embedding(tmp_path) -> None:
    """Trained, the last block's W_V is still 0 (no loss reaches it), so its output equals its
    input: as a layer it would repeat the embedding. The layers are the blocks' inputs, each
    one distinct from the one before, and the last is what the probes score."""
    import lightning.pytorch as pl

    from benchmarks.protocols.features import extract_features, layer_outputs
    from datamodules import DATAMODULES

    pl.seed_everything(0, verbose=False)
    datamodule = DATAMODULES["digits"](batch_size=64, n_views=1, augmentation="none")
    model = TransFusion(num_classes=10, input_shape=(1, 8, 8), backbone="flatten", num_blocks=3,
                        lr=2e-3, weight_decay=0.0)
    trainer = pl.Trainer(max_epochs=2, limit_val_batches=0, logger=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, default_root_dir=tmp_path,
                         accelerator="cpu", devices=1)
    trainer.fit(model, datamodule=datamodule)
    assert not model.blocks[-1].value.weight.any()  # what made the last two rows one
    datamodule.setup("test")
    loader = datamodule.test_dataloader()
    rows = per_layer_fusion(model, loader)
    arrays, _ = layer_outputs(model, loader)
    for before, after in itertools.pairwise(rows):
        assert after["silhouette"] != pytest.approx(before["silhouette"], abs=1e-6), after
    for before, after in itertools.pairwise(arrays):
        assert not np.allclose(before, after)
    assert [row["name"] for row in rows] == ["X^0 (input)", "X^1", "X^2 (embedding)"]
    features, _ = extract_features(model.encode, loader)
    np.testing.assert_allclose(arrays[-1], features.numpy(), rtol=1e-5, atol=1e-5)
    for row in rows:  # every layer has its affinity, and so its statistics
        assert 0 <= row["same_cluster_nonpositive_share"] <= 1
        assert 0 <= row["different_cluster_positive_share"] <= 1
        assert not math.isnan(row["sharpness_raw_median"])


def theorem1_fusion_model() -> TransFusion:
    """Two blocks built by hand: Theorem 1's appendix C example with u_1 = e_1, u_2 = e_2 in R^4,
    u_1^perp = e_2, u_2^perp = e_1, W_Q = W_K = W* = [u_2^perp u_2^perp u_1^perp u_1^perp], and
    W_V = c I, so that X' = X + c ReLU(A) X adds to each point a sum over its own cluster."""
    model = TransFusion(num_classes=2, input_shape=(4,), backbone="flatten", num_blocks=2,
                        fusion_scale="sum")  # eq. 2 as printed
    e1, e2 = torch.eye(4)[0], torch.eye(4)[1]
    w_star = torch.stack([e1, e1, e2, e2], dim=1)  # columns
    with torch.no_grad():
        for block in model.blocks:
            block.query.weight.copy_(w_star.T)  # nn.Linear computes x @ weight.T = x @ W*
            block.key.weight.copy_(w_star.T)
            block.value.weight.copy_(0.05 * torch.eye(4))
    return model


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hand_built_fusion_raises_the_silhouette(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 40
    y = np.repeat([0, 1], n // 2)
    scale = rng.uniform(0.5, 1.5, n)
    x = np.zeros((n, 4))
    x[y == 0, 0] = scale[y == 0]  # cluster 0 on the half-line of u_1 = e_1
    x[y == 1, 1] = scale[y == 1]  # cluster 1 on that of u_2 = e_2
    x += 0.7 * rng.normal(size=(n, 4)) * np.array([0.3, 0.3, 1.0, 1.0])  # noise
    x = torch.tensor(x, dtype=torch.float32)
    rows = per_layer_fusion(theorem1_fusion_model(), [(x, torch.tensor(y))])
    assert len(rows) == 2  # X^0 and X^1: the second block's output is no layer
    assert rows[0]["silhouette"] == pytest.approx(
        silhouette_score(x.numpy(), y, metric="cosine"), rel=1e-5)
    assert rows[0]["silhouette"] < 0.6  # the noise blurs the clusters at the input
    assert rows[1]["silhouette"] > rows[0]["silhouette"] + 0.2  # fusion within clusters
    # Same-cluster points share a half-line, so every fusion weight within a cluster is
    # positive and the sharpness is finite and positive (Definition 1 is an infimum: one
    # noisy pair decides it, and Theorem 2 allows gamma < 1, so no increase is asserted).
    assert all(0 < rows[i]["sharpness_min"] < math.inf for i in (0, 1))
    assert all(rows[i]["same_cluster_nonpositive_share"] == 0 for i in (0, 1))


def test_per_layer_fusion_needs_a_batch() -> None:
    with pytest.raises(ValueError, match="no batch"):
        per_layer_fusion(theorem1_fusion_model(), [])


# -- the Theorem 2 experiment suite ----------------------------------------------------------


@pytest.mark.slow
def test_theorem2_suite_writes_its_report(tmp_path) -> None:
    """``clusterbench bench transfusion_theorem2 --fast``, the one way to run Theorem 2: the map's
    bound stays below 1 where it applies, every per-seed row's γ is the paper's formula at the
    row's (ρ, ε), and the report, its figures and the tidy leaderboard.csv are written."""
    import json

    from benchmarks.cli import main

    assert main(["bench", "transfusion_theorem2", "--fast", "--results", str(tmp_path)]) == 0
    report = tmp_path / "transfusion_theorem2-fast"
    result = json.loads((report / "result.json").read_text())
    (bound,) = result["tables"]["The bound γ(ρ, ε) over the map (Figure 3)"]
    assert bound["cells with γ ≥ 1 where Δ > 0"] == 0  # as transcribed, γ < 1 wherever Δ > 0
    layers = result["tables"]["Per-layer sharpness against the bound (means over seeds)"]
    assert {row["layer"] for row in layers} == set(range(5))
    rows = result["tables"]["Per-layer rows: one per subspace count, ε, seed, scores and layer"]
    assert len(rows) == 2 * 5  # two score kinds x 5 layers (the blocks' inputs), one seed
    for row in rows:  # every layer has an affinity, so its pair signs
        assert 0 <= row["same_cluster_nonpositive_share"] <= 1
    assert {row["data"] for row in rows} == {"generated"}
    for row in rows:
        assert row["gamma"] == pytest.approx(gamma_transcribed(row["rho"], row["eps"]), rel=1e-4)
    assert any("GENERATED" in note for note in result["notes"])
    assert any("existence statement" in note for note in result["notes"])
    assert (report / "figures/gamma_map.png").read_bytes().startswith(b"\x89PNG")
    assert (report / "figures/sharpness_per_layer.png").read_bytes().startswith(b"\x89PNG")
    with open(report / "leaderboard.csv", newline="") as f:
        board = list(csv.DictReader(f))
    assert len(board) == 1 + len(layers) + len(rows)  # one header row for every table


def test_the_last_partial_batch_is_fused_in_a_batch_of_the_full_size() -> None:
    """40 points in batches of 16: the last 8 are encoded, and their layers and affinities
    computed, in a batch of 16 (the 8 and the split's first 8), as every other batch is: the
    features and per-layer rows of the protocols are the explicit forward pass's on those
    batches, not on a batch of 8 fused at another scale."""
    from benchmarks.protocols.features import extract_features, layer_outputs

    model = tiny_transfusion(dim=4, blocks=2, seed=5, value_scale=0.05).double()
    x, y = clustered_points(5, 40, 4)
    x = x.double()
    batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 40, 16)]  # 16, 16, 8
    filled = torch.cat([x[32:], x[:8]])

    def layer(index: int) -> torch.Tensor:  # X^index of every point, in the batches above
        return torch.cat([explicit_forward(model, x[:16])[0][index],
                          explicit_forward(model, x[16:32])[0][index],
                          explicit_forward(model, filled)[0][index][:8]])

    embedding = layer(-2)  # encode gives X^(L-1), the paper's embedding
    features, labels = extract_features(model.encode, batches)
    torch.testing.assert_close(features.double(), embedding, rtol=1e-5, atol=1e-6)
    assert torch.equal(labels, y)
    alone = explicit_forward(model, x[32:])[0][-2]  # what the partial batch alone would give
    assert not torch.allclose(alone, embedding[32:], rtol=1e-3, atol=1e-4)
    arrays, layer_labels = layer_outputs(model, batches)  # X^0, X^1: the last is the embedding
    assert len(arrays) == 2
    np.testing.assert_allclose(arrays[-1], embedding.numpy(), rtol=1e-5, atol=1e-6)
    assert np.array_equal(layer_labels, y.numpy())
    rows = per_layer_fusion(model, batches, silhouette_metric="euclidean", scores="square")
    assert rows[-1]["silhouette"] == pytest.approx(
        silhouette_score(embedding.numpy(), y.numpy()), rel=1e-6)
    per_batch = [naive_sharpness(explicit_forward(model, xb)[1][0].numpy() ** 2, yb.numpy())
                 for xb, yb in [batches[0], batches[1], (filled, torch.cat([y[32:], y[:8]]))]]
    assert rows[0]["sharpness_min"] == pytest.approx(min(per_batch), rel=1e-9)
