"""The MED inverse eight rows at a time (med_simd, through cpu_v2._unpredict_med) against
the numpy reference on every tile shape class: full and partial tiles, fewer than eight rows,
one or two columns, and residuals of noise, of a few values and of smooth images."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit.lossless import cpu_v2
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import reference_v2 as r2


def residual_planes(rng: np.random.Generator, th: int, tw: int) -> list[np.ndarray]:
    smooth = (np.add.outer(np.arange(th) * 5, np.arange(tw) * 3) + rng.integers(0, 9, (th, tw))).astype(np.uint8)
    edges = np.where(np.add.outer(np.arange(th), -np.arange(tw)) > 0, 250, 3).astype(np.uint8)
    return [
        rng.integers(0, 256, (th, tw)).astype(np.uint8),
        rng.choice(np.array([0, 0, 0, 1, 255, 2], np.uint8), (th, tw)),
        r2.predict(smooth, f2.PRED_MED).astype(np.uint8),
        r2.predict(edges, f2.PRED_MED).astype(np.uint8),
    ]


@pytest.mark.parametrize("th", [1, 2, 7, 8, 9, 16, 17, 33, 63, 64])
@pytest.mark.parametrize("tw", [1, 2, 3, 9, 16, 40, 64])
def test_unpredict_med_matches_the_reference(th: int, tw: int) -> None:
    rng = np.random.default_rng(th * 100 + tw)
    for residuals in residual_planes(rng, th, tw):
        expected = r2.unpredict(residuals.copy(), f2.PRED_MED).astype(np.uint8)
        buffer = rng.integers(0, 256, th * tw + 64).astype(np.uint8)  # the plane, then bytes that must stay
        buffer[: th * tw] = residuals.reshape(-1)
        after = buffer[th * tw :].copy()
        cpu_v2._unpredict_med(buffer[: th * tw], th, tw)
        np.testing.assert_array_equal(buffer[: th * tw].reshape(th, tw), expected)
        np.testing.assert_array_equal(buffer[th * tw :], after)
