"""Hypothesis strategies and small image makers shared by the lossless tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from prepkit.lossless import format as fmt
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import reference_v2, runs


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


def mixed_image(c: int | None = 3) -> np.ndarray:
    """Two textures of one context statistics but different residuals (fine noise; sparse
    steps of 10) side by side, and flat label tiles in colour (a grey image's palette tiles
    would take its second set): one table per plane fits neither texture. 128 x 192: 2 x 3
    tiles of 64."""
    smooth = make_image("gradient", 128, 192, c, seed=4).astype(np.int64)
    rng = np.random.default_rng(5)
    image = np.clip(smooth + rng.integers(-2, 3, smooth.shape), 0, 255)
    steps = np.clip(smooth + rng.choice([-10, 0, 10], smooth.shape), 0, 255)
    image[:, 64:128] = steps[:, 64:128]
    if c is not None:
        labels = (np.arange(64)[:, None] // 16 + np.arange(64)[None, :] // 16) % 3 * 90
        image[:64, 128:] = labels[..., None]
    return image.astype(np.uint8)


def rendered(h: int, w: int, seed: int) -> np.ndarray:
    """Rendered-looking RGB: flat panels with sharp edges, a band of soft gradients (each
    channel its own slope) and a few pixels off by 1-3 in one channel (anti-aliasing)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.zeros((h, w, 3), np.int64)
    img[:] = rng.integers(0, 256, 3)
    for _ in range(12):
        y0, x0 = rng.integers(0, h - 8), rng.integers(0, w - 8)
        img[y0 : y0 + rng.integers(8, h // 2), x0 : x0 + rng.integers(8, w // 2)] = rng.integers(0, 256, 3)
    band = (yy > h // 3) & (yy < h // 2)
    img[band] = ((xx[band, None] * np.array([1, 2, 3])) // 3 + yy[band, None]) % 256
    speck = rng.random((h, w)) < 0.02
    img[speck, rng.integers(0, 3)] += rng.integers(1, 4)
    return np.clip(img, 0, 255).astype(np.uint8)


def general_encode(image: np.ndarray, tile: int = 64, fast_decode: bool = False) -> bytes:
    """The general encoder's stream (cpu_v2._encode, as cpu_v2.encode calls it where
    small_encoder does not write the image): where a test spies on its steps in Python."""
    from prepkit.lossless import cpu_v2
    from prepkit.lossless import format as fmt

    prepared, flags = fmt.prepare(image, tile)
    return cpu_v2._encode(prepared, flags, tile, fast_decode, True, True, try_one_set=True)


def mixed_tiles(c: int | None = 3) -> np.ndarray:
    """mixed_image repeated 2 x 3 times: 36 tiles of 64, enough for table sets per tile class
    (table_sets.MIN_TILES)."""
    return np.tile(mixed_image(c), (2, 3) if c is None else (2, 3, 1))


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


def repeat_symbols(more: int) -> list[tuple[int, int]]:
    """(context, symbol) of a tile of one colour per row: a first row, then a repeat of `more`."""
    return [(f2.RUN_CTX_LABEL, 0), (f2.RUN_CTX_FAR, f2.RUN_END), (f2.RUN_CTX_ROW, f2.RUN_REPEAT),
            (f2.RUN_CTX_LENGTH, more)]


def implied_label_symbols() -> tuple[list[tuple[int, int]], np.ndarray]:
    """(context, symbol) of a 2 x 10 mode 5 tile of two colours, and its pixels (palette 0, 9).
    Row 0: label 0, a boundary at 4 (implied rank 0: index 1), END; row 1: label 1 (rank 1
    after the row above's 0), the boundary again (near move 0) with an explicit rank (0, the
    only label besides 1: not what an encoder writes, but a valid tile), END. Symbol 5 is the
    boundary symbol with RUN_OTHER."""
    zero = f2.RUN_NEAR + f2.RUN_REACH
    pairs = [(f2.RUN_CTX_LABEL, 0), (f2.RUN_CTX_FAR, f2.RUN_LENGTH), (f2.RUN_CTX_LENGTH, 3),
             (f2.RUN_CTX_FAR, f2.RUN_END), (f2.RUN_CTX_ROW, 1), (f2.RUN_CTX_NEAR, zero + f2.RUN_OTHER),
             (f2.RUN_CTX_LABEL, 0), (f2.RUN_CTX_FAR, f2.RUN_END)]
    return pairs, np.array([[0] * 4 + [1] * 6, [1] * 4 + [0] * 6], np.uint8) * 9


def runs_tile_stream(pairs: list[tuple[int, int]], th: int, tw: int, mode: int = f2.TILE_RUNS_REPEAT,
                     palette: tuple[int, int] = (0, 9)) -> bytes:
    """A one-channel stream (2-D) of one runs tile of two colours (mode 4, 5 or 6, th x tw)
    coding exactly `pairs` (in mode 6 after the palette's two symbols), with tables made from
    them."""
    if mode == f2.TILE_RUNS_PALETTE:  # A2 mode 6: each colour's difference from the one before
        first, second = palette
        pairs = [(f2.RUN_CTX_PALETTE, first), (f2.RUN_CTX_PALETTE, (second - first) & 255), *pairs]
    ctxs, syms = (np.array(v, np.int64) for v in zip(*pairs, strict=True))
    counts = np.zeros((f2.RUN_CONTEXTS, 256), np.int64)
    np.add.at(counts, (ctxs, syms), 1)
    header = fmt.Header(th, tw, 1, 64, f2.encoder_flags(f2.FLAG_2D, True), f2.VERSION)
    freq = runs.table_set(np.stack([f2.normalize(row) for row in counts]), f2.set_tables(header.flags))
    cum = np.zeros((freq.shape[0], 257), np.int64)
    cum[:, 1:] = np.cumsum(freq, axis=1)
    head = bytes([mode, 0, 1]) + (b"" if mode == f2.TILE_RUNS_PALETTE else bytes(palette))
    payload = head + reference_v2.rans_encode(syms, ctxs, freq, cum, 1)
    return f2.assemble(header, freq, [payload])
