"""What a search's driver watches in Ray Tune's loop: how each trial ended, and how long trials
have waited for resources."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from ray.tune import Callback

from benchmarks.infra import stop_signals
from benchmarks.infra.said import new_lines, print_new_lines
from benchmarks.run.local_ray import never_free
from tune.records import SAID, TrialRecord, trial_folder


class TrialOutcomes(Callback):
    """How each trial of this start of the search ended (``ended``: None when it completed,
    else its error's last line; absent when cut off), printing one line per ending. A trial
    that ends without retry because its failure would repeat (it diverged, or failed in an
    earlier start) completes in Tune's eyes: its record in ``state`` holds the error."""

    def __init__(self, metric: str, state: Path, configs: list[dict[str, Any]]) -> None:
        self.ended: dict[int, str | None] = {}
        self.metric, self.state, self.configs = metric, state, configs
        self.total, self.start = len(configs), time.monotonic()

    def on_trial_complete(self, iteration: int, trials: list, trial, **info: Any) -> None:
        index = trial.config["trial"]
        record = TrialRecord.open(trial_folder(self.state, index), index, self.configs[index])
        self.ended[index] = record.error
        if record.error is not None:
            self.say(trial, f"failed: {record.error[:160]}")
            return
        last = trial.last_result or {}
        value = last.get(self.metric)
        self.say(trial, (f"{self.metric} {value:.4f} after {last.get('epoch', '?')} epoch(s)"
                         if isinstance(value, int | float) else "no result"))

    def on_trial_error(self, iteration: int, trials: list, trial, **info: Any) -> None:
        lines = []
        if trial.error_file and Path(trial.error_file).is_file():  # a text trace
            lines = Path(trial.error_file).read_text(errors="replace").strip().splitlines()
        self.ended[trial.config["trial"]] = lines[-1] if lines else "the trial's process ended"
        self.say(trial, f"failed: {self.ended[trial.config['trial']][:160]}")

    def say(self, trial, what: str) -> None:
        done = len(self.ended)
        elapsed = time.monotonic() - self.start
        left = (f", about {elapsed / done * (self.total - done):.0f} s left"
                if 0 < done < self.total else "")
        print(f"trial {trial.config['trial']:04d}: {what} ({done} of {self.total}{left})",
              flush=True)


class ResourceWait(Callback):
    """Fails the search when no trial has run for ``budget_s`` seconds while some wait for
    resources: a cluster busy with other work, or a node that went away, would otherwise keep
    the search waiting without a word."""

    def __init__(self, budget_s: float, needs: str) -> None:
        self.budget_s, self.needs, self.since = budget_s, needs, None
        self.asked, self.starting = 0.0, False

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        statuses = {t.status for t in trials}
        if "RUNNING" in statuses or "PENDING" not in statuses or self.trial_starting():
            self.since = None
            return
        self.since = self.since or time.monotonic()
        if time.monotonic() - self.since > self.budget_s:
            raise never_free("no trial", self.budget_s, self.needs, "--resource-wait",
                             "--resume")

    def trial_starting(self) -> bool:
        """Whether a trial's process is starting (asked of Ray at most once a second): Tune
        creates a trial's actor only once its resources are held, and the actor is pending
        creation while its process starts and imports, which takes seconds; that trial has
        its resources and is not waiting for them."""
        if time.monotonic() - self.asked >= 1.0:
            self.asked, self.starting = time.monotonic(), actors_starting()
        return self.starting


def actors_starting() -> bool:
    """Whether Ray is creating an actor of this driver's job (placed, its process starting);
    False when Ray cannot say."""
    try:
        import ray
        from ray._private.state import actors

        job = ray.JobID.from_hex(ray.get_runtime_context().get_job_id())
        return bool(actors(job_id=job, actor_state_name="PENDING_CREATION"))
    except Exception:  # noqa: BLE001 - a Ray without this table: count the wait as before
        return False


class TrialLines(Callback):
    """Prints the lines the trials of the search in ``state`` say to the user (a checkpoint
    set aside, a trial resumed from its checkpoint), each once, as they come: Ray keeps the
    trials' output in their nodes' logs. Lines said before this start of the search are not
    repeated."""

    def __init__(self, state: Path) -> None:
        self.state, self.last = Path(state), 0.0
        self.heard = {path: new_lines(path, 0)[1] for path in self.files()}  # said before

    def files(self) -> list[Path]:
        return sorted(self.state.glob(f"trials/*/{SAID}"))

    def relay(self) -> None:
        self.last = time.monotonic()
        for path in self.files():
            self.heard[path] = print_new_lines(path, self.heard.get(path, 0))

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        if time.monotonic() - self.last >= 1.0:
            self.relay()

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self.relay()


class StopSignalsTaken(Callback):
    """Takes SIGUSR1 back from Ray Tune, which installs its own stop of the search on it as the
    search starts: the command's handler stops the search the same way
    (:func:`tune.search.stop_search`), and says so, and a SLURM job is requeued."""

    def setup(self, **info: Any) -> None:
        stop_signals.reinstate(signal.SIGUSR1)
