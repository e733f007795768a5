"""Table sets per tile class (docs/LOSSLESS.md A9): which of up to 2C table sets codes each
(tile, plane) of a v2 stream.

A stream may hold up to 2C sets of 4 or 8 context tables (format_v2.set_tables), and every plane of every tile names its
own set (A2). One set per plane leaves bytes on the table where an image mixes regions of
different statistics: the busy tiles flatten the smooth tiles' tables. `propose` groups the
planes' symbol histograms into more sets (the costliest set split at its median bits per
symbol, then a Lloyd round: every item to the set that codes it cheapest, tables rebuilt), on
an evenly spaced sample of at most SAMPLE items, then gives every item the set that codes it
cheapest. `refine` then moves every item again under the tables the stream would write for
those sets (not the sample's), for as long as that shrinks the stream's measure. The encoders
then count the real tables for the proposal and keep it only when the stream's measure
(`stream_bytes`) is smaller.

Shared by both encoders (like format_v2.normalize): the same histograms give the same sets,
so `reference_v2.encode` and `cpu_v2.encode` stay byte-identical. Costs are integers in 1/16
bits, summed exactly (_costs), so ties break the same way on every machine (the lower set
number).
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
from numba import njit, prange

from prepkit.jitcache import guard_disk_cache
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import frequencies

SAMPLE = 1024  # items the Lloyd rounds look at: a 2560x2560 RGB photograph has 4,800
LLOYD_ROUNDS = 1  # per split; 3 saved 0.02% more bytes (first 12 images per set) in 2x the time
REFINE_ROUNDS = 3  # Lloyd rounds on every item under the stream's own tables (refine)
# Images whose per-tile histograms (4C or 8C x 256 uint16 per tile) exceed this are left with one set
# per plane: the numba encoder keeps such histograms only up to its HISTOGRAM_BUDGET.
ITEMS_BUDGET = 64 << 20
# The fewest tiles for which the encoders look for table sets. A few dozen planes make few
# classes: on crops of the evaluation sets of 9 to 25 tiles (160 x 160 to 320 x 320), one
# thread, the proposal took 1.4-1.6x the encode time for 0-0.09% off photographs, 0-0.06% off
# medical images and 0.12-0.40% off rendered images; on 1 to 4 tiles it never won a byte
# (docs/BENCHMARKS.md "Table sets from 32 tiles, and images of up to 256 tiles in one compiled
# call (stop 59)"). The evaluation images (48 tiles and more) keep them: 0.9-3.3% smaller.
MIN_TILES = 32


def applies(n_tiles: int, c: int, fast_decode: bool, tables_per_set: int = f2.CONTEXTS) -> bool:
    """Whether the encoders look for table sets per tile class in an image of n_tiles tiles
    and c channels (both must decide alike). Not for fast_decode streams: more tables cost
    the CPU decoder 1.5-4.4% (docs/BENCHMARKS.md), and fast_decode trades size for speed.
    Not below MIN_TILES tiles: there the proposal costs far more time than it saves bytes."""
    return (not fast_decode and n_tiles >= MIN_TILES
            and n_tiles * c * tables_per_set * 256 * 2 <= ITEMS_BUDGET)


# Cost in 1/16 bits of a symbol of frequency f (format_v2.cost_table), by f; -1 for f = 0.
_COST_OF_FREQ = np.concatenate([[-1], f2.cost_table(np.arange(1, f2.PROB_SCALE + 1))]).astype(np.int64)


class Items(NamedTuple):
    """Items as compressed rows: the (context, symbol) counts of item i are counts[e] at
    columns[e] (context * 256 + symbol) for e in starts[i] .. starts[i + 1] - 1. A plane of
    4096 symbols has 60-150 nonzero entries on average in the photographs measured, of 1024
    (four contexts) or 2048 (eight)."""

    starts: np.ndarray  # int64 (m + 1,)
    columns: np.ndarray  # int64 (entries,)
    counts: np.ndarray  # int64 (entries,)
    width: int  # columns per item: contexts x 256


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _row_entries(rows, columns, counts, at, fill):
    """The nonzero entries of one item's counts rows (contexts x 256): their number, and with
    fill their columns (context * 256 + symbol) and counts at columns[at:], counts[at:]."""
    n = 0
    for r in range(rows.shape[0]):
        for v in range(256):
            if rows[r, v] != 0:
                if fill:
                    columns[at + n] = r * 256 + v
                    counts[at + n] = rows[r, v]
                n += 1
    return n


@njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def _entries(hist, phist, tile_of, plane_of, per_set, palette_plane):
    """(starts, columns, counts) of Items whose item e is plane plane_of[e] of tile tile_of[e]
    in per-tile histograms: rows plane * per_set .. + per_set of hist[tile], or all the rows
    of phist[tile] for plane palette_plane. Two parallel passes: the entries' count, then the
    entries."""
    m = tile_of.size
    starts = np.zeros(m + 1, np.int64)
    columns = np.empty(0, np.int64)
    counts = np.empty(0, np.int64)
    for fill in range(2):
        if fill:
            starts = np.cumsum(starts)
            columns = np.empty(starts[m], np.int64)
            counts = np.empty(starts[m], np.int64)
        for e in prange(m):
            at = starts[e]
            if plane_of[e] == palette_plane:
                n = _row_entries(phist[tile_of[e]], columns, counts, at, fill)
            else:
                first = plane_of[e] * per_set
                n = _row_entries(hist[tile_of[e], first : first + per_set], columns, counts, at, fill)
            if not fill:
                starts[e + 1] = n
    return starts, columns, counts


def histogram_items(hist: np.ndarray, phist: np.ndarray, tile_of: np.ndarray, plane_of: np.ndarray, per_set: int,
                    palette_plane: int) -> Items:
    """Items straight from the numba encoder's per-tile histograms (hist: (tiles, planes *
    per_set, 256); phist: (tiles, contexts, 256), a palette candidate's index plane, named
    palette_plane in plane_of), without a dense copy of every item (20 MB for a 2560 x 2560
    RGB image, made on one thread before)."""
    starts, columns, counts = _entries(hist, phist, tile_of, plane_of, per_set, palette_plane)
    return Items(starts, columns, counts, per_set * 256)


def sparse_items(items: np.ndarray) -> Items:
    """Items from dense counts (m, contexts, 256): each item one plane of its own tile."""
    m, contexts = items.shape[0], items.shape[1]
    return histogram_items(items, items[:0], np.arange(m), np.zeros(m, np.int64), contexts, -1)


@njit(cache=True, nogil=True)
def _rows(starts, columns, counts, rows):
    """(starts, columns, counts) of the items `rows` (increasing) of compressed rows, and
    each one's count of symbols."""
    m = rows.size
    sub_starts = np.zeros(m + 1, np.int64)
    for r in range(m):
        sub_starts[r + 1] = sub_starts[r] + starts[rows[r] + 1] - starts[rows[r]]
    sub_columns = np.empty(sub_starts[m], np.int64)
    sub_counts = np.empty(sub_starts[m], np.int64)
    symbols = np.zeros(m, np.int64)
    for r in range(m):
        at = sub_starts[r]
        for e in range(starts[rows[r]], starts[rows[r] + 1]):
            sub_columns[at] = columns[e]
            sub_counts[at] = counts[e]
            symbols[r] += counts[e]
            at += 1
    return sub_starts, sub_columns, sub_counts, symbols


@njit(cache=True, nogil=True)
def _set_counts(starts, columns, counts, sets, n_sets, width):
    """(n_sets, width) int64 sums of the items' counts in each set (width: contexts x 256)."""
    out = np.zeros((n_sets, width), np.int64)
    for i in range(starts.size - 1):
        row = out[sets[i]]
        for e in range(starts[i], starts[i + 1]):
            row[columns[e]] += counts[e]
    return out


def _tables(items: tuple[np.ndarray, np.ndarray, np.ndarray], sets: np.ndarray, n_sets: int, width: int
            ) -> np.ndarray:
    """Cost tables (n_sets, width: contexts x 256 symbols; -1: absent symbol) of the items
    (Items) in each set, from frequencies floor(count * 4096 / total) raised to 1: a guide
    for the choice only (the encoders count the real tables of the sets chosen)."""
    counts = _set_counts(*items, sets, n_sets, width).reshape(-1, 256)
    total = np.maximum(counts.sum(axis=1, keepdims=True), 1)
    freq = np.where(counts > 0, np.maximum(1, counts * f2.PROB_SCALE // total), 0)
    return _COST_OF_FREQ[freq].reshape(n_sets, -1)


MISSING = np.int64(1) << 32  # a key's part for each symbol that a set's tables lack (_costs)
# Entries x sets below which the keys are summed on the calling thread: a parallel region
# costs more than the sums of a small image's few dozen items (21-24 against 10-15 us for the
# 1,970 entries of 27 items of a 160 x 160 crop, 3 and 6 sets, one thread).
PARALLEL_KEYS = 1 << 16


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _item_keys(starts, columns, counts, cost_by_column, i, out):
    """out[i]: item i's keys under every set (see _costs). A symbol the set lacks adds
    MISSING instead of its count times a cost: the same sum as the missing symbols times 2^32
    plus the cost of the others."""
    n_sets = cost_by_column.shape[1]
    for e in range(starts[i], starts[i + 1]):
        column = columns[e]
        count = counts[e]
        for s in range(n_sets):
            bits = cost_by_column[column, s]
            out[i, s] += count * bits if bits >= 0 else MISSING


@njit(parallel=True, cache=True, nogil=True, boundscheck=False)
def _keys_parallel(starts, columns, counts, cost_by_column):
    out = np.zeros((starts.size - 1, cost_by_column.shape[1]), np.int64)
    for i in prange(starts.size - 1):
        _item_keys(starts, columns, counts, cost_by_column, i, out)
    return out


@njit(cache=True, nogil=True, boundscheck=False)
def _keys_serial(starts, columns, counts, cost_by_column):
    out = np.zeros((starts.size - 1, cost_by_column.shape[1]), np.int64)
    for i in range(starts.size - 1):
        _item_keys(starts, columns, counts, cost_by_column, i, out)
    return out


@njit(cache=True, nogil=True)
def _costs_by_column(starts, columns, counts, cost_by_column):
    """_costs with the cost tables transposed, (width, n_sets): an entry's costs under every
    set are one contiguous row (3x faster than a set at a time over the entries). Items in
    parallel from PARALLEL_KEYS entries x sets."""
    if columns.size * cost_by_column.shape[1] >= PARALLEL_KEYS:
        return _keys_parallel(starts, columns, counts, cost_by_column)
    return _keys_serial(starts, columns, counts, cost_by_column)


def _costs(starts: np.ndarray, columns: np.ndarray, counts: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """(m, n_sets) int64 keys: each item's count of distinct symbols the set's tables (cost:
    (n_sets, width) in 1/16 bits, -1 for an absent symbol) lack, times 2^32, plus its cost in
    1/16 bits under them. The fewest missing symbols win (a set that codes them all, when one
    exists), then the lowest cost. Integer sums (no BLAS: its threads would fight numba's for
    the cores), exact in any order; items in parallel for large images."""
    numba.get_num_threads()  # starts numba's threading layer (see propose_compiled)
    return _costs_by_column(starts, columns, counts, np.ascontiguousarray(cost.T))


# Bits of a symbol of frequency f in 1/4096 bits, by f (0 for f = 0): finer than the encoders'
# 1/16-bit costs, which overstate the cost of near-certain symbols (flat regions) by up to 2x.
_FINE_BITS = np.concatenate([[0], np.rint(4096 * (f2.PROB_BITS - np.log2(np.arange(1, f2.PROB_SCALE + 1))))]
                            ).astype(np.int64)


def stream_bytes(overhead: int, counts: np.ndarray, freq: np.ndarray) -> int:
    """The encoders' measure of a stream when deciding on table sets: the tiles' bytes outside
    the symbols (headers, palettes, lane states), the symbols' entropy under the tables freq
    (counts: the same (table, symbol) shape), and the packed tables. Integer arithmetic: the
    same in both encoders whatever the order of the sums."""
    bits = int((counts.astype(np.int64) * _FINE_BITS[freq]).sum())
    return overhead + -(-bits // (8 * 4096)) + frequencies.packed_size(freq)


def fold_plane_contexts(counts: np.ndarray) -> np.ndarray:
    """Counts of (table, symbol) in eight tables per set (FLAG_PLANE_CONTEXT) as four per
    set: each context's two rows (plane bit 0 and 1) added together."""
    by_set = counts.reshape(-1, 2, f2.CONTEXTS, counts.shape[-1])
    return by_set.sum(axis=1).reshape(-1, counts.shape[-1])


# Plane contexts are kept when they save at least this share of the symbols' and tables'
# bytes: eight tables per set spread a plane's symbols over twice the decode tables, which
# cost the CPU decoder 9-11% of its time on the rendered evaluation set (docs/BENCHMARKS.md "Plane
# contexts"), so photographs (0-1.5% smaller) keep four and rendered images (2-9%) take eight.
PLANE_CONTEXT_MIN_SAVING_PERCENT = 2


def plane_contexts_pay(counts: np.ndarray, freq: np.ndarray) -> bool:
    """Whether a stream keeps its plane contexts (A9): its symbols' entropy and packed
    tables (stream_bytes) under its eight tables per set, counts and freq, at least
    PLANE_CONTEXT_MIN_SAVING_PERCENT below those of the same counts folded into four tables per set
    (integer arithmetic: the same decision in both encoders)."""
    folded = fold_plane_contexts(counts)
    eight = stream_bytes(0, counts, freq)
    four = stream_bytes(0, folded, frequencies.normalize_rows(folded))
    return eight * 100 <= four * (100 - PLANE_CONTEXT_MIN_SAVING_PERCENT)


def _stream_tables(items: Items, sets: np.ndarray, n_sets: int) -> tuple[np.ndarray, np.ndarray]:
    """The (table, symbol) counts of the items in each set and the tables the encoders would
    write for them (frequencies.normalize_rows), both (n_sets * contexts, 256)."""
    counts = _set_counts(items.starts, items.columns, items.counts, sets, n_sets, items.width).reshape(-1, 256)
    return counts, frequencies.normalize_rows(counts)


def refine(items: Items, sets: np.ndarray, n_sets: int) -> np.ndarray:
    """Lloyd rounds under the stream's own tables: every item to the set whose tables (those
    the encoders write for the current sets) code it cheapest, the tables counted again, up to
    REFINE_ROUNDS times; the sets of the round whose symbols' entropy and packed tables
    (stream_bytes) are smallest. propose's sets come from tables of a sample, with frequencies
    that are not the stream's: on the evaluation's rendered images these rounds take 0.48% off
    the streams, photographs 0.22% (docs/BENCHMARKS.md, "Table sets chosen again")."""
    best = sets
    counts, freq = _stream_tables(items, sets, n_sets)
    best_bytes = stream_bytes(0, counts, freq)
    for _ in range(REFINE_ROUNDS):
        cost = _COST_OF_FREQ[freq].reshape(n_sets, -1)
        moved = np.argmin(_costs(items.starts, items.columns, items.counts, cost), axis=1)
        if (moved == sets).all():
            break
        sets = moved
        counts, freq = _stream_tables(items, sets, n_sets)
        measure = stream_bytes(0, counts, freq)
        if measure >= best_bytes:
            break
        best, best_bytes = sets, measure
    return best


def propose(items: Items | np.ndarray, sets: np.ndarray, n_sets: int, max_sets: int) -> tuple[np.ndarray, int]:
    """A set for each item and the set count, or (sets, n_sets) unchanged when there is
    nothing to split or move.

    items: (m, set_tables, 256) counts of (context, symbol) of each coded plane of the kept tiles, in
    tile order then plane order (a palette tile's index plane is one item), dense or as
    Items (what the numba encoder builds from its histograms without the dense copy); sets:
    their sets now (0..n_sets-1)."""
    full = items if isinstance(items, Items) else sparse_items(items)
    m = full.starts.size - 1
    if m < 2:
        return sets, n_sets
    width = full.width
    k = n_sets
    proposal = sets
    if n_sets < max_sets:
        sample = np.unique(np.linspace(0, m - 1, min(m, SAMPLE)).astype(np.int64))
        sample_starts, sample_columns, sample_counts, symbols = _rows(full.starts, full.columns, full.counts, sample)
        part = (sample_starts, sample_columns, sample_counts)
        symbols = np.maximum(symbols, 1)
        cur = sets[sample].copy()
        while k < max_sets:
            own = _costs(*part, _tables(part, cur, k, width))[np.arange(cur.size), cur]  # every symbol present
            load = np.bincount(cur, weights=own.astype(np.float64), minlength=k)
            split = int(np.argmax(load))
            members = np.flatnonzero(cur == split)
            rate = own[members] / symbols[members]
            busy = members[rate > np.median(rate)]
            if busy.size == 0:
                break
            cur[busy] = k
            k += 1
            for _ in range(LLOYD_ROUNDS):
                best = np.argmin(_costs(*part, _tables(part, cur, k, width)), axis=1)
                if (best == cur).all():
                    break
                cur = best
        if k > n_sets:
            proposal = np.argmin(_costs(full.starts, full.columns, full.counts, _tables(part, cur, k, width)), axis=1)
    proposal = refine(full, proposal, k)
    if k == n_sets and (proposal == sets).all():
        return sets, n_sets
    used = np.unique(proposal)  # number the sets that kept items 0.. in order
    renumber = np.zeros(k, np.int64)
    renumber[used] = np.arange(used.size)
    return renumber[proposal].astype(np.int64), int(used.size)


# ----------------------------------------------------------------------------- compiled
# propose and refine in one compiled call (what cpu_v2 runs): the same arithmetic in the same
# order, so the same sets as the functions above, which reference_v2 keeps running (the tests
# compare the two encoders' bytes). From Python, propose's rounds were 40-58% of the time of a
# 96 x 96 to 500 x 375 image's encode (docs/BENCHMARKS.md "Small images: one thread, one
# compiled call (stop 58)").


@njit(cache=True, nogil=True)
def _cost_columns(starts, columns, counts, width, sets, n_sets):
    """_tables(...) of the items in their sets, transposed as _costs_by_column takes it:
    (width, n_sets)."""
    totals = _set_counts(starts, columns, counts, sets, n_sets, width)
    by_column = np.empty((width, n_sets), np.int64)
    for s in range(n_sets):
        for row in range(0, width, 256):
            total = np.int64(0)
            for v in range(256):
                total += totals[s, row + v]
            total = max(total, np.int64(1))
            for v in range(256):
                n = totals[s, row + v]
                f = max(np.int64(1), n * f2.PROB_SCALE // total) if n > 0 else np.int64(0)
                by_column[row + v, s] = _COST_OF_FREQ[f]
    return by_column


@njit(cache=True, nogil=True)
def _argmin_rows(keys):
    out = np.empty(keys.shape[0], np.int64)
    for i in range(keys.shape[0]):
        best = 0
        for s in range(1, keys.shape[1]):
            if keys[i, s] < keys[i, best]:
                best = s
        out[i] = best
    return out


@njit(cache=True, nogil=True)
def _median(values):
    """np.median of a 1-D float64 array."""
    ordered = np.sort(values)
    n = ordered.size
    if n % 2:
        return ordered[n // 2]
    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2.0


@njit(cache=True, nogil=True)
def stream_bytes_compiled(overhead, counts, freq):
    """stream_bytes for compiled callers: counts and freq int64 (tables, 256)."""
    bits = np.int64(0)
    for t in range(counts.shape[0]):
        for v in range(256):
            bits += counts[t, v] * _FINE_BITS[freq[t, v]]
    packed = np.empty(freq.shape[0] * frequencies.MAX_TABLE_BYTES, np.uint8)
    return overhead + -(-bits // (8 * 4096)) + frequencies.pack_into(freq, packed)


@njit(cache=True, nogil=True)
def plane_contexts_pay_compiled(counts, freq):
    """plane_contexts_pay for compiled callers: counts and freq int64 (sets x 8 tables, 256)."""
    folded = np.zeros((counts.shape[0] >> 1, 256), np.int64)
    for t in range(counts.shape[0]):  # fold_plane_contexts: (set, plane bit, context) rows to (set, context)
        row = (t // f2.MAX_SET_TABLES) * f2.CONTEXTS + t % f2.CONTEXTS
        for v in range(256):
            folded[row, v] += counts[t, v]
    folded_freq = np.empty(folded.shape, np.int64)
    frequencies.normalize_rows_into(folded, folded_freq)
    eight = stream_bytes_compiled(np.int64(0), counts, freq)
    four = stream_bytes_compiled(np.int64(0), folded, folded_freq)
    return eight * 100 <= four * (100 - PLANE_CONTEXT_MIN_SAVING_PERCENT)


@njit(cache=True, nogil=True)
def _stream_measure(starts, columns, counts, width, sets, n_sets):
    """(stream_bytes(0, ...) of _stream_tables, the tables' frequencies)."""
    totals = _set_counts(starts, columns, counts, sets, n_sets, width).reshape(-1, 256)
    freq = np.empty(totals.shape, np.int64)
    frequencies.normalize_rows_into(totals, freq)
    return stream_bytes_compiled(np.int64(0), totals, freq), freq


@njit(cache=True, nogil=True)
def _refine_compiled(starts, columns, counts, width, sets, n_sets):
    """refine()."""
    best = sets
    best_bytes, freq = _stream_measure(starts, columns, counts, width, sets, n_sets)
    for _ in range(REFINE_ROUNDS):
        by_column = np.empty((width, n_sets), np.int64)
        flat = freq.reshape(n_sets, width)
        for s in range(n_sets):
            for col in range(width):
                by_column[col, s] = _COST_OF_FREQ[flat[s, col]]
        moved = _argmin_rows(_costs_by_column(starts, columns, counts, by_column))
        if (moved == sets).all():
            break
        sets = moved
        measure, freq = _stream_measure(starts, columns, counts, width, sets, n_sets)
        if measure >= best_bytes:
            break
        best, best_bytes = sets, measure
    return best


@njit(cache=True, nogil=True)
def _propose_compiled(starts, columns, counts, width, sets, n_sets, max_sets, sample):
    """propose() of Items with at least two items; sample: its evenly spaced sample (numpy's
    linspace, made by the caller). Returns (sets, set count, changed). The same arithmetic,
    with the keys of a (sets, count) pair counted once: a Lloyd round that moves nothing left
    the keys the next split reads, and those of every item when the sample is all of them
    (images of up to SAMPLE items)."""
    m = starts.size - 1
    k = n_sets
    proposal = sets
    if n_sets < max_sets:
        if sample.size == m:  # (linspace's sample of every item is every item)
            sample_starts, sample_columns, sample_counts = starts, columns, counts
            symbols = np.zeros(m, np.int64)
            for i in range(m):
                for e in range(starts[i], starts[i + 1]):
                    symbols[i] += counts[e]
        else:
            sample_starts, sample_columns, sample_counts, symbols = _rows(starts, columns, counts, sample)
        symbols = np.maximum(symbols, 1)
        part = (sample_starts, sample_columns, sample_counts)
        cur = sets[sample].copy()
        keys = np.zeros((0, 0), np.int64)
        fresh = False  # keys are those of the sample under the tables of (cur, k)
        while k < max_sets:
            if not fresh:
                keys = _costs_by_column(*part, _cost_columns(*part, width, cur, k))
                fresh = True
            own = np.empty(cur.size, np.int64)
            load = np.zeros(k, np.float64)
            for i in range(cur.size):
                own[i] = keys[i, cur[i]]
                load[cur[i]] += np.float64(own[i])  # np.bincount's order
            split = np.argmax(load)
            members = np.flatnonzero(cur == split)
            rate = own[members] / symbols[members]
            busy = members[rate > _median(rate)]
            if busy.size == 0:
                break
            cur[busy] = k
            k += 1
            fresh = False
            for _ in range(LLOYD_ROUNDS):
                keys = _costs_by_column(*part, _cost_columns(*part, width, cur, k))
                best = _argmin_rows(keys)
                if (best == cur).all():
                    fresh = True
                    break
                cur = best
        if k > n_sets:
            # every item under the sample's tables
            if fresh and sample.size == m:
                proposal = _argmin_rows(keys)
            else:
                columns_cost = _cost_columns(sample_starts, sample_columns, sample_counts, width, cur, k)
                proposal = _argmin_rows(_costs_by_column(starts, columns, counts, columns_cost))
    proposal = _refine_compiled(starts, columns, counts, width, proposal, k)
    if k == n_sets and (proposal == sets).all():
        return sets, n_sets, False
    used = np.zeros(k, np.bool_)
    for i in range(proposal.size):
        used[proposal[i]] = True
    renumber = np.zeros(k, np.int64)
    n_used = 0
    for s in range(k):
        if used[s]:
            renumber[s] = n_used
            n_used += 1
    out = np.empty(proposal.size, np.int64)
    for i in range(proposal.size):
        out[i] = renumber[proposal[i]]
    return out, n_used, True


def propose_compiled(items: Items, sets: np.ndarray, n_sets: int, max_sets: int) -> tuple[np.ndarray, int]:
    """propose(items, sets, n_sets, max_sets) in one compiled call: the same sets."""
    m = items.starts.size - 1
    if m < 2:
        return sets, n_sets
    sample = np.unique(np.linspace(0, m - 1, min(m, SAMPLE)).astype(np.int64))
    # The costs kernel runs on numba's threads: setting them up here starts the threading
    # layer, which a cached caller of a parallel kernel does not start when it loads.
    numba.get_num_threads()
    proposal, n_proposed, changed = _propose_compiled(items.starts, items.columns, items.counts, np.int64(items.width),
                                                      np.ascontiguousarray(sets, np.int64), np.int64(n_sets),
                                                      np.int64(max_sets), sample)
    return (proposal, int(n_proposed)) if changed else (sets, n_sets)


# The kernels call frequencies' kernels and read format_v2's constants: see prepkit.jitcache.
guard_disk_cache(globals(), (f2, frequencies))
