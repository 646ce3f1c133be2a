"""Files from outside the suite file (checkpoints, weights) never run code as they are read, and a
refused or broken one ends in one line naming it, exit 2."""

from __future__ import annotations

import base64
import os
import pathlib
from pathlib import Path

import pytest
import torch
import yaml
from fifo import finishes
from planted import Payload

from benchmarks.cli import main
from benchmarks.infra.tensor_files import BadFile, load_tensors

SUITE = {
    "name": "scored", "seeds": [0],
    "data": {"name": "digits", "batch_size": 32, "limit_per_class": 10},
    "trainer": {"max_epochs": 1, "accelerator": "cpu"},
    "evaluation": {"knn": {"k": [5], "temperature": None}},
    "runs": [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}],
}


def crafted_checkpoint(folder: pathlib.Path, marker: pathlib.Path) -> pathlib.Path:
    """A ``clusterbench fit`` log folder whose ``.ckpt`` carries a payload beside real weights."""
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({
        "seed_everything": 0,
        "model": {"class_path": "modules.methods.simclr.SimCLR",
                  "init_args": {"backbone_width": 4}},
        "data": {"class_path": "datamodules.DigitsDataModule",
                 "init_args": {"limit_per_class": 10}}}))
    checkpoint = folder / "checkpoints/epoch=0-step=1.ckpt"
    torch.save({"epoch": 0, "state_dict": {"w": torch.zeros(1)},
                "hyper_parameters": {"x": Payload(marker)}}, checkpoint)
    return checkpoint


def test_evaluate_refuses_a_checkpoint_that_would_run_code(tmp_path, capsys):
    marker = tmp_path / "payload-ran"
    checkpoint = crafted_checkpoint(tmp_path / "logs/version_0", marker)
    suite = tmp_path / "scored.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    code = main(["evaluate", str(checkpoint), "--suite", str(suite),
                 "--results", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code == 2
    assert not marker.exists()
    assert str(checkpoint) in err and "never unpickled" in err
    assert len(err.strip().splitlines()) == 1
    assert not list((tmp_path / "results").rglob("result.json"))


def test_evaluate_never_waits_on_a_fifo_named_as_a_checkpoint(tmp_path, capsys):
    """A FIFO was refused as 'neither a bench run folder, a .ckpt file nor ...'; it is said as
    what it is, as fit --ckpt_path says it, and never opened to wait for a writer."""
    checkpoint = crafted_checkpoint(tmp_path / "logs/version_0", tmp_path / "unused")
    checkpoint.unlink()
    os.mkfifo(checkpoint)
    suite = tmp_path / "scored.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    codes: list[int] = []
    finishes(lambda: codes.append(main(["evaluate", str(checkpoint), "--suite", str(suite),
                                        "--results", str(tmp_path / "results")])),
             checkpoint, "clusterbench evaluate")
    err = capsys.readouterr().err.strip().splitlines()
    assert codes == [2] and len(err) == 1 and f"checkpoint {checkpoint} is a FIFO" in err[0]


@pytest.mark.parametrize("saved, said", [
    ({"epoch": 0, "state_dict": {"w": torch.zeros(1)}}, "pytorch-lightning_version is missing"),
    ({"epoch": float("inf"), "pytorch-lightning_version": "2.6.0", "state_dict": {}},
     "its state_dict is empty"),
    ({"pytorch-lightning_version": "2.6.0", "state_dict": {"w": "zeros"}}, "not a tensor"),
], ids=["no-version", "no-weights", "not-a-tensor"])
def test_evaluate_holds_a_checkpoint_to_what_fit_does(tmp_path, capsys, saved, said):
    """The checkpoint ``evaluate`` scores is held to the rules ``fit --ckpt_path`` holds it to:
    an empty state_dict with ``epoch: inf`` ended in an OverflowError traceback."""
    checkpoint = crafted_checkpoint(tmp_path / "logs/version_0", tmp_path / "unused")
    torch.save(saved, checkpoint)
    suite = tmp_path / "scored.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    assert main(["evaluate", str(checkpoint), "--suite", str(suite),
                 "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"checkpoint {checkpoint}" in err[0] and said in err[0], err


def test_a_bench_run_folder_with_crafted_weights_is_refused(tmp_path, capsys):
    marker = tmp_path / "payload-ran"
    folder = tmp_path / "runs/simclr/seed-0"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({
        "seed": 0, "run": {"name": "simclr", "method": "simclr",
                           "model": {"backbone_width": 4}, "data": {"name": "digits"}}}))
    torch.save({"backbone.w": Payload(marker)}, folder / "encoder.pt")
    suite = tmp_path / "scored.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    assert main(["evaluate", str(folder), "--suite", str(suite),
                 "--results", str(tmp_path / "results")]) == 2
    assert not marker.exists()
    assert "encoder.pt" in capsys.readouterr().err


@pytest.mark.parametrize("run, message", [
    ({"name": "simclr", "method": "nosuch", "data": {"name": "digits"}},
     "unknown method in {folder}/config.yaml: run 'nosuch'"),
    ({"name": "simclr", "method": "simclr", "model": {"backbone_width": -4},
      "data": {"name": "digits"}},
     "run 'simclr@evaluated': backbone_width must be an integer of at least 1, got -4"),
    ({"name": "simclr", "method": "simclr", "model": {"no_such_argument": 1},
      "data": {"name": "digits"}}, "unknown key 'no_such_argument'"),
    ({"name": "../../out", "method": "simclr", "data": {"name": "digits"}}, "run name"),
    ({"name": "simclr", "method": "simclr", "data": ["digits"]}, "data must be a mapping"),
])
def test_a_seed_folder_whose_config_was_edited_is_one_line_and_exit_2(tmp_path, capsys, run,
                                                                     message):
    """A seed folder's config.yaml is read as a suite's run is checked: an unknown method, a
    bad value, an unknown argument, a name that leaves the folder."""
    folder = tmp_path / "runs/simclr/seed-0"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump({"seed": 0, "run": run}))
    torch.save({}, folder / "encoder.pt")
    suite = tmp_path / "scored.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    assert main(["evaluate", str(folder), "--suite", str(suite),
                 "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message.format(folder=folder) in err[0], err
    assert not list((tmp_path / "results").rglob("result.json"))


@pytest.mark.parametrize("content", [b"", b"\x00" * 7, b"PK\x03\x04 truncated zip"],
                         ids=["empty", "zeros", "truncated"])
def test_a_broken_file_is_one_line_naming_it(tmp_path, content):
    path = tmp_path / "last.ckpt"
    path.write_bytes(content)
    with pytest.raises(BadFile, match=r"checkpoint .*last\.ckpt is truncated or not a torch file"):
        load_tensors(path, "checkpoint")


def test_plain_weights_and_lightning_checkpoints_still_load(tmp_path):
    path = tmp_path / "w.pt"
    torch.save({"state_dict": {"a": torch.arange(3)}, "epoch": 2, "loops": {"x": [1, 2.0]}}, path)
    saved = load_tensors(path, "checkpoint", mmap=True)
    assert saved["epoch"] == 2 and torch.equal(saved["state_dict"]["a"], torch.arange(3))


# -- a results folder's files are data: they never choose where a page goes or what it embeds --
def planted_result(root: Path, **fields) -> Path:
    from test_leaderboard import fake_result, write_result

    return write_result(root, {**fake_result("alpha", 0, {"linear_probe_top1": 0.8}), **fields})


@pytest.mark.parametrize("suite", ["../../escaped", "/tmp/clusterbench-escaped", "a/b"])
def test_report_never_writes_outside_its_folder(suite, tmp_path, capsys) -> None:
    results, out = tmp_path / "results", tmp_path / "docs" / "results"
    planted_result(results, suite=suite)
    before = set(tmp_path.rglob("*.md")) | set(Path("/tmp").glob("clusterbench-escaped*"))
    assert main(["report", str(results), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a safe name" in err[0] and repr(suite) in err[0]
    after = set(tmp_path.rglob("*.md")) | set(Path("/tmp").glob("clusterbench-escaped*"))
    assert after == before


@pytest.mark.parametrize("figure", ["../../../secret.png", "SECRET_PATH", "linked.png",
                                    "notes.txt"])
def test_the_html_page_embeds_only_the_runs_own_png_figures(figure, tmp_path, capsys) -> None:
    from benchmarks.suites.leaderboard import write_leaderboard

    results = tmp_path / "results"
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"TOP-SECRET-" * 50)
    name = str(secret) if figure == "SECRET_PATH" else figure
    path = planted_result(results, figures=[name, "own.png"])
    (path.parent / "own.png").write_bytes(b"\x89PNG own figure")
    (path.parent / "notes.txt").write_bytes(b"TOP-SECRET-" * 50)
    (path.parent / "linked.png").symlink_to(secret)
    write_leaderboard(results)
    page = (results / "leaderboard.html").read_text()
    assert base64.b64encode(b"TOP-SECRET-" * 3).decode()[:40] not in page
    assert base64.b64encode(b"\x89PNG own figure").decode() in page
    assert "not a PNG file in its own folder" in capsys.readouterr().err


def test_a_run_name_from_a_result_file_stays_one_cell_of_text(tmp_path) -> None:
    from benchmarks.suites.leaderboard import write_leaderboard

    results = tmp_path / "results"
    planted_result(results, run="evil|cell<img src=x onerror=alert(1)>")
    write_leaderboard(results)
    table = [line for line in (results / "leaderboard.md").read_text().splitlines()
             if line.startswith("| ")]
    header, row = table[0], table[1]
    assert row.count(" | ") == header.count(" | ")  # the name did not open another column
    assert "<img" not in row and "evil\\|cell&lt;img" in row


@pytest.mark.parametrize("content", [b"", b"\x8f" * 4096, b"PK\x03\x04 half a zip"])
def test_an_empty_random_or_cut_file_is_one_line_naming_it(tmp_path, content):
    """What a full disk or an overwrite leaves of a checkpoint: one line naming the file, also
    when it is memory-mapped (a run's resume reads it so)."""
    path = tmp_path / "last.ckpt"
    path.write_bytes(content)
    with pytest.raises(BadFile, match=f"checkpoint {path} is truncated or not a torch file"):
        load_tensors(path, "checkpoint", mmap=True)
