"""PNG files read by libspng (``pyspng``) where that gives exactly the pixels Pillow would.

Reading a PNG with Pillow took as long as encoding it with prepkit's lossless codec
(375 x 500 photographs, docs/BENCHMARKS.md "Reading PNGs with libspng"), so ``prepkit shard``
of a PNG dataset spent half its time there; libspng decodes them in about half Pillow's
time. It is used only where its pixels are exactly what ``images.load_image`` makes through
Pillow, decided from the file's chunk headers before anything is decoded:

- 8 bits per sample, grey, RGB or RGBA (colour types 0, 2 and 6), not interlaced;
- no ``tRNS`` chunk (a transparent colour: Pillow's conversions treat it), no ``eXIf`` chunk
  and no text chunk holding an EXIF profile (an orientation Pillow would apply), not animated;
- a mode conversion that is a plain copy of channels: "rgb" repeats grey into RGB and drops
  RGBA's alpha as Pillow's ``convert("RGB")`` does, "keep" keeps L, RGB and RGBA; with
  ``alpha="composite"`` an RGBA file goes through Pillow;
- no resize (``max_side`` below the image's longer side goes through Pillow's Lanczos).

Anything else, including a file libspng refuses or one whose chunks do not parse, returns
None and the caller reads it with Pillow, which names the file and the reason when it is
broken. Without ``pyspng`` installed, or with ``PREPKIT_PNG_READER=pillow`` in the
environment, every file goes through Pillow.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import numpy as np

from prepkit.ingest.images import ImageOptions, check_size, scaled_size

SIGNATURE = b"\x89PNG\r\n\x1a\n"
GREY, RGB, RGBA = 0, 2, 6  # IHDR colour types taken here
_CHANNELS = {GREY: 1, RGB: 3, RGBA: 4}
_TEXT_CHUNKS = (b"tEXt", b"zTXt", b"iTXt")
_EXIF_KEYWORD = b"raw profile type exif"  # Pillow reads EXIF from a text chunk of this keyword too

try:  # optional: `pip install pyspng` (in prepkit's png, bench and test extras)
    import pyspng as _pyspng

    _spng: Any = _pyspng
except ImportError:  # pragma: no cover - depends on the environment
    _spng = None


def available() -> bool:
    """Whether libspng (pyspng) is installed and not switched off (PREPKIT_PNG_READER=pillow)."""
    return _spng is not None and os.environ.get("PREPKIT_PNG_READER", "") != "pillow"


def header(data: bytes) -> tuple[int, int, int, int] | None:
    """(width, height, bit depth, colour type) of a PNG whose chunks qualify for libspng
    (module docstring), else None. Reads only the chunks' headers (and the keyword of text
    chunks), never the pixels."""
    if len(data) < 33 or not data.startswith(SIGNATURE):
        return None
    pos = len(SIGNATURE)
    first = True
    found: tuple[int, int, int, int] | None = None
    while pos + 8 <= len(data):
        length, kind = struct.unpack_from(">I4s", data, pos)
        start = pos + 8
        if start + length + 4 > len(data):
            return None  # truncated: Pillow reports it
        if first:
            if kind != b"IHDR" or length != 13:
                return None
            width, height, depth, colour, _, _, interlace = struct.unpack_from(">IIBBBBB", data, start)
            if interlace:
                return None  # (not compared with Pillow's reading: left to it)
            found = (width, height, depth, colour)
            first = False
        elif kind in (b"tRNS", b"eXIf", b"acTL"):  # (acTL: an animated PNG, whose frames Pillow reads)
            return None
        elif kind in _TEXT_CHUNKS and data[start : start + min(length, 80)].lower().startswith(_EXIF_KEYWORD):
            return None
        elif kind == b"IEND":
            break
        pos = start + length + 4
    else:
        return None  # no IEND
    if found is None or found[2] != 8 or found[3] not in _CHANNELS:
        return None
    return found


def read(data: bytes, where: str, options: ImageOptions) -> np.ndarray | None:
    """The H x W x C uint8 pixels ``images.load_image`` would make of PNG ``data``, decoded by
    libspng, or None where this module does not take the file (module docstring).
    ``where`` names the file in the pixel-limit error, which is raised before decoding."""
    if not available():
        return None
    found = header(data)
    if found is None:
        return None
    width, height, _, colour = found
    check_size((width, height), options.max_pixels, where)
    if scaled_size(width, height, options.max_side) != (width, height):
        return None
    channels = _CHANNELS[colour]
    if options.mode == "rgb" and colour == RGBA and options.alpha == "composite":
        return None
    try:
        pixels = np.asarray(_spng.load(data))
    except Exception:  # libspng refuses it: Pillow gives the reason
        return None
    if pixels.dtype != np.uint8 or pixels.shape[:2] != (height, width):
        return None
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    if pixels.shape[2] != channels:
        return None
    if options.mode == "rgb":
        if channels == 1:
            pixels = np.repeat(pixels, 3, axis=2)
        elif channels == 4:
            pixels = pixels[:, :, :3]
    return np.ascontiguousarray(pixels)
