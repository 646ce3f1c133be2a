"""Linear SVM on frozen, standardised features (TransFusion's Table 3 protocol)."""

from __future__ import annotations

import numpy as np

from benchmarks.protocols.linear_probe import _as_tensors
from modules.ranges import check_positive


def check_svm_settings(C: float = 1.0) -> None:
    """The inverse regularisation strength ``C`` is positive (scikit-learn refuses any other,
    but only when the SVM is fitted, after the training)."""
    check_positive("C", C)


def svm_accuracy(train_x, train_y, test_x, test_y, C: float = 1.0, max_iter: int = 5000,
                 seed: int = 0) -> float:
    """Top-1 accuracy of a linear SVM (scikit-learn's ``LinearSVC``, one-vs-rest, squared hinge)
    trained on standardised training features; the test features are standardised with the
    training statistics. TransFusion (Liu et al.) evaluates its embeddings this way, following
    Li et al. 2020 (arXiv:2005.04966).
    """
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import LinearSVC

    check_svm_settings(C)
    train_x, train_y = _as_tensors(train_x, train_y)
    test_x, test_y = _as_tensors(test_x, test_y)
    model = make_pipeline(StandardScaler(), LinearSVC(C=C, max_iter=max_iter, random_state=seed))
    model.fit(train_x.numpy().astype(np.float64), train_y.numpy())
    return float((model.predict(test_x.numpy().astype(np.float64)) == test_y.numpy()).mean())
