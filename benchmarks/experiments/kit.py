"""What every paper experiment shares, written once."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """The mean and the *sample* standard deviation (ddof 1, as the leaderboards use) of the
    finite-or-infinite values, NaNs left out; the std of a single value is 0, and both are NaN
    when no value is left.

    >>> mean_std([1.0, 2.0, 3.0])
    (2.0, 1.0)
    >>> mean_std([4.0, float("nan")])
    (4.0, 0.0)
    >>> [math.isnan(v) for v in mean_std([float("nan")])]
    [True, True]
    """
    array = np.asarray(values, dtype=float)
    array = array[~np.isnan(array)]
    if array.size == 0:
        return math.nan, math.nan
    return float(array.mean()), float(array.std(ddof=1)) if array.size > 1 else 0.0
