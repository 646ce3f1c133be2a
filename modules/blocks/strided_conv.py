"""The small strided convolutional encoder of an image and its transposed-convolution mirror: the
"CNN encoder and decoder" of a VAE on 28x28 images, as the Keras and PyTorch VAE examples for
MNIST build them (two 3x3 convolutions of stride 2, 32 and 64 channels, then a linear layer).

Both work on *flattened* images with any leading dimensions, ``(..., C*H*W)``, so that a
cluster-specific model can pass its ``(B, k, d)`` centred inputs as they are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import Tensor, nn

from modules.blocks.heads import make_activation


def _image_shape(shape: Sequence[int], channels: Sequence[int]) -> tuple[int, int, int]:
    if len(shape) != 3:
        raise ValueError(f"a convolutional encoder/decoder needs images (C, H, W), got shape "
                         f"{tuple(shape)}")
    c, h, w = (int(s) for s in shape)
    if h % 4 or w % 4:
        raise ValueError(f"two stride-2 layers need H and W divisible by 4 (28 -> 14 -> 7), got "
                         f"{h}x{w}")
    if len(channels) != 2:
        raise ValueError(f"channels must give the two convolutions' widths, got {tuple(channels)}")
    return c, h, w


class StridedConvEncoder(nn.Module):
    r"""Images to a feature vector by two strided convolutions and a linear layer.

    .. math::

        g(x) = \sigma\big(W \,\mathrm{vec}\,\sigma(K_2 *_2 \sigma(K_1 *_2 x))\big),

    :math:`*_2` a convolution of stride 2 and padding 1; :math:`K_1`: 3x3, ``channels[0]``
    maps (28 -> 14); :math:`K_2`: 3x3, ``channels[1]`` maps (14 -> 7); :math:`W`:
    ``channels[1] * H/4 * W/4 -> output_dim``; :math:`\sigma` the activation (a name of
    :data:`~modules.blocks.heads.ACTIVATIONS`) after every layer. Input ``(..., C*H*W)``
    flattened images, output ``(..., output_dim)``.

    >>> import torch
    >>> StridedConvEncoder((1, 28, 28), 200)(torch.zeros(4, 3, 784)).shape
    torch.Size([4, 3, 200])
    """

    def __init__(self, input_shape: Sequence[int], output_dim: int,
                 channels: Sequence[int] = (32, 64), activation: str = "leaky_relu") -> None:
        super().__init__()
        c, h, w = _image_shape(input_shape, channels)
        c1, c2 = (int(n) for n in channels)
        self.input_shape = (c, h, w)
        self.layers = nn.Sequential(
            nn.Conv2d(c, c1, 3, stride=2, padding=1), make_activation(activation),
            nn.Conv2d(c1, c2, 3, stride=2, padding=1), make_activation(activation),
            nn.Flatten(), nn.Linear(c2 * (h // 4) * (w // 4), output_dim),
            make_activation(activation))

    def forward(self, x: Tensor) -> Tensor:
        lead = x.shape[:-1]
        images = x.reshape(-1, *self.input_shape)  # (N, C, H, W), N = prod(lead)
        return self.layers(images).view(*lead, -1)  # (..., output_dim)


class StridedConvDecoder(nn.Module):
    r"""The mirror of :class:`StridedConvEncoder`: a feature vector to image-sized outputs.

    .. math::

        f(u) = K'_2 *^\top_2 \sigma\big(K'_1 *^\top_2 \sigma(\mathrm{unvec}\, W u)\big),

    :math:`*^\top_2` a transposed convolution of stride 2, padding 1 and output padding 1;
    :math:`W`: ``input_dim -> channels[1] * H/4 * W/4``; :math:`K'_1`: 3x3, ``channels[1] ->
    channels[0]`` (7 -> 14); :math:`K'_2`: 3x3, ``channels[0] -> C`` (14 -> 28). The output is
    linear (logits for a Bernoulli likelihood, means for a Gaussian one). Input
    ``(..., input_dim)``, output ``(..., C*H*W)`` flattened.

    >>> import torch
    >>> StridedConvDecoder(200, (1, 28, 28))(torch.zeros(4, 3, 200)).shape
    torch.Size([4, 3, 784])
    """

    def __init__(self, input_dim: int, output_shape: Sequence[int],
                 channels: Sequence[int] = (32, 64), activation: str = "leaky_relu") -> None:
        super().__init__()
        c, h, w = _image_shape(output_shape, channels)
        c1, c2 = (int(n) for n in channels)
        self.output_dim = math.prod((c, h, w))
        self.layers = nn.Sequential(
            nn.Linear(input_dim, c2 * (h // 4) * (w // 4)), make_activation(activation),
            nn.Unflatten(1, (c2, h // 4, w // 4)),
            nn.ConvTranspose2d(c2, c1, 3, stride=2, padding=1, output_padding=1),
            make_activation(activation),
            nn.ConvTranspose2d(c1, c, 3, stride=2, padding=1, output_padding=1),
            nn.Flatten())

    def forward(self, u: Tensor) -> Tensor:
        lead = u.shape[:-1]
        out = self.layers(u.reshape(-1, u.shape[-1]))  # (N, C*H*W)
        return out.view(*lead, self.output_dim)
