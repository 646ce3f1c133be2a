"""A search's Ray state is signed by the process that writes it and checked before a resume.

``tune.Tuner.restore`` unpickles the experiment directory (``<storage>/<run>/``): ``tuner.pkl``,
the searcher and callback states, the trials' states inside ``experiment_state-*.json`` and
their checkpoints. A pickle runs whatever code it names, and a results folder is data (copied,
shared, downloaded), so the search records a keyed digest of every file in that directory in
``<storage>/search-state.hmac`` (:mod:`benchmarks.infra.signed_state`) and a resume loads nothing
unless every file matches.

When it is signed: while the search runs, at most every :data:`SIGN_EVERY_S` seconds at the end
of a step of Ray's loop (after Ray has saved its experiment state in that step), and once more
when ``tuner.fit()`` returns or raises (a finished search, Ctrl-C, a failure). A search killed
outright (SIGKILL, a lost machine) has its state as of its last signature; if Ray wrote anything
after that (a newer experiment state, a trial's checkpoint or result line), the resume is
refused with the same message: start the search anew. A refusal never loads the state.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ray.tune import Callback

from benchmarks.infra.signed_state import TreeSigner, check_tree
from benchmarks.run.spec import ConfigError

#: Beside a search's Ray state (``<storage>/<run>/``): the keyed digest of every file in it.
STATE_RECORD = "search-state.hmac"
#: How often a running search signs its state again (seconds).
SIGN_EVERY_S = 1.0


def state_record(experiment_dir: Path) -> Path:
    return experiment_dir.parent / STATE_RECORD


def sign_search_state(experiment_dir: Path, signer: TreeSigner | None = None) -> None:
    """Record the keyed digest of every file of the search's Ray state."""
    (signer or TreeSigner()).sign(experiment_dir, state_record(experiment_dir))


def check_search_state(experiment_dir: Path) -> None:
    """Refuse (ConfigError: exit 2) to resume a search whose Ray state this installation did
    not sign, or that changed since: restoring it would unpickle it."""
    problem = check_tree(experiment_dir, state_record(experiment_dir))
    if problem is not None:
        raise ConfigError(
            f"the search state in {experiment_dir} was not written by this installation or was "
            f"changed since ({problem}), so it is not loaded: start a new search by removing "
            f"{experiment_dir.parent} or use another --storage")


class SignSearchState(Callback):
    """Signs the search's state while it runs (see the module docstring). It takes the
    experiment directory from the trials, which a restored search updates when its folder has
    moved; ``tuner.pkl`` holds this callback, so a restored search keeps signing."""

    def __init__(self) -> None:
        self._signer, self._last = TreeSigner(), 0.0

    def __reduce__(self) -> tuple[type, tuple]:  # tuner.pkl holds a fresh one, no cache
        return (SignSearchState, ())

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        if trials and time.monotonic() - self._last >= SIGN_EVERY_S:
            sign_search_state(Path(trials[0].storage.experiment_fs_path), self._signer)
            self._last = time.monotonic()
