"""The encoders' frequency-table helpers, compiled: normalisation, serialisation and symbol
costs of many tables at once.

format_v2.normalize, format_v2.pack_tables and format_v2.cost_table define these (plain
numpy, one table at a time, the reference encoder's own); the functions here return exactly
what they return (tests compare them on random and edge-case tables). An encode calls them a
few dozen times per image, and on a small image such as a segmentation mask their Python
loops took about a fifth of the encoder's time (docs/BENCHMARKS.md, "Runs tiles first and a
faster encoder").
Both encoders' shared steps (runs.choose, table_sets, format_v2.assemble) use these, so the
encoders stay byte-identical. expand_into is the decoders' side: one table's decode slots,
for the host plan (plan.dec) and the CPU decoder's per-image table window.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from prepkit.jitcache import guard_disk_cache
from prepkit.lossless import format_v2 as f2

# Cost in 1/16 bits of a symbol of frequency f, by f (format_v2.cost_table: f = 0 costs as 1).
COST_OF_FREQ = f2.cost_table(np.arange(f2.PROB_SCALE + 1))


def cost_table(freq: np.ndarray) -> np.ndarray:
    """format_v2.cost_table(freq) by table lookup: int64 of freq's shape."""
    return COST_OF_FREQ[freq]


@njit(nogil=True, cache=True)
def _normalize_row(counts, out):
    """format_v2.normalize of one row of counts into out (zeros if the row counts nothing)."""
    width = counts.shape[0]
    total = np.int64(0)
    for s in range(width):
        total += counts[s]
    for s in range(width):
        out[s] = 0
    if total == 0:
        return
    placed = np.int64(0)
    for s in range(width):
        if counts[s] > 0:
            out[s] = max(np.int64(1), counts[s] * f2.PROB_SCALE // total)
            placed += out[s]
    diff = f2.PROB_SCALE - placed
    while diff != 0:
        i = 0  # the first largest entry (np.argmax)
        for s in range(1, width):
            if out[s] > out[i]:
                i = s
        step = diff if diff > 0 else -min(-diff, out[i] - 1)
        if step == 0:
            # The largest entry is 1 (unreachable with 256 symbols, as in the reference):
            # the first entry above 1 in descending order, else the largest.
            best = -1
            for s in range(width):
                if out[s] > 1 and (best < 0 or out[s] > out[best]):
                    best = s
            i = best if best >= 0 else i
            step = -min(-diff, out[i] - 1)
        out[i] += step
        diff -= step


@njit(nogil=True, cache=True)
def normalize_rows_into(counts, out):
    """normalize_rows for compiled callers: each row of counts normalised into out's row."""
    for r in range(counts.shape[0]):
        _normalize_row(counts[r], out[r])


def normalize_rows(counts: np.ndarray) -> np.ndarray:
    """format_v2.normalize of every row of a 2-D array of counts: int32 of the same shape
    (a row that counts nothing gives zeros)."""
    counts = np.ascontiguousarray(counts, np.int64)
    out = np.empty(counts.shape, np.int64)
    normalize_rows_into(counts, out)
    return out.astype(np.int32)


# Most bytes one table takes packed: kind, a 32-byte bitmap, two bytes per symbol.
MAX_TABLE_BYTES = 1 + 32 + 2 * 256


@njit(nogil=True, cache=True)
def pack_into(freq, out):
    """format_v2.pack_tables(freq) into out (MAX_TABLE_BYTES per table); returns the byte
    count (compiled callers; pack_tables and packed_size wrap it)."""
    pos = 0
    for t in range(freq.shape[0]):
        row = freq[t]
        n = 0
        for s in range(256):
            n += row[s] > 0
        if n == 0:
            out[pos] = f2.TABLE_EMPTY
            pos += 1
            continue
        if n <= f2.LIST_MAX:
            out[pos] = f2.TABLE_LIST
            out[pos + 1] = n - 1
            pos += 2
            for s in range(256):
                if row[s] > 0:
                    out[pos] = s
                    pos += 1
        else:
            out[pos] = f2.TABLE_BITMAP
            for b in range(32):
                bits = 0
                for k in range(8):
                    bits |= (row[8 * b + k] > 0) << k
                out[pos + 1 + b] = bits
            pos += 33
        for s in range(256):
            if row[s] > 0:
                v = row[s] - 1
                if v < 128:
                    out[pos] = v
                    pos += 1
                else:
                    out[pos] = 0x80 | (v & 127)
                    out[pos + 1] = v >> 7
                    pos += 2
    return pos


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def expand_into(freq, cum, table):
    """One table's decode slots (the decoders' layout, cpu_v2.decode_table): for each symbol v
    of frequency f > 0, table[cum[v] + j] = v | (f - 1) << 8 | j << 20 for j < f. freq, cum:
    the table's row of frequencies and exclusive prefix sums (validated, summing to 4096)."""
    for v in range(256):
        f = np.int64(freq[v])
        if f:
            packed = np.uint32(v | ((f - 1) << 8))
            slots = table[cum[v] : cum[v] + f]  # a view indexed from 0: the loop vectorises
            for j in range(f):
                slots[j] = packed | np.uint32(j << 20)


def pack_tables(freq: np.ndarray) -> bytes:
    """format_v2.pack_tables(freq): the serialised tables of a (n, 256) frequency array."""
    freq = np.ascontiguousarray(freq, np.int64).reshape(-1, 256)
    out = np.empty(freq.shape[0] * MAX_TABLE_BYTES, np.uint8)
    return out[: pack_into(freq, out)].tobytes()


def packed_size(freq: np.ndarray) -> int:
    """len(pack_tables(freq))."""
    freq = np.ascontiguousarray(freq, np.int64).reshape(-1, 256)
    out = np.empty(freq.shape[0] * MAX_TABLE_BYTES, np.uint8)
    return int(pack_into(freq, out))


# Last, once every cached function above exists: the constants compiled into them.
guard_disk_cache(globals(), (f2,))
