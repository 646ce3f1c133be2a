"""A suite that pins ``trainer.accelerator: cpu`` keeps it on a Ray cluster with GPUs: its runs
hold no GPU and train on the CPUs (before, each run took a GPU and was switched to ``gpu``, and
on a cluster declaring GPUs it lacks every run failed with a long traceback); asking for GPUs per
run without saying which accelerator wins is refused in one line, before anything runs."""

from __future__ import annotations

import pickle

import pytest

from benchmarks.infra.errors import ConfigError
from benchmarks.run.spec import RunSpec
from benchmarks.run.trainer import RunOptions
from benchmarks.suites import runner
from benchmarks.suites.runner import Placement


def run_of(name: str, accelerator: str | None) -> RunSpec:
    trainer = {"max_epochs": 1} | ({"accelerator": accelerator} if accelerator else {})
    return RunSpec(name=name, method="pixels", trainer=trainer)


class FakeRay:
    """What execute_on_ray asks of Ray, on a cluster of one node with 2 GPUs and 4 CPUs: each
    task is recorded with the resources and options it was given, and finishes at once."""

    def __init__(self) -> None:
        self.tasks: list[dict] = []

    def cluster_resources(self) -> dict:
        return {"CPU": 4.0, "GPU": 2.0}

    def nodes(self) -> list[dict]:
        return [{"Alive": True, "Resources": self.cluster_resources(),
                 "NodeManagerAddress": "127.0.0.1"}]

    def remote(self, function):
        tasks = self.tasks

        class Remote:
            def options(self, **resources):
                def submit(marker, said, payload):
                    _, (settings, run, seed, suite_dir, options) = pickle.loads(payload)
                    tasks.append({"run": run.name, "gpus": resources["num_gpus"],
                                  "accelerator": options.accelerator})
                    return len(tasks)
                return type("Options", (), {"remote": staticmethod(submit)})()
        return Remote()

    def wait(self, refs, num_returns, timeout):
        return refs[:1], refs[1:]

    def cancel(self, ref, force):
        pass


@pytest.fixture
def fake_ray(monkeypatch, tmp_path):
    import ray

    fake = FakeRay()
    for name in ("cluster_resources", "nodes", "remote", "wait", "cancel"):
        monkeypatch.setattr(ray, name, getattr(fake, name))
    monkeypatch.setattr(runner, "already_done", lambda *args: None)
    monkeypatch.setattr(runner, "ray_outcome",
                        lambda name, folder, ready, suite_dir: runner.Outcome(name, result={}))
    return fake


def submitted(jobs, placement, options, tmp_path) -> None:
    suite = type("Suite", (), {"name": "s", "settings": None})()
    list(runner.execute_on_ray(jobs, suite, tmp_path, options, placement))


def test_a_run_pinned_to_the_cpu_holds_no_gpu_and_trains_on_the_cpu(fake_ray, tmp_path):
    jobs = [(run_of("pinned", "cpu"), 0), (run_of("free", None), 0)]
    submitted(jobs, Placement(address="auto"), RunOptions(), tmp_path)
    assert fake_ray.tasks == [{"run": "pinned", "gpus": 0, "accelerator": "cpu"},
                              {"run": "free", "gpus": 1, "accelerator": "gpu"}]


def test_the_accelerator_given_on_the_command_line_wins(fake_ray, tmp_path):
    jobs = [(run_of("pinned", "cpu"), 0)]
    submitted(jobs, Placement(address="auto"), RunOptions(accelerator="cpu"), tmp_path)
    assert fake_ray.tasks == [{"run": "pinned", "gpus": 1, "accelerator": "cpu"}]


def test_gpus_per_run_for_a_pinned_run_without_an_accelerator_is_one_line(fake_ray, tmp_path):
    jobs = [(run_of("b", "cpu"), 0), (run_of("a", "cpu"), 1), (run_of("c", "gpu"), 0)]
    with pytest.raises(ConfigError) as err:
        submitted(jobs, Placement(address="auto", gpus_per_run=2), RunOptions(), tmp_path)
    assert str(err.value) == (
        "--gpus-per-run 2 gives each run GPUs, but the suite pins trainer.accelerator: cpu for "
        "a, b: add --accelerator gpu to train on them, or --accelerator cpu to hold them and "
        "train on the CPUs")
    assert fake_ray.tasks == []
