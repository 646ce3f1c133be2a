r"""The mechanics every cluster-specific ("tensorized") model shares, written once: the batched
cluster-specific linear layer, the k-means++ initialisation of the assignment :math:`S`, the
alternation of gradient steps under fixed :math:`S` with Lloyd steps, and inference by the
arg-min loss (eq. 2).

Reference: [CSRL] M. Sabanayagam, O. Al-Dabooni, P. Esser, "Cluster Specific Representation
Learning", arXiv:2412.03471, section II ("Optimization", "Inference").

How :math:`S` is kept without a per-sample index. The training loader yields no sample index,
so :math:`S` is not stored as a :math:`k \times n` matrix. Instead:

- *Initialisation* (``on_fit_start``): k-means++ seeds on the un-augmented training split
  (scikit-learn's ``kmeans_plusplus``, random state drawn from the seeded torch generator), every
  point assigned to its nearest seed, and the centres :math:`c_j` set to the means of their
  points, as in the authors' code. Until the first Lloyd step a training point's cluster is its
  nearest centre: this *is* the k-means++ assignment.
- *Gradient step under fixed S* (``training_step``): the batch's assignment is computed first,
  without gradients, then one optimiser step is taken on the loss of every point under its
  assigned cluster (:func:`~modules.losses.tensorized.assigned_loss`).
- *Lloyd step* (``on_train_epoch_end``): every training point is assigned to the cluster of
  smallest loss under the current parameters, and the centres are recomputed from that
  assignment over the full training split. After the first Lloyd step, a point's cluster during
  training is its arg-min-loss cluster under the parameters of that moment: the assignment a
  Lloyd step would give it, evaluated lazily when the point is drawn. (The authors' code updates
  a stored assignment right after each point's step and the centres after each batch; with one
  batch an epoch the two schedules differ by one step.)

The assignment of the training split after every Lloyd step is kept in ``assignment_log`` and
its adjusted Rand index against the labels logged as ``train_assignment_ari`` (with the share of
points that changed cluster, ``train_assignment_changed``); every validation epoch logs
``val_loss`` (the mean arg-min loss, eq. 2) and ``val_ari`` (the ARI of the eq. 2 assignment).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import lightning.pytorch as pl
import torch
from torch import Tensor, nn

from modules.blocks.optim import check_optimizer_arguments
from modules.losses.tensorized import lloyd_centres
from modules.methods.base import eval_mode, step_values_read
from modules.ranges import check_count, check_settings


class ClusterLinear(nn.Module):
    r"""k linear maps applied in parallel, one per cluster, as a single einsum.

    .. math::

        y_{i,j} = W_j^\top x_{i,j} + b_j, \qquad W \in \mathbb{R}^{k \times d_{in} \times d_{out}},

    the stacked parameter tensor that gives tensorization its name ([CSRL] footnote 1). The input
    is either shared by the clusters, ``(B, d_in)``, or one per cluster, ``(B, k, d_in)``; the
    output is ``(B, k, d_out)``. Each :math:`W_j` is initialised as ``nn.Linear`` would be.

    >>> layer = ClusterLinear(3, 4, 2)
    >>> layer(torch.zeros(5, 4)).shape, layer(torch.zeros(5, 3, 4)).shape
    (torch.Size([5, 3, 2]), torch.Size([5, 3, 2]))
    """

    def __init__(self, n_clusters: int, in_features: int, out_features: int,
                 bias: bool = True) -> None:
        super().__init__()
        self.n_clusters, self.in_features, self.out_features = n_clusters, in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight = nn.Parameter(torch.empty(n_clusters, in_features, out_features)
                                   .uniform_(-bound, bound))
        self.bias = (nn.Parameter(torch.empty(n_clusters, out_features).uniform_(-bound, bound))
                     if bias else None)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 2:
            y = torch.einsum("bi,kio->bko", x, self.weight)  # y: (B, k, d_out)
        else:
            y = torch.einsum("bki,kio->bko", x, self.weight)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (f"n_clusters={self.n_clusters}, in_features={self.in_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


def nearest_centre(x: Tensor, centres: Tensor) -> Tensor:
    """Index of the nearest centre (Euclidean) of every row of ``x`` (n, D); centres (k, D).

    >>> nearest_centre(torch.tensor([[0.1], [0.9]]), torch.tensor([[1.0], [0.0]]))
    tensor([1, 0])
    """
    return torch.cdist(x, centres.to(x.dtype)).argmin(1)


def kmeans_pp_initialisation(x: Tensor, n_clusters: int, seed: int) -> tuple[Tensor, Tensor]:
    """The initial assignment of [CSRL] section II: k-means++ seeds (scikit-learn's
    ``kmeans_plusplus``), every point assigned to its nearest seed, centres the means of the
    assigned points. Returns ``(assignment (n,), centres (k, D))``.

    >>> x = torch.tensor([[0.0, 0.0], [0.0, 1.0], [9.0, 9.0], [9.0, 8.0]])
    >>> s, c = kmeans_pp_initialisation(x, 2, seed=0)
    >>> bool(s[0] == s[1] and s[2] == s[3] and s[0] != s[2])
    True
    """
    from sklearn.cluster import kmeans_plusplus

    data = x.detach().cpu().double().numpy()
    seeds, _ = kmeans_plusplus(data, n_clusters=n_clusters, random_state=seed)
    seeds = torch.as_tensor(seeds, dtype=x.dtype, device=x.device)
    assignment = nearest_centre(x, seeds)
    return assignment, lloyd_centres(x, assignment, seeds)


def adjusted_rand(labels: Tensor, assignment: Tensor) -> float:
    """Adjusted Rand index (Hubert & Arabie 1985) of an assignment against labels."""
    from sklearn.metrics import adjusted_rand_score

    return float(adjusted_rand_score(labels.cpu().numpy(), assignment.cpu().numpy()))


class ClusterSpecificModule(pl.LightningModule):
    r"""Base of the tensorized models: the assignment mechanics of [CSRL] section II.

    A model defines three things on normalised inputs ``x`` of shape ``(B, *input_shape)``:

    - ``assignment_losses(x) -> (B, k)``: the deterministic loss :math:`\mathcal{L}_{i,j}` of
      every point under every cluster; eq. 2 assigns each point to its arg-min,
      :math:`s = \arg\min_j \mathcal{L}(g_{\Psi_j}(g_\Omega(x)))`.
    - ``objective(views, labels, assignment) -> ()``: the training loss under a fixed assignment.
    - ``embed_all(x) -> (B, k, h)``: every cluster's embedding; ``encode`` returns the assigned
      one, :math:`g_{\Psi_s}(g_\Omega(x))`.

    The centres :math:`c_j` (``centres``, ``(k, D)`` with ``D`` the flattened input size) live in
    the normalised input space. See the module docstring for how :math:`S` is kept.

    Args:
        num_classes, input_shape: set from the datamodule by the runner.
        n_clusters: :math:`k`; ``None`` uses ``num_classes`` (the paper sets :math:`k = C`).
        lr, weight_decay: Adam's learning rate (> 0) and weight decay (>= 0).
    """

    #: The suite runner and ``clusterbench fit`` train a method only when this is True.
    requires_training = True
    #: What it logs once an epoch: the metrics a search trial reports and ASHA schedules on.
    epoch_metrics = ("val_loss", "val_ari", "train_assignment_ari")
    #: Arguments its configuration never reads: none (every method says, for its W&B config).
    unused_arguments: frozenset[str] = frozenset()

    def __init__(self, num_classes: int, input_shape: Sequence[int], n_clusters: int | None = None,
                 lr: float = 1e-2, weight_decay: float = 0.0) -> None:
        super().__init__()
        # Collects the arguments of this __init__ and of the model's that called it.
        self.save_hyperparameters()
        check_settings(self.hparams)  # every numeric argument's type and maximum, before sizes
        if n_clusters is not None:
            check_count("n_clusters", n_clusters)
        check_optimizer_arguments("adam", lr, weight_decay)
        self.input_shape = tuple(int(s) for s in input_shape)
        self.input_dim = math.prod(self.input_shape)
        self.n_clusters = int(n_clusters or num_classes)
        self.lr, self.weight_decay = lr, weight_decay
        self.register_buffer("centres", torch.zeros(self.n_clusters, self.input_dim))
        self.register_buffer("lloyd_steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("initialised", torch.zeros((), dtype=torch.bool))
        #: Assignment of the training split after each Lloyd step (the k-means++ one first).
        self.assignment_log: list[Tensor] = []
        self._val_assignments: list[Tensor] = []
        self._val_labels: list[Tensor] = []
        self._train_split: tuple[Tensor, Tensor] | None = None
        #: Whether a Lloyd step was taken, read once at each training epoch's start.
        self._lloyd_done: bool | None = None

    # -- what a model defines ------------------------------------------------------------------
    def assignment_losses(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def objective(self, views: list[Tensor], labels: Tensor, assignment: Tensor) -> Tensor:
        raise NotImplementedError

    def embed_all(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    # -- inference (eq. 2) ---------------------------------------------------------------------
    @torch.no_grad()
    def assign(self, x: Tensor) -> Tensor:
        """Eq. 2: the cluster of smallest loss of every point, ``(B, *input_shape) -> (B,)``."""
        return self.assignment_losses(x).argmin(1)

    @torch.no_grad()
    def assign_and_encode(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Eq. 2's cluster of every point and that cluster's embedding
        :math:`g_{\\Psi_s}(g_\\Omega(x))`: ``(B,)`` and ``(B, h)``."""
        assignment = self.assign(x)
        z = self.embed_all(x)  # z: (B, k, h)
        return assignment, z[torch.arange(len(assignment), device=z.device), assignment]

    @torch.no_grad()
    def encode(self, x: Tensor) -> Tensor:
        """The assigned cluster's embedding :math:`g_{\\Psi_s}(g_\\Omega(x))`: ``(B, h)``."""
        return self.assign_and_encode(x)[1]

    def current_assignment(self, x: Tensor, lloyd_done: bool | None = None) -> Tensor:
        """The fixed :math:`S` of a gradient step: nearest centre before the first Lloyd step
        (the k-means++ assignment), arg-min loss after it. ``lloyd_done``: whether a Lloyd step
        was taken, when the caller knows (None: read from the model's step count, a read of a
        device value on the host, which a GPU waits for)."""
        if lloyd_done is None:
            lloyd_done = int(self.lloyd_steps) > 0
        if not lloyd_done:
            return nearest_centre(x.flatten(1), self.centres)
        return self.assign(x)

    # -- the alternation -----------------------------------------------------------------------
    def _training_split(self) -> tuple[Tensor, Tensor]:
        """The un-augmented training split ``(x, y)``, read once per fit."""
        if self._train_split is not None:
            return self._train_split
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is None or not hasattr(datamodule, "train_eval_dataloader"):
            raise RuntimeError(f"{type(self).__name__} needs a datamodule with "
                               "train_eval_dataloader() (a ClusterDataModule): the k-means++ "
                               "initialisation and the Lloyd steps use the whole training split")
        xs, ys = [], []
        for x, y in datamodule.train_eval_dataloader():
            xs.append(x.to(self.device))
            ys.append(y)
        self._train_split = (torch.cat(xs), torch.cat(ys))
        return self._train_split

    @torch.no_grad()
    def initialise_assignment(self, x: Tensor, seed: int) -> Tensor:
        """k-means++ initialisation of :math:`S` and the centres on the points ``x``."""
        assignment, centres = kmeans_pp_initialisation(x.flatten(1).float(), self.n_clusters,
                                                       seed)
        self.centres.copy_(centres)
        self.initialised.fill_(True)
        self.lloyd_steps.zero_()
        return assignment

    @torch.no_grad()
    def lloyd_step(self, x: Tensor, batch_size: int = 512) -> Tensor:
        """Assign every point of ``x`` to its cluster of smallest loss, then recompute the
        centres as the means of their points. Returns the assignment ``(n,)``."""
        with eval_mode(self):
            assignment = torch.cat([self.assign(part) for part in x.split(batch_size)])
        self.centres.copy_(lloyd_centres(x.flatten(1).float(), assignment, self.centres))
        self.lloyd_steps.add_(1)
        return assignment

    def on_fit_start(self) -> None:
        self._train_split = None
        if bool(self.initialised):  # resumed or fitted again: keep the learnt assignment
            return
        x, y = self._training_split()
        # The k-means++ seeds follow the seeded torch generator (pl.seed_everything).
        seed = int(torch.randint(0, 2**31 - 1, (1,)))
        self.assignment_log = [self.initialise_assignment(x, seed).cpu()]

    def on_train_epoch_start(self) -> None:
        # Read once an epoch, not in every step: the Lloyd steps happen between epochs.
        self._lloyd_done = int(self.lloyd_steps) > 0

    def on_train_epoch_end(self) -> None:
        self._lloyd_done = None
        x, y = self._training_split()
        assignment = self.lloyd_step(x).cpu()
        previous = self.assignment_log[-1] if self.assignment_log else None
        self.assignment_log.append(assignment)
        self.log("train_assignment_ari", adjusted_rand(y, assignment))
        if previous is not None and len(previous) == len(assignment):
            self.log("train_assignment_changed", (previous != assignment).float().mean())

    def on_fit_end(self) -> None:
        self._train_split, self._lloyd_done = None, None

    @property
    def train_assignment(self) -> Tensor | None:
        """The assignment :math:`S` of the training split after the last Lloyd step."""
        return self.assignment_log[-1] if self.assignment_log else None

    # -- Lightning -----------------------------------------------------------------------------
    def training_step(self, batch: tuple[list[Tensor], Tensor], batch_idx: int) -> Tensor:
        views, labels = batch
        with torch.no_grad():  # S is fixed during the gradient step
            assignment = self.current_assignment(views[0], self._lloyd_done)
        loss = self.objective(views, labels, assignment)
        if step_values_read(self, batch_idx):
            self.log("train_loss", loss, batch_size=labels.shape[0])  # no host read per step
        return loss

    def on_validation_epoch_start(self) -> None:
        self._val_assignments, self._val_labels = [], []

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, labels = batch
        best, assignment = self.assignment_losses(x).min(1)
        self.log("val_loss", best.mean(), on_epoch=True, prog_bar=True,
                 batch_size=labels.shape[0])
        self._val_assignments.append(assignment.cpu())
        self._val_labels.append(labels.cpu())

    def on_validation_epoch_end(self) -> None:
        if self._val_labels:
            self.log("val_ari", adjusted_rand(torch.cat(self._val_labels),
                                              torch.cat(self._val_assignments)), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)


class InputScale(nn.Module):
    """The datamodule's normalisation, to map normalised inputs back to image units in [0, 1]
    (the Bernoulli means of the TVAE's BCE targets and the TRBM's visible units).

    ``mean`` and ``std`` are buffers of the input's shape, identity until :meth:`load_from`
    copies a datamodule's statistics (broadcast to that shape).

    >>> scale = InputScale((1, 2, 2))
    >>> scale.load_from(torch.full((1, 1, 1), 0.5), torch.full((1, 1, 1), 0.25))
    >>> scale.to_unit(torch.tensor([[[[-2.0, 0.0], [2.0, 4.0]]]])).flatten().tolist()
    [0.0, 0.5, 1.0, 1.0]
    """

    def __init__(self, input_shape: Sequence[int]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(tuple(input_shape)))
        self.register_buffer("std", torch.ones(tuple(input_shape)))

    @torch.no_grad()
    def load_from(self, mean: Tensor, std: Tensor) -> None:
        self.mean.copy_(torch.as_tensor(mean).to(self.mean).expand_as(self.mean))
        self.std.copy_(torch.as_tensor(std).to(self.std).expand_as(self.std))

    def to_unit(self, x: Tensor) -> Tensor:
        """``(B, *input_shape)`` normalised -> image units, clamped to [0, 1]."""
        return (x * self.std + self.mean).clamp(0.0, 1.0)

    def from_unit(self, x: Tensor) -> Tensor:
        return (x - self.mean) / self.std


def load_input_scale(module: pl.LightningModule, scale: InputScale) -> None:
    """Copy the fitting datamodule's ``mean``/``std`` (if it has them) into ``scale``."""
    datamodule = getattr(module.trainer, "datamodule", None)
    if datamodule is not None and getattr(datamodule, "mean", None) is not None:
        scale.load_from(datamodule.mean, datamodule.std)
