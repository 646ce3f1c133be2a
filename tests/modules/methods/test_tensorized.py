"""Cluster-specific ("tensorized") models of arXiv:2412.03471: the objectives against naive float64
loops, the assignment mechanics on hand-made cases, inference by the arg-min loss, the paper's
parameter counts, every model's forward and loss on tiny data, and the suite's fast budget."""

from __future__ import annotations

import itertools
import math

import lightning.pytorch as pl
import pytest
import torch
import yaml
from repository import ROOT
from torch import nn

from datamodules import DATAMODULES
from modules.losses.tensorized import (
    assigned_loss,
    centred_reconstruction_losses,
    gaussian_kl,
    lloyd_centres,
    normalised_triplet_losses,
    rbm_free_energy,
    tvae_losses,
    tvae_reconstruction_losses,
)
from modules.methods import METHODS
from modules.methods.tensorized import (
    Autoencoder,
    ClusterLinear,
    PartiallyTensorizedAutoencoder,
    TensorizedAutoencoder,
    TensorizedContrastive,
    TensorizedRBM,
    TensorizedVAE,
)
from modules.methods.tensorized.base import kmeans_pp_initialisation
from modules.methods.tensorized.tcl import elastic_deform, sample_partner

# training_step called by hand, outside a Trainer, makes self.log warn.
pytestmark = pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")

TENSORIZED = ("tae", "ptae", "tvae", "tcl", "trbm")
GRID = list(itertools.product([1, 4], [1, 3], [2, 5]))  # batch, clusters, dimension


# -- the objectives against naive loops ------------------------------------------------------------
@pytest.mark.parametrize("batch, k, d", GRID)
def test_assigned_loss_is_the_s_weighted_sum_over_points_and_clusters(batch, k, d):
    torch.manual_seed(batch + k + d)
    losses = torch.rand(batch, k, dtype=torch.float64)
    assignment = torch.randint(0, k, (batch,))
    s = torch.zeros(k, batch, dtype=torch.float64)  # S is k x n, one-hot columns
    for i in range(batch):
        s[assignment[i], i] = 1.0
    expected = sum(s[j, i] * losses[i, j] for i in range(batch) for j in range(k)) / batch
    torch.testing.assert_close(assigned_loss(losses, assignment), expected)


@pytest.mark.parametrize("batch, k, d", GRID)
@pytest.mark.parametrize("penalty", [0.0, 0.3])
def test_centred_reconstruction_losses_match_a_loop(batch, k, d, penalty):
    torch.manual_seed(7)
    x_hat, x_tilde = torch.randn(2, batch, k, d, dtype=torch.float64)
    z = torch.randn(batch, k, 2, dtype=torch.float64)
    expected = torch.zeros(batch, k, dtype=torch.float64)
    for i, j in itertools.product(range(batch), range(k)):
        squared = sum((x_tilde[i, j, f] - x_hat[i, j, f]) ** 2 for f in range(d))
        expected[i, j] = squared / d + penalty * sum(z[i, j, m] ** 2 for m in range(2))
    torch.testing.assert_close(centred_reconstruction_losses(x_hat, x_tilde, z, penalty), expected)


def test_gaussian_kl_matches_torch_distributions():
    torch.manual_seed(0)
    mean, log_var = torch.randn(2, 6, 3, dtype=torch.float64)
    q = torch.distributions.Normal(mean, (0.5 * log_var).exp())
    p = torch.distributions.Normal(torch.zeros_like(mean), torch.ones_like(mean))
    expected = torch.distributions.kl_divergence(q, p).sum(-1)
    torch.testing.assert_close(gaussian_kl(mean, log_var), expected)


@pytest.mark.parametrize("batch, k, d", GRID)
@pytest.mark.parametrize("reconstruction", ["bce", "mse"])
def test_tvae_losses_are_reconstruction_plus_kl_by_a_loop(batch, k, d, reconstruction):
    torch.manual_seed(3)
    decoded = torch.randn(batch, k, d, dtype=torch.float64)
    target = torch.rand(batch, d, dtype=torch.float64)
    mean, log_var = torch.randn(2, batch, k, 2, dtype=torch.float64)
    expected = torch.zeros(batch, k, dtype=torch.float64)
    expected_rec = torch.zeros(batch, k, dtype=torch.float64)
    for i, j in itertools.product(range(batch), range(k)):
        rec = 0.0
        for f in range(d):
            o, t = decoded[i, j, f], target[i, f]
            p = 1 / (1 + math.exp(-float(o)))
            rec += (-(t * math.log(p) + (1 - t) * math.log(1 - p)) if reconstruction == "bce"
                    else 0.5 * (t - o) ** 2)
        kl = sum(0.5 * (math.exp(float(log_var[i, j, m])) + float(mean[i, j, m]) ** 2 - 1
                        - float(log_var[i, j, m])) for m in range(2))
        expected[i, j] = rec + kl
        expected_rec[i, j] = rec
    torch.testing.assert_close(tvae_losses(decoded, target, mean, log_var, reconstruction),
                               expected)
    torch.testing.assert_close(tvae_reconstruction_losses(decoded, target, reconstruction),
                               expected_rec)


@pytest.mark.parametrize("batch, k, d", GRID)
def test_normalised_triplet_loss_matches_a_loop_and_is_bounded_and_scale_free(batch, k, d):
    torch.manual_seed(5)
    z, z_pos, z_neg = 100 * torch.randn(3, batch, k, d, dtype=torch.float64)
    expected = torch.zeros(batch, k, dtype=torch.float64)
    for i, j in itertools.product(range(batch), range(k)):
        def cos(a, b):
            return sum(a[f] * b[f] for f in range(d)) / (
                math.sqrt(sum(a[f] ** 2 for f in range(d)))
                * math.sqrt(sum(b[f] ** 2 for f in range(d))))
        expected[i, j] = cos(z[i, j], z_neg[i, j]) - cos(z[i, j], z_pos[i, j])
    loss = normalised_triplet_losses(z, z_pos, z_neg)
    torch.testing.assert_close(loss, expected)
    # The paper's raw form can be driven down without end by scaling; this one cannot.
    assert bool((loss >= -2).all() and (loss <= 2).all())
    torch.testing.assert_close(normalised_triplet_losses(7 * z, 0.1 * z_pos, 3 * z_neg), loss)


@pytest.mark.parametrize("k, d, h", [(1, 2, 2), (2, 3, 3), (3, 2, 4)])
def test_rbm_free_energy_is_minus_log_sum_over_hidden_states(k, d, h):
    torch.manual_seed(11)
    weight = torch.randn(k, d, h, dtype=torch.float64)
    a, b = torch.randn(k, d, dtype=torch.float64), torch.randn(k, h, dtype=torch.float64)
    v = torch.rand(4, d, dtype=torch.float64)
    expected = torch.zeros(4, k, dtype=torch.float64)
    for i, j in itertools.product(range(4), range(k)):
        total = 0.0
        for bits in itertools.product([0.0, 1.0], repeat=h):  # every hidden configuration
            z = torch.tensor(bits, dtype=torch.float64)
            energy = -(v[i] @ a[j]) - (z @ b[j]) - (v[i] @ weight[j] @ z)
            total += math.exp(-float(energy))
        expected[i, j] = -math.log(total)
    torch.testing.assert_close(rbm_free_energy(v, weight, a, b), expected)
    per_cluster = v.unsqueeze(1).expand(-1, k, -1)  # (B, k, d): the chain's end, one per RBM
    torch.testing.assert_close(rbm_free_energy(per_cluster, weight, a, b), expected)


def test_lloyd_centres_are_the_means_of_assigned_points_and_empty_clusters_stay():
    torch.manual_seed(2)
    x = torch.randn(9, 3, dtype=torch.float64)
    assignment = torch.tensor([0, 0, 2, 2, 2, 0, 2, 0, 0])
    previous = torch.randn(4, 3, dtype=torch.float64)
    centres = lloyd_centres(x, assignment, previous)
    for j in range(4):
        members = [x[i] for i in range(9) if assignment[i] == j]
        expected = sum(members) / len(members) if members else previous[j]
        torch.testing.assert_close(centres[j], expected)


def test_cluster_linear_is_one_linear_map_per_cluster():
    torch.manual_seed(0)
    layer = ClusterLinear(3, 4, 2).double()
    shared, per_cluster = torch.randn(5, 4, dtype=torch.float64), torch.randn(5, 3, 4,
                                                                              dtype=torch.float64)
    for j in range(3):
        torch.testing.assert_close(layer(shared)[:, j], shared @ layer.weight[j] + layer.bias[j])
        torch.testing.assert_close(layer(per_cluster)[:, j],
                                   per_cluster[:, j] @ layer.weight[j] + layer.bias[j])


# -- assignment mechanics --------------------------------------------------------------------------
def two_lines_tae() -> TensorizedAutoencoder:
    """A linear TAE1 on R^2 whose cluster 0 reconstructs along e1 through c0 = (0, 0) and cluster
    1 along e2 through c1 = (3, 3): hand-set so that the right assignment is known."""
    tae = TensorizedAutoencoder(num_classes=2, input_shape=(2,), num_layers=1, penalty=0.0)
    encoder, decoder = tae.encoder[0], tae.decoder[0]
    with torch.no_grad():
        encoder.weight.copy_(torch.tensor([[[1.0], [0.0]], [[0.0], [1.0]]]))  # (k, d, h)
        decoder.weight.copy_(torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]]))  # (k, h, d)
        tae.centres.copy_(torch.tensor([[0.0, 0.0], [3.0, 3.0]]))
    tae.initialised.fill_(True)
    return tae


def test_lloyd_step_assigns_by_smallest_loss_not_distance_and_recomputes_centres():
    tae = two_lines_tae()
    x = torch.tensor([[-2.0, 0.1], [1.5, -0.1], [3.0, 1.0], [3.0, 5.0],
                      [3.0, -1.0]])  # the last lies on line 1 but is nearer c0 than c1
    assert torch.cdist(x[4:], tae.centres).argmin().item() == 0
    expected = torch.tensor([0, 0, 1, 1, 1])
    assignment = tae.lloyd_step(x)
    assert assignment.tolist() == expected.tolist()
    torch.testing.assert_close(tae.centres, torch.stack([x[:2].mean(0), x[2:].mean(0)]))
    assert int(tae.lloyd_steps) == 1


def test_before_the_first_lloyd_step_training_uses_the_kmeans_pp_assignment():
    tae = two_lines_tae()
    x = torch.tensor([[3.0, -1.0], [2.9, 3.2]])
    assert tae.current_assignment(x).tolist() == [0, 1]  # nearest centre
    tae.lloyd_steps.fill_(1)
    assert tae.current_assignment(x).tolist() == [1, 1]  # smallest loss


def test_kmeans_pp_initialisation_separates_well_separated_blobs_and_uses_their_means():
    torch.manual_seed(0)
    blobs = torch.cat([torch.randn(20, 2) * 0.1 + torch.tensor(c) for c in
                       ([0.0, 0.0], [10.0, 0.0], [0.0, 10.0])])
    truth = torch.arange(3).repeat_interleave(20)
    for seed in range(3):
        assignment, centres = kmeans_pp_initialisation(blobs, 3, seed)
        pairs = set(zip(truth.tolist(), assignment.tolist(), strict=True))
        assert len(pairs) == 3  # a one-to-one match of blobs and clusters
        for j in range(3):
            torch.testing.assert_close(centres[j], blobs[assignment == j].mean(0))


# -- inference by arg-min loss (eq. 2) -------------------------------------------------------------
def naive_centred_ae_losses(model, x: torch.Tensor) -> torch.Tensor:
    """The TAE/PTAE loss of every cluster by a loop over clusters, in float64."""
    model = model.double()
    x = x.double().flatten(1)
    losses = torch.zeros(len(x), model.n_clusters, dtype=torch.float64)
    embeddings = []
    for j in range(model.n_clusters):
        h = x - model.centres[j]
        target = h
        for layer in model.encoder:
            h = h @ layer.weight[j] if isinstance(layer, ClusterLinear) else layer(h)
        z = h
        for layer in model.decoder:
            h = h @ layer.weight[j] if isinstance(layer, ClusterLinear) else layer(h)
        losses[:, j] = ((h - target) ** 2).mean(1) + model.penalty * (z**2).sum(1)
        embeddings.append(z)
    return losses, torch.stack(embeddings, 1)


@pytest.mark.parametrize("cls", [TensorizedAutoencoder, PartiallyTensorizedAutoencoder])
def test_assign_is_the_argmin_of_per_cluster_losses_computed_by_a_loop(cls):
    torch.manual_seed(4)
    model = cls(num_classes=3, input_shape=(6,), hidden_dim=3, penalty=0.2)
    with torch.no_grad():
        model.centres.copy_(torch.randn(3, 6))
    x = torch.randn(16, 6)
    losses, embeddings = naive_centred_ae_losses(model, x)
    assert model.assign(x).tolist() == losses.argmin(1).tolist()
    rows = torch.arange(16)
    torch.testing.assert_close(model.encode(x), embeddings[rows, losses.argmin(1)])
    torch.testing.assert_close(model.assignment_losses(x), losses)


def test_tvae_assignment_losses_match_a_loop_with_torch_distributions():
    torch.manual_seed(6)
    model = TensorizedVAE(num_classes=2, input_shape=(1, 3, 3), hidden_dim=5).double()
    with torch.no_grad():
        model.centres.copy_(torch.randn(2, 9))
    x = torch.rand(7, 1, 3, 3, dtype=torch.float64)
    expected = torch.zeros(7, 2, dtype=torch.float64)
    for j in range(2):
        hidden = model.shared_encoder(x.flatten(1) - model.centres[j])
        mean = hidden @ model.mean.weight[j] + model.mean.bias[j]
        log_var = hidden @ model.log_var.weight[j] + model.log_var.bias[j]
        logits = model.shared_decoder(mean @ model.cluster_decoder.weight[j]
                                      + model.cluster_decoder.bias[j])
        target = x.flatten(1).clamp(0, 1)  # the scale is the identity before fitting
        bernoulli = torch.distributions.Bernoulli(logits=logits, validate_args=False)
        rec = -bernoulli.log_prob(target).sum(1)  # also valid for means in (0, 1)
        q = torch.distributions.Normal(mean, (0.5 * log_var).exp())
        kl = torch.distributions.kl_divergence(q, torch.distributions.Normal(0.0, 1.0)).sum(1)
        expected[:, j] = rec + kl
    torch.testing.assert_close(model.assignment_losses(x), expected)
    assert model.assign(x).tolist() == expected.argmin(1).tolist()


def test_cnn_tvae_shapes_on_28px_images_and_what_it_refuses():
    torch.manual_seed(0)
    model = TensorizedVAE(num_classes=3, input_shape=(1, 28, 28), hidden_dim=12, encoder="cnn")
    x = torch.rand(5, 1, 28, 28)
    mean, log_var = model.encode_all(x)
    assert mean.shape == log_var.shape == (5, 3, 2)
    assert model.decode_all(mean).shape == (5, 3, 784)
    assert model.decode(torch.zeros(4, 2), 2).shape == (4, 1, 28, 28)
    assert model.assignment_losses(x).shape == model.reconstruction_losses(x).shape == (5, 3)
    assert model.reconstruct(x).shape == x.shape
    convolutions = [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d))]
    assert [(m.in_channels, m.out_channels, m.stride) for m in convolutions] == [
        (1, 32, (2, 2)), (32, 64, (2, 2)), (64, 32, (2, 2)), (32, 1, (2, 2))]
    with pytest.raises(ValueError, match="unknown encoder 'rnn'"):
        TensorizedVAE(num_classes=2, input_shape=(1, 28, 28), encoder="rnn")
    with pytest.raises(ValueError, match="needs images"):
        TensorizedVAE(num_classes=2, input_shape=(64,), encoder="cnn")
    with pytest.raises(ValueError, match="divisible by 4"):
        TensorizedVAE(num_classes=2, input_shape=(1, 10, 10), encoder="cnn")


class PlainVAE(nn.Module):
    """A standard VAE (Kingma & Welling) around given shared encoder and decoder modules:
    ``mu, log_var = W_mu h + b, W_s h + b`` with ``h = encoder(x)``, ``x_hat = decoder(W_d z +
    b)``; its loss is the Bernoulli negative log-likelihood of the image plus the KL term."""

    def __init__(self, encoder: nn.Module, decoder: nn.Module, hidden: int, latent: int):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        self.to_mean, self.to_log_var = nn.Linear(hidden, latent), nn.Linear(hidden, latent)
        self.from_latent = nn.Linear(latent, hidden)

    def negative_elbo(self, x: torch.Tensor, target: torch.Tensor,
                      eps: torch.Tensor | None) -> torch.Tensor:
        h = self.encoder(x)
        mean, log_var = self.to_mean(h), self.to_log_var(h)
        z = mean if eps is None else mean + torch.exp(0.5 * log_var) * eps
        probabilities = torch.sigmoid(self.decoder(self.from_latent(z)))
        rec = -(target * torch.log(probabilities)
                + (1 - target) * torch.log(1 - probabilities)).sum(1)
        kl = -0.5 * (1 + log_var - mean**2 - torch.exp(log_var)).sum(1)
        return rec + kl  # (B,)


@pytest.mark.parametrize("encoder, shape", [("mlp", (1, 8, 8)), ("cnn", (1, 8, 8)),
                                            ("cnn", (1, 28, 28))])
def test_tvae_with_one_cluster_is_a_plain_vae_on_the_centred_data(encoder, shape):
    """k = 1: one centre, the data mean (k-means++ with one seed, then its points' mean), and the
    loss, assignment and training objective of a standard VAE on x - mean."""
    import copy

    torch.manual_seed(2)
    model = TensorizedVAE(num_classes=3, input_shape=shape, n_clusters=1, hidden_dim=6,
                          encoder=encoder).double()
    x = torch.rand(7, *shape, dtype=torch.float64)
    model.initialise_assignment(x, seed=0)
    torch.testing.assert_close(model.centres[0], x.flatten(1).mean(0))
    plain = PlainVAE(copy.deepcopy(model.shared_encoder), copy.deepcopy(model.shared_decoder),
                     6, 2).double()
    with torch.no_grad():
        for linear, cluster in ((plain.to_mean, model.mean), (plain.to_log_var, model.log_var),
                                (plain.from_latent, model.cluster_decoder)):
            linear.weight.copy_(cluster.weight[0].T)
            linear.bias.copy_(cluster.bias[0])
    centred, target = x.flatten(1) - x.flatten(1).mean(0), x.flatten(1)
    expected = plain.negative_elbo(centred, target, None)
    torch.testing.assert_close(model.assignment_losses(x)[:, 0], expected)
    assert model.assign(x).tolist() == [0] * 7
    torch.manual_seed(9)
    loss = model.objective([x], torch.zeros(7), torch.zeros(7, dtype=torch.long))
    torch.manual_seed(9)
    eps = torch.randn(7, 2, dtype=torch.float64)
    torch.testing.assert_close(loss, plain.negative_elbo(centred, target, eps).mean())


def test_trbm_assigns_each_point_to_the_rbm_that_reconstructs_it_best():
    torch.manual_seed(8)
    model = TensorizedRBM(num_classes=3, input_shape=(5,), hidden_dim=4).double()
    with torch.no_grad():
        model.weight.normal_()
        model.visible_bias.normal_()
    v = torch.rand(10, 5, dtype=torch.float64)
    expected = torch.zeros(10, 3, dtype=torch.float64)
    for j in range(3):
        hidden = torch.sigmoid(v @ model.weight[j] + model.hidden_bias[j])
        back = torch.sigmoid(hidden @ model.weight[j].T + model.visible_bias[j])
        expected[:, j] = ((back - v) ** 2).mean(1)
    torch.testing.assert_close(model.assignment_losses(v), expected)
    assert model.assign(v).tolist() == expected.argmin(1).tolist()


def test_tcl_assignment_loss_averages_the_triplet_term_over_the_other_centres():
    torch.manual_seed(9)
    model = TensorizedContrastive(num_classes=3, input_shape=(1, 6, 6), embedding_dim=4,
                                  channels=(2, 3)).double()
    with torch.no_grad():
        model.centres.copy_(torch.rand(3, 36))
    x = torch.rand(5, 1, 6, 6, dtype=torch.float64)
    positive = elastic_deform(x, model.elastic_alpha, model.elastic_sigma,
                              torch.Generator().manual_seed(model.assignment_seed))
    expected = torch.zeros(5, 3, dtype=torch.float64)
    for j in range(3):
        def embed(images, j=j):
            return model.shared_encoder(images) @ model.head.weight[j] + model.head.bias[j]
        z, z_pos = embed(x), embed(positive)
        for m in range(3):
            if m != j:
                z_c = embed(model.centres[m].view(1, 1, 6, 6)).expand_as(z)
                expected[:, j] += (torch.cosine_similarity(z, z_c, dim=1)
                                   - torch.cosine_similarity(z, z_pos, dim=1)) / 2
    torch.testing.assert_close(model.assignment_losses(x), expected)
    assert model.assign(x).tolist() == expected.argmin(1).tolist()


# -- parameter counts ------------------------------------------------------------------------------
@pytest.mark.parametrize("d, c", [(5, 2), (6, 3), (4, 3), (64, 5), (784, 5)])
def test_parameter_counts_are_the_papers_and_ae3_equals_ptae(d, c):
    def count(model):
        return sum(p.numel() for p in model.parameters())

    shape = (d,)
    ae1 = Autoencoder(num_classes=c, input_shape=shape, num_layers=1)
    ae2 = Autoencoder(num_classes=c, input_shape=shape)
    ae3 = Autoencoder(num_classes=c, input_shape=shape, embedding_dim=c)
    tae1 = TensorizedAutoencoder(num_classes=c, input_shape=shape, num_layers=1)
    tae2 = TensorizedAutoencoder(num_classes=c, input_shape=shape)
    ptae = PartiallyTensorizedAutoencoder(num_classes=c, input_shape=shape)
    assert count(ae3) == count(ptae)  # "AE3 and PTAE has the same model complexity"
    # Bias-free linear layers, as the authors' notebook counts them.
    assert [count(m) for m in (ae1, ae2, ae3, tae1, tae2, ptae)] == [
        2 * d, 4 * d + 4, 4 * d + 4 * c, 2 * d * c, c * (4 * d + 4), 4 * d + 4 * c]


def test_parameter_counts_printed_in_the_authors_notebook():
    # exp_tensor_ae.ipynb prints these for lines_3D (d=6, C=3) and MNIST (d=784, C=5).
    for d, c, printed in ((6, 3, [12, 28, 36, 36, 84, 36]),
                          (784, 5, [1568, 3140, 3156, 7840, 15700, 3156])):
        models = [Autoencoder(num_classes=c, input_shape=(d,), num_layers=1),
                  Autoencoder(num_classes=c, input_shape=(d,)),
                  Autoencoder(num_classes=c, input_shape=(d,), embedding_dim=c),
                  TensorizedAutoencoder(num_classes=c, input_shape=(d,), num_layers=1),
                  TensorizedAutoencoder(num_classes=c, input_shape=(d,)),
                  PartiallyTensorizedAutoencoder(num_classes=c, input_shape=(d,))]
        assert [sum(p.numel() for p in m.parameters()) for m in models] == printed


def test_ptae_shares_everything_but_the_embedding_layer_and_its_mirror():
    ptae = PartiallyTensorizedAutoencoder(num_classes=4, input_shape=(10,), num_layers=3,
                                          hidden_dim=5)
    kinds = [type(m) for m in (*ptae.encoder, *ptae.decoder) if not isinstance(m, nn.Identity)]
    assert kinds == [nn.Linear, nn.Linear, ClusterLinear, ClusterLinear, nn.Linear, nn.Linear]
    with pytest.raises(ValueError, match="needs num_layers >= 2"):
        PartiallyTensorizedAutoencoder(num_classes=2, input_shape=(4,), num_layers=1)


# -- every model on tiny data ----------------------------------------------------------------------
def tiny_model(name: str, k: int = 3):
    """A tiny model of a registered method; ``"tvae_cnn"``: the TVAE with the CNN encoder."""
    kwargs = {"tvae": {"hidden_dim": 8}, "tvae_cnn": {"hidden_dim": 8, "encoder": "cnn"},
              "tcl": {"embedding_dim": 8, "channels": (2, 4)},
              "trbm": {"hidden_dim": 6}}.get(name, {})
    return METHODS[name.removesuffix("_cnn")](num_classes=k, input_shape=(1, 8, 8), **kwargs)


@pytest.mark.parametrize("name", ["ae", *TENSORIZED, "tvae_cnn"])
def test_forward_and_loss_on_tiny_data(name):
    torch.manual_seed(0)
    model = tiny_model(name)
    x, labels = torch.rand(12, 1, 8, 8), torch.arange(12) % 3
    if name != "ae":
        assignment = model.initialise_assignment(x, seed=0)
        assert assignment.shape == (12,) and int(assignment.max()) < 3
    loss = model.training_step(([x, x.clone()], labels), 0)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
    z = model.encode(x)
    assert z.dim() == 2 and z.shape[0] == 12 and torch.isfinite(z).all()
    if name != "ae":
        s = model.assign(x)
        assert s.shape == (12,) and bool(((s >= 0) & (s < 3)).all())
        assert model.assignment_losses(x).shape == (12, 3)


def test_supervised_tcl_pairs_positives_within_and_negatives_across_classes():
    torch.manual_seed(0)
    model = tiny_model("tcl")
    model.supervised = True
    model.initialise_assignment(torch.rand(6, 1, 8, 8), seed=0)
    x, labels = torch.rand(6, 1, 8, 8), torch.tensor([0, 0, 1, 1, 2, 2])
    loss = model.training_step(([x], labels), 0)
    assert torch.isfinite(loss)
    partners = sample_partner(labels.unsqueeze(1) == labels.unsqueeze(0))
    assert (labels[partners] == labels).all() and (partners != torch.arange(6)).all()
    negatives = sample_partner(labels.unsqueeze(1) != labels.unsqueeze(0))
    assert (labels[negatives] != labels).all()


def test_elastic_deformation_is_reproducible_small_and_keeps_constant_images():
    x = torch.rand(4, 1, 8, 8)
    first = elastic_deform(x, 3.0, 1.0, torch.Generator().manual_seed(1))
    again = elastic_deform(x, 3.0, 1.0, torch.Generator().manual_seed(1))
    torch.testing.assert_close(first, again)
    assert not torch.allclose(first, x)
    flat = torch.full((2, 1, 8, 8), 0.3)
    torch.testing.assert_close(elastic_deform(flat, 5.0, 1.0), flat)


@pytest.mark.parametrize("name", ["ae", *TENSORIZED, "tvae_cnn"])
def test_a_short_fit_logs_the_assignment_and_the_tune_metrics(name, tmp_path):
    torch.manual_seed(0)
    dm = DATAMODULES["digits"](classes=[0, 1, 2], limit_per_class=12, batch_size=16, n_views=1,
                               augmentation="none", val_fraction=0.25)
    model = tiny_model(name)
    trainer = pl.Trainer(max_epochs=2, logger=False, enable_progress_bar=False,
                         enable_checkpointing=False, enable_model_summary=False,
                         default_root_dir=tmp_path, accelerator="cpu", num_sanity_val_steps=0)
    trainer.fit(model, datamodule=dm)
    metrics = trainer.callback_metrics
    assert torch.isfinite(metrics["val_loss"]) and -1.0 <= float(metrics["val_ari"]) <= 1.0
    if name != "ae":
        assert -1.0 <= float(metrics["train_assignment_ari"]) <= 1.0
        # the k-means++ assignment, then one per epoch, over the whole training split
        assert len(model.assignment_log) == 3
        assert {len(s) for s in model.assignment_log} == {dm.split_sizes()["train"]}
        assert int(model.lloyd_steps) == 2


@pytest.mark.parametrize("name", ["ae", *TENSORIZED])
def test_hparams_record_exactly_the_constructor_arguments(name):
    from benchmarks.run.spec import init_parameters

    model = tiny_model(name)
    assert set(model.hparams) == init_parameters(METHODS[name], set())
    rebuilt = METHODS[name](**model.hparams)  # what load_from_checkpoint does
    assert sum(p.numel() for p in rebuilt.parameters()) == sum(
        p.numel() for p in model.parameters())


@pytest.mark.slow
def test_tae_recovers_the_parallel_lines_that_kmeans_misses(tmp_path):
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    dm = DATAMODULES["parallel_lines"](seed=0, batch_size=32, n_views=1, augmentation="none")
    pl.seed_everything(0, verbose=False)
    model = TensorizedAutoencoder(num_classes=2, input_shape=(5,))
    pl.Trainer(max_epochs=150, logger=False, enable_progress_bar=False,
               enable_checkpointing=False, enable_model_summary=False, default_root_dir=tmp_path,
               accelerator="cpu", num_sanity_val_steps=0).fit(model, datamodule=dm)
    x, y = zip(*dm.train_eval_dataloader(), strict=True)
    x, y = torch.cat(x), torch.cat(y)
    kmeans = KMeans(n_clusters=2, n_init=10, random_state=0).fit_predict(x.numpy())
    assert adjusted_rand_score(y, kmeans) < 0.5  # the Simpson's-paradox set defeats k-means
    assert adjusted_rand_score(y, model.train_assignment) > 0.9


# -- the suite -------------------------------------------------------------------------------------
def merged(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(
            out.get(key), dict) else value
    return out


def test_suite_fast_budget_returns_the_tables_figures_and_notes():
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    from benchmarks.experiments.tensorized import run

    suite = yaml.safe_load((ROOT / "benchmarks" / "tensorized.yaml")
                           .read_text())
    assert suite["kind"] == "experiment" and len(suite["seeds"]) >= 5
    settings = merged(suite["settings"], suite["fast"].get("settings", {}))
    out = run(seeds=suite["fast"]["seeds"], **settings)
    table = out.tables["Figure 2/7: clustering and de-noising"]
    datasets = {row["dataset"] for row in table}
    assert len(datasets) == len(settings["datasets"])
    for row in table:
        assert row["seeds"] == len(suite["fast"]["seeds"])
        assert -1.0 <= row["ARI train mean"] <= 1.0
    params = {(r["dataset"], r["model"]): r["parameters"] for r in table}
    for dataset in datasets:
        assert (params[(dataset, "k-means on AE3 embedding")]
                == params[(dataset, "PTAE assignment")])
    # The k-means row is k-means on the raw training split, as an independent run computes it.
    first = settings["datasets"][0]
    dm = DATAMODULES[first](seed=suite["fast"]["seeds"][0], batch_size=32, n_views=1,
                            augmentation="none", val_fraction=0.1)
    x, y = zip(*dm.train_eval_dataloader(), strict=True)
    x, y = torch.cat(x).numpy(), torch.cat(y).numpy()
    expected = adjusted_rand_score(y, KMeans(n_clusters=dm.num_classes, n_init=10,
                                             random_state=suite["fast"]["seeds"][0])
                                   .fit_predict(x))
    row = next(r for r in table if r["dataset"] == first and r["model"] == "k-means (raw data)")
    assert row["ARI train mean"] == pytest.approx(expected)
    assert out.figures and all(png[:8] == b"\x89PNG\r\n\x1a\n" for png in out.figures.values())
    assert any("orderings" in note for note in out.notes)


def fashion_only_settings(suite: dict) -> dict:
    """The suite's fast settings with every part but Figure 10's switched off."""
    settings = merged(suite["settings"], suite["fast"]["settings"])
    settings.update({"datasets": [], "tvae": None, "underestimated": None, "tcl": None,
                     "trbm": None})
    return settings


def test_fashion_part_fast_budget_on_tiny_fashion_mnist_files(tmp_path, monkeypatch):
    """Figure 10's part on Fashion-MNIST files written in the real idx format (their md5s
    expected): the VAE and TVAE rows with the data's provenance and source, the latent-space
    figure and the notes."""
    from sample_data import set_checksums

    from benchmarks.experiments.tensorized import run
    from datamodules.sample_files import write_mnist

    write_mnist(tmp_path, "FashionMNIST", seed=3, n_train=100, n_test=30)
    set_checksums(monkeypatch, tmp_path)
    monkeypatch.setenv("CLUSTERBENCH_DATA", str(tmp_path))
    suite = yaml.safe_load((ROOT / "benchmarks" / "tensorized.yaml")
                           .read_text())
    part = suite["settings"]["tvae_fashion"]
    assert part["dataset"] == "fashionmnist" and part["encoder"] == "cnn"
    assert part["reconstruction"] == "bce" and len(part["classes"]) == 3
    out = run(seeds=suite["fast"]["seeds"], **fashion_only_settings(suite))
    rows = out.tables["Figure 10: VAE vs TVAE on fashionmnist"]
    assert [row["model"] for row in rows] == ["VAE (k=1)", "TVAE (k=3)"]
    for row in rows:
        assert row["provenance"] == "real" and row["encoder"] == "cnn"
        assert "md5-verified official files" in row["source"] and str(tmp_path) in row["source"]
        # 10 images a class in the files, 3 classes, 10% held out for validation
        assert row["n_train / n_test"] == "27 / 9"
        assert -1.0 <= row["assignment ARI test mean"] <= 1.0
        assert 0 < row["test reconstruction BCE mean"] <= row["test negative ELBO mean"]
    assert out.figures["tvae-fashion-latent-spaces.png"][:8] == b"\x89PNG\r\n\x1a\n"
    assert any(note.startswith("TVAE (Figure 10, fashionmnist") for note in out.notes)
    assert any("names neither its three classes nor its CNN" in note for note in out.notes)


def test_fashion_part_is_skipped_with_one_line_when_its_files_are_missing(tmp_path,
                                                                          monkeypatch):
    from benchmarks.experiments.tensorized import run

    monkeypatch.setenv("CLUSTERBENCH_DATA", str(tmp_path))  # no FashionMNIST folder there
    suite = yaml.safe_load((ROOT / "benchmarks" / "tensorized.yaml")
                           .read_text())
    out = run(seeds=suite["fast"]["seeds"], **fashion_only_settings(suite))
    assert not out.tables and not out.figures
    (note,) = [note for note in out.notes if "Figure 10" in note]
    assert note.startswith("Figure 10: VAE vs TVAE on fashionmnist: skipped, Fashion-MNIST not "
                           "found") and "\n" not in note


@pytest.mark.slow
def test_worker_processes_do_not_change_the_numbers():
    from benchmarks.experiments.tensorized import run

    suite = yaml.safe_load((ROOT / "benchmarks" / "tensorized.yaml")
                           .read_text())
    settings = merged(suite["settings"], suite["fast"]["settings"])
    settings.update({"datasets": ["iris"], "epochs": 2, "limit_per_class": 10, "tvae": None,
                     "tvae_fashion": None, "underestimated": None, "tcl": None,
                     "trbm": {**settings["trbm"], "epochs": 1, "hidden_dim": 4}})
    here = run(seeds=[0, 1], **{**settings, "workers": 1})
    pooled = run(seeds=[0, 1], **{**settings, "workers": 2})
    for title in here.tables:
        for a, b in zip(here.tables[title], pooled.tables[title], strict=True):
            assert {k: v for k, v in a.items() if "ms per epoch" not in k} == {
                k: v for k, v in b.items() if "ms per epoch" not in k}


# -- the training losses of TCL and TRBM against naive per-sample loops ---------------------------
def naive_nearest_centre(x: torch.Tensor, centres: torch.Tensor) -> list[int]:
    """Index of the Euclidean-nearest centre of every flattened point, by a loop."""
    points, cs = x.flatten(1).tolist(), centres.tolist()
    return [min(range(len(cs)), key=lambda j, p=p: sum((a - b) ** 2 for a, b in zip(p, cs[j],
                                                                                    strict=True)))
            for p in points]


def naive_cosine(a: list[float], b: list[float]) -> float:
    dot = sum(p * q for p, q in zip(a, b, strict=True))
    return dot / math.sqrt(sum(p * p for p in a) * sum(q * q for q in b))


@torch.no_grad()
def naive_tcl_embedding(model, image: torch.Tensor, j: int) -> list[float]:
    """z_j = g_Psi_j(g_Omega(x)) of one image: the shared convolutions, then cluster j's linear
    head written out as a loop over features."""
    features = model.shared_encoder(image.unsqueeze(0))[0].tolist()
    weight, bias = model.head.weight[j].tolist(), model.head.bias[j].tolist()
    return [sum(features[f] * weight[f][o] for f in range(len(features))) + bias[o]
            for o in range(len(bias))]


def naive_tcl_loss(model, x, positives, negatives, assignment) -> float:
    r"""(1/n) sum_i [cos(z_{i,s_i}, z^-_{i,s_i}) - cos(z_{i,s_i}, z^+_{i,s_i})], every term
    under the anchor's cluster head s_i; ``positives`` and ``negatives`` are images."""
    total = 0.0
    for i in range(len(x)):
        j = int(assignment[i])
        z = naive_tcl_embedding(model, x[i], j)
        z_pos = naive_tcl_embedding(model, positives[i], j)
        z_neg = naive_tcl_embedding(model, negatives[i], j)
        total += naive_cosine(z, z_neg) - naive_cosine(z, z_pos)
    return total / len(x)


def recorded_tcl_step(model, x, labels, monkeypatch, positive_seed: int):
    """One ``training_step`` with the partner draws recorded (the real sampler) and the elastic
    positives drawn from a seeded generator. Returns the loss and the (valid, partner) calls."""
    import modules.methods.tensorized.tcl as tcl_module

    calls = []

    def recording_sample_partner(valid, generator=None):
        partner = sample_partner(valid, generator)
        calls.append((valid.clone(), partner.clone()))
        return partner

    real_positive = model.positive

    def seeded_positive(images, generator=None):
        if generator is not None:  # the assignment loss's own seeded positives
            return real_positive(images, generator)
        return real_positive(images, torch.Generator().manual_seed(positive_seed))

    monkeypatch.setattr(tcl_module, "sample_partner", recording_sample_partner)
    monkeypatch.setattr(model, "positive", seeded_positive)
    loss = model.training_step(([x], labels), 0)
    return loss, calls


def tcl_batch(k: int, n: int, seed: int):
    """A double-precision TCL with N(0, 1) parameters and n normalised 8x8 images near its k
    centres: x_i near c_{i mod k}."""
    torch.manual_seed(seed)
    model = TensorizedContrastive(num_classes=4, input_shape=(1, 8, 8), n_clusters=k,
                                  embedding_dim=6, channels=(2, 4)).double()
    centres = torch.randn(k, 64, dtype=torch.float64)
    with torch.no_grad():  # spread-out embeddings, so that the cosines differ visibly
        for p in model.parameters():
            p.normal_()
        model.centres.copy_(centres)
    model.initialised.fill_(True)
    x = centres[torch.arange(n) % k] + 0.3 * torch.randn(n, 64, dtype=torch.float64)
    return model, x.view(n, 1, 8, 8)


@pytest.mark.parametrize("k, lloyd_steps", [(3, 0), (3, 1), (1, 0)])
def test_unsupervised_tcl_loss_matches_a_per_sample_loop_with_other_cluster_negatives(
        k, lloyd_steps, monkeypatch):
    for seed in range(3):
        model, x = tcl_batch(k, 9, seed)
        model.lloyd_steps.fill_(lloyd_steps)
        labels = torch.zeros(9, dtype=torch.long)  # unused without supervision
        loss, calls = recorded_tcl_step(model, x, labels, monkeypatch, positive_seed=seed + 10)
        # The model's current assignment: nearest centre before a Lloyd step, arg-min after.
        if lloyd_steps == 0:
            assignment = naive_nearest_centre(x, model.centres)
            assert assignment == [i % k for i in range(9)]
        else:
            assignment = model.assignment_losses(x).argmin(1).tolist()
        assert len(calls) == 1  # the negatives; the positive is the elastic deformation
        negatives = calls[0][1].tolist()
        for i, m in enumerate(negatives):
            assert m != i
            if any(assignment[o] != assignment[i] for o in range(9)):
                assert assignment[m] != assignment[i]  # a different current cluster
        positives = elastic_deform(x, model.elastic_alpha, model.elastic_sigma,
                                   torch.Generator().manual_seed(seed + 10))
        assert (positives - x).abs().max() > 1e-3  # a real deformation, not the anchor
        negative_images = [x[m] for m in negatives]
        expected = naive_tcl_loss(model, x, positives, negative_images, assignment)
        assert loss.item() == pytest.approx(expected, abs=1e-6)
        if k > 1:  # the head matters: the anchor's own cluster, not another one
            other = [(s + 1) % k for s in assignment]
            wrong_head = naive_tcl_loss(model, x, positives, negative_images, other)
            assert abs(wrong_head - expected) > 1e-3
        monkeypatch.undo()


def test_supervised_tcl_loss_matches_a_per_sample_loop_with_label_partners(monkeypatch):
    labels = torch.tensor([0, 0, 1, 1, 1, 2, 2, 0, 3])  # class 3 alone: the elastic fallback
    for seed in range(3):
        model, x = tcl_batch(3, 9, seed)
        model.supervised = True
        loss, calls = recorded_tcl_step(model, x, labels, monkeypatch, positive_seed=seed + 20)
        assignment = naive_nearest_centre(x, model.centres)  # heads follow S, not the labels
        assert assignment == [i % 3 for i in range(9)]
        assert len(calls) == 2  # one draw of positives, one of negatives

        def same_label_only(valid):
            return all(labels[i] == labels[m] for i, m in valid.nonzero().tolist())

        positive_draws = [p for v, p in calls if v.any() and same_label_only(v)]
        assert len(positive_draws) == 1, "the positives must be drawn among same-label points"
        positive_call, negative_call = positive_draws[0], next(
            p for _, p in calls if p is not positive_draws[0])
        elastic = elastic_deform(x, model.elastic_alpha, model.elastic_sigma,
                                 torch.Generator().manual_seed(seed + 20))
        positives = []
        for i in range(9):
            if any(labels[m] == labels[i] for m in range(9) if m != i):
                m = int(positive_call[i])
                assert m != i and labels[m] == labels[i]  # another instance of its class
                positives.append(x[m])
            else:
                positives.append(elastic[i])
            assert labels[int(negative_call[i])] != labels[i]  # another class
        negatives = [x[m] for m in negative_call.tolist()]
        expected = naive_tcl_loss(model, x, positives, negatives, assignment)
        assert loss.item() == pytest.approx(expected, abs=1e-6)
        # Positives and negatives swapped: a different loss, so the comparison can fail.
        swapped = naive_tcl_loss(model, x, negatives, positives, assignment)
        assert abs(swapped - loss.item()) > 1e-3
        monkeypatch.undo()


class ThresholdBernoulli:
    """``torch.bernoulli`` replaced by a threshold of fixed uniforms, ``[u < p]``, the uniforms
    drawn from a seeded generator and kept so a naive loop can draw the same samples."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)
        self.uniforms: list[torch.Tensor] = []

    def __call__(self, probs, *args, **kwargs):
        assert not args and not kwargs
        u = torch.rand(probs.shape, generator=self.generator, dtype=probs.dtype)
        self.uniforms.append(u)
        return (u < probs).to(probs.dtype)


def trbm_batch(k: int, n: int, seed: int, cd_steps: int):
    """A double-precision TRBM on 4x4 images with random parameters, a non-identity input scale,
    and n points near its k centres (x_i near c_{i mod k})."""
    torch.manual_seed(seed)
    model = TensorizedRBM(num_classes=k, input_shape=(1, 4, 4), hidden_dim=5,
                          cd_steps=cd_steps).double()
    with torch.no_grad():
        model.weight.normal_(0.0, 0.7)
        model.visible_bias.normal_()
        model.hidden_bias.normal_()
        model.scale.load_from(torch.full((1, 1, 1), 0.3), torch.full((1, 1, 1), 0.4))
        model.centres.copy_(torch.randn(k, 16, dtype=torch.float64))
    model.initialised.fill_(True)
    x = model.centres[torch.arange(n) % k] + 0.05 * torch.randn(n, 16, dtype=torch.float64)
    return model, x.view(n, 1, 4, 4)


def naive_trbm_cd(model, x, assignment, uniforms):
    """CD-k by a loop over samples, each with its assigned RBM j = s_i: v0 the image in [0, 1],
    z ~ P(z | v) by the thresholds [u < p], v <- P(v = 1 | z), k times; returns the loss
    (1/n) sum_i F_j(v0_i) - F_j(vk_i) and its textbook gradients (dW, da, db) per cluster."""
    k, d, h = model.weight.shape
    n = len(x)
    mean, std = model.scale.mean.flatten().tolist(), model.scale.std.flatten().tolist()
    images = x.flatten(1).tolist()

    def sigmoid(t):
        return 1.0 / (1.0 + math.exp(-t))

    loss = 0.0
    grad_w = [[[0.0] * h for _ in range(d)] for _ in range(k)]
    grad_a, grad_b = [[0.0] * d for _ in range(k)], [[0.0] * h for _ in range(k)]
    for i in range(n):
        j = int(assignment[i])
        w, a, b = (model.weight[j].tolist(), model.visible_bias[j].tolist(),
                   model.hidden_bias[j].tolist())

        def pre_hidden(v, w=w, b=b):
            return [b[m] + sum(v[f] * w[f][m] for f in range(d)) for m in range(h)]

        def free_energy(v, a=a, pre_hidden=pre_hidden):
            return (-sum(v[f] * a[f] for f in range(d))
                    - sum(math.log1p(math.exp(t)) for t in pre_hidden(v)))

        v0 = [min(max(images[i][f] * std[f] + mean[f], 0.0), 1.0) for f in range(d)]
        z = [1.0 if uniforms[0][i, j, m] < sigmoid(t) else 0.0
             for m, t in enumerate(pre_hidden(v0))]
        for step in range(model.cd_steps):
            v = [sigmoid(a[f] + sum(w[f][m] * z[m] for m in range(h))) for f in range(d)]
            if step < model.cd_steps - 1:
                z = [1.0 if uniforms[step + 1][i, j, m] < sigmoid(t) else 0.0
                     for m, t in enumerate(pre_hidden(v))]
        loss += (free_energy(v0) - free_energy(v)) / n
        # d/dtheta [F(v0) - F(vk)], vk fixed: -<v h>_data + <v h>_model, h = P(z = 1 | v).
        h0 = [sigmoid(t) for t in pre_hidden(v0)]
        hk = [sigmoid(t) for t in pre_hidden(v)]
        for f in range(d):
            grad_a[j][f] += (v[f] - v0[f]) / n
            for m in range(h):
                grad_w[j][f][m] += (v[f] * hk[m] - v0[f] * h0[m]) / n
        for m in range(h):
            grad_b[j][m] += (hk[m] - h0[m]) / n
    return loss, tuple(torch.tensor(g, dtype=torch.float64) for g in (grad_w, grad_a, grad_b))


@pytest.mark.parametrize("cd_steps, lloyd_steps", [(1, 0), (1, 1), (3, 0)])
def test_trbm_cd_loss_and_gradient_match_a_per_sample_loop(cd_steps, lloyd_steps, monkeypatch):
    model, x = trbm_batch(3, 8, seed=cd_steps + lloyd_steps, cd_steps=cd_steps)
    model.lloyd_steps.fill_(lloyd_steps)
    if lloyd_steps == 0:
        assignment = naive_nearest_centre(x, model.centres)
        assert assignment == [i % 3 for i in range(8)]
    else:
        assignment = model.assign(x).tolist()
    bernoulli = ThresholdBernoulli(seed=5)
    monkeypatch.setattr(torch, "bernoulli", bernoulli)
    loss = model.training_step(([x], torch.zeros(8, dtype=torch.long)), 0)
    monkeypatch.undo()
    assert len(bernoulli.uniforms) == cd_steps  # one hidden sample per Gibbs step
    loss.backward()
    expected, grads = naive_trbm_cd(model, x, assignment, bernoulli.uniforms)
    assert abs(expected) > 1e-2  # the free energies of data and chain end differ
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    for param, grad in zip((model.weight, model.visible_bias, model.hidden_bias), grads,
                           strict=True):
        assert grad.abs().max() > 1e-3
        torch.testing.assert_close(param.grad, grad, rtol=0, atol=1e-6)
    # Another RBM per sample gives another loss, so the comparison can fail.
    other = [(s + 1) % 3 for s in assignment]
    assert abs(naive_trbm_cd(model, x, other, bernoulli.uniforms)[0] - expected) > 1e-3
