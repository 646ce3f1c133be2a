"""Speed benchmarks (``python -m benchmarks.perf.<name>``): each prints a ratio against a
baseline measured in the same run, with the machine, seeds and budget beside every number."""
