"""Experiment functions of ``kind: experiment`` suites (see :mod:`benchmarks.experiment`)."""
