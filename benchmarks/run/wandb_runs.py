"""The W&B side of a suite run: one W&B run per (run, seed), one per search trial, and the
leaderboard's and each search's summary run.

A W&B run's id is a function of what was run (:func:`identity`): the suite as resolved (its
``--set`` settings included), the budget and the results folder. The same command again
continues the same W&B runs (a resumed (run, seed) appends to its run); anything else that
differs gives other runs, with other names and groups where the suite's label
(:attr:`~benchmarks.run.spec.SuiteSettings.label`) differs. Each search started is its own
group. Accuracies go to W&B in percent, as the leaderboard shows them
(:func:`~benchmarks.run.metrics.shown_in_percent`), under the same keys. W&B's own lines go to
its log, not the console (:func:`wandb_lines_to_its_log`). Without a login everything is
written offline for ``wandb sync``; :func:`read_offline_run` reads it back. wandb and lightning
are imported inside the functions to keep this import cheap.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import numbers
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from benchmarks.infra.read_back import parse_json, regular_file_bytes
from benchmarks.run.metrics import shown_in_percent
from benchmarks.run.spec import SuiteSettings

if TYPE_CHECKING:
    import wandb
    from lightning.pytorch.loggers import WandbLogger

# `wandb.init(mode=...)` values; "dryrun" is wandb's old spelling of "offline".
WandbMode = Literal["online", "offline", "disabled"]


@dataclass(frozen=True)
class WandbSettings:
    """Where a suite's runs go on W&B: the same for every (run, seed) of a suite."""

    project: str = "clusterbench"
    entity: str | None = None
    tags: tuple[str, ...] = ()


def wandb_logged_in() -> bool:
    """True when an API key is in the environment or ``~/.netrc`` holds one for api.wandb.ai;
    checked without importing wandb, so a machine with no login runs a suite offline.
    """
    import netrc

    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_mode() -> WandbMode:
    """``disabled`` or ``offline`` when ``WANDB_MODE`` says so, else online only with a login.

    The mode goes to ``wandb.init``: Lightning's ``offline=True`` would overwrite ``WANDB_MODE``
    for the whole process.

    >>> import os
    >>> os.environ.get("WANDB_MODE") != "disabled" or wandb_mode() == "disabled"
    True
    """
    asked = os.environ.get("WANDB_MODE", "").strip().lower()
    if asked == "disabled":
        return "disabled"
    if asked in ("offline", "dryrun"):
        return "offline"
    return "online" if wandb_logged_in() else "offline"


def wandb_lines_to_its_log() -> None:
    """W&B's own lines (``wandb: ...``: its start, its sync hints, its warnings) go to the open
    W&B run's log (``debug.log`` in its folder under ``wandb/``), not to the console, unless
    ``WANDB_SILENT=false`` asks for them there. Called before every ``wandb.init``: W&B reads
    ``WANDB_SILENT`` once, at its set-up, and checks an ``init``'s arguments before that (it
    warns of the ``anonymous`` that Lightning's logger always passes)."""
    import logging

    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    settings = wandb.setup().settings
    if settings.silent:
        # W&B's own logger: the open run's log file, nothing outside a run (it never propagates)
        wandb.termsetup(settings, logging.getLogger("wandb"))


def identity(*parts: Any) -> str:
    """A W&B run id that is a function of ``parts`` (JSON, keys sorted): 16 hex digits of their
    hash, as W&B takes ids ([a-z0-9], unique in a project).

    >>> identity("run", {"a": 1, "b": 2}) == identity("run", {"b": 2, "a": 1})
    True
    >>> identity("run", {"a": 1}) != identity("run", {"a": 2}), len(identity("x"))
    (True, 16)
    """
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def configuration_group(label: str, run: str) -> str:
    """The W&B group of a run's seeds, ``<label>/<run>``: grouping by it gives the mean and
    spread over seeds of one configuration (never SimCLR's mixed with the pixels', nor a
    ``--set`` variant's with the suite's own).

    >>> configuration_group("smoke+data.val_fraction=0.2", "simclr+tuned")
    'smoke+data.val_fraction=0.2/simclr+tuned'
    """
    return f"{label}/{run}"


def run_name(label: str, run: str, seed: int) -> str:
    """The display name of one (run, seed): ``<label>/<run>/seed-<seed>``.

    >>> run_name("smoke-fast", "simclr", 1)
    'smoke-fast/simclr/seed-1'
    """
    return f"{configuration_group(label, run)}/seed-{seed}"


#: What a run's W&B config holds beside its resolved configuration and that its id leaves out:
#: where the suite file lies, and what follows from the rest
#: (:func:`benchmarks.run.curves.wandb_config`).
DERIVED = ("suite_file", "config_hash", "hyperparameters")


def run_id(config: dict[str, Any], *, budget: str, suite_dir: Path) -> str:
    """The W&B run id of one (run, seed): a function of its resolved configuration (the suite's
    settings for the run, its ``--set`` settings and its seed, as ``result.json`` records them;
    not where the suite file lies, nor what a W&B config adds, which follows from the rest:
    :data:`DERIVED`), the budget and the results folder. A resumed run continues the same W&B
    run; another configuration, budget or ``--results`` is another W&B run.

    >>> config = {"suite": "smoke", "seed": 0, "run": {"name": "simclr"}}
    >>> run_id(config, budget="full", suite_dir=Path("/r/smoke")) == run_id(
    ...     {**config, "suite_file": "elsewhere.yaml", "hyperparameters": {"lr": 0.1}},
    ...     budget="full", suite_dir=Path("/r/smoke"))
    True
    """
    resolved = {key: value for key, value in config.items() if key not in DERIVED}
    return identity("run", resolved, budget, str(Path(suite_dir).resolve()))


def leaderboard_name(label: str) -> str:
    """The display name of a suite's leaderboard run; no (run, seed) name can equal it.

    >>> leaderboard_name("smoke")
    'smoke/leaderboard'
    """
    return f"{label}/leaderboard"


def wandb_logger(**init: Any) -> WandbLogger:
    """Lightning's ``WandbLogger`` with ``init`` (``wandb.init``'s arguments, the run's config
    among them), its metrics in the leaderboard's units (:func:`in_percent`) and W&B's own lines
    in its log (:func:`wandb_lines_to_its_log`). Lightning's hyperparameter call adds nothing:
    the config is given at the run's start, and Lightning's would add every unused default."""
    from lightning.pytorch.loggers import WandbLogger

    wandb_lines_to_its_log()
    # mode, not offline=: Lightning's offline flag would override WANDB_MODE=disabled
    logger = WandbLogger(resume="allow", mode=wandb_mode(), **init)
    # module-level functions, so that the logger still pickles (a spawned DDP fit pickles it)
    logger.log_hyperparams = config_given_at_start
    logger.log_metrics = functools.partial(log_metrics_in_percent, logger)
    return logger


def log_metrics_in_percent(logger: WandbLogger, metrics: dict[str, float],
                           step: int | None = None) -> None:
    """Lightning's ``log_metrics`` of ``logger``, every accuracy in percent (:func:`in_percent`)."""
    type(logger).log_metrics(logger, in_percent(metrics), step)


def make_wandb_logger(settings: WandbSettings, *, suite: SuiteSettings, run: str, seed: int,
                      trains: bool, suite_dir: Path, config: dict[str, Any]) -> WandbLogger:
    """A ``WandbLogger`` for one (run, seed) of ``suite`` written in ``suite_dir``, grouped by
    :func:`configuration_group`, its id :func:`run_id`: train with it, then pass it to
    :func:`record_evaluation`. The W&B run starts on the first ``logger.experiment`` and stays
    open after ``fit``, so evaluation lands in the same run; its files go to the suite's
    ``wandb/`` folder.

    Raises:
        RuntimeError: a W&B run is still open in this process (Lightning would silently log
            into it).
    """
    import wandb

    name = run_name(suite.label, run, seed)
    if wandb.run is not None:
        raise RuntimeError(f"W&B run {wandb.run.name!r} ({wandb.run.id}) is still open; finish it "
                           f"before starting {name!r}")
    suite_dir.mkdir(parents=True, exist_ok=True)
    return wandb_logger(project=settings.project, entity=settings.entity,
                        tags=list(settings.tags), group=configuration_group(suite.label, run),
                        job_type="train" if trains else "evaluate", name=name,
                        id=run_id(config, budget=suite.budget, suite_dir=suite_dir),
                        save_dir=str(suite_dir), config=config)


def config_given_at_start(*args: Any, **kwargs: Any) -> None:
    """Ignores the hyperparameters Lightning hands over at ``fit``: the run's config was given at
    its start, and Lightning's would add every unused constructor default."""


def in_percent(metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` with every accuracy in percent (:func:`shown_in_percent`), as the leaderboard
    shows it, under the same keys (a prefix such as ``eval/`` is kept).

    >>> in_percent({"eval/knn50_top1": 0.9933, "online_val_acc": 0.5, "rankme": 12.0})
    {'eval/knn50_top1': 99.33, 'online_val_acc': 50.0, 'rankme': 12.0}
    """
    return {key: 100.0 * value if shown_in_percent(key.rpartition("/")[2])
            and isinstance(value, numbers.Real) and not isinstance(value, bool) else value
            for key, value in metrics.items()}


@dataclass(frozen=True)
class SearchWandb:
    """One search's W&B runs: a run per trial and, when the search ends, its summary run, all in
    the search's own group (one per search started; a resumed search keeps it), their files in
    the search's storage (``wandb/``)."""

    settings: WandbSettings
    suite: SuiteSettings
    run: str  # the searched run's name
    search_id: str  # this search's, from its manifest: the time it started, and a random part
    storage: str  # the search's storage folder, resolved

    @property
    def group(self) -> str:
        """``<label>/<run>/search-<search id>``.

        >>> search = SearchWandb(WandbSettings(), SuiteSettings("smoke", "smoke.yaml"),
        ...                      "simclr", "20260101T000000-ab12", "/r/search")
        >>> search.group, search.trial_name(3)
        ('smoke/simclr/search-20260101T000000-ab12', 'smoke/simclr/trial-0003')
        """
        return f"{configuration_group(self.suite.label, self.run)}/search-{self.search_id}"

    def trial_name(self, number: int) -> str:
        """A trial's W&B name: ``<label>/<run>/trial-<number>``, its number as the search's
        records, ``trials.csv`` and the console give it."""
        return f"{configuration_group(self.suite.label, self.run)}/trial-{number:04d}"

    def trial_id(self, number: int) -> str:
        """A trial's W&B id: a trial resumed from its checkpoint continues its W&B run."""
        return identity("trial", self.group, self.storage, number)

    def trial_logger(self, number: int, config: dict[str, Any]) -> WandbLogger:
        """The W&B logger of trial ``number``, ``config`` its W&B config."""
        Path(self.storage).mkdir(parents=True, exist_ok=True)
        return wandb_logger(project=self.settings.project, entity=self.settings.entity,
                            tags=list(self.settings.tags), group=self.group,
                            name=self.trial_name(number), id=self.trial_id(number),
                            job_type="search", config=config, save_dir=self.storage)


def _image(png: bytes) -> wandb.Image:
    import wandb
    from PIL import Image

    return wandb.Image(Image.open(io.BytesIO(png)))


def figure_images(figures: dict[str, bytes]) -> dict[str, wandb.Image]:
    """PNG bytes keyed by file name, as ``wandb.Image`` keyed by ``figures/<file stem>``."""
    return {f"figures/{Path(name).stem}": _image(png) for name, png in figures.items()}


def record_evaluation(logger_or_run: WandbLogger | wandb.Run,
                      metrics: dict[str, float], figures: dict[str, bytes],
                      notes: dict[str, str] | None = None,
                      extra_summary: dict[str, Any] | None = None) -> None:
    """Writes one (run, seed)'s evaluation into its W&B run, then finishes it: metrics in the
    summary as ``eval/<name>`` (accuracies in percent, as the leaderboard shows them) and once in
    the history, figures as images, notes as ``notes/<name>``."""
    run = getattr(logger_or_run, "experiment", logger_or_run)
    evaluation = in_percent({f"eval/{name}": float(value) for name, value in metrics.items()})
    run.log({**evaluation, **figure_images(figures)})
    run.summary.update({**evaluation, **{f"notes/{k}": v for k, v in (notes or {}).items()},
                        **(extra_summary or {})})
    run.finish()


def _number(text: str) -> int | float | None:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


def typed_rows(rows: list[list[str]]) -> list[list[Any]]:
    """CSV cells as numbers where their whole column is numeric (W&B tables refuse mixed
    columns), blanks as None.

    >>> typed_rows([["a", "1", "0.5", "x"], ["b", "2", "", "3"]])
    [['a', 1, 0.5, 'x'], ['b', 2, None, '3']]
    """
    # a ragged CSV raises here: W&B would refuse the table anyway
    columns = list(zip(*rows, strict=True)) if rows else []
    numeric = [all(_number(c) is not None for c in column if c != "") for column in columns]
    return [[None if cell == "" else _number(cell) if numeric[i] else cell
             for i, cell in enumerate(row)] for row in rows]


def table_in_percent(header: list[str], rows: list[list[Any]]) -> list[list[Any]]:
    """``rows`` (typed, :func:`typed_rows`) with each accuracy's column in percent: a metric's
    own column (``trials.csv``) or its mean and standard deviation (``leaderboard.csv``), as
    the leaderboard shows them; the paper's columns are in percent already.

    >>> table_in_percent(["run", "knn50_top1_mean", "kmeans_ari_mean", "paper_mean"],
    ...                  [["a", 0.9933, 0.5, 99.1], ["b", None, 0.25, None]])
    [['a', 99.33, 0.5, 99.1], ['b', None, 0.25, None]]
    """
    scaled = [shown_in_percent(column.removesuffix("_mean").removesuffix("_std"))
              for column in header]
    return [[100.0 * cell if scale and isinstance(cell, numbers.Real) else cell
             for scale, cell in zip(scaled, row, strict=True)] for row in rows]


def read_table(path: Path) -> tuple[list[str], list[list[Any]]]:
    """A CSV file as a W&B table's columns and rows: typed, accuracies in percent. Read as every
    results file is read back: a regular file of bounded size."""
    text = regular_file_bytes(path).decode("utf-8")
    header, *rows = [row for row in csv.reader(io.StringIO(text, newline="")) if row]
    return header, table_in_percent(header, typed_rows(rows))


def record_leaderboard(settings: WandbSettings, *, label: str, content: Any,
                       suite_dir: Path) -> None:
    """One W&B run after a suite holding ``suite_dir/leaderboard.csv`` as a table (accuracies
    in percent) and ``suite_dir/figures/*.png`` as images, in the group ``label``. Its id is a
    function of the suite's ``content`` as resolved (its runs, settings, budget and ``--set``
    settings) and the results folder: a rebuilt leaderboard appends to the same run, an edited
    suite or another folder starts another.
    """
    import wandb

    header, rows = read_table(suite_dir / "leaderboard.csv")
    figures_dir = suite_dir / "figures"
    figures = ({p.name: p.read_bytes() for p in sorted(figures_dir.glob("*.png"))}
               if figures_dir.is_dir() else {})
    wandb_lines_to_its_log()
    run = wandb.init(project=settings.project, entity=settings.entity, tags=list(settings.tags),
                     group=label, job_type="leaderboard", name=leaderboard_name(label),
                     id=identity("leaderboard", content, str(Path(suite_dir).resolve())),
                     resume="allow", dir=str(suite_dir), mode=wandb_mode())
    try:
        run.log({"leaderboard": wandb.Table(columns=header, data=rows),
                 **figure_images(figures)})
    finally:
        run.finish()


def record_search_summary(search: SearchWandb) -> None:
    """One W&B run after a search, in its trials' group: ``trials.csv`` as the table ``trials``
    (for the parallel-coordinates panel; accuracies in percent) and ``trials.png``; its id is a
    function of the group and the storage, so a resumed search appends to it."""
    import wandb

    storage = Path(search.storage)
    header, rows = read_table(storage / "trials.csv")
    wandb_lines_to_its_log()
    run = wandb.init(project=search.settings.project, entity=search.settings.entity,
                     tags=list(search.settings.tags), group=search.group,
                     job_type="search-summary", name=f"{search.group}/summary",
                     id=identity("search-summary", search.group, search.storage),
                     resume="allow", dir=str(storage), mode=wandb_mode())
    try:
        run.log({"trials": wandb.Table(columns=header, data=rows),
                 **figure_images({"trials.png": (storage / "trials.png").read_bytes()})})
    finally:
        run.finish()


def offline_run_dirs(save_dir: Path, wandb_id: str | None = None) -> list[Path]:
    """The offline run directories under ``save_dir/wandb``, oldest first, of one id if given
    (a resumed offline run gets a new directory each time).
    """
    pattern = f"run-{wandb_id}.wandb" if wandb_id else "run-*.wandb"
    return sorted(p.parent for p in (save_dir / "wandb").glob(f"offline-run-*/{pattern}"))


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    """The records of an offline run's ``run-*.wandb`` log, decoded by ``wandb leet inspect
    --json`` (wandb has no Python reader of it any more), offline and with its log in the run's
    own ``wandb`` folder.
    """
    (log,) = run_dir.glob("run-*.wandb")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true",
           "WANDB_DIR": str(run_dir.parent.parent)}
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(log)],
                         env=env, capture_output=True, text=True, check=True, timeout=120)
    return [parse_json(line, f"wandb's decoding of {log}") for line in out.stdout.splitlines()
            if line.startswith("{")]


def read_offline_run(run_dir: Path) -> dict[str, Any]:
    """What an offline run recorded: its config, history rows, summary, media files and identity.

    ``run`` holds ``id``, ``project``, ``group``, ``job_type``, ``name`` and ``tags`` from the
    run record; ``files`` the paths (relative to the run's ``files`` folder) of what it saved,
    images and tables under ``media/``; ``exit_code`` that of its exit record (None: the run was
    never finished).
    """
    config: dict[str, Any] = {}
    history: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    files: list[str] = []
    run: dict[str, Any] = {}
    exit_code = None
    for record in read_records(run_dir):
        kind = record["type"]
        body = record.get(kind) or {}
        if kind == "run":
            run = {"id": body.get("run_id"), "project": body.get("project"),
                   "group": body.get("run_group"), "job_type": body.get("job_type"),
                   "name": body.get("display_name"), "tags": body.get("tags", [])}
            config.update(body.get("config", {}).get("update", {}))
        elif kind == "config":
            config.update(body.get("update", {}))
        elif kind == "history":
            history.append(body.get("item", {}))
        elif kind == "summary":
            summary.update(body.get("update", {}))
            for key in body.get("remove", {}):
                summary.pop(key, None)
        elif kind == "files":
            files += [f["path"] for f in body.get("files", [])]
        elif kind == "exit":
            exit_code = int(body.get("exit_code", 0))
    config.pop("_wandb", None)
    return {"config": config, "history": history, "summary": summary, "files": files, "run": run,
            "exit_code": exit_code}
