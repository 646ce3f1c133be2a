"""Suites and reports: suite files, the runner of a suite's runs and experiments, the
evaluation of trained models and the leaderboards. Above the search and the run layer."""
