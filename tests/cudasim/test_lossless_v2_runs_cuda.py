"""Runs tiles (A2 modes 3 to 6) on the v2 CUDA decoder under numba's simulator: identical to
the CPU decoder and the reference, ROIs included; CPU and CUDA refuse or agree on damaged ones."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit import lossless
from prepkit.errors import CodecError
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import reference_v2
from tests.lossless.images import implied_label_symbols, repeat_symbols, runs_tile_stream


def _blobs(c: int | None, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:64, 0:48]
    label = np.zeros((64, 48), np.int64)
    for k in range(1, 6):
        cy, cx, r = rng.integers(0, 64), rng.integers(0, 48), rng.integers(6, 24)
        label[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = k
    image = rng.integers(0, 256, (6, c or 1))[label].astype(np.uint8)
    return image[:, :, 0] if c is None else image


def _streams(mode: int = f2.TILE_RUNS_PALETTE) -> list[bytes]:
    """Every tile of two colours or more a runs tile of `mode` (the encoders keep no runs
    table set on images this small)."""
    repeats, same, coded = mode != f2.TILE_RUNS, mode >= f2.TILE_RUNS_SAME, mode == f2.TILE_RUNS_PALETTE
    return [reference_v2.runs_stream(_blobs(c, seed), tile=32, repeats=repeats, same=same, coded=coded)
            for c, seed in ((None, 1), (3, 2))]


@pytest.mark.parametrize("mode", [f2.TILE_RUNS_PALETTE, f2.TILE_RUNS_SAME, f2.TILE_RUNS_REPEAT, f2.TILE_RUNS])
def test_runs_tiles_match_cpu_and_reference(mode: int) -> None:
    streams = _streams(mode)
    for stream in streams:
        assert (f2.read_stream(np.frombuffer(stream, np.uint8)).mode == mode).sum() >= 2
    got = lossless.decode_batch(streams, device="cuda")
    for out, stream, image in zip(got, streams, [_blobs(None, 1), _blobs(3, 2)], strict=True):
        np.testing.assert_array_equal(out.copy_to_host(), image)
        np.testing.assert_array_equal(reference_v2.decode(stream), image)
    rois = [(3, 5, 60, 40), (33, 1, 64, 47)]
    flat, _, _ = lossless.decode_batch_packed(streams, "cuda", rois)
    cpu_flat, _, _ = lossless.decode_batch_packed(streams, "cpu", rois)
    np.testing.assert_array_equal(flat.copy_to_host()[: cpu_flat.size], cpu_flat)


def test_cpu_and_cuda_refuse_or_agree_on_damaged_runs_tiles() -> None:
    data = _streams()[0]
    s = f2.read_stream(np.frombuffer(data, np.uint8))
    rng = np.random.default_rng(5)
    runs_tiles = np.flatnonzero(s.mode == f2.TILE_RUNS_PALETTE)
    refused = 0
    for k in range(10):
        i = int(runs_tiles[k % runs_tiles.size])
        bad = bytearray(data)
        at = int(rng.integers(int(s.offsets[i]) + 1, int(s.offsets[i + 1])))
        bad[at] ^= int(rng.integers(1, 256))
        try:
            expected = lossless.decode_batch([bytes(bad)], device="cpu")[0]
        except CodecError:
            refused += 1
            try:
                lossless.decode_batch([bytes(bad)], device="cuda")
            except CodecError:
                continue
            raise AssertionError(f"CUDA decoded a stream the CPU refused (byte {at})") from None
        np.testing.assert_array_equal(lossless.decode_batch([bytes(bad)], device="cuda")[0].copy_to_host(), expected)
    assert refused >= 3  # the loop saw refusals, not only harmless changes


def test_implied_labels_decode_and_a_label_after_end_is_refused() -> None:
    """Mode 5's run symbols (images.implied_label_symbols): a boundary alone or with
    RUN_OTHER and a rank; RUN_OTHER + END refused."""
    good, expected = implied_label_symbols()
    data = runs_tile_stream(good, 2, 10, f2.TILE_RUNS_SAME)
    np.testing.assert_array_equal(lossless.decode_batch([data], device="cuda")[0].copy_to_host(), expected)
    bad = runs_tile_stream(good[:5] + [(f2.RUN_CTX_NEAR, f2.RUN_OTHER + f2.RUN_END)] + good[6:], 2, 10,
                           f2.TILE_RUNS_SAME)
    with pytest.raises(CodecError, match="run symbol, run boundary or label"):
        lossless.decode_batch([bad], device="cuda")


def test_a_repeat_past_the_last_row_or_in_the_first_is_refused() -> None:
    good = runs_tile_stream(repeat_symbols(6), 8, 10)
    np.testing.assert_array_equal(lossless.decode_batch([good], device="cuda")[0].copy_to_host(),
                                  np.zeros((8, 10), np.uint8))
    first_row = [(f2.RUN_CTX_LABEL, f2.RUN_REPEAT), (f2.RUN_CTX_LENGTH, 0), *repeat_symbols(6)]
    for bad in (runs_tile_stream(repeat_symbols(7), 8, 10), runs_tile_stream(first_row, 8, 10)):
        with pytest.raises(CodecError, match="run symbol, run boundary or label"):
            lossless.decode_batch([bad], device="cuda")


def test_a_coded_palette_out_of_order_is_refused_and_four_channels_decode() -> None:
    """Mode 6: the palette decoded from the lane must increase, as a raw one must; a
    four-channel tile's alpha differences have their own context (RUN_CTX_PALETTE + 2)."""
    good = runs_tile_stream(implied_label_symbols()[0], 2, 10, f2.TILE_RUNS_PALETTE, palette=(0, 9))
    np.testing.assert_array_equal(lossless.decode_batch([good], device="cuda")[0].copy_to_host(),
                                  implied_label_symbols()[1])
    bad = runs_tile_stream(implied_label_symbols()[0], 2, 10, f2.TILE_RUNS_PALETTE, palette=(9, 0))
    with pytest.raises(CodecError, match="run symbol, run boundary or label"):
        lossless.decode_batch([bad], device="cuda")
    image = np.dstack([_blobs(3, 4), _blobs(None, 5)])
    stream = reference_v2.runs_stream(image, tile=32)
    assert (f2.read_stream(np.frombuffer(stream, np.uint8)).mode == f2.TILE_RUNS_PALETTE).sum() >= 2
    np.testing.assert_array_equal(lossless.decode_batch([stream], device="cuda")[0].copy_to_host(), image)
