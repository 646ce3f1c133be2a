"""The shared evaluation protocols: kNN, linear probe and frozen-feature extraction."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.neighbors import KNeighborsClassifier
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.protocols import extract_features, knn_accuracy, linear_probe_accuracy

# many tiny operations: one intra-op thread (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("one_thread")


def random_features(seed: int, n_train: int = 120, n_test: int = 60, dim: int = 6,
                    classes: int = 4):
    """Continuous features with a weak class signal, so votes are neither trivial nor tied
    distances (labels are drawn to overlap the classes)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim))
    train_y = rng.integers(0, classes, n_train)
    test_y = rng.integers(0, classes, n_test)
    train_x = centres[train_y] + 1.5 * rng.normal(size=(n_train, dim))
    test_x = centres[test_y] + 1.5 * rng.normal(size=(n_test, dim))
    return train_x.astype(np.float32), train_y, test_x.astype(np.float32), test_y


# -- kNN ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [1, 5, 20])
def test_majority_vote_matches_scikit_learn(k: int, seed: int) -> None:
    train_x, train_y, test_x, test_y = random_features(seed)
    reference = KNeighborsClassifier(n_neighbors=k, metric="cosine", algorithm="brute")
    expected = reference.fit(train_x, train_y).score(test_x, test_y)
    assert 0.0 < expected < 1.0  # a non-trivial case
    assert knn_accuracy(train_x, train_y, test_x, test_y, k=k, device="cpu") == pytest.approx(
        expected, abs=1e-12)


def test_majority_vote_matches_scikit_learn_per_query_with_chunks() -> None:
    # Per-query predictions via one-query test sets; a chunk size smaller than the test set.
    train_x, train_y, test_x, test_y = random_features(3, n_test=25)
    reference = KNeighborsClassifier(n_neighbors=7, metric="cosine", algorithm="brute")
    predicted = reference.fit(train_x, train_y).predict(test_x)
    whole = knn_accuracy(train_x, train_y, test_x, test_y, k=7, chunk_size=4, device="cpu")
    assert whole == pytest.approx(float(np.mean(predicted == test_y)), abs=1e-12)
    for i in range(len(test_y)):
        single = knn_accuracy(train_x, train_y, test_x[i:i + 1], predicted[i:i + 1], k=7,
                              device="cpu")
        assert single == 1.0, i


def naive_weighted_knn(train_x, train_y, test_x, test_y, k: int, temperature: float) -> float:
    """Wu et al. 2018's weighted vote, one query at a time in float64."""
    correct = 0
    train = [row / np.linalg.norm(row) for row in train_x.astype(np.float64)]
    for query, label in zip(test_x.astype(np.float64), test_y, strict=True):
        query = query / np.linalg.norm(query)
        sims = sorted(((float(query @ t), j) for j, t in enumerate(train)), reverse=True)[:k]
        scores: dict[int, float] = {}
        for sim, j in sims:
            scores[int(train_y[j])] = scores.get(int(train_y[j]), 0.0) + math.exp(sim / temperature)
        best = max(sorted(scores), key=lambda c: scores[c])
        correct += int(best == label)
    return correct / len(test_y)


@pytest.mark.parametrize("temperature", [0.05, 0.1, 0.5])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("k", [1, 5, 20, 50])
def test_weighted_vote_matches_naive_loop(k: int, seed: int, temperature: float) -> None:
    train_x, train_y, test_x, test_y = random_features(10 + seed)
    expected = naive_weighted_knn(train_x, train_y, test_x, test_y, k, temperature=temperature)
    got = knn_accuracy(train_x, train_y, test_x, test_y, k=k, temperature=temperature,
                       device="cpu")
    assert got == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("c", [0.2, 0.6])
def test_weighted_vote_turns_at_its_closed_form_temperature(c: float) -> None:
    # One neighbour of class 0 at similarity 1 (the query itself), two of class 1 at similarity
    # c: class 0 wins iff exp(1 / t) > 2 exp(c / t), i.e. below t* = (1 - c) / ln 2.
    train_x = np.array([[1.0, 0.0], [c, math.sqrt(1 - c * c)], [c, -math.sqrt(1 - c * c)]])
    train_y = np.array([0, 1, 1])
    query, label = np.array([[1.0, 0.0]]), np.array([0])
    turn = (1 - c) / math.log(2)
    assert knn_accuracy(train_x, train_y, query, label, k=3, temperature=0.97 * turn,
                        device="cpu") == 1.0
    assert knn_accuracy(train_x, train_y, query, label, k=3, temperature=1.03 * turn,
                        device="cpu") == 0.0
    assert knn_accuracy(train_x, train_y, query, label, k=3, device="cpu") == 0.0  # majority


def test_weighted_vote_can_overrule_the_majority() -> None:
    # Two far neighbours of class 1 against one very close neighbour of class 0 (k = 3): the
    # majority says 1, the weighted vote at a low temperature says 0.
    train_x = np.array([[1.0, 0.0], [0.0, 1.0], [-0.05, 1.0]], dtype=np.float32)
    train_y = np.array([0, 1, 1])
    query, label = np.array([[1.0, 0.01]], dtype=np.float32), np.array([0])
    assert knn_accuracy(train_x, train_y, query, label, k=3, device="cpu") == 0.0
    assert knn_accuracy(train_x, train_y, query, label, k=3, temperature=0.1, device="cpu") == 1.0


def test_knn_is_scale_invariant_cosine() -> None:
    train_x, train_y, test_x, test_y = random_features(4)
    base = knn_accuracy(train_x, train_y, test_x, test_y, k=5, device="cpu")
    scales = np.random.default_rng(0).uniform(0.01, 100, size=(len(train_x), 1))
    scaled = knn_accuracy(train_x * scales, train_y, test_x * 3, test_y, k=5, device="cpu")
    assert scaled == base


@pytest.mark.parametrize("k", [0, 121])
def test_k_outside_the_training_size_raises(k: int) -> None:
    train_x, train_y, test_x, test_y = random_features(0, n_train=120)
    with pytest.raises(ValueError, match="120"):
        knn_accuracy(train_x, train_y, test_x, test_y, k=k, device="cpu")


def test_k_equal_to_training_size_is_allowed() -> None:
    train_x, train_y, test_x, test_y = random_features(0, n_train=30)
    accuracy = knn_accuracy(train_x, train_y, test_x, test_y, k=30, device="cpu")
    # Every query sees all 30 points: each predicts the overall majority class.
    majority = np.bincount(train_y).argmax()
    assert accuracy == pytest.approx(float(np.mean(test_y == majority)))


# -- linear probe -------------------------------------------------------------------------------


def gaussian_clusters(seed: int, classes: int = 5, dim: int = 16, per_class: int = 40,
                      separation: float = 6.0):
    rng = np.random.default_rng(seed)
    centres = separation * rng.normal(size=(classes, dim)) / math.sqrt(dim) * 3

    def draw(n: int):
        y = np.repeat(np.arange(classes), n)
        return (centres[y] + rng.normal(size=(len(y), dim))).astype(np.float32), y

    return (*draw(per_class), *draw(per_class // 2))


def test_linear_probe_separates_separable_clusters() -> None:
    train_x, train_y, test_x, test_y = gaussian_clusters(0)
    scores = linear_probe_accuracy(train_x, train_y, test_x, test_y, epochs=20, device="cpu")
    assert set(scores) == {"top1"}
    assert scores["top1"] >= 0.99


def linear_labels(seed: int, n_train: int = 400, n_test: int = 500, dim: int = 16,
                  classes: int = 5):
    """Unclustered Gaussian features labelled by a random linear map (argmax of ``x W``)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(dim, classes))
    x = rng.normal(size=(n_train + n_test, dim)).astype(np.float32)
    y = (x @ w).argmax(1)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def test_linear_probe_with_shuffled_labels_is_near_chance() -> None:
    train_x, train_y, test_x, test_y = linear_labels(0)
    # With the true labels the features carry the signal ...
    scores = linear_probe_accuracy(train_x, train_y, test_x, test_y, epochs=20, device="cpu")
    assert scores["top1"] > 0.8
    # ... and with training labels shuffled independently of them, nothing is left to learn.
    shuffled = np.random.default_rng(5).permutation(train_y)
    scores = linear_probe_accuracy(train_x, shuffled, test_x, test_y, epochs=20, device="cpu")
    assert scores["top1"] < 0.35


def test_linear_probe_is_deterministic_given_the_seed() -> None:
    train_x, train_y, test_x, test_y = random_features(7, classes=5)
    torch.manual_seed(123)
    first = linear_probe_accuracy(train_x, train_y, test_x, test_y, epochs=5, seed=3,
                                  device="cpu")
    torch.manual_seed(456)  # the global RNG's state must not matter
    second = linear_probe_accuracy(train_x, train_y, test_x, test_y, epochs=5, seed=3,
                                   device="cpu")
    assert first == second


def test_linear_probe_leaves_the_global_rng_alone() -> None:
    train_x, train_y, test_x, test_y = random_features(7)
    torch.manual_seed(99)
    expected = torch.rand(3)
    torch.manual_seed(99)
    linear_probe_accuracy(train_x, train_y, test_x, test_y, epochs=1, device="cpu")
    torch.testing.assert_close(torch.rand(3), expected)


def test_linear_probe_reports_top5_only_with_100_classes() -> None:
    rng = np.random.default_rng(0)
    for classes, has_top5 in ((99, False), (100, True)):
        y = np.arange(classes)  # one example per class, the test set = the training set
        x = rng.normal(size=(classes, 8)).astype(np.float32)
        scores = linear_probe_accuracy(x, y, x, y, epochs=1, batch_size=128, device="cpu")
        assert ("top5" in scores) is has_top5
        if has_top5:
            assert 0.0 <= scores["top1"] <= scores["top5"] <= 1.0


def test_linear_probe_rejects_mismatched_lengths() -> None:
    x = np.zeros((10, 3), dtype=np.float32)
    with pytest.raises(ValueError):
        linear_probe_accuracy(x, np.zeros(9, dtype=int), x, np.zeros(10, dtype=int), epochs=1)


def reference_linear_head(train_x, train_y, num_classes: int, epochs: int, lr: float,
                          batch_size: int, weight_decay: float, seed: int):
    """The probe's training as it was written before the lean loop: nn.Linear, autograd,
    torch.optim.SGD and CosineAnnealingLR stepped per batch, a randperm per epoch."""
    import torch.nn.functional as F

    train_x, train_y = torch.as_tensor(train_x).float(), torch.as_tensor(train_y).long()
    generator = torch.Generator().manual_seed(seed)
    torch_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    head = torch.nn.Linear(train_x.shape[1], num_classes)
    torch.random.set_rng_state(torch_state)
    optimizer = torch.optim.SGD(head.parameters(), lr=lr, momentum=0.9, weight_decay=weight_decay)
    steps_per_epoch = math.ceil(len(train_y) / batch_size)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs * steps_per_epoch)
    for _ in range(epochs):
        order = torch.randperm(len(train_y), generator=generator)
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            loss = F.cross_entropy(head(train_x[idx]), train_y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
    return head.weight.detach(), head.bias.detach()


@pytest.mark.parametrize("n, dim, classes, batch_size, weight_decay", [
    (200, 8, 4, 16, 1e-6),    # 13 batches an epoch, the last one of 8
    (130, 33, 7, 64, 0.0),    # no weight decay; a last batch of 2
    (96, 16, 3, 32, 5e-2),    # whole batches only; strong weight decay
])
def test_linear_probe_gives_the_numbers_of_the_autograd_loop_bit_for_bit(
        n: int, dim: int, classes: int, batch_size: int, weight_decay: float) -> None:
    from benchmarks.protocols.linear_probe import train_linear_head

    train_x, train_y, test_x, test_y = random_features(n, n_train=n, dim=dim, classes=classes)
    expected = reference_linear_head(train_x, train_y, classes, 3, 0.3, batch_size, weight_decay,
                                     seed=5)
    got = train_linear_head(train_x, train_y, classes, 3, 0.3, batch_size, weight_decay, seed=5,
                            device="cpu")
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    logits = torch.nn.functional.linear(torch.as_tensor(test_x), *expected)
    accuracy = (logits.argmax(1) == torch.as_tensor(test_y)).float().mean().item()
    scores = linear_probe_accuracy(train_x, train_y, test_x, test_y, epochs=3,
                                   batch_size=batch_size, weight_decay=weight_decay, seed=5,
                                   device="cpu")
    assert scores["top1"] == accuracy


def test_linear_probe_runs_on_one_thread_and_restores_the_count() -> None:
    train_x, train_y, test_x, test_y = random_features(0)
    torch.set_num_threads(2)
    linear_probe_accuracy(train_x, train_y, test_x, test_y, epochs=1, device="cpu")
    assert torch.get_num_threads() == 2


def test_the_cuda_graph_chunks_replay_every_step_in_order() -> None:
    """The chunked schedule CUDA graphs replay (chunks of full batches, then the rest of the
    epoch), run eagerly on the CPU with learning rates as tensors: the same training up to the
    rounding of ``lr * buffer`` (a tensor product, not the fused ``add`` with a float alpha)."""
    from benchmarks.protocols import linear_probe as lp

    train_x, train_y, _, _ = random_features(2, n_train=150, dim=5, classes=3)
    expected = reference_linear_head(train_x, train_y, 3, 4, 0.3, 16, 1e-3, seed=1)

    class EagerGraph:
        def __init__(self, state, order, rates):
            self.state, self.order, self.rates = state, order, rates

        def replay(self):
            self.state.run(self.order, self.rates)

    def capture(state, chunk):
        order = torch.zeros(chunk * state.batch_size, dtype=torch.long)
        rates = torch.zeros(chunk)
        return EagerGraph(state, order, rates), order, rates

    generator = torch.Generator().manual_seed(1)
    torch_state = torch.random.get_rng_state()
    torch.manual_seed(1)
    head = torch.nn.Linear(5, 3)
    torch.random.set_rng_state(torch_state)
    params = [head.weight.detach().clone(), head.bias.detach().clone()]
    buffers = [torch.zeros_like(p) for p in params]
    orders = torch.stack([torch.randperm(150, generator=generator) for _ in range(4)])
    state = lp._ProbeState(torch.as_tensor(train_x), torch.as_tensor(train_y).long(), params,
                           buffers, 1e-3, torch.ones(()), 16)
    old_steps, lp.GRAPH_STEPS = lp.GRAPH_STEPS, 4  # 9 full batches: 2 chunks, 1 + 1 eager
    try:
        lp._train_with_graphs(state, orders, lp.probe_learning_rates(0.3, 4 * 10), capture)
    finally:
        lp.GRAPH_STEPS = old_steps
    torch.testing.assert_close(params[0], expected[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(params[1], expected[1], rtol=1e-5, atol=1e-6)


def test_probe_schedule_is_a_per_step_cosine_to_zero() -> None:
    from benchmarks.protocols.linear_probe import probe_learning_rates

    total = 1000
    rates = probe_learning_rates(0.3, total)
    assert len(rates) == total and rates[0] == 0.3
    assert rates[total // 2] == pytest.approx(0.15, rel=1e-9)  # half-way: lr / 2
    assert 0 < rates[-1] < 1e-5  # the last step: ~0 (exactly 0 one step later)
    closed_form = [0.15 * (1 + math.cos(math.pi * t / total)) for t in range(total)]
    np.testing.assert_allclose(rates, closed_form, rtol=1e-9, atol=1e-15)
    assert all(a > b for a, b in zip(rates, rates[1:], strict=False))


def naive_sgd_probe(train_x, train_y, weight, bias, orders, lr: float, batch_size: int,
                    weight_decay: float):
    """SGD with momentum 0.9 and L2 weight decay on the mean cross-entropy, cosine learning rate
    per step, in float64 with explicit formulas (softmax gradient, no autograd)."""
    w, b = weight.astype(np.float64), bias.astype(np.float64)
    buf_w, buf_b = np.zeros_like(w), np.zeros_like(b)
    total = len(orders) * math.ceil(len(train_y) / batch_size)
    step = 0
    for order in orders:
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            x, y = train_x[idx].astype(np.float64), train_y[idx]
            logits = x @ w.T + b
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            p[np.arange(len(y)), y] -= 1.0
            grad_w = p.T @ x / len(y) + weight_decay * w
            grad_b = p.sum(0) / len(y) + weight_decay * b
            buf_w, buf_b = 0.9 * buf_w + grad_w, 0.9 * buf_b + grad_b
            rate = 0.5 * lr * (1 + math.cos(math.pi * step / total))
            w, b = w - rate * buf_w, b - rate * buf_b
            step += 1
    return w, b


@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
def test_linear_probe_is_sgd_with_momentum_weight_decay_and_cosine(weight_decay: float) -> None:
    from benchmarks.protocols.linear_probe import train_linear_head

    train_x, train_y, _, _ = random_features(4, n_train=90, dim=6, classes=3)
    torch_state = torch.random.get_rng_state()
    torch.manual_seed(2)
    head = torch.nn.Linear(6, 3)
    torch.random.set_rng_state(torch_state)
    generator = torch.Generator().manual_seed(2)
    orders = [torch.randperm(90, generator=generator).numpy() for _ in range(3)]
    args = (train_x, train_y, head.weight.detach().numpy(), head.bias.detach().numpy(), orders,
            0.3, 16)
    w, b = naive_sgd_probe(*args, weight_decay)
    got_w, got_b = train_linear_head(train_x, train_y, 3, 3, 0.3, 16, weight_decay, seed=2,
                                     device="cpu")
    np.testing.assert_allclose(got_w.numpy(), w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_b.numpy(), b, rtol=1e-4, atol=1e-5)
    # The comparison tells the weight decay apart: the other value is far off.
    other_w, _ = naive_sgd_probe(*args, 0.05 - weight_decay)
    assert np.abs(other_w - w).max() > 1e-3


# -- extract_features ---------------------------------------------------------------------------


class BatchNormEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.bn = nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.linear(x))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward(x)


def trained_batchnorm_encoder() -> BatchNormEncoder:
    torch.manual_seed(0)
    encoder = BatchNormEncoder()
    for _ in range(3):  # move the running statistics away from their initial values
        encoder(torch.randn(32, 4) * 3 + 1)
    return encoder


def loader(n: int = 10, batch_size: int = 4) -> DataLoader:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(n, 4, generator=generator)
    y = torch.arange(n) % 3
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False)


@pytest.mark.parametrize("as_method", [False, True])
@pytest.mark.parametrize("training", [True, False])
def test_extract_features_uses_eval_mode_and_restores_the_flag(as_method: bool,
                                                               training: bool) -> None:
    encoder = trained_batchnorm_encoder()
    encoder.train(training)
    running_mean = encoder.bn.running_mean.clone()
    data = loader()
    features, labels = extract_features(encoder.encode if as_method else encoder, data)

    x_all = torch.cat([x for x, _ in data])
    reference = trained_batchnorm_encoder().eval()
    with torch.no_grad():
        expected = reference(x_all)
    torch.testing.assert_close(features, expected)
    assert features.dtype == torch.float32 and features.shape == (10, 3)
    assert labels.dtype == torch.int64
    assert torch.equal(labels, torch.arange(10) % 3)
    # Running statistics untouched and the training flag back as it was, on every submodule.
    torch.testing.assert_close(encoder.bn.running_mean, running_mean)
    assert encoder.training is training
    assert all(m.training is training for m in encoder.modules())


def test_extract_features_restores_the_mode_even_when_the_encoder_fails() -> None:
    encoder = trained_batchnorm_encoder().train()

    def broken(x):
        raise RuntimeError("boom")

    encoder.forward = broken
    with pytest.raises(RuntimeError, match="boom"):
        extract_features(encoder, loader())
    assert encoder.training


def test_extract_features_accepts_a_plain_function() -> None:
    features, labels = extract_features(lambda x: 2 * x.double(), loader(), device="cpu")
    x_all = torch.cat([x for x, _ in loader()])
    torch.testing.assert_close(features, (2 * x_all).float())
    assert features.dtype == torch.float32 and len(labels) == 10


def test_extract_features_restores_each_submodules_own_mode() -> None:
    encoder = trained_batchnorm_encoder().train()
    encoder.bn.eval()  # e.g. a frozen BatchNorm inside a model being fine-tuned
    extract_features(encoder, loader())
    assert encoder.training
    assert not encoder.bn.training


def test_svm_separates_separable_clusters_and_ignores_feature_scale():
    from benchmarks.protocols import svm_accuracy

    generator = torch.Generator().manual_seed(0)
    centres = 6.0 * torch.randn(4, 10, generator=generator)
    labels = torch.arange(400) % 4
    x = centres[labels] + torch.randn(400, 10, generator=generator)
    train, test = slice(0, 300), slice(300, 400)
    accuracy = svm_accuracy(x[train], labels[train], x[test], labels[test])
    assert accuracy >= 0.99
    # Standardised inside: a feature blown up by 1e4 must not change the decision.
    scaled = x.clone()
    scaled[:, 0] *= 1e4
    assert svm_accuracy(scaled[train], labels[train], scaled[test], labels[test]) == accuracy
    shuffled = labels[train][torch.randperm(300, generator=generator)]
    assert svm_accuracy(x[train], shuffled, x[test], labels[test]) < 0.5


# -- linear SVM: the torch solver against scikit-learn's LinearSVC ------------------------------


def digits_splits(kind: str):
    """scikit-learn's digits (real images, 1,797 of 8 x 8 pixels): raw pixels, their 32-d PCA,
    or the pooled features of a small random-init CNN; a fixed 1,200 / 597 split."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32)
    if kind == "pca":
        from sklearn.decomposition import PCA

        x = PCA(32, random_state=0).fit(x[:1200]).transform(x).astype(np.float32)
    elif kind == "cnn":
        torch.manual_seed(0)
        cnn = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3),
                            nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten())
        with torch.no_grad():
            x = cnn(torch.as_tensor(x).view(-1, 1, 8, 8) / 16).numpy()
    return x[:1200], y[:1200], x[1200:], y[1200:]


def generated_clusters(n_train: int, dim: int, seed: int = 0, spread: float = 0.12):
    """GENERATED features, CIFAR-sized in width: 10 overlapping Gaussian clusters (centres
    N(0, spread^2) per coordinate, unit noise), so neither SVM is near 100%."""
    rng = np.random.default_rng(seed)
    centres = spread * rng.normal(size=(10, dim))
    y = rng.integers(0, 10, n_train + 2000)
    x = (centres[y] + rng.normal(size=(len(y), dim))).astype(np.float32)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


@pytest.mark.parametrize("kind", ["pixels", "pca", "cnn"])
def test_torch_svm_matches_linear_svc_on_digits_features(kind: str) -> None:
    from benchmarks.protocols import svm_accuracy

    splits = digits_splits(kind)
    expected = svm_accuracy(*splits, backend="sklearn")
    got = svm_accuracy(*splits, backend="torch", device="cpu")
    assert 0.5 < expected < 1.0
    assert abs(got - expected) <= 0.005, (got, expected)


@pytest.mark.parametrize("n_train, dim", [(3000, 128)])  # 6000 x 512 held too, in 18 s
def test_torch_svm_matches_linear_svc_on_generated_clusters(n_train: int, dim: int) -> None:
    from benchmarks.protocols import svm_accuracy

    splits = generated_clusters(n_train, dim)
    expected = svm_accuracy(*splits, backend="sklearn")
    got = svm_accuracy(*splits, backend="torch", device="cpu")
    assert 0.3 < expected < 0.95  # overlapping: the optimum matters
    assert abs(got - expected) <= 0.005, (got, expected)


@pytest.mark.parametrize("direction", ["exact", "cg"])
def test_torch_svm_reaches_the_linear_svc_objective(direction: str) -> None:
    """The solver's weights are LinearSVC's optimum: the primal objective (intercept penalised,
    squared hinge) of each one-vs-rest problem is no higher than liblinear's, to 1e-4, whichever
    way the Newton directions are solved."""
    from sklearn.svm import LinearSVC

    from benchmarks.protocols.svm import fit_linear_svm, standardise

    x, y, _, _ = digits_splits("pca")
    train, _ = standardise(torch.as_tensor(x, dtype=torch.float64),
                           torch.zeros(1, x.shape[1], dtype=torch.float64))
    w = fit_linear_svm(train, torch.as_tensor(y), 10, C=0.5, direction=direction)
    reference = LinearSVC(C=0.5, tol=1e-8, max_iter=100000).fit(train.numpy(), y)
    w_ref = torch.as_tensor(np.vstack([reference.coef_.T, reference.intercept_[None]]))
    xa = torch.cat([train, torch.ones(len(train), 1, dtype=torch.float64)], 1)
    signs = torch.where(torch.as_tensor(y)[:, None] == torch.arange(10), 1.0, -1.0).double()

    def objective(weights):
        hinge = (1 - signs * (xa @ weights)).clamp_min(0)
        return 0.5 * (weights**2).sum(0) + 0.5 * (hinge**2).sum(0)

    assert (objective(w) <= objective(w_ref) * (1 + 1e-4)).all()
    torch.testing.assert_close(w, w_ref, rtol=0.0, atol=1e-2 * float(w_ref.abs().max()))


def test_the_svm_keeps_each_class_gram_matrix_of_its_active_rows() -> None:
    """The exact Newton directions' Gram matrices, kept across steps by updates (rows entering
    and leaving), rebuilds and complements, equal a float64 sum over the active rows of each
    class, written out, after active sets that exercise all three."""
    from benchmarks.protocols.svm import _ActiveGrams

    gen = torch.Generator().manual_seed(0)
    xa = torch.randn(60, 5, generator=gen, dtype=torch.float64)
    grams = _ActiveGrams(xa, 3)
    everything = torch.ones(60, 3, dtype=torch.bool)
    few = torch.zeros(60, 3, dtype=torch.bool)
    few[:6] = True
    nudged = few.clone()
    nudged[6, 0], nudged[0, 1] = True, False
    most = everything.clone()
    most[:4, 2] = False
    for active in (everything, few, nudged, most, everything):
        got = grams.update(active)
        for k in range(3):
            want = torch.zeros(5, 5, dtype=torch.float64)
            for i in range(60):
                if active[i, k]:
                    for a in range(5):
                        for b in range(5):
                            want[a, b] += xa[i, a] * xa[i, b]
            torch.testing.assert_close(got[k], want, rtol=1e-12, atol=1e-12)
    assert set(grams.ways) == {"update", "rebuild", "complement"}, grams.ways


def test_the_svm_direction_is_checked() -> None:
    from benchmarks.protocols.svm import fit_linear_svm

    with pytest.raises(ValueError, match="direction must be one of auto, exact, cg, got 'lbfgs'"):
        fit_linear_svm(torch.zeros(4, 2, dtype=torch.float64), torch.tensor([0, 1, 0, 1]), 2,
                       direction="lbfgs")


def test_svm_backend_is_checked() -> None:
    from benchmarks.protocols import svm_accuracy

    with pytest.raises(ValueError, match="backend must be one of torch, sklearn, got 'svc'"):
        svm_accuracy(*generated_clusters(50, 4), backend="svc")


def test_the_suite_evaluation_section_chooses_the_protocols():
    from benchmarks.protocols.evaluate import evaluate_encoder
    from datamodules import DATAMODULES
    from modules.methods import RawPixels

    datamodule = DATAMODULES["digits"](batch_size=256)
    pixels = RawPixels(num_classes=10, input_shape=(1, 8, 8))
    only_svm = evaluate_encoder(pixels, datamodule, {"svm": {"C": 0.5, "backend": "torch"}},
                                seed=0).metrics
    assert set(only_svm) == {"svm_top1"} and only_svm["svm_top1"] > 0.9  # pixels separate digits
    both = evaluate_encoder(pixels, datamodule, {
        "linear_probe": {"epochs": 1, "lr": 0.3, "batch_size": 64, "weight_decay": 1e-6},
        "knn": {"k": [5, 5000], "temperature": None}}, seed=0)
    assert set(both.metrics) == {"linear_probe_top1", "knn5_top1"}
    assert "knn5000_top1" in both.notes  # more neighbours than training points: skipped, said so
    assert both.figures == {}  # no tsne asked for


def naive_cosine_silhouette(x: np.ndarray, y: np.ndarray) -> float:
    """Rousseeuw's silhouette with cosine distance, by explicit loops."""
    n = len(y)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    distance = [[1.0 - float(unit[i] @ unit[j]) for j in range(n)] for i in range(n)]
    values = []
    for i in range(n):
        same = [distance[i][j] for j in range(n) if y[j] == y[i] and j != i]
        if not same:
            values.append(0.0)
            continue
        a = sum(same) / len(same)
        b = min(sum(distance[i][j] for j in range(n) if y[j] == c)
                / sum(1 for j in range(n) if y[j] == c) for c in set(y.tolist()) if c != y[i])
        values.append((b - a) / max(a, b))
    return sum(values) / n


def test_cluster_scores_recover_separated_clusters_and_not_shuffled_labels():
    from benchmarks.protocols import cluster_scores

    generator = torch.Generator().manual_seed(0)
    centres = 10.0 * torch.randn(4, 8, generator=generator)
    labels = torch.arange(200) % 4
    x = centres[labels] + 0.5 * torch.randn(200, 8, generator=generator)
    perfect = cluster_scores(x, labels)
    assert perfect["ari"] == pytest.approx(1.0) and perfect["nmi"] == pytest.approx(1.0)
    shuffled = cluster_scores(x, labels[torch.randperm(200, generator=generator)])
    assert abs(shuffled["ari"]) < 0.05 and shuffled["nmi"] < 0.1


def test_cluster_scores_silhouette_is_the_cosine_silhouette_of_the_labels():
    from benchmarks.protocols import cluster_scores

    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 5)) + np.repeat(rng.normal(size=(3, 5)) * 2, [14, 13, 13], axis=0)
    y = np.repeat([0, 1, 2], [14, 13, 13])
    assert cluster_scores(x, y)["silhouette"] == pytest.approx(naive_cosine_silhouette(x, y))


def naive_ari_nmi(a: list[int], b: list[int]) -> tuple[float, float]:
    """Adjusted Rand index (Hubert & Arabie) and NMI (arithmetic mean of the entropies) from the
    contingency table, by loops."""
    n = len(a)
    table: dict[tuple[int, int], int] = {}
    for i, j in zip(a, b, strict=True):
        table[i, j] = table.get((i, j), 0) + 1
    rows = {i: sum(v for (r, _), v in table.items() if r == i) for i in set(a)}
    cols = {j: sum(v for (_, c), v in table.items() if c == j) for j in set(b)}
    pairs = sum(math.comb(v, 2) for v in table.values())
    row_pairs, col_pairs = sum(math.comb(v, 2) for v in rows.values()), sum(
        math.comb(v, 2) for v in cols.values())
    expected = row_pairs * col_pairs / math.comb(n, 2)
    ari = (pairs - expected) / (0.5 * (row_pairs + col_pairs) - expected)
    mutual = sum(v / n * math.log(n * v / (rows[i] * cols[j])) for (i, j), v in table.items())
    entropy_a = -sum(v / n * math.log(v / n) for v in rows.values())
    entropy_b = -sum(v / n * math.log(v / n) for v in cols.values())
    return ari, mutual / (0.5 * (entropy_a + entropy_b))


def test_cluster_scores_match_loops_on_overlapping_clusters():
    from benchmarks.protocols import cluster_scores
    from benchmarks.protocols.clustering import kmeans

    generator = torch.Generator().manual_seed(3)
    centres = torch.randn(3, 4, generator=generator, dtype=torch.float64)
    labels = torch.arange(150) % 3
    x = centres[labels] + torch.randn(150, 4, generator=generator, dtype=torch.float64)
    scores = cluster_scores(x, labels, seed=0)
    assignment = kmeans(x, 3, seed=0)[0]
    ari, nmi = naive_ari_nmi(labels.tolist(), assignment.tolist())
    assert 0.2 < ari < 0.95  # overlapping: neither perfect nor chance, so a swap would show
    assert abs(ari - nmi) > 0.02
    assert scores["ari"] == pytest.approx(ari, abs=1e-12)
    assert scores["nmi"] == pytest.approx(nmi, abs=1e-12)


# -- k-means and the silhouette in torch, against scikit-learn ----------------------------------


def test_torch_kmeans_recovers_separated_blobs_as_scikit_learn_does() -> None:
    from sklearn.datasets import make_blobs

    from benchmarks.protocols import cluster_scores

    x, y = make_blobs(600, n_features=16, centers=5, cluster_std=0.5, random_state=0)
    for backend in ("torch", "sklearn"):
        assert cluster_scores(x, y, seed=1, backend=backend, device="cpu")["ari"] == 1.0


def test_torch_kmeans_matches_scikit_learn_on_digits_over_seeds() -> None:
    """Real features (digits' 32-d PCA): the partitions come from different random streams,
    so their ARIs are compared on average over 4 seeds, and k-means's own objective (the best
    inertia of 10 restarts) per seed."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    from benchmarks.protocols.clustering import kmeans

    x, y, _, _ = digits_splits("pca")
    ours, theirs = [], []
    for seed in range(4):
        labels, inertia = kmeans(torch.as_tensor(x, dtype=torch.float64), 10, seed=seed)
        reference = KMeans(n_clusters=10, n_init=10, random_state=seed).fit(x.astype(np.float64))
        ours.append(adjusted_rand_score(y, labels.numpy()))
        theirs.append(adjusted_rand_score(y, reference.labels_))
        assert inertia <= reference.inertia_ * 1.01
    assert abs(np.mean(ours) - np.mean(theirs)) <= 0.05, (ours, theirs)


def test_torch_silhouette_is_scikit_learns() -> None:
    from sklearn.metrics import silhouette_score

    from benchmarks.protocols.clustering import cosine_silhouette

    x, y, _, _ = digits_splits("cnn")
    expected = silhouette_score(x.astype(np.float64), y, metric="cosine")
    got = cosine_silhouette(torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y))
    assert got == pytest.approx(expected, abs=1e-9)
    y_single = y.copy()
    y_single[0] = 99  # a label with one point scores 0 there
    assert cosine_silhouette(torch.as_tensor(x, dtype=torch.float64),
                             torch.as_tensor(y_single)) == pytest.approx(
        silhouette_score(x.astype(np.float64), y_single, metric="cosine"), abs=1e-9)


def test_cluster_backend_is_checked() -> None:
    from benchmarks.protocols import cluster_scores

    with pytest.raises(ValueError, match="backend must be one of torch, sklearn, got 'faiss'"):
        cluster_scores(np.eye(4), [0, 0, 1, 1], backend="faiss")


def test_a_protocol_score_that_is_not_finite_is_a_note_not_a_metric(monkeypatch) -> None:
    """A silhouette of one-label features is nan: written as a metric, the result would be
    refused when read back and its seed trained again on every bench. It is said in the notes."""
    from types import SimpleNamespace

    import benchmarks.protocols.evaluate as evaluate
    from benchmarks.protocols.protocol import EvaluationInputs

    scores = SimpleNamespace(metrics={"silhouette": math.nan, "kmeans_ari": 0.5}, notes={},
                             figures={}, records={})
    nan_protocol = SimpleNamespace(automatic=False, needs=object, parse=lambda raw: raw,
                                   run=lambda settings, inputs: scores)
    monkeypatch.setattr(evaluate, "PROTOCOLS", {"cluster": nan_protocol})
    out = evaluate._evaluate(object(), {"cluster": {}},
                             EvaluationInputs(object(), None, 0), report=lambda line: None)
    assert out.metrics == {"kmeans_ari": 0.5}
    assert out.notes == {"silhouette": "not a finite number (nan): left out of the metrics"}
