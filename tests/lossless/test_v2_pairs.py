"""Two-lane tiles decoded in pairs (cpu_v2._pair_symbols, the masks' path): the same pixels
and the same error codes as decoding each tile on its own, on whole streams, on streams with
damaged bytes (a bad tile must not change its partner's pixels) and with ROIs."""

from __future__ import annotations

import numpy as np

from prepkit import lossless
from prepkit.errors import CodecError
from prepkit.lossless import cpu_v2, hostplan
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


def test_pairs_decode_like_single_tiles() -> None:
    for image in _masks():
        stream = cpu_v2.encode(image, tile=32, runs_tiles=False)  # runs tiles would take the masks
        s = f2.read_stream(np.frombuffer(stream, np.uint8))
        assert ((s.lanes_log2 == 1) & (s.mode != f2.TILE_RAW)).sum() >= 8
        assert _pairs_in(stream) >= 4  # the pair path really runs
        paired, errors = _decode(stream, pairs=True)
        single, _ = _decode(stream, pairs=False)
        assert not errors.any()
        np.testing.assert_array_equal(paired, single)
        np.testing.assert_array_equal(paired.reshape(image.shape), image)
        np.testing.assert_array_equal(lossless.decode_batch([stream], rois=[(5, 7, 150, 190)])[0], image[5:150, 7:190])


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
    plan = hostplan.plan_buffers(streams)
    n_tables_at = np.zeros(plan.freq.shape[0] + 1, np.int64)
    cpu_v2._table_counts(plan.work, plan.freq.shape[0], n_tables_at)
    symbols, _, windows, window_empty = cpu_v2._decode_scratch(1)
    tags = np.array([-1, -1, 0], np.int64)
    empty = plan.empty.astype(np.int64)
    scratch_b = (np.empty(cpu_v2.MAX_LANES, np.int64), np.empty(256, np.int64), np.empty(32, np.int32))
    for i in range(0, len(streams), 2):
        a, b = plan.work[i], plan.work[i + 1]
        base_a = cpu_v2._window_base(a[12], plan.freq, plan.cum, empty, n_tables_at, windows[0], window_empty[0], tags)
        base_b = cpu_v2._window_base(b[12], plan.freq, plan.cum, empty, n_tables_at, windows[0], window_empty[0], tags)
        assert base_a != base_b
        assert cpu_v2._pair_symbols(plan.src, a, base_a, b, base_b, int(a[2] * a[3]), windows[0], window_empty[0],
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


def test_damaged_pairs_give_the_single_tiles_errors_and_pixels() -> None:
    rng = np.random.default_rng(11)
    for image in _masks():
        stream = cpu_v2.encode(image, tile=32, runs_tiles=False)  # runs tiles would take the masks
        s = f2.read_stream(np.frombuffer(stream, np.uint8))
        words_start = int(s.words_start[int(np.flatnonzero(s.mode != f2.TILE_RAW)[0])])
        seen_error = 0
        for _ in range(60):
            bad = bytearray(stream)
            for _ in range(int(rng.integers(1, 3))):  # inside the lane states and words
                bad[int(rng.integers(words_start - 8, len(bad)))] ^= 1 << int(rng.integers(8))
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
        assert seen_error > 10
