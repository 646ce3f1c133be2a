"""What a run keeps and when it is reused: its seed folder, its finished result, the checkpoint
an unfinished attempt resumes from, and its weights; by its configuration's identity
(:mod:`benchmarks.run.identity`, whose names it offers too).

A folder is only ever replaced whole, so a kill leaves either the old result or the new one.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from benchmarks.infra.atomic import keep_aside
from benchmarks.infra.environment import LOADED_FROM
from benchmarks.infra.errors import ConfigError, control_free
from benchmarks.infra.paths import STAGING_SUFFIXES, inside
from benchmarks.infra.tensor_files import load_tensors, state_mismatch
from benchmarks.infra.yaml_files import read_yaml
from benchmarks.run.checkpoint import LAST, resumable_checkpoint
from benchmarks.run.identity import (  # noqa: F401 - offered here as before
    UNHASHED,
    configuration_hash,
    resolved_config,
    same_configuration,
    training_identity,
)
from benchmarks.run.result_schema import read_result
from benchmarks.run.spec import RunSpec, SuiteSettings
from benchmarks.run.trainer import RunOptions

#: What sits beside a seed's result folder ``seed-K``: the attempt that will replace it, the
#: result set aside while it does (``STAGING_SUFFIXES``) and the seed's lock.
SEED_SIBLINGS = ("", *STAGING_SUFFIXES, ".lock")


def seed_folder(suite_dir: Path, run: RunSpec, seed: int) -> Path:
    """``<suite_dir>/runs/<run slug>/seed-<k>``, unchecked: for reading a finished result (a
    driver deciding what to send out); anything that writes goes through :func:`run_dir`."""
    return suite_dir / "runs" / run.slug / f"seed-{seed}"


def run_dir(suite_dir: Path, run: RunSpec, seed: int) -> Path:
    """:func:`seed_folder`, checked (with :data:`SEED_SIBLINGS`) to lie under ``suite_dir`` with no
    symbolic link on the way or inside, before anything of the seed is written, moved or deleted."""
    final = seed_folder(suite_dir, run, seed)
    for suffix in SEED_SIBLINGS:
        inside(suite_dir, final.with_name(final.name + suffix), tree=True)
    return final


def finished_result(final: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The ``result.json`` in ``final`` when it is a result (:func:`read_result`) computed with
    ``config``, else None: one that is not is no finished run, and the run trains again."""
    try:
        result = read_result(final / "result.json")
    except (OSError, ValueError):
        return None
    return result if same_configuration(result.get("config"), config) else None


def set_aside_unreadable_result(final: Path) -> None:
    """Moves the seed's ``result.json`` aside when it is no result as every command reads one
    (:func:`read_result`: a list, JSON nested 100,000 deep, bytes that are not UTF-8, a field
    ``null`` or of the wrong type): kept as ``<seed folder>.unreadable-result.json`` with one
    line naming the file and the field, and the run trains again instead of failing on every
    later ``bench``. Called with the seed's lock held."""
    path = final / "result.json"
    if not path.exists() and not path.is_symlink():
        return
    try:
        read_result(path)
    except FileNotFoundError:
        return
    except (OSError, ValueError) as err:
        why = control_free(f"warning: {path} cannot be read as a result ({err})")
        set_aside(path, final, "result.json", why)


def resume_point(attempt: Path, config: dict[str, Any]) -> Path | None:
    """The checkpoint of an unfinished attempt at the same configuration, else None. What a
    copied or damaged attempt holds is set aside with one line naming it, and the run starts
    again rather than failing on every later ``bench``: a ``config.yaml`` that is not bounded
    YAML (:func:`read_yaml`) as ``<seed folder>.unreadable-config.yaml``, a checkpoint Lightning
    cannot resume from (:func:`resumable_checkpoint`, held to the run's model and
    ``max_epochs``: :func:`resumed_model`) as ``<seed folder>.unreadable-last.ckpt``."""
    from benchmarks.infra.tensor_files import BadFile

    checkpoint, recorded = attempt / "checkpoints" / LAST, attempt / "config.yaml"
    if not recorded.exists() and not recorded.is_symlink():
        return None
    try:
        earlier = read_yaml(recorded)
        if not isinstance(earlier, dict):
            raise ConfigError(f"{recorded} holds a {type(earlier).__name__}, not a run's "
                              "configuration")
    except ConfigError as err:
        set_aside(recorded, attempt, "config.yaml", err)
        return None
    # an evaluation changed while the run trained does not discard its training
    if not checkpoint.is_file() or training_identity(earlier) != training_identity(config):
        return None
    try:
        resumable_checkpoint(checkpoint, "checkpoint", *resumed_model(config))
    except BadFile as err:
        set_aside(checkpoint, attempt, LAST, err)
        return None
    return checkpoint


def resumed_model(config: dict[str, Any]) -> tuple[dict[str, torch.Tensor] | None, int | None]:
    """The state dict of ``config``'s model, built on the ``meta`` device (no memory, no data
    read), and its ``max_epochs``: what Lightning holds a checkpoint it resumes to. None for
    either where it cannot be built here; the run then says why itself."""
    from benchmarks.run.one import instantiate  # it imports this module
    from benchmarks.run.trainer import trainer_settings

    try:
        run = RunSpec(**config["run"])
        max_epochs = trainer_settings(run, RunOptions())["max_epochs"]
    except (ConfigError, KeyError, TypeError, ValueError):
        return None, None
    try:
        with torch.device("meta"):
            _, model = instantiate(run, int(config["seed"]), {
                k: v for k, v in run.model.items() if k != "backbone_weights"})
    except Exception:  # noqa: BLE001 - not the checkpoint's fault: the run will say what it is
        return None, max_epochs
    return model.state_dict(), max_epochs


def set_aside(path: Path, attempt: Path, name: str, why: Exception) -> None:
    """Moves ``path`` of ``attempt`` beside the seed folder as ``<seed>.unreadable-<name>`` (the
    attempt is removed when the run starts again) and says so on stderr, in one line."""
    aside = attempt.with_name(f"{attempt.name.removesuffix('.attempt')}.unreadable-{name}")
    keep_aside(path, aside, why, "the run starts again")


def computed_by_other_code(result: dict[str, Any]) -> bool:
    """Whether ``result`` was computed by code other than this process's: another commit, a
    working tree with uncommitted changes then or now, or an unknown one.

    >>> computed_by_other_code({"git": {"commit": "0" * 40, "dirty": False}})
    True
    """
    then, now = result.get("git") or {}, LOADED_FROM
    return (not then.get("commit") or then.get("commit") != now.get("commit")
            or bool(then.get("dirty")) or bool(now.get("dirty")))


def reusable(done: dict[str, Any] | None, options: RunOptions) -> bool:
    """A finished result with the same configuration is kept, unless ``options`` say to
    retrain it (``rerun``, or ``rerun_changed`` and other code computed it)."""
    return done is not None and not options.rerun and not (
        options.rerun_changed and computed_by_other_code(done))


def already_done(settings: SuiteSettings, run: RunSpec, seed: int, suite_dir: Path,
                 options: RunOptions) -> dict[str, Any] | None:
    """The finished result of ``run`` and ``seed`` with the same configuration (``"reused":
    True``), or None; read without the lock (a result is only replaced whole), so a driver can skip
    the job without sending it anywhere."""
    if options.rerun:
        return None
    done = finished_result(seed_folder(suite_dir, run, seed),
                           resolved_config(settings, run, seed))
    return {**done, "reused": True} if reusable(done, options) else None


def evaluation_changed(final: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The finished result in ``final`` whose training is ``config``'s but whose evaluation (or
    headline, plots, ranking, paper numbers) is not, with its weights kept; else None."""
    try:
        done = read_result(final / "result.json")
    except (OSError, ValueError):
        return None
    if done.get("status") != "finished":
        return None
    if training_identity(done.get("config")) != training_identity(config):
        return None
    trains = (final / ENCODER_FILE).is_file() or not done.get("train_steps")
    return done if trains else None


def finish_finalisation(final: Path, config: dict[str, Any]) -> None:
    """Completes what a kill left of :func:`replace_directory`: an attempt that is this run's
    finished result (:func:`attempt_problem`) is renamed into place, a ``seed-K.replaced`` with
    nothing to replace it is put back, and one left beside its replacement is removed.

    Any other ``result.json`` in the attempt is left where it is with a one-line warning: it
    never replaces or deletes the seed's finished result. A finished attempt that replaces a
    finished result (the rerun was killed between its last write and its rename; or someone
    wrote the attempt) says so in one line."""
    import sys

    attempt = final.with_name(final.name + ".attempt")
    old = final.with_name(final.name + ".replaced")
    complete = False
    if (attempt / "result.json").exists():
        problem = attempt_problem(attempt, config)
        complete = problem is None
        if not complete:
            print(f"clusterbench: warning: {attempt} is not put in place of {final}: {problem}",
                  file=sys.stderr, flush=True)
    if complete:
        if (final / "result.json").exists():  # a kill before the rename, or a planted attempt
            print(f"clusterbench: {attempt} holds a finished result of this configuration (a "
                  f"run killed as it finished): it replaces the result in {final}",
                  file=sys.stderr, flush=True)
        shutil.rmtree(attempt / "checkpoints", ignore_errors=True)
        replace_directory(attempt, final)
    elif old.is_dir() and not final.exists():
        old.rename(final)
    elif old.is_dir():
        shutil.rmtree(old)


def attempt_problem(attempt: Path, config: dict[str, Any]) -> str | None:
    """None when ``attempt`` holds what :func:`benchmarks.run.one.run_one` writes last for
    ``config``: a ``result.json`` of this configuration that finished or diverged, and, for a
    finished method that trains, the weights it scored (:data:`ENCODER_FILE`); else what is
    missing or wrong, in a few words."""
    from benchmarks.infra.tensor_files import BadFile
    from modules.methods import METHODS

    try:
        result = read_result(attempt / "result.json")
    except (OSError, ValueError) as err:
        return f"its result.json cannot be read as a result ({err})"
    if not same_configuration(result.get("config"), config):
        return "its result.json is not a result of this run's configuration"
    if result.get("status") not in ("finished", "diverged"):
        return f"its result.json has status {str(result.get('status'))[:40]!r}"
    if result["status"] == "diverged" or not METHODS[config["run"]["method"]].requires_training:
        return None
    if not (attempt / ENCODER_FILE).is_file():
        return f"it has no {ENCODER_FILE}, the weights its result was scored with"
    try:
        weights = load_tensors(attempt / ENCODER_FILE, "weights file", mmap=True)
    except (OSError, BadFile) as err:
        return f"its {ENCODER_FILE} cannot be read ({str(err)[:200]})"
    return None if isinstance(weights, dict) and weights else f"its {ENCODER_FILE} holds no weights"


def replace_directory(new: Path, target: Path) -> None:
    """Put the finished ``new`` directory in ``target``'s place. The old one is renamed aside
    first and removed after, so ``target`` always holds one whole result."""
    old = target.with_name(target.name + ".replaced")
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        target.rename(old)
    new.rename(target)
    if old.exists():
        shutil.rmtree(old)


#: The trained weights every run keeps (``torch.load(path, weights_only=True)`` reads them).
ENCODER_FILE = "encoder.pt"


def kept_weights(folder: Path) -> dict[str, torch.Tensor] | None:
    """The encoder weights a run kept in its seed ``folder`` (:data:`ENCODER_FILE`), read without
    running code from the file; None where it kept none (a method that trains nothing)."""
    path = folder / ENCODER_FILE
    return load_tensors(path, "weights file") if path.is_file() else None


def load_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], source: Path,
                 builder: str = "its config", advice: str = "") -> None:
    """``state`` (read from ``source``) into ``model``: only the online probe, a training monitor
    that :func:`encoder_state` leaves out, may be missing; weights of another model are refused
    before they score anything."""
    mismatch = state_mismatch(model.state_dict(), state, "the model",
                              may_lack=("online_probe.",))
    if mismatch is not None:  # checked first: torch's own refusal is a paragraph per tensor
        raise ConfigError(f"the weights in {source} do not fit the model {builder} builds: "
                          f"{mismatch}{advice}")
    model.load_state_dict(state, strict=False)


def encoder_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The trained weights the features come from (backbone, heads, blocks), without the online
    probe, which is a training-time monitor."""
    # a compiled module's weights sit under "_orig_mod.": the file keeps the plain names
    return {k.replace("._orig_mod", ""): v.detach().cpu() for k, v in model.state_dict().items()
            if not k.startswith("online_probe.")}
