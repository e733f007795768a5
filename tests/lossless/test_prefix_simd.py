"""prefix_simd.prefix_rows (the left and gradient predictors' running sums, 16 bytes per
vector step) against numpy's cumulative sums mod 256, on every row width from 1 to 70 (whole
blocks, a scalar rest, both) and on the decoder's planes."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit import lossless
from prepkit.lossless import format_v2, prefix_simd

from .images import make_image


@pytest.mark.parametrize("th", [1, 3, 64])
def test_prefix_rows_match_numpy(th: int) -> None:
    rng = np.random.default_rng(th)
    for tw in range(1, 71):
        plane = rng.integers(0, 256, (th, tw)).astype(np.uint8)
        # the plane sits inside a larger buffer: no byte outside it may change
        buffer = rng.integers(0, 256, th * tw + 40).astype(np.uint8)
        buffer[20 : 20 + th * tw] = plane.ravel()
        before = buffer.copy()
        prefix_simd.prefix_rows(buffer[20 : 20 + th * tw], th, tw)
        expected = (np.cumsum(plane.astype(np.int64), axis=1) % 256).astype(np.uint8)
        np.testing.assert_array_equal(buffer[20 : 20 + th * tw].reshape(th, tw), expected, err_msg=f"{th}x{tw}")
        np.testing.assert_array_equal(buffer[:20], before[:20])
        np.testing.assert_array_equal(buffer[20 + th * tw :], before[20 + th * tw :])


def test_left_and_gradient_tiles_decode_exactly() -> None:
    """Images whose tiles take the left and gradient predictors (fast_decode leaves MED out)
    decode to their pixels, whole and partial tiles."""
    for h, w in ((64, 64), (70, 93), (17, 5)):
        image = make_image("gradient", h, w, 3, seed=h)
        stream = lossless.encode(image, tile=64, fast_decode=True)
        s = format_v2.read_stream(np.frombuffer(stream, np.uint8))
        assert np.isin(s.predictor[s.ch_mode == format_v2.CH_RANS], (1, 3)).any()
        np.testing.assert_array_equal(lossless.decode(stream), image)
