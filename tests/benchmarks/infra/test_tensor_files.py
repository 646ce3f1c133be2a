"""Every weights file and checkpoint is opened only as a regular file of bounded size: a FIFO, a
device or a folder given as one is a line naming it, never a read that waits or never ends."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from fifo import finishes

from benchmarks.infra.tensor_files import BadFile, load_tensors, opened_regular_file


@pytest.mark.parametrize("mmap", [False, True], ids=["read", "mapped"])
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path, mmap):
    fifo = tmp_path / "last.ckpt"
    os.mkfifo(fifo)
    raised: list[BaseException] = []

    def read() -> None:
        try:
            load_tensors(fifo, "checkpoint", mmap=mmap)
        except BadFile as err:
            raised.append(err)

    finishes(read, fifo, "load_tensors")
    assert raised and str(raised[0]).startswith(f"checkpoint {fifo} is a FIFO")
    assert "accepted: a regular file written by torch.save" in str(raised[0])


@pytest.mark.parametrize("path, kind", [("/dev/zero", "a device"), ("/dev/null", "a device"),
                                        (".", "a folder")], ids=["zero", "null", "folder"])
def test_a_device_or_folder_is_refused_before_it_is_read(path, kind):
    with pytest.raises(BadFile, match=rf"^weights file {path} is {kind}") as err:
        load_tensors(path, "weights file")
    assert "\n" not in str(err.value)


def test_a_file_larger_than_the_bound_is_refused_from_its_size(tmp_path):
    path = tmp_path / "big.pt"
    torch.save({"w": torch.zeros(1000)}, path)
    with pytest.raises(BadFile, match=r"is [\d,]+ bytes, larger than any weights file"):
        opened_regular_file(path, "weights file", limit=1000)
    os.close(opened_regular_file(path, "weights file", limit=path.stat().st_size))


@pytest.mark.parametrize("mmap", [False, True], ids=["read", "mapped"])
def test_a_regular_file_and_a_link_the_user_named_still_load(tmp_path, mmap):
    path, link = tmp_path / "w.pt", tmp_path / "best.pt"
    torch.save({"w": torch.arange(3)}, path)
    link.symlink_to(path)
    for name in (path, link):
        assert torch.equal(load_tensors(name, "weights file", mmap=mmap)["w"], torch.arange(3))


def test_a_link_to_a_fifo_is_refused_as_the_fifo_is(tmp_path):
    fifo, link = tmp_path / "pipe", tmp_path / "last.ckpt"
    os.mkfifo(fifo)
    link.symlink_to(fifo)
    raised: list[BaseException] = []

    def read() -> None:
        try:
            load_tensors(link, "checkpoint")
        except BadFile as err:
            raised.append(err)

    finishes(read, fifo, "load_tensors")
    assert raised and "is a FIFO" in str(raised[0])


def test_no_descriptor_is_left_open(tmp_path):
    """A refused file and a loaded one both close what they opened (a resume reads several)."""
    path = tmp_path / "w.pt"
    torch.save({"w": torch.ones(1)}, path)
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        load_tensors(path, "weights file", mmap=True)
        with pytest.raises(BadFile):
            load_tensors(Path("/dev/zero"), "weights file")
    assert len(os.listdir("/proc/self/fd")) <= before
