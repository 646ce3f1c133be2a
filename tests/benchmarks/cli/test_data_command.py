"""``clusterbench data``: where each dataset goes, whether it is there, verified offline with the
checks a run makes, and fetched where there is a network (never in these tests)."""

from __future__ import annotations

import pytest
from sample_data import set_checksums

from benchmarks.cli import main
from datamodules.sample_files import write_all


def table(out: str) -> dict[str, str]:
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ")]
    return {cells[0].strip("| "): cells[-1].strip("| ") for cells in rows[1:]}


def test_an_empty_root_lists_every_dataset_absent_with_its_source(tmp_path, capsys) -> None:
    assert main(["data", "list", str(tmp_path)]) == 0
    status = table(capsys.readouterr().out)
    assert set(status) == {"cifar10", "cifar100", "mnist", "fashionmnist", "tinyimagenet"}
    assert all(s.startswith("absent") for s in status.values())
    assert "cifar-10-python.tar.gz" in status["cifar10"]


def test_verify_runs_every_check_and_names_a_corrupt_file(tmp_path, capsys,
                                                          monkeypatch) -> None:
    write_all(tmp_path)
    set_checksums(monkeypatch, tmp_path)  # generated files: the checks run against their md5s
    assert main(["data", "verify", str(tmp_path)]) == 0
    assert set(table(capsys.readouterr().out).values()) == {"verified"}
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    batch.write_bytes(batch.read_bytes()[:-10])  # truncated after the md5s were taken
    assert main(["data", "verify", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    status = table(captured.out)
    assert status["cifar10"].startswith("FAILED") and "data_batch_3" in status["cifar10"]
    assert status["mnist"] == "verified"
    assert captured.err.strip() == "clusterbench: error: cifar10 failed verification (above)"


def test_fetch_without_a_network_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch) -> None:
    def offline(root, name):
        raise OSError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr("datamodules.catalog.fetch", offline)
    assert main(["data", "fetch", "cifar10", "--to", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["clusterbench: error: cifar10: the download failed ([Errno -3] Temporary "
                   "failure in name resolution)"]


@pytest.mark.parametrize("argv, message", [
    (["data", "fetch", "imagenet", "--to", "x"], "unknown dataset 'imagenet'; accepted: cifar10"),
    (["data", "fetch", "cifar10"], "data fetch needs dataset names and --to DIR"),
    (["data", "verify", "a", "b"], "data verify takes one data root, got a b"),
])
def test_bad_requests_are_one_line_and_exit_2(argv, message, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
