"""Cluster-specific ("tensorized") models of arXiv:2412.03471: the objectives against naive float64
loops, the assignment mechanics on hand-made cases, inference by the arg-min loss, the paper's
parameter counts, every model's forward and loss on tiny data, and the suite's fast budget."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
import yaml
from torch import nn

from datamodules import DATAMODULES
from modules import METHODS
from modules.tensorized import (
    Autoencoder,
    ClusterLinear,
    PartiallyTensorizedAutoencoder,
    TensorizedAutoencoder,
    TensorizedContrastive,
    TensorizedRBM,
    TensorizedVAE,
)
from modules.tensorized.base import kmeans_pp_initialisation
from modules.tensorized.losses import (
    assigned_loss,
    centred_reconstruction_losses,
    gaussian_kl,
    lloyd_centres,
    normalised_triplet_losses,
    rbm_free_energy,
    tvae_losses,
)
from modules.tensorized.tcl import elastic_deform, sample_partner

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
    torch.testing.assert_close(tvae_losses(decoded, target, mean, log_var, reconstruction),
                               expected)


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
    kwargs = {"tvae": {"hidden_dim": 8}, "tcl": {"embedding_dim": 8, "channels": (2, 4)},
              "trbm": {"hidden_dim": 6}}.get(name, {})
    return METHODS[name](num_classes=k, input_shape=(1, 8, 8), **kwargs)


@pytest.mark.parametrize("name", ["ae", *TENSORIZED])
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


@pytest.mark.parametrize("name", ["ae", *TENSORIZED])
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
    from benchmarks.config import init_parameters

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

    suite = yaml.safe_load((Path(__file__).parents[1] / "benchmarks" / "tensorized.yaml")
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


@pytest.mark.slow
def test_worker_processes_do_not_change_the_numbers():
    from benchmarks.experiments.tensorized import run

    settings = {"seeds": [0, 1], "datasets": ["iris"], "epochs": 2,
                "tvae": {"enabled": False}, "tcl": {"enabled": False},
                "trbm": {"epochs": 1, "hidden_dim": 4, "limit_per_class": 10}}
    here, pooled = run(workers=1, **settings), run(workers=2, **settings)
    for title in here.tables:
        for a, b in zip(here.tables[title], pooled.tables[title], strict=True):
            assert {k: v for k, v in a.items() if "ms per epoch" not in k} == {
                k: v for k, v in b.items() if "ms per epoch" not in k}
