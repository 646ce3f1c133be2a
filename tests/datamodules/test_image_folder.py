"""Your own images: the image-folder DataModule on tiny PNG and JPEG files written here, in
both layouts (train/ and test/ folders, or one folder split by test_fraction), and through
``clusterbench bench`` from a suite that names the folder."""

from __future__ import annotations

import csv
import json
import re
from dataclasses import astuple
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from benchmarks.cli import main
from datamodules import DATAMODULES, ImageFolderDataModule

#: Each class a colour: an image's mean colour tells its class.
COLOURS = {"cats": (220, 40, 40), "dogs": (40, 200, 60), "owls": (50, 60, 210)}


def write_images(folder: Path, per_class: int, suffix: str = ".png", size=(20, 14)) -> None:
    rng = np.random.default_rng(len(str(folder)))
    for name, colour in COLOURS.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            noise = rng.integers(-20, 20, (size[1], size[0], 3))
            pixels = np.clip(np.array(colour) + noise, 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / name / f"{i:03d}{suffix}")
    (folder / "notes.txt").write_text("not a class")  # files beside the classes are ignored


def test_one_folder_is_split_by_test_fraction_the_same_for_every_seed(tmp_path):
    write_images(tmp_path / "images", per_class=10, suffix=".jpg")
    modules = [ImageFolderDataModule(folder=str(tmp_path / "images"), image_size=16, seed=seed,
                                     test_fraction=0.2) for seed in (0, 1)]
    assert modules[0].num_classes == 3 and modules[0].input_shape == (3, 16, 16)
    splits = [astuple(dm.load()) for dm in modules]
    train_x, train_y, test_x, test_y = splits[0]
    assert train_x.dtype == torch.uint8 and train_x.shape == (24, 3, 16, 16)
    assert test_x.shape == (6, 3, 16, 16) and torch.bincount(test_y).tolist() == [2, 2, 2]
    assert torch.equal(test_x, splits[1][2])  # the test split does not follow the run's seed
    # labels follow the sorted class names: each class's own colour is its brightest channel
    for label, colour in enumerate(COLOURS.values()):
        brightest = train_x[train_y == label].float().mean((0, 2, 3)).argmax().item()
        assert brightest == int(np.argmax(colour))


def test_train_and_test_folders_are_the_splits_and_grey_is_one_channel(tmp_path):
    write_images(tmp_path / "data/train", per_class=4)
    write_images(tmp_path / "data/test", per_class=2, suffix=".jpeg")
    dm = ImageFolderDataModule(folder=str(tmp_path / "data"), image_size=8, channels=1)
    train_x, train_y, test_x, test_y = astuple(dm.load())
    assert train_x.shape == (12, 1, 8, 8) and test_x.shape == (6, 1, 8, 8)
    assert test_y.tolist() == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("make, message", [
    (lambda root: None, "image folder not found: looked in"),
    (lambda root: write_images(root, per_class=0), "has 0 class folder(s) with images"),
    (lambda root: (write_images(root, per_class=2),
                   (root / "dogs" / "001.png").write_bytes(b"not an image")),
     str(Path("dogs/001.png")) + ": it is not a readable image"),
])
def test_a_missing_or_broken_folder_is_named(tmp_path, make, message):
    root = tmp_path / "images"
    make(root)
    with pytest.raises(FileNotFoundError, match=re.escape(message)) as info:
        ImageFolderDataModule(folder=str(root)).load()
    assert "\n" not in str(info.value) and "BufferedReader" not in str(info.value)


@pytest.mark.parametrize("kwargs, message", [
    ({"image_size": 4}, "image_size must be an integer of at least 8, got 4"),
    ({"channels": 2}, "channels must be 1 or 3, got 2"),
    ({"test_fraction": 1.0}, "test_fraction must be in (0, 1), got 1.0"),
])
def test_bad_settings_are_refused(tmp_path, kwargs, message):
    write_images(tmp_path / "images", per_class=3)
    with pytest.raises(ValueError, match=re.escape(message)):
        ImageFolderDataModule(folder=str(tmp_path / "images"), **kwargs)


def test_a_suite_benchmarks_a_folder_of_images(tmp_path):
    assert DATAMODULES["imagefolder"] is ImageFolderDataModule
    write_images(tmp_path / "images", per_class=12)
    suite = tmp_path / "mine.yaml"
    suite.write_text(yaml.safe_dump({
        "name": "mine", "seeds": [0],
        "data": {"name": "imagefolder", "folder": str(tmp_path / "images"), "image_size": 16,
                 "batch_size": 8},
        "trainer": {"max_epochs": 1, "accelerator": "cpu"},
        "evaluation": {"knn": {"k": [3], "temperature": None}},
        "runs": [{"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}},
                 {"name": "pixels", "method": "pixels"}]}))
    assert main(["bench", str(suite), "--results", str(tmp_path / "r"), "--no-progress"]) == 0
    result = json.loads((tmp_path / "r/mine/runs/pixels/seed-0/result.json").read_text())
    assert result["dataset"] == "imagefolder:images" and result["metrics"]["knn3_top1"] > 0.9
    rows = list(csv.DictReader((tmp_path / "r/mine/leaderboard.csv").open()))
    assert {row["dataset"] for row in rows} == {"imagefolder:images"}


def test_a_damaged_image_stops_the_suite_before_any_run_folder_in_one_line(tmp_path, capsys):
    """A file that does not decode is named before the first run makes its folder, without
    Pillow's words for it (``cannot identify image file <_io.BufferedReader name=6>``), where
    each run found it as it started, its attempt folder made."""
    write_images(tmp_path / "images", per_class=4)
    damaged = tmp_path / "images" / "owls" / "002.png"
    damaged.write_bytes(b"\x89PNG\r\n\x1a\n" + b"truncated")
    suite = tmp_path / "mine.yaml"
    suite.write_text(yaml.safe_dump({
        "name": "mine", "seeds": [0, 1],
        "data": {"name": "imagefolder", "folder": str(tmp_path / "images"), "image_size": 8,
                 "batch_size": 4},
        "trainer": {"max_epochs": 1, "accelerator": "cpu"},
        "evaluation": {"knn": {"k": [3], "temperature": None}},
        "runs": [{"name": "pixels", "method": "pixels"},
                 {"name": "simclr", "method": "simclr", "model": {"backbone_width": 4}}]}))
    assert main(["bench", str(suite), "--results", str(tmp_path / "r"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{damaged}: it is not a readable image" in err[0], err
    assert "BufferedReader" not in err[0] and "PIL" not in err[0]
    assert not (tmp_path / "r/mine/runs").exists()
