"""Invariant attention: kernel attention whose similarity and averaging are invariant to SE(2).

"Invariant Attention: Provable Clustering Under Transformations" (anonymous ICLR submission, no
arXiv id), batched in torch so that it runs on
the CPU and, unchanged, on a GPU (the paper parallelised its kernels with CuPy).

- :func:`se2_warp`: rotation about the centre and translation, Keys' cubic convolution (sec. 2.1);
- :func:`invariant_similarity`: :math:`\\kappa^{\\max}` (eq. 2.2) by batched registration;
- :func:`invariant_mean`: Algorithm 1 (eq. 2.3-2.7, greedy smoothing);
- :func:`invariant_attention`: W from :math:`\\kappa^{\\max}`, images replaced by invariant means;
- :func:`kernel_attention`: the baseline of eq. 2.1 (blurring mean shift).
"""

from modules.theory.invariant_attention.attention import (
    AttentionResult,
    InvariantMean,
    column_normalise,
    invariant_attention,
    invariant_mean,
    invariant_means,
    kernel_attention,
    rbf_similarity,
)
from modules.theory.invariant_attention.registration import (
    InvariantSimilarity,
    Registration,
    invariant_similarity,
    register,
)
from modules.theory.invariant_attention.warp import (
    gaussian_smooth,
    keys_cubic,
    se2_warp,
    unit_normalise,
)

__all__ = ["AttentionResult", "InvariantMean", "InvariantSimilarity", "Registration",
           "column_normalise", "gaussian_smooth", "invariant_attention", "invariant_mean",
           "invariant_means", "invariant_similarity", "kernel_attention", "keys_cubic",
           "rbf_similarity", "register", "se2_warp", "unit_normalise"]
