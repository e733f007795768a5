"""Hostile streams: every mutation either decodes to an array of the header's shape or
raises CodecError; nothing crashes, hangs or reads out of bounds."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from prepkit import lossless
from prepkit.errors import CodecError
from prepkit.lossless import format as fmt
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import reference

from .images import make_image


def _streams() -> list[bytes]:
    mask = np.zeros((50, 70), np.uint8)
    mask[5:30, 10:60] = 4
    v2 = [
        lossless.encode(make_image("smooth", 70, 90, 3, seed=1), tile=32),
        lossless.encode(make_image("noise", 20, 33, 4, seed=2), tile=16),
        lossless.encode(make_image("gradient", 40, 17, None, seed=3), tile=16),
        lossless.encode(mask, tile=32),
    ]
    v1 = [
        lossless.encode(make_image("smooth", 70, 90, 3, seed=1), tile=32, version=1),
        lossless.encode(make_image("noise", 20, 33, 4, seed=2), tile=16, version=1),
        lossless.encode(make_image("gradient", 40, 17, None, seed=3), tile=16, version=1),
    ]
    # v2 streams with the u32 offsets of the first v2 streams (no FLAG_SHORT_TILE_TABLE) too
    return v1 + v2 + [f2.with_tile_table(v2[0], short=False), f2.with_tile_table(v2[3], short=False)]


def _table_at(stream: bytes) -> int:
    """Where the tile table starts (after the v2 frequency tables)."""
    if stream[4] == 2:
        return f2.HEADER_SIZE + struct.unpack_from("<I", stream, 20)[0]
    return fmt.HEADER_SIZE


def _short_table(stream: bytes) -> bool:
    """Whether the stream's tile table holds 1- or 2-byte lengths (FLAG_SHORT_TILE_TABLE)."""
    return stream[4] == 2 and bool(stream[5] & f2.FLAG_SHORT_TILE_TABLE)


def _payloads_at(stream: bytes) -> int:
    """Where the first tile payload starts (after the tile table)."""
    n_tiles = lossless.read_header(stream).n_tiles
    if _short_table(stream):
        low = np.frombuffer(stream, np.uint8)[_table_at(stream) : _table_at(stream) + n_tiles]
        return _table_at(stream) + n_tiles + int((low >= 128).sum())
    return _table_at(stream) + 4 * (n_tiles + 1)


def _check(data: bytes) -> None:
    """The only allowed outcomes: a decoded array of the right shape, or CodecError."""
    try:
        header = lossless.read_header(data)
        out = lossless.decode(data)
    except CodecError:
        return
    assert out.shape == header.shape and out.dtype == np.uint8


def _mutations(stream: bytes, rng: np.random.Generator):
    buf = bytearray(stream)
    n_tiles = lossless.read_header(stream).n_tiles
    kind = int(rng.integers(6))
    if kind == 0:  # bit flips anywhere
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(len(buf)))
            buf[i] ^= 1 << int(rng.integers(8))
    elif kind == 1:  # truncation or extension
        cut = int(rng.integers(len(buf)))
        buf = buf[:cut] if rng.integers(2) else buf + bytes(int(rng.integers(1, 50)))
    elif kind == 2:  # a random header field
        i = int(rng.integers(_table_at(stream)))
        buf[i] = int(rng.integers(256))
    elif kind == 3 and _short_table(stream):  # a random byte of a short tile table
        buf[int(rng.integers(_table_at(stream), _payloads_at(stream)))] = int(rng.integers(256))
    elif kind == 3:  # a random tile offset
        i = int(rng.integers(n_tiles + 1))
        pos = _table_at(stream) + 4 * i
        buf[pos : pos + 4] = struct.pack("<I", int(rng.integers(0, 2**32)))
    elif kind == 4 and _short_table(stream):  # small shifts of a length byte (may flip bit 7)
        pos = _table_at(stream) + int(rng.integers(n_tiles))
        buf[pos] = (buf[pos] + int(rng.integers(-3, 4))) % 256
    elif kind == 4:  # small shifts of an offset (stay plausible, break the payload split)
        i = int(rng.integers(1, n_tiles + 1))
        pos = _table_at(stream) + 4 * i
        value = struct.unpack("<I", bytes(buf[pos : pos + 4]))[0] + int(rng.integers(-3, 4))
        buf[pos : pos + 4] = struct.pack("<I", value % 2**32)
    else:  # random bytes inside one payload
        start = _payloads_at(stream)
        for _ in range(int(rng.integers(1, 8))):
            buf[int(rng.integers(start, len(buf)))] = int(rng.integers(256))
    return bytes(buf)


def test_fuzz_mutated_streams() -> None:
    # A fixed number of cases (the same on every machine); _check asserts on each.
    rng = np.random.default_rng(12345)
    streams = _streams()
    for count in range(300):
        _check(_mutations(streams[count % len(streams)], rng))


@pytest.mark.parametrize(
    "data",
    [b"", b"PKLL", b"XXXX" + bytes(40), bytes(fmt.HEADER_SIZE), b"PKLL\x01\x00\x03\x00" + bytes(12)],
)
def test_garbage_raises_codec_error(data: bytes) -> None:
    with pytest.raises(CodecError):
        lossless.decode(data)


def test_oversized_header_rejected_without_allocating() -> None:
    header = fmt.Header(65535, 65535, 4, 64, 0).pack()
    with pytest.raises(CodecError):
        lossless.decode(header + bytes(100))
    # A valid header with a table that points outside the stream.
    stream = bytearray(lossless.encode(np.zeros((10, 10, 3), np.uint8)))
    stream[fmt.HEADER_SIZE + 4 : fmt.HEADER_SIZE + 8] = struct.pack("<I", 2**32 - 1)
    with pytest.raises(CodecError):
        lossless.decode(bytes(stream))


def test_reference_agrees_on_corrupt_payloads() -> None:
    # The oracle and the kernel must reject (or accept) the same corrupt payload bytes.
    rng = np.random.default_rng(9)
    stream = lossless.encode(make_image("smooth", 40, 40, 3, seed=4), tile=16, version=1)
    start = fmt.HEADER_SIZE + lossless.read_header(stream).n_tiles * 4 + 4
    for _ in range(150):
        buf = bytearray(stream)
        buf[int(rng.integers(start, len(buf)))] ^= 1 << int(rng.integers(8))
        outcomes = []
        for decoder in (lossless.decode, reference.decode):
            try:
                outcomes.append(decoder(bytes(buf)))
            except CodecError:
                outcomes.append(None)
        if outcomes[0] is None or outcomes[1] is None:
            assert outcomes[0] is None and outcomes[1] is None
        else:
            np.testing.assert_array_equal(outcomes[0], outcomes[1])


def test_fuzz_harness_covers_v2_and_finds_nothing() -> None:
    from prepkit.fuzz import fuzz_lossless

    report = fuzz_lossless(cases=2000, seed=1)
    assert report.cases == 2000 and report.rejected > 0 and report.accepted > 0
    assert report.findings == []


@pytest.mark.parametrize("data", ["text", 5, None, np.zeros(100, np.uint8)[::2]])
def test_non_bytes_inputs_raise_codec_error(data: object) -> None:
    with pytest.raises(CodecError):
        lossless.decode(data)


def test_accepts_any_contiguous_buffer() -> None:
    image = np.arange(300, dtype=np.uint8).reshape(10, 10, 3)
    stream = lossless.encode(image)
    for data in (bytearray(stream), memoryview(stream), np.frombuffer(stream, np.uint8)):
        np.testing.assert_array_equal(lossless.decode(data), image)


def test_fuzz_seeds_include_palette_tiles() -> None:
    """The fuzzers' palette seeds really use tile mode 2 (else mode 2 would go unfuzzed)."""
    from prepkit.fuzz import palette_images
    from prepkit.lossless import format_v2

    for image in palette_images(np.random.default_rng(0)):
        for cut in (image, image[:17, :17]):  # the CPU fuzzer's and the CUDA fuzzer's sizes
            stream = format_v2.read_stream(np.frombuffer(lossless.encode(cut, tile=16), np.uint8))
            assert (np.asarray(stream.mode) == format_v2.TILE_PALETTE).any(), cut.shape


def test_fuzz_seeds_include_every_runs_tile_mode() -> None:
    """Both fuzzers' seeds hold runs tiles of modes 3 to 6 (the older modes as older encoders
    wrote them: every decoder still reads them)."""
    from prepkit.fuzz import lossless_seeds
    from prepkit.fuzz_cuda import _seeds
    from prepkit.lossless import format_v2

    for seeds in (lossless_seeds(np.random.default_rng(0)), _seeds(0)):
        modes: set[int] = set()
        for data in seeds:
            if data[4] == format_v2.VERSION:
                modes.update(np.asarray(format_v2.read_stream(np.frombuffer(data, np.uint8)).mode).tolist())
        assert set(format_v2.RUNS_MODES) <= modes
