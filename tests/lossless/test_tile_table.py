"""The v2 tile table in its two forms (docs/LOSSLESS.md A1): the short table of 1- or 2-byte
tile lengths (FLAG_SHORT_TILE_TABLE, what the encoders write) and the u32 offsets of the
first v2 streams, still decoded. Both validators (format_v2.read_stream and the numba
hostplan) must read them alike and refuse the same damage with the same message."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit import lossless
from prepkit.errors import CodecError
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import hostplan
from prepkit.lossless import plan as plan_mod
from prepkit.lossless import reference_v2 as r2

from .images import make_image


@pytest.mark.parametrize("short", [True, False])
def test_tile_table_round_trips_every_length(short: bool) -> None:
    rng = np.random.default_rng(0)
    lengths = np.concatenate([[1, 127, 128, 129, 255, 256, 16385, 32767], rng.integers(1, 20000, 300)])
    at = 37
    table = f2.tile_table(lengths, short, at)
    expected_size = lengths.size + int((lengths >= 128).sum()) if short else 4 * (lengths.size + 1)
    assert len(table) == expected_size
    start = at + len(table)
    buf = np.zeros(start + int(lengths.sum()), np.uint8)
    buf[at:start] = np.frombuffer(table, np.uint8)
    offsets = f2.read_tile_table(buf, at, lengths.size, short)
    np.testing.assert_array_equal(np.diff(offsets), lengths)
    assert offsets[0] == start and offsets[-1] == buf.size


def _images() -> list[np.ndarray]:
    mask = np.zeros((100, 130), np.uint8)
    mask[20:70, 30:100] = 2
    return [
        mask,
        make_image("smooth", 70, 90, 3, seed=1),
        make_image("noise", 64, 64, 4, seed=2),  # one raw tile of 1 + 64*64*4 = 16385 bytes
        make_image("gradient", 40, 17, None, seed=3),
    ]


@pytest.mark.parametrize("index", range(4))
def test_encoders_write_the_short_table_and_both_forms_decode_alike(index: int) -> None:
    image = _images()[index]
    stream = lossless.encode(image, tile=64 if index == 2 else 32)
    assert stream == r2.encode(image, 64 if index == 2 else 32)
    assert stream[5] & f2.FLAG_SHORT_TILE_TABLE
    s = f2.read_stream(np.frombuffer(stream, np.uint8))
    lengths = np.diff(s.offsets)
    if index == 2:
        assert lengths.tolist() == [16385]
    old = f2.with_tile_table(stream, short=False)
    assert not old[5] & f2.FLAG_SHORT_TILE_TABLE
    # The u32 table costs 4(N + 1) bytes, the short one a byte per tile and one per long tile.
    assert len(old) - len(stream) == 4 * (lengths.size + 1) - lengths.size - int((lengths >= 128).sum())
    assert f2.with_tile_table(old, short=True) == stream
    for data in (stream, old):
        np.testing.assert_array_equal(lossless.decode(data), image)
        np.testing.assert_array_equal(r2.decode(data), image)
        np.testing.assert_array_equal(lossless.decode_batch([data, stream])[0], image)


def _short_stream() -> tuple[bytes, int, np.ndarray]:
    """A mask stream (tiles of 1- and 2-byte lengths): (stream, tile table offset, lengths)."""
    mask = np.zeros((100, 130), np.uint8)
    mask[20:70, 30:100] = 2
    mask[:40, :40] = np.random.default_rng(1).integers(0, 3, (40, 40)) * 4  # long tiles too
    stream = lossless.encode(mask, tile=32)
    s = f2.read_stream(np.frombuffer(stream, np.uint8))
    at = f2.HEADER_SIZE + f2.read_header(np.frombuffer(stream, np.uint8))[2]
    lengths = np.diff(s.offsets)
    assert (lengths < 128).any() and (lengths >= 128).any()
    return stream, at, lengths


def _refused_alike(data: bytes, message: str) -> None:
    with pytest.raises(CodecError, match=message) as old:
        plan_mod.build([data])
    with pytest.raises(CodecError) as new:
        hostplan.plan_buffers([data])
    assert str(new.value) == str(old.value)
    with pytest.raises(CodecError, match=message):
        r2.decode(data)


def test_short_table_damage_is_refused_alike() -> None:
    stream, at, lengths = _short_stream()
    n = lengths.size
    long_tile = int(np.flatnonzero(lengths >= 128)[0])
    second = at + n  # the first second byte belongs to the first long tile
    bad = bytearray(stream)
    bad[second] = 0
    _refused_alike(bytes(bad), f"tile {long_tile}: two-byte length in the tile table: expected 128 or more")
    bad = bytearray(stream)
    bad[at] += 1  # tile 0 one byte longer: the lengths overrun the stream
    _refused_alike(bytes(bad), "tile lengths: expected them to add up to the rest of the stream")
    _refused_alike(stream + b"\0", "tile lengths: expected them to add up to the rest of the stream")
    _refused_alike(stream[: at + n - 1], "stream too short for the tile table")
    # A tile of length 0 (its bytes handed to the next tile): refused before any tile is read.
    offsets = f2.read_stream(np.frombuffer(stream, np.uint8)).offsets
    tiles = [stream[int(a) : int(b)] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    merged = f2.with_payloads(stream, {0: b"", 1: tiles[0] + tiles[1]})
    _refused_alike(merged, "tile 0: expected a payload of at least 1 byte. Got 0.")
