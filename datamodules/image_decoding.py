"""Dataset files opened and decoded with bounds: only regular files are opened (a FIFO named
``*.JPEG`` would block the reader forever), an image's pixel count is checked from its header
before it is decoded (a small file may decode to gigapixels), and each image mode is brought
to 8 bits in its own range, or refused: converting a 16-bit or float image straight to RGB
saturates it to one constant value, which would train a model on blank images without a word.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import BinaryIO

import numpy as np

#: Modes whose channels are 8 bits (or 1), converted by PIL as they are.
EIGHT_BIT_MODES = ("1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK",
                   "YCbCr")
#: Modes of 16-bit grey levels, scaled by 65535 (a 16-bit PNG's; some PNGs open as ``I``).
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")
#: ``warnings.catch_warnings`` changes the process's filters and puts back what it found on
#: exit: decoding threads take turns at it (a header read each), or one thread's exit would put
#: back the filters under another thread's ``Image.open``.
HEADER_LOCK = threading.Lock()
#: What :func:`to_eight_bit` accepts, for the line that refuses anything else.
ACCEPTED = ("8-bit L/LA/RGB/RGBA/P/CMYK/YCbCr (and 1-bit), 16-bit grey I;16 (scaled by 65535), "
            "32-bit float F with values in [0, 1]")


class ImageRefused(ValueError):
    """A file that is not a regular file, or an image too large or of a mode not accepted."""


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (links followed). It is opened
    non-blocking and checked with ``fstat``, so a FIFO, socket or device, even one swapped in
    after a listing, is refused at once instead of blocking until a writer comes."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "a device")
        raise ImageRefused(f"it is {kind}, not a regular file: only regular files are read")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def check_pixels(size: tuple[int, int], limit: int) -> None:
    """Refuses an image whose header claims more than ``limit`` pixels, before it is decoded."""
    width, height = size
    if width * height > limit:
        raise ImageRefused(f"it is {width}x{height} ({width * height:,} pixels), more than the "
                           f"{limit:,} accepted")


def to_eight_bit(image, channels: int):
    """``image`` (a PIL image) as an 8-bit ``RGB`` (``channels`` 3) or ``L`` (1) image whose
    0-255 stand for the same [0, 1] as the source's full range: 8-bit modes as PIL converts
    them, 16-bit grey divided by 65535, float kept when in [0, 1]. Anything else (32-bit
    integers, float outside [0, 1]) is :class:`ImageRefused` naming the mode and what is
    accepted.

    >>> from PIL import Image
    >>> grey16 = Image.fromarray(np.full((2, 2), 65535, dtype=np.uint16))
    >>> int(np.asarray(to_eight_bit(grey16, 1)).max())
    255
    """
    from PIL import Image

    target = "RGB" if channels == 3 else "L"
    mode = image.mode
    if mode in EIGHT_BIT_MODES:
        return image.convert(target)
    if mode in SIXTEEN_BIT_MODES or (mode == "I" and image.format == "PNG"):
        unit = np.asarray(image).astype(np.float64) / 65535.0
        if unit.min(initial=0.0) < 0.0 or unit.max(initial=0.0) > 1.0:
            raise ImageRefused(f"mode {mode} holds values outside 0-65535; accepted: {ACCEPTED}")
    elif mode == "F":
        unit = np.asarray(image).astype(np.float64)
        if not (np.isfinite(unit).all() and 0.0 <= unit.min(initial=0.0)
                and unit.max(initial=0.0) <= 1.0):
            raise ImageRefused(f"mode F (32-bit float) with values from {np.nanmin(unit):g} to "
                               f"{np.nanmax(unit):g}, outside [0, 1]; accepted: {ACCEPTED}")
    else:
        raise ImageRefused(f"mode {mode} is not accepted; accepted: {ACCEPTED}")
    grey = Image.fromarray(np.round(unit * 255.0).astype(np.uint8), mode="L")
    return grey.convert(target)


def decode_image(path: Path, channels: int, max_pixels: int):
    """The image at ``path`` (a regular file of at most ``max_pixels`` pixels) as an 8-bit
    ``RGB`` or ``L`` PIL image (:func:`to_eight_bit`); :class:`ImageRefused` or PIL's own
    errors otherwise."""
    import warnings

    from PIL import Image

    with open_regular(path) as file:
        try:  # PIL warns of a decompression bomb in a paragraph: the line below says it
            with HEADER_LOCK, warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                image = Image.open(file)
        except Image.DecompressionBombError as err:  # twice PIL's own bound
            raise ImageRefused(f"its header claims more than the {max_pixels:,} pixels "
                               f"accepted ({str(err).split(',')[0]})") from None
        with image:
            check_pixels(image.size, max_pixels)
            return to_eight_bit(image, channels)
