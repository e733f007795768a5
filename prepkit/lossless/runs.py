"""Runs tiles (bitstream v2, A2 modes 3 to 6): the numba CPU encoder and decoder, and the
choice of which tiles become runs tiles, shared by both encoders.

A runs tile is a palette and its index plane as rows of runs; each row's run boundaries are
coded against the boundaries of the row above (as CCITT group 4 fax coding does for two
colours), and each run's palette index as its rank among a few candidates taken from the row
above and the run before. Segmentation masks and flat renders have about 30 pixels per run,
so a tile decodes about a tenth as many symbols as its pixels, each run a fill. In mode 4 a
row equal to the row above, with the rows after it that equal it too, is two symbols and a
copy (a repeat). In mode 5 a boundary whose run takes the first label in the rank order (nine
in ten on masks) is one symbol, not two. In mode 6 the palette is symbols at the head of the
lane (each colour's differences from the one before) instead of raw bytes. One rANS lane:
the next symbol's table depends on the symbol before, so there is nothing to interleave.
reference_v2.runs_symbols and runs_decode are the plain versions these match.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

from prepkit.jitcache import guard_disk_cache
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import frequencies, memops
from prepkit.lossless import plan as plan_mod
from prepkit.lossless.cpu import load64, popcount64

NO_LABEL = -1  # an absent candidate, or no run before a row's first
# What a decoder reads (and never takes) where a payload has no 16-bit words left.
NO_WORDS = np.zeros(1, np.uint16)
# decode_tile's maps: colour_of (256 bytes), index_of (256), then the palette (256 colours of
# up to 4 bytes).
PALETTE_AT = 512
MAPS_BYTES = PALETTE_AT + 4 * 256


def table_set(freq: np.ndarray, tables_per_set: int) -> np.ndarray:
    """The runs tiles' tables (f2.RUN_CONTEXTS, contexts RUN_CTX_*) as whole sets of
    tables_per_set tables (format_v2.set_tables, format_v2.runs_sets): one set of eight with
    plane contexts, else two of four, empty tables after them. Both encoders append them to the
    stream's tables; a runs tile names the first set."""
    out = np.zeros((f2.runs_sets(tables_per_set) * tables_per_set, 256), freq.dtype)
    out[: f2.RUN_CONTEXTS] = freq
    return out


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _rank(v, c0, c1, c2, left):
    """Rank of index v in the order of reference_v2.label_order: the distinct candidates
    c0, c1, c2 (NO_LABEL: absent), then every index ascending, each once, none equal to left."""
    k = 0
    if c0 >= 0 and c0 != left:
        if v == c0:
            return 0
        k = 1
    if c1 >= 0 and c1 != left and c1 != c0:
        if v == c1:
            return k
        k += 1
    if c2 >= 0 and c2 != left and c2 != c0 and c2 != c1:
        if v == c2:
            return k
        k += 1
    # v is none of them: k plus the indices below v that are not left or a candidate.
    below = np.int64(0 <= left < v) + np.int64(0 <= c0 < v and c0 != left)
    below += np.int64(0 <= c1 < v and c1 != left and c1 != c0)
    below += np.int64(0 <= c2 < v and c2 != left and c2 != c0 and c2 != c1)
    return k + v - below


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _label(rank, c0, c1, c2, left, n_colours):
    """The index of a rank (the inverse of _rank), NO_LABEL when the rank is past the order."""
    k = 0
    if c0 >= 0 and c0 != left:
        if rank == 0:
            return c0
        k = 1
    if c1 >= 0 and c1 != left and c1 != c0:
        if rank == k:
            return c1
        k += 1
    if c2 >= 0 and c2 != left and c2 != c0 and c2 != c1:
        if rank == k:
            return c2
        k += 1
    # The (rank - k)-th index that is none of them: the least fixed point of
    # q = rank - k + (how many of them are at or below q). Each pass that moves q counts one
    # more of the four, so four passes reach it (five are run). A loop over the indices took
    # O(P) steps a label, which made runs tiles of many colours slow to decode.
    q = rank - k
    for _ in range(5):
        q = rank - k + _excluded_upto(q, c0, c1, c2, left)
    return q if q < n_colours else NO_LABEL


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _excluded_upto(q, c0, c1, c2, left):
    """How many distinct ones of left, c0, c1, c2 (NO_LABEL: absent) are at most q."""
    n = np.int64(0 <= left <= q) + np.int64(0 <= c0 <= q and c0 != left)
    n += np.int64(0 <= c1 <= q and c1 != left and c1 != c0)
    n += np.int64(0 <= c2 <= q and c2 != left and c2 != c0 and c2 != c1)
    return n


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def same_row(flat, row, up, n):
    """Whether flat[row : row + n] equals flat[up : up + n] (unsigned offsets: a loop LLVM
    vectorises). Most rows of a mask or a flat render equal the row above: the encoder's
    one-channel tile analysis and run symbols reuse what they found for that row."""
    differ = np.uint8(0)  # (uint8 arrays: the OR stays in bytes, 32 per vector step)
    for x in range(np.uint64(n)):
        differ |= flat[np.uint64(row) + x] ^ flat[np.uint64(up) + x]
    return differ == 0


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def boundaries(flat, row, tw):
    """The run boundaries of the row at flat[row : row + tw] (tw <= 64) as the bits of one
    word: bit x set where pixel x differs from pixel x - 1. The comparisons go into the word
    in a loop LLVM vectorises (a branch per pixel, mispredicted at every boundary, took 23 ns
    per mask row against 7)."""
    differ = np.uint64(0)
    for x in range(np.uint64(1), np.uint64(tw)):
        differ |= np.uint64(flat[np.uint64(row) + x] != flat[np.uint64(row) + x - np.uint64(1)]) << x
    return differ


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def same_row64(flat, row, up):
    """same_row of 64 bytes of a uint8 array, eight at a time: 5.3 ns a mask tile's row
    against 8.7 for same_row's byte loop (load64: one load of each side per eight bytes)."""
    differ = np.uint64(0)
    for k in range(8):
        differ |= np.uint64(load64(flat, row + 8 * k)) ^ np.uint64(load64(flat, up + 8 * k))
    return differ == np.uint64(0)


@njit(nogil=True, cache=True, boundscheck=False)
def plane_rows(flat, base, stride, th, tw, words):
    """The row words of a plane whose row y starts at flat[base + y * stride] (th, tw <= 64):
    words[y] the boundaries of row y (boundaries()), and returned, a word with bit y set where
    row y equals row y - 1 (such a row's boundaries are copied, not compared again).
    tile_symbols and symbols_floor work from these."""
    equal = np.uint64(0)
    for y in range(th):
        row = base + y * stride
        if y > 0 and same_row(flat, row, row - stride, tw):
            equal |= np.uint64(1) << np.uint64(y)
            words[y] = words[y - 1]
        else:
            words[y] = boundaries(flat, row, tw)
    return equal


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _is_equal(equal, y):
    """Whether bit y of a plane_rows word is set: row y equals the row above."""
    return (equal >> np.uint64(y)) & np.uint64(1) != np.uint64(0)


@njit(nogil=True, cache=True, boundscheck=False)
def symbols_floor(words, equal, th, repeats, same):
    """The fewest run symbols a plane (its plane_rows words) can code to: each row a label and
    an END, each boundary at least a run symbol and a label (with `same`, A2 mode 5, at least
    the run symbol); with `repeats` (modes 4 and 5), none for a row equal to the row above.
    A noise-like tile is out on this count, before its symbols."""
    per_boundary = 1 if same else 2
    total = 0
    for y in range(th):
        if repeats and _is_equal(equal, y):
            continue
        total += 2 + per_boundary * popcount64(words[y])
    return total


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _label_at(values, labels, at):
    """The palette index of the pixel at values[at] (labels: value -> index)."""
    return np.int64(labels[values[np.uint64(at)]])


@njit(nogil=True, cache=True, boundscheck=False)
def tile_symbols(values, base, stride, labels, th, tw, words, equal, syms, ctxs, limit, repeats, same):
    """The run symbols of a tile's index plane into syms, their contexts into ctxs (A2 mode 5
    with `repeats` and `same`, mode 4 with `repeats` alone, else mode 3; the choices of
    reference_v2.runs_symbols); returns their count, or a count above `limit` as soon as a row
    ends past it (the tile cannot be a runs tile: MIN_PIXELS_PER_SYMBOL; syms and ctxs hold
    limit + 4 tw).

    The plane is read where it lies: row y at values[base + y * stride], each value's index
    labels[value] (an index plane with identity labels, or a one-channel tile of the image
    with its grey values' indices: indices keep the values' order, so boundaries and equal
    rows are the same). words, equal: the plane's plane_rows. The boundaries come from the
    words' set bits, and those of the row above still ahead of a run from a word masked at
    the run's start: no list to walk, and a branch per run instead of per pixel."""
    n = 0
    y = -1
    while y + 1 < th:
        y += 1
        row = base + y * stride
        up = row - stride
        if repeats and _is_equal(equal, y):
            # The row above again, and as many rows after it as equal it: one repeat. The
            # boundaries above stay those of the repeated row.
            more = 0
            if y + 1 < th:
                more = min(np.int64(trailing_zeros(~(equal >> np.uint64(y + 1)))), th - 1 - y)
            syms[n] = f2.RUN_REPEAT
            ctxs[n] = f2.RUN_CTX_ROW
            syms[n + 1] = more
            ctxs[n + 1] = f2.RUN_CTX_LENGTH
            n += 2
            y += more
            if n > limit:
                return n
            continue
        if _is_equal(equal, y):  # (mode 3: without repeats)
            # The row above again (most rows of a mask): its label, then at each of its
            # boundaries a zero offset and the label above (rank 0: the run's left neighbour
            # differs from it), then END with no boundary above to its right. The loop below
            # writes exactly these, a branch per symbol slower.
            syms[n] = 0
            ctxs[n] = f2.RUN_CTX_LABEL
            n += 1
            for _ in range(popcount64(words[y - 1])):
                syms[n] = f2.RUN_NEAR + f2.RUN_REACH
                ctxs[n] = f2.RUN_CTX_NEAR
                syms[n + 1] = 0
                ctxs[n + 1] = f2.RUN_CTX_LABEL
                n += 2
            syms[n] = f2.RUN_END
            ctxs[n] = f2.RUN_CTX_FAR
            n += 1
            if n > limit:
                return n
            continue
        c0 = _label_at(values, labels, up) if y > 0 else NO_LABEL
        syms[n] = _rank(_label_at(values, labels, row), c0, NO_LABEL, NO_LABEL, NO_LABEL)
        ctxs[n] = f2.RUN_CTX_ROW if repeats and y > 0 else f2.RUN_CTX_LABEL
        n += 1
        starts = words[y]  # boundaries of this row not yet coded
        ahead = words[y - 1] if y > 0 else np.uint64(0)  # boundaries above not yet passed
        a0 = 0
        while True:
            a1 = tw
            if starts:
                a1 = np.int64(trailing_zeros(starts))
                starts &= starts - np.uint64(1)
            # The boundaries above at or left of the run's start are behind it (a0 <= 63:
            # the shift stays inside the word).
            ahead &= ~((np.uint64(2) << np.uint64(a0)) - np.uint64(1))
            while True:
                near = ahead != np.uint64(0)
                b1 = np.int64(trailing_zeros(ahead)) if near else 0
                ctx = f2.RUN_CTX_NEAR if near else f2.RUN_CTX_FAR
                run_at = n  # (mode 5 adds RUN_OTHER to it when a label symbol follows)
                ctxs[n] = ctx
                if a1 == tw:
                    syms[n] = f2.RUN_END
                elif near and abs(a1 - b1) <= f2.RUN_REACH:
                    syms[n] = f2.RUN_NEAR + f2.RUN_REACH + a1 - b1
                elif near and b1 < a1:
                    syms[n] = f2.RUN_PASS
                    n += 1
                    ahead &= ahead - np.uint64(1)
                    continue
                else:
                    syms[n] = f2.RUN_LENGTH
                    n += 1
                    syms[n] = a1 - a0 - 1
                    ctxs[n] = f2.RUN_CTX_LENGTH
                break
            n += 1
            if a1 == tw:
                break
            c0 = _label_at(values, labels, up + a1) if y > 0 else NO_LABEL
            c1 = _label_at(values, labels, up + min(a1 + 1, tw - 1)) if y > 0 else NO_LABEL
            c2 = _label_at(values, labels, row + a0 - 1) if a0 > 0 else NO_LABEL
            rank = _rank(_label_at(values, labels, row + a1), c0, c1, c2, _label_at(values, labels, row + a1 - 1))
            a0 = a1
            if same:
                if rank == 0:  # implied by the run symbol alone
                    continue
                syms[run_at] += f2.RUN_OTHER
            syms[n] = rank
            ctxs[n] = f2.RUN_CTX_LABEL
            n += 1
        if n > limit:
            return n
    return n


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _symbol(flat, tset, ctx, x, words, last, w):
    """One rANS symbol (A6) with table tset + ctx: (symbol, new state, words read).

    Without branches: whether a word is needed depends on the data (a mispredicted branch per
    few symbols, and the runs tiles are one lane: nothing else to do meanwhile), so the word
    at min(w, last) is always loaded and taken or not by a select. words holds at least one
    word (last = its last index); past the tile's words the caller refuses the tile."""
    e = np.int64(flat[np.uint64((tset + ctx) * 4096 + (x & 4095))])
    x = ((e >> 8) & 4095) * (x >> f2.PROB_BITS) + (x >> f2.PROB_BITS) + (e >> 20)
    need = x < f2.STATE_LOW
    word = np.int64(words[min(w, last)])
    x = (x << 16) | word if need else x
    return e & 255, x, w + np.int64(need)


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _fill(plane, at, v):
    """plane[at : at + 64] = v: a run's fill as one fixed-size store (runs are decoded left
    to right, so the bytes past the run are overwritten by the runs after it; the plane has
    64 bytes of slack after its last row)."""
    memops.fill(plane, at, 64, v)


# Without reference counts, as the CPU decoder's other kernels (the note above cpu_v2._rans_rounds).
@njit(nogil=True, cache=True, boundscheck=False, _nrt=False)
def decode_tile(src, start, end, th, tw, c, base, tshift, flat, empty, plane, maps, above, starts):
    """Decode runs tile src[start:end] (A2 mode 3, 4 with row repeats, 5 with implied labels
    too, or 6 with a coded palette; validated by format_v2.read_stream or hostplan) into plane
    (uint8, row-major th x tw, then at least 64 bytes of slack): the palette colours
    themselves when C = 1, else the palette indices, the palette at maps[PALETTE_AT:];
    return an error code. base: the stream's first table row; tshift:
    log2 of the tables per set (3 with plane contexts, 2); flat: the packed decode tables
    (cpu_v2.decode_table, flattened); empty[t]: 1 for an empty table; maps: uint8 scratch of
    MAPS_BYTES entries; above, starts: int64 scratch of 64 entries.

    The palette's colours must increase (A2), so with one channel the tile decodes in colour
    space: maps[:256] turns an index into its colour, maps[256:] a colour back into its index
    (for the labels' candidates), and the plane is the tile's pixels. Every symbol is checked
    where it is used: a run symbol past RUN_SYMBOLS (mode 5: RUN_SYMBOLS_SAME, and END or
    PASS with RUN_OTHER), a pass or a boundary move without a boundary above, a boundary
    outside (a0, tw), a label rank past the order, a repeat past the last row. The loop ends:
    each symbol moves a0 or j right, or ends the row, or repeats at least one row."""
    same = src[start] == f2.TILE_RUNS_SAME or src[start] == f2.TILE_RUNS_PALETTE
    repeats = same or src[start] == f2.TILE_RUNS_REPEAT
    tset = base + (np.int64(src[start + 1]) << tshift)
    if empty[tset + f2.RUN_CTX_LABEL]:  # every tile decodes a label first
        return plan_mod.ERR_TABLE
    # A row's first symbol: mode 4's own context after row 0 (every row of mode 3).
    row_ctx = f2.RUN_CTX_ROW if repeats else f2.RUN_CTX_LABEL
    if th > 1 and empty[tset + row_ctx]:
        return plan_mod.ERR_TABLE
    n_colours = np.int64(src[start + 2]) + 1
    coded_palette = src[start] == f2.TILE_RUNS_PALETTE
    # The palette at maps[PALETTE_AT:] (colour by colour, c bytes each): decoded from the lane
    # in mode 6, copied from the payload in modes 3 to 5.
    palette = maps[PALETTE_AT:]
    pos = start + f2.RUNS_HEADER
    if not coded_palette:
        memops.copy(palette, 0, src, pos, n_colours * c)
        pos += n_colours * c
    x = np.int64(src[pos]) | (np.int64(src[pos + 1]) << 8) | (np.int64(src[pos + 2]) << 16) | (
        np.int64(src[pos + 3]) << 24)
    if x < f2.STATE_LOW:
        return plan_mod.ERR_STATE
    pos += 4
    n_words = (end - pos) >> 1
    words = src[pos : pos + 2 * n_words].view(np.uint16) if n_words > 0 else NO_WORDS
    last = max(n_words - 1, 0)
    w = 0
    if coded_palette:
        for k in range(min(c, 3)):
            if empty[tset + f2.RUN_CTX_PALETTE + k]:
                return plan_mod.ERR_TABLE
        for q in range(n_colours):
            d0 = np.int64(0)
            for k in range(c):
                v, x, w = _symbol(flat, tset, f2.RUN_CTX_PALETTE + min(k, 2), x, words, last, w)
                if k == 0:
                    d0 = v
                    d = v
                else:
                    d = ((v >> 1) ^ -(v & 1)) + (d0 if k < 3 else 0)
                before = np.int64(palette[(q - 1) * c + k]) if q > 0 else 0
                palette[q * c + k] = (before + d) & 255
        if w > n_words:
            return plan_mod.ERR_WORDS
    for q in range(1, n_colours):  # strictly increasing packed colours
        k = 0
        while k < c - 1 and palette[q * c + k] == palette[(q - 1) * c + k]:
            k += 1
        if palette[q * c + k] <= palette[(q - 1) * c + k]:
            return plan_mod.ERR_RUNS
    colour_of = maps[:256]
    index_of = maps[256:PALETTE_AT]
    # Only the entries this tile reads: labels are below n_colours, and the plane holds only
    # what the fills wrote (colour_of of a label), every row being filled before it is read.
    for q in range(n_colours):
        v = palette[q] if c == 1 else q
        colour_of[q] = v
        index_of[v] = q
    n_above = 0
    y = -1
    while y + 1 < th:
        y += 1
        row = y * tw
        up = row - tw
        c0 = np.int64(index_of[plane[up]]) if y > 0 else NO_LABEL
        rank, x, w = _symbol(flat, tset, row_ctx if y > 0 else f2.RUN_CTX_LABEL, x, words, last, w)
        if repeats and y > 0 and rank == f2.RUN_REPEAT:
            if empty[tset + f2.RUN_CTX_LENGTH]:
                return plan_mod.ERR_TABLE
            more, x, w = _symbol(flat, tset, f2.RUN_CTX_LENGTH, x, words, last, w)
            if y + more >= th:
                return plan_mod.ERR_RUNS
            for k in range(more + 1):  # (the boundaries above stay those of the repeated row)
                memops.copy(plane, row + k * tw, plane, up, tw)
            y += more
            if w > n_words:
                return plan_mod.ERR_WORDS
            continue
        label = _label(rank, c0, NO_LABEL, NO_LABEL, NO_LABEL, n_colours)
        if label < 0:
            return plan_mod.ERR_RUNS
        a0 = 0
        j = 0
        n_starts = 0
        while True:
            _fill(plane, row + a0, colour_of[label])
            while j < n_above and above[j] <= a0:
                j += 1
            near = j < n_above
            ctx = f2.RUN_CTX_NEAR if near else f2.RUN_CTX_FAR
            if empty[tset + ctx]:
                return plan_mod.ERR_TABLE
            m, x, w = _symbol(flat, tset, ctx, x, words, last, w)
            if m == f2.RUN_END:
                break
            explicit = not same  # whether a label symbol follows the boundary
            if same and m >= f2.RUN_OTHER:
                m -= f2.RUN_OTHER
                explicit = True
                if m == f2.RUN_END or m == f2.RUN_PASS:
                    return plan_mod.ERR_RUNS
            if m == f2.RUN_LENGTH:
                if empty[tset + f2.RUN_CTX_LENGTH]:
                    return plan_mod.ERR_TABLE
                length, x, w = _symbol(flat, tset, f2.RUN_CTX_LENGTH, x, words, last, w)
                a1 = a0 + 1 + length
            elif not near or m >= f2.RUN_SYMBOLS:
                return plan_mod.ERR_RUNS
            elif m == f2.RUN_PASS:
                j += 1
                continue
            else:
                a1 = above[j] + m - (f2.RUN_NEAR + f2.RUN_REACH)
            if a1 <= a0 or a1 >= tw:
                return plan_mod.ERR_RUNS
            c0 = np.int64(index_of[plane[up + a1]]) if y > 0 else NO_LABEL
            c1 = np.int64(index_of[plane[up + min(a1 + 1, tw - 1)]]) if y > 0 else NO_LABEL
            c2 = np.int64(index_of[plane[row + a0 - 1]]) if a0 > 0 else NO_LABEL
            rank = 0
            if explicit:
                rank, x, w = _symbol(flat, tset, f2.RUN_CTX_LABEL, x, words, last, w)
            label = _label(rank, c0, c1, c2, label, n_colours)
            if label < 0:
                return plan_mod.ERR_RUNS
            starts[n_starts] = a1
            n_starts += 1
            a0 = a1
        if w > n_words:
            return plan_mod.ERR_WORDS
        above, starts = starts, above  # this row's boundaries are the next row's above
        n_above = n_starts
    if w != n_words:
        return plan_mod.ERR_WORDS
    if x != f2.STATE_LOW:
        return plan_mod.ERR_STATE
    return 0


# The encoder makes a runs tile only of a tile with at least this many pixels per run symbol:
# one thread decodes a runs tile symbol after symbol (a GPU warp's other 31 lanes wait), so
# a tile of short runs, noise-like, would be smaller as runs and decode many times slower.
# Segmentation masks have about 17 pixels per symbol (docs/BENCHMARKS.md "Runs tiles"); the 12
# evaluation masks' tiles of two colours or more 13.7 in mode 3 and 21.3 with row repeats
# ("Row repeats in runs tiles").
MIN_PIXELS_PER_SYMBOL = 4
# The encoders take a candidate with at least this many pixels per run symbol as a runs tile
# before any other choice (`sure`), and skip the coded and palette choices, symbols and
# payloads of every sure tile: 8 for colour tiles, 5 for one-channel ones. At 8 (stop 41)
# 746 of the evaluation masks' 849 candidates were sure, and 5 of the 22 masks had a tile
# weighed against its coded payload. With 5 for one channel (stop 47) every candidate of the
# 22 masks is sure and the masks are 0.79% smaller (93,589 -> 92,846 bytes; a grey medical
# scan -0.04%): weighed one by one, the few tiles below 8 kept coded tables alive that cost
# more than their runs symbols saved. A mask then has no coded tile at all and the encoder's
# short path (mask_encoder) writes it. On colour images 5 was mixed (evaluation photographs
# +0.12%, one of them +1.1%; rendered -0.02%), so they keep 8 (docs/BENCHMARKS.md "Masks in
# one compiled call").
SURE_PIXELS_PER_SYMBOL = 8
SURE_PIXELS_PER_SYMBOL_GREY = 5


@njit(nogil=True, cache=True)
def mode_of(n_colours):
    """The mode the encoders give a runs tile of n_colours colours: with row repeats, implied
    labels and a coded palette (A2 mode 6) where it can be, else mode 3. Compiled, so that
    both encoders share one test."""
    return f2.TILE_RUNS_PALETTE if n_colours <= f2.REPEAT_MAX_COLOURS else f2.TILE_RUNS


@njit(nogil=True, cache=True)
def written_mode(n_colours, coded):
    """The mode of a runs tile the encoders write: mode_of, or mode 5 (raw palette) where the
    image's palettes are not coded (_choose)."""
    mode = mode_of(n_colours)
    return f2.TILE_RUNS_SAME if mode == f2.TILE_RUNS_PALETTE and not coded else mode


@njit(nogil=True, cache=True)
def palette_head(n_colours, c):
    """How many of the encoders' runs symbols of a tile are its palette's (mode 6: P * C; 0 in
    mode 3). The limits on run symbols per pixel (MIN_PIXELS_PER_SYMBOL, sure) leave them out:
    they are a fixed cost, not a sign of noise-like runs."""
    return n_colours * c if mode_of(n_colours) == f2.TILE_RUNS_PALETTE else 0


@njit(nogil=True, cache=True)
def fixed_bytes(n_colours, c):
    """The bytes of the encoders' runs payload (mode_of) besides its words: the header, the
    palette where it is raw (mode 3), the lane state."""
    raw = n_colours * c if mode_of(n_colours) == f2.TILE_RUNS else 0
    return f2.RUNS_HEADER + raw + 4


@njit(nogil=True, cache=True)
def heads_and_fixed(n_colours, c):
    """palette_head and fixed_bytes of each candidate of n_colours (an array)."""
    heads = np.empty(n_colours.shape[0], np.int64)
    fixed = np.empty(n_colours.shape[0], np.int64)
    for i in range(n_colours.shape[0]):
        heads[i] = palette_head(n_colours[i], c)
        fixed[i] = fixed_bytes(n_colours[i], c)
    return heads, fixed


@njit(nogil=True, cache=True)
def sure(n_symbols, pixels, channels):
    """Whether candidates (run symbol counts, pixel counts: integers or arrays) of an image of
    this many channels are sure to become runs tiles. Compiled, so that the encoders' kernels
    and Python share one test."""
    per_symbol = SURE_PIXELS_PER_SYMBOL_GREY if channels == 1 else SURE_PIXELS_PER_SYMBOL
    return n_symbols * per_symbol <= pixels


@njit(nogil=True, cache=True)
def _chosen_counts(syms, ctxs, rows, starts, n_symbols, chosen):
    """The (RUN_CONTEXTS, 256) counts of (context, symbol) over the chosen tiles' symbols
    (starts[i] .. n_symbols[i] - 1)."""
    out = np.zeros((f2.RUN_CONTEXTS, 256), np.int64)
    for i in range(rows.shape[0]):
        if chosen[i]:
            r = rows[i]
            for j in range(starts[i], n_symbols[i]):
                out[ctxs[r, j], syms[r, j]] += 1
    return out


# _estimates' weights: a symbol's cost (1/16 bits) plus this when its table cannot code it;
# far above any tile's total cost (at most 4096 x 4 symbols of under 2^12 each).
UNCODABLE = np.int64(1) << np.int64(40)


@njit(nogil=True, cache=True, boundscheck=False)
def _estimates(syms, ctxs, rows, starts, n_symbols, chosen, weights, fixed):
    """Each chosen tile's estimated payload bytes under the tables (fixed bytes plus its
    symbols' costs, in 1/16 bits, over 128) and whether the tables code every symbol it has;
    (0, False) for the others. weights: _weights of the tables, flat: one load per symbol
    gives both its cost and whether it is codable."""
    n = rows.shape[0]
    estimate = np.zeros(n, np.int64)
    codable = np.zeros(n, np.bool_)
    for i in range(n):
        if not chosen[i]:
            continue
        r = rows[i]
        total = np.int64(0)
        for j in range(starts[i], n_symbols[i]):
            total += weights[(np.int64(ctxs[r, j]) << 8) | np.int64(syms[r, j])]
        estimate[i] = fixed[i] + (total & (UNCODABLE - 1)) // 128
        codable[i] = total < UNCODABLE
    return estimate, codable


@njit(nogil=True, cache=True, boundscheck=False)
def _tables_of(syms, ctxs, rows, starts, n_symbols, chosen, freq, weights):
    """The normalised tables (into freq) of the chosen tiles, and the weights _estimates
    reads (flat, (context, symbol)): each symbol's cost, plus UNCODABLE where its frequency
    is 0."""
    frequencies.normalize_rows_into(_chosen_counts(syms, ctxs, rows, starts, n_symbols, chosen), freq)
    for k in range(freq.shape[0]):
        for s in range(256):
            f = freq[k, s]
            weights[(k << 8) | s] = frequencies.COST_OF_FREQ[f] + (UNCODABLE if f == 0 else 0)


@njit(nogil=True, cache=True)
def _choose_once(syms, ctxs, rows, starts, n_symbols, run_counts, fixed, current, pixels, freq):
    """_choose's rule for one way of coding the palettes (symbols starts[i] .. n_symbols[i] - 1
    of candidate i, fixed[i] bytes besides them): (the chosen tiles, none when the set is not
    kept; the bytes they save net of the runs tables)."""
    weights = np.empty(freq.size, np.int64)
    chosen = run_counts * MIN_PIXELS_PER_SYMBOL <= pixels
    # Two rounds, then the final tables and estimates. A round that keeps every tile leaves
    # the tables, and so every later round, as they are: the passes stop there (most images).
    for round_ in range(3):
        if not chosen.any():
            return chosen, np.int64(0)
        _tables_of(syms, ctxs, rows, starts, n_symbols, chosen, freq, weights)
        estimate, codable = _estimates(syms, ctxs, rows, starts, n_symbols, chosen, weights, fixed)
        if round_ == 2:
            break
        kept = codable & (estimate < current) & chosen
        if (kept == chosen).all():
            break
        chosen = kept
    saved = np.int64(0)
    for i in range(chosen.shape[0]):
        if chosen[i]:
            saved += current[i] - estimate[i]
    packed = np.empty(freq.shape[0] * frequencies.MAX_TABLE_BYTES, np.uint8)
    saved -= frequencies.pack_into(freq, packed)
    if saved <= 0:
        chosen[:] = False
    return chosen, saved


@njit(nogil=True, cache=True)
def _choose(syms, ctxs, rows, n_symbols, heads, fixed, current, pixels, freq):
    """choose() in one compiled call (the choice is a few dozen steps, each a call from
    Python costing more than its work on a small image): (the chosen tiles, whether their
    palettes are coded), the tables in freq; no tile chosen when the set is not kept. The
    palettes are coded (mode 6) when that saves more than raw palettes (mode 5: the symbols
    after the heads, the heads' bytes in the payload) do: a small image's few palette symbols
    can cost less raw than their tables."""
    run_counts = n_symbols - heads
    chosen, saved = _choose_once(syms, ctxs, rows, np.zeros_like(heads), n_symbols, run_counts, fixed, current, pixels,
                                 freq)
    if not heads.any():
        return chosen, False
    raw_freq = np.zeros_like(freq)
    raw_chosen, raw_saved = _choose_once(syms, ctxs, rows, heads, n_symbols, run_counts, fixed + heads, current,
                                         pixels, raw_freq)
    if saved > raw_saved:
        return chosen, True
    freq[:] = raw_freq
    return raw_chosen, False


def choose(syms: np.ndarray, ctxs: np.ndarray, rows: np.ndarray, n_symbols: np.ndarray, fixed: np.ndarray,
           current: np.ndarray, pixels: np.ndarray, heads: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """Which candidate tiles become runs tiles, the runs tables' frequencies (RUN_CONTEXTS, 256)
    and whether the palettes are coded (mode 6; else mode 5 raw, the heads left out of the
    symbols); None when none should. syms, ctxs: uint8 (any, cap), candidate k's symbols and their
    contexts in syms[rows[k], :n_symbols[k]], the palette's first in mode 6 (needed only where
    (n_symbols[k] - heads[k]) * MIN_PIXELS_PER_SYMBOL <= pixels[k], the tiles that may be
    chosen; cap at least pixels / MIN_PIXELS_PER_SYMBOL + heads); n_symbols: the symbol count
    (or any count above that bound); fixed: the payload bytes besides the words; current: the
    payload length otherwise; pixels: the pixel count; heads: how many of the symbols are the
    palette's (palette_head; none if not given).

    Shared by both encoders (integers only: the same choice in both). Two rounds: tables from
    every candidate, then from the tiles whose estimate beat their current length under them;
    a tile stays when its estimate under the final tables is smaller and those tables can code
    it; the set is kept only when the tiles save more than its tables cost. The work is per
    symbol, not per (context, symbol) of every tile: a mask's tiles have about 200 symbols.
    """
    freq = np.zeros((f2.RUN_CONTEXTS, 256), np.int64)
    if heads is None:
        heads = np.zeros_like(n_symbols)
    rows, n_symbols, heads, fixed, current, pixels = (np.ascontiguousarray(a, np.int64)
                                                      for a in (rows, n_symbols, heads, fixed, current, pixels))
    chosen, coded = _choose(syms, ctxs, rows, n_symbols, heads, fixed, current, pixels, freq)
    if not chosen.any():
        return None
    return chosen, freq.astype(np.int32), bool(coded)


# Last, once every cached function above exists: the constants compiled into them.
guard_disk_cache(globals(), (f2, frequencies, memops, plan_mod))
