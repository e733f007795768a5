"""Validation of decode regions (ROIs) before any decoder sees them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from prepkit.errors import DecodeError


def check_rois(rois: Any, shapes: np.ndarray, indices: Sequence[int]) -> np.ndarray:
    """Decode regions as an int64 (N, 4) array of (y0, x0, y1, x1), each non-empty and inside
    its sample's recorded (H, W). Floats are accepted only when whole; infinities and NaN are
    refused. Raises DecodeError naming the sample."""
    array = np.asarray(rois)
    if array.ndim != 2 or array.shape != (len(indices), 4):
        raise DecodeError(f"Expected rois of shape ({len(indices)}, 4). Got {array.shape}.")
    if array.dtype.kind == "f":
        bad = ~np.isfinite(array) | (array != np.floor(array))
        if bad.any():
            row = int(np.flatnonzero(bad.any(axis=1))[0])
            raise DecodeError(f"sample {indices[row]}: Expected whole-number ROI coordinates. Got {array[row].tolist()}.")
    elif array.dtype.kind not in "iu":
        raise DecodeError(f"Expected integer ROI coordinates. Got dtype {array.dtype}.")
    if array.size and (np.abs(array.astype(np.float64)) > 2**31).any():
        row = int(np.flatnonzero((np.abs(array.astype(np.float64)) > 2**31).any(axis=1))[0])
        raise DecodeError(f"sample {indices[row]}: Expected ROI coordinates inside the image. Got {array[row].tolist()}.")
    regions = array.astype(np.int64)
    heights, widths = shapes[:, 0].astype(np.int64), shapes[:, 1].astype(np.int64)
    ok = (
        (regions[:, 0] >= 0) & (regions[:, 1] >= 0) & (regions[:, 0] < regions[:, 2]) & (regions[:, 1] < regions[:, 3])
        & (regions[:, 2] <= heights) & (regions[:, 3] <= widths)
    )
    if not ok.all():
        row = int(np.flatnonzero(~ok)[0])
        raise DecodeError(
            f"sample {indices[row]}: Expected a non-empty ROI (y0, x0, y1, x1) inside the "
            f"{heights[row]}x{widths[row]} image. Got {regions[row].tolist()}."
        )
    return regions
