"""Lane counts (docs/LOSSLESS.md A9, not normative): a tile's lane states stay under ~1/16 of
its estimated bytes, under ~1/4 in a long tile (format_v2.LONG_TILE_SYMBOLS symbols or more),
whose symbols would otherwise wait on a few serial lanes. Both encoders agree."""

from __future__ import annotations

import numpy as np

from prepkit import lossless
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import reference_v2 as r2


def sprinkled(c: int, share: float, seed: int = 0) -> np.ndarray:
    """A 64x64 diagonal ramp (each channel offset), a share of its values raised by 1 or 2:
    a smooth tile of few bytes per symbol."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:64, 0:64]
    img = ((yy + xx) // 2)[..., None] + np.array([0, 40, 80])[:c]
    img = img + (rng.random(img.shape) < share) * rng.integers(1, 3, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def test_lane_counts_follow_the_rule() -> None:
    sixteenths = 700 * 128  # an estimate of 700 bytes
    assert f2.lane_bytes(f2.LONG_TILE_SYMBOLS - 1) == 64 and f2.lane_bytes(f2.LONG_TILE_SYMBOLS) == 16
    assert r2.lanes_log2(sixteenths, 1, 4096) == 4  # 16 lanes: 64 * 16 >= 700
    assert r2.lanes_log2(sixteenths, 1, 3 * 4096) == 5  # 32: 16 * 32 < 700
    assert r2.lanes_log2(100 * 128, 1, 3 * 4096) == 3  # a tiny payload keeps few lanes
    assert r2.lanes_log2(10**9, 1, 3 * 4096) == f2.MAX_LANES_LOG2


def test_a_long_smooth_tile_gets_32_lanes_and_a_short_one_keeps_the_old_rule() -> None:
    for c, lanes_log2 in ((3, 5), (1, 4)):  # 12,288 symbols (long), 4,096 (not)
        image = sprinkled(c, 0.01)
        data = lossless.encode(image, version=2)
        assert data == r2.encode(image)
        stream = f2.read_stream(np.frombuffer(data, np.uint8))
        assert stream.mode.tolist() == [f2.TILE_CODED]
        assert stream.lanes_log2.tolist() == [lanes_log2], (c, len(data))
        np.testing.assert_array_equal(lossless.decode(data).reshape(image.shape), image)
        np.testing.assert_array_equal(r2.decode(data).reshape(image.shape), image)
