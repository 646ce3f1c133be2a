"""TransFusion's Theorem 2 (Liu et al., "TransFusion: Contrastive Learning with Attention
Layers", section 3.2, Figure 3): the map of the sharpness-increment bound γ(ρ, ε) against the
per-block sharpness of standalone models trained on generated ``subspaces`` data. :func:`run`
assembles the report; :mod:`.measure` computes the map and trains and measures the models,
:mod:`.tables` turns them into tables and notes, :mod:`.figures` draws the figures; every
setting is in the suite file ``benchmarks/transfusion_theorem2.yaml``. ``clusterbench bench
transfusion_theorem2`` (``--fast`` for the smoke budget) is the one way to run it.
"""

from benchmarks.experiments.transfusion_theorem2.run import run

__all__ = ["run"]
