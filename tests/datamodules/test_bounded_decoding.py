"""Image and idx files read within bounds, on tiny files written in their real formats: 16-bit
PNG and float TIFF images reach the model in their own range (not saturated to one value), modes
that cannot be scaled are refused naming the file and mode, a header claiming too many pixels is
refused before decoding, a FIFO named like an image never blocks the reader, and a gzip bomb
given as an idx file is refused after the size its header declares."""

from __future__ import annotations

import gzip
import os
import struct
import threading
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from datamodules import DATAMODULES, ImageFolderDataModule
from datamodules.sample_files import write_mnist, write_tiny_imagenet


def png_header(width: int, height: int) -> bytes:
    """A PNG's signature, header chunk and end: the size it claims, and no pixels."""
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grey
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


def write_classes(root: Path, images: dict[str, np.ndarray], suffix: str) -> None:
    """Three copies of each class's image array, saved by PIL in its own mode."""
    for name, pixels in images.items():
        (root / name).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(pixels).save(root / name / f"{i}{suffix}")


@pytest.mark.parametrize("dtype, scale, suffix", [
    (np.uint16, 65535, ".png"),  # a 16-bit grey PNG (mode I;16)
    (np.uint16, 65535, ".tif"),
    (np.float32, 1.0, ".tiff"),  # a float TIFF (mode F) in [0, 1]
])
def test_16_bit_and_float_images_keep_their_own_range(tmp_path, dtype, scale, suffix) -> None:
    levels = {"dark": 0.2, "light": 0.8}
    write_classes(tmp_path, {name: np.full((12, 10), level * scale, dtype=dtype)
                             for name, level in levels.items()}, suffix)
    for channels in (1, 3):
        splits = ImageFolderDataModule(folder=str(tmp_path), image_size=8, channels=channels,
                                       test_fraction=0.34).load()
        x, y = splits.train_x, splits.train_y
        for label, level in enumerate(levels.values()):
            seen = x[y == label].float() / 255  # the model's [0, 1]
            assert seen.min() == seen.max() and abs(seen.mean().item() - level) < 1 / 255


@pytest.mark.parametrize("pixels, mode", [
    (np.full((6, 6), 7, dtype=np.int32), "mode I "),  # 32-bit integers: no known full scale
    (np.full((6, 6), 300.0, dtype=np.float32), "mode F (32-bit float) with values from 300"),
])
def test_images_that_cannot_be_scaled_are_refused_naming_file_and_mode(tmp_path, pixels,
                                                                        mode) -> None:
    write_classes(tmp_path, {"a": pixels, "b": pixels}, ".tiff")
    with pytest.raises(FileNotFoundError) as info:
        ImageFolderDataModule(folder=str(tmp_path), image_size=8, test_fraction=0.34).load()
    message = str(info.value)
    assert mode in message and ".tiff" in message and "I;16 (scaled by 65535)" in message
    assert "\n" not in message


@pytest.mark.parametrize("side, said", [
    (12_000, r"it is 12000x12000 \(144,000,000 pixels\), more than the 50,000,000 accepted"),
    # beyond PIL's own bound (twice its warning's), which PIL raises as an error of its own
    (14_000, r"its header claims more than the 50,000,000 pixels accepted \(Image size "
             r"\(196000000 pixels\) exceeds limit of \d+ pixels\)"),
])
def test_an_image_claiming_too_many_pixels_is_refused_before_decoding_in_one_line(
        tmp_path, side, said) -> None:
    import warnings

    write_classes(tmp_path, {"a": np.zeros((6, 6), np.uint8), "b": np.zeros((6, 6), np.uint8)},
                  ".png")
    (tmp_path / "b" / "1.png").write_bytes(png_header(side, side))
    with warnings.catch_warnings():  # PIL's decompression-bomb paragraph is not shown either
        warnings.simplefilter("error")
        with pytest.raises(FileNotFoundError, match=r"1\.png: " + said) as info:
            ImageFolderDataModule(folder=str(tmp_path), image_size=8, test_fraction=0.34).load()
    assert "\n" not in str(info.value)


def test_decoding_threads_keep_each_others_warning_filters(tmp_path) -> None:
    """Each thread silences PIL's decompression-bomb warning around its header read, and
    ``warnings.catch_warnings`` puts back the process's filters on exit: without turns, one
    thread's exit put the caller's filters back under another thread's read (about once in 400
    headers on eight threads), and the warning came out instead of the refusal."""
    import warnings
    from concurrent.futures import ThreadPoolExecutor

    from datamodules.image_decoding import ImageRefused, decode_image

    paths = [tmp_path / f"{k}.png" for k in range(400)]
    for path in paths:
        path.write_bytes(png_header(12_000, 12_000))

    def outcome(path: Path) -> str:
        try:
            decode_image(path, 3, 50_000_000)
        except ImageRefused:
            return "refused"
        except Image.DecompressionBombWarning:
            return "warned"
        return "decoded"

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(outcome, paths))
    assert set(outcomes) == {"refused"}, outcomes.count("warned")


def load_within(seconds: float, load, fifo: Path):
    """``load()``'s exception, or a failure if it still blocks after ``seconds`` (the FIFO is
    then opened for writing and closed, so the blocked reader ends)."""
    caught: list[BaseException] = []

    def target() -> None:
        try:
            load()
        except BaseException as err:  # noqa: BLE001 - handed to the test
            caught.append(err)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(seconds)
        pytest.fail(f"reading {fifo} blocked")
    return caught[0] if caught else None


def test_a_fifo_named_like_a_jpeg_is_refused_without_blocking(tmp_path) -> None:
    write_tiny_imagenet(tmp_path, per_class=1, n_val=4)
    folder = tmp_path / "tiny-imagenet-200"
    fifo = next((folder / "train").glob("*/images/*.JPEG"))
    fifo.unlink()
    os.mkfifo(fifo)
    err = load_within(10, DATAMODULES["tinyimagenet"](data_dir=str(tmp_path)).load, fifo)
    assert isinstance(err, FileNotFoundError)
    assert f"{fifo}: it is a FIFO, not a regular file" in str(err)


def test_a_gzip_bomb_given_as_an_idx_file_is_refused_after_its_declared_size(tmp_path) -> None:
    write_mnist(tmp_path, "MNIST", seed=0, n_train=20, n_test=2)
    raw = tmp_path / "MNIST" / "raw"
    (raw / "t10k-images-idx3-ubyte").unlink()
    # a header declaring two 28x28 images (1,584 bytes), then 32 MB of zeros (32 kB gzipped)
    with gzip.open(raw / "t10k-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">IIII", 0x0803, 2, 28, 28))
        for _ in range(32):
            f.write(bytes(2**20))
    assert (raw / "t10k-images-idx3-ubyte.gz").stat().st_size < 2**17
    tracemalloc.start()
    try:
        with pytest.raises(FileNotFoundError, match=r"t10k-images-idx3-ubyte\.gz: it holds more "
                           r"than the 1,584 bytes its header \(2, 28, 28\) declares"):
            DATAMODULES["mnist"](data_dir=str(tmp_path)).load()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20  # the 32 MB were never held


def test_an_idx_header_declaring_more_than_the_bound_is_refused(tmp_path) -> None:
    write_mnist(tmp_path, "MNIST", seed=0, n_train=20, n_test=2)
    images = tmp_path / "MNIST" / "raw" / "t10k-images-idx3-ubyte"
    images.write_bytes(struct.pack(">IIII", 0x0803, 10**6, 1000, 1000))
    with pytest.raises(FileNotFoundError, match="more than the 268,435,456 an idx file may hold"):
        DATAMODULES["mnist"](data_dir=str(tmp_path)).load()
