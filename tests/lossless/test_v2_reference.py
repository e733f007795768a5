"""Version 2, numpy reference: round trips, stream structure, and refusal of bad streams."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prepkit import lossless
from prepkit.errors import CodecError
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import reference_v2 as r2

from .images import images, make_image

TILES = st.sampled_from([16, 32, 64])


@settings(max_examples=25, deadline=None)
@given(image=images(max_side=70), tile=TILES)
def test_reference_roundtrip(image: np.ndarray, tile: int) -> None:
    data = r2.encode(image, tile)
    assert data[4] == f2.VERSION
    out = r2.decode(data)
    assert out.shape == image.shape and out.dtype == np.uint8
    np.testing.assert_array_equal(out, image)
    assert len(data) <= f2.max_encoded_size(image.shape[0], image.shape[1], 1 if image.ndim == 2 else image.shape[2], tile)


@pytest.mark.parametrize("mode", range(f2.COLOURS))
def test_colour_transforms_invert_on_every_pixel(mode: int) -> None:
    grid = np.stack(np.meshgrid(np.arange(256), np.arange(256), indexing="ij"), -1).reshape(-1, 2)
    pixels = np.stack([grid[:, 0], grid[:, 1], (grid[:, 0] * 7 + grid[:, 1]) & 255], 1)
    forward = r2.colour_forward(pixels, mode)
    assert forward.min() >= 0 and forward.max() <= 255
    np.testing.assert_array_equal(r2.colour_inverse(forward, mode), pixels)


@pytest.mark.parametrize("predictor", range(f2.PREDICTORS))
def test_predictors_invert(predictor: int) -> None:
    plane = np.random.default_rng(predictor).integers(0, 256, (9, 13))
    np.testing.assert_array_equal(r2.unpredict(r2.predict(plane, predictor), predictor), plane)


def test_normalize_sums_to_scale_and_keeps_every_symbol() -> None:
    rng = np.random.default_rng(3)
    for counts in [rng.integers(0, 5, 256), np.eye(256, dtype=np.int64)[7] * 10**6,
                   np.r_[np.ones(255, np.int64), [10**9]], np.zeros(256, np.int64)]:
        freq = r2.normalize(counts)
        assert int(freq.sum()) in (0, f2.PROB_SCALE)
        assert ((freq > 0) == (counts > 0)).all()


def test_tables_serialise_both_kinds() -> None:
    freq = np.zeros((3, 256), np.int32)
    freq[0, [1, 5]] = [4000, 96]
    freq[2] = 16
    data = f2.pack_tables(freq)
    assert data[0] == f2.TABLE_LIST and data[7] == f2.TABLE_EMPTY and data[8] == f2.TABLE_BITMAP
    parsed = f2.parse_tables(np.frombuffer(data, np.uint8), 3)
    np.testing.assert_array_equal(parsed.freq, freq)


def test_constant_and_noise_use_their_cheap_modes() -> None:
    const = np.full((64, 64, 3), 9, np.uint8)
    data = r2.encode(const)
    # One table set (a small image: its 4 empty tables cost a byte each, not 12), a 1-byte
    # tile table, one constant tile.
    assert len(data) == f2.HEADER_SIZE + 4 + 1 + (2 + 6)
    noise = make_image("noise", 40, 40, 3, seed=1)
    s = f2.read_stream(np.frombuffer(r2.encode(noise), np.uint8))
    assert (s.mode == f2.TILE_RAW).all()


def test_masks_use_few_lanes_and_photos_all_32() -> None:
    mask = np.zeros((64, 64), np.uint8)
    mask[20:40, 10:50] = 3
    # (with runs tiles, the mask's tile is one: this is about the coded tile's lanes)
    s = f2.read_stream(np.frombuffer(r2.encode(mask, runs_tiles=False), np.uint8))
    assert s.mode[0] == f2.TILE_CODED and s.lanes_log2[0] == 1  # 2 lanes: 8 bytes of states
    s = f2.read_stream(np.frombuffer(r2.encode(mask, fast_decode=True, runs_tiles=False), np.uint8))
    assert s.mode[0] == f2.TILE_CODED and s.lanes_log2[0] == 2  # 4 lanes decode faster
    smooth = make_image("smooth", 64, 64, 3, seed=2) + np.random.default_rng(0).integers(0, 40, (64, 64, 3)).astype(np.uint8)
    s = f2.read_stream(np.frombuffer(r2.encode(smooth), np.uint8))
    assert s.mode[0] == f2.TILE_CODED and s.lanes_log2[0] == 5


def test_roi() -> None:
    image = make_image("smooth", 50, 70, 4, seed=5)
    data = r2.encode(image, 16)
    np.testing.assert_array_equal(r2.decode(data, (3, 17, 40, 33)), image[3:40, 17:33])


def _stream() -> bytes:
    return r2.encode(make_image("smooth", 20, 30, 3, seed=4), 16)


def _with(data: bytes, at: int, value: bytes) -> bytes:
    return data[:at] + value + data[at + len(value) :]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: _with(d, 4, b"\x03"), "unsupported codec version: Expected 1 or 2. Got 3"),
        (lambda d: _with(d, 5, b"\x02"), "unknown flags"),
        (lambda d: _with(d, 7, b"\x09"), "table sets"),  # C = 3: at most 2C + 2
        (lambda d: _with(d, 18, b"\x01"), "reserved"),
        (lambda d: d[:-1], "tile lengths: expected them to add up to the rest of the stream"),
        (lambda d: f2.with_tile_table(d, short=False)[:-1], "last tile offset"),
        (lambda d: d[:30], "too short"),
    ],
)
def test_bad_headers_are_refused(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    from prepkit.lossless import format as fmt

    bad = mutate(_stream())
    with pytest.raises(CodecError, match=message):
        fmt.read_header(bad)
        r2.decode(bad)


def test_bad_table_and_tile_fields_are_refused() -> None:
    data = _stream()
    z = struct.unpack_from("<I", data, 20)[0]
    with pytest.raises(CodecError, match="frequency table 0"):
        r2.decode(_with(data, 24, b"\x05"))  # unknown table kind
    old = f2.with_tile_table(data, short=False)  # the u32 offsets of the first v2 streams
    first = struct.unpack_from("<I", old, 24 + z)[0]
    with pytest.raises(CodecError, match="first tile offset"):
        r2.decode(_with(old, 24 + z, struct.pack("<I", first + 1)))
    first = int(f2.read_stream(np.frombuffer(data, np.uint8)).offsets[0])
    with pytest.raises(CodecError, match="tile mode"):
        r2.decode(_with(data, first, b"\x07"))
    with pytest.raises(CodecError, match="lane count"):
        r2.decode(_with(data, first + 1, b"\x70"))
    for bad in (b"\x02", b"\x07", b"\x0b"):  # mode 2; predictor 5 and 6 (bit 1 with bits 2-3)
        with pytest.raises(CodecError, match="channel byte"):
            r2.decode(_with(data, first + 2, bad))
    with pytest.raises(CodecError, match="rANS"):
        r2.decode(_with(data, first + 5, b"\x00\x00\x00\x00"))  # first lane state below 2^16


def test_every_single_byte_change_is_refused_or_decodes() -> None:
    data = _stream()
    rng = np.random.default_rng(0)
    for at in rng.integers(0, len(data), 150):
        bad = _with(data, int(at), bytes([(data[int(at)] + int(rng.integers(1, 256))) & 255]))
        try:
            out = r2.decode(bad)
        except CodecError:
            continue
        assert out.shape == (20, 30, 3)


@pytest.mark.parametrize("side,c", [(32, 3), (64, 3), (48, 4), (100, 1)])
def test_small_images_keep_the_smaller_of_one_and_per_plane_table_sets(side: int, c: int) -> None:
    """Images of at most ONE_SET_MAX_TILES tiles are encoded twice, the second time with one
    table set for every plane, and keep the smaller stream: both encoders alike, never larger
    than the per-plane sets, and the photograph-like crops here code smaller with one set."""
    from prepkit.lossless import cpu_v2

    image = make_image("smooth", side, side, c, seed=side)
    prepared, flags = r2.prepare(image, 64)
    per_plane = r2._encode(prepared, flags, 64, False, None, True, True, f2.ENCODER_COLOURS)
    one_set = r2._encode(prepared, flags, 64, False, None, True, True, f2.ENCODER_COLOURS, one_set=True)
    data = r2.encode(image)
    assert data == cpu_v2.encode(image) == min(per_plane, one_set, key=len)
    assert f2.read_header(np.frombuffer(one_set, np.uint8))[1] == 1
    if c > 1:  # photograph-like colour: 4 tables instead of 4C pay for themselves
        assert len(one_set) < len(per_plane) and data == one_set
    np.testing.assert_array_equal(r2.decode(data), image)
    np.testing.assert_array_equal(lossless.decode(data), image)
    big = make_image("smooth", 200, 200, 3, seed=1)  # 16 tiles: the per-plane sets only
    assert not f2.encoder_tries_one_set(16)
    assert f2.read_header(np.frombuffer(lossless.encode(big), np.uint8))[1] >= 3
