"""Evaluation protocols shared by every method: ``from benchmarks.protocols import ...``.

``PROTOCOLS`` is the one registry: a suite's ``evaluation`` key -> its
:class:`~benchmarks.protocols.protocol.EvaluationProtocol`. Its order is the order protocols run
in and of their leaderboard columns.
"""

from benchmarks.protocols.assignment import ASSIGNMENT
from benchmarks.protocols.augmented_probe import AUGMENTED_PROBE, augmented_probe_accuracy
from benchmarks.protocols.clustering import CLUSTER, cluster_scores
from benchmarks.protocols.features import extract_features
from benchmarks.protocols.fusion import PER_LAYER, layer_affinities, per_layer_fusion
from benchmarks.protocols.knn import KNN, knn_accuracy
from benchmarks.protocols.linear_probe import LINEAR_PROBE, linear_probe_accuracy
from benchmarks.protocols.logistic_probe import LOGISTIC_PROBE, logistic_probe_accuracy
from benchmarks.protocols.protocol import EvaluationProtocol, Metric, ProtocolOutput
from benchmarks.protocols.svm import SVM, svm_accuracy
from benchmarks.protocols.tsne import TSNE

PROTOCOLS: dict[str, EvaluationProtocol] = {
    "linear_probe": LINEAR_PROBE,
    "augmented_probe": AUGMENTED_PROBE,
    "logistic_probe": LOGISTIC_PROBE,
    "svm": SVM,
    "knn": KNN,
    "cluster": CLUSTER,
    "tsne": TSNE,
    "per_layer": PER_LAYER,
    "assignment": ASSIGNMENT,
}

__all__ = ["PROTOCOLS", "EvaluationProtocol", "Metric", "ProtocolOutput",
           "augmented_probe_accuracy", "cluster_scores", "extract_features", "knn_accuracy",
           "layer_affinities", "linear_probe_accuracy", "logistic_probe_accuracy",
           "per_layer_fusion", "svm_accuracy"]
