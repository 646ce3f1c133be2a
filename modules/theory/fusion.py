r"""TransFusion's fusion analysis: the sharpness of an affinity matrix (Definition 1), the
sharpness-increment bound of Theorem 2, and the per-layer fusion protocol of Tables 1-2.

Reference: Liu et al., "TransFusion: Contrastive Learning with Attention Layers" (a submission
under double-blind review, no arXiv id): section 2, eq. 1-2 (the blocks); section 3, eq. 6
(:math:`\rho`), Definition 1 (sharpness), section 3.2 (the noise :math:`\varepsilon`, with
:math:`\delta` and :math:`\Delta`), Theorem 2 and its proof in appendix D; section 5.1 and
Table 2 (silhouette of every layer's output).

A TransFusion block :math:`\ell` computes the affinity :math:`A^\ell = (X^\ell W_Q^\ell)
(X^\ell W_K^\ell)^\top` of its input :math:`X^\ell` (eq. 1) and fuses with the weights
:math:`\mathrm{ReLU}(A^\ell)` (eq. 2). Here "layer" :math:`\ell` is the representation
:math:`X^\ell`, the input of block :math:`\ell` (blocks counted from 0): layer 0 is the model's
input, layer :math:`\ell \ge 1` the output of block :math:`\ell - 1`, and the affinity of layer
:math:`\ell` is :math:`A^\ell`, the one block :math:`\ell` computes on it. A model of :math:`d`
blocks has layers :math:`X^0, \dots, X^{d-1}`: the last is the paper's embedding ("the final
embeddings are :math:`X^{d-1}`") and its affinity the one the loss trains (the paper's
:math:`A^d`, counting blocks from 1 there). Theorem 2 compares consecutive blocks:
:math:`\mathcal{S}(A^{\ell+1}) \ge \gamma\, \mathcal{S}(A^\ell)`.

Definition 1's infimum over :math:`\mathrm{ReLU}(A)` is 0 as soon as one same-cluster pair has
:math:`A_{ij} \le 0` and one different-cluster pair :math:`A_{kh} > 0`, which a trained block
shows in practically every batch; :func:`same_cluster_nonpositive_share` and
:func:`different_cluster_positive_share` say how far a matrix is from Theorem 2's premise
(non-negative scores, every same-cluster one positive) where the sharpness only says 0.
"""

from __future__ import annotations

import numpy as np
from torch import Tensor

#: How :func:`sharpness` turns affinities into the scores whose ratios it takes.
SHARPNESS_SCORES = ("relu", "raw", "square")


def _as_numpy(x) -> np.ndarray:
    if isinstance(x, Tensor):
        return x.detach().cpu().double().numpy() if x.is_floating_point() else x.cpu().numpy()
    return np.asarray(x)


def _pair_scores(affinity: Tensor | np.ndarray, labels: Tensor | np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The same-cluster scores (self-pairs left out) and the different-cluster scores, float64."""
    a = _as_numpy(affinity).astype(np.float64)
    y = _as_numpy(labels).reshape(-1)
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] != len(y):
        raise ValueError(f"affinity must be (n, n) and labels (n,), got {a.shape} and {y.shape}")
    same_label = y[:, None] == y[None, :]
    return a[same_label & ~np.eye(len(y), dtype=bool)], a[~same_label]


def sharpness(affinity: Tensor | np.ndarray, labels: Tensor | np.ndarray,
              scores: str = "relu") -> float:
    r"""Sharpness of an affinity matrix, TransFusion's Definition 1:

    .. math::

        \mathcal{S}(A) = \inf_{\substack{y_i = y_j,\ i \ne j \\ y_k \ne y_h}}
        \frac{[A]_{i,j}}{[A]_{k,h}},

    the worst ratio of a same-cluster score to a different-cluster score. The diagonal
    (:math:`i = j`, a sample with itself) is left out: it is not a pair of points, and in the
    worked examples of appendices C-D it equals the within-cluster entries anyway.

    Negative scores. Definition 1 and its proof (appendix D) assume non-negative scores (the
    entries of the constructed :math:`S^t` are sums of squares and products of non-negative
    projections). A trained block's :math:`A` has negative entries, so ``scores`` says what the
    ratios are taken of:

    - ``"relu"`` (default): :math:`\mathrm{ReLU}(A)`, the fusion weights eq. 2 actually applies
      (a negative score fuses nothing, exactly as a zero one). Then :math:`\mathcal{S} \ge 0`;
      :math:`\mathcal{S} = +\infty` when every different-cluster weight is 0 while some
      same-cluster weight is positive (Theorem 1's block-diagonal case: the block mixes no two
      clusters); :math:`\mathcal{S} = 0` when some same-cluster pair gets no weight while some
      different-cluster pair does.
      On sign-symmetric clusters (a subspace holds :math:`x` and :math:`-x`, and a bilinear
      score changes sign with either point) some same-cluster weight is 0 in practically any
      batch, so this :math:`\mathcal{S}` is 0 there whatever the weights; ``"square"`` is then
      the informative choice.
    - ``"raw"``: the literal infimum over the signed scores of eq. 1; can be negative or
      :math:`-\infty`.
    - ``"square"``: :math:`A^2`, the scores the loss of eq. 5 normalises (it is blind to the
      sign), relevant to the last block, which is trained through :math:`g(A)`.

    Division by zero follows the limit: :math:`x / 0 = \operatorname{sign}(x) \cdot \infty` for
    :math:`x \ne 0`, and the undefined :math:`0 / 0` pairs are left out of the infimum. The
    result is ``nan`` when no ratio is defined: all scores 0, or no same-cluster pair (every
    label once) or no different-cluster pair (one label).

    The infimum is exact and needs no loop over quadruples: for a fixed denominator the ratio is
    monotone in the numerator, and for a fixed numerator monotone in the denominator on each
    sign, so it is attained at the extreme same-cluster scores over the extreme positive and
    negative different-cluster scores and zero.

    Args:
        affinity: (n, n) scores :math:`A` (tensor or array; taken in float64).
        labels: (n,) cluster of each sample.
        scores: one of :data:`SHARPNESS_SCORES`.

    Returns:
        :math:`\mathcal{S}(A)` as a float (possibly ``inf``, ``-inf`` or ``nan``, see above).

    >>> a = np.array([[9.0, 4.0, 1.0, 0.5],
    ...               [4.0, 9.0, 2.0, 1.0],
    ...               [1.0, 2.0, 9.0, 6.0],
    ...               [0.5, 1.0, 6.0, 9.0]])
    >>> sharpness(a, [0, 0, 1, 1])  # min same-cluster 4 over max different-cluster 2
    2.0
    >>> b = np.array([[0.0, 2.0, -1.0], [2.0, 0.0, -3.0], [-1.0, -3.0, 0.0]])
    >>> sharpness(b, [0, 0, 1]), sharpness(b, [0, 0, 1], scores="raw")
    (inf, -2.0)
    """
    if scores not in SHARPNESS_SCORES:
        raise ValueError(f"unknown scores {scores!r}; available: {', '.join(SHARPNESS_SCORES)}")
    same, different = _pair_scores(affinity, labels)
    if scores == "relu":
        same, different = np.maximum(same, 0.0), np.maximum(different, 0.0)
    elif scores == "square":
        same, different = same * same, different * different
    if same.size == 0 or different.size == 0:
        return float("nan")
    numerators = np.array([same.min(), same.max()])
    positive, negative = different[different > 0], different[different < 0]
    denominators = [d.min() for d in (positive, negative) if d.size]
    denominators += [d.max() for d in (positive, negative) if d.size]
    ratios = [n / d for n in numerators for d in denominators]
    if (different == 0).any():  # x / 0 = sign(x) inf; 0 / 0 is undefined and left out
        ratios += [np.sign(n) * np.inf for n in numerators if n != 0]
    return float(min(ratios)) if ratios else float("nan")


def same_cluster_nonpositive_share(affinity: Tensor | np.ndarray,
                                   labels: Tensor | np.ndarray) -> float:
    r"""The share of same-cluster pairs whose affinity is not positive:

    .. math::

        p_{\le 0}(A) = \frac{\big|\{(i, j) : y_i = y_j,\ i \ne j,\ [A]_{i,j} \le 0\}\big|}
                             {\big|\{(i, j) : y_i = y_j,\ i \ne j\}\big|}.

    Such a pair gets no fusion weight from eq. 2's :math:`\mathrm{ReLU}(A)`, and one of them
    makes Definition 1's sharpness of :math:`\mathrm{ReLU}(A)` 0 (or undefined): what that 0
    hides is how many there are. Theorem 2's construction (appendix D) has every same-cluster
    score positive, :math:`p_{\le 0} = 0`. Ordered pairs, the diagonal left out, as in
    :func:`sharpness`.

    Args:
        affinity: (n, n) scores :math:`A` (tensor or array; taken in float64).
        labels: (n,) cluster of each sample.

    Returns:
        :math:`p_{\le 0}(A) \in [0, 1]`; ``nan`` when no two samples share a cluster.

    >>> a = np.array([[5.0, -1.0, 2.0], [4.0, 5.0, 3.0], [2.0, 3.0, 5.0]])
    >>> same_cluster_nonpositive_share(a, [0, 0, 1])  # A_01 = -1; A_10 = 4
    0.5
    """
    same, _ = _pair_scores(affinity, labels)
    return float(np.mean(same <= 0)) if same.size else float("nan")


def different_cluster_positive_share(affinity: Tensor | np.ndarray,
                                     labels: Tensor | np.ndarray) -> float:
    r"""The share of different-cluster pairs whose affinity is positive:

    .. math::

        p_{> 0}(A) = \frac{\big|\{(k, h) : y_k \ne y_h,\ [A]_{k,h} > 0\}\big|}
                          {\big|\{(k, h) : y_k \ne y_h\}\big|}.

    Such a pair fuses two clusters in eq. 2; with none (:math:`p_{>0} = 0`) and some positive
    same-cluster score, the sharpness of :math:`\mathrm{ReLU}(A)` is :math:`+\infty` (Theorem 1's
    block-diagonal case). Beside :func:`same_cluster_nonpositive_share` it says which side of
    Definition 1's ratio a sharpness of 0 comes from. Ordered pairs, as in :func:`sharpness`.

    Args:
        affinity: (n, n) scores :math:`A` (tensor or array; taken in float64).
        labels: (n,) cluster of each sample.

    Returns:
        :math:`p_{>0}(A) \in [0, 1]`; ``nan`` when every sample is in one cluster.

    >>> a = np.array([[5.0, -1.0, 2.0], [0.0, 5.0, -3.0], [2.0, 0.0, 5.0]])
    >>> different_cluster_positive_share(a, [0, 0, 1])  # A_02 = A_20 = 2; A_12 = -3, A_21 = 0
    0.5
    """
    _, different = _pair_scores(affinity, labels)
    return float(np.mean(different > 0)) if different.size else float("nan")


def delta_and_Delta(rho, eps) -> tuple[np.ndarray | float, np.ndarray | float]:
    r"""TransFusion's noise constants of section 3.2 (and appendix D), elementwise:

    .. math::

        \delta = \sqrt{1 - (1-\varepsilon)^2}, \qquad
        \Delta = (1-\varepsilon)\rho - \sqrt{\big(1 - (1-\varepsilon)^2\big)(1-\rho^2)},

    the bound on a noisy point's projection on its own subspace's complement
    (:math:`\tilde x_j^\top u_i^\perp \le \delta`) and on another's
    (:math:`\tilde x_j^\top u_i^\perp \ge \Delta`), for :math:`\rho` of eq. 6 and noise
    :math:`x^\top \tilde x \ge 1 - \varepsilon`. :math:`\Delta > 0` exactly when
    :math:`\rho^2 + (1-\varepsilon)^2 > 1` (the noise angle is smaller than the angle between
    the subspaces' points and the complement).

    Args:
        rho: :math:`\rho \in [0, 1]`, scalar or array.
        eps: :math:`\varepsilon \in [0, 1]`, scalar or array (broadcast with ``rho``).

    Returns:
        ``(delta, Delta)``: floats for scalar inputs, arrays of the broadcast shape otherwise.

    >>> delta, Delta = delta_and_Delta(1.0, 0.2)  # 1 - eps = 0.8: delta = 0.6, Delta = 0.8
    >>> round(delta, 12), round(Delta, 12)
    (0.6, 0.8)
    """
    rho, eps = _check_rho_eps(rho, eps)
    delta = np.sqrt(1.0 - (1.0 - eps) ** 2)
    big_delta = (1.0 - eps) * rho - delta * np.sqrt(1.0 - rho**2)
    return _scalar_or_array(delta), _scalar_or_array(big_delta)


def sharpness_increment_bound(rho, eps, mask_vacuous: bool = True) -> np.ndarray | float:
    r"""TransFusion's Theorem 2: the factor :math:`\gamma` by which some :math:`(W_Q^*,
    W_K^*)` makes each block increase the sharpness of its affinity,
    :math:`\mathcal{S}(A^{\ell+1}) \ge \gamma\, \mathcal{S}(A^\ell)`:

    .. math::

        \gamma = \frac{(\alpha^2 + \beta^2)\,\Delta^2 \beta}
                      {2\alpha(\alpha^2 + \beta^2)\,\delta + 2\alpha^2 \beta\,(1 + \delta^2)},
        \qquad \alpha = 2(\Delta^2 + \delta^2), \quad \beta = 4\Delta\delta,

    with :math:`\delta, \Delta` of :func:`delta_and_Delta`. Appendix D obtains it as
    :math:`\mathcal{S}(S^{t+1}) / \mathcal{S}(S^t)` with :math:`\mathcal{S}(S^t) = \alpha/\beta`.
    Elementwise over numpy arrays (``rho`` and ``eps`` broadcast).

    Where the bound is vacuous the result is ``nan`` (``mask_vacuous``): where
    :math:`\Delta \le 0` (equivalently :math:`\rho^2 + (1-\varepsilon)^2 \le 1`), since the
    proof's lower bound :math:`\tilde x_j^\top u_i^\perp \ge \Delta` then says nothing, and
    the formula's signs flip (it can exceed 1 there for no reason); and at
    :math:`\varepsilon = 0` (:math:`\delta = 0`), where both sharpnesses are infinite (Theorem
    1's noise-free block-diagonal case) and the formula is :math:`0/0` (its limit as
    :math:`\varepsilon \to 0^+` is :math:`\rho^2 / (\rho + 2)`). ``mask_vacuous=False``
    returns the bare formula everywhere (``nan`` only at :math:`0/0`), which is how the
    :math:`\gamma \ge 1` region of Figure 3 can arise: where :math:`\Delta > 0`, the formula
    stays below :math:`(\sqrt 3 - 1)/2 \approx 0.366` (numerically; about 0.34 at most on
    :math:`\rho \le 1`), so it never reaches 1 there.

    Args:
        rho: :math:`\rho \in [0, 1]` of eq. 6, scalar or array.
        eps: noise level :math:`\varepsilon \in [0, 1]`, scalar or array.
        mask_vacuous: ``nan`` where :math:`\Delta \le 0` or :math:`\delta = 0`.

    Returns:
        :math:`\gamma`: a float for scalar inputs, an array of the broadcast shape otherwise.

    >>> round(sharpness_increment_bound(1.0, 0.2), 6)  # delta 0.6, Delta 0.8, alpha 2, beta 1.92
    0.240106
    >>> # rho = 0.5: eps = 0.05 gives Delta > 0; eps = 0.3 gives Delta < 0, vacuous
    >>> np.round(sharpness_increment_bound(np.array([0.5, 0.5]), np.array([0.05, 0.3])), 4)
    array([0.0223,    nan])
    """
    delta, big_delta = (np.asarray(v, dtype=np.float64) for v in delta_and_Delta(rho, eps))
    alpha = 2.0 * (big_delta**2 + delta**2)
    beta = 4.0 * big_delta * delta
    with np.errstate(divide="ignore", invalid="ignore"):
        gamma = ((alpha**2 + beta**2) * big_delta**2 * beta
                 / (2.0 * alpha * (alpha**2 + beta**2) * delta
                    + 2.0 * alpha**2 * beta * (1.0 + delta**2)))
    if mask_vacuous:
        gamma = np.where((big_delta > 0) & (delta > 0), gamma, np.nan)
    return _scalar_or_array(gamma)


def _check_rho_eps(rho, eps) -> tuple[np.ndarray, np.ndarray]:
    rho, eps = np.asarray(rho, dtype=np.float64), np.asarray(eps, dtype=np.float64)
    if np.any((rho < 0) | (rho > 1)) or np.any((eps < 0) | (eps > 1)):
        raise ValueError("rho and eps must lie in [0, 1]")
    return tuple(np.broadcast_arrays(rho, eps))


def _scalar_or_array(x: np.ndarray) -> np.ndarray | float:
    return float(x) if np.ndim(x) == 0 else np.asarray(x)
