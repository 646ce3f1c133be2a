"""Evaluation protocols shared by every method: ``from benchmarks.protocols import ...``."""

from benchmarks.protocols.features import extract_features
from benchmarks.protocols.knn import knn_accuracy
from benchmarks.protocols.linear_probe import linear_probe_accuracy
from benchmarks.protocols.svm import svm_accuracy

__all__ = ["extract_features", "knn_accuracy", "linear_probe_accuracy", "svm_accuracy"]
