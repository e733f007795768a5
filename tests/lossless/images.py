"""Hypothesis strategies and small image makers shared by the lossless tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st


def make_image(kind: str, h: int, w: int, c: int | None, seed: int) -> np.ndarray:
    """A test image: noise, constant, gradient or smooth (photo-like) content."""
    rng = np.random.default_rng(seed)
    shape = (h, w) if c is None else (h, w, c)
    if kind == "noise":
        return rng.integers(0, 256, shape, dtype=np.uint8)
    if kind == "constant":
        return np.full(shape, int(rng.integers(256)), np.uint8)
    yy, xx = np.mgrid[0:h, 0:w]
    base = (yy * int(rng.integers(1, 9)) + xx * int(rng.integers(1, 9))) % 256
    if kind == "gradient":
        img = base
    else:  # smooth content plus small noise, like a photograph
        img = base + rng.integers(-3, 4, (h, w))
    img = np.clip(img, 0, 255).astype(np.uint8)
    if c is None:
        return img
    return np.stack([np.roll(img, k, axis=1) for k in range(c)], axis=2)


@st.composite
def images(draw, max_side: int = 80) -> np.ndarray:
    h = draw(st.integers(1, max_side))
    w = draw(st.integers(1, max_side))
    c = draw(st.sampled_from([None, 1, 3, 4]))
    kind = draw(st.sampled_from(["noise", "constant", "gradient", "smooth"]))
    return make_image(kind, h, w, c, draw(st.integers(0, 2**32 - 1)))


def assert_byte_flips_refused_or_agree(data: bytes, flips: int = 300, seed: int = 0) -> None:
    """Flip one random byte of a v2 stream ``flips`` times: the numba decoder must refuse
    (CodecError) exactly when the numpy reference does, and otherwise return its pixels."""
    import pytest

    from prepkit import lossless
    from prepkit.errors import CodecError
    from prepkit.lossless import reference_v2

    rng = np.random.default_rng(seed)
    for at in rng.integers(0, len(data), flips):
        bad = bytearray(data)
        bad[int(at)] ^= int(rng.integers(1, 256))
        try:
            expected = reference_v2.decode(bytes(bad))
        except CodecError:
            with pytest.raises(CodecError):
                lossless.decode(bytes(bad))
            continue
        np.testing.assert_array_equal(lossless.decode(bytes(bad)), expected)
