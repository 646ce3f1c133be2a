"""Evaluation protocols shared by every method: ``from benchmarks.protocols import ...``."""

from benchmarks.protocols.clustering import cluster_scores
from benchmarks.protocols.features import extract_features
from benchmarks.protocols.fusion import layer_affinities, per_layer_fusion
from benchmarks.protocols.knn import knn_accuracy
from benchmarks.protocols.linear_probe import linear_probe_accuracy
from benchmarks.protocols.svm import svm_accuracy

__all__ = ["cluster_scores", "extract_features", "knn_accuracy", "layer_affinities",
           "linear_probe_accuracy", "per_layer_fusion", "svm_accuracy"]
