"""Tests' side of the tiny dataset files written in the real on-disk formats (the writers are
:mod:`datamodules.sample_files`): the checksums the loaders expect, set to those of the files."""

from __future__ import annotations

from pathlib import Path

from datamodules.sample_files import generated_checksums


def set_checksums(monkeypatch, root: Path) -> None:
    """Make torchvision (CIFAR) and clusterbench (Fashion-MNIST) expect the md5 sums of the
    files in ``root`` (test-only): the checks themselves still run."""
    for cls, attr, value in generated_checksums(root):
        monkeypatch.setattr(cls, attr, value)
