"""What every result records about where and with what it was computed."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

import torch

SOURCE_DIR = Path(__file__).resolve().parents[2]


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def git_commit(directory: Path = SOURCE_DIR) -> dict[str, object] | None:
    """The commit of the checkout clusterbench runs from, and whether it has local changes."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=directory, capture_output=True, text=True, timeout=10,
                                check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(status.strip())}


def machine() -> dict[str, object]:
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"hostname": platform.node(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "cpus": cpus, "gpu": gpu}


def describe_machine(info: dict[str, object]) -> str:
    """One line, e.g. ``2-core x86_64 CPU`` or ``NVIDIA H100 80GB HBM3``."""
    return str(info["gpu"]) if info.get("gpu") else f"{info['cpus']}-core {info['processor']} CPU"


def environment() -> dict[str, object]:
    return {
        "git": git_commit(),
        "versions": {"clusterbench": _version("clusterbench"), "torch": torch.__version__,
                     "lightning": _version("lightning"), "python": platform.python_version()},
        "machine": machine(),
    }
