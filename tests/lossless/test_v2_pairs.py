"""Tiles decoded in pairs: two-lane tiles (cpu_v2._pair_symbols, the masks' path) and 32-lane
tiles of 8, 16 or 32 lanes (cpu_v2._pair_rounds32 and _pair_blocks, photographs' and rendered images'). The same pixels and the
same error codes as decoding each tile on its own, on whole streams, on streams with damaged
bytes (a bad tile must not change its partner's pixels) and with ROIs."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from prepkit import lossless
from prepkit.errors import CodecError
from prepkit.lossless import cpu_v2, hostplan, rans_avx2
from prepkit.lossless import format_v2 as f2


def _masks() -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    label = np.zeros((160, 200), np.uint8)
    yy, xx = np.mgrid[0:160, 0:200]
    for k in range(1, 7):  # blobs: tiles of few boundaries, coded with two lanes
        cy, cx, r = rng.integers(0, 160), rng.integers(0, 200), rng.integers(10, 50)
        label[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = k
    colours = np.array([[0, 0, 0], [200, 30, 40], [20, 180, 60], [9, 9, 200], [255, 255, 0], [0, 90, 90],
                        [120, 0, 120]], np.uint8)[label]  # palette tiles
    return [label, colours]


def _decode(stream: bytes | list[bytes], pairs: bool) -> tuple[np.ndarray, np.ndarray]:
    plan = hostplan.plan_buffers(stream if isinstance(stream, list) else [stream])
    items = np.arange(plan.work.shape[0], dtype=np.int64)
    out = np.zeros(plan.total, np.uint8)
    errors = np.zeros(plan.work.shape[0], np.int64)
    n_tables_at = np.zeros(plan.freq.shape[0] + 1, np.int64)
    cpu_v2._table_counts(plan.work, plan.freq.shape[0], n_tables_at)
    symbols, planes, windows, window_empty = cpu_v2._decode_scratch(1)
    cpu_v2._decode_items_serial(plan.src, plan.work, items, out, errors, plan.freq, plan.cum,
                                plan.empty.astype(np.int64), n_tables_at, windows, window_empty, cpu_v2.CONTEXT_OF,
                                symbols, planes, pairs)
    return out, errors


def _pairs_in(stream: bytes) -> int:
    plan = hostplan.plan_buffers([stream])
    sizes = [cpu_v2._two_lane_plane(plan.src, plan.work[i]) for i in range(plan.work.shape[0])]
    return sum(1 for a, b in zip(sizes[::2], sizes[1::2], strict=False) if a and a == b)


def _assert_pairs_decode_the_image(stream: bytes, image: np.ndarray, roi: tuple[int, int, int, int]) -> None:
    """With and without pairs: no error, the same bytes, the image; and a crop by ROI."""
    paired, errors = _decode(stream, pairs=True)
    single, _ = _decode(stream, pairs=False)
    assert not errors.any()
    np.testing.assert_array_equal(paired, single)
    np.testing.assert_array_equal(paired.reshape(image.shape), image)
    y0, x0, y1, x1 = roi
    np.testing.assert_array_equal(lossless.decode_batch([stream], rois=[roi])[0], image[y0:y1, x0:x1])


def test_pairs_decode_like_single_tiles() -> None:
    for image in _masks():
        stream = cpu_v2.encode(image, tile=32, runs_tiles=False)  # runs tiles would take the masks
        s = f2.read_stream(np.frombuffer(stream, np.uint8))
        assert ((s.lanes_log2 == 1) & (s.mode != f2.TILE_RAW)).sum() >= 8
        assert _pairs_in(stream) >= 4  # the pair path really runs
        _assert_pairs_decode_the_image(stream, image, (5, 7, 150, 190))


def _item_pairs(streams: list[bytes]) -> Iterator[tuple]:
    """Yield (plan, table window, its empty flags, two symbol rows, item a, its table base,
    item b, its table base) for the work items 0-1, 2-3, ... of the streams' plan, each
    pair's tables expanded into the window as _decode_loop does."""
    plan = hostplan.plan_buffers(streams)
    n_tables_at = np.zeros(plan.freq.shape[0] + 1, np.int64)
    cpu_v2._table_counts(plan.work, plan.freq.shape[0], n_tables_at)
    symbols, _, windows, window_empty = cpu_v2._decode_scratch(1)
    tags = np.array([-1, -1, 0], np.int64)
    empty = plan.empty.astype(np.int64)
    for i in range(0, plan.work.shape[0] - 1, 2):
        a, b = plan.work[i], plan.work[i + 1]
        base_a = cpu_v2._window_base(a[12], plan.freq, plan.cum, empty, n_tables_at, windows[0], window_empty[0], tags)
        base_b = cpu_v2._window_base(b[12], plan.freq, plan.cum, empty, n_tables_at, windows[0], window_empty[0], tags)
        yield plan, windows[0], window_empty[0], symbols, a, base_a, b, base_b


def test_pairs_of_tiles_from_two_images_use_both_images_tables() -> None:
    """Tiles of two one-tile images decode as a pair with each image's own tables (the
    decoder's table window keeps both images): masks of different label sets, so swapped or
    shared tables would decode wrong pixels or fail."""
    rng = np.random.default_rng(8)
    images = []
    for k in range(6):
        image = np.zeros((24, 32), np.uint8)
        for _ in range(5):
            y, x = rng.integers(0, 20), rng.integers(0, 28)
            image[y : y + int(rng.integers(2, 9)), x : x + int(rng.integers(2, 9))] = 40 * k + int(rng.integers(1, 30))
        images.append(image)
    streams = [cpu_v2.encode(image, runs_tiles=False) for image in images]
    paired_tiles = [cpu_v2._two_lane_plane(np.frombuffer(s, np.uint8), hostplan.plan_buffers([s]).work[0]) for s in streams]
    assert all(paired_tiles), "every image must be one two-lane tile, so that each pair spans two images"
    paired, errors = _decode(streams, pairs=True)
    single, _ = _decode(streams, pairs=False)
    assert not errors.any()
    np.testing.assert_array_equal(paired, single)
    np.testing.assert_array_equal(paired, np.concatenate([image.reshape(-1) for image in images]))
    # The pair loop itself decodes each pair cleanly (a failed pair falls back to single tiles,
    # which would hide tables taken from the wrong image above).
    scratch_b = (np.empty(cpu_v2.MAX_LANES, np.int64), np.empty(256, np.int64), np.empty(32, np.int32))
    for plan, window, window_empty, symbols, a, base_a, b, base_b in _item_pairs(streams):
        assert base_a != base_b
        assert cpu_v2._pair_symbols(plan.src, a, base_a, b, base_b, int(a[2] * a[3]), window, window_empty,
                                    cpu_v2.CONTEXT_OF, symbols[0], symbols[1], cpu_v2._decode_scratch_arrays(),
                                    scratch_b)


def _failed_bytes(stream: bytes, errors: np.ndarray, size: int) -> np.ndarray:
    """Which output bytes belong to tiles that reported an error (their bytes are undefined)."""
    plan = hostplan.plan_buffers([stream])
    failed = np.zeros(size, bool)
    for item, error in zip(plan.work, errors, strict=True):
        if error:
            th, tw, c, base, out_w, oy, ox = item[2], item[3], item[4], item[6], item[8], item[9], item[10]
            for y in range(th):
                at = base + ((oy + y) * out_w + ox) * c
                failed[at : at + tw * c] = True
    return failed


def _damage_both_ways(stream: bytes, first_byte: int, rng: np.random.Generator) -> int:
    """Flip one or two bits at or after first_byte, 60 times: the pair path and single tiles
    must report the same errors and the same pixels outside the failed tiles. Returns how
    many damaged streams had a tile error (not all are refused or caught)."""
    seen_error = 0
    for _ in range(60):
        bad = bytearray(stream)
        for _ in range(int(rng.integers(1, 3))):
            bad[int(rng.integers(first_byte, len(bad)))] ^= 1 << int(rng.integers(8))
        try:
            hostplan.plan_buffers([bytes(bad)])
        except CodecError:
            continue  # refused before any kernel runs
        paired, paired_errors = _decode(bytes(bad), pairs=True)
        single, single_errors = _decode(bytes(bad), pairs=False)
        np.testing.assert_array_equal(paired_errors, single_errors)
        seen_error += int(single_errors.any())
        keep = ~_failed_bytes(bytes(bad), single_errors, paired.size)  # a failed tile's partner still decodes
        np.testing.assert_array_equal(paired[keep], single[keep])
    return seen_error


def test_damaged_pairs_give_the_single_tiles_errors_and_pixels() -> None:
    rng = np.random.default_rng(11)
    for image in _masks():
        stream = cpu_v2.encode(image, tile=32, runs_tiles=False)  # runs tiles would take the masks
        s = f2.read_stream(np.frombuffer(stream, np.uint8))
        words_start = int(s.words_start[int(np.flatnonzero(s.mode != f2.TILE_RAW)[0])])
        assert _damage_both_ways(stream, words_start - 8, rng) > 10  # inside the lane states and words


def _mixed(seed: int, h: int = 256, w: int = 320, c: int = 3) -> np.ndarray:
    """A colour image of 32-lane tiles of several kinds: 8x8 blocks noisy in every channel or
    flat (so plane contexts pay), the second tile column with a constant last channel (tiles
    of fewer rANS planes than their partners) and, where there is room, a tile of 200
    scattered colours (a 32-lane palette tile)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    ramps = np.stack([(yy // 2 + xx // 3) % 256, (xx // 2) % 256, (yy // 3 + 60) % 256, 255 - (yy % 256)], -1)
    noisy = np.kron(rng.random((h // 8 + 1, w // 8 + 1)) < 0.5, np.ones((8, 8), bool))[:h, :w]
    image = ramps[..., :c] + rng.integers(-9, 10, (h, w, c)) * noisy[..., None]
    image[:, 64:128, c - 1] = 77
    if h >= 128 and w >= 192:
        image[64:128, 128:192] = rng.integers(0, 256, (200, c))[rng.integers(0, 200, (64, 64))]
    return np.clip(image, 0, 255).astype(np.uint8)


def _grey(seed: int, h: int = 256, w: int = 320) -> np.ndarray:
    """A grey ramp with noise that grows from one tile column to the next: tiles of 8, 16 and
    32 lanes side by side (pairs of different lane counts)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    column = (xx // 64) % 5
    noisy = rng.random((h, w)) < np.array([0.02, 0.05, 0.1, 0.3, 0.6])[column]
    return np.clip(100 + (yy + xx) // 4 + noisy * rng.integers(-(2**column), 2**column + 1), 0, 255).astype(np.uint8)


def _lanes(stream: bytes) -> list[int]:
    """Each tile's lane count."""
    plan = hostplan.plan_buffers([stream])
    return [int(cpu_v2._rans_part(plan.src, item)[3]) for item in plan.work]


def _rans_planes(stream: bytes) -> list[int]:
    """Each tile's rANS plane count where it can decode in a 32-lane pair, else 0."""
    plan = hostplan.plan_buffers([stream])
    counts = []
    for item in plan.work:
        start, c, _, _ = cpu_v2._rans_part(plan.src, item)
        counts.append(sum(1 for k in range(c) if plan.src[start + 2 + k]) if c else 0)
    return counts


def test_vector_pairs_decode_like_single_tiles() -> None:
    for c, shape in ((3, (256, 320)), (4, (256, 320)), (3, (200, 250)), (1, (256, 320))):
        image = _mixed(c, *shape, c=c) if c > 1 else _grey(c, *shape)
        stream = cpu_v2.encode(image)
        if c == 1:
            assert {8, 16, 32} <= set(_lanes(stream))
        counts = _rans_planes(stream)
        pairs = [(a, b) for a, b in zip(counts[::2], counts[1::2], strict=False) if a and b]
        assert len(pairs) >= 6  # the pair path really runs (the serial loop pairs tiles 0-1, 2-3, ...)
        if shape == (256, 320) and c > 1:
            assert stream[5] & f2.FLAG_PLANE_CONTEXT  # plane bits inside the pair loop
            assert any(a != b for a, b in pairs)  # one tile of a pair finishes first
            assert 1 in counts  # the palette tile
        elif c > 1:
            assert 0 in counts  # edge tiles of odd sizes decode on their own
        _assert_pairs_decode_the_image(stream, image, (5, 7, 190, 240))


def test_pair_loop_decodes_two_images_cleanly() -> None:
    """Tiles of two one-tile images as a pair: each image's own tables, and the pair loop
    itself returns no error (an error there would fall back to single tiles unseen)."""
    images = [_mixed(k, 64, 64) for k in range(4)]
    images[1] = 255 - images[1]
    streams = [cpu_v2.encode(image) for image in images]
    assert all(_rans_planes(s)[0] for s in streams)
    paired, errors = _decode(streams, pairs=True)
    assert not errors.any()
    np.testing.assert_array_equal(paired, np.concatenate([image.reshape(-1) for image in images]))
    scratch_b = (np.empty(cpu_v2.MAX_LANES, np.int64), np.empty(256, np.int64), np.empty(32, np.int32),
                 np.empty(cpu_v2.MAX_LANES, np.uint32))
    for plan, window, window_empty, symbols, a, base_a, b, base_b in _item_pairs(streams):
        assert base_a != base_b
        errors_ab = cpu_v2._pair_rounds32(plan.src, a, base_a, b, base_b, window, window_empty, cpu_v2.CONTEXT_OF,
                                          symbols[0], symbols[1], cpu_v2._decode_scratch_arrays(), scratch_b)
        assert errors_ab == ((0, 0) if rans_avx2.AVAILABLE else (-1, -1))


def test_damaged_vector_pairs_give_the_single_tiles_errors_and_pixels() -> None:
    rng = np.random.default_rng(12)
    for image in (_mixed(5, 128, 256), _grey(6, 128, 320)):
        stream = cpu_v2.encode(image)
        assert sum(1 for n in _rans_planes(stream) if n) >= 6
        s = f2.read_stream(np.frombuffer(stream, np.uint8))
        words_start = int(s.words_start[0]) - 4 * (1 << int(s.lanes_log2[0]))
        assert _damage_both_ways(stream, words_start, rng) > 10  # inside the lane states and words


def _smooth(seed: int, h: int = 128, w: int = 256) -> np.ndarray:
    """Ramps with a few scattered +-1..3 steps: 32-lane tiles of a few hundred words for
    12,288 symbols, whose last rounds have fewer than a round of their own words left."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    ramps = np.stack([(yy // 4 + xx // 5) % 256, (xx // 3) % 256, (yy // 6 + 60) % 256], -1)
    steps = (rng.random((h, w, 1)) < 0.02) * rng.integers(-3, 4, (h, w, 3))
    return np.clip(ramps + steps, 0, 255).astype(np.uint8)


def test_pairs_of_few_words_decode_to_their_last_round() -> None:
    """The pair loop reads whole rounds of words past a tile's own (those of src after it, as
    _rans does): low-entropy tiles decode like single tiles, and a tile cut short by a word,
    whose last rounds now read its partner's words, gets the single tile's error while its
    partner decodes."""
    image = _smooth(3)
    stream = cpu_v2.encode(image)
    s = f2.read_stream(np.frombuffer(stream, np.uint8))
    words = (np.diff(s.offsets) - (s.words_start - s.offsets[:-1])) // 2
    assert (s.lanes_log2 == 5).all() and (s.mode == f2.TILE_CODED).all()
    # Under a word per round: a tile's last 32 words cover more than its last 32 of 384 rounds.
    assert (words < 384).all()
    _assert_pairs_decode_the_image(stream, image, (3, 9, 100, 200))
    for tile in (0, 1, 2):  # the first tile of a pair, the second, and the first of the next pair
        payload = stream[s.offsets[tile] : s.offsets[tile + 1]]
        bad = f2.with_payloads(stream, {tile: payload[:-2]})  # one word short: a valid frame
        paired, paired_errors = _decode(bad, pairs=True)
        single, single_errors = _decode(bad, pairs=False)
        np.testing.assert_array_equal(paired_errors, single_errors)
        assert single_errors[tile] and np.count_nonzero(single_errors) == 1
        keep = ~_failed_bytes(bad, single_errors, paired.size)
        np.testing.assert_array_equal(paired[keep], single[keep])
        np.testing.assert_array_equal(paired[keep], image.reshape(-1)[keep])
        with np.testing.assert_raises(CodecError):
            lossless.decode(bad)
