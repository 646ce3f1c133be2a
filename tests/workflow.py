"""The example CI workflow (``docs/examples/github-actions.yml``) as a script: its ``run:``
steps in order, what a runner would execute after checking out the code."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "docs" / "examples" / "github-actions.yml"


def run_steps(path: Path = WORKFLOW) -> list[dict]:
    """The workflow's steps that run a command (not the ``uses:`` actions), in order."""
    (job,) = yaml.safe_load(path.read_text())["jobs"].values()
    return [step for step in job["steps"] if "run" in step]


def clusterbench_commands(path: Path = WORKFLOW) -> list[list[str]]:
    """The arguments of every ``clusterbench`` command the workflow runs."""
    commands = []
    for step in run_steps(path):
        words = shlex.split(step["run"])
        if words and words[0].endswith("clusterbench"):
            commands.append(words[1:])
    return commands


def run_workflow(repo: Path, skip: tuple[str, ...] = ("Install",)) -> int:
    """Runs the workflow's ``run:`` steps in ``repo`` (a checkout with its ``.venv``), as a
    runner would, but for the steps named in ``skip``; returns the first failing step's status,
    else 0. The job summary goes to ``repo/step-summary.md``."""
    import os
    import subprocess

    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(repo / "step-summary.md"),
           "PYTHONPATH": str(repo)}
    failed = 0
    for step in run_steps():
        if step.get("name") in skip or (failed and step.get("if") != "always()"):
            continue
        print(f"--- {step.get('name', step['run'][:40])}", flush=True)
        status = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=repo, env=env).returncode
        failed = failed or status
    return failed


if __name__ == "__main__":
    import sys

    # python tests/workflow.py REPO: the example workflow on a checkout whose venv is there
    sys.exit(run_workflow(Path(sys.argv[1]).resolve()))
