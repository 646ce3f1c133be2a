"""The tensorized models of arXiv:2412.03471 (Sabanayagam, Al-Dabooni, Esser, "Cluster Specific
Representation Learning") against references computed from their parameters alone: float64
matmuls and loops, activations, (strided and transposed) convolution, pooling and losses written
out, never a call to one of the model's own layers."""

from __future__ import annotations

import math

import pytest
import torch

from modules.methods.tensorized import (
    Autoencoder,
    ClusterLinear,
    PartiallyTensorizedAutoencoder,
    TensorizedAutoencoder,
    TensorizedContrastive,
    TensorizedVAE,
)

F64 = torch.float64

# training_step called by hand, outside a Trainer, makes self.log warn.
pytestmark = pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")


def activate(name: str, h: torch.Tensor) -> torch.Tensor:
    """The activations of modules.blocks.heads.ACTIVATIONS, written out."""
    if name == "none":
        return h
    if name == "relu":
        return torch.where(h > 0, h, torch.zeros_like(h))
    if name == "leaky_relu":
        return torch.where(h > 0, h, 0.2 * h)
    assert name == "tanh"
    return (torch.exp(h) - torch.exp(-h)) / (torch.exp(h) + torch.exp(-h))


def linear_layers(sequential) -> list[tuple[torch.Tensor, torch.Tensor | None, bool]]:
    """(weight, bias, cluster_specific) of every linear map of a Sequential, in order, read from
    the parameters (weights as (d_in, d_out), per cluster for cluster-specific ones)."""
    out = []
    for layer in sequential:
        if isinstance(layer, ClusterLinear):
            out.append((layer.weight.detach(), None if layer.bias is None else
                        layer.bias.detach(), True))
        elif isinstance(layer, torch.nn.Linear):
            out.append((layer.weight.detach().T, None if layer.bias is None else
                        layer.bias.detach(), False))
    return out


def apply_stack(h: torch.Tensor, layers, activation: str, j: int | None) -> torch.Tensor:
    """Linear maps with the activation between them (not after the last) on rows ``h`` (n, d),
    cluster ``j``'s weights for the cluster-specific maps."""
    for i, (weight, bias, specific) in enumerate(layers):
        w = weight[j] if specific else weight
        h = h @ w
        if bias is not None:
            h = h + (bias[j] if specific else bias)
        if i < len(layers) - 1:
            h = activate(activation, h)
    return h


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("activation", ["none", "relu", "leaky_relu", "tanh"])
@pytest.mark.parametrize("cls", [TensorizedAutoencoder, PartiallyTensorizedAutoencoder])
def test_centred_autoencoders_match_a_reference_from_their_parameters(cls, activation, bias):
    torch.manual_seed(3)
    model = cls(num_classes=3, input_shape=(7,), hidden_dim=4, num_layers=3,
                embedding_dim=2, activation=activation, bias=bias, penalty=0.3).to(F64)
    with torch.no_grad():
        model.centres.copy_(torch.randn(3, 7, dtype=F64))
    x = torch.randn(9, 7, dtype=F64)
    encoder, decoder = linear_layers(model.encoder), linear_layers(model.decoder)
    losses = torch.zeros(9, 3, dtype=F64)
    codes = torch.zeros(9, 3, 2, dtype=F64)
    for j in range(3):
        centred = x - model.centres[j]
        z = apply_stack(centred, encoder, activation, j)
        back = apply_stack(z, decoder, activation, j)
        losses[:, j] = ((back - centred) ** 2).sum(1) / 7 + 0.3 * (z**2).sum(1)
        codes[:, j] = z
    torch.testing.assert_close(model.assignment_losses(x), losses)
    best = losses.argmin(1)
    assert model.assign(x).tolist() == best.tolist()
    torch.testing.assert_close(model.encode(x), codes[torch.arange(9), best])
    assignment = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2])
    torch.testing.assert_close(model.objective([x], torch.zeros(9), assignment),
                               losses[torch.arange(9), assignment].mean())


@pytest.mark.parametrize("activation", ["none", "relu", "leaky_relu"])
def test_autoencoder_matches_a_reference_from_its_parameters(activation):
    torch.manual_seed(4)
    model = Autoencoder(num_classes=3, input_shape=(6,), embedding_dim=2, hidden_dim=3,
                        num_layers=3, activation=activation, bias=True).to(F64)
    x = torch.randn(5, 6, dtype=F64)
    z = apply_stack(x, linear_layers(model.encoder), activation, None)
    back = apply_stack(z, linear_layers(model.decoder), activation, None)
    torch.testing.assert_close(model.encode(x), z)
    torch.testing.assert_close(model.reconstruct(x), back)
    loss = model.training_step(([x], torch.zeros(5)), 0)
    torch.testing.assert_close(loss, ((back - x) ** 2).sum() / back.numel())


@pytest.mark.parametrize("reconstruction", ["bce", "mse"])
def test_tvae_matches_a_reference_from_its_parameters(reconstruction):
    torch.manual_seed(5)
    model = TensorizedVAE(num_classes=2, input_shape=(1, 3, 3), hidden_dim=5, embedding_dim=2,
                          reconstruction=reconstruction).to(F64)
    with torch.no_grad():
        model.centres.copy_(torch.randn(2, 9, dtype=F64))
    x = torch.rand(6, 1, 3, 3, dtype=F64)
    target = x.flatten(1)  # the scale is the identity before fitting
    (w_in, b_in, _), = linear_layers(model.shared_encoder)
    (w_out, b_out, _), = linear_layers(model.shared_decoder)
    expected = torch.zeros(6, 2, dtype=F64)
    for j in range(2):
        centred = x.flatten(1) - model.centres[j]
        hidden = activate("leaky_relu", centred @ w_in + b_in)
        mean = hidden @ model.mean.weight[j] + model.mean.bias[j]
        log_var = (hidden @ model.log_var.weight[j] + model.log_var.bias[j]).clamp(-20, 20)
        up = activate("leaky_relu", mean @ model.cluster_decoder.weight[j]
                      + model.cluster_decoder.bias[j])
        out = up @ w_out + b_out  # logits (bce) or means (mse), decoded at z = mu
        if reconstruction == "bce":
            rec = (torch.log1p(torch.exp(out)) - target * out).sum(1)  # -log Bernoulli(t; sigmoid)
        else:
            rec = 0.5 * ((centred - out) ** 2).sum(1)
        kl = 0.5 * (mean**2 + log_var.exp() - 1 - log_var).sum(1)
        expected[:, j] = rec + kl
    torch.testing.assert_close(model.assignment_losses(x).detach(), expected)
    assert model.assign(x).tolist() == expected.argmin(1).tolist()


def conv3x3_stride2(images: torch.Tensor, weight: torch.Tensor,
                    bias: torch.Tensor) -> torch.Tensor:
    """A 3x3 convolution, stride 2, padding 1, as a loop over the nine taps:
    (B, C, H, W) -> (B, O, H/2, W/2); out[o, y, x] = b[o] + sum w[o, c, dy, dx] in[c, 2y+dy-1,
    2x+dx-1]."""
    b, c, h, w = images.shape
    padded = torch.zeros(b, c, h + 2, w + 2, dtype=images.dtype)
    padded[:, :, 1:-1, 1:-1] = images
    out = bias.view(1, -1, 1, 1).expand(b, -1, h // 2, w // 2).clone()
    for dy in range(3):
        for dx in range(3):
            patch = padded[:, :, dy:dy + h:2, dx:dx + w:2]  # (B, C, H/2, W/2)
            out = out + torch.einsum("bchw,oc->bohw", patch, weight[:, :, dy, dx])
    return out


def transposed_conv3x3_stride2(images: torch.Tensor, weight: torch.Tensor,
                               bias: torch.Tensor) -> torch.Tensor:
    """A 3x3 transposed convolution, stride 2, padding 1, output padding 1, as a loop over the
    nine taps: (B, C, H, W) -> (B, O, 2H, 2W). Input pixel (i, j) adds w[c, o, dy, dx] times
    itself to output pixel (2i+dy-1, 2j+dx-1); weight is (C, O, 3, 3)."""
    b, c, h, w = images.shape
    full = torch.zeros(b, weight.shape[1], 2 * h + 1, 2 * w + 1, dtype=images.dtype)
    for dy in range(3):
        for dx in range(3):
            full[:, :, dy:dy + 2 * h:2, dx:dx + 2 * w:2] += torch.einsum(
                "bchw,co->bohw", images, weight[:, :, dy, dx])
    # padding 1 drops the first row and column; output padding 1 keeps the last one
    return full[:, :, 1:, 1:] + bias.view(1, -1, 1, 1)


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("reconstruction", ["bce", "mse"])
def test_cnn_tvae_matches_a_reference_from_its_parameters(reconstruction, k):
    torch.manual_seed(8)
    model = TensorizedVAE(num_classes=3, input_shape=(1, 8, 8), n_clusters=k, hidden_dim=5,
                          embedding_dim=2, reconstruction=reconstruction, encoder="cnn").to(F64)
    with torch.no_grad():
        model.centres.copy_(torch.randn(k, 64, dtype=F64))
    x = torch.rand(4, 1, 8, 8, dtype=F64)
    target = x.flatten(1)  # the scale is the identity before fitting
    conv1, conv2 = (m for m in model.shared_encoder.modules() if isinstance(m, torch.nn.Conv2d))
    up1, up2 = (m for m in model.shared_decoder.modules()
                if isinstance(m, torch.nn.ConvTranspose2d))
    (w_in, b_in, _), = linear_layers(m for m in model.shared_encoder.modules()
                                     if isinstance(m, torch.nn.Linear))
    (w_out, b_out, _), = linear_layers(m for m in model.shared_decoder.modules()
                                       if isinstance(m, torch.nn.Linear))

    def params(layer):
        return layer.weight.detach(), layer.bias.detach()

    expected = torch.zeros(4, k, dtype=F64)
    expected_rec = torch.zeros(4, k, dtype=F64)
    means = torch.zeros(4, k, 2, dtype=F64)
    for j in range(k):
        centred = x - model.centres[j].view(1, 8, 8)
        h = activate("leaky_relu", conv3x3_stride2(centred, *params(conv1)))  # (4, 32, 4, 4)
        h = activate("leaky_relu", conv3x3_stride2(h, *params(conv2)))  # (4, 64, 2, 2)
        hidden = activate("leaky_relu", h.flatten(1) @ w_in + b_in)  # (4, 5)
        mean = hidden @ model.mean.weight[j] + model.mean.bias[j]
        log_var = (hidden @ model.log_var.weight[j] + model.log_var.bias[j]).clamp(-20, 20)
        up = activate("leaky_relu", mean @ model.cluster_decoder.weight[j]
                      + model.cluster_decoder.bias[j])
        u = activate("leaky_relu", up @ w_out + b_out).view(4, 64, 2, 2)
        u = activate("leaky_relu", transposed_conv3x3_stride2(u, *params(up1)))  # (4, 32, 4, 4)
        out = transposed_conv3x3_stride2(u, *params(up2)).flatten(1)  # (4, 64), at z = mu
        if reconstruction == "bce":
            rec = (torch.log1p(torch.exp(out)) - target * out).sum(1)  # -log Bernoulli(t; sigmoid)
        else:
            rec = 0.5 * ((centred.flatten(1) - out) ** 2).sum(1)
        kl = 0.5 * (mean**2 + log_var.exp() - 1 - log_var).sum(1)
        expected[:, j], expected_rec[:, j], means[:, j] = rec + kl, rec, mean
    torch.testing.assert_close(model.assignment_losses(x).detach(), expected)
    torch.testing.assert_close(model.reconstruction_losses(x), expected_rec)
    best = expected.argmin(1)
    assert model.assign(x).tolist() == best.tolist()
    torch.testing.assert_close(model.encode(x), means[torch.arange(4), best])


def conv3x3(images: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """A 3x3 convolution, padding 1, as a loop over the nine taps: (B, C, H, W) -> (B, O, H, W)."""
    b, c, h, w = images.shape
    padded = torch.zeros(b, c, h + 2, w + 2, dtype=images.dtype)
    padded[:, :, 1:-1, 1:-1] = images
    out = bias.view(1, -1, 1, 1).expand(b, -1, h, w).clone()
    for dy in range(3):
        for dx in range(3):
            patch = padded[:, :, dy:dy + h, dx:dx + w]  # (B, C, H, W)
            out = out + torch.einsum("bchw,oc->bohw", patch, weight[:, :, dy, dx])
    return out


def max_pool2(images: torch.Tensor) -> torch.Tensor:
    b, c, h, w = images.shape
    blocks = images[:, :, : h // 2 * 2, : w // 2 * 2].reshape(b, c, h // 2, 2, w // 2, 2)
    return blocks.amax(dim=(3, 5))


def test_tcl_embeddings_match_a_reference_from_its_parameters():
    torch.manual_seed(6)
    model = TensorizedContrastive(num_classes=3, input_shape=(1, 6, 6), embedding_dim=4,
                                  channels=(2, 3)).to(F64)
    x = torch.rand(5, 1, 6, 6, dtype=F64)
    conv1, conv2 = (m for m in model.shared_encoder if isinstance(m, torch.nn.Conv2d))
    h = activate("relu", conv3x3(x, conv1.weight.detach(), conv1.bias.detach()))
    h = activate("relu", conv3x3(h, conv2.weight.detach(), conv2.bias.detach()))
    features = max_pool2(h).flatten(1)  # (B, 3 * 3 * 3)
    expected = torch.stack([features @ model.head.weight[j] + model.head.bias[j]
                            for j in range(3)], dim=1)
    torch.testing.assert_close(model.embed_all(x).detach(), expected)


def test_vector_tcl_embeddings_match_a_reference_from_its_parameters():
    torch.manual_seed(7)
    model = TensorizedContrastive(num_classes=2, input_shape=(5,), embedding_dim=3,
                                  channels=(4, 6), supervised=True).to(F64)
    x = torch.randn(7, 5, dtype=F64)
    h = x
    for weight, bias, _ in linear_layers(model.shared_encoder):
        h = activate("relu", h @ weight + bias)  # ReLU after both shared layers
    expected = torch.stack([h @ model.head.weight[j] + model.head.bias[j] for j in range(2)], 1)
    torch.testing.assert_close(model.embed_all(x).detach(), expected)
    assert math.prod(expected.shape) == 7 * 2 * 3
