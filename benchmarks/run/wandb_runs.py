"""The W&B side of a suite run: one W&B run per (run, seed), grouped by suite, and a leaderboard.

A (run, seed) run holds the training curves, then the evaluation metrics and figures
(:func:`record_evaluation`); :func:`record_leaderboard` adds one run with the leaderboard table.
Run ids are hashed from names, so a resumed (run, seed) appends to its W&B run. Without a login
everything is written offline for ``wandb sync``; :func:`read_offline_run` reads it back.
wandb and lightning are imported inside the functions to keep this import cheap.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

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


def group_name(suite: str, budget: str) -> str:
    """The W&B group of a suite; a smaller budget (``--fast``, ``--budget ci``) gets its own so
    it never mixes with full runs.

    >>> group_name("smoke", "full"), group_name("smoke", "fast"), group_name("smoke", "ci")
    ('smoke', 'smoke-fast', 'smoke-ci')
    """
    return suite if budget == "full" else f"{suite}-{budget}"


def configuration_group(suite: str, run: str, budget: str) -> str:
    """The W&B group of a run's seeds, ``<suite group>/<run>``: grouping by it gives the mean
    and spread over seeds of one configuration (never SimCLR's mixed with the pixels').

    >>> configuration_group("smoke", "simclr+tuned", budget="full")
    'smoke/simclr+tuned'
    """
    return f"{group_name(suite, budget)}/{run}"


def run_name(suite: str, run: str, seed: int, budget: str) -> str:
    """The display name of one (run, seed): ``<group>/<run>/seed-<seed>``.

    >>> run_name("smoke", "simclr", 1, budget="fast")
    'smoke-fast/simclr/seed-1'
    """
    return f"{group_name(suite, budget)}/{run}/seed-{seed}"


def _hashed_id(name: str) -> str:
    # W&B ids must be unique within a project and use [a-z0-9]; 16 hex digits of a hash of the
    # (unique) display name keep them deterministic without leaking odd characters of run names.
    return hashlib.blake2b(name.encode("utf-8"), digest_size=8).hexdigest()


def run_id(suite: str, run: str, seed: int, budget: str) -> str:
    """A deterministic W&B run id for one (run, seed), so a resumed run continues the same W&B run.

    >>> run_id("smoke", "simclr", 0, budget="full") == run_id("smoke", "simclr", 0, budget="full")
    True
    >>> run_id("smoke", "simclr", 0, budget="full") != run_id("smoke", "simclr", 0, budget="fast")
    True
    """
    return _hashed_id(run_name(suite, run, seed, budget))


def leaderboard_name(suite: str, budget: str) -> str:
    """The display name of a suite's leaderboard run; no (run, seed) name can equal it.

    >>> leaderboard_name("smoke", budget="full")
    'smoke/leaderboard'
    """
    return f"{group_name(suite, budget)}/leaderboard"


def make_wandb_logger(settings: WandbSettings, *, suite: str, run: str, trains: bool, seed: int,
                      budget: str, save_dir: Path, config: dict[str, Any]) -> WandbLogger:
    """A ``WandbLogger`` for one (run, seed), grouped by :func:`configuration_group`: train with
    it, then pass it to :func:`record_evaluation`. The W&B run starts on the first
    ``logger.experiment`` and stays open after ``fit``, so evaluation lands in the same run.

    Raises:
        RuntimeError: a W&B run is still open in this process (Lightning would silently log
            into it).
    """
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    if wandb.run is not None:
        raise RuntimeError(f"W&B run {wandb.run.name!r} ({wandb.run.id}) is still open; finish it "
                           f"before starting {run_name(suite, run, seed, budget)!r}")
    save_dir.mkdir(parents=True, exist_ok=True)
    logger = WandbLogger(project=settings.project, entity=settings.entity,
                         tags=list(settings.tags), group=configuration_group(suite, run, budget),
                         job_type="train" if trains else "evaluate",
                         name=run_name(suite, run, seed, budget),
                         id=run_id(suite, run, seed, budget),
                         resume="allow", save_dir=str(save_dir), mode=wandb_mode(), config=config)
    logger.log_hyperparams = config_given_at_start  # Lightning's would add every default
    return logger


def config_given_at_start(*args: Any, **kwargs: Any) -> None:
    """Ignores the hyperparameters Lightning hands over at ``fit``: the run's config was given at
    its start, and Lightning's would add every unused constructor default."""


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
    summary as ``eval/<name>`` and once in the history, figures as images, notes as
    ``notes/<name>``."""
    run = getattr(logger_or_run, "experiment", logger_or_run)
    evaluation = {f"eval/{name}": float(value) for name, value in metrics.items()}
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


def record_leaderboard(settings: WandbSettings, *, suite: str, budget: str,
                       suite_dir: Path) -> None:
    """One W&B run after a suite holding ``suite_dir/leaderboard.csv`` as a table and
    ``suite_dir/figures/*.png`` as images; its id is hashed from its name, so a rebuilt
    leaderboard appends to the same run.
    """
    import wandb

    with (suite_dir / "leaderboard.csv").open(newline="") as file:
        header, *rows = [row for row in csv.reader(file) if row]
    figures_dir = suite_dir / "figures"
    figures = ({p.name: p.read_bytes() for p in sorted(figures_dir.glob("*.png"))}
               if figures_dir.is_dir() else {})
    name = leaderboard_name(suite, budget)
    run = wandb.init(project=settings.project, entity=settings.entity, tags=list(settings.tags),
                     group=group_name(suite, budget), job_type="leaderboard", name=name,
                     id=_hashed_id(name), resume="allow", dir=str(suite_dir), mode=wandb_mode())
    try:
        run.log({"leaderboard": wandb.Table(columns=header, data=typed_rows(rows)),
                 **figure_images(figures)})
    finally:
        run.finish()


def record_search_summary(settings: WandbSettings, *, group: str, storage_dir: Path) -> None:
    """One W&B run after a search, in its trials' group: ``trials.csv`` as the table ``trials``
    (for the parallel-coordinates panel) and ``trials.png``; its id is hashed from the group, so a
    resumed search appends to it."""
    import wandb

    with (storage_dir / "trials.csv").open(newline="") as file:
        header, *rows = [row for row in csv.reader(file) if row]
    name = f"{group}/summary"
    run = wandb.init(project=settings.project, entity=settings.entity, tags=list(settings.tags),
                     group=group, job_type="search-summary", name=name, id=_hashed_id(name),
                     resume="allow", dir=str(storage_dir), mode=wandb_mode())
    try:
        run.log({"trials": wandb.Table(columns=header, data=typed_rows(rows)),
                 **figure_images({"trials.png": (storage_dir / "trials.png").read_bytes()})})
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
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


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
