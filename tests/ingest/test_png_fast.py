"""png_fast: libspng reads a PNG only where its pixels are exactly Pillow's; everything else,
broken files included, goes through Pillow with Pillow's result or error."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, PngImagePlugin

from prepkit.errors import IngestError
from prepkit.ingest import images, png_fast
from prepkit.ingest.images import ImageOptions

pytestmark = pytest.mark.skipif(not png_fast.available(), reason="pyspng is in the test extra")


def _png(pixels: np.ndarray, mode: str | None = None, **save: object) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels, mode=mode).save(out, "PNG", **save)
    return out.getvalue()


def _with_chunk(data: bytes, kind: bytes, body: bytes) -> bytes:
    """``data`` with a chunk inserted after IHDR (8 + 25 bytes)."""
    chunk = struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return data[:33] + chunk + data[33:]


def _rng_image(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _pillow_only(path: str, options: ImageOptions, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    with monkeypatch.context() as patch:
        patch.setattr(png_fast, "_spng", None)
        return images.load_image(path, options)


def _exif_rotated() -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees on display
    return _png(_rng_image((6, 9, 3), 7), exif=exif.tobytes())


def _text_exif() -> bytes:
    info = PngImagePlugin.PngInfo()
    info.add_text("Raw profile type exif", "exif\n  10\n45786966000049492a00")
    return _png(_rng_image((6, 9, 3), 8), pnginfo=info)


def _with_software_text() -> bytes:
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", "a scanner")
    return _png(_rng_image((6, 9, 3), 9), pnginfo=info)


# (name, PNG bytes, options, whether libspng takes it)
CASES: list[tuple[str, Callable[[], bytes], ImageOptions, bool]] = [
    ("rgb", lambda: _png(_rng_image((17, 23, 3), 1)), ImageOptions(), True),
    ("grey as rgb", lambda: _png(_rng_image((17, 23), 2)), ImageOptions(), True),
    ("grey kept", lambda: _png(_rng_image((17, 23), 2)), ImageOptions(mode="keep"), True),
    ("rgba alpha dropped", lambda: _png(_rng_image((9, 31, 4), 3)), ImageOptions(), True),
    ("rgba kept", lambda: _png(_rng_image((9, 31, 4), 3)), ImageOptions(mode="keep"), True),
    ("rgba composited", lambda: _png(_rng_image((9, 31, 4), 3)), ImageOptions(alpha="composite",
                                                                               background=(9, 99, 200)), False),
    ("text and gamma chunks", lambda: _with_chunk(_with_software_text(), b"gAMA", struct.pack(">I", 45455)),
     ImageOptions(), True),
    ("resized", lambda: _png(_rng_image((40, 60, 3), 4)), ImageOptions(max_side=30), False),
    ("palette", lambda: _png(_rng_image((12, 12), 5) % 7, mode="P"), ImageOptions(), False),
    ("grey with a transparent value", lambda: _png(_rng_image((12, 12), 6), transparency=17), ImageOptions(mode="keep"),
     False),
    ("rgb with a transparent colour", lambda: _png(_rng_image((12, 12, 3), 6), transparency=(1, 2, 3)),
     ImageOptions(mode="keep"), False),
    ("16-bit grey", lambda: _png(_rng_image((12, 12), 7).astype(np.uint16) * 257), ImageOptions(), False),
    ("grey and alpha", lambda: _png(_rng_image((12, 12, 2), 8), mode="LA"), ImageOptions(mode="keep"), False),
    ("exif orientation", _exif_rotated, ImageOptions(), False),
    ("exif in a text chunk", _text_exif, ImageOptions(), False),
]


@pytest.mark.parametrize(("name", "make", "options", "fast"), CASES, ids=[c[0] for c in CASES])
def test_the_same_pixels_as_pillow(name: str, make: Callable[[], bytes], options: ImageOptions, fast: bool,
                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = make()
    path = tmp_path / "image.png"
    path.write_bytes(data)
    taken = png_fast.read(data, str(path), options)
    assert (taken is not None) == fast, name
    expected = _pillow_only(str(path), options, monkeypatch)
    got = images.load_image(str(path), options)
    assert got.dtype == np.uint8 and got.flags.c_contiguous
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(images.load_image_bytes(data, "sample 3", options), expected)


def test_broken_files_get_pillows_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = _png(_rng_image((40, 50, 3), 11))
    idat = good.index(b"IDAT")
    bad_crc = bytearray(good)
    bad_crc[idat + 10] ^= 0xFF  # a byte of the compressed pixels: the chunk's CRC no longer matches
    for name, data in [("truncated", good[: len(good) // 2]), ("bad crc", bytes(bad_crc)), ("no iend", good[:-12]),
                       ("empty", b""), ("signature only", png_fast.SIGNATURE)]:
        path = tmp_path / f"{name}.png"
        path.write_bytes(data)
        assert png_fast.read(data, str(path), ImageOptions()) is None, name
        try:
            expected: np.ndarray | str = _pillow_only(str(path), ImageOptions(), monkeypatch)
        except IngestError as error:
            expected = str(error)
        if isinstance(expected, str):
            with pytest.raises(IngestError) as raised:
                images.load_image(str(path), ImageOptions())
            assert str(raised.value) == expected and str(path) in expected, name
        else:
            np.testing.assert_array_equal(images.load_image(str(path), ImageOptions()), expected)


def test_the_pixel_limit_is_checked_before_decoding(tmp_path: Path) -> None:
    data = _png(_rng_image((20, 30, 3), 12))
    path = tmp_path / "big.png"
    path.write_bytes(data)
    with pytest.raises(IngestError, match=r"big.png: 30x20 = 600 pixels exceeds the limit of 599"):
        png_fast.read(data, str(path), ImageOptions(max_pixels=599))
    with pytest.raises(IngestError, match=r"30x20 = 600 pixels exceeds the limit of 599"):
        images.load_image(str(path), ImageOptions(max_pixels=599))


def test_header_reads_only_chunk_headers() -> None:
    data = _png(_rng_image((5, 7, 3), 13))
    found = png_fast.header(data)
    assert found is not None and (found.width, found.height, found.depth, found.colour) == (7, 5, 8, png_fast.RGB)
    assert png_fast.header(data[:20]) is None  # shorter than the IHDR chunk
    assert png_fast.header(b"GIF89a" + data[6:]) is None
    assert png_fast.header(_with_chunk(data, b"tRNS", b"\x00\x01\x00\x02\x00\x03")) is None
    assert png_fast.header(_with_chunk(data, b"acTL", struct.pack(">II", 2, 0))) is None  # animated


def test_the_switch_sends_every_file_to_pillow(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _png(_rng_image((5, 7, 3), 14))
    assert png_fast.read(data, "a.png", ImageOptions()) is not None
    monkeypatch.setenv("PREPKIT_PNG_READER", "pillow")
    assert not png_fast.available() and png_fast.read(data, "a.png", ImageOptions()) is None


def _xmp_rotated() -> bytes:
    info = PngImagePlugin.PngInfo()
    info.add_itxt("XML:com.adobe.xmp", '<x:xmpmeta><rdf:Description tiff:Orientation="6"/></x:xmpmeta>')
    return _png(_rng_image((6, 9, 3), 15), pnginfo=info)


@pytest.mark.parametrize(("name", "make"), [("plain", lambda: _png(_rng_image((6, 9, 3), 16))),
                                            ("exif", _exif_rotated), ("exif in text", _text_exif), ("xmp", _xmp_rotated)])
def test_probe_size_reads_png_chunk_headers_not_pixels(name: str, make: Callable[[], bytes], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    data = make()
    path = tmp_path / f"{name}.png"
    path.write_bytes(data)
    shape = images.load_image(str(path), ImageOptions()).shape
    assert images.probe_size(str(path), ImageOptions()) == shape
    assert images.probe_size(str(path), ImageOptions(), data) == shape
    scanned = png_fast.scan(io.BytesIO(data))
    assert scanned is not None and scanned.orientation_chunks == (name != "plain")
    if name == "plain":  # no chunk to orient it: its pixels are never decoded to find out
        monkeypatch.setattr(PngImagePlugin.PngImageFile, "load", lambda self: 1 / 0)
        assert images.probe_size(str(path), ImageOptions()) == shape


@pytest.mark.parametrize(("name", "make", "options", "fast"), [
    ("grey labels", lambda: _png(_rng_image((33, 47), 17) % 19), ImageOptions(), True),
    ("palette labels", lambda: _png(_rng_image((33, 47), 17) % 19, mode="P"), ImageOptions(), False),
    ("grey labels resized", lambda: _png(_rng_image((33, 47), 17) % 19), ImageOptions(max_side=20), False),
    ("16-bit labels", lambda: _png(_rng_image((12, 12), 18).astype(np.uint16)), ImageOptions(), False),
    ("rgb is not a mask", lambda: _png(_rng_image((12, 12, 3), 19)), ImageOptions(), False),
])  # fmt: skip
def test_masks_the_same_as_pillow(name: str, make: Callable[[], bytes], options: ImageOptions, fast: bool,
                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = make()
    path = tmp_path / "mask.png"
    path.write_bytes(data)
    assert (png_fast.read_mask(data, str(path), options) is not None) == fast, name
    with monkeypatch.context() as patch:
        patch.setattr(png_fast, "_spng", None)
        try:
            expected: np.ndarray | str = images.load_mask(str(path), options)
        except IngestError as error:
            expected = str(error)
    for got_from in (lambda: images.load_mask(str(path), options), lambda: images.load_mask(str(path), options, data)):
        if isinstance(expected, str):
            with pytest.raises(IngestError) as raised:
                got_from()
            assert str(raised.value) == expected, name
        else:
            got = got_from()
            assert got.shape == expected.shape and got.shape[2] == 1
            np.testing.assert_array_equal(got, expected)
