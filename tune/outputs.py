"""What a search writes in its storage folder: ``trials.csv``, ``trials.png``,
``decisions.csv`` and, once every trial has ended, ``best_config.yaml``; and the reading back of
``best_config.yaml``, which a results folder may hold edited by hand."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from benchmarks.infra.atomic import write_atomic
from benchmarks.infra.errors import ConfigError
from benchmarks.infra.plots import plain_text, png_bytes, pyplot
from benchmarks.infra.yaml_files import dump_yaml, read_yaml
from benchmarks.run.spec import RunSpec, SuiteSettings
from tune.records import TrialRecord
from tune.trial import apply_config


class SearchInterrupted(KeyboardInterrupt):
    """The search stopped before every trial had ended: no ``best_config.yaml`` is written and
    ``--resume`` continues it."""



#: ``trials.csv``'s status of a trial that was running or waiting when the search stopped.
UNFINISHED = "unfinished (interrupted)"



def trial_status(record: TrialRecord, ended: dict[int, str | None], max_epochs: int) -> str:
    """One trial's ``trials.csv`` status from its record and how this start of the search saw
    it end (:class:`tune.watch.TrialOutcomes`)."""
    if record.index not in ended:
        return UNFINISHED
    if ended[record.index] is not None:
        return "failed"
    return "completed" if record.checkpointed >= max_epochs else "stopped early by ASHA"



def trial_row(record: TrialRecord, ended: dict[int, str | None], metric: str,
              max_epochs: int) -> dict[str, Any]:
    """One trial's ``trials.csv`` row: its values, its last reported metric and its status."""
    last = record.rows[-1] if record.rows else {}
    status = trial_status(record, ended, max_epochs)
    error = (record.error or ended.get(record.index) or "") if status == "failed" else ""
    return {"trial_id": record.folder.name, **record.config, metric: last.get(metric),
            "epochs": last.get("epoch", 0), "devices": last.get("world_size", 1),
            "status": status, "error": error}



def write_search_outputs(records: list[TrialRecord], ended: dict[int, str | None],
                         storage_dir: Path, suite: SuiteSettings, run: RunSpec, metric: str,
                         mode: str, budget: dict[str, Any], own_first: bool = False) -> Path:
    """``trials.csv`` and ``trials.png``; then ``best_config.yaml`` if every trial has ended,
    else :class:`SearchInterrupted`."""
    import csv

    max_epochs = budget["max_epochs"]
    keys = sorted({k for r in records for k in r.config})
    rows = [trial_row(r, ended, metric, max_epochs) for r in records]
    curves = {r.folder.name: ([row["epoch"] for row in r.rows],
                              [row[metric] for row in r.rows]) for r in records if r.rows}
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["trial_id", *keys, metric, "epochs", "devices",
                                             "status", "error"])
    writer.writeheader()
    writer.writerows(rows)
    storage_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(storage_dir / "trials.csv", out.getvalue())
    write_atomic(storage_dir / "trials.png", trial_curves_png(curves, rows, metric, max_epochs))
    unfinished = sum(r["status"] == UNFINISHED for r in rows)
    if unfinished:
        (storage_dir / "best_config.yaml").unlink(missing_ok=True)  # nothing may look finished
        raise SearchInterrupted(
            f"the search stopped with {unfinished} of {len(rows)} trials "
            f"unfinished; its state is saved in {storage_dir / run.slug} and trials.csv shows "
            "each trial. Continue it with the same command and --resume (clusterbench bench "
            "resumes it by itself).")
    failed = [r for r in rows if r["status"] == "failed"]
    scored = [r for r in rows if r[metric] is not None and r["status"] != "failed"]
    if not scored:
        raise RuntimeError(f"no trial reported {metric!r} ({len(failed)} failed); see "
                           f"trials.csv and the trial logs in {storage_dir}")
    sign = 1 if mode == "max" else -1
    # ties: the trial that trained more epochs, then the one sampled first
    best = max(scored, key=lambda r: (sign * r[metric], r["epochs"], -int(r["trial_id"])))
    write_best_config(storage_dir, suite, apply_config(run, {k: best[k] for k in keys}), best,
                      metric, mode, budget, len(rows), len(failed))
    stopped = sum(r["status"] == "stopped early by ASHA" for r in rows)
    print(f"{len(rows)} trials: {stopped} stopped early by ASHA, {len(failed)} failed. "
          f"Best {metric} = {best[metric]:.4f} (trial {best['trial_id']}). Wrote "
          f"{storage_dir}/trials.csv, decisions.csv, best_config.yaml, trials.png")
    if own_first and rows[0][metric] is not None:
        print(against_own(rows[0], best, records[0], metric))
    return storage_dir



def against_own(own: dict[str, Any], best: dict[str, Any], record: TrialRecord,
                metric: str) -> str:
    """The best trial against the run's own configuration (trial 0), with the noise of the
    difference where the metric is a proportion."""
    from tune.asha import PROPORTIONS, Z, margin

    difference = best[metric] - own[metric]
    examples = (record.rows[-1].get("metric_examples") if record.rows else None)
    noise = margin(best[metric], own[metric], examples) if metric in PROPORTIONS else 0.0
    said = (f"; {Z:g} SE of the difference: {noise:.3f}, so "
            + ("beyond the noise" if abs(difference) > noise else "within the noise")
            if noise else "")
    return (f"The run's own values (trial {own['trial_id']}) reached {own[metric]:.4f}, "
            f"{own['epochs']} epochs; the best is {difference:+.4f} from them{said}.")



def write_best_config(storage_dir: Path, suite: SuiteSettings, best_run: RunSpec,
                      best: dict[str, Any], metric: str, mode: str, budget: dict[str, Any],
                      searched: int, failed: int) -> None:
    from benchmarks.infra.environment import describe_machine, machine

    write_atomic(storage_dir / "best_config.yaml", dump_yaml({
        "suite": suite.name, "run": best_run.name, "method": best_run.method,
        "model": best_run.model, "data": best_run.data, "trainer": best_run.trainer,
        "metric": metric, "mode": mode, "best_value": best[metric], "trial_id": best["trial_id"],
        "configurations_searched": searched, "trials_failed": failed,
        "tie_rule": "equal values: more epochs trained, then the trial sampled first",
        "budget": {"scheduler": "ASHA on signal (tune.asha)", **budget},
        "machine": describe_machine(machine()),
    }))



#: What a ``best_config.yaml`` holds that a tuned run reads, and the type each must have.
BEST_CONFIG_FIELDS = {"method": str, "model": dict, "data": dict, "trainer": dict,
                      "metric": str, "best_value": (int, float),
                      "configurations_searched": int, "trials_failed": int}



def read_best_config(storage_dir: Path) -> dict[str, Any] | None:
    """The ``best_config.yaml`` of a finished search in ``storage_dir``, or None where there is
    none; a file that is not bounded YAML (:func:`read_yaml`: a FIFO is never opened, a YAML
    bomb never expanded) or not the mapping a search writes (:data:`BEST_CONFIG_FIELDS`) is a
    ConfigError naming it."""
    path = storage_dir / "best_config.yaml"
    if not path.exists() and not path.is_symlink():
        return None
    try:
        best = read_yaml(path)
    except ConfigError as err:
        raise ConfigError(f"{err}; it is not a search's best configuration: delete it to search "
                          "again") from None
    wrong = [key for key, kind in BEST_CONFIG_FIELDS.items()
             if not isinstance(best, dict) or not isinstance(best.get(key), kind)
             or isinstance(best.get(key), bool)]
    if wrong:
        raise ConfigError(f"{path} is not a search's best configuration ({wrong[0]} missing or "
                          f"not a {BEST_CONFIG_FIELDS[wrong[0]]!s}); delete it to search again")
    return best



def write_decisions(storage_dir: Path, decisions: list) -> None:
    """``decisions.csv``: every arrival of a trial at a rung, with the values ASHA decided on."""
    import csv
    from dataclasses import asdict

    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=["trial", "epoch", "value", "cutoff", "margin",
                                             "examples", "worse", "stopped"])
    writer.writeheader()
    writer.writerows(asdict(d) for d in decisions)
    storage_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(storage_dir / "decisions.csv", out.getvalue())



def trial_curves_png(curves: dict[str, tuple[list, list]], rows: list[dict], metric: str,
                     max_epochs: int) -> bytes:
    """:func:`trial_curves_figure` as PNG bytes."""
    return png_bytes(trial_curves_figure(curves, rows, metric, max_epochs), dpi=110)



def trial_curves_figure(curves: dict[str, tuple[list, list]], rows: list[dict], metric: str,
                        max_epochs: int):
    """The metric against the epoch, one line per trial labelled with its settings; the last
    point marks how it ended (x: stopped, dot: completed, red square: failed)."""
    plt = pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    by_id = {r["trial_id"]: r for r in rows}
    settings = [k for k in (rows[0] if rows else {})
                if k not in ("trial_id", metric, "epochs", "devices", "status", "error")]

    def label(trial_id: str) -> str:
        row = by_id.get(trial_id, {})
        said = ", ".join(f"{k.rsplit('.', 1)[-1]}={row[k]:.3g}" if isinstance(row.get(k), float)
                         else f"{k.rsplit('.', 1)[-1]}={row.get(k)}" for k in settings)
        return plain_text(f"{trial_id}" + (f" ({said})" if said else ""))

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for trial_id, (epochs, values) in sorted(curves.items()):
        # a dot at every epoch: a trial stopped after its first epoch is a single point
        (line,) = ax.plot(epochs, values, alpha=0.85, linewidth=1.2, marker="o", markersize=3,
                          label=label(trial_id))
        marker = {"completed": "o", "failed": "s"}.get(by_id.get(trial_id, {}).get("status"),
                                                        "x")
        ax.plot(epochs[-1:], values[-1:], marker=marker, markersize=7, linestyle="",
                color="red" if marker == "s" else line.get_color())
    ax.axvline(max_epochs, color="grey", linestyle=":", linewidth=1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch (ASHA's time unit; dotted: the budget's last epoch)")
    ax.set_ylabel(f"{metric} (the metric ASHA schedules on)")
    ax.set_title(f"Search: {len(curves)} trials", fontsize=10)
    ax.grid(alpha=0.3)
    trials = ax.legend(title="trial", fontsize=7, title_fontsize=8, loc="upper left",
                       bbox_to_anchor=(1.01, 1.0), frameon=False,
                       ncol=1 if len(curves) <= 16 else 2)
    ax.add_artist(trials)
    ends = [Line2D([], [], color="black", marker="x", linestyle="", label="stopped early by ASHA"),
            Line2D([], [], color="black", marker="o", linestyle="", label="completed"),
            Line2D([], [], color="red", marker="s", linestyle="", label="failed")]
    ax.legend(handles=ends, title="last point", fontsize=7, title_fontsize=8, loc="lower left",
              bbox_to_anchor=(1.01, 0.0), frameon=False)
    fig.tight_layout()
    return fig

