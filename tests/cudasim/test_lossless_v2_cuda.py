"""The v2 CUDA decoder (lossless/cuda_v2.py) under numba's simulator: bit-identical to the CPU
decoder and the numpy reference on tiny images that exercise every mode of the format."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

from prepkit import lossless
from prepkit.errors import CodecError
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import reference_v2


def _images() -> list[np.ndarray]:
    """Small images whose tiles, together, use every tile mode, plane mode, predictor,
    colour transform and several lane counts (checked by test_images_cover_every_mode)."""
    rng = np.random.default_rng(3)
    yy, xx = np.mgrid[0:21, 0:19]
    ramp_x = (xx * 7 % 256).astype(np.uint8)  # left predictor
    ramp_y = (yy * 9 % 256).astype(np.uint8)  # up predictor
    plane = ((yy * 3 + xx * 5) % 256).astype(np.uint8)  # gradient predictor
    grey = (plane + rng.integers(0, 2, plane.shape)).astype(np.uint8)
    rgb_grey = np.stack([grey, grey, grey], 2).astype(np.uint8)  # subtract green: constant-free, cheap planes
    g = grey.astype(np.int64)
    ycc = np.stack([(g + 40) % 256, g, (g // 2 + 7) % 256], 2).astype(np.uint8)
    noise = rng.integers(0, 256, (17, 18, 3), dtype=np.uint8)  # raw tiles
    mask = np.zeros((23, 26), np.uint8)
    mask[5:20, 8:22] = 3
    mask[22:, :11] = 7
    rgba = np.dstack([rgb_grey[:17, :19], np.full((17, 19), 255, np.uint8)])  # constant alpha
    small = rng.integers(0, 4, (18, 17), dtype=np.uint8)  # predictor none
    big = (plane[:, :, None] + rng.integers(0, 24, (21, 19, 1))).astype(np.uint8)[:, :, 0]
    dots = np.zeros((20, 17), np.uint8)  # sparse impulses: predictor none
    dots[rng.random((20, 17)) < 0.05] = 1

    def walk() -> np.ndarray:
        return np.cumsum(np.cumsum(rng.integers(-1, 2, (21, 19)), 0), 1)

    r, g2, b = walk(), walk(), walk()  # correlated colour fields: YCoCg-R
    photo = (np.stack([100 + r + g2, 120 + g2, 90 + b + g2 // 2 + r], 2) % 256).astype(np.uint8)
    stripes = np.repeat(np.random.default_rng(3).integers(0, 256, (1, 19)), 21, 0).astype(np.uint8)  # up
    return [
        dots, photo, ramp_x, ramp_y, plane, rgb_grey, ycc, noise, mask, rgba, small,
        np.full((1, 1, 1), 200, np.uint8), np.full((5, 7, 3), 9, np.uint8),
        np.stack([ramp_x, ramp_y, plane, grey], 2)[:21, :23], big, stripes,
    ]


def _noisy() -> np.ndarray:
    """One 32x32x3 tile of mild noise: 32 rANS lanes at tile size 32."""
    return (np.random.default_rng(4).integers(0, 8, (32, 32, 3)) + 100).astype(np.uint8)


def _ycocg(image: np.ndarray) -> bytes:
    """The image with YCoCg-R (colour transform 2) in every coded tile: the encoders no longer
    try it (format_v2.ENCODER_COLOURS), but older streams have it."""
    return reference_v2.encode(image, tile=16, colours=(2,))


def _streams() -> list[bytes]:
    return ([lossless.encode(img, tile=16, version=2) for img in _images()] + [lossless.encode(_noisy(), tile=32, version=2)]
            + [_ycocg(_images()[1])])


# The images of _images() the simulator decodes: together they still cover every tile mode,
# plane mode, predictor, colour transform, lane count and 1/3/4 channels (checked by
# test_images_cover_every_mode); the simulator's warp shuffles cost seconds per tile, so the
# others (more of the same modes) are left to the CPU tests.
SIMULATED = (0, 1, 7, 9, 11, 12)


def _small_images() -> list[np.ndarray]:
    """Those images cut to at most 17x17 (still partial 16x16 tiles; the simulator is slow)."""
    images = _images()
    return [images[i][:17, :17] for i in SIMULATED] + [_noisy()]


def _small_streams() -> list[bytes]:
    return ([lossless.encode(img, tile=16 if img.shape[0] < 32 else 32, version=2) for img in _small_images()]
            + [_ycocg(_small_images()[1])])


@pytest.mark.parametrize("streams", [_streams, _small_streams])
def test_images_cover_every_mode(streams: Callable[[], list[bytes]]) -> None:
    seen = {"raw": False, "const": False, "colour": set(), "pred": set(), "lanes": set()}
    for stream in streams():
        s = f2.read_stream(np.frombuffer(stream, np.uint8))
        coded = s.mode == f2.TILE_CODED
        seen["raw"] |= bool((~coded).any())
        seen["const"] |= bool((coded[:, None] & (s.ch_mode == f2.CH_CONST)).any())
        seen["colour"] |= set(s.colour[coded].tolist())
        rans = coded[:, None] & (s.ch_mode == f2.CH_RANS)
        seen["pred"] |= set(s.predictor[rans].tolist())
        seen["lanes"] |= set(s.lanes_log2[coded & rans.any(axis=1)].tolist())
    assert seen["raw"] and seen["const"]
    assert seen["colour"] == set(range(f2.COLOURS))
    assert seen["pred"] == set(range(f2.PREDICTORS))  # none, left, up, gradient, MED
    assert {2, 5} <= seen["lanes"]
    channels = {lossless.read_header(stream).channels for stream in streams()}
    assert channels == {1, 3, 4}


def test_cuda_v2_matches_cpu_and_reference() -> None:
    images = [*_small_images(), _small_images()[1]]  # the last stream is _ycocg of image 1
    streams = _small_streams()
    got = lossless.decode_batch(streams, device="cuda")
    for arr, img, stream in zip(got, images, streams, strict=True):
        host = arr.copy_to_host()
        np.testing.assert_array_equal(host, reference_v2.decode(stream))
        np.testing.assert_array_equal(host, lossless.decode_batch([stream])[0])
        np.testing.assert_array_equal(host, img)


def test_cuda_v2_tile_sizes() -> None:
    image = _images()[4][:, :33]
    for tile in (32, 64):
        stream = lossless.encode(image, tile=tile, version=2)
        np.testing.assert_array_equal(lossless.decode_batch([stream], device="cuda")[0].copy_to_host(), image)


def _med_image(height: int, width: int, channels: int) -> np.ndarray:
    """Edges between flat regions plus mild noise: the encoder picks MED (predictor 4)."""
    rng = np.random.default_rng(9)
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.where(xx * 3 + yy * 2 > 60, 180, 40) + np.where(yy > xx, 30, 0)
    planes = [base + 7 * k + rng.integers(0, 3, (height, width)) for k in range(channels)]
    return np.stack(planes, 2).astype(np.uint8)


@pytest.mark.parametrize(("channels", "tile"), [(1, 32), (3, 64)])
def test_cuda_v2_med_wavefront_both_bands(channels: int, tile: int) -> None:
    """MED tiles, whole and cropped: a 64-tile taller than 32 rows takes the wavefront's second
    band of rows (32 + lane, whose lane 0 reads row 31 back from shared memory); 32-tiles, a
    partial last tile; an odd width (the last pair of columns half outside) and an even one
    (widths where the encoder picks MED for these planes)."""
    image = _med_image(41, 21 if channels == 3 else 24, channels)
    stream = lossless.encode(image, tile=tile, version=2)
    s = f2.read_stream(np.frombuffer(stream, np.uint8))
    assert (s.predictor[s.ch_mode == f2.CH_RANS] == f2.PRED_MED).any()
    got = lossless.decode_batch([stream], device="cuda")[0].copy_to_host()
    np.testing.assert_array_equal(got.reshape(image.shape), image)
    crop = lossless.decode_batch([stream], device="cuda", rois=[(5, 3, 40, 20)])[0]
    np.testing.assert_array_equal(crop.copy_to_host().reshape(35, 17, channels), image[5:40, 3:20])


def test_cuda_v2_forced_med_on_edge_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every plane MED-coded (the reference encoder with its choice forced), on the tiles the
    two-pixel wavefront finds hardest: one and two columns (one pair, half of it past the
    tile), 33 rows (a second band of one row), a whole 64x64 tile, odd widths; and crops."""
    chosen = reference_v2.choose

    def med_everywhere(tile: np.ndarray, n_predictors: int = f2.PREDICTORS,
                       colours: tuple[int, ...] = f2.ENCODER_COLOURS) -> reference_v2.TileChoice:
        choice = chosen(tile, n_predictors, colours)
        choice.predictors = [f2.PRED_MED] * len(choice.predictors)
        return choice

    monkeypatch.setattr(reference_v2, "choose", med_everywhere)
    rng = np.random.default_rng(12)
    shapes = [(33, 65, 1), (64, 66, 1), (40, 3, 3), (37, 23, 4)]  # tiles 33x1 and 64x2 at the right
    images = [(rng.integers(0, 3, shape) + 100 + np.arange(shape[1])[None, :, None] * 9).astype(np.uint8)
              for shape in shapes]
    streams = [reference_v2.encode(image, 64) for image in images]
    for stream in streams:
        s = f2.read_stream(np.frombuffer(stream, np.uint8))
        assert (s.mode == f2.TILE_CODED).all() and (s.ch_mode == f2.CH_RANS).any()
        assert (s.predictor[s.ch_mode == f2.CH_RANS] == f2.PRED_MED).all()
    got = lossless.decode_batch(streams, device="cuda")
    for out, image in zip(got, images, strict=True):
        np.testing.assert_array_equal(out.copy_to_host().reshape(image.shape), image)
    # (the second crop keeps to the 64x2 tile: the simulator takes about a minute per 64x64 tile)
    rois = [(3, 60, 33, 65), (10, 64, 64, 66), (1, 1, 39, 2), (31, 5, 36, 22)]
    flat, _, _ = lossless.decode_batch_packed(streams, "cuda", rois)
    cpu_flat, _, _ = lossless.decode_batch_packed(streams, "cpu", rois)
    np.testing.assert_array_equal(flat.copy_to_host()[: cpu_flat.size], cpu_flat)


def test_cuda_v2_rois_packed_and_mixed_versions() -> None:
    chosen = (2, 3, 5, 8, 9)  # 1, 3 and 4 channels
    images = [_images()[i] for i in chosen]
    streams = [_streams()[i] for i in chosen]
    streams[1] = lossless.encode(images[1], tile=16, version=1)  # a v1 stream in the batch
    rois = [(1, 2, 7, 8), (5, 3, 21, 18), (16, 0, 20, 19), None, (2, 5, 15, 19)]
    flat, offsets, shapes = lossless.decode_batch_packed(streams, "cuda", rois)
    cpu_flat, cpu_offsets, cpu_shapes = lossless.decode_batch_packed(streams, "cpu", rois)
    np.testing.assert_array_equal(flat.copy_to_host(), cpu_flat)
    np.testing.assert_array_equal(offsets.copy_to_host(), cpu_offsets)
    np.testing.assert_array_equal(shapes.copy_to_host(), cpu_shapes)


def _coded_tile(stream: bytes) -> tuple[int, int]:
    """(start, end) of the first coded tile with rANS planes."""
    s = f2.read_stream(np.frombuffer(stream, np.uint8))
    i = int(np.flatnonzero((s.mode == f2.TILE_CODED) & (s.ch_mode == f2.CH_RANS).any(axis=1))[0])
    return int(s.offsets[i]), int(s.offsets[i + 1])


@pytest.mark.parametrize("what", ["state_low", "final_state", "words_short", "words_long"])
def test_cuda_v2_rejects_corrupt_rans(what: str) -> None:
    # A coded tile of 113 values (a 16 x 16 crop of the horizontal ramp is a runs tile:
    # one-channel candidates from 5 pixels per run symbol are runs tiles first, runs.sure).
    image = _images()[4][:16, :16]
    stream = bytearray(lossless.encode(image, tile=16, version=2))
    start, end = _coded_tile(bytes(stream))
    s = f2.read_stream(np.frombuffer(bytes(stream), np.uint8))
    states = int(s.words_start[0]) - (4 << int(s.lanes_log2[0]))
    if what == "state_low":
        stream[states + 2 : states + 4] = b"\0\0"  # a state below 2^16
    elif what == "final_state":
        stream[states] ^= 1
    elif what == "words_short":
        stream = bytearray(f2.with_payloads(bytes(stream), {0: bytes(stream[start : end - 2])}))
    else:
        stream = bytearray(f2.with_payloads(bytes(stream), {0: bytes(stream[start:end]) + b"\0\0"}))
    for device in ("cpu", "cuda"):
        with pytest.raises(CodecError):
            lossless.decode_batch([bytes(stream)], device=device)


def test_cuda_v2_rejects_empty_table() -> None:
    image = _images()[2][:16, :16]
    stream = lossless.encode(image, tile=16, version=2)
    s = f2.read_stream(np.frombuffer(stream, np.uint8))
    # Rebuild the stream with every table but one of set 0 emptied: decoding must hit one.
    freq = s.tables.freq.copy()
    used = int(np.argmax(freq.sum(axis=1)))
    freq[[t for t in range(freq.shape[0]) if t != used]] = 0
    bad = f2.assemble(s.header, freq, [stream[int(s.offsets[0]) :]])
    np.testing.assert_array_equal(f2.read_stream(np.frombuffer(bad, np.uint8)).tables.freq, freq)  # well formed
    for device in ("cpu", "cuda"):
        with pytest.raises(CodecError):
            lossless.decode_batch([bad], device=device)


def test_cuda_and_cpu_agree_on_mutated_v2_payloads() -> None:
    # Random byte changes in the payloads: both decoders reject, or both return the same pixels.
    rng = np.random.default_rng(5)
    for image in (_images()[2][:16, :16], _images()[4][:12, :16]):
        stream = lossless.encode(image, tile=16, version=2)
        start = int(f2.read_stream(np.frombuffer(stream, np.uint8)).offsets[0])
        for _ in range(4):
            buf = bytearray(stream)
            for _ in range(int(rng.integers(1, 3))):
                buf[int(rng.integers(start, len(buf)))] = int(rng.integers(256))
            outcomes = []
            for device in ("cpu", "cuda"):
                try:
                    out = lossless.decode_batch([bytes(buf)], device=device)[0]
                    outcomes.append(out if device == "cpu" else out.copy_to_host())
                except CodecError:
                    outcomes.append(None)
            if outcomes[0] is None or outcomes[1] is None:
                assert outcomes[0] is None and outcomes[1] is None
            else:
                np.testing.assert_array_equal(outcomes[0], outcomes[1])


def test_differential_fuzz_runs_clean() -> None:
    from prepkit.fuzz_cuda import fuzz_lossless_cuda

    # About 2 s a case; a seed whose five cases decode one stream (picked again when the seeds change).
    report = fuzz_lossless_cuda(cases=5, seed=4)
    assert report.cases == 5 and report.rejected > 0 and report.accepted > 0
    assert report.findings == [], report.findings[:2]


def test_decode_tables_expanded_on_the_device_equal_the_host_ones() -> None:
    """expand_tables_kernel (what the GPU Reader uses: its host plan carries no packed tables)
    against the CPU decoder's packed tables, empty tables included (the mask's contexts)."""
    from numba import cuda

    from prepkit.lossless import cpu_v2, cuda_v2
    from prepkit.lossless import plan as plan_mod

    plan = plan_mod.build(_small_streams())
    assert plan.empty.any() and not plan.empty.all()  # both kinds of table are covered
    want = cpu_v2.decode_table(plan).reshape(-1)
    plan.dec, plan.lut = None, np.zeros((0, want.size // max(plan.freq.shape[0], 1)), np.uint8)  # as hostplan's plans
    got = cuda_v2.device_tables(plan, None, cuda.default_stream()).copy_to_host()
    np.testing.assert_array_equal(got, want)


def _two_textures(channels: int, step: int, fine: int, seed: int) -> np.ndarray:
    """16 x 32 (two tiles of 16): fine noise on the left tile, sparse steps of +-step on the
    right one, over a ramp."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:16, 0:32]
    base = np.stack([np.roll((yy * 3 + xx * 2) % 256, k, axis=1) for k in range(channels)], 2)
    image = np.clip(base + rng.integers(-fine, fine + 1, base.shape), 0, 255)
    steps = np.clip(base + rng.choice([-step, 0, step], base.shape), 0, 255)
    image[:, 16:] = steps[:, 16:]
    return image.astype(np.uint8)


def test_cuda_v2_follows_each_planes_table_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream with table sets per tile class (6 sets for 3 planes, lossless/table_sets.py):
    the kernel takes each plane's tables from the set its channel byte names. (One image: about
    25 s under the simulator.)"""
    from prepkit.lossless import cpu_v2, table_sets
    from prepkit.lossless import format as fmt

    image = _two_textures(3, step=40, fine=2, seed=0)  # a seed whose two tiles take two sets each
    # The encoders look for table sets from table_sets.MIN_TILES tiles, which would take
    # minutes under the simulator: asked for here on two tiles. The per-plane encoding
    # itself: a 2-tile image is also tried with one table set for every plane, which wins here
    # (format_v2.encoder_tries_one_set).
    monkeypatch.setattr(table_sets, "applies", lambda *args: True)
    stream = cpu_v2._encode(*fmt.prepare(image, 16), 16, False, True, True)
    assert f2.read_header(np.frombuffer(stream, np.uint8))[1] == 6
    got = lossless.decode_batch([stream], device="cuda")[0].copy_to_host()
    np.testing.assert_array_equal(got.reshape(image.shape), image)
    np.testing.assert_array_equal(got.reshape(image.shape), reference_v2.decode(stream).reshape(image.shape))


def test_cuda_v2_decodes_narrow_and_wide_contexts_in_one_batch() -> None:
    """Streams without FLAG_WIDE_CONTEXT (the first v2 streams: contexts from the symbol 64
    back alone) and with it (what the encoders write for every image) decode exactly
    side by side (plan.WIDE per item), on tiles of 2 to 32 lanes and on palette tiles."""
    chosen = (1, 6, 8, 15)  # photo-like colour, YCoCg-correlated colour, a mask (palette), stripes
    images = [_images()[i] for i in chosen] + [_noisy()]
    tiles = [16] * len(chosen) + [32]
    old = [reference_v2.encode(img, tile, wide_context=False) for img, tile in zip(images, tiles, strict=True)]
    new = [reference_v2.encode(img, tile, wide_context=True) for img, tile in zip(images, tiles, strict=True)]
    assert all(not s[5] & f2.FLAG_WIDE_CONTEXT for s in old) and all(s[5] & f2.FLAG_WIDE_CONTEXT for s in new)
    assert [s[24:] for s in old] != [s[24:] for s in new]
    got = lossless.decode_batch(old + new, device="cuda")
    for arr, img in zip(got, images + images, strict=True):
        np.testing.assert_array_equal(arr.copy_to_host(), img)


def test_cuda_v2_decodes_plane_contexts() -> None:
    """Streams with plane contexts (FLAG_PLANE_CONTEXT: eight tables per set, a plane bit
    from the symbol one plane back in shared memory) decode exactly beside streams without,
    on 16x16 tiles and their 1-pixel-wide edge tiles (under 64 pixels: no plane bits), RGBA
    and narrow contexts; a plane-bit table the payload needs, stored empty, is refused."""
    photo, rgba = _images()[1][:17, :17], _images()[9][:17, :17]
    streams = [reference_v2.encode(photo, 16, plane_context=True),
               reference_v2.encode(rgba, 16, plane_context=True),
               reference_v2.encode(photo, 16, wide_context=False, plane_context=True),
               reference_v2.encode(photo, 16, plane_context=False)]
    assert [bool(s[5] & f2.FLAG_PLANE_CONTEXT) for s in streams] == [True, True, True, False]
    got = lossless.decode_batch(streams, device="cuda")
    for arr, img in zip(got, [photo, rgba, photo, photo], strict=True):
        np.testing.assert_array_equal(arr.copy_to_host(), img)
    s = f2.read_stream(np.frombuffer(streams[0], np.uint8))
    freq = s.tables.freq.copy()
    used = [t for t in range(freq.shape[0]) if t % 8 >= 4 and freq[t].any()]
    assert used
    freq[used] = 0
    bad = f2.stream_head(s.header, freq, np.diff(s.offsets)) + streams[0][int(s.offsets[0]) :]
    for device in ("cpu", "cuda"):
        with pytest.raises(CodecError, match="empty frequency table"):
            lossless.decode_batch([bad], device=device)


def test_public_api_stages_in_a_growing_pinned_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    # decode_batch(_packed) on "cuda" gather into this thread's pinned buffer (grown for a
    # larger batch) and leave the decode tables to the device; earlier results stay valid.
    monkeypatch.setattr(lossless, "_host_buffers", threading.local())  # earlier tests grew this thread's
    rng = np.random.default_rng(12)
    small = [rng.integers(0, 256, (9, 11, 3), dtype=np.uint8)]
    large = [rng.integers(0, 256, (21, 18, 3), dtype=np.uint8), (np.arange(300).reshape(12, 25) % 7).astype(np.uint8)]
    first = lossless.decode_batch([lossless.encode(i, tile=16) for i in small], device="cuda")
    buffers = lossless._host_buffers.pinned
    assert buffers.allocations == 1
    streams = [lossless.encode(i, tile=16) for i in large]
    flat, offsets, _ = lossless.decode_batch_packed(streams, device="cuda")
    assert buffers.allocations == 2  # grew for the larger batch
    assert buffers.pinned("staging", 1, np.uint8).base.size >= sum(len(s) for s in streams)
    host, at = flat.copy_to_host(), offsets.copy_to_host()
    for k, image in enumerate(large):
        np.testing.assert_array_equal(host[at[k] : at[k] + image.size].reshape(image.shape), image)
    np.testing.assert_array_equal(first[0].copy_to_host(), small[0])
