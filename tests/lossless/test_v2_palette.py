"""Version 2 palette tiles (docs/LOSSLESS.md A2 mode 2): the encoders pick them on
palette-like content, byte-identical to each other; decoders agree; corrupt ones refused."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit import lossless
from prepkit.errors import CodecError
from prepkit.lossless import format as fmt
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import hostplan
from prepkit.lossless import plan as plan_mod
from prepkit.lossless import reference_v2 as r2

from .images import assert_byte_flips_refused_or_agree


def palette_image(h: int, w: int, c: int | None, n_colours: int, seed: int) -> np.ndarray:
    """Pixels drawn from n_colours random colours (2-D when c is None)."""
    rng = np.random.default_rng(seed)
    colours = rng.integers(0, 256, (n_colours, c or 1))
    image = colours[rng.integers(0, n_colours, (h, w))].astype(np.uint8)
    return image[:, :, 0] if c is None else image


def forced_palette_stream(image: np.ndarray, tile: int, max_colours: int = 256) -> bytes:
    """Every tile a palette tile (reference pieces), whatever its size: P = 1 and 256 included."""
    image3, flags = fmt.prepare(image, tile)
    h, w, c = image3.shape
    tiles = [t.astype(np.int64) for t in r2.tiles_of(image3, tile)]
    header = fmt.Header(h, w, c, tile, f2.encoder_flags(flags, f2.encoder_wide_context(c),
                                                        f2.encoder_plane_context(c, len(tiles))), f2.VERSION)
    pals = [r2.choose_palette(t, max_colours) for t in tiles]
    assert all(p is not None for p in pals)
    row = r2.one_set_per_plane(c, c + 1)
    freq = r2.build_tables(pals, [row] * len(pals), c + 1, header.flags)
    cum = np.zeros((freq.shape[0], 257), np.int64)
    cum[:, 1:] = np.cumsum(freq, axis=1)
    payloads = []
    for t, p in zip(tiles, pals, strict=True):
        assert p is not None
        payload = r2.encode_palette_tile(t, p, freq, cum, row, f2.min_lanes_log2(False), header.flags)
        payloads.append(payload)
    return f2.assemble(header, freq, payloads)


@pytest.mark.parametrize("c", [None, 1, 3, 4])
@pytest.mark.parametrize("shape,n_colours,tile", [((70, 90), 12, 32), ((40, 33), 3, 16), ((64, 64), 60, 64),
                                                   ((129, 65), 7, 64)])
def test_palette_tiles_round_trip_and_match_reference(
    c: int | None, shape: tuple[int, int], n_colours: int, tile: int
) -> None:
    image = palette_image(*shape, c, n_colours, seed=n_colours)
    data = lossless.encode(image, tile, version=2)
    assert data == r2.encode(image, tile)
    stream = f2.read_stream(np.frombuffer(data, np.uint8))
    assert (stream.mode == f2.TILE_PALETTE).any()
    n_tiles = -(-shape[0] // tile) * -(-shape[1] // tile)
    if f2.encoder_tries_one_set(n_tiles):  # small images: one set for every plane when smaller
        assert data[7] in ((c or 1) + 1, 1)
    else:
        assert data[7] == (c or 1) + 1  # the index planes' own table set
    np.testing.assert_array_equal(r2.decode(data), image)
    np.testing.assert_array_equal(lossless.decode(data), image)
    np.testing.assert_array_equal(lossless.decode(data, roi=(1, 2, shape[0] - 3, shape[1])),
                                  image[1 : shape[0] - 3, 2:])


def test_masks_and_photos() -> None:
    rng = np.random.default_rng(3)
    yy, xx = np.mgrid[0:150, 0:170]
    labels = rng.permutation(256)[: 40].astype(np.uint8)
    mask = labels[((yy // 13) * 7 + (xx // 11) * 3 + (yy * xx) // 900) % 40]
    data = lossless.encode(mask, version=2)
    assert data == r2.encode(mask)
    np.testing.assert_array_equal(lossless.decode(data), mask)
    # Many colours per tile: no palette candidate, so the stream keeps S = C (past
    # ONE_SET_MAX_TILES tiles: a smaller image tries one set for every plane too).
    photo = rng.integers(0, 256, (150, 170, 3), dtype=np.uint8)
    assert not f2.encoder_tries_one_set(9) and lossless.encode(photo, version=2)[7] == 3


@pytest.mark.parametrize("n_colours", [65, 150, 256])
def test_colour_tiles_of_up_to_256_colours_become_palette_tiles(n_colours: int) -> None:
    """Anti-aliased text holds 65-256 colours per tile: both encoders give such colour tiles a
    palette (an index plane of ~8 bits per pixel instead of three coded planes) up to the 256
    that A2 allows, and grey tiles of more than 64 values none (reference_v2.max_palette)."""
    image = palette_image(64, 128, 3, n_colours, seed=n_colours)
    data = lossless.encode(image, version=2)
    assert data == r2.encode(image)
    stream = f2.read_stream(np.frombuffer(data, np.uint8))
    assert (stream.mode == f2.TILE_PALETTE).all()
    assert (stream.palette_size == n_colours).all()
    np.testing.assert_array_equal(lossless.decode(data), image)
    np.testing.assert_array_equal(r2.decode(data), image)
    rng = np.random.default_rng(n_colours)
    grey = rng.permutation(256)[:n_colours].astype(np.uint8)[rng.integers(0, n_colours, (64, 128))]
    assert all(np.unique(grey[:, x : x + 64]).size > 64 for x in (0, 64))
    grey_data = lossless.encode(grey, version=2)
    assert grey_data == r2.encode(grey)
    assert not (f2.read_stream(np.frombuffer(grey_data, np.uint8)).mode == f2.TILE_PALETTE).any()
    np.testing.assert_array_equal(lossless.decode(grey_data), grey)


@pytest.mark.parametrize("n_colours,c", [(1, 1), (1, 3), (256, 1), (200, 3)])
def test_forced_palette_sizes_decode_everywhere(n_colours: int, c: int) -> None:
    if n_colours == 256:  # every value once, smooth so the index plane codes small
        yy, xx = np.mgrid[0:64, 0:64]
        image = ((yy * 64 + xx) % 256).astype(np.uint8)
    else:
        image = palette_image(64, 64, c, 1, seed=5)
        if n_colours > 1:
            image[:8, :25] = np.arange(200).reshape(8, 25, 1)  # exactly n_colours present
    data = forced_palette_stream(image, 64)
    stream = f2.read_stream(np.frombuffer(data, np.uint8))
    assert stream.mode[0] == f2.TILE_PALETTE and stream.palette_size[0] == len(np.unique(r2.pack_colours(
        image.reshape(64, 64, -1))))
    np.testing.assert_array_equal(r2.decode(data), image)
    np.testing.assert_array_equal(lossless.decode(data), image)
    np.testing.assert_array_equal(lossless.decode(data, roi=(5, 6, 40, 41)), image[5:40, 6:41])
    assert hostplan.plan_buffers([data]).work.tolist() == plan_mod.build([data]).work.tolist()


def test_index_at_or_above_palette_size_is_refused() -> None:
    image = palette_image(64, 64, 3, 5, seed=2)
    data = bytearray(forced_palette_stream(image, 64))
    stream = f2.read_stream(np.frombuffer(bytes(data), np.uint8))
    at = int(stream.offsets[0])
    assert data[at + 2] == 4
    payload = data[at : int(stream.offsets[1])]
    payload[2] = 3  # P = 4: index 4 now lies outside; the palette shrinks by one colour ...
    del payload[4 + 12 : 4 + 15]  # ... and the tile by its 3 bytes
    data = bytearray(f2.with_payloads(bytes(data), {0: bytes(payload)}))
    with pytest.raises(CodecError, match="palette index 4 at or above the palette size 4"):
        r2.decode(bytes(data))
    with pytest.raises(CodecError, match="palette index at or above the palette size"):
        lossless.decode(bytes(data))


def test_bad_palette_headers_are_refused_by_both_validators() -> None:
    image = palette_image(64, 64, 1, 5, seed=2)
    good = forced_palette_stream(image, 64)
    at = int(f2.read_stream(np.frombuffer(good, np.uint8)).offsets[0])
    for k, value in [(1, 0x51), (1, 0x60), (3, 0x00), (3, 0x02), (3, 0x31), (0, 3)]:
        bad = bytearray(good)
        bad[at + k] = value
        with pytest.raises(CodecError):
            f2.read_stream(np.frombuffer(bytes(bad), np.uint8))
        with pytest.raises(CodecError):
            hostplan.plan_buffers([bytes(bad)])


def test_every_byte_change_is_refused_or_agrees_with_reference() -> None:
    image = palette_image(64, 64, 3, 9, seed=4)
    data = lossless.encode(image, version=2)
    assert f2.read_stream(np.frombuffer(data, np.uint8)).mode[0] == f2.TILE_PALETTE
    assert_byte_flips_refused_or_agree(data)


@pytest.mark.parametrize("c", [1, 3, 4])
def test_palette_pixels_write_exactly_the_region(c: int) -> None:
    """cpu_v2._palette_pixels (four-byte stores for colour pixels into a scratch row, copied
    out row by row) against numpy: every window of a tile, the bytes around it untouched."""
    from prepkit.lossless import cpu_v2

    rng = np.random.default_rng(c)
    th, tw, n_colours = 7, 9, 5
    palette = rng.integers(0, 256, (n_colours, c)).astype(np.uint8)
    src = np.concatenate([rng.integers(0, 256, 3, dtype=np.uint8), palette.reshape(-1)])
    index = rng.integers(0, n_colours, th * tw).astype(np.uint8)
    words = np.zeros(256, np.uint32)
    for ya, yb, xa, xb in [(0, th, 0, tw), (2, 5, 3, 4), (1, 2, 0, 9), (0, 7, 8, 9), (3, 6, 1, 8)]:
        out_h, out_w, oy, ox = 12, 15, 2, 4  # the tile sits at (2, 4) of a 12 x 15 output
        out = rng.integers(0, 256, out_h * out_w * c + 8, dtype=np.uint8)
        want = out.copy()
        view = want[: out_h * out_w * c].reshape(out_h, out_w, c)
        view[oy + ya : oy + yb, ox + xa : ox + xb] = palette[index.reshape(th, tw)[ya:yb, xa:xb]]
        line = rng.integers(0, 256, cpu_v2.LINE_BYTES, dtype=np.uint8)  # stale bytes must not leak out
        cpu_v2._palette_pixels(src, 3, n_colours, index, c, tw, out, 0, out_w, oy, ox, ya, yb, xa, xb, words, line)
        np.testing.assert_array_equal(out, want)
