"""PNG files read by libspng (``pyspng``) where that gives exactly the pixels Pillow would.

Reading a PNG with Pillow took as long as encoding it with prepkit's lossless codec
(375 x 500 photographs, docs/BENCHMARKS.md "Reading PNGs with libspng"), so ``prepkit shard``
of a PNG dataset spent half its time there; libspng decodes them in about half Pillow's
time. It is used only where its pixels are exactly what ``images.load_image`` makes through
Pillow, decided from the file's chunk headers before anything is decoded:

- 8 bits per sample, grey, RGB or RGBA (colour types 0, 2 and 6), not interlaced;
- no ``tRNS`` chunk (a transparent colour: Pillow's conversions treat it), no ``eXIf`` chunk
  and no text chunk Pillow reads EXIF or XMP from (an orientation it would apply), not
  animated;
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

import io
import os
import struct
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from prepkit.ingest.images import ImageOptions, check_size, scaled_size

SIGNATURE = b"\x89PNG\r\n\x1a\n"
GREY, RGB, RGBA = 0, 2, 6  # IHDR colour types taken here
_CHANNELS = {GREY: 1, RGB: 3, RGBA: 4}
_TEXT_CHUNKS = (b"tEXt", b"zTXt", b"iTXt")
# Text chunks Pillow reads EXIF (and so an orientation) from, besides eXIf; XMP can hold one too.
_EXIF_KEYWORDS = (b"exif", b"Raw profile type exif", b"XML:com.adobe.xmp")

try:  # optional: `pip install pyspng` (in prepkit's png, bench and test extras)
    import pyspng as _pyspng

    _spng: Any = _pyspng
except ImportError:  # pragma: no cover - depends on the environment
    _spng = None


def available() -> bool:
    """Whether libspng (pyspng) is installed and not switched off (PREPKIT_PNG_READER=pillow)."""
    return _spng is not None and os.environ.get("PREPKIT_PNG_READER", "") != "pillow"


@dataclass(frozen=True)
class PngHeader:
    """What a PNG's chunk headers say, read without its pixels."""

    width: int
    height: int
    depth: int  # bits per sample
    colour: int  # IHDR colour type
    interlaced: bool
    transparency: bool  # a tRNS chunk
    orientation_chunks: bool  # eXIf, or a text chunk Pillow takes EXIF or XMP from
    animated: bool  # acTL


def scan(handle: IO[bytes]) -> PngHeader | None:
    """The chunk headers of the PNG at ``handle``'s start (seeking over each chunk's data, and
    reading only a text chunk's keyword), or None when it is not a PNG whose chunks parse up
    to IEND (Pillow then reads it, and reports what is wrong)."""
    if handle.read(8) != SIGNATURE:
        return None
    fields: dict[str, Any] = {"transparency": False, "orientation_chunks": False, "animated": False}
    first = True
    while True:
        head = handle.read(8)
        if len(head) < 8:
            return None  # no IEND
        length, kind = struct.unpack(">I4s", head)
        if first:
            body = handle.read(13)
            if kind != b"IHDR" or length != 13 or len(body) < 13:
                return None
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            fields.update(width=width, height=height, depth=depth, colour=colour, interlaced=interlace != 0)
            handle.seek(4, io.SEEK_CUR)
            first = False
            continue
        if kind == b"IEND":
            return PngHeader(**fields)
        skip = length
        if kind == b"tRNS":
            fields["transparency"] = True
        elif kind == b"eXIf":
            fields["orientation_chunks"] = True
        elif kind == b"acTL":
            fields["animated"] = True
        elif kind in _TEXT_CHUNKS:
            keyword = handle.read(min(length, 80)).split(b"\0", 1)[0]
            skip -= min(length, 80)
            if keyword in _EXIF_KEYWORDS or b"exif" in keyword.lower() or b"xmp" in keyword.lower():
                fields["orientation_chunks"] = True
        handle.seek(skip + 4, io.SEEK_CUR)  # the data, then the CRC


def header(data: bytes) -> PngHeader | None:
    """The chunk headers of PNG ``data`` where they qualify for libspng (module docstring),
    else None. Reads only the chunks' headers (and the keyword of text chunks), never the pixels."""
    found = scan(io.BytesIO(data))
    if (found is None or found.depth != 8 or found.colour not in _CHANNELS or found.interlaced or found.transparency
            or found.orientation_chunks or found.animated):
        return None
    return found


def _decoded(data: bytes, where: str, options: ImageOptions, colours: tuple[int, ...]) -> tuple[np.ndarray, int] | None:
    """(H x W x C uint8 pixels as libspng decodes them, colour type) of PNG ``data`` whose
    header qualifies, whose colour type is one of ``colours`` and that needs no resize; None
    otherwise. The pixel limit is checked before decoding."""
    if not available():
        return None
    found = header(data)
    if found is None or found.colour not in colours:
        return None
    check_size((found.width, found.height), options.max_pixels, where)
    if scaled_size(found.width, found.height, options.max_side) != (found.width, found.height):
        return None
    try:
        pixels = np.asarray(_spng.load(data))
    except Exception:  # libspng refuses it: Pillow gives the reason
        return None
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    if pixels.dtype != np.uint8 or pixels.shape != (found.height, found.width, _CHANNELS[found.colour]):
        return None
    return pixels, found.colour


def read(data: bytes, where: str, options: ImageOptions) -> np.ndarray | None:
    """The H x W x C uint8 pixels ``images.load_image`` would make of PNG ``data``, decoded by
    libspng, or None where this module does not take the file (module docstring).
    ``where`` names the file in the pixel-limit error, which is raised before decoding."""
    composite = options.mode == "rgb" and options.alpha == "composite"
    decoded = _decoded(data, where, options, (GREY, RGB) if composite else (GREY, RGB, RGBA))
    if decoded is None:
        return None
    pixels, colour = decoded
    if options.mode == "rgb":
        if colour == GREY:
            pixels = np.repeat(pixels, 3, axis=2)
        elif colour == RGBA:
            pixels = pixels[:, :, :3]
    return np.ascontiguousarray(pixels)


def read_mask(data: bytes, where: str, options: ImageOptions) -> np.ndarray | None:
    """The H x W x 1 uint8 class indices ``images.load_mask`` would make of PNG ``data``,
    decoded by libspng: only for 8-bit grey masks (as Cityscapes' label maps are) that need
    no resize; None for the rest (palette masks keep their indices through Pillow)."""
    decoded = _decoded(data, where, options, (GREY,))
    return None if decoded is None else np.ascontiguousarray(decoded[0])
