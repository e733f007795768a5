"""The MED inverse one anti-diagonal at a time (med_simd) against the numpy reference on
every tile shape class: full and partial tiles, fewer rows or columns than a transpose block,
one or two columns, and residuals of noise, of a few values and of smooth images; its
transposes against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from prepkit.lossless import format_v2 as f2
from prepkit.lossless import med_simd
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


@pytest.mark.parametrize("th", [1, 2, 7, 8, 9, 15, 16, 17, 33, 63, 64])
@pytest.mark.parametrize("tw", [1, 2, 3, 9, 16, 17, 40, 63, 64])
def test_unpredict_matches_the_reference(th: int, tw: int) -> None:
    rng = np.random.default_rng(th * 100 + tw)
    for residuals in residual_planes(rng, th, tw):
        expected = r2.unpredict(residuals.copy(), f2.PRED_MED).astype(np.uint8)
        symbols = r2.zigzag(residuals.astype(np.int64)).astype(np.uint8).reshape(-1)
        buffer = rng.integers(0, 256, th * tw + 64).astype(np.uint8)  # the plane, then bytes that must stay
        after = buffer[th * tw :].copy()
        work = rng.integers(0, 256, med_simd.SCRATCH_BYTES).astype(np.uint8)  # stale scratch must not matter
        med_simd.unpredict(symbols, buffer[: th * tw], th, tw, work)
        np.testing.assert_array_equal(buffer[: th * tw].reshape(th, tw), expected)
        np.testing.assert_array_equal(buffer[th * tw :], after)


@njit(cache=False)
def _transpose(src, src_at, src_stride, dst, dst_at, dst_stride):  # type: ignore[no-untyped-def]
    med_simd.transpose16(src, src_at, src_stride, dst, dst_at, dst_stride)


@njit
def _pair_to(src, src_at, src_stride, dst, dst_at, dst_stride):  # type: ignore[no-untyped-def]
    med_simd._pair_to_diagonals(src, src_at, src_stride, dst, dst_at, dst_stride)


@njit
def _pair_from(src, src_at, src_stride, dst, dst_at, dst_stride):  # type: ignore[no-untyped-def]
    med_simd._pair_from_diagonals(src, src_at, src_stride, dst, dst_at, dst_stride)


@pytest.mark.parametrize(("kernel", "blocks", "src_block", "dst_block"),
                         [(_transpose, 1, 0, 0),
                          (_pair_to, 2, med_simd.BLOCK, med_simd.BLOCK * med_simd.LANES),
                          (_pair_from, 2, med_simd.BLOCK * med_simd.LANES, med_simd.BLOCK)])
def test_transposes_match_numpy(kernel, blocks: int, src_block: int, dst_block: int) -> None:  # type: ignore[no-untyped-def]
    """One block, or two side by side (block b's rows src_block bytes after block a's, its
    transpose dst_block bytes after): each block transposed, and no other byte written."""
    rng = np.random.default_rng(1)
    src = rng.integers(0, 256, 6000).astype(np.uint8)
    for src_at, src_stride, dst_at, dst_stride in [(0, 32, 0, 64), (5, 111, 7, 64), (300, 95, 3, 33)]:
        dst = rng.integers(0, 256, 6000).astype(np.uint8)
        before = dst.copy()
        kernel(src, src_at, src_stride, dst, dst_at, dst_stride)
        written = np.zeros(dst.size, bool)
        for b in range(blocks):
            rows = [src[src_at + j * src_stride + b * src_block :][:16] for j in range(16)]
            block = np.stack(rows)
            for t in range(16):
                at = dst_at + t * dst_stride + b * dst_block
                np.testing.assert_array_equal(dst[at : at + 16], block[:, t])
                written[at : at + 16] = True
        np.testing.assert_array_equal(dst[~written], before[~written])


@pytest.mark.parametrize("count", [1, 2, 3, 4])
@pytest.mark.parametrize(("th", "tw"), [(64, 64), (17, 40), (1, 9), (64, 3)])
def test_planes_side_by_side_match_the_reference(count: int, th: int, tw: int) -> None:
    """A tile's MED planes share one loop of diagonal steps (med_steps): each plane still
    decodes to the reference's pixels."""
    rng = np.random.default_rng(count * 1000 + th * 10 + tw)
    residuals = [residual_planes(rng, th, tw)[k % 4] for k in range(count)]
    work = rng.integers(0, 256, med_simd.SCRATCH_BYTES).astype(np.uint8)
    for m, plane in enumerate(residuals):
        med_simd.to_diagonals(r2.zigzag(plane.astype(np.int64)).astype(np.uint8).reshape(-1), th, tw, work, m)
    med_simd.med_steps(work, th + tw - 1, count)
    for m, plane in enumerate(residuals):
        row = np.zeros(th * tw, np.uint8)
        med_simd.from_diagonals(row, th, tw, work, m)
        np.testing.assert_array_equal(row.reshape(th, tw), r2.unpredict(plane.copy(), f2.PRED_MED).astype(np.uint8))
