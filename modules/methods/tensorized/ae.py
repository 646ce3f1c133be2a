r"""The standard autoencoders the paper compares against (AE1, AE2, AE3), [CSRL] section III-B.

Reference: [CSRL] M. Sabanayagam, O. Al-Dabooni, P. Esser, "Cluster Specific Representation
Learning", arXiv:2412.03471.
"""

from __future__ import annotations

from collections.abc import Sequence

import lightning.pytorch as pl
import torch
from torch import Tensor

from modules.blocks.heads import mlp
from modules.blocks.optim import check_optimizer_arguments
from modules.methods.base import step_values_read
from modules.methods.tensorized.base import adjusted_rand
from modules.ranges import check_settings


def layer_sizes(input_dim: int, embedding_dim: int, hidden_dim: int, num_layers: int) -> list[int]:
    """Encoder sizes ``d -> hidden -> ... -> hidden -> h`` with ``num_layers`` linear layers.

    >>> layer_sizes(5, 1, 2, 1), layer_sizes(5, 3, 2, 2)  # AE1, and AE3 with C = 3
    ([5, 1], [5, 2, 3])
    """
    if num_layers < 1:
        raise ValueError(f"num_layers must be at least 1, got {num_layers}")
    return [input_dim] + [hidden_dim] * (num_layers - 1) + [embedding_dim]


class Autoencoder(pl.LightningModule):
    r"""A standard autoencoder, the reference of [CSRL] section III-B (Figure 2 and 7).

    .. math::

        \min_{\Psi, \Theta} \frac{1}{n}\sum_{i=1}^n \frac{1}{d}\,
        \|x_i - f_\Theta(g_\Psi(x_i))\|^2,

    encoder :math:`g_\Psi` of ``num_layers`` linear layers ``d -> hidden_dim -> ... ->
    embedding_dim`` and a mirrored decoder :math:`f_\Theta`. The paper's shapes:

    - AE1: ``num_layers=1, embedding_dim=1``;
    - AE2: ``num_layers=2, hidden_dim=2, embedding_dim=1``;
    - AE3: ``num_layers=2, hidden_dim=2, embedding_dim=C`` (C the number of clusters), which has
      as many parameters as the PTAE.

    Linear (``activation="none"``) and without biases by default, as the authors' code
    (``src/models.py``) builds them: the parameter counts of their notebook (e.g. 3156 for AE3
    and PTAE on 784-pixel MNIST with C = 5) hold only without biases. No centring: the standard
    AE sees the data as they are. ``encode`` gives :math:`g_\Psi(x)`, ``reconstruct`` the
    decoder's output; each validation epoch logs ``val_loss`` and ``val_ari``, the ARI of
    k-means (k = ``num_classes``) on the validation embeddings.

    >>> ae3 = Autoencoder(num_classes=3, input_shape=(6,), embedding_dim=3)
    >>> sum(p.numel() for p in ae3.parameters()), ae3.encode(torch.zeros(4, 6)).shape
    (36, torch.Size([4, 3]))
    """

    requires_training = True
    #: What it logs once an epoch: the metrics a search trial reports and ASHA schedules on.
    epoch_metrics = ("val_loss", "val_ari")
    #: Arguments its configuration never reads: none (every method says, for its W&B config).
    unused_arguments: frozenset[str] = frozenset()

    def __init__(self, num_classes: int, input_shape: Sequence[int], embedding_dim: int = 1,
                 hidden_dim: int = 2, num_layers: int = 2, activation: str = "none",
                 bias: bool = False, lr: float = 1e-2, weight_decay: float = 0.0) -> None:
        super().__init__()
        self.save_hyperparameters()
        check_settings(self.hparams)  # every numeric argument's type and maximum, before sizes
        check_optimizer_arguments("adam", lr, weight_decay)
        self.input_shape = tuple(int(s) for s in input_shape)
        sizes = layer_sizes(int(torch.tensor(self.input_shape).prod()), embedding_dim,
                            hidden_dim, num_layers)
        # Linear layers with the activation between them, no BatchNorm (the one MLP builder)
        self.encoder = mlp(sizes, batch_norm=False, activation=activation, bias=bias)
        self.decoder = mlp(sizes[::-1], batch_norm=False, activation=activation, bias=bias)
        self.num_classes, self.lr, self.weight_decay = num_classes, lr, weight_decay
        self._val_z: list[Tensor] = []
        self._val_y: list[Tensor] = []

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        z = self.encoder(x.flatten(1))  # z: (B, h)
        return self.decoder(z), z  # (B, d), (B, h)

    @torch.no_grad()
    def encode(self, x: Tensor) -> Tensor:
        return self.encoder(x.flatten(1))

    @torch.no_grad()
    def reconstruct(self, x: Tensor) -> Tensor:
        return self(x)[0].view(-1, *self.input_shape)

    def training_step(self, batch: tuple[list[Tensor], Tensor], batch_idx: int) -> Tensor:
        views, labels = batch
        x = views[0].flatten(1)
        loss = (self(x)[0] - x).pow(2).mean()
        if step_values_read(self, batch_idx):
            self.log("train_loss", loss, batch_size=labels.shape[0])  # no host read per step
        return loss

    def on_validation_epoch_start(self) -> None:
        self._val_z, self._val_y = [], []

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, labels = batch
        x = x.flatten(1)
        reconstruction, z = self(x)
        self.log("val_loss", (reconstruction - x).pow(2).mean(), on_epoch=True, prog_bar=True,
                 batch_size=labels.shape[0])
        self._val_z.append(z.cpu())
        self._val_y.append(labels.cpu())

    def on_validation_epoch_end(self) -> None:
        if not self._val_y:
            return
        from sklearn.cluster import KMeans

        z, y = torch.cat(self._val_z).double().numpy(), torch.cat(self._val_y)
        k = min(self.num_classes, len(y))
        assignment = KMeans(n_clusters=k, n_init=3, random_state=0).fit_predict(z)
        self.log("val_ari", adjusted_rand(y, torch.as_tensor(assignment)), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)
