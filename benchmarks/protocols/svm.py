r"""Linear SVM on frozen, standardised features (TransFusion's Table 3 protocol): the ``svm``
protocol.

References: Liu et al., "TransFusion: Contrastive Learning with Attention Layers" (a submission
under double-blind review, no arXiv id), Table 3; it follows Li, Zhou, Xiong and Hoi,
"Prototypical Contrastive Learning of Unsupervised Representations" (ICLR 2021),
arXiv:2005.04966.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from benchmarks.protocols.linear_probe import _as_tensors
from benchmarks.protocols.protocol import (
    EvaluationInputs,
    EvaluationProtocol,
    Metric,
    ProtocolOutput,
)
from modules.methods.capabilities import Encoder
from modules.ranges import check_finite_positive

#: The SVM's largest ``C``: beyond it the margin is hard to within float precision.
MAX_SVM_C = 1e6

#: Who fits the SVM: this module's full-batch solver on the device, or scikit-learn's LinearSVC.
SVM_BACKENDS = ("torch", "sklearn")


def check_svm_settings(C: float = 1.0, backend: str = "torch") -> None:
    """The inverse regularisation strength ``C`` is positive (scikit-learn refuses any other,
    but only when the SVM is fitted, after the training), and ``backend`` is one of
    :data:`SVM_BACKENDS`."""
    check_finite_positive("C", C, high=MAX_SVM_C)
    if not isinstance(backend, str) or backend not in SVM_BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(SVM_BACKENDS)}, got {backend!r}")


def standardise(train_x: Tensor, test_x: Tensor) -> tuple[Tensor, Tensor]:
    """Both splits centred and scaled by the training split's mean and standard deviation
    (ddof 0; a constant feature is only centred), as scikit-learn's ``StandardScaler``."""
    mean = train_x.mean(0)
    std = train_x.std(0, correction=0)
    std = torch.where(std < 10 * torch.finfo(std.dtype).eps, torch.ones_like(std), std)
    return (train_x - mean) / std, (test_x - mean) / std


#: The most elements the per-class generalised Hessians may hold, ``K (d+1)^2`` (1 GiB of
#: float64), for :func:`fit_linear_svm` to solve each Newton direction exactly.
EXACT_HESSIAN_ELEMENTS = 2**27
#: Newton direction solvers of :func:`fit_linear_svm`.
DIRECTIONS = ("auto", "exact", "cg")


def fit_linear_svm(x: Tensor, y: Tensor, num_classes: int, C: float = 1.0, tol: float = 1e-4,
                   max_newton: int = 100, max_cg: int = 500, direction: str = "auto") -> Tensor:
    r"""One-vs-rest linear SVMs with the squared hinge loss, all classes at once: for each class
    :math:`k`, with :math:`y_{ik} = +1` if :math:`y_i = k` else :math:`-1`,

    .. math::

        \min_{w_k \in \mathbb{R}^{d+1}} \ \tfrac12 \lVert w_k \rVert^2
            + C \sum_i \max\bigl(0,\ 1 - y_{ik}\, w_k^\top \tilde x_i\bigr)^2,
        \qquad \tilde x_i = (x_i, 1),

    scikit-learn's ``LinearSVC`` (liblinear, ``loss="squared_hinge"``, ``penalty="l2"``)
    objective with ``intercept_scaling=1``: the intercept is the weight of a constant feature,
    penalised with the others. The objective is convex and once differentiable with a
    piecewise-constant generalised Hessian :math:`I + 2C \tilde X_A^\top \tilde X_A` (the rows
    :math:`A` inside the margin), so Newton's method solves it in few full-batch steps, a
    step size by an exact line search (the objective along the direction needs no pass over
    the data), until each class's gradient norm is ``tol`` times its first. Each direction
    comes from one of two solvers (``direction``):

    * ``"exact"``: each class's (d+1, d+1) Hessian factorised (Cholesky), its Gram matrix
      updated with the rows that entered or left the margin, whichever way takes fewest rows.
      It makes the SVM affordable on a CPU, where the ill-conditioned pixels of Fashion-MNIST
      need hundreds of Hessian products per ``"cg"`` step.
    * ``"cg"``: truncated Newton, liblinear's primal solver (TRON) without the trust region:
      conjugate gradient on Hessian-vector products (two matrix products of the data with a
      (d+1, K) matrix), to a tenth of the gradient's norm. It holds no (d+1, d+1) matrix per
      class, and on a GPU its products take microseconds.
    * ``"auto"`` (default): ``"exact"`` in float64 when the K Hessians hold at most
      :data:`EXACT_HESSIAN_ELEMENTS` elements, else ``"cg"`` (float32 Cholesky factors of a
      Hessian whose condition number reaches :math:`10^7` are not to be trusted).

    Args:
        x: (n, d) features (standardised by the caller), in the dtype the solver should use.
        y: (n,) labels in ``[0, num_classes)``.
        num_classes: K; a class absent from ``y`` gets a classifier that says "not this one".
        C: the loss's weight against the penalty (LinearSVC's ``C``).
        direction: how each Newton direction is solved, one of :data:`DIRECTIONS`.

    Returns:
        (d + 1, K) weights; the last row is the intercept. The decision function of class
        :math:`k` is :math:`w_k^\top (x, 1)`.

    >>> x = torch.tensor([[-2.0], [-1.0], [1.0], [2.0]], dtype=torch.float64)
    >>> w = fit_linear_svm(x, torch.tensor([0, 0, 1, 1]), 2)
    >>> torch.cat([x, torch.ones(4, 1, dtype=x.dtype)], 1).matmul(w).argmax(1).tolist()
    [0, 0, 1, 1]
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    n = len(y)
    xa = torch.cat([x, torch.ones(n, 1, dtype=x.dtype, device=x.device)], 1)  # (n, d+1)
    signs = -torch.ones(n, num_classes, dtype=x.dtype, device=x.device)
    signs[torch.arange(n, device=x.device), y] = 1.0  # (n, K)
    w = torch.zeros(xa.shape[1], num_classes, dtype=x.dtype, device=x.device)  # (d+1, K)
    z = torch.zeros(n, num_classes, dtype=x.dtype, device=x.device)  # xa @ w
    if direction == "auto":
        fits = num_classes * xa.shape[1] ** 2 <= EXACT_HESSIAN_ELEMENTS
        direction = "exact" if fits and x.dtype == torch.float64 else "cg"
    if direction == "exact":
        grams = _ActiveGrams(xa, num_classes)
    else:
        spectrum, basis = torch.linalg.eigh(xa.T @ xa)  # the preconditioner's, once
    first_norm = None
    for _ in range(max_newton):
        slack = (1 - signs * z).clamp_min(0)  # (n, K), positive inside the margin
        grad = w - 2 * C * xa.T @ (signs * slack)  # (d+1, K)
        norm = grad.norm(dim=0)
        if first_norm is None:
            first_norm = norm
        todo = norm > tol * first_norm
        if not bool(todo.any()):
            break
        if direction == "exact":
            step = _exact_direction(grams.update(slack > 0), grad * todo, C)
        else:
            active = (slack > 0).to(x.dtype)  # (n, K)
            step = _newton_direction(xa, active, grad * todo, C, max_cg, basis, spectrum)
        q = xa @ step  # (n, K)
        t = _exact_step(w, step, z, q, signs, C)
        w = w + step * t
        z = z + q * t
    return w


class _ActiveGrams:
    """Each class's Gram matrix of the rows inside its margin, :math:`\tilde X_{A_k}^\top
    \tilde X_{A_k}`, kept from one Newton step to the next: (K, d+1, d+1)."""

    def __init__(self, xa: Tensor, num_classes: int) -> None:
        self.xa = xa
        n, width = xa.shape
        self.active = torch.zeros(n, num_classes, dtype=torch.bool, device=xa.device)
        self.grams = torch.zeros(num_classes, width, width, dtype=xa.dtype, device=xa.device)
        self._all: Tensor | None = None  # the Gram matrix of every row, when first needed
        self.ways: list[str] = []  # how each class's matrix was brought up to date, in order

    def _gram(self, rows: Tensor) -> Tensor:
        part = self.xa[rows]
        return part.T @ part

    def update(self, active: Tensor) -> Tensor:
        n = len(active)
        for k in range(active.shape[1]):
            now, before = active[:, k], self.active[:, k]
            changed = now ^ before
            count_now = int(now.sum())
            # rows multiplied; the Gram matrix of all rows, built once, serves every class
            costs = {"update": int(changed.sum()), "rebuild": count_now,
                     "complement": n - count_now + (n // len(self.grams) if self._all is None
                                                    else 0)}
            how = min(costs, key=costs.get)
            self.ways.append(how)
            if how == "update":
                if costs["update"]:
                    self.grams[k] += self._gram(changed & now) - self._gram(changed & before)
            elif how == "rebuild":
                self.grams[k] = self._gram(now)
            else:
                if self._all is None:
                    self._all = self.xa.T @ self.xa
                self.grams[k] = self._all - self._gram(~now)
        self.active = active.clone()
        return self.grams


def _exact_direction(grams: Tensor, grad: Tensor, C: float) -> Tensor:
    r""":math:`p_k = -(I + 2C\, \tilde X_{A_k}^\top \tilde X_{A_k})^{-1} g_k` for every class
    at once, by Cholesky factors of the (K, d+1, d+1) Hessians (symmetric, eigenvalues at
    least 1)."""
    eye = torch.eye(grams.shape[1], dtype=grams.dtype, device=grams.device)
    factor = torch.linalg.cholesky(eye + 2 * C * grams)
    return -torch.cholesky_solve(grad.T.unsqueeze(-1), factor).squeeze(-1).T


def _exact_step(w: Tensor, p: Tensor, z: Tensor, q: Tensor, signs: Tensor, C: float,
                iterations: int = 30) -> Tensor:
    r"""Each class's minimiser :math:`t_k \ge 0` of the objective along the direction,
    :math:`\varphi(t) = \tfrac12\lVert w + t p\rVert^2 + C\sum_i \max(0, 1 - y_i(z_i + t
    q_i))^2` with ``z = X w`` and ``q = X p`` already at hand, so no pass over the data:
    :math:`\varphi'` is increasing and piecewise linear, and Newton's method on it, kept inside
    the bracket of the sign change (bisection when it leaves it), ends on its root."""
    wp, pp = (w * p).sum(0), (p * p).sum(0)
    sq = signs * q  # (n, K)
    base = 1 - signs * z

    def derivatives(t: Tensor) -> tuple[Tensor, Tensor]:
        slack = (base - t * sq).clamp_min(0)
        first = wp + t * pp - 2 * C * (sq * slack).sum(0)
        second = pp + 2 * C * (sq * sq * (slack > 0)).sum(0)
        return first, second

    low = torch.zeros_like(pp)
    high = torch.full_like(pp, float("inf"))
    t = torch.ones_like(pp)
    for _ in range(iterations):
        first, second = derivatives(t)
        low = torch.where(first < 0, t, low)
        high = torch.where(first > 0, t, high)
        newton = t - first / second.clamp_min(torch.finfo(t.dtype).tiny)
        inside = (newton > low) & (newton < high)
        bisect = torch.where(torch.isinf(high), 2 * t, (low + high) / 2)
        t_next = torch.where(inside, newton, bisect)
        if bool(((t_next - t).abs() <= 1e-10 * t.abs().clamp_min(1)).all()):
            return t_next
        t = t_next
    return t


def _newton_direction(xa: Tensor, active: Tensor, grad: Tensor, C: float, max_cg: int,
                      basis: Tensor, spectrum: Tensor) -> Tensor:
    r"""Preconditioned conjugate gradient on :math:`(I + 2C \tilde X^\top D_k \tilde X)\, p_k =
    -g_k` for every class ``k`` at once, to a residual of a tenth of the gradient's norm (the
    inexact Newton step TRON takes). The preconditioner replaces :math:`D_k` by its mean
    :math:`\rho_k` (the fraction of rows inside class ``k``'s margin):
    :math:`(I + 2C\rho_k \tilde X^\top \tilde X)^{-1}`, applied through the eigenvectors
    ``basis`` and eigenvalues ``spectrum`` of :math:`\tilde X^\top \tilde X`. It is exact at
    the first step (every row inside the margin) and takes the features' correlations, which
    make the unpreconditioned system ill-conditioned, out of the iteration."""
    def hessian_times(v: Tensor) -> Tensor:
        return v + 2 * C * xa.T @ (active * (xa @ v))

    scale = 1.0 / (1.0 + 2 * C * spectrum[:, None] * active.mean(0))  # (d+1, K)

    def precondition(v: Tensor) -> Tensor:
        return basis @ (scale * (basis.T @ v))

    tiny = torch.finfo(grad.dtype).tiny
    p = torch.zeros_like(grad)
    r = -grad
    z = precondition(r)
    d = z
    rz = (r * z).sum(0)
    stop = 0.01 * (r * r).sum(0)
    for _ in range(max_cg):
        running = (r * r).sum(0) > stop
        if not bool(running.any()):
            break
        hd = hessian_times(d)
        alpha = torch.where(running, rz / (d * hd).sum(0).clamp_min(tiny), 0.0)
        p = p + alpha * d
        r = r - alpha * hd
        z = precondition(r)
        rz_new = (r * z).sum(0)
        d = z + (rz_new / rz.clamp_min(tiny)) * d
        rz = rz_new
    return p


def svm_accuracy(train_x, train_y, test_x, test_y, C: float = 1.0, backend: str = "torch",
                 max_iter: int = 5000, seed: int = 0,
                 device: torch.device | str | None = None) -> float:
    """Top-1 accuracy of a linear SVM (one-vs-rest, squared hinge, L2 penalty, ``C``) trained on
    standardised training features; the test features are standardised with the training
    statistics. TransFusion (Liu et al.) evaluates its embeddings this way, following Li et al.
    2020 (arXiv:2005.04966).

    ``backend="torch"``: :func:`fit_linear_svm` on ``device`` (CUDA when there is one), in
    float64 on the CPU and float32 on a GPU. ``backend="sklearn"``: scikit-learn's
    ``LinearSVC(C=C, max_iter=max_iter, random_state=seed)`` on the CPU in float64. Both solve
    the same problem; they agree to within a fraction of a point of accuracy, not bit for bit.
    """
    check_svm_settings(C, backend)
    train_x, train_y = _as_tensors(train_x, train_y)
    test_x, test_y = _as_tensors(test_x, test_y)
    if backend == "sklearn":
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        from sklearn.svm import LinearSVC

        model = make_pipeline(StandardScaler(),
                              LinearSVC(C=C, max_iter=max_iter, random_state=seed))
        model.fit(train_x.numpy().astype(np.float64), train_y.numpy())
        return float((model.predict(test_x.numpy().astype(np.float64)) == test_y.numpy()).mean())
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    train, test = standardise(train_x.to(device, dtype), test_x.to(device, dtype))
    classes = torch.unique(train_y)  # LinearSVC's classes: those seen in training
    index = torch.searchsorted(classes, train_y)
    w = fit_linear_svm(train, index.to(device), len(classes), C)
    scores = torch.cat([test, torch.ones(len(test), 1, dtype=dtype, device=device)], 1) @ w
    predicted = classes[scores.argmax(1).cpu()]
    return float((predicted == test_y).double().mean())


@dataclass(frozen=True)
class SvmSettings:
    """``C``: LinearSVC's inverse regularisation strength (> 0); ``backend``: one of
    :data:`SVM_BACKENDS` (``torch``: :func:`fit_linear_svm` on the device; ``sklearn``:
    LinearSVC itself)."""

    C: float
    backend: str

    def __post_init__(self) -> None:
        check_svm_settings(self.C, self.backend)


def run_svm(settings: SvmSettings, inputs: EvaluationInputs) -> ProtocolOutput:
    train_x, train_y, test_x, test_y = inputs.features()
    return ProtocolOutput(metrics={"svm_top1": svm_accuracy(
        train_x, train_y, test_x, test_y, C=settings.C, backend=settings.backend,
        seed=inputs.seed)})


SVM = EvaluationProtocol(
    name="svm",
    summary="a linear SVM (one-vs-rest, squared hinge) on the standardised frozen training "
            "features, scored on the test features",
    settings=SvmSettings, needs=Encoder, run=run_svm,
    example={"C": 1.0, "backend": "torch"},
    metrics=(Metric("svm_top1", "SVM top-1 (%)", percent=True),),
)
