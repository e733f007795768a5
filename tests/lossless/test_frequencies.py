"""The compiled frequency-table helpers equal format_v2's plain definitions."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit.lossless import format_v2 as f2
from prepkit.lossless import frequencies


def _count_rows(seed: int) -> np.ndarray:
    """Rows of counts of every shape the encoders meet: empty, one symbol, a few, skewed, flat,
    every symbol, counts far above 4096 and many symbols counted once."""
    rng = np.random.default_rng(seed)
    rows = [np.zeros(256, np.int64), np.eye(256, dtype=np.int64)[7] * 5, np.eye(256, dtype=np.int64)[255]]
    for _ in range(40):
        row = np.zeros(256, np.int64)
        kind = rng.integers(5)
        if kind == 0:
            row[rng.choice(256, rng.integers(2, 8), replace=False)] = rng.integers(1, 10, 1)[0]
        elif kind == 1:
            row[:] = np.bincount(rng.geometric(rng.uniform(0.05, 0.9), 5000).clip(0, 255), minlength=256)
        elif kind == 2:
            row[:] = rng.integers(0, 3, 256)
        elif kind == 3:
            row[:] = rng.integers(1, 10**9, 256)
        else:
            row[0] = 10**7
            row[rng.choice(np.arange(1, 256), 200, replace=False)] = 1
        rows.append(row)
    return np.stack(rows)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_normalize_rows_equals_normalize(seed: int) -> None:
    counts = _count_rows(seed)
    got = frequencies.normalize_rows(counts)
    want = np.stack([f2.normalize(row) for row in counts])
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    assert set(got.sum(axis=1).tolist()) <= {0, f2.PROB_SCALE}


def test_normalize_rows_keeps_a_narrow_width() -> None:
    counts = np.array([[3, 0, 1, 9], [0, 0, 0, 0]], np.int64)
    got = frequencies.normalize_rows(counts)
    assert got.shape == (2, 4)
    np.testing.assert_array_equal(got[0], f2.normalize(np.pad(counts[0], (0, 252)))[:4])
    assert not got[1].any()


@pytest.mark.parametrize("seed", [0, 1])
def test_pack_tables_equals_format_v2(seed: int) -> None:
    freq = frequencies.normalize_rows(_count_rows(seed))
    for rows in (freq, freq[:1], freq[:0], freq[::-1]):
        want = f2.pack_tables(rows)
        assert frequencies.pack_tables(rows) == want
        assert frequencies.packed_size(rows) == len(want)
    parsed = f2.parse_tables(np.frombuffer(frequencies.pack_tables(freq), np.uint8), freq.shape[0])
    np.testing.assert_array_equal(parsed.freq, freq)


def test_cost_table_equals_format_v2() -> None:
    freq = frequencies.normalize_rows(_count_rows(3))
    np.testing.assert_array_equal(frequencies.cost_table(freq), f2.cost_table(freq))
    np.testing.assert_array_equal(frequencies.cost_table(np.arange(f2.PROB_SCALE + 1)),
                                  f2.cost_table(np.arange(f2.PROB_SCALE + 1)))
