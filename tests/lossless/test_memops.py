"""memops.fill, memops.copy (LLVM memset and memcpy for numba kernels), memops.store32 and
memops.interleave3 / interleave4 against numpy slices."""

from __future__ import annotations

import numpy as np
from numba import njit

from prepkit.lossless import memops


@njit(cache=False)
def _fill_then_copy(a, b, at, count, value, src_at, dst_at, n):  # type: ignore[no-untyped-def]
    memops.fill(a, at, count, value)
    memops.copy(b, dst_at, a, src_at, n)


def test_fill_and_copy_touch_exactly_their_ranges() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        a = rng.integers(0, 256, 300, dtype=np.uint8)
        b = rng.integers(0, 256, 200, dtype=np.uint8)
        at, count = int(rng.integers(0, 150)), int(rng.integers(0, 150))
        src_at, dst_at, n = int(rng.integers(0, 150)), int(rng.integers(0, 100)), int(rng.integers(0, 100))
        value = int(rng.integers(0, 256))
        want_a, want_b = a.copy(), b.copy()
        want_a[at : at + count] = value
        want_b[dst_at : dst_at + n] = want_a[src_at : src_at + n]
        _fill_then_copy(a, b, np.int64(at), np.int64(count), np.uint8(value), np.int64(src_at), np.int64(dst_at),
                        np.int64(n))
        np.testing.assert_array_equal(a, want_a)
        np.testing.assert_array_equal(b, want_b)


@njit(cache=False)
def _store32(a, at, value):  # type: ignore[no-untyped-def]
    memops.store32(a, at, value)


def test_store32_writes_four_little_endian_bytes_anywhere() -> None:
    rng = np.random.default_rng(1)
    for at in range(0, 13):  # every alignment
        a = rng.integers(0, 256, 17, dtype=np.uint8)
        value = int(rng.integers(0, 2**32))
        want = a.copy()
        want[at : at + 4] = np.frombuffer(value.to_bytes(4, "little"), np.uint8)
        _store32(a, np.uint64(at), np.uint32(value))
        np.testing.assert_array_equal(a, want)


@njit(cache=False)
def _prefetch_rows(a, first, rows, stride):  # type: ignore[no-untyped-def]
    for r in range(rows):
        memops.prefetch_write(a, first + r * stride)


def test_prefetch_write_emits_a_write_prefetch_and_changes_nothing() -> None:
    a = np.arange(4096, dtype=np.uint8)
    _prefetch_rows(a, np.int64(5), np.int64(60), np.int64(64))
    np.testing.assert_array_equal(a, np.arange(4096, dtype=np.uint8))
    llvm = next(iter(_prefetch_rows.inspect_llvm().values()))
    # llvm.prefetch(address, rw = 1: for writing, locality 3, data cache)
    assert "@llvm.prefetch" in llvm and ", i32 1, i32 3, i32 1)" in llvm


@njit(cache=False)
def _interleave(planes, at, out, d):  # type: ignore[no-untyped-def]
    if planes.shape[0] == 3:
        memops.interleave3(planes[0], planes[1], planes[2], at, out, d)
    else:
        memops.interleave4(planes[0], planes[1], planes[2], planes[3], at, out, d)


def test_interleave_writes_exactly_32_pixels_as_numpy_interleaves_them() -> None:
    rng = np.random.default_rng(2)
    for c in (3, 4):
        planes = rng.integers(0, 256, (c, 64), dtype=np.uint8)
        for at in (0, 5, 32):
            for d in range(0, 9):  # every alignment of the output
                out = rng.integers(0, 256, d + 32 * c + 9, dtype=np.uint8)
                want = out.copy()
                want[d : d + 32 * c] = planes[:, at : at + 32].T.reshape(-1)
                _interleave(planes, np.int64(at), out, np.int64(d))
                np.testing.assert_array_equal(out, want)
