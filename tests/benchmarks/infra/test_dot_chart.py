"""The leaderboard charts' layout, the page's own JavaScript run outside a browser (QuickJS),
against plain Python: the axis spans the values shown (padded, within the metric's bounds),
ticks fall on round steps, and each mark sits where its number says."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.infra.dot_chart import CHART_MATHS, WIDTH, dot_chart_svg

quickjs = pytest.importorskip("quickjs")


@pytest.fixture(scope="module")
def js():
    context = quickjs.Context()
    context.eval(CHART_MATHS)

    def call(function: str, *args):
        return json.loads(context.eval(
            f"JSON.stringify({function}({', '.join(json.dumps(a) for a in args)}))"))
    return call


def naive_limits(runs: list[dict], low, high, pad: float) -> tuple[float, float]:
    """Every value shown, by hand: each mean ± std and paper value ± std."""
    values = []
    for run in runs:
        for mean, std in ((run["mean"], run["std"]), (run["paperMean"], run["paperStd"])):
            if mean is None:
                continue
            spread = 0.0 if std is None else std
            values.append(mean - spread)
            values.append(mean + spread)
    smallest, largest = values[0], values[0]
    for value in values:
        smallest, largest = min(smallest, value), max(largest, value)
    padding = 0.1 * (largest - smallest)
    if padding < pad:
        padding = pad
    left, right = smallest - padding, largest + padding
    if low is not None and left < low:
        left = low
    if high is not None and right > high:
        right = high
    return left, right


def random_runs(rng, count: int, centre: float, spread: float) -> list[dict]:
    runs = []
    for _ in range(count):
        paper = rng.random() < 0.4
        runs.append({"mean": float(centre + spread * rng.standard_normal()),
                     "std": None if rng.random() < 0.3 else float(spread * rng.random()),
                     "paperMean": float(centre + spread * rng.standard_normal()) if paper
                     else None,
                     "paperStd": float(spread * rng.random() / 5) if paper and rng.random() < 0.5
                     else None})
    return runs


CASES = [  # (centre, spread, low, high, pad): accuracies near the top, scores, ranks in hundreds
    (97.0, 2.0, 0.0, 100.0, 0.5), (50.0, 20.0, 0.0, 100.0, 0.5), (0.4, 0.2, -1.0, 1.0, 0.005),
    (300.0, 120.0, None, None, 0.005), (0.9, 0.05, 0.0, 1.0, 0.005)]


@pytest.mark.parametrize(("centre", "spread", "low", "high", "pad"), CASES)
def test_the_axis_spans_the_values_shown_padded_within_the_bounds(js, centre, spread, low, high,
                                                                  pad):
    rng = np.random.default_rng(int(centre * 100))
    for _ in range(40):
        runs = random_runs(rng, int(rng.integers(1, 7)), centre, spread)
        left, right = js("chartLimits", runs, {"low": low, "high": high, "pad": pad})
        expected = naive_limits(runs, low, high, pad)
        assert left == pytest.approx(expected[0], abs=1e-12)
        assert right == pytest.approx(expected[1], abs=1e-12)
        assert left < right


def test_one_value_alone_gets_the_least_padding_and_99_1_stands_apart_from_99_9(js):
    one = [{"mean": 42.0, "std": None, "paperMean": None, "paperStd": None}]
    assert js("chartLimits", one, {"low": 0, "high": 100, "pad": 0.5}) == [41.5, 42.5]
    two = [{"mean": 99.1, "std": 0.1, "paperMean": None, "paperStd": None},
           {"mean": 99.9, "std": 0.0, "paperMean": None, "paperStd": None}]
    left, right = js("chartLimits", two, {"low": 0, "high": 100, "pad": 0.5})
    assert left == pytest.approx(98.5) and right == 100  # not 0 to 100


@pytest.mark.parametrize(("left", "right"), [
    (98.5, 100.0), (77.43, 100.0), (0.07, 0.65), (112.0, 208.0), (-0.31, 0.02), (0.0, 100.0),
    (99.9991, 99.9999), (1200.0, 95000.0)])
def test_ticks_fall_on_round_steps_inside_the_axis(js, left, right):
    ticks = js("chartTicks", left, right)
    values = [t["value"] for t in ticks]
    assert len(values) >= 2
    step = values[1] - values[0]
    nice = [m * 10.0 ** p for p in range(-6, 7) for m in (1, 2, 2.5, 5)]
    # the smallest round step that cuts the axis into at most five intervals
    assert step == pytest.approx(min(s for s in nice if s >= (right - left) / 5 * (1 - 1e-9)))
    for k, value in enumerate(values):
        assert left - 1e-9 * step <= value <= right + 1e-9 * step
        assert value == pytest.approx(values[0] + k * step)
        assert float(ticks[k]["text"]) == pytest.approx(value, abs=step / 1000)
    # no round multiple of the step inside the axis is left out
    assert values[0] - step < left - 1e-9 * step and values[-1] + step > right + 1e-9 * step
    assert len({t["text"] for t in ticks}) == len(ticks)  # as many decimals as the step needs


def test_each_mark_sits_where_its_number_says_a_row_per_run(js):
    runs = [{"mean": 81.5, "std": 2.0, "paperMean": 88.11, "paperStd": 0.09},
            {"mean": 99.1, "std": 3.0, "paperMean": None, "paperStd": None}]
    p = {"low": 0, "high": 100, "pad": 0.5}
    at = js("chartLayout", runs, p, 120)
    left, right = naive_limits(runs, 0, 100, 0.5)
    assert (at["left"], at["right"]) == (pytest.approx(left), pytest.approx(right))

    def x(value: float) -> float:  # the plot spans plotLeft..plotRight; values beyond, at its end
        clipped = min(max(value, left), right)
        return at["plotLeft"] + (clipped - left) / (right - left) * (
            at["plotRight"] - at["plotLeft"])

    assert at["plotLeft"] == 120 + 14 and at["plotRight"] == WIDTH - 16
    first, second = at["rows"]
    assert first["dot"] == pytest.approx(x(81.5)) and second["dot"] == pytest.approx(x(99.1))
    assert first["whisker"] == pytest.approx([x(79.5), x(83.5)])
    assert second["whisker"] == pytest.approx([x(96.1), at["plotRight"]])  # 102.1, cut at 100
    assert first["paper"] == pytest.approx(x(88.11))
    assert first["paperWhisker"] == pytest.approx([x(88.02), x(88.2)])
    assert second["paper"] is None and second["paperWhisker"] is None
    assert second["y"] - first["y"] == 28 and at["axisY"] > second["y"]
    for tick in at["ticks"]:
        assert tick["x"] == pytest.approx(x(float(tick["text"])), abs=1e-6)
    # fewer rows, a shorter chart; a label wider than the cap does not squeeze the plot away
    assert js("chartLayout", runs[:1], p, 120)["height"] == at["height"] - 28
    assert js("chartLayout", runs, p, 10_000)["plotLeft"] == 0.4 * WIDTH + 14


def test_the_svg_carries_each_runs_numbers_for_the_script():
    svg = dot_chart_svg(
        [{"run": "a<b", "label": "a<b (digits)", "mean": 81.5, "std": None, "paper_mean": 88.11,
          "paper_std": 0.09, "text": "81.50"},
         {"run": "c", "label": "c (digits)", "mean": 99.25, "std": 0.5, "paper_mean": None,
          "paper_std": None, "text": "99.25"}],
        low=0.0, high=100.0, min_pad=0.5, axis_label="Linear probe", alt="what it shows")
    assert svg.startswith('<svg class="cb-chart" viewBox="0 0 560 120" role="img" '
                          'aria-label="what it shows" data-low="0.0" data-high="100.0" '
                          'data-pad="0.5">')
    assert ('<g class="cb-run" data-run="a&lt;b" data-mean="81.5" data-paper-mean="88.11" '
            'data-paper-std="0.09">') in svg
    assert '<g class="cb-run" data-run="c" data-mean="99.25" data-std="0.5">' in svg
    assert svg.count('class="cb-paper"') == 2  # a's diamond and the legend's
    assert "paper's value" in svg and "http" not in svg
