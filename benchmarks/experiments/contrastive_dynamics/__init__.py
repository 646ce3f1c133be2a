"""Calder & Lee, "Understanding Contrastive Learning through Variational Analysis and Neural
Network Optimization Perspectives" (arXiv:2503.10812): network against free-particle NT-Xent
dynamics (Figures 5-6), the population cost (Figure 3), the neural kernel (Propositions 4.3-4.4)
and imbalanced clusters (Remark 4.4); with Tan et al., "Contrastive Learning is Spectral
Clustering on Similarity Graph" (arXiv:2303.15103), appendix C. :func:`run` computes the tables
and notes (:mod:`.run`), :mod:`.figures` draws the figures; every setting is in the suite file
``benchmarks/contrastive_dynamics.yaml``.
"""

from benchmarks.experiments.contrastive_dynamics.run import run

__all__ = ["run"]
