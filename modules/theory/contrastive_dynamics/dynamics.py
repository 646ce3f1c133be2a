r"""The two training dynamics of Calder & Lee (arXiv:2503.10812), section 4.1, from the same
initial embedding:

- :func:`network_descent`: gradient descent on the parameters w of an embedding map, whose
  embedded points move by eq. 15, :math:`z_i \leftarrow z_i - \frac{\sigma}{n} \sum_j K_{ij}
  \nabla L(z_j)` to first order (the neural kernel of eq. 12 mixes the points);
- :func:`free_particle_descent`: gradient descent directly on the embedded points, eq. 14,
  :math:`z_i \leftarrow z_i - \sigma \nabla L(z_i)` (eq. 13: :math:`K_{ij} = \delta_{ij} I`).

:math:`\nabla L(z_j)` is the gradient in :math:`L^2(\mu)` (Proposition 3.1): for the empirical
measure of n points it is n times the partial derivative of the mean cost, so that
:math:`\sigma` has the same meaning in both updates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, jvp

from modules.theory.contrastive_dynamics.kernels import trainable_parameters


@dataclass
class Trajectory:
    """What a run of either dynamics records.

    Attributes:
        iterations: the recorded iterations b (0 is the initial embedding).
        embeddings: per recorded iteration, the (n, d) embedding of the clean samples projected
            onto the sphere.
        velocities: iteration -> the (n, d) velocity of those projected points under the
            dynamics (eq. 11 for the network, eq. 13 for free particles), i.e. the negative
            gradient the paper draws as arrows; only at the iterations asked for.
        costs: the cost at every iteration 0 .. steps - 1 (before its step).
    """

    iterations: list[int] = field(default_factory=list)
    embeddings: list[Tensor] = field(default_factory=list)
    velocities: dict[int, Tensor] = field(default_factory=dict)
    costs: list[float] = field(default_factory=list)


def sphere_velocity(z: Tensor, velocity: Tensor) -> Tensor:
    r"""Velocity of :math:`\hat z = z / \lVert z\rVert` when z moves with ``velocity``:
    :math:`\dot{\hat z} = (I - \hat z \hat z^\top)\, \dot z / \lVert z\rVert`.

    >>> sphere_velocity(torch.tensor([[2.0, 0.0]]), torch.tensor([[1.0, 1.0]])).tolist()
    [[0.0, 0.5]]
    """
    norm = z.norm(dim=-1, keepdim=True)  # (n, 1)
    unit = z / norm
    radial = (velocity * unit).sum(dim=-1, keepdim=True) * unit
    return (velocity - radial) / norm


def network_velocity(model: nn.Module, x: Tensor, cost: Callable[[Tensor], Tensor]) -> Tensor:
    r"""The right-hand side of eq. 11 (Proposition 4.1) at the current parameters: the velocity
    of the raw outputs :math:`z_i = f(w, x_i)` under the gradient flow of
    :math:`\mathcal{L}(w) = \mathrm{cost}(f(w, x))`,

    .. math::
        \dot z_i = -\sum_{j=1}^n K_{ij} \frac{\partial \mathcal{L}}{\partial z_j}
            = -\frac{1}{n} \sum_{j=1}^n K_{ij} \nabla L(z_j)

    computed without forming K, as the Jacobian-vector product
    :math:`-\nabla_w f \cdot \nabla_w \mathcal{L}`.

    Args:
        model: the map f(w, .). x: (n, D). cost: (n, d) embeddings -> scalar.

    Returns:
        (n, d).

    >>> from modules.theory.contrastive_dynamics.embeddings import OneHiddenLayerEmbedding
    >>> f, x = OneHiddenLayerEmbedding(3, 2, 4), torch.randn(5, 3)
    >>> network_velocity(f, x, lambda z: z.pow(2).sum()).shape
    torch.Size([5, 2])
    """
    params = trainable_parameters(model)
    names = list(params)

    def outputs(*values: Tensor) -> Tensor:
        return functional_call(model, dict(zip(names, values, strict=True)), (x,))

    with torch.enable_grad():
        live = [params[name].clone().requires_grad_(True) for name in names]
        grads = torch.autograd.grad(cost(outputs(*live)), live)
    _, velocity = jvp(outputs, tuple(params[name] for name in names),
                      tuple(-g for g in grads))
    return velocity.detach()


def network_descent(model: nn.Module, x: Tensor,
                    augment: Callable[[Tensor, torch.Generator | None], Tensor],
                    cost: Callable[[Tensor, Tensor], Tensor], lr: float, steps: int,
                    record: Iterable[int] = (), velocity_at: Iterable[int] = (),
                    generator: torch.Generator | None = None) -> Trajectory:
    r"""Gradient descent on the parameters w of ``model`` (arXiv:2503.10812, eq. 9 and 15):

    .. math::
        w^{(b+1)} = w^{(b)} - \sigma \nabla_w \hat{\mathcal{L}}(w^{(b)}), \qquad
        \hat{\mathcal{L}}(w) = \mathrm{cost}\big(f(w, T_b(x)), f(w, T'_b(x))\big)

    with a fresh pair of views :math:`T_b, T'_b \sim \nu` drawn by ``augment`` at each step (a
    one-pair Monte-Carlo estimate of eq. 4's expectation over the augmentations). ``model`` is
    updated in place.

    Args:
        model: the embedding map f(w, .), (n, D) -> (n, d).
        x: (n, D) clean samples; the recorded embeddings are f(w, x).
        augment: draws the views, ``augment(x, generator) -> (n, D)``.
        cost: ``cost(z, z_prime) -> scalar``, e.g. :func:`nt_xent_cost`.
        lr: the step size :math:`\sigma`. steps: number of updates.
        record: iterations in ``0 .. steps`` at which to record the embedding.
        velocity_at: iterations in ``0 .. steps`` at which to record its velocity too (eq. 11
            with the cost of the clean sample, ``cost(z, z)``).
        generator: random source of the augmentations.

    >>> from modules.theory.contrastive_dynamics import (OneHiddenLayerEmbedding, nt_xent_cost,
    ...     orthogonal_noise_augmentation)
    >>> f, x = OneHiddenLayerEmbedding(4, 2, 8), torch.randn(10, 4)
    >>> run = network_descent(f, x, orthogonal_noise_augmentation(2, 1.0), nt_xent_cost,
    ...                       lr=0.01, steps=3, record=[0, 3], velocity_at=[3])
    >>> run.iterations, run.embeddings[1].shape, list(run.velocities), len(run.costs)
    ([0, 3], torch.Size([10, 2]), [3], 3)
    """
    arrows = {b for b in velocity_at if 0 <= b <= steps}
    wanted = sorted({b for b in record if 0 <= b <= steps} | arrows)
    trajectory = Trajectory()
    params = [p for p in model.parameters() if p.requires_grad]

    def snapshot(b: int) -> None:
        with torch.no_grad():
            z = model(x)  # (n, d) raw
        trajectory.iterations.append(b)
        trajectory.embeddings.append(F.normalize(z, dim=-1))
        if b in arrows:
            v = network_velocity(model, x, lambda e: cost(e, e))
            trajectory.velocities[b] = sphere_velocity(z, v)

    for b in range(steps):
        if wanted and wanted[0] == b:
            snapshot(wanted.pop(0))
        value = cost(model(augment(x, generator)), model(augment(x, generator)))
        grads = torch.autograd.grad(value, params)
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.sub_(lr * g)
        trajectory.costs.append(value.item())
    if wanted:
        snapshot(wanted.pop(0))
    return trajectory


def free_particle_descent(z0: Tensor, cost: Callable[[Tensor], Tensor], lr: float, steps: int,
                          record: Iterable[int] = (), velocity_at: Iterable[int] = (),
                          project: bool = True) -> Trajectory:
    r"""Gradient descent directly on the embedded points (arXiv:2503.10812, eq. 14), projected
    back onto the sphere after each step (the constraint set :math:`\mathcal{C}` of eq. 4):

    .. math::
        z_i^{(b+1)} = \Pi_{\mathbb{S}^{d-1}}\big(z_i^{(b)} - \sigma \nabla L(z_i^{(b)})\big),
        \qquad \nabla L(z_i) = n \frac{\partial\, \mathrm{cost}}{\partial z_i}

    with n = ``z0.shape[0]`` (the :math:`L^2(\mu)` gradient of Proposition 3.1 for the empirical
    measure of n points).

    Args:
        z0: (n, ..., d) initial particles; the leading axis indexes the samples (extra axes, e.g.
            one particle per sample and augmentation, are allowed).
        cost: particles -> scalar, e.g. ``lambda z: nt_xent_cost(z, z)`` for an invariant
            embedding (both views at the same point).
        lr: the step size :math:`\sigma`. steps: number of updates.
        record: iterations in ``0 .. steps`` at which to record the particles.
        velocity_at: iterations at which to record their velocity :math:`-\nabla L` too (its
            component tangent to the sphere).
        project: renormalise after each step (False: plain eq. 14).

    >>> from modules.theory.contrastive_dynamics import nt_xent_cost
    >>> z0 = torch.nn.functional.normalize(torch.randn(8, 2, dtype=torch.float64), dim=1)
    >>> run = free_particle_descent(z0, lambda z: nt_xent_cost(z, z), lr=0.1, steps=5,
    ...                             record=[5])
    >>> bool(torch.allclose(run.embeddings[0].norm(dim=1), torch.ones(8, dtype=torch.float64)))
    True
    """
    arrows = {b for b in velocity_at if 0 <= b <= steps}
    wanted = sorted({b for b in record if 0 <= b <= steps} | arrows)
    trajectory = Trajectory()
    n = z0.shape[0]
    z = z0.detach().clone()

    def gradient(points: Tensor) -> tuple[Tensor, Tensor]:
        with torch.enable_grad():
            live = points.clone().requires_grad_(True)
            value = cost(live)
            (grad,) = torch.autograd.grad(value, live)
        return value.detach(), n * grad

    def snapshot(b: int, points: Tensor, grad: Tensor) -> None:
        trajectory.iterations.append(b)
        trajectory.embeddings.append(F.normalize(points, dim=-1))
        if b in arrows:
            trajectory.velocities[b] = sphere_velocity(points, -grad)

    for b in range(steps):
        value, grad = gradient(z)
        if wanted and wanted[0] == b:
            snapshot(wanted.pop(0), z, grad)
        z = z - lr * grad
        if project:
            z = F.normalize(z, dim=-1)
        trajectory.costs.append(value.item())
    if wanted:
        snapshot(wanted.pop(0), z, gradient(z)[1])
    return trajectory
