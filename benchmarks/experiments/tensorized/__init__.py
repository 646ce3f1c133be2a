"""The experiments of "Cluster Specific Representation Learning" (Sabanayagam, Al-Dabooni, Esser,
arXiv:2412.03471): the Figure 2/7 table and the TVAE, TCL, TRBM and under-estimated-k
experiments (Figures 3, 4, 5 and 11). :func:`run` schedules the per-seed jobs (:mod:`.seeds`)
and assembles the report; :mod:`.tables` turns the numbers into tables and notes, :mod:`.figures`
draws the figures; every setting is in the suite file ``benchmarks/tensorized.yaml``.
"""

from benchmarks.experiments.tensorized.run import run

__all__ = ["run"]
