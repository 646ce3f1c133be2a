"""SupCon and TransFusion losses against independent naive implementations (loops, float64).

SupCon: Khosla et al., arXiv:2004.11362, eq. 2. TransFusion: Liu et al., eq. 3-5, Appendix B.
"""

from __future__ import annotations

import math

import pytest
import torch

from modules.losses import nt_xent_loss, supcon_loss, target_affinity, transfusion_loss

KINDS = ["jsd_sq", "kl_sq", "kl_relu", "kl_sm"]
LOG_FLOOR = 1e-12  # the documented floor on P inside log for kl_sq and kl_relu


def naive_supcon(features: torch.Tensor, labels: torch.Tensor, temperature: float,
                 base_temperature: float | None = None) -> float:
    """L^sup_out written out anchor by anchor over the N*V rows, in Python floats."""
    n, views, _ = features.shape
    rows, row_labels = [], []
    for i in range(n):
        for v in range(views):
            row = [float(x) for x in features[i, v].detach().double()]
            norm = math.sqrt(sum(x * x for x in row))
            rows.append([x / norm for x in row])
            row_labels.append(int(labels[i]))

    def sim(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True)) / temperature

    total, anchors = 0.0, 0
    for i, anchor in enumerate(rows):
        positives = [p for p in range(len(rows)) if p != i and row_labels[p] == row_labels[i]]
        if not positives:
            continue
        denominator = sum(math.exp(sim(anchor, rows[a])) for a in range(len(rows)) if a != i)
        total += sum(-math.log(math.exp(sim(anchor, rows[p])) / denominator)
                     for p in positives) / len(positives)
        anchors += 1
    loss = total / anchors if anchors else 0.0
    return loss * temperature / base_temperature if base_temperature is not None else loss


def naive_target(labels: list[int], superclasses: list[int] | None, eps: float) -> list[list]:
    n = len(labels)
    y = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            if labels[i] == labels[j]:
                y[i][j] = 1.0
            elif superclasses is not None and superclasses[i] == superclasses[j]:
                y[i][j] = eps
    return y


def naive_transfusion(a: torch.Tensor, labels: torch.Tensor, kind: str,
                      superclasses: torch.Tensor | None = None, eps: float = 0.5,
                      include_diagonal: bool = False) -> float:
    """Appendix B's losses row by row in Python floats; rows of Y without positives skipped.
    g(A) runs over the other samples, or over the whole row (eq. 5 as printed) with
    ``include_diagonal``."""
    n = a.shape[0]
    a = [[float(x) for x in row] for row in a.detach().double()]
    y = naive_target([int(v) for v in labels],
                     None if superclasses is None else [int(v) for v in superclasses], eps)
    total, kept = 0.0, 0
    for i in range(n):
        y_sum = sum(y[i])
        if y_sum == 0:
            continue
        target = [v / y_sum for v in y[i]]
        others = [j for j in range(n) if j != i or include_diagonal]
        if kind == "kl_sm":
            top = max(a[i][j] for j in others)
            log_z = top + math.log(sum(math.exp(a[i][j] - top) for j in others))
            total += sum(target[j] * (math.log(target[j]) - (a[i][j] - log_z))
                         for j in others if target[j] > 0)
        else:
            weight = [0.0 if j not in others else (max(a[i][j], 0.0) if kind == "kl_relu"
                                                   else a[i][j] ** 2) for j in range(n)]
            w_sum = sum(weight)
            p = [w / w_sum if w_sum > 0 else 0.0 for w in weight]
            if kind == "jsd_sq":
                m = [(pj + tj) / 2 for pj, tj in zip(p, target, strict=True)]
                total += sum(target[j] * math.log(target[j] / m[j]) for j in range(n)
                             if target[j] > 0)
                total += sum(p[j] * math.log(p[j] / m[j]) for j in range(n) if p[j] > 0)
            else:
                total += sum(target[j] * (math.log(target[j]) - math.log(max(p[j], LOG_FLOOR)))
                             for j in range(n) if target[j] > 0)
        kept += 1
    return total / kept if kept else 0.0


# --- SupCon -------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.07, 0.5, 1.0])
@pytest.mark.parametrize("dim", [3, 16])
@pytest.mark.parametrize("views", [1, 2, 3])
@pytest.mark.parametrize("batch", [1, 2, 5, 10])
def test_supcon_matches_naive(batch: int, views: int, dim: int, temperature: float) -> None:
    generator = torch.Generator().manual_seed(100 * batch + 10 * views + dim)
    features = torch.randn(batch, views, dim, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 3, (batch,), generator=generator)  # classes of 1, 2, many
    expected = naive_supcon(features, labels, temperature)
    loss = supcon_loss(features, labels, temperature)
    assert loss.dim() == 0 and loss.dtype == torch.float64
    assert loss.item() == pytest.approx(expected, rel=1e-10, abs=1e-12)
    loss32 = supcon_loss(features.float(), labels, temperature)
    assert loss32.dtype == torch.float32
    assert loss32.item() == pytest.approx(expected, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("temperature", [0.1, 0.5])
@pytest.mark.parametrize("dim", [2, 12])
@pytest.mark.parametrize("batch", [1, 2, 7])
def test_supcon_with_one_positive_per_anchor_is_nt_xent(batch: int, dim: int,
                                                        temperature: float) -> None:
    # Distinct labels and two views: each anchor's only positive is its other view.
    generator = torch.Generator().manual_seed(batch + dim)
    z1 = torch.randn(batch, dim, generator=generator, dtype=torch.float64)
    z2 = torch.randn(batch, dim, generator=generator, dtype=torch.float64)
    loss = supcon_loss(torch.stack([z1, z2], dim=1), torch.arange(batch), temperature)
    assert loss.item() == pytest.approx(nt_xent_loss(z1, z2, temperature).item(), rel=1e-12)


@pytest.mark.parametrize("temperature", [0.1, 1.0])
@pytest.mark.parametrize(("classes", "per_class", "views"),
                         [(1, 2, 1), (2, 1, 2), (3, 2, 2), (4, 3, 1), (2, 2, 3)])
def test_supcon_closed_form_with_one_hot_classes(classes: int, per_class: int, views: int,
                                                 temperature: float) -> None:
    # Every row of class c is e_c: an anchor sees m V - 1 positives at similarity 1 and
    # (K - 1) m V negatives at 0, so each -log softmax of a positive is the same number.
    labels = torch.arange(classes).repeat_interleave(per_class)
    features = torch.eye(classes, dtype=torch.float64)[labels].unsqueeze(1).repeat(1, views, 1)
    mv = per_class * views
    expected = math.log(mv - 1 + (classes - 1) * mv * math.exp(-1 / temperature))
    assert supcon_loss(features, labels, temperature).item() == pytest.approx(expected,
                                                                              rel=1e-12)


@pytest.mark.parametrize(("batch", "views"), [(1, 1), (4, 1)])
def test_supcon_without_positives_is_a_connected_zero(batch: int, views: int) -> None:
    features = torch.randn(batch, views, 5, dtype=torch.float64, requires_grad=True)
    loss = supcon_loss(features, torch.arange(batch), 0.1)
    assert loss.item() == 0.0
    assert loss.grad_fn is not None
    loss.backward()
    assert torch.equal(features.grad, torch.zeros_like(features))


@pytest.mark.parametrize("base_temperature", [0.07, 0.5, 2.0])
def test_supcon_base_temperature_rescales(base_temperature: float) -> None:
    generator = torch.Generator().manual_seed(4)
    features = torch.randn(6, 2, 8, generator=generator, dtype=torch.float64)
    labels = torch.tensor([0, 1, 0, 1, 2, 2])
    plain = supcon_loss(features, labels, 0.2)
    scaled = supcon_loss(features, labels, 0.2, base_temperature=base_temperature)
    assert scaled.item() == pytest.approx(plain.item() * 0.2 / base_temperature, rel=1e-12)
    assert scaled.item() == pytest.approx(naive_supcon(features, labels, 0.2, base_temperature),
                                          rel=1e-10)
    # Off by default: the default is the unscaled loss of eq. 2.
    assert plain.item() == pytest.approx(naive_supcon(features, labels, 0.2), rel=1e-10)


def test_supcon_invariant_to_row_scaling_and_sample_order() -> None:
    generator = torch.Generator().manual_seed(5)
    features = torch.randn(7, 2, 6, generator=generator, dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 0, 1, 0, 3])
    base = supcon_loss(features, labels, 0.2).item()
    scales = torch.rand(7, 2, 1, generator=generator, dtype=torch.float64) * 100 + 0.01
    assert supcon_loss(features * scales, labels, 0.2).item() == pytest.approx(base, rel=1e-10)
    order = torch.randperm(7, generator=generator)
    assert supcon_loss(features[order], labels[order], 0.2).item() == pytest.approx(base,
                                                                                    rel=1e-10)


def test_supcon_gradient_matches_finite_differences() -> None:
    generator = torch.Generator().manual_seed(6)
    features = torch.randn(4, 2, 3, generator=generator, dtype=torch.float64,
                           requires_grad=True)
    labels = torch.tensor([0, 1, 0, 2])
    assert torch.autograd.gradcheck(lambda f: supcon_loss(f, labels, 0.5), (features,))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_supcon_low_precision_inputs_give_float32_loss(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(7)
    features = torch.randn(8, 2, 16, generator=generator).to(dtype)
    labels = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    loss = supcon_loss(features, labels, 0.1)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(naive_supcon(features, labels, 0.1), rel=1e-5)


def test_supcon_is_float32_under_bf16_autocast() -> None:
    generator = torch.Generator().manual_seed(8)
    features = torch.randn(16, 2, 32, generator=generator)
    labels = torch.randint(0, 4, (16,), generator=generator)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = supcon_loss(features, labels, 0.1)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(supcon_loss(features, labels, 0.1).item(), rel=1e-6)


@pytest.mark.parametrize(("shape", "labels_shape"),
                         [((4, 8), (4,)), ((4, 2, 8), (5,)), ((4, 2, 8), (4, 1)),
                          ((2, 4, 2, 8), (2,))])
def test_supcon_rejects_bad_shapes(shape, labels_shape) -> None:
    with pytest.raises(ValueError, match="shape"):
        supcon_loss(torch.randn(*shape), torch.zeros(labels_shape, dtype=torch.long), 0.1)


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan")])
def test_supcon_rejects_non_positive_temperatures(value: float) -> None:
    features, labels = torch.randn(4, 2, 8), torch.tensor([0, 1, 0, 1])
    with pytest.raises(ValueError, match="temperature must be > 0") as info:
        supcon_loss(features, labels, value)
    assert str(value) in str(info.value)
    with pytest.raises(ValueError, match="base_temperature must be > 0") as info:
        supcon_loss(features, labels, 0.1, base_temperature=value)
    assert str(value) in str(info.value)


# --- target affinity ----------------------------------------------------------------------


def test_target_affinity_hand_written_hierarchy() -> None:
    # Classes 0, 1 in superclass 0; class 2 in superclass 1; class 3 alone in superclass 2.
    labels = torch.tensor([0, 1, 0, 2, 1, 3, 2])
    superclasses = torch.tensor([0, 0, 0, 1, 0, 2, 1])
    e = 0.3
    expected = torch.tensor([
        [0, e, 1, 0, e, 0, 0],
        [e, 0, e, 0, 1, 0, 0],
        [1, e, 0, 0, e, 0, 0],
        [0, 0, 0, 0, 0, 0, 1],
        [e, 1, e, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0],
        [0, 0, 0, 1, 0, 0, 0],
    ], dtype=torch.float32)
    y = target_affinity(labels, superclasses, eps=e)
    assert y.dtype == torch.float32 and y.shape == (7, 7)
    torch.testing.assert_close(y, expected, rtol=0, atol=0)
    # Without the hierarchy only classmates are positive.
    torch.testing.assert_close(target_affinity(labels), (expected == 1).float(), rtol=0, atol=0)


@pytest.mark.parametrize("eps", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("hierarchical", [False, True])
@pytest.mark.parametrize("n", [1, 2, 7, 16])
def test_target_affinity_matches_naive(n: int, hierarchical: bool, eps: float) -> None:
    generator = torch.Generator().manual_seed(n)
    labels = torch.randint(0, 6, (n,), generator=generator)
    superclasses = labels // 2 if hierarchical else None  # classes 2k, 2k + 1 share one
    y = target_affinity(labels, superclasses, eps)
    expected = naive_target(labels.tolist(),
                            None if superclasses is None else superclasses.tolist(), eps)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, torch.tensor(expected, dtype=torch.float32).reshape(n, n),
                               rtol=0, atol=0)


@pytest.mark.parametrize("eps", [-0.1, 1.5, float("nan")])
def test_target_affinity_rejects_eps_outside_unit_interval(eps: float) -> None:
    with pytest.raises(ValueError, match=r"eps must be in \[0, 1\]") as info:
        target_affinity(torch.tensor([0, 1]), torch.tensor([0, 0]), eps)
    assert str(eps) in str(info.value)


def test_target_affinity_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="labels must have shape"):
        target_affinity(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="superclasses must give one id per sample"):
        target_affinity(torch.tensor([0, 1, 2]), torch.tensor([0, 1]))


# --- TransFusion loss ---------------------------------------------------------------------

HIERARCHIES = [(None, 0.5), ("super", 0.0), ("super", 0.5), ("super", 1.0)]


@pytest.mark.parametrize("hierarchy", HIERARCHIES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dim", [1, 6])
@pytest.mark.parametrize("batch", [1, 2, 5, 12])
def test_transfusion_matches_naive(batch: int, dim: int, kind: str, hierarchy) -> None:
    generator = torch.Generator().manual_seed(1000 * batch + dim)
    x = torch.randn(batch, dim, generator=generator, dtype=torch.float64)
    w_q = torch.randn(dim, dim, generator=generator, dtype=torch.float64)
    w_k = torch.randn(dim, dim, generator=generator, dtype=torch.float64)
    a = (x @ w_q) @ (x @ w_k).T  # eq. 1: A = (X W_Q)(X W_K)^T, signs of both kinds
    labels = torch.randint(0, 5, (batch,), generator=generator)
    superclasses = labels // 2 if hierarchy[0] else None
    eps = hierarchy[1]
    expected = naive_transfusion(a, labels, kind, superclasses, eps)
    loss = transfusion_loss(a, labels, kind, superclasses, eps)
    assert loss.dim() == 0 and loss.dtype == torch.float64
    assert loss.item() == pytest.approx(expected, rel=1e-10, abs=1e-12)
    loss32 = transfusion_loss(a.float(), labels, kind, superclasses, eps)
    assert loss32.dtype == torch.float32
    assert loss32.item() == pytest.approx(expected, rel=1e-4, abs=1e-5)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batch", [1, 2, 6, 11])
def test_transfusion_with_the_diagonal_matches_naive_value_and_gradient(batch: int,
                                                                        kind: str) -> None:
    """Both readings of g(A) (eq. 5 as printed, diagonal in; and the self-pair left out)
    against the float64 loop, values and gradients (central differences of the loop)."""
    generator = torch.Generator().manual_seed(77 + batch)
    x = torch.randn(batch, 4, generator=generator, dtype=torch.float64)
    a = (x @ torch.randn(4, 4, generator=generator, dtype=torch.float64)) @ x.T
    labels = torch.randint(0, 3, (batch,), generator=generator)
    for include_diagonal in (False, True):
        live = a.clone().requires_grad_(True)
        loss = transfusion_loss(live, labels, kind, include_diagonal=include_diagonal)
        expected = naive_transfusion(a, labels, kind, include_diagonal=include_diagonal)
        assert loss.item() == pytest.approx(expected, rel=1e-10, abs=1e-12)
        loss.backward()
        step = 1e-6
        for i in range(batch):
            for j in range(batch):
                up, down = a.clone(), a.clone()
                up[i, j] += step
                down[i, j] -= step
                slope = (naive_transfusion(up, labels, kind, include_diagonal=include_diagonal)
                         - naive_transfusion(down, labels, kind,
                                             include_diagonal=include_diagonal)) / (2 * step)
                assert live.grad[i, j].item() == pytest.approx(slope, rel=1e-5, abs=1e-7)


def test_transfusion_diagonal_changes_the_objective_only_when_asked() -> None:
    """The diagonal of A is ignored by default and counts with include_diagonal=True."""
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(8, 3, generator=generator, dtype=torch.float64)
    a = x @ x.T
    labels = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2])
    bumped = a + 3.0 * torch.eye(8, dtype=torch.float64)
    for kind in KINDS:
        assert transfusion_loss(bumped, labels, kind).item() == pytest.approx(
            transfusion_loss(a, labels, kind).item(), rel=1e-12)
        assert transfusion_loss(bumped, labels, kind, include_diagonal=True).item() != (
            pytest.approx(transfusion_loss(a, labels, kind, include_diagonal=True).item(),
                          rel=1e-6))
    with pytest.raises(ValueError, match="include_diagonal must be true or false, got 'yes'"):
        transfusion_loss(a, labels, include_diagonal="yes")


def hierarchy_example() -> tuple[torch.Tensor, torch.Tensor]:
    """Labels with classes of 3, 2 and 1 in two superclasses, plus a sample alone in its own
    class and superclass (a row of Y with no positive)."""
    labels = torch.tensor([0, 0, 0, 1, 1, 2, 3])
    superclasses = torch.tensor([0, 0, 0, 0, 0, 1, 2])
    return labels, superclasses


@pytest.mark.parametrize("scale", [1e-3, 1.0, 50.0])
@pytest.mark.parametrize("kind", ["jsd_sq", "kl_sq"])
def test_transfusion_squared_kinds_vanish_when_p_equals_y(kind: str, scale: float) -> None:
    # Row-normalised (s * sqrt(Y) with random signs)^2 is the row-normalised Y exactly.
    labels, superclasses = hierarchy_example()
    y = target_affinity(labels, superclasses, eps=0.5).double()
    signs = torch.where(torch.rand(7, 7, generator=torch.Generator().manual_seed(0)) < 0.5,
                        -1.0, 1.0).double()
    a = scale * signs * y.sqrt()
    assert transfusion_loss(a, labels, kind, superclasses, 0.5).item() == pytest.approx(
        0.0, abs=1e-14)
    # Sanity: the same A scored against the wrong targets is not zero.
    assert transfusion_loss(a, labels, kind).item() > 0.01


def test_transfusion_kl_relu_vanishes_when_p_equals_y() -> None:
    # Negative affinities outside Y's support are cut by the ReLU.
    labels, superclasses = hierarchy_example()
    y = target_affinity(labels, superclasses, eps=0.25).double()
    negatives = -torch.rand(7, 7, generator=torch.Generator().manual_seed(1)).double()
    a = 3.0 * y + torch.where(y == 0, negatives, 0.0)
    assert transfusion_loss(a, labels, "kl_relu", superclasses, 0.25).item() == pytest.approx(
        0.0, abs=1e-14)


@pytest.mark.parametrize("c", [0.0, 1.0, 4.0])
def test_transfusion_kl_sm_closed_form(c: float) -> None:
    # A = c on classmates, 0 elsewhere: a row with m classmates among N - 1 others has
    # P = e^c / (m e^c + N - 1 - m) on each, so KL(Y || P) = log(1 + (N - 1 - m) / (m e^c)).
    labels = torch.tensor([0, 0, 0, 1, 1, 2])
    y = target_affinity(labels).double()
    a = c * y
    classmates = [2, 2, 2, 1, 1]  # the last sample has none: left out of the mean
    expected = sum(math.log(1 + (5 - m) / (m * math.exp(c))) for m in classmates) / 5
    assert transfusion_loss(a, labels, "kl_sm").item() == pytest.approx(expected, rel=1e-12)


def test_transfusion_jsd_of_disjoint_supports_is_two_log_two() -> None:
    # P puts all its mass on the other class, Y on the own class: each KL to M is log 2.
    labels = torch.tensor([0, 0, 1, 1, 1])
    y = target_affinity(labels).double()
    a = (1 - y - torch.eye(5, dtype=torch.float64)) * torch.linspace(1, 2, 5).double()
    assert transfusion_loss(a, labels, "jsd_sq").item() == pytest.approx(2 * math.log(2),
                                                                         rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_transfusion_jsd_is_bounded_by_two_log_two(seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(9, 9, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 3, (9,), generator=generator)
    loss = transfusion_loss(a, labels, "jsd_sq").item()
    assert 0 < loss < 2 * math.log(2)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 4])
def test_transfusion_without_positives_is_a_connected_zero(kind: str, n: int) -> None:
    a = torch.randn(n, n, dtype=torch.float64, requires_grad=True)
    loss = transfusion_loss(a, torch.arange(n), kind)
    assert loss.item() == 0.0 and loss.grad_fn is not None
    loss.backward()
    assert torch.equal(a.grad, torch.zeros_like(a))


@pytest.mark.parametrize("kind", KINDS)
def test_transfusion_gradients_finite_with_zero_and_negative_affinities(kind: str) -> None:
    # Row 0 is all zero (P undefined before the guard); A is 0 or negative at positive pairs
    # (P = 0 < Y for kl_sq and kl_relu); Y has exact zeros everywhere else.
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    a = torch.randn(6, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    a[0] = 0.0
    a[2, 3] = 0.0
    a[4, 5] = -2.0
    a.requires_grad_(True)
    loss = transfusion_loss(a, labels, kind)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(a.grad).all()
    assert loss.item() == pytest.approx(naive_transfusion(a, labels, kind), rel=1e-10)


@pytest.mark.parametrize("kind", KINDS)
def test_transfusion_gradient_matches_finite_differences(kind: str) -> None:
    generator = torch.Generator().manual_seed(3)
    a = torch.randn(5, 5, generator=generator, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 1, 0, 1, 1])
    superclasses = torch.tensor([0, 0, 0, 0, 0])
    assert torch.autograd.gradcheck(
        lambda m: transfusion_loss(m, labels, kind, superclasses, 0.3), (a,))


@pytest.mark.parametrize("kind", ["jsd_sq", "kl_sq", "kl_relu"])
def test_transfusion_normalised_kinds_invariant_to_scaling_a(kind: str) -> None:
    generator = torch.Generator().manual_seed(4)
    a = torch.randn(8, 8, generator=generator, dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0, 3])
    base = transfusion_loss(a, labels, kind).item()
    for scale in (1e-3, 7.0, 1e3):
        assert transfusion_loss(scale * a, labels, kind).item() == pytest.approx(base,
                                                                                 rel=1e-10)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_transfusion_low_precision_inputs_give_float32_loss(dtype: torch.dtype,
                                                            kind: str) -> None:
    generator = torch.Generator().manual_seed(5)
    a = torch.randn(10, 10, generator=generator).to(dtype)
    labels = torch.randint(0, 3, (10,), generator=generator)
    loss = transfusion_loss(a, labels, kind)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(naive_transfusion(a, labels, kind), rel=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_transfusion_is_float32_under_bf16_autocast(kind: str) -> None:
    generator = torch.Generator().manual_seed(6)
    x = torch.randn(12, 16, generator=generator)
    w = torch.randn(16, 16, generator=generator)
    labels = torch.randint(0, 3, (12,), generator=generator)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = (x @ w) @ (x @ w).T  # bf16 under autocast, as the model would produce it
        loss = transfusion_loss(a, labels, kind)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(naive_transfusion(a, labels, kind), rel=1e-5)


def test_transfusion_rejects_unknown_kind() -> None:
    a, labels = torch.randn(3, 3), torch.tensor([0, 0, 1])
    with pytest.raises(ValueError, match="'kl_soft'.*jsd_sq, kl_sq, kl_relu, kl_sm"):
        transfusion_loss(a, labels, "kl_soft")


@pytest.mark.parametrize(("a_shape", "labels_shape"),
                         [((3, 4), (3,)), ((3,), (3,)), ((2, 3, 3), (3,)), ((3, 3), (4,))])
def test_transfusion_rejects_bad_shapes(a_shape, labels_shape) -> None:
    with pytest.raises(ValueError, match="shape"):
        transfusion_loss(torch.randn(*a_shape), torch.zeros(labels_shape, dtype=torch.long))


def test_transfusion_rejects_bad_hierarchy_arguments() -> None:
    a, labels = torch.randn(3, 3), torch.tensor([0, 0, 1])
    with pytest.raises(ValueError, match="eps must be in"):
        transfusion_loss(a, labels, superclasses=torch.tensor([0, 0, 0]), eps=2.0)
    with pytest.raises(ValueError, match="superclasses must give one id per sample"):
        transfusion_loss(a, labels, superclasses=torch.tensor([0, 0]))
