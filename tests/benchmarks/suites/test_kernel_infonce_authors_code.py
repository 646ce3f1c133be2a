"""kernel_infonce_table1 against the Kernel-InfoNCE authors' released code (Tan, Zhang, Yang,
Yuan, "Contrastive Learning is Spectral Clustering on Similarity Graph", ICLR 2024,
arXiv:2303.15103): its temperatures mean the authors' tau, its projector and validation split
are theirs.

The authors compute every loss of Table 1 as one kernel loss on unit vectors: anchor k's term is
-log(exp(-||z_k - z_p||^gamma / tau) / sum_{j != k} exp(-||z_k - z_j||^gamma / tau)), InfoNCE
being gamma = 2. :func:`authors_loss` writes that formula as float64 loops, sharing no code with
the suite's losses.
"""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks.suites.config import load_suite
from modules.methods import METHODS

TABLE1 = "kernel_infonce_table1"


def authors_loss(z1: torch.Tensor, z2: torch.Tensor, gamma: float, tau: float) -> float:
    """The authors' kernel loss, by loops in float64 on the L2-normalised rows of both views."""
    rows = [r / math.sqrt(sum(float(v) ** 2 for v in r)) for r in torch.cat([z1, z2]).double()]
    n = len(z1)

    def kernel(a, b) -> float:
        distance = math.sqrt(sum((float(x) - float(y)) ** 2 for x, y in zip(a, b, strict=True)))
        return math.exp(-distance ** gamma / tau)

    total = 0.0
    for k in range(2 * n):
        positive = kernel(rows[k], rows[(k + n) % (2 * n)])
        others = sum(kernel(rows[k], rows[j]) for j in range(2 * n) if j != k)
        total += -math.log(positive / others)
    return total / (2 * n)


def criterion_of(run):
    """The loss the run's SimCLR module trains with (its settings, a tiny backbone)."""
    model = {**run.model, "backbone": "small_cnn", "backbone_width": 4}
    model = {k: v for k, v in model.items() if k not in ("cifar_stem", "channels_last")}
    return METHODS[run.method](num_classes=10, input_shape=(1, 8, 8), **model)


@pytest.fixture(scope="module")
def embeddings():
    generator = torch.Generator().manual_seed(0)
    return torch.randn(6, 5, generator=generator), torch.randn(6, 5, generator=generator)


def test_nt_xent_temperature_is_half_the_authors_tau(embeddings):
    """Table 1's tau is the authors' distance temperature: the NT-Xent row at cosine temperature
    t trains the authors' gamma = 2 loss at tau = 2t; the kernel rows take tau as it is."""
    z1, z2 = embeddings
    suite = load_suite(TABLE1)
    nt_xent = suite.run("cifar10/nt_xent/400ep")
    module = criterion_of(nt_xent)
    t = nt_xent.model["temperature"]
    assert float(module.criterion(z1, z2)) == pytest.approx(authors_loss(z1, z2, 2.0, 2 * t),
                                                            rel=1e-5)
    laplacian = criterion_of(suite.run("cifar10/laplacian/400ep"))
    tau = suite.run("cifar10/laplacian/400ep").model["temperature"]
    assert float(laplacian.criterion(z1, z2)) == pytest.approx(authors_loss(z1, z2, 1.0, tau),
                                                               rel=1e-5)
    exponential = suite.run("cifar10/exponential/400ep")
    assert float(criterion_of(exponential).criterion(z1, z2)) == pytest.approx(
        authors_loss(z1, z2, exponential.model["gamma"], exponential.model["temperature"]),
        rel=1e-5)


def test_every_row_searches_the_authors_tau_range():
    """The authors' random_search.py draws tau loguniform on [1e-2, 1]: the kernel rows search
    that, the NT-Xent rows its half (their cosine temperature)."""
    suite = load_suite(TABLE1)
    for run in suite.runs:
        space = run.search
        if run.model["loss"] == "nt_xent":
            assert space["model.temperature"] == {"loguniform": [5e-3, 0.5]}, run.name
        elif "model.temperature" in space:
            assert space["model.temperature"] == {"loguniform": [1e-2, 1.0]}, run.name
        else:
            assert space["model.tau1"] == space["model.tau2"] == {"loguniform": [1e-2, 1.0]}


def test_table1_projector_ends_without_a_bias_as_bolts_projection():
    suite = load_suite(TABLE1)
    for name in ("cifar10/nt_xent/200ep", "tinyimagenet/concat_sum/400ep"):
        projector = criterion_of(suite.run(name)).projector
        linears = [m for m in projector if isinstance(m, torch.nn.Linear)]
        assert len(linears) == 2 and all(m.bias is None for m in linears), name
    # other suites keep the default: a bias on the last layer
    smoke = load_suite("smoke").run("simclr")
    assert criterion_of(smoke).projector[-1].bias is not None


def test_table1_holds_out_the_authors_validation_share():
    """5,000 of CIFAR's 50,000 training images (Bolts' val_split), 10% of TinyImageNet's."""
    for run in load_suite(TABLE1).runs:
        assert run.data["val_fraction"] == 0.1, run.name
