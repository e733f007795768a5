"""Palette tiles (A2 mode 2) on the v2 CUDA decoder under numba's simulator: identical to
the CPU decoder and the reference; an index at or above P refused on both devices."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit import lossless
from prepkit.errors import CodecError
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import reference_v2


def _palette_images() -> list[np.ndarray]:
    rng = np.random.default_rng(8)
    out = []
    # The last: colour tiles of 65-80 colours (the encoders give colour tiles palettes of up to 256).
    for shape, c, n in [((18, 21), None, 3), ((17, 19), 3, 6), ((20, 9), 4, 2), ((16, 16), 1, 12),
                        ((32, 32), 3, 80)]:
        colours = rng.integers(0, 256, (n, c or 1))
        image = colours[rng.integers(0, n, shape)].astype(np.uint8)
        out.append(image[:, :, 0] if c is None else image)
    return out


def test_palette_tiles_match_cpu_and_reference() -> None:
    streams = [lossless.encode(im, tile=16, version=2) for im in _palette_images()]
    assert any((f2.read_stream(np.frombuffer(s, np.uint8)).mode == f2.TILE_PALETTE).any() for s in streams)
    assert f2.read_stream(np.frombuffer(streams[-1], np.uint8)).palette_size.max() > 64
    got = lossless.decode_batch(streams, device="cuda")
    for out, stream, image in zip(got, streams, _palette_images(), strict=True):
        np.testing.assert_array_equal(out.copy_to_host(), image)
        np.testing.assert_array_equal(reference_v2.decode(stream), image)
    rois = [(1, 2, 15, 20), (3, 0, 17, 5)]  # crops of the grey and the 3-channel palette image
    picked = streams[:2]
    flat, offsets, shapes = lossless.decode_batch_packed(picked, "cuda", rois)
    cpu_flat, cpu_offsets, _ = lossless.decode_batch_packed(picked, "cpu", rois)
    np.testing.assert_array_equal(flat.copy_to_host()[: cpu_flat.size], cpu_flat)


def test_palette_index_out_of_range_refused_on_both_devices() -> None:
    image = _palette_images()[1][:16, :16]
    data = lossless.encode(image, tile=16, version=2)
    s = f2.read_stream(np.frombuffer(data, np.uint8))
    at = int(s.offsets[0])
    assert s.mode[0] == f2.TILE_PALETTE and data[at + 2] == 5
    bad = bytearray(data)
    bad[at + 2] = 4  # P = 5 -> 5 (the stream length unchanged: the last colour's bytes become
    # the first lane state's, so the stream is refused either way, but never decoded silently)
    for device in ("cpu", "cuda"):
        with pytest.raises(CodecError):
            lossless.decode_batch([bytes(bad)], device=device)
