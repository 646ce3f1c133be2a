"""A cluster-specific model's own clustering of the test split, scored against the labels: the
``assignment`` protocol. It runs on every model that assigns clusters (a
:class:`~modules.methods.capabilities.ClusterAssigner`) without a suite naming it.

Reference: Sabanayagam, Al-Dabooni and Esser, "Cluster Specific Representation Learning"
(preprint), arXiv:2412.03471, eq. 2 (the assignment: the cluster of smallest loss) and the ARI of
its section IV.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.protocols.features import extract_features
from benchmarks.protocols.protocol import (
    EvaluationInputs,
    EvaluationProtocol,
    Metric,
    ProtocolOutput,
)
from modules.methods.capabilities import ClusterAssigner


def assignment_ari(model: ClusterAssigner, datamodule) -> float:
    """ARI of the model's arg-min-loss assignment (eq. 2 of the cluster-specific models) of the
    test split against its labels."""
    from sklearn.metrics import adjusted_rand_score

    clusters, labels = extract_features(model.assign, datamodule.test_dataloader())
    return float(adjusted_rand_score(labels.numpy(), clusters.long().numpy()))


@dataclass(frozen=True)
class AssignmentSettings:
    """No settings: the model's own ``assign``."""


def run_assignment(settings: AssignmentSettings, inputs: EvaluationInputs) -> ProtocolOutput:
    return ProtocolOutput(metrics={"assignment_ari": assignment_ari(inputs.model,
                                                                    inputs.datamodule)})


ASSIGNMENT = EvaluationProtocol(
    name="assignment",
    summary="a cluster-specific model's own assignment of the test split against the labels "
            "(ARI)",
    settings=AssignmentSettings, needs=ClusterAssigner, run=run_assignment,
    metrics=(Metric("assignment_ari", "Assignment ARI (eq. 2)", percent=False,
                    bounds=(-0.5, 1.0)),),
    automatic=True,
)
