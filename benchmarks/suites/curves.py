"""Learning curves for the leaderboard page: each trained run's training loss and online probe
accuracy by epoch, the mean over its seeds, read from the ``logs/metrics.csv`` each seed keeps
(Lightning's CSV logger). A results folder is data: the file is read as numbers, nothing else."""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.infra.plots import plain_text, png_bytes, pyplot
from benchmarks.infra.read_back import Unreadable, regular_file_bytes

#: The curves drawn, by the column of ``metrics.csv`` and what the panel says.
CURVES = {"train_loss": "training loss (mean over the epoch's logged steps)",
          "online_val_acc": "online probe accuracy, validation split"}
#: The title the page gives the figure.
TITLE = ("Learning curves: each trained run's mean over its seeds, by epoch (from each seed's "
         "logs/metrics.csv)")


def epoch_curves(path: Path) -> dict[str, dict[int, float]]:
    """Per column of :data:`CURVES`: epoch -> the mean of its finite values in that epoch;
    empty where the file is missing or not a CSV of numbers. Only a regular file of bounded size
    is read (:func:`~benchmarks.infra.read_back.regular_file_bytes`): a FIFO planted there
    would block the page's writer, which holds the folder's lock."""
    import sys

    sums: dict[str, dict[int, list[float]]] = {c: defaultdict(list) for c in CURVES}
    try:
        text = regular_file_bytes(path).decode("utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, Unreadable, UnicodeDecodeError) as err:
        print(f"clusterbench: warning: learning curves of {path} not drawn: {err}",
              file=sys.stderr)
        return {}
    try:
        with io.StringIO(text, newline="") as file:
            for row in csv.DictReader(file):
                for column in CURVES:
                    try:
                        epoch, value = int(row["epoch"]), float(row.get(column) or "nan")
                    except (KeyError, TypeError, ValueError):
                        continue
                    if math.isfinite(value):
                        sums[column][epoch].append(value)
    except csv.Error:
        return {}
    return {c: {e: statistics.fmean(v) for e, v in sorted(by.items())} for c, by in sums.items()}


#: Run -> column -> epoch -> value: what :func:`run_curves` reads from the runs' logs, once per
#: leaderboard or page, for the figure, the Curve column and the training-curve table.
RunCurves = dict[str, dict[str, dict[int, float]]]


#: The column of a run's curves that holds its online probe on the epochs trained at a constant
#: rate (before a warm-up-stable-decay schedule's decay), where it has one: its verdict is read
#: there (:func:`judged_points`). Not drawn.
CONSTANT_RATE = "online_val_acc_constant_rate"


def decay_epochs(result: dict[str, Any]) -> int:
    """The whole epochs at the end of a result's run whose learning rate decays under a
    warm-up-stable-decay schedule (the model's ``decay_epochs``, rounded up); 0 for any other
    schedule (a cosine decay spans the whole run: nothing before it is at a constant rate)."""
    model = ((result.get("config") or {}).get("run") or {}).get("model") or {}
    decay = model.get("decay_epochs")
    if isinstance(decay, (int, float)) and not isinstance(decay, bool) and decay >= 0:
        return math.ceil(decay)
    return 0


def run_curves(results: list[dict[str, Any]]) -> RunCurves:
    """Run -> column -> epoch -> the mean over the run's seeds that logged that epoch; for a run
    trained under a warm-up-stable-decay schedule also :data:`CONSTANT_RATE`, its online probe
    on the epochs before the decay."""
    seeds: dict[str, list[dict[str, dict[int, float]]]] = defaultdict(list)
    decays: dict[str, int] = {}
    for result in results:
        curves = epoch_curves(Path(result["directory"]) / "logs" / "metrics.csv")
        if any(curves.values()):
            seeds[result["run"]].append(curves)
            decays[result["run"]] = decay_epochs(result)
    out = {}
    for run, per_seed in sorted(seeds.items()):
        out[run] = {}
        for column in CURVES:
            epochs = sorted({e for c in per_seed for e in c.get(column, {})})
            out[run][column] = {e: statistics.fmean([c[column][e] for c in per_seed
                                                    if e in c.get(column, {})]) for e in epochs}
        probe = out[run].get("online_val_acc") or {}
        if decays[run] and probe:
            before = max(probe) + 1 - decays[run]
            out[run][CONSTANT_RATE] = {e: v for e, v in probe.items() if e < before}
    return out


def learning_curves(curves: RunCurves) -> dict[str, bytes]:
    """``{TITLE: png}`` where some run logged curves (:func:`run_curves`), else ``{}``: a panel
    per curve, a line per run (epochs counted from 1)."""
    if not curves:
        return {}
    plt = pyplot()
    fig, axes = plt.subplots(1, len(CURVES), figsize=(11, 4))
    for ax, (column, said) in zip(axes, CURVES.items(), strict=True):
        for run, by_column in curves.items():
            points = by_column.get(column) or {}
            if points:
                ax.plot([e + 1 for e in points], list(points.values()), marker="o",
                        markersize=2, linewidth=1.2, label=plain_text(run))
        ax.set_xlabel("epoch")
        ax.set_ylabel(said, fontsize=9)
        ax.grid(alpha=0.3)
    if axes[-1].get_legend_handles_labels()[0]:  # a run that logged only the other curve
        axes[-1].legend(fontsize=8, loc="lower right", frameon=False)
    fig.tight_layout()
    return {TITLE: png_bytes(fig, dpi=100)}


#: A run has trained to where its curve flattened when its online probe's validation accuracy,
#: averaged over the last quarter of its epochs, is less than this many points above its average
#: over the quarter before (averages: one epoch's accuracy on a small validation split moves by
#: about a point from noise alone).
FLAT_RISE_POINTS = 1.0

#: The fewest epochs a curve is judged on: a single epoch has no end to compare with a start.
JUDGED_EPOCHS = 2


@dataclass(frozen=True)
class Flatness:
    """How a run's online-probe curve ended: over ``epochs`` epochs, the mean of its last
    ``quarter`` epochs rose ``rise`` points above the mean of the ``quarter`` before them, and
    ``gain`` points above its first epoch. ``constant_rate``: the epochs judged are those
    before a learning-rate decay (a curve that stops rising only because its rate went to 0 has
    not flattened)."""

    epochs: int
    quarter: int
    rise: float
    constant_rate: bool = False
    gain: float = math.nan

    @property
    def judged(self) -> bool:
        """Long enough to judge (:data:`JUDGED_EPOCHS`)."""
        return self.epochs >= JUDGED_EPOCHS

    @property
    def under_trained(self) -> bool:
        """Still rising at its end; a curve too short to judge is not."""
        return self.judged and self.rise >= FLAT_RISE_POINTS

    @property
    def verdict(self) -> str:
        """``too short``, ``under-trained`` (still rising), ``falling`` (its last quarter below
        the quarter before, or ending below its first epoch), ``flat`` (ending where it started:
        it never rose) or ``flattened`` (it rose, then stopped). Judged on the numbers as
        printed, to the hundredth of a point: a rise of -0.001 is the +0.00 of a plateau."""
        if not self.judged:
            return "too short"
        if self.under_trained:
            return "under-trained"
        if round(self.rise, 2) < 0 or round(self.gain, 2) < 0:
            return "falling"
        return "flat" if round(self.gain, 2) == 0 else "flattened"

    @property
    def since_start(self) -> bool:
        """Whether the verdict is about the gain since the first epoch (the curve fell or
        stayed flat since then while its last quarter did not fall), not the last rise."""
        return self.verdict in ("falling", "flat") and round(self.rise, 2) >= 0

    def said(self) -> str:
        """The verdict in words, as the training-curve table prints it."""
        rate = " at a constant rate" if self.constant_rate else ""
        if not self.judged:
            epochs = f"{self.epochs} epoch{'s' * (self.epochs != 1)}"
            return f"too short to judge ({epochs}{rate}{', before its decay' * bool(rate)})"
        if self.since_start:
            said = f"{self.gain:+.2f} points since its first epoch"
        else:
            span = "epoch" if self.quarter == 1 else f"{self.quarter} epochs"
            said = f"{self.rise:+.2f} points over its last {span}"
        if self.constant_rate:
            said += f"{rate}, of the {self.epochs} before its decay"
        return f"{self.verdict} ({said})"

    def cell(self) -> str:
        """The verdict in the leaderboard's cell, next to the run's numbers."""
        rate = ", constant rate" if self.constant_rate else ""
        if not self.judged:
            return f"too short ({self.epochs} epoch{'s' * (self.epochs != 1)}{rate})"
        change = f"{self.gain:+.2f} since epoch 1" if self.since_start else f"{self.rise:+.2f}"
        return f"{self.verdict} ({change}{rate})"


def flatness(points: dict[int, float], constant_rate: bool = False) -> Flatness | None:
    """The :class:`Flatness` of one online-probe curve (epoch -> accuracy as a fraction), or
    None when it has no epoch (and is no curve at a constant rate). A curve of fewer than
    :data:`JUDGED_EPOCHS` is too short to judge. ``constant_rate``: the points are the epochs
    before a learning-rate decay.

    >>> flatness({0: 0.85, 1: 0.846, 2: 0.846}).cell()  # level at its end, below its start
    'falling (-0.40 since epoch 1)'
    >>> flatness({0: 0.80, 1: 0.85, 2: 0.846}).cell()
    'falling (-0.40)'
    >>> flatness({0: 0.10, 1: 0.10}).cell(), flatness({}, constant_rate=True).cell()
    ('flat (+0.00 since epoch 1)', 'too short (0 epochs, constant rate)')
    """
    values = [100.0 * points[e] for e in sorted(points)]
    if not values and not constant_rate:
        return None
    if len(values) < JUDGED_EPOCHS:
        return Flatness(epochs=len(values), quarter=1, rise=math.nan,
                        constant_rate=constant_rate)
    quarter = max(1, len(values) // 4)
    last, before = values[-quarter:], values[-2 * quarter:-quarter]
    return Flatness(epochs=len(values), quarter=quarter,
                    rise=statistics.fmean(last) - statistics.fmean(before),
                    constant_rate=constant_rate, gain=values[-1] - values[0])


def judged_flatness(by_column: dict[str, dict[int, float]]) -> Flatness | None:
    """The verdict on a run's online probe: read on its epochs at a constant rate where it was
    trained under a warm-up-stable-decay schedule (:data:`CONSTANT_RATE`; too short to judge
    where the decay took all but one of them), on all its epochs otherwise."""
    if CONSTANT_RATE in by_column:
        return flatness(by_column[CONSTANT_RATE], constant_rate=True)
    return flatness(by_column.get("online_val_acc") or {})


def run_flatness(curves: RunCurves) -> dict[str, Flatness]:
    """Run -> the :class:`Flatness` of its online probe (the mean over its seeds), for each run
    that logged one (:func:`judged_flatness`)."""
    return {run: verdict for run, by_column in curves.items()
            if (verdict := judged_flatness(by_column)) is not None}


def attach_curves(rows: list[dict[str, Any]], curves: RunCurves) -> None:
    """Sets each leaderboard row's ``curve`` (its run's :class:`Flatness`), which the tables
    print next to the row's numbers as a column of its own."""
    verdicts = run_flatness(curves)
    for row in rows:
        if row["run"] in verdicts:
            row["curve"] = verdicts[row["run"]]


#: The caption of the pages' training-curve table.
TRAINING_CAPTION = (
    "Each trained run's online probe (a linear layer trained alongside on detached features; "
    "accuracy on the validation split, %, mean over seeds) at its first epoch, a quarter, half "
    "and three quarters of the way, and its last. A run is marked under-trained where the mean "
    f"of its last quarter of epochs is {FLAT_RISE_POINTS:g} point or more above the quarter "
    "before (the leaderboard's Curve column says the same): its numbers are those of a method "
    "stopped on the rise of its curve, not of what the method reaches. It is falling where that "
    "mean is below the quarter before, or its last epoch below its first; flat where it ends "
    "where it started; flattened where it rose, then stopped. A run trained under a "
    "warm-up-stable-decay schedule is judged on its epochs at a constant rate, before the "
    "decay (a curve under a decaying rate flattens because the rate goes to 0). A curve of one "
    "epoch (or of one or none before its decay) is too short to judge.")


def training_table(curves: RunCurves) -> list[str]:
    """The Markdown lines of the "Training curves" section, or none where no run logged its
    online probe."""
    lines = []
    for run, by_column in curves.items():
        points = by_column.get("online_val_acc") or {}
        verdict = judged_flatness(by_column)
        if verdict is None:
            continue
        epochs = sorted(points)
        picked = sorted({epochs[round(f * (len(epochs) - 1))] for f in (0, .25, .5, .75, 1)})
        path = ", ".join(f"{e + 1}: {100 * points[e]:.1f}" for e in picked)
        lines.append(f"| {run} | {len(epochs)} | {path} | {verdict.said()} |")
    if not lines:
        return []
    return ["## Training curves", "", TRAINING_CAPTION, "",
            "| Run | Epochs | Online probe, val (%) by epoch | Curve |", "|---|---|---|---|",
            *lines]


def with_training_table(markdown: str, training: list[str]) -> str:
    """``markdown`` (a leaderboard) with the training-curve section before its "Evaluation
    time" section (at the end when it has none)."""
    if not training:
        return markdown
    head, mark, tail = markdown.partition("## Evaluation time")
    section = "\n".join(training) + "\n"
    if not mark:
        return f"{markdown.rstrip()}\n\n{section}"
    return f"{head}{section}\n{mark}{tail}"
