r"""Linear evaluation by a converged, L2-regularised multinomial logistic regression on frozen,
standardised features, its penalty chosen on a validation split of the training features: the
``logistic_probe`` protocol.

Where ``linear_probe`` replays a paper's SGD recipe (a fixed number of epochs, which under-fits
raw Fashion-MNIST pixels: 80.87% against this probe's 84.72%), this probe solves its convex
problem to the optimum by full-batch L-BFGS, so its score depends on the features and the
penalty only.

Reference (SimCLR): Chen, Kornblith, Norouzi and Hinton, "A Simple Framework for Contrastive
Learning of Visual Representations" (ICML 2020), arXiv:2002.05709, appendix B.5: the transfer
tasks' linear evaluation fits an L2-regularised multinomial logistic regression by L-BFGS on
the frozen features, the regularisation chosen on a validation split (following Kornblith,
Shlens and Le, "Do Better ImageNet Models Transfer Better?", CVPR 2019, arXiv:1805.08974).
Here the chosen penalty is then refitted on every training feature.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from benchmarks.protocols.linear_probe import _as_tensors
from benchmarks.protocols.protocol import (
    EvaluationInputs,
    EvaluationProtocol,
    Metric,
    ProtocolOutput,
)
from benchmarks.protocols.svm import standardise
from modules.methods.capabilities import Encoder
from modules.ranges import (
    MAX_WEIGHT_DECAY,
    check_count,
    check_finite_positive,
    check_fraction,
    check_non_negative,
)

#: The most L-BFGS iterations a fit may be given.
MAX_LBFGS_ITERATIONS = 100_000
#: The largest gradient tolerance: above it a fit may stop at its zero start.
MAX_TOLERANCE = 1.0
#: The most weight decays a grid may hold (each is one fit).
MAX_GRID = 100
#: Curvature pairs L-BFGS keeps: twice scipy's L-BFGS-B (10) for ill-conditioned pixel problems,
#: 40 copies of the weights in memory where torch's default (100) keeps 200 (a 1000-class head
#: on 2048 features: 330 MB against 1.6 GB).
HISTORY = 20


def check_logistic_probe_settings(weight_decays: list[float], val_fraction: float,
                                  max_iterations: int, tolerance: float) -> None:
    """A non-empty list of non-negative weight decays (each one fit), a validation fraction in
    (0, 1) (both parts of the training split non-empty), at least one iteration, and a
    positive gradient tolerance: otherwise nothing is chosen, or nothing is fitted."""
    if not isinstance(weight_decays, list) or not 1 <= len(weight_decays) <= MAX_GRID:
        raise ValueError(f"weight_decays must be a list of 1 to {MAX_GRID} weight decays "
                         f"(each >= 0), got {weight_decays!r}")
    for weight_decay in weight_decays:
        check_non_negative("weight_decays", weight_decay, high=MAX_WEIGHT_DECAY)
    check_fraction("val_fraction", val_fraction)
    check_count("max_iterations", max_iterations, high=MAX_LBFGS_ITERATIONS)
    check_finite_positive("tolerance", tolerance, high=MAX_TOLERANCE)


@dataclass(frozen=True)
class LogisticFit:
    """A fitted probe: ``weight`` (C, d), ``bias`` (C,), the L-BFGS ``iterations`` it took, the
    largest entry of the objective's gradient where it stopped (``gradient_max``), and whether
    it stopped on a tolerance rather than on its iteration or evaluation cap (``converged``)."""

    weight: Tensor
    bias: Tensor
    iterations: int
    gradient_max: float
    converged: bool

    def logits(self, x: Tensor) -> Tensor:
        return torch.addmm(self.bias, x, self.weight.T)  # (n, C)


def logistic_objective(weight: Tensor, bias: Tensor, x: Tensor, y: Tensor,
                       weight_decay: float) -> Tensor:
    r"""The probe's objective: mean cross-entropy plus half the weight decay times the squared
    norm of the weights (the bias is not penalised),

    .. math::

        J(W, b) = \frac1n \sum_{i=1}^n -\log \operatorname{softmax}(W x_i + b)_{y_i}
            + \frac{\lambda}{2} \lVert W \rVert_F^2.

    Args:
        weight: (C, d); bias: (C,); x: (n, d); y: (n,) labels in [0, C).
    """
    return F.cross_entropy(torch.addmm(bias, x, weight.T), y) \
        + 0.5 * weight_decay * weight.pow(2).sum()


def fit_logistic_regression(x: Tensor, y: Tensor, num_classes: int, weight_decay: float,
                            max_iterations: int, tolerance: float,
                            start: LogisticFit | None = None) -> LogisticFit:
    r"""The minimiser of :func:`logistic_objective` by full-batch L-BFGS (strong-Wolfe line
    search) from ``start`` (zeros when ``None``), in ``x``'s dtype and on its device.

    The objective is convex (strictly, in the weights, for :math:`\lambda > 0`), so L-BFGS
    reaches its optimum: it stops when the gradient's largest entry is at most ``tolerance``
    (scipy's ``gtol``, scikit-learn's ``tol``), when the objective or the step changes by less
    than a machine epsilon of the dtype (in float32 the rounding of the objective: nothing
    is left to gain there; scipy's 64 epsilons stopped float32 fits at gradients ten times the
    tolerance), or after ``max_iterations`` iterations (with at most twice as many
    evaluations). For :math:`\lambda > 0` it is scikit-learn's
    ``LogisticRegression(C=1 / (lambda n), solver="lbfgs")`` (multinomial, intercept not
    penalised), whose objective :math:`\tfrac12\lVert W\rVert^2 + C\sum_i \ell_i` is
    :math:`C n` times this one.

    Args:
        x: (n, d) features (standardised by the caller); y: (n,) labels in [0, num_classes).

    >>> x = torch.tensor([[-2.0], [-1.0], [1.0], [2.0]], dtype=torch.float64)
    >>> fit = fit_logistic_regression(x, torch.tensor([0, 0, 1, 1]), 2, 0.1, 100, 1e-8)
    >>> fit.logits(x).argmax(1).tolist(), fit.gradient_max <= 1e-8
    ([0, 0, 1, 1], True)
    """
    d = x.shape[1]
    if start is None:
        weight = torch.zeros(num_classes, d, dtype=x.dtype, device=x.device)
        bias = torch.zeros(num_classes, dtype=x.dtype, device=x.device)
    else:
        weight, bias = start.weight.detach().clone(), start.bias.detach().clone()
    weight.requires_grad_(True)
    bias.requires_grad_(True)
    optimiser = torch.optim.LBFGS(
        [weight, bias], lr=1, max_iter=max_iterations, max_eval=2 * max_iterations,
        tolerance_grad=tolerance, tolerance_change=torch.finfo(x.dtype).eps,
        history_size=HISTORY, line_search_fn="strong_wolfe")

    def closure() -> Tensor:
        optimiser.zero_grad()
        loss = logistic_objective(weight, bias, x, y, weight_decay)
        loss.backward()
        return loss

    with torch.enable_grad():
        optimiser.step(closure)
        closure()  # the gradient where it stopped
    gradient_max = max(float(weight.grad.abs().max()), float(bias.grad.abs().max()))
    state = optimiser.state[weight]
    iterations, evaluations = state.get("n_iter", 0), state.get("func_evals", 1)
    converged = gradient_max <= tolerance or (iterations < max_iterations
                                              and evaluations < 2 * max_iterations)
    return LogisticFit(weight.detach(), bias.detach(), iterations, gradient_max, converged)


def validation_split(n: int, val_fraction: float, seed: int) -> tuple[Tensor, Tensor]:
    """``(fit, val)``: indices of a random split of ``n`` training points drawn from ``seed``,
    ``val`` holding ``round(val_fraction * n)`` of them (at least one, and one left to fit).

    >>> fit, val = validation_split(10, 0.2, seed=0)
    >>> len(fit), len(val), sorted(fit.tolist() + val.tolist()) == list(range(10))
    (8, 2, True)
    """
    if n < 2:
        raise ValueError(f"the logistic probe needs at least 2 training points to hold some out "
                         f"for validation, got {n}")
    n_val = min(max(round(val_fraction * n), 1), n - 1)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return order[n_val:], order[:n_val]


@dataclass(frozen=True)
class WeightDecayChoice:
    """The grid's validation accuracies, ``(weight_decay, val_top1, iterations)`` in the order
    they were fitted (strongest penalty first), and the ``weight_decay`` chosen with its
    ``val_top1`` and the validation fit (the refit's start)."""

    grid: list[tuple[float, float, int]]
    weight_decay: float
    val_top1: float
    fit: LogisticFit


def choose_weight_decay(train_x: Tensor, train_y: Tensor, num_classes: int,
                        weight_decays: list[float], val_fraction: float, seed: int,
                        max_iterations: int, tolerance: float) -> WeightDecayChoice:
    """The weight decay of highest accuracy on a held-out ``val_fraction`` of the training
    features (:func:`validation_split` by ``seed``), the probe fitted on the rest, standardised
    by the rest's statistics as the test features are by the training features'; ties go to
    the stronger penalty. Only the training features are read.

    The grid is fitted from the strongest penalty down, each fit starting from the previous
    optimum (a warm start: the optimum moves little from one weight decay to the next).

    Args:
        train_x: (n, d) raw training features, in the dtype and on the device to fit in;
        train_y: (n,) labels in [0, num_classes), on the same device.
    """
    fit_rows, val_rows = (rows.to(train_x.device)
                          for rows in validation_split(len(train_y), val_fraction, seed))
    fit_x, val_x = standardise(train_x[fit_rows], train_x[val_rows])
    fit_y, val_y = train_y[fit_rows], train_y[val_rows]
    grid, best, fit = [], None, None
    for weight_decay in sorted(weight_decays, reverse=True):
        fit = fit_logistic_regression(fit_x, fit_y, num_classes, weight_decay, max_iterations,
                                      tolerance, start=fit)
        accuracy = float((fit.logits(val_x).argmax(1) == val_y).double().mean())
        grid.append((float(weight_decay), accuracy, fit.iterations))
        if best is None or accuracy > best[1]:  # strict: a tie keeps the stronger penalty
            best = (float(weight_decay), accuracy, fit)
    return WeightDecayChoice(grid, *best)


@dataclass(frozen=True)
class LogisticProbeResult:
    """``scores``: ``{"top1": ...}`` (fractions in [0, 1]), ``"top5"`` too with at least 100
    classes; ``choice``: the validation's grid and its pick; ``fit``: the refit on every
    training feature."""

    scores: dict[str, float]
    choice: WeightDecayChoice
    fit: LogisticFit

    def record(self) -> dict:
        """What a result keeps of the choice and the refit, as JSON."""
        return {"weight_decay": self.choice.weight_decay, "val_top1": self.choice.val_top1,
                "validation": [{"weight_decay": wd, "val_top1": acc, "iterations": its}
                               for wd, acc, its in self.choice.grid],
                "iterations": self.fit.iterations, "gradient_max": self.fit.gradient_max,
                "converged": self.fit.converged}


def logistic_probe_accuracy(train_x, train_y, test_x, test_y, weight_decays: list[float],
                            val_fraction: float, max_iterations: int, tolerance: float,
                            seed: int = 0,
                            device: torch.device | str | None = None) -> LogisticProbeResult:
    r"""A multinomial logistic regression on the standardised frozen features, its weight decay
    chosen on a validation split of the training features, refitted on all of them and scored
    on the test features.

    The features are standardised by the training features' mean and standard deviation (a
    constant feature, such as an always-black pixel, is only centred) and the test features by
    the same statistics. The weight decay :math:`\lambda` of ``weight_decays`` whose probe
    scores best on the validation split (:func:`choose_weight_decay`) is refitted on every
    training feature from the validation fit:

    .. math::

        \min_{W \in \mathbb{R}^{C \times d},\, b \in \mathbb{R}^C}\ \frac1n \sum_{i=1}^n
            -\log \frac{\exp(w_{y_i}^\top x_i + b_{y_i})}{\sum_c \exp(w_c^\top x_i + b_c)}
            + \frac{\lambda}{2} \lVert W \rVert_F^2,

    by full-batch L-BFGS (:func:`fit_logistic_regression`). The test split never picks
    anything. It runs on ``device`` (CUDA when there is one) in float32, on the CPU with the
    process's threads (full-batch products are large enough to split): float64 took the same
    iterations and scores on Fashion-MNIST pixels, 2.2 times slower on the CPU. SimCLR
    (arXiv:2002.05709, appendix B.5) evaluates its transfer features this way.

    Args:
        train_x: (n, d) features; train_y: (n,) labels in [0, C); test_x: (m, d); test_y: (m,).

    >>> gen = torch.Generator().manual_seed(0)
    >>> y = torch.arange(60) % 3
    >>> x = torch.randn(60, 5, generator=gen) + 3 * F.one_hot(y, 5)
    >>> out = logistic_probe_accuracy(x[:40], y[:40], x[40:], y[40:], weight_decays=[1e-3, 1e-1],
    ...                               val_fraction=0.25, max_iterations=100, tolerance=1e-6,
    ...                               device="cpu")
    >>> out.scores["top1"] > 0.9, out.choice.weight_decay in (1e-3, 1e-1)
    (True, True)
    """
    check_logistic_probe_settings(weight_decays, val_fraction, max_iterations, tolerance)
    train_x, train_y = _as_tensors(train_x, train_y)
    test_x, test_y = _as_tensors(test_x, test_y)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    num_classes = int(max(train_y.max(), test_y.max())) + 1
    train_x, train_y = train_x.to(device, torch.float32), train_y.to(device)
    choice = choose_weight_decay(train_x, train_y, num_classes, weight_decays, val_fraction,
                                 seed, max_iterations, tolerance)
    train, test = standardise(train_x, test_x.to(device, torch.float32))
    fit = fit_logistic_regression(train, train_y, num_classes, choice.weight_decay,
                                  max_iterations, tolerance, start=choice.fit)
    logits = fit.logits(test).cpu()  # (m, C)
    scores = {"top1": float((logits.argmax(1) == test_y).double().mean())}
    if num_classes >= 100:
        top5 = logits.topk(5, dim=1).indices
        scores["top5"] = float((top5 == test_y[:, None]).any(1).double().mean())
    return LogisticProbeResult(scores, choice, fit)


@dataclass(frozen=True)
class LogisticProbeSettings:
    """``weight_decays``: the grid the validation split chooses the penalty from;
    ``val_fraction``: the share of the training features held out to choose it;
    ``max_iterations``: L-BFGS's iteration cap per fit; ``tolerance``: the largest entry of the
    objective's gradient at which a fit has converged."""

    weight_decays: list[float]
    val_fraction: float
    max_iterations: int
    tolerance: float

    def __post_init__(self) -> None:
        check_logistic_probe_settings(self.weight_decays, self.val_fraction,
                                      self.max_iterations, self.tolerance)


def check_logistic_probe_sizes(settings: LogisticProbeSettings, sizes: dict[str, int]) -> None:
    """Some training features to fit and some to hold out: at least 2."""
    if sizes["train"] < 2:
        raise ValueError(f"needs at least 2 training points to hold some out for validation, "
                         f"got {sizes['train']}")


def run_logistic_probe(settings: LogisticProbeSettings,
                       inputs: EvaluationInputs) -> ProtocolOutput:
    train_x, train_y, test_x, test_y = inputs.features()
    out = logistic_probe_accuracy(train_x, train_y, test_x, test_y, settings.weight_decays,
                                  settings.val_fraction, settings.max_iterations,
                                  settings.tolerance, seed=inputs.seed)
    return ProtocolOutput(metrics={f"logistic_probe_{name}": value
                                   for name, value in out.scores.items()},
                          records={"logistic_probe": out.record()})


LOGISTIC_PROBE = EvaluationProtocol(
    name="logistic_probe",
    summary="an L2-regularised multinomial logistic regression fitted to convergence (L-BFGS) on "
            "the standardised frozen training features, its weight decay chosen on a "
            "validation split of them, scored on the test features",
    settings=LogisticProbeSettings, needs=Encoder, run=run_logistic_probe,
    example={"weight_decays": [1.0e-5, 1.0e-4, 1.0e-3, 1.0e-2], "val_fraction": 0.1,
             "max_iterations": 1000, "tolerance": 1.0e-4},
    check_sizes=check_logistic_probe_sizes,
    # top-5 only with at least 100 classes
    metrics=(Metric("logistic_probe_top1", "Logistic probe top-1 (%)", percent=True),
             Metric("logistic_probe_top5", "Logistic probe top-5 (%)", percent=True)),
)
