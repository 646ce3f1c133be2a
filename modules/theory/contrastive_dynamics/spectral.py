r"""Contrastive learning as spectral clustering on a similarity graph: the synthetic experiment of
Tan et al., "Contrastive Learning is Spectral Clustering on Similarity Graph" (arXiv:2303.15103),
appendix C. Free embeddings :math:`Z \in \mathbb{R}^{n \times 2}` of the vertices of a random
graph :math:`\pi` are trained with InfoNCE on pairs drawn by sampling one out-edge per vertex
(:math:`W \sim \mathbb{P}(\cdot; \pi)`, Definition 2.2 and Lemma 2.3), and compared with the
spectral embedding of :math:`\pi` (Theorem 3.1: InfoNCE with a Gaussian kernel is spectral
clustering on :math:`\pi` with a repulsion term). Its loss, InfoNCE with the Gaussian kernel on
free embeddings, is :func:`modules.losses.gaussian_infonce_loss`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from modules.losses import gaussian_infonce_loss


def stochastic_block_graph(clusters: int, size: int, p: float, q: float,
                           generator: torch.Generator | None = None,
                           dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
    r"""The random similarity graph of arXiv:2303.15103, appendix C: ``clusters`` groups of
    ``size`` vertices; an undirected edge joins two distinct vertices with probability p inside a
    group and q across groups, independently.

    .. math::
        \pi_{uv} = \pi_{vu} \sim \mathrm{Bernoulli}\big(p\, \mathbb{1}_{c(u) = c(v)}
            + q\, \mathbb{1}_{c(u) \ne c(v)}\big), \qquad \pi_{uu} = 0

    Returns:
        ``(adjacency, labels)``: (n, n) symmetric 0/1 matrix and (n,) group of each vertex.

    >>> adjacency, labels = stochastic_block_graph(2, 3, p=1.0, q=0.0)
    >>> adjacency.sum(dim=1).tolist(), labels.tolist()
    ([2.0, 2.0, 2.0, 2.0, 2.0, 2.0], [0, 0, 0, 1, 1, 1])
    """
    n = clusters * size
    labels = torch.arange(clusters).repeat_interleave(size)  # (n,)
    same = labels[:, None] == labels[None, :]
    prob = torch.where(same, torch.tensor(p, dtype=dtype), torch.tensor(q, dtype=dtype))
    upper = torch.triu(torch.rand(n, n, generator=generator, dtype=dtype), diagonal=1)
    draws = upper + upper.T  # (n, n) symmetric uniforms
    adjacency = (draws < prob).to(dtype)
    adjacency.fill_diagonal_(0)
    return adjacency, labels


def out_edge_sampler(adjacency: Tensor) -> Callable[[torch.Generator | None], Tensor]:
    r"""Draws of :math:`W \sim \mathbb{P}(\cdot; \pi)` for a 0/1 graph: one out-edge per vertex,
    uniform over its neighbours (arXiv:2303.15103, Lemma 2.3: the rows of W are independent,
    :math:`W_i \sim \mathcal{M}(1, \pi_i / \sum_j \pi_{ij})`).

    Returns:
        ``sample(generator) -> (n,)``, the neighbour chosen for each vertex.

    >>> sample = out_edge_sampler(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    >>> sample(None).tolist()
    [1, 0]
    """
    degrees = adjacency.sum(dim=1).long()  # (n,)
    if (degrees == 0).any():
        raise ValueError("every vertex needs at least one neighbour")
    neighbours = adjacency.nonzero()[:, 1]  # (nnz,), row-major: vertex 0's first
    offsets = torch.cumsum(degrees, dim=0) - degrees  # (n,)

    def sample(generator: torch.Generator | None = None) -> Tensor:
        pick = (torch.rand(degrees.shape, generator=generator) * degrees).long()  # (n,)
        return neighbours[offsets + pick.clamp_max(degrees - 1)]

    return sample


def infonce_graph_embedding(adjacency: Tensor, dim: int = 2, steps: int = 8000, lr: float = 1.0,
                            temperature: float = 0.5, batch_size: int = 50,
                            generator: torch.Generator | None = None) -> Tensor:
    r"""Free embeddings of the vertices of :math:`\pi` trained with InfoNCE (arXiv:2303.15103,
    appendix C): Z starts standard normal; at each step one out-edge per vertex is sampled
    (:func:`out_edge_sampler`), a batch of ``batch_size`` vertices is drawn, and plain SGD takes
    one step on :func:`gaussian_infonce_loss` of (batch, their sampled neighbours).

    .. math::
        Z \leftarrow Z - \eta\, \nabla_Z \mathcal{L}\big(Z_{B}, Z_{W(B)}\big)

    Returns:
        (n, dim) embeddings.

    >>> adjacency, _ = stochastic_block_graph(2, 5, p=1.0, q=0.0)
    >>> infonce_graph_embedding(adjacency, steps=3, batch_size=4).shape
    torch.Size([10, 2])
    """
    n = adjacency.shape[0]
    sample = out_edge_sampler(adjacency)
    z = torch.randn(n, dim, generator=generator, dtype=adjacency.dtype)
    for _ in range(steps):
        positives = sample(generator)  # (n,)
        batch = torch.randperm(n, generator=generator)[:batch_size]  # (B,)
        live = z.clone().requires_grad_(True)
        loss = gaussian_infonce_loss(live[batch], live[positives[batch]], temperature)
        (grad,) = torch.autograd.grad(loss, live)
        z = z - lr * grad
    return z


def spectral_embedding(adjacency: Tensor, dim: int) -> Tensor:
    r"""Spectral embedding of a graph (Ng, Jordan & Weiss): the eigenvectors of the ``dim``
    smallest eigenvalues of the normalised Laplacian, rows scaled to unit norm,

    .. math::
        \mathcal{L}_{\mathrm{sym}} = I - D^{-1/2} \pi D^{-1/2}, \qquad
        U = [u_1, \dots, u_{\mathrm{dim}}], \quad \text{row } i \text{ of } U / \lVert U_i\rVert

    Returns:
        (n, dim).

    >>> adjacency, _ = stochastic_block_graph(2, 3, p=1.0, q=0.0)
    >>> u = spectral_embedding(adjacency, 2)  # two components: two points
    >>> torch.unique(u.round(decimals=6), dim=0).shape[0]
    2
    """
    inv_sqrt_degree = adjacency.sum(dim=1).rsqrt()  # (n,)
    laplacian = torch.eye(adjacency.shape[0], dtype=adjacency.dtype) - (
        inv_sqrt_degree[:, None] * adjacency * inv_sqrt_degree[None, :])
    _, vectors = torch.linalg.eigh(laplacian)  # ascending eigenvalues
    return F.normalize(vectors[:, :dim], dim=1)
