"""Runs tiles (A2 mode 3) on the v2 CUDA decoder under numba's simulator: identical to the
CPU decoder and the reference, ROIs included; CPU and CUDA refuse or agree on damaged ones."""

from __future__ import annotations

import numpy as np

from prepkit import lossless
from prepkit.errors import CodecError
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import reference_v2


def _blobs(c: int | None, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:64, 0:48]
    label = np.zeros((64, 48), np.int64)
    for k in range(1, 6):
        cy, cx, r = rng.integers(0, 64), rng.integers(0, 48), rng.integers(6, 24)
        label[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = k
    image = rng.integers(0, 256, (6, c or 1))[label].astype(np.uint8)
    return image[:, :, 0] if c is None else image


def _streams() -> list[bytes]:
    """Every tile of two colours or more a runs tile (the encoders keep no runs table set on
    images this small)."""
    return [reference_v2.runs_stream(_blobs(c, seed), tile=32) for c, seed in ((None, 1), (3, 2))]


def test_runs_tiles_match_cpu_and_reference() -> None:
    streams = _streams()
    for stream in streams:
        assert (f2.read_stream(np.frombuffer(stream, np.uint8)).mode == f2.TILE_RUNS).sum() >= 2
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
    runs_tiles = np.flatnonzero(s.mode == f2.TILE_RUNS)
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
