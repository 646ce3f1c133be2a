"""Invariant attention: "Invariant Attention: Provable Clustering Under Transformations"
(anonymous ICLR submission, no arXiv id). Experiment 1 (invariant against kernel attention on
SE(2)-transformed digits), Experiment 2 (the invariant mean of transformed 3s), Figure 2 (kernel
attention collapsing Gaussian blobs) and the wall time of kappa_max against n. :func:`run`
computes the tables and notes (:mod:`.run`), :mod:`.figures` draws the figures; every setting is
in the suite file ``benchmarks/invariant_attention.yaml``.
"""

from benchmarks.experiments.invariant_attention.run import run

__all__ = ["run"]
