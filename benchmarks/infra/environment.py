"""What every result records about where and with what it was computed.

Run as a module, ``python -m benchmarks.infra.environment --versions`` prints the line README.md
gives for the versions clusterbench was tested with, from the packages installed here.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

#: The folder holding clusterbench's packages: a checkout's top level, or site-packages.
SOURCE_DIR = Path(__file__).resolve().parents[2]

#: The packages the tested-versions line names, by distribution name, after Python.
TESTED_PACKAGES = ("torch", "torchvision", "lightning", "ray")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git(directory: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=directory, capture_output=True, text=True,
                          timeout=10, check=True).stdout


def names_clusterbench(pyproject: Path) -> bool:
    """True when ``pyproject`` is clusterbench's: its ``[project]`` table has
    ``name = "clusterbench"`` (read line by line: Python 3.10 has no TOML reader)."""
    try:
        lines = pyproject.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    table = None
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line.startswith("["):
            table = line
        elif table == "[project]" and re.fullmatch(r"name\s*=\s*[\"']clusterbench[\"']", line):
            return True
    return False


def git_commit(directory: Path = SOURCE_DIR) -> dict[str, object] | None:
    """The commit of clusterbench's own checkout and whether it has local changes; ``None``
    unless ``directory`` is the top of a git checkout whose ``pyproject.toml`` is clusterbench's
    (an installed copy inside another repository is described by its installed version
    instead)."""
    try:
        top = Path(_git(directory, "rev-parse", "--show-toplevel").strip())
        if (top.resolve() != Path(directory).resolve()
                or not names_clusterbench(top / "pyproject.toml")):
            return None
        commit = _git(directory, "rev-parse", "HEAD").strip()
        status = _git(directory, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(status.strip())}


#: This checkout's commit (and local changes) when this process loaded clusterbench: the code a
#: process runs is what it imported then, whatever the checkout becomes during a long suite.
LOADED_FROM = git_commit()


def machine() -> dict[str, object]:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"hostname": platform.node(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "cpus": cpus, "gpu": gpu}


def describe_machine(info: dict[str, object]) -> str:
    """One line, e.g. ``2-core x86_64 CPU`` or ``NVIDIA H100 80GB HBM3``."""
    return str(info["gpu"]) if info.get("gpu") else f"{info['cpus']}-core {info['processor']} CPU"


def environment() -> dict[str, object]:
    import torch

    return {
        "git": LOADED_FROM,
        "versions": {"clusterbench": _version("clusterbench"), "torch": torch.__version__,
                     "lightning": _version("lightning"), "python": platform.python_version()},
        "machine": machine(),
    }


def versions_line(info: dict[str, object] | None = None) -> str:
    """README.md's tested-versions line, from the versions installed here and this machine.

    >>> versions_line().startswith("Tested with Python ")
    True
    """
    versions = ", ".join(f"{name} {_version(name)}" for name in TESTED_PACKAGES)
    return (f"Tested with Python {platform.python_version()}, {versions} on {platform.system()} "
            f"({describe_machine(info or machine())}).")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.infra.environment",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--versions", action="store_true",
                        help="print README.md's tested-versions line for this installation")
    args = parser.parse_args(argv)
    if args.versions:
        print(versions_line())
    else:
        import json

        print(json.dumps(environment(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
