"""The ``logistic_probe`` protocol: its objective and its L-BFGS fit against float64 loops and
scikit-learn's ``LogisticRegression``, its choice of the weight decay on the training split
alone, its settings' refusals, and its accuracy on real Fashion-MNIST pixels."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from test_protocol_registry import Data, Separable

from benchmarks.protocols import PROTOCOLS
from benchmarks.protocols.evaluate import evaluate_encoder
from benchmarks.protocols.logistic_probe import (
    LogisticProbeSettings,
    choose_weight_decay,
    fit_logistic_regression,
    logistic_objective,
    logistic_probe_accuracy,
    validation_split,
)

PROBE = PROTOCOLS["logistic_probe"]
#: The settings of the tests below, as a suite would pin them.
SETTINGS = {"weight_decays": [1e-3, 1e-2, 1e-1], "val_fraction": 0.25, "max_iterations": 500,
            "tolerance": 1e-6}


def random_features(seed: int, n_train: int = 120, n_test: int = 60, dim: int = 6,
                    classes: int = 4, scale: float = 1.5):
    """Features with a weak class signal (overlapping classes), float32 as an encoder gives."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim))
    train_y, test_y = rng.integers(0, classes, n_train), rng.integers(0, classes, n_test)
    train_x = centres[train_y] + scale * rng.normal(size=(n_train, dim))
    test_x = centres[test_y] + scale * rng.normal(size=(n_test, dim))
    return train_x.astype(np.float32), train_y, test_x.astype(np.float32), test_y


# -- the objective and its fit against independent float64 references -------------------------
def naive_objective(weight: np.ndarray, bias: np.ndarray, x: np.ndarray, y: np.ndarray,
                    weight_decay: float) -> tuple[float, np.ndarray, np.ndarray]:
    """Mean cross-entropy + weight_decay / 2 * ||W||^2 and its gradient, by loops in float64."""
    n, d = x.shape
    classes = len(bias)
    loss, grad_w, grad_b = 0.0, np.zeros((classes, d)), np.zeros(classes)
    for i in range(n):
        logits = [sum(weight[c, j] * x[i, j] for j in range(d)) + bias[c] for c in range(classes)]
        top = max(logits)
        total = sum(math.exp(v - top) for v in logits)
        loss += (top + math.log(total) - logits[y[i]]) / n
        for c in range(classes):
            residual = (math.exp(logits[c] - top) / total - (c == y[i])) / n
            grad_b[c] += residual
            for j in range(d):
                grad_w[c, j] += residual * x[i, j]
    loss += weight_decay / 2 * sum(weight[c, j] ** 2 for c in range(classes) for j in range(d))
    return loss, grad_w + weight_decay * weight, grad_b


@pytest.mark.parametrize("n, d, classes", [(7, 3, 3), (20, 5, 4), (12, 1, 6)])
@pytest.mark.parametrize("weight_decay", [0.0, 1e-3, 0.5])
def test_the_objective_and_its_gradient_are_those_of_a_float64_loop(n, d, classes, weight_decay):
    rng = np.random.default_rng(n * d + classes)
    x, y = rng.normal(size=(n, d)), rng.integers(0, classes, n)
    weight, bias = rng.normal(size=(classes, d)), rng.normal(size=classes)
    w = torch.tensor(weight, requires_grad=True)
    b = torch.tensor(bias, requires_grad=True)
    loss = logistic_objective(w, b, torch.tensor(x), torch.tensor(y), weight_decay)
    loss.backward()
    expected, grad_w, grad_b = naive_objective(weight, bias, x, y, weight_decay)
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), grad_w, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(b.grad.numpy(), grad_b, rtol=1e-10, atol=1e-14)


def sklearn_probabilities(x: np.ndarray, y: np.ndarray, weight_decay: float,
                          query: np.ndarray) -> np.ndarray:
    """scikit-learn's minimiser of 1/2 ||W||^2 + C * sum of cross-entropies, the intercept not
    penalised: divided by C n, it is mean cross-entropy + 1 / (2 C n) ||W||^2, so C = 1 /
    (weight_decay n) is the probe's objective (multinomial with three classes or more; with two,
    scikit-learn fits one weight vector, not one per class, and its penalty differs)."""
    model = LogisticRegression(C=1 / (weight_decay * len(y)), tol=1e-12, max_iter=100_000)
    return model.fit(x, y).predict_proba(query)


@pytest.mark.parametrize("n, d, classes", [(30, 2, 3), (60, 5, 4), (45, 8, 5)])
@pytest.mark.parametrize("weight_decay", [1e-3, 1e-2, 1.0])
def test_the_fit_is_scikit_learns_logistic_regression(n, d, classes, weight_decay):
    rng = np.random.default_rng(100 * n + d)
    x = rng.normal(size=(n, d)) + rng.normal(size=(classes, d))[np.arange(n) % classes]
    y = np.arange(n) % classes  # every class present, as scikit-learn's columns need
    query = rng.normal(size=(25, d))
    fit = fit_logistic_regression(torch.tensor(x), torch.tensor(y), classes, weight_decay,
                                  max_iterations=1000, tolerance=1e-10)
    ours = torch.softmax(fit.logits(torch.tensor(query)), 1).numpy()
    expected = sklearn_probabilities(x, y, weight_decay, query)
    assert fit.converged and fit.gradient_max <= 1e-7
    np.testing.assert_allclose(ours, expected, atol=1e-6)
    assert (ours.argmax(1) == expected.argmax(1)).all()


def test_constant_features_give_the_class_frequencies() -> None:
    """Features that say nothing: the weights stay 0 (the penalty's minimum) and the softmax of
    the unpenalised bias is the training labels' frequencies, the closed-form optimum."""
    y = torch.tensor([0, 0, 0, 1, 2, 2, 0, 1])
    fit = fit_logistic_regression(torch.zeros(8, 3, dtype=torch.float64), y, 3, 0.1,
                                  max_iterations=100, tolerance=1e-12)
    assert torch.equal(fit.weight, torch.zeros(3, 3, dtype=torch.float64))
    frequencies = torch.bincount(y).double() / len(y)
    torch.testing.assert_close(torch.softmax(fit.bias, 0), frequencies, rtol=0, atol=1e-10)


def test_a_warm_start_reaches_the_same_optimum_in_fewer_iterations() -> None:
    train_x, train_y, _, _ = random_features(4)
    x, y = torch.tensor(train_x, dtype=torch.float64), torch.tensor(train_y)
    cold = fit_logistic_regression(x, y, 4, 1e-3, max_iterations=1000, tolerance=1e-8)
    near = fit_logistic_regression(x, y, 4, 2e-3, max_iterations=1000, tolerance=1e-8)
    warm = fit_logistic_regression(x, y, 4, 1e-3, max_iterations=1000, tolerance=1e-8,
                                   start=near)
    assert warm.iterations < cold.iterations
    torch.testing.assert_close(torch.softmax(warm.logits(x), 1), torch.softmax(cold.logits(x), 1),
                               rtol=0, atol=1e-6)


def test_an_iteration_cap_too_small_is_said_not_converged() -> None:
    train_x, train_y, _, _ = random_features(5)
    fit = fit_logistic_regression(torch.tensor(train_x), torch.tensor(train_y), 4, 1e-4,
                                  max_iterations=2, tolerance=1e-8)
    assert fit.iterations == 2 and not fit.converged and fit.gradient_max > 1e-8


# -- the protocol: standardisation, the choice on the training split, the scores -------------
def test_the_probe_ignores_each_features_offset_and_scale_and_constant_features() -> None:
    """The features are standardised by the training statistics: an affine map of each feature
    (the same on both splits) changes nothing, and an always-black pixel (a constant feature:
    no division by a zero deviation) neither."""
    train_x, train_y, test_x, test_y = random_features(6)
    base = logistic_probe_accuracy(train_x, train_y, test_x, test_y, **SETTINGS, device="cpu")
    scale = np.array([1e-3, 2.0, 50.0, 1.0, 0.1, 7.0], dtype=np.float32)
    offset = np.array([5.0, -3.0, 0.0, 100.0, 1.0, -0.5], dtype=np.float32)
    moved = logistic_probe_accuracy(train_x * scale + offset, train_y, test_x * scale + offset,
                                    test_y, **SETTINGS, device="cpu")
    black = np.zeros((len(train_x), 1), dtype=np.float32), np.zeros((len(test_x), 1), np.float32)
    padded = logistic_probe_accuracy(np.hstack([train_x, black[0]]), train_y,
                                     np.hstack([test_x, black[1]]), test_y, **SETTINGS,
                                     device="cpu")
    for other in (moved, padded):
        assert other.scores == pytest.approx(base.scores, abs=1 / len(test_y))
        assert other.choice.weight_decay == base.choice.weight_decay
    assert torch.isfinite(padded.fit.weight).all() and 0 < base.scores["top1"] < 1


def test_the_choice_never_reads_the_test_split() -> None:
    train_x, train_y, test_x, test_y = random_features(7)
    rng = np.random.default_rng(0)
    first = logistic_probe_accuracy(train_x, train_y, test_x, test_y, **SETTINGS, device="cpu")
    other = logistic_probe_accuracy(train_x, train_y, rng.normal(size=test_x.shape),
                                    rng.permutation(test_y), **SETTINGS, device="cpu")
    assert other.choice.grid == first.choice.grid
    assert other.choice.weight_decay == first.choice.weight_decay
    assert other.choice.val_top1 == first.choice.val_top1


def test_the_validation_split_is_a_seeded_share_of_the_training_points() -> None:
    fit, val = validation_split(200, 0.1, seed=3)
    assert len(val) == 20 and len(fit) == 180
    assert sorted(torch.cat([fit, val]).tolist()) == list(range(200))
    again, other = validation_split(200, 0.1, seed=3), validation_split(200, 0.1, seed=4)
    assert torch.equal(again[1], val) and not torch.equal(other[1], val)
    # at least one point held out, and one left to fit
    assert [len(part) for part in validation_split(3, 0.01, seed=0)] == [2, 1]
    assert [len(part) for part in validation_split(3, 0.99, seed=0)] == [1, 2]
    with pytest.raises(ValueError, match="at least 2 training points"):
        validation_split(1, 0.5, seed=0)


def test_the_weight_decay_is_the_one_of_best_validation_accuracy() -> None:
    """Each grid point's validation accuracy is scikit-learn's on the same split (standardised
    by the fitted part's statistics, C = 1 / (weight_decay n_fit)), and the pick is the best
    of them, a tie going to the stronger penalty."""
    train_x, train_y, _, _ = random_features(8, n_train=200, dim=12, scale=2.5)
    train_x = train_x.astype(np.float64)
    grid = [1e-4, 1e-2, 1.0, 10.0]
    choice = choose_weight_decay(torch.tensor(train_x),
                                 torch.tensor(train_y), 4, grid, 0.3, seed=11,
                                 max_iterations=1000, tolerance=1e-9)
    fit_rows, val_rows = (rows.numpy() for rows in validation_split(200, 0.3, seed=11))
    scaler = StandardScaler().fit(train_x[fit_rows])
    fit_x, val_x = scaler.transform(train_x[fit_rows]), scaler.transform(train_x[val_rows])
    expected = {}
    for weight_decay in grid:
        model = LogisticRegression(C=1 / (weight_decay * len(fit_rows)), tol=1e-10,
                                   max_iter=10_000).fit(fit_x, train_y[fit_rows])
        expected[weight_decay] = float((model.predict(val_x) == train_y[val_rows]).mean())
    assert [wd for wd, _, _ in choice.grid] == sorted(grid, reverse=True)  # warm-started down
    assert {wd: acc for wd, acc, _ in choice.grid} == pytest.approx(expected, abs=1e-12)
    best = max(expected.values())
    assert len(set(expected.values())) > 1  # the grid makes a difference here
    assert choice.weight_decay == max(wd for wd, acc in expected.items() if acc == best)
    assert choice.val_top1 == best


def test_the_probe_scores_the_refit_on_every_training_point() -> None:
    train_x, train_y, test_x, test_y = random_features(9)
    out = logistic_probe_accuracy(train_x, train_y, test_x, test_y, **SETTINGS, device="cpu")
    train_x, test_x = train_x.astype(np.float64), test_x.astype(np.float64)
    scaler = StandardScaler().fit(train_x)
    model = LogisticRegression(C=1 / (out.choice.weight_decay * len(train_y)), tol=1e-10,
                               max_iter=10_000).fit(scaler.transform(train_x), train_y)
    expected = float((model.predict(scaler.transform(test_x)) == test_y).mean())
    assert out.scores == pytest.approx({"top1": expected}, abs=1 / len(test_y))
    assert out.fit.converged


def test_top5_only_with_at_least_100_classes() -> None:
    few = logistic_probe_accuracy(*random_features(10), **SETTINGS, device="cpu")
    assert set(few.scores) == {"top1"}
    train_x, train_y, test_x, test_y = random_features(10, n_train=400, n_test=200, dim=8,
                                                       classes=100, scale=0.3)
    many = logistic_probe_accuracy(train_x, train_y, test_x, test_y,
                                   **{**SETTINGS, "max_iterations": 50}, device="cpu")
    assert set(many.scores) == {"top1", "top5"}
    assert 0 < many.scores["top1"] <= many.scores["top5"] <= 1


def test_a_run_records_the_accuracy_the_chosen_weight_decay_and_its_validation_accuracy(
        monkeypatch) -> None:
    from benchmarks.protocols import logistic_probe as module

    seeds = []
    monkeypatch.setattr(module, "validation_split",
                        lambda n, fraction, seed: seeds.append(seed) or validation_split(
                            n, fraction, seed))
    out = evaluate_encoder(Separable(), Data(), {"logistic_probe": PROBE.example}, seed=5)
    assert seeds == [5]  # the split is the run's seed's
    assert out.metrics == {"logistic_probe_top1": 1.0}  # 4 standard deviations apart
    record = out.records["logistic_probe"]
    assert record["weight_decay"] in PROBE.example["weight_decays"]
    assert 0 <= record["val_top1"] <= 1 and record["converged"] is True
    assert [row["weight_decay"] for row in record["validation"]] == sorted(
        PROBE.example["weight_decays"], reverse=True)
    chosen = next(row for row in record["validation"]
                  if row["weight_decay"] == record["weight_decay"])
    assert chosen["val_top1"] == record["val_top1"]


# -- settings ----------------------------------------------------------------------------------
@pytest.mark.parametrize("setting, value, message", [
    ("weight_decays", [], "weight_decays must be a list of 1 to 100 weight decays (each >= 0), "
                          "got []"),
    ("weight_decays", 1e-3, "weight_decays must be a list of 1 to 100 weight decays (each >= 0), "
                            "got 0.001"),
    ("weight_decays", [1e-3, -1.0], "weight_decays must be >= 0, got -1.0"),
    ("weight_decays", [True], "weight_decays must be >= 0, got True"),
    ("weight_decays", [1e-3, "big"], "weight_decays must be >= 0, got 'big'"),
    ("weight_decays", [float("inf")], "weight_decays must be >= 0 and at most 10, got inf"),
    ("val_fraction", 0, "val_fraction must be in (0, 1), got 0"),
    ("val_fraction", 1.0, "val_fraction must be in (0, 1), got 1.0"),
    ("max_iterations", 0, "max_iterations must be an integer of at least 1, got 0"),
    ("max_iterations", 2.5, "max_iterations must be an integer of at least 1, got 2.5"),
    ("max_iterations", 10**9, "max_iterations must be an integer in [1, 100000], got 1000000000"),
    ("tolerance", 0, "tolerance must be > 0 and finite, got 0"),
    ("tolerance", float("nan"), "tolerance must be > 0 and finite, got nan"),
    ("tolerance", 5.0, "tolerance must be > 0 and at most 1, got 5.0"),
])
def test_a_bad_setting_is_refused_in_one_line_naming_it(setting, value, message) -> None:
    with pytest.raises(ValueError) as refused:
        PROBE.parse({**PROBE.example, setting: value})
    assert str(refused.value) == message
    with pytest.raises(ValueError, match=re.escape(message)):  # the function checks them too
        logistic_probe_accuracy(*random_features(0), **{**SETTINGS, setting: value})


def test_every_setting_is_pinned_and_the_example_is_accepted() -> None:
    assert PROBE.setting_names() == ["weight_decays", "val_fraction", "max_iterations",
                                     "tolerance"]
    assert PROBE.parse(PROBE.example) == LogisticProbeSettings(**PROBE.example)
    with pytest.raises(ValueError, match=r"^tolerance not set; a suite pins every setting of "
                                         r"logistic_probe: weight_decays, val_fraction, "
                                         r"max_iterations, tolerance$"):
        PROBE.parse({k: v for k, v in PROBE.example.items() if k != "tolerance"})


def test_a_training_split_too_small_to_hold_out_is_refused_before_training() -> None:
    settings = PROBE.parse(PROBE.example)
    PROBE.check_sizes(settings, {"train": 2, "val": 0, "test": 1})
    with pytest.raises(ValueError, match="^needs at least 2 training points to hold some out "
                                         "for validation, got 1$"):
        PROBE.check_sizes(settings, {"train": 1, "val": 0, "test": 1})


def test_it_runs_right_after_the_sgd_probes_in_the_registry() -> None:
    names = list(PROTOCOLS)
    assert names[names.index("linear_probe") + 2] == "logistic_probe"  # augmented_probe between


# -- real data ---------------------------------------------------------------------------------
FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
#: The training images the real-data test fits (scikit-learn takes ~270 s on all 60,000).
REAL_TRAIN = 10_000


def fashion_mnist(prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """Images as (n, 784) pixels in [0, 1] and their labels, from Debian's package's files."""
    from datamodules.mnist import find_file, parse_idx, read_idx_bytes

    images, labels = (parse_idx(read_idx_bytes(find_file(FASHION_MNIST, f"{prefix}-{kind}"),
                                               dims), dims)
                      for kind, dims in (("images-idx3-ubyte", 3), ("labels-idx1-ubyte", 1)))
    return images.reshape(len(images), -1).astype(np.float32) / 255, labels.astype(np.int64)


@pytest.mark.system_data
@pytest.mark.skipif(not FASHION_MNIST.is_dir(),
                    reason="real Fashion-MNIST not installed "
                           "(apt-get install dataset-fashion-mnist)")
def test_on_fashion_mnist_pixels_the_probe_is_scikit_learns_logistic_regression() -> None:
    """On the first 10,000 training images and all 10,000 test images of Fashion-MNIST (pixels
    in [0, 1]), the probe (weight decay chosen from 1e-3, 1e-2, 1e-1 on a tenth of those
    training images) scores within half a point of scikit-learn's ``LogisticRegression(C=0.01)``
    run to convergence on ``StandardScaler``'d pixels. On a 2-core x86_64 CPU, one thread:
    scikit-learn about 6 s (285 iterations), the probe about 9 s (four fits)."""
    train_x, train_y = fashion_mnist("train")
    test_x, test_y = fashion_mnist("t10k")
    train_x, train_y = train_x[:REAL_TRAIN], train_y[:REAL_TRAIN]
    start = time.perf_counter()
    scaler = StandardScaler().fit(train_x.astype(np.float64))  # float64: sklearn keeps float32
    reference = LogisticRegression(C=0.01, max_iter=1000).fit(
        scaler.transform(train_x.astype(np.float64)), train_y)
    expected = float((reference.predict(scaler.transform(test_x.astype(np.float64)))
                      == test_y).mean())
    sklearn_seconds = time.perf_counter() - start
    assert reference.n_iter_[0] < 1000  # converged: the reference is the optimum
    start = time.perf_counter()
    out = logistic_probe_accuracy(train_x, train_y, test_x, test_y,
                                  weight_decays=[1e-3, 1e-2, 1e-1], val_fraction=0.1,
                                  max_iterations=1000, tolerance=1e-4, seed=0, device="cpu")
    probe_seconds = time.perf_counter() - start
    assert abs(out.scores["top1"] - expected) <= 0.005, (out.scores, expected, out.record())
    assert out.fit.converged and out.scores["top1"] > 0.8
    print(f"sklearn {expected:.4f} in {sklearn_seconds:.1f} s; probe {out.scores['top1']:.4f} "
          f"in {probe_seconds:.1f} s, weight decay {out.choice.weight_decay:g}")
