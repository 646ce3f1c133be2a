"""The mean and sample standard deviation every table of the project reports, computed once.

The leaderboards, the paper experiments' tables and the speed benchmarks all say "mean ± std";
one function says what that std is (the *sample* std, ddof 1) so that no two tables can disagree
on it. Formatting stays with the table that prints it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable


def mean_std(values: Iterable[float], *, omit_nan: bool = False,
             std_of_one: float | None = None) -> tuple[float, float | None]:
    r"""The mean and the *sample* standard deviation of ``values``:

    .. math::

        \bar x = \frac{1}{n} \sum_i x_i, \qquad
        s = \sqrt{\frac{1}{n - 1} \sum_i (x_i - \bar x)^2}

    (correctly rounded: :func:`statistics.fmean` and :func:`statistics.stdev`). One value has
    no sample std: ``std_of_one`` stands for it (None, unless a table wants 0.0 there).
    ``omit_nan`` leaves NaNs out (a seed whose statistic is undefined); with no value left,
    both are NaN. An infinite value makes the mean infinite and the std NaN.

    >>> mean_std([1.0, 2.0, 3.0])
    (2.0, 1.0)
    >>> mean_std([4.0])
    (4.0, None)
    >>> mean_std([4.0, float("nan")], omit_nan=True, std_of_one=0.0)
    (4.0, 0.0)
    """
    data = [float(v) for v in values]
    if omit_nan:
        data = [v for v in data if not math.isnan(v)]
    if not data:
        return math.nan, math.nan
    if not all(math.isfinite(v) for v in data):
        # statistics' exact sums take no infinity; the float sum says inf, or NaN for inf - inf
        return sum(data) / len(data), (math.nan if len(data) > 1 else std_of_one)
    return statistics.fmean(data), (statistics.stdev(data) if len(data) > 1 else std_of_one)
