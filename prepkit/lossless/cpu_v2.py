"""numba CPU kernels for bitstream version 2: the encoder and the decoder, parallel over tiles.

The same steps as reference_v2.py, written for speed and bit-identical to it. Safety:
plan.build ran format_v2.read_stream on every stream, so tile modes, lane counts, channel
bytes and lengths are consistent before a kernel runs; inside a tile the kernel checks the
lane states, bounds every 16-bit word read by the payload end, flags symbols decoded from
an empty table, and requires every state back at 2^16 with every word read.
"""

from __future__ import annotations

import math
import threading
from typing import NamedTuple

import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from prepkit.jitcache import guard_disk_cache
from prepkit.lossless import format as fmt
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import frequencies, med_simd, memops, prefix_simd, rans_avx2, runs, table_sets
from prepkit.lossless import plan as plan_mod
from prepkit.parallel import numba_threads

PROB_BITS = f2.PROB_BITS
STATE_LOW = f2.STATE_LOW
MAX_PLANE = max(fmt.TILE_SIZES) ** 2
MAX_VALUES = 4 * MAX_PLANE
MAX_LANES = 1 << f2.MAX_LANES_LOG2
_local = threading.local()
# Context (A4) of each context value u: CONTEXT_OF[wide, u], row 0 for streams without
# FLAG_WIDE_CONTEXT, row 1 with it.
CONTEXT_OF = np.array([f2.context_of_value(np.arange(256), wide) for wide in (False, True)], np.int64)
# The decoder's symbol buffer holds symbol i at SYM0 + i after SYM0 zeros (the context
# symbols before the start, A4), so every context read is a non-negative index.
SYM0 = f2.CONTEXT_HISTORY
WIDE_CONTEXT_OF = CONTEXT_OF[1].copy()
CONTEXT16 = CONTEXT_OF[:, :16].astype(np.uint8)  # the vector steps' shuffle tables (values >= 15: context 3)
# The encoder writes wide contexts for every image (format_v2.encoder_wide_context), so its
# context loops know one kind; the decoders read both.
assert all(f2.encoder_wide_context(c) for c in (1, 3, 4)), "the numba encoder writes wide contexts only"
_NO_WORDS = runs.NO_WORDS  # what _rans reads (and refuses) when a payload has no words left
# The most words a round takes (one per lane): the unchecked rounds of _rans and of the pair
# loop read up to this many past a tile's own words (_words_ahead).
TAIL_WORDS = MAX_LANES


# ----------------------------------------------------------------------------- shared pieces


# _choose tries the transforms of format_v2.ENCODER_COLOURS in its order: each one's planes
# come from the previous one's in place (_colour_next), and 3 shares planes 0 and 1 with 1.
assert f2.ENCODER_COLOURS == (0, 1, 3), "_colour_next makes 1 from 0 and 3 from 1"


@njit(nogil=True, cache=True, boundscheck=False)
def _colour_next(planes, th, tw, colour):
    """Planes of colour transform `colour` (1 or 3) in place from those of the one before it in
    format_v2.ENCODER_COLOURS (0 or 1): _choose tries the transforms in that order, and
    re-reading the image's interleaved pixels for each cost more than these whole-row steps."""
    for y in range(1, th + 1):
        r, g, b = planes[0, y, 1 : tw + 1], planes[1, y, 1 : tw + 1], planes[2, y, 1 : tw + 1]
        if colour == 1:  # from 0
            for x in range(tw):
                r[x] = (r[x] - g[x]) & 255
                b[x] = (b[x] - g[x]) & 255
        else:  # 3, from 1: planes 0 and 1 stay
            for x in range(tw):
                red = (r[x] + g[x]) & 255
                blue = (b[x] + g[x]) & 255
                b[x] = (blue - ((red + g[x]) >> 1)) & 255


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _colour_rows(image, y0, x0, th, tw, colour, planes, stride):
    """_colour_forward's planes 0-2 of a tile of `stride` channels (3 or 4, a constant at
    each call: the loads then vectorise)."""
    for y in range(th):
        src = image[y0 + y, x0 : x0 + tw].reshape(-1)
        p0 = planes[0, y + 1, 1 : tw + 1]
        p1 = planes[1, y + 1, 1 : tw + 1]
        p2 = planes[2, y + 1, 1 : tw + 1]
        if colour == 0:
            for x in range(tw):
                p0[x] = src[stride * x]
                p1[x] = src[stride * x + 1]
                p2[x] = src[stride * x + 2]
        else:  # 1 (blue less green) or 3 (blue less the mean of red and green)
            for x in range(tw):
                r = np.int32(src[stride * x])
                g = np.int32(src[stride * x + 1])
                b = np.int32(src[stride * x + 2])
                p0[x] = (r - g) & 255
                p1[x] = g
                p2[x] = (b - (g if colour == 1 else (r + g) >> 1)) & 255


@njit(nogil=True, cache=True, boundscheck=False)
def _colour_forward(image, y0, x0, th, tw, colour, planes):
    """Colour-transformed planes of one tile into planes[k, 1:th+1, 1:tw+1] (int32, 0..255),
    for the transforms the encoder tries (format_v2.ENCODER_COLOURS: 0, 1 or 3).

    Row 0 and column 0 of every plane stay 0, the value the predictors see outside the tile
    (A4), so the residual loops need no edge cases. Each row of pixels is read once and every
    plane written from it, in loops specialised on the channel count outside the rows (a pass
    per plane, then _colour_next's passes in place, took 2-3x as long, and so did a branch on
    the channel count inside the row loop).
    """
    c = image.shape[2]
    if c == 3:
        _colour_rows(image, y0, x0, th, tw, colour, planes, 3)
    elif c == 4:
        _colour_rows(image, y0, x0, th, tw, colour, planes, 4)
        for y in range(th):
            src = image[y0 + y, x0 : x0 + tw].reshape(-1)
            alpha = planes[3, y + 1, 1 : tw + 1]
            for x in range(tw):
                alpha[x] = src[4 * x + 3]
    else:
        for y in range(th):
            src = image[y0 + y, x0 : x0 + tw].reshape(-1)
            grey = planes[0, y + 1, 1 : tw + 1]
            for x in range(tw):
                grey[x] = src[x]


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _zigzag(r):
    s = r - 256 if r >= 128 else r
    return (s << 1) if s >= 0 else (-2 * s - 1)


# ----------------------------------------------------------------------------- encoder


# Residual r (0..255) -> symbol (its zig-zag code, A4), and the symbol's bit length: the
# encoder's cost model (A9). The hot loops compute both by arithmetic (_zigzag_of,
# _exponent_of_top), which tests compare with these tables; _constant_costs reads ZIGZAG_BITS.
ZIGZAG = np.array([_zigzag.py_func(r) for r in range(256)], np.int64)
ZIGZAG_BITS = np.array([int(v).bit_length() for v in ZIGZAG], np.int64)


# numba widens int32 arithmetic and comparisons with Python ints to int64; the casts to I32
# keep _predictor_costs and _residual_symbols in int32, eight lanes to an AVX2 register
# instead of four (costs: 2.2 instead of 3.6 ns per sample on the EPYC VM).
I32 = np.int32


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _med(left, up, upleft):
    """MED (reference_v2.med) of int32 neighbours: min(L, U) when UL >= max(L, U), max(L, U)
    when UL <= min(L, U), else the gradient L + U - UL; that is, the median of L, U and
    L + U - UL, computed so without branches (on photographs the branches mispredicted often
    enough to make the encoder's residual pass 4-5x slower) and in int32 (see I32)."""
    return max(min(left, up), min(max(left, up), I32(left + up - upleft)))


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _zigzag_i32(r):
    """ZIGZAG[r & 255] by arithmetic, in int32 (see I32): the residual's low byte read as a
    signed byte s, then 2s for s >= 0 and -2s - 1 below."""
    s = I32(I32(I32(I32(r) & I32(255)) ^ I32(128)) - I32(128))
    return I32(I32(s << I32(1)) ^ I32(s >> I32(31)))


@intrinsic
def _float_bits(typingctx, value):
    """The IEEE-754 bits of a float32 as an int32 (numba has no scalar view)."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


# _predictor_costs works on residuals moved to the top byte of an int32 (r << 24: the low
# byte read as signed is then the int32's sign and magnitude, with no masking). There the
# zig-zag code z sits at bits 23-30 (ZIGZAG_TOP), and OR-ing in bit 22 (ZERO_GUARD) makes
# the float exponent of z = 0 come out as that of z = 1/2 without changing any other, so the
# exponent less EXPONENT_BIAS is the bit length for every z (0 included), with no clamp: 8
# int32 operations per residual and predictor. (A table lookup per residual is a gather that
# keeps LLVM from vectorising; eight compares and seven adds took 3.3 ns per sample on the EPYC
# VM, the exponent of float(z) after masking, shifting and a clamp 1.9, this form 0.56 -> 0.33
# ns per pixel and predictor set on the Xeon VM.)
ZIGZAG_TOP = np.int32(-(1 << 23))  # 0xFF800000: the sign spread over bits 23-31
ZERO_GUARD = np.int32(1 << 22)
EXPONENT_BIAS = 127 + 22  # float exponent of 2^22 (the guard alone): bit length 0


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _exponent_of_top(t):
    """float exponent (biased, 0..255) of the zig-zag code of the residual t >> 24, with the
    guard bit: the bit length of the code plus EXPONENT_BIAS."""
    zz = I32(I32(t ^ I32(I32(t >> I32(31)) & ZIGZAG_TOP)) | ZERO_GUARD)
    return I32(_float_bits(np.float32(zz)) >> I32(23))


@njit(nogil=True, cache=True, boundscheck=False)
def _predictor_costs(padded, th, tw, costs):
    """reference_v2.bit_cost of one plane (padded as _colour_forward writes it) under each of
    the 5 predictors: twice the symbols' bit lengths over the plane's even rows. Branch-free,
    without table lookups (MED as the median of L, U and L + U - UL) and in int32, so the loop
    over a row runs in vector registers: 2.4x faster than one lookup per residual. Each
    residual is moved to the top byte (see ZIGZAG_TOP), and the bias of its bit length is taken
    off once per plane."""
    c0 = c1 = c2 = c3 = c4 = I32(0)
    top = I32(24)
    for y in range(1, th + 1, 2):
        cur = padded[y]
        prev = padded[y - 1]
        for x in range(1, tw + 1):
            v = cur[x]
            left = cur[x - 1]
            up = prev[x]
            upleft = prev[x - 1]
            med = _med(left, up, upleft)
            c0 = I32(c0 + _exponent_of_top(I32(v << top)))
            c1 = I32(c1 + _exponent_of_top(I32(I32(v - left) << top)))
            c2 = I32(c2 + _exponent_of_top(I32(I32(v - up) << top)))
            c3 = I32(c3 + _exponent_of_top(I32(I32(v - left - up + upleft) << top)))
            c4 = I32(c4 + _exponent_of_top(I32(I32(v - med) << top)))
    bias = EXPONENT_BIAS * ((th + 1) >> 1) * tw
    costs[0], costs[1], costs[2], costs[3], costs[4] = (2 * (c0 - bias), 2 * (c1 - bias), 2 * (c2 - bias),
                                                        2 * (c3 - bias), 2 * (c4 - bias))


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _best_predictor(costs, n_predictors):
    """The predictor below n_predictors with the smallest cost (the lowest number on ties)."""
    best_p = 0
    for p in range(1, n_predictors):
        if costs[p] < costs[best_p]:
            best_p = p
    return best_p


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _predictor_of(chb):
    """format_v2.channel_predictor: bits 2-3 of a rANS channel byte, plus 4 when bit 1 is set."""
    return ((chb >> 2) & 3) + ((chb >> 1) & 1) * 4


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _channel_byte(p, table_set):
    """format_v2.channel_byte: 1 | P<<2 | s<<4, or 3 | (P-4)<<2 | s<<4 for P >= 4."""
    if p >= 4:
        return 3 | ((p - 4) << 2) | (table_set << 4)
    return 1 | (p << 2) | (table_set << 4)


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _constant_costs(v, th, tw, costs):
    """_predictor_costs of a plane of one value v, in closed form: b = bits(zigzag(v)) per
    residual that is not zero, which is every pixel under "none", the first column under
    "left", the first row under "up", and only the first pixel under gradient and MED (their
    prediction is exact everywhere else); counted on the even rows, doubled."""
    b = 2 * ZIGZAG_BITS[v]
    rows = (th + 1) >> 1
    costs[0], costs[1], costs[2], costs[3], costs[4] = rows * tw * b, rows * b, tw * b, b, b


@njit(nogil=True, cache=True, boundscheck=False)
def _choose(image, y0, x0, th, tw, planes, choice_row, const_vals, n_predictors, constant):
    """Colour transform, predictors and constant flags of one tile (as reference_v2.choose).

    choice_row = [colour, pred_0..pred_3, const_0..const_3]; const_vals[k] the plane value.
    constant: the tile is one colour (the same choice, from its first pixel alone).
    """
    c = image.shape[2]
    n_colours = len(f2.ENCODER_COLOURS) if c >= 3 else 1
    best_cost = -1
    costs = np.zeros(f2.PREDICTORS, np.int64)
    preds = np.zeros(4, np.int64)
    plane_costs = np.zeros(4, np.int64)  # of the transform tried last, plane by plane
    for step in range(n_colours):
        colour = f2.ENCODER_COLOURS[step]
        if colour == 0:
            _colour_forward(image, y0, x0, 1 if constant else th, 1 if constant else tw, colour, planes)
        else:
            _colour_next(planes, 1 if constant else th, 1 if constant else tw, colour)
        total = 0
        for k in range(c):
            # Planes the transform shares with the one tried before it keep their choice and
            # cost: G under subtract green (from 0), R - G and G under 3 (from 1).
            if (colour == 1 and k == 1) or (colour == 3 and k <= 1):
                total += plane_costs[k]
                continue
            if constant:
                _constant_costs(planes[k, 1, 1], th, tw, costs)
            else:
                _predictor_costs(planes[k], th, tw, costs)
            best_p = _best_predictor(costs, n_predictors)
            preds[k] = best_p
            plane_costs[k] = costs[best_p]
            total += costs[best_p]
        if best_cost < 0 or total < best_cost:  # ties: the first, as reference_v2.choose
            best_cost = total
            choice_row[9] = total
            choice_row[0] = colour
            for k in range(c):
                choice_row[1 + k] = preds[k]
                first = planes[k, 1, 1]
                same = 1
                for y in range(1, th + 1 if not constant else 1):
                    for x in range(1, tw + 1):
                        same &= planes[k, y, x] == first
                choice_row[5 + k] = same
                const_vals[k] = first


# Columns of the encoder's per-tile choice rows: colour, predictors 0-3, constant flags 0-3,
# the coded choice's bit-length cost, then the palette candidate: palette size P (0: none),
# index predictor, its bit-length cost.
COL_COST, COL_PAL_SIZE, COL_PAL_PRED, COL_PAL_COST = 9, 10, 11, 12
N_CHOICE = 13
# Columns of the per-tile set rows (tile_sets): the table set of planes 0-3, then of a palette
# tile's index plane.
PALETTE_SET = 4
MAX_PALETTE = 256  # as reference_v2.MAX_PALETTE (colour tiles)
MAX_GREY_PALETTE = 64  # as reference_v2.MAX_GREY_PALETTE (one-channel tiles)


# The palette candidate finds a tile's colours and their indices through a hash set: open
# addressing over HASH_SLOTS slots, 16 times MAX_PALETTE so that probes rarely go past the
# home slot (fewer mispredicted probe loops). A slot holds the packed colour (at most 32 bits)
# tagged with the number of the tile that put it there in the bits above, so one thread's table
# serves every tile it hashes without being cleared: a slot tagged with another tile is free.
# (A bisection of the sorted list per pixel was a chain of dependent loads: 6-9 ns per pixel,
# half the encoder's time on rendered wallpapers; a 512-slot table cleared per tile took
# 2.5-3.8 ns per pixel of four rendered wallpapers, the tagged 4096-slot one 1.5-2.7.)
HASH_SLOTS = 16 * MAX_PALETTE
HASH_SHIFT = 64 - (HASH_SLOTS.bit_length() - 1)  # the top log2(HASH_SLOTS) bits make the slot
TAG_SHIFT = 32  # a slot's tile number sits above its colour (4 channels: 32 bits)


@njit(nogil=True, cache=True, boundscheck=False)
def _hash_scratch():
    """One thread's hash set of tile colours, reused tile after tile: (keys: int64 slots, tile
    number << TAG_SHIFT | packed colour; seen_as: int32, the slot's index; found: the colours
    in order of appearance; tile: the last tile number used as a tag). Every slot starts
    tagged 0, which no tile uses (tiles count from 1)."""
    return (np.zeros(HASH_SLOTS, np.int64), np.zeros(HASH_SLOTS, np.int32), np.zeros(MAX_PALETTE, np.int64),
            np.zeros(1, np.int64))


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _slot(v):
    """Home slot of a tagged colour (Fibonacci hashing: the top bits of v times 2^64/phi)."""
    return np.int64((np.uint64(v) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(HASH_SHIFT))


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _find(keys, v, tag):
    """The slot holding the tagged colour v, or the free slot (another tag) where it belongs."""
    s = _slot(v)
    while True:
        k = keys[s]
        if k == v or (k >> TAG_SHIFT) != tag:
            return s
        s = (s + 1) & (HASH_SLOTS - 1)


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _next_tag(hashed):
    """A new tile's tag: every slot of the table is free for it."""
    tile = hashed[3]
    tile[0] += 1
    return tile[0]


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _packed_row(src, x, c):
    """Pixel x of an image row (tw, c) as one integer, channel 0 most significant."""
    v = np.int64(0)
    for k in range(c):
        v = (v << 8) | np.int64(src[x, k])
    return v


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _zero_border(padded, th, tw):
    """Row 0 and column 0 of a padded plane to 0: the neighbours predictors see outside the tile."""
    for x in range(tw + 1):
        padded[0, x] = 0
    for y in range(th + 1):
        padded[y, 0] = 0


@njit(nogil=True, cache=True, boundscheck=False)
def _index_plane(image, y0, x0, th, tw, colours, n_colours, padded, hashed):
    """Palette indices of the tile into padded[1:th+1, 1:tw+1] (colours[:n_colours] sorted,
    each of which the tile holds); row 0 and column 0 stay 0."""
    c = image.shape[2]
    if c == 1:  # a grey value is its own key: a 256-entry map, no hashing
        grey_index = np.zeros(256, np.int32)
        for q in range(n_colours):
            grey_index[colours[q]] = q
        flat = image.reshape(-1)
        width = np.uint64(image.shape[1])
        for y in range(th):
            row = np.uint64(y0 + y) * width + np.uint64(x0)
            out = padded[y + 1]
            if y > 0 and runs.same_row(flat, row, row - width, tw):
                above = padded[y]
                for x in range(np.uint64(1), np.uint64(tw + 1)):
                    out[x] = above[x]
                continue
            for x in range(np.uint64(tw)):
                out[x + np.uint64(1)] = grey_index[flat[row + x]]
    else:
        _hashed_index_plane(image, y0, x0, th, tw, colours, n_colours, padded, hashed)
    _zero_border(padded, th, tw)


@njit(nogil=True, cache=True, boundscheck=False)
def _hashed_index_plane(image, y0, x0, th, tw, colours, n_colours, padded, hashed):
    """_index_plane's indices of a colour tile, through the hash set (a new tag)."""
    if image.shape[2] == 3:
        _hashed_indices(image, y0, x0, th, tw, colours, n_colours, padded, hashed, 3)
    else:
        _hashed_indices(image, y0, x0, th, tw, colours, n_colours, padded, hashed, 4)


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _hashed_indices(image, y0, x0, th, tw, colours, n_colours, padded, hashed, c):
    """_hashed_index_plane of c channels (a constant at each call, as in _hash_colours)."""
    keys, seen_as = hashed[0], hashed[1]
    tag = _next_tag(hashed)
    high = tag << TAG_SHIFT
    for q in range(n_colours):
        s = _find(keys, high | colours[q], tag)
        keys[s] = high | colours[q]
        seen_as[s] = q
    for y in range(th):
        src = image[y0 + y, x0 : x0 + tw]
        row = padded[y + 1, 1 : tw + 1]
        for x in range(tw):
            row[x] = seen_as[_find(keys, high | _packed_row(src, x, c), tag)]


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _hash_colours(image, y0, x0, th, tw, padded, hashed, c):
    """_tile_palette's hash pass over a tile of c channels (3 or 4, a constant at each call:
    the packing then unrolls): the number of distinct colours (0 past MAX_PALETTE), each pixel's
    index in order of first appearance in padded, the colours in that order in hashed[2]."""
    keys, seen_as, found = hashed[0], hashed[1], hashed[2]
    tag = _next_tag(hashed)
    high = tag << TAG_SHIFT
    n_colours = 0
    for y in range(th):
        src = image[y0 + y, x0 : x0 + tw]
        row = padded[y + 1, 1 : tw + 1]
        for x in range(tw):
            v = high | _packed_row(src, x, c)
            at = _slot(v)
            while True:  # (_find, with the insertion where the probe ends)
                k = keys[at]
                if k == v:
                    break
                if (k >> TAG_SHIFT) != tag:
                    if n_colours == MAX_PALETTE:
                        return 0
                    keys[at] = v
                    seen_as[at] = n_colours
                    found[n_colours] = v ^ high
                    n_colours += 1
                    break
                at = (at + 1) & (HASH_SLOTS - 1)
            row[x] = seen_as[at]
    return n_colours


@njit(nogil=True, cache=True, boundscheck=False)
def _tile_palette(image, y0, x0, th, tw, colours, padded, hashed):
    """A colour tile's (3 or 4 channels; one-channel tiles: _grey_rows) distinct colours and
    their index plane: their count (0 past MAX_PALETTE), colours[:count] sorted (packed,
    channel 0 most significant) and, when count > 0, the indices in padded as _index_plane
    writes them. The pixels are hashed once (hashed: the thread's _hash_scratch, under a new
    tag): each gets the index of its colour in order of first appearance, renumbered in sorted
    order afterwards by a table of at most 256 entries."""
    c = image.shape[2]
    if c == 3:
        n_colours = _hash_colours(image, y0, x0, th, tw, padded, hashed, 3)
    else:
        n_colours = _hash_colours(image, y0, x0, th, tw, padded, hashed, 4)
    if n_colours == 0:
        return 0
    found = hashed[2]
    order = np.argsort(found[:n_colours])
    rank = np.empty(n_colours, np.int32)
    for q in range(n_colours):
        colours[q] = found[order[q]]
        rank[order[q]] = q
    for y in range(th):
        row = padded[y + 1, 1 : tw + 1]
        for x in range(tw):
            row[x] = rank[row[x]]
    _zero_border(padded, th, tw)
    return n_colours


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _tile_box(i, tile, h, w):
    """(y0, x0, th, tw) of tile i in row-major tile order."""
    tiles_x = (w + tile - 1) // tile
    ty = i // tiles_x
    tx = i - ty * tiles_x
    return ty * tile, tx * tile, min(tile, h - ty * tile), min(tile, w - tx * tile)


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _zigzag_of(r):
    """ZIGZAG[r & 255] as a byte, by arithmetic: no table load, so loops vectorise."""
    return np.uint8(_zigzag_i32(r))


@njit(nogil=True, cache=True, boundscheck=False)
def _residual_symbols(padded, th, tw, p, out, n):
    """The zig-zag residuals of a padded plane under predictor p, row-major at out[n:];
    return the position after them. One branch-free loop per predictor over whole rows, so
    that LLVM vectorises each."""
    for y in range(1, th + 1):
        cur = padded[y]
        prev = padded[y - 1]
        row = out[n : n + tw]
        if p == 0:
            for x in range(tw):
                row[x] = _zigzag_of(cur[x + 1])
        elif p == 1:
            for x in range(tw):
                row[x] = _zigzag_of(I32(cur[x + 1] - cur[x]))
        elif p == 2:
            for x in range(tw):
                row[x] = _zigzag_of(I32(cur[x + 1] - prev[x + 1]))
        elif p == 3:
            for x in range(tw):
                row[x] = _zigzag_of(I32(cur[x + 1] - cur[x] - prev[x + 1] + prev[x]))
        else:
            for x in range(tw):
                row[x] = _zigzag_of(I32(cur[x + 1] - _med(cur[x], prev[x + 1], prev[x])))
        n += tw
    return n


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _largest_back(src, i):
    """The wide context value (A4) of symbol i >= 128 (unsigned) of a tile's sequence src:
    the largest of the symbols 63, 64, 65 and 128 earlier."""
    return max(max(src[i - np.uint64(63)], src[i - np.uint64(64)]), max(src[i - np.uint64(65)], src[i - np.uint64(128)]))


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _sequence_context(src, i):
    """Wide context (A4) of symbol i (unsigned) of a tile's symbol sequence src, from the
    largest of the symbols 63, 64, 65 and 128 earlier; those before the start are 0."""
    if i >= np.uint64(128):
        u = _largest_back(src, i)
    else:
        u = src[i - np.uint64(63)] if i >= np.uint64(63) else np.uint8(0)
        if i >= np.uint64(64):
            u = max(u, src[i - np.uint64(64)])
        if i >= np.uint64(65):
            u = max(u, src[i - np.uint64(65)])
    return WIDE_CONTEXT_OF[u]


_T0, _T1, _T2 = f2.WIDE_THRESHOLDS


@njit(nogil=True, cache=True, boundscheck=False)
def _wide_contexts(src, i, stop, out, back):
    """out[:stop - i] = the wide contexts (A4) of src[i:stop] (i >= 128; unsigned indices), by
    comparisons rather than a WIDE_CONTEXT_OF lookup: one loop over four shifted slices that
    LLVM vectorises (a lookup per symbol is a gather it will not). back > 0: plus the plane
    bit, PLANE_CONTEXT where the symbol `back` earlier (the previous plane's) is not 0."""
    n = stop - i
    right = src[i - np.uint64(63) : stop - np.uint64(63)]  # (in a 64-wide tile: the residual above-right)
    above = src[i - np.uint64(64) : stop - np.uint64(64)]
    left = src[i - np.uint64(65) : stop - np.uint64(65)]
    two_up = src[i - np.uint64(128) : stop - np.uint64(128)]
    if back:
        before = src[i - np.uint64(back) : stop - np.uint64(back)]
        for j in range(n):
            u = max(max(right[j], above[j]), max(left[j], two_up[j]))
            out[j] = (np.uint8(u > _T0) + np.uint8(u > _T1) + np.uint8(u > _T2)
                      + np.uint8(f2.PLANE_CONTEXT) * np.uint8(before[j] > 0))
        return
    for j in range(n):
        u = max(max(right[j], above[j]), max(left[j], two_up[j]))
        out[j] = np.uint8(u > _T0) + np.uint8(u > _T1) + np.uint8(u > _T2)


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _plane_bit(src, i, back):
    """The plane bit's share of symbol i's context (A4): PLANE_CONTEXT when back > 0 and the
    symbol `back` earlier is not 0."""
    if back and src[i - np.uint64(back)] > 0:
        return np.uint64(f2.PLANE_CONTEXT)
    return np.uint64(0)


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _plane_back(i, plane, tshift, pal):
    """How far back the plane bit looks for a plane starting at sequence position i (A4,
    FLAG_PLANE_CONTEXT, tshift 3): th*tw past a coded tile's first rANS plane when that is at
    least PLANE_CONTEXT_MIN_PIXELS; 0 (no plane bits) otherwise."""
    if tshift == 3 and not pal and i > 0 and plane >= f2.PLANE_CONTEXT_MIN_PIXELS:
        return np.uint64(plane)
    return np.uint64(0)


@njit(nogil=True, cache=True, boundscheck=False)
def _wide_tables(src, i, stop, s4, tables, ctx, back):
    """tables[i:stop] = s4 + wide context, plus the plane bit when back > 0 (i >= 128;
    unsigned indices; ctx: scratch of a plane's length). Returns stop."""
    _wide_contexts(src, i, stop, ctx, back)
    out = tables[i:stop]
    for j in range(stop - i):
        out[j] = s4 + ctx[j]
    return stop


@njit(nogil=True, cache=True, boundscheck=False)
def _wide_counts(src, i, stop, row, parts, ctx, back):
    """Count (row + context, symbol) of src[i:stop] into parts[i % 4] (i >= 128; ctx:
    scratch of a plane's length; back > 0: with plane bits). The contexts first, in a vector
    loop of their own: 2.3x faster than a context lookup in the counting loop (0.53 against
    1.22 ns per symbol)."""
    _wide_contexts(src, i, stop, ctx, back)
    three = np.uint64(3)
    values = src[i:stop]
    for j in range(stop - i):
        parts[(i + np.uint64(j)) & three, row + np.uint64(ctx[j]), np.uint64(values[j])] += 1
    return stop


@njit(nogil=True, cache=True, boundscheck=False)
def _tile_tables(syms, s0, n, choice_row, c, plane, sets_row, tables, pal, tshift):
    """Table index (A3, A4: set << tshift + context) of the tile's n symbols syms[s0 : s0 + n],
    into tables[:n]; sets_row: the set of each plane, then of a palette tile's index plane
    (pal); tshift 3 (FLAG_PLANE_CONTEXT: eight tables per set, plane bits) or 2."""
    src = syms[s0 : s0 + n]
    ctx = np.empty(plane, np.uint8)
    i = np.uint64(0)
    for k in range(1 if pal else c):
        if not pal and choice_row[5 + k]:
            continue
        s4 = sets_row[PALETTE_SET if pal else k] << tshift
        back = _plane_back(i, plane, tshift, pal)
        stop = i + np.uint64(plane)
        head = min(stop, np.uint64(f2.CONTEXT_HISTORY))
        while i < head:  # the first symbols: some context symbols lie before the start
            tables[i] = s4 + _sequence_context(src, i) + _plane_bit(src, i, back)
            i += np.uint64(1)
        i = _wide_tables(src, i, stop, s4, tables, ctx, back)


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _histogram_parts(rows):
    """A thread's four interleaved partial histograms for _tile_histogram, zeroed once and
    zeroed again as each tile's are summed (runs of one symbol, in flat areas, would otherwise
    make every increment wait for the previous one's store; a fresh zeroed array per tile
    cost as much as the counting on photographs)."""
    return np.zeros((4, rows, 256), np.uint16)


@njit(nogil=True, cache=True, boundscheck=False)
def _tile_histogram(syms, s0, n, choice_row, c, plane, pal, hist, tshift, parts):
    """Counts of (table row, symbol) of the tile's n symbols syms[s0 : s0 + n] into hist
    (uint16, zeroed): rows (k << tshift) + context for coded plane k, or 0..3 for a palette
    tile's index plane (pal). With these, every later count and size estimate of the tile is
    a sum over at most 8C x 256 entries instead of a pass over its symbols (_count_hist,
    _estimate_hist). parts: the thread's _histogram_parts for hist's rows, all zero, and left
    so."""
    src = syms[s0 : s0 + n]
    ctx = np.empty(plane, np.uint8)
    i = np.uint64(0)
    three = np.uint64(3)
    for k in range(1 if pal else c):
        if not pal and choice_row[5 + k]:
            continue
        row = np.uint64(0 if pal else k << tshift)
        back = _plane_back(i, plane, tshift, pal)
        stop = i + np.uint64(plane)
        head = min(stop, np.uint64(f2.CONTEXT_HISTORY))
        while i < head:  # the first symbols: some context symbols lie before the start
            parts[i & three, row + np.uint64(_sequence_context(src, i)) + _plane_bit(src, i, back), np.uint64(src[i])] += 1
            i += np.uint64(1)
        i = _wide_counts(src, i, stop, row, parts, ctx, back)
    for r in range(hist.shape[0]):
        into = hist[r]
        for v in range(256):
            into[v] = parts[0, r, v] + parts[1, r, v] + parts[2, r, v] + parts[3, r, v]
            parts[0, r, v] = parts[1, r, v] = parts[2, r, v] = parts[3, r, v] = 0


_lane_bytes = njit(inline="always")(f2.lane_bytes)


@njit(nogil=True, cache=True, boundscheck=False)
def _lanes_log2(estimate, min_log2, n_symbols):
    """reference_v2.lanes_log2."""
    estimate_bytes = estimate // 128
    per_lane = _lane_bytes(n_symbols)
    log2 = min_log2
    while log2 < f2.MAX_LANES_LOG2 and (per_lane << log2) < estimate_bytes:
        log2 += 1
    return log2


@njit(nogil=True, cache=True, boundscheck=False)
def _is_constant(image, y0, x0, th, tw):
    """Whether every pixel of the tile equals its first (all channels): the first row's
    pixels each equal the one before, every other row equals the first. Flat unsigned
    indices over contiguous bytes: LLVM vectorises these loops (indexing the 3-D array was
    12x slower on the masks' tiles, docs/BENCHMARKS.md "Runs tiles first")."""
    c = image.shape[2]
    flat = image.reshape(-1)
    first = np.uint64((y0 * image.shape[1] + x0) * c)
    values = np.uint64(tw * c)
    differ = np.uint8(0)
    for q in range(np.uint64(c), values):
        differ |= flat[first + q] ^ flat[first + q - np.uint64(c)]
    if differ:
        return False
    for y in range(1, th):
        row = np.uint64(((y0 + y) * image.shape[1] + x0) * c)
        for q in range(values):
            differ |= flat[row + q] ^ flat[first + q]
        if differ:
            return False
    return True


# The most run symbols of a tile that can become a runs tile (runs.MIN_PIXELS_PER_SYMBOL).
RUNS_CAP = MAX_PLANE // runs.MIN_PIXELS_PER_SYMBOL
# The most symbols a runs tile's encoder keeps: its run symbols and a mode 6 palette's.
KEPT_CAP = RUNS_CAP + 4 * f2.REPEAT_MAX_COLOURS


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _runs_scratch():
    """A thread's arrays for _tile_runs and _grey_rows: symbols, contexts, a tile's row words
    (runs.plane_rows), a grey tile's value -> index map and its values' presence."""
    # (runs.tile_symbols writes at most its limit, RUNS_CAP at most, plus a row's 4 tw.)
    return (np.empty(RUNS_CAP + 4 * 64, np.int64), np.empty(RUNS_CAP + 4 * 64, np.int64), np.empty(64, np.uint64),
            np.zeros(256, np.uint8), np.zeros(256, np.uint8))


# Labels of an index plane: each index is its own.
IDENTITY_LABELS = np.arange(256, dtype=np.uint8)


@njit(nogil=True, cache=True, boundscheck=False)
def _runs_palette_symbols(colours, n_colours, c, syms, ctxs):
    """A mode 6 palette's n_colours * c symbols and contexts into syms, ctxs (from 0) as
    reference_v2.palette_symbols makes them, from the packed increasing colours (channel 0
    most significant)."""
    j = 0
    prev = np.int64(0)
    for q in range(n_colours):
        colour = np.int64(colours[q])
        d0 = np.int64(0)
        for k in range(c):
            shift = 8 * (c - 1 - k)
            d = (((colour >> shift) & 255) - ((prev >> shift) & 255)) & 255
            if k == 0:
                d0 = d
                syms[j] = d
            else:
                syms[j] = _zigzag((d - d0) & 255 if k < 3 else d)
            ctxs[j] = f2.RUN_CTX_PALETTE + min(k, 2)
            j += 1
        prev = colour
    return j


@njit(nogil=True, cache=True, boundscheck=False)
def _tile_runs(values, base, stride, labels, th, tw, n_colours, colours, c, words, equal, scratch, kept_syms,
               kept_ctxs):
    """The symbols of a palette candidate of n_colours colours (colours: packed, increasing;
    A2 mode 6 where runs.mode_of gives it, the palette's symbols and then the runs', else
    mode 3), its index plane read as runs.tile_symbols reads it (values, base, stride,
    labels; its row words, equal: runs.plane_rows): their count, cut short past the most a
    runs tile may have, and when at most RUNS_CAP run symbols the symbols and contexts in
    kept_syms, kept_ctxs (KEPT_CAP). A noise-like tile is out before its symbols (runs.symbols_floor)."""
    syms, ctxs = scratch[0], scratch[1]
    coded = runs.mode_of(n_colours) == f2.TILE_RUNS_PALETTE
    same = coded  # (mode 6 has row repeats and implied labels; mode 3 neither)
    repeats = same
    head = runs.palette_head(n_colours, c)  # the palette's symbols
    limit = (th * tw) // runs.MIN_PIXELS_PER_SYMBOL
    floor = runs.symbols_floor(words, equal, th, repeats, same)
    if floor > limit:
        return head + floor
    n = runs.tile_symbols(values, base, stride, labels, th, tw, words, equal, syms, ctxs, limit, repeats, same)
    if n <= RUNS_CAP:
        if coded:
            _runs_palette_symbols(colours, n_colours, c, kept_syms, kept_ctxs)
        for j in range(n):
            kept_syms[head + j] = syms[j]
            kept_ctxs[head + j] = ctxs[j]
    return head + n


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _present_count(present):
    """The number of values a presence table marks."""
    n = 0
    for v in range(256):
        n += present[v]
    return n


@njit(nogil=True, cache=True, boundscheck=False)
def _grey_rows(image, y0, x0, th, tw, colours, scratch):
    """A one-channel tile's analysis in one pass over its rows: (its number of distinct
    values, 0 past MAX_GREY_PALETTE; its runs.plane_rows word of rows equal to the row above),
    the row boundaries in scratch[2], the values sorted in colours and their indices in
    scratch[3] (value -> index). One value is a constant tile. A row equal to the row above
    (61% of the rows of the evaluation masks' busy tiles) is compared and nothing else; the
    others mark their values (a presence table: in order, no sort; counted after every 8 rows
    that marked some, so that a tile of many values stops early) and have their boundaries
    taken. Where the index plane would be read (the run symbols, the floor) the image is read
    instead: indices keep the values' order, so their rows have the same boundaries and
    repeats. (Marking only each run's first pixel, with a branch per new value, was no
    faster.) The loop is runs.plane_rows' with the presence table and its early exit added,
    and same_row64 for full rows (plane_rows also reads int32 index planes)."""
    words, grey_index, present = scratch[2], scratch[3], scratch[4]
    present[:] = 0
    flat = image.reshape(-1)
    width = np.int64(image.shape[1])
    base = y0 * width + x0
    equal = np.uint64(0)
    marked = False
    full = tw == 64  # (a full tile's rows compare eight bytes at a time)
    for y in range(th):
        row = base + y * width
        if y > 0 and (runs.same_row64(flat, row, row - width) if full else runs.same_row(flat, row, row - width, tw)):
            equal |= np.uint64(1) << np.uint64(y)
            words[y] = words[y - 1]
            continue
        words[y] = runs.boundaries(flat, row, tw)
        for x in range(np.uint64(tw)):
            present[flat[np.uint64(row) + x]] = 1
        marked = True
        if y & 7 == 7 or y == th - 1:
            marked = False
            if _present_count(present) > MAX_GREY_PALETTE:
                return 0, equal
    if marked and _present_count(present) > MAX_GREY_PALETTE:
        return 0, equal
    q = 0
    for v in range(256):
        if present[v]:
            colours[q] = v
            grey_index[v] = q
            q += 1
    return q, equal


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _palettes_all(image, tile, choices, colours, constant, planes, n_predictors, runs_counts, kept_syms, kept_ctxs,
                  runs_first):
    """Every tile's constant flag and palette candidate (reference_v2.choose_palette: colours
    sorted, their count P, 0 past reference_v2.max_palette, the index predictor and its cost;
    one-colour tiles get none). When runs_counts has entries (runs tiles on), each
    candidate's run symbols from the same index plane (_tile_runs: count in runs_counts[i],
    symbols in kept_*[i]); with runs_first, a candidate sure to become a runs tile (runs.sure)
    skips the index predictor costs, which only palette tiles use, and a one-channel one its
    index plane too (_grey_rows reads the image)."""
    h, w, c = image.shape
    chunks = planes.shape[0]
    for chunk in prange(chunks):
        scratch = _runs_scratch()
        hashed = _hash_scratch()
        costs = np.zeros(f2.PREDICTORS, np.int64)
        padded = planes[chunk, 0]
        for i in range(chunk, choices.shape[0], chunks):
            y0, x0, th, tw = _tile_box(i, tile, h, w)
            n = 0
            if c == 1:
                n_colours, equal = _grey_rows(image, y0, x0, th, tw, colours[i], scratch)
                constant[i] = n_colours == 1  # masks and flat art: most tiles
                if n_colours == 1:
                    n_colours = 0
                if n_colours and runs_counts.shape[0]:
                    n = _tile_runs(image.reshape(-1), y0 * w + x0, w, scratch[3], th, tw, n_colours, colours[i], c,
                                   scratch[2], equal, scratch, kept_syms[i], kept_ctxs[i])
            else:
                constant[i] = _is_constant(image, y0, x0, th, tw)
                # No palette candidate for one colour: as a palette tile (4 + C bytes, then lane
                # states) it is never smaller than constant planes (2 + 2C bytes).
                n_colours = 0 if constant[i] else _tile_palette(image, y0, x0, th, tw, colours[i], padded, hashed)
                if n_colours and runs_counts.shape[0]:
                    values, stride = padded.reshape(-1), padded.shape[1]
                    equal = runs.plane_rows(values, stride + 1, stride, th, tw, scratch[2])
                    n = _tile_runs(values, stride + 1, stride, IDENTITY_LABELS, th, tw, n_colours, colours[i], c,
                                   scratch[2], equal, scratch, kept_syms[i], kept_ctxs[i])
            choices[i, COL_PAL_SIZE] = n_colours
            if n_colours == 0:
                continue
            if runs_counts.shape[0]:
                runs_counts[i] = n
                if runs_first and runs.sure(n - runs.palette_head(n_colours, c), th * tw, c):
                    continue
            if c == 1:
                _index_plane(image, y0, x0, th, tw, colours[i], n_colours, padded, hashed)
            _predictor_costs(padded, th, tw, costs)
            best_p = _best_predictor(costs, n_predictors)
            choices[i, COL_PAL_PRED] = best_p
            choices[i, COL_PAL_COST] = costs[best_p]


# The colour transform _choose tries last: its planes are still in the buffer when it is
# chosen (most colour tiles: transform 3), so the symbols need no second colour pass.
LAST_COLOUR = f2.ENCODER_COLOURS[-1]


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _choose_symbols_all(image, tile, choices, const_vals, planes, constant, sure, n_predictors, sym_start, sym_count,
                        syms, hist, tshift):
    """Every tile's coded choice (_choose), then at once its symbols at syms[sym_start[i]:]
    (their count in sym_count[i]) and, when hist has rows, their histogram (_tile_histogram;
    tshift its; a tile without symbols leaves its rows as they were: its readers skip it, and
    zeroing them was a tenth of a mask's encode time). The tiles already sure to become runs
    tiles get every plane constant (no symbols; the encoder writes them raw until their runs
    payloads replace them). One pass: the tile's planes are still at hand from the choice (a
    second pass made them again)."""
    h, w = image.shape[0], image.shape[1]
    c = image.shape[2]
    chunks = planes.shape[0]
    for chunk in prange(chunks):
        parts = _histogram_parts(hist.shape[1])
        tile_planes = planes[chunk]
        for i in range(chunk, choices.shape[0], chunks):
            sym_count[i] = 0
            if sure[i]:
                for k in range(c):
                    choices[i, 5 + k] = 1
            else:
                y0, x0, th, tw = _tile_box(i, tile, h, w)
                _choose(image, y0, x0, th, tw, tile_planes, choices[i], const_vals[i], n_predictors, constant[i])
                coded = 0
                for k in range(c):
                    coded += 1 - choices[i, 5 + k]
                if coded:
                    if c >= 3 and choices[i, 0] != LAST_COLOUR:
                        _colour_forward(image, y0, x0, th, tw, choices[i, 0], tile_planes)
                    n = sym_start[i]
                    for k in range(c):
                        if not choices[i, 5 + k]:
                            n = _residual_symbols(tile_planes[k], th, tw, choices[i, 1 + k], syms, n)
                    sym_count[i] = n - sym_start[i]
                    if hist.shape[0]:
                        _tile_histogram(syms, sym_start[i], sym_count[i], choices[i], c, th * tw, np.bool_(False), hist[i], tshift,
                                        parts)


@njit(nogil=True, cache=True, boundscheck=False)
def _palette_symbols(image, y0, x0, th, tw, choice_row, colours, padded, out, o, hashed):
    """The palette candidate's index symbols (row-major, zig-zag residuals) at out[o:]."""
    _index_plane(image, y0, x0, th, tw, colours, choice_row[COL_PAL_SIZE], padded, hashed)
    _residual_symbols(padded, th, tw, choice_row[COL_PAL_PRED], out, o)


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _palette_symbols_all(image, tile, choices, colours, psym_start, psyms, planes, hist):
    """Every palette candidate's index symbols, and their histograms when hist has rows."""
    h, w = image.shape[0], image.shape[1]
    c = image.shape[2]
    chunks = planes.shape[0]
    for chunk in prange(chunks):
        hashed = _hash_scratch()
        parts = _histogram_parts(hist.shape[1])
        for i in range(chunk, choices.shape[0], chunks):
            if choices[i, COL_PAL_SIZE]:
                y0, x0, th, tw = _tile_box(i, tile, h, w)
                _palette_symbols(image, y0, x0, th, tw, choices[i], colours[i], planes[chunk, 0], psyms,
                                 psym_start[i], hashed)
                if hist.shape[0]:
                    _tile_histogram(psyms, psym_start[i], th * tw, choices[i], c, th * tw, np.bool_(True), hist[i],
                                    np.int64(2), parts)
            elif hist.shape[0]:
                hist[i] = 0  # (the buffer is not zeroed)


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _source(i, pick, sym_start, sym_count, syms, psym_start, psyms):
    """(symbols array, first, count) of tile i's picked choice (pick[i]: 1 palette, 0 coded)."""
    if pick[i]:
        return psyms, psym_start[i], psym_start[i + 1] - psym_start[i]
    return syms, sym_start[i], sym_count[i]


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _count_all(h, w, c, tile, choices, keep, pick, tile_sets, sym_start, sym_count, syms, psym_start, psyms, counts,
               tables, tshift):
    """Histograms per (table, symbol), one per chunk (summed by the caller)."""
    chunks = tables.shape[0]
    for chunk in prange(chunks):
        for i in range(chunk, choices.shape[0], chunks):
            if not keep[i]:
                continue
            _, _, th, tw = _tile_box(i, tile, h, w)
            src, s0, n = _source(i, pick, sym_start, sym_count, syms, psym_start, psyms)
            _tile_tables(src, s0, n, choices[i], c, th * tw, tile_sets[i], tables[chunk], pick[i], tshift)
            # Four interleaved histograms: runs of one symbol (masks, flat areas) would
            # otherwise make every increment wait for the previous one.
            for j in range(n):
                counts[chunk, j & 3, tables[chunk, j], src[s0 + j]] += 1


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _estimate_all(h, w, c, tile, choices, pick, tile_sets, min_log2, cost, sizes, sym_start, sym_count, syms,
                  psym_start, psyms, tables, tshift):
    """Estimated coded size in bytes of every tile's picked choice (reference_v2.estimate)."""
    chunks = tables.shape[0]
    for chunk in prange(chunks):
        for i in range(chunk, choices.shape[0], chunks):
            _, _, th, tw = _tile_box(i, tile, h, w)
            src, s0, n = _source(i, pick, sym_start, sym_count, syms, psym_start, psyms)
            if pick[i]:
                size = 4 + choices[i, COL_PAL_SIZE] * c
            else:
                size = 2 + c
                for k in range(c):
                    size += choices[i, 5 + k]
            if n:
                _tile_tables(src, s0, n, choices[i], c, th * tw, tile_sets[i], tables[chunk], pick[i], tshift)
                total = np.int64(0)  # (a literal 0 would compile _lanes_log2 for it too)
                for j in range(n):
                    total += cost[tables[chunk, j], src[s0 + j]]
                size += (4 << _lanes_log2(total, min_log2, n)) + total // 128
            sizes[i] = size


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _count_hist(c, choices, keep, pick, tile_sets, hist, phist, sym_count, counts, tshift):
    """_count_all from the tiles' histograms: counts[chunk] (int32) += each kept tile's picked
    histogram, plane k's 1 << tshift rows into its set's (a constant plane's rows are zero; a
    coded choice without symbols, sym_count[i] == 0, adds nothing and is skipped)."""
    chunks = counts.shape[0]
    for chunk in prange(chunks):
        total = counts[chunk]
        for i in range(chunk, choices.shape[0], chunks):
            if not keep[i] or (not pick[i] and sym_count[i] == 0):
                continue
            tile_hist = phist[i] if pick[i] else hist[i]
            for r in range(tile_hist.shape[0]):
                k = r >> tshift
                into = total[(tile_sets[i, PALETTE_SET if pick[i] else k] << tshift) + (r & ((1 << tshift) - 1))]
                counts_r = tile_hist[r]
                for v in range(256):
                    into[v] = I32(into[v] + I32(counts_r[v]))


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _dot_cost(hist, cost, sets_row, pal, tshift):
    """Sum over hist's rows r (plane r >> tshift, context r % (1 << tshift)) and symbols v of
    hist[r, v] times the cost of v in that context of the plane's set (sets_row[PALETTE_SET]
    for pal). cost: int32 (_Counted.estimates); a row's sum fits int32 (at most 4096 symbols
    of at most 192 sixteenths of a bit each), so the products run eight to a vector register
    instead of as int64 (the estimates took 2-3 times as long)."""
    total = 0
    for r in range(hist.shape[0]):
        counts = hist[r]
        bits = cost[(sets_row[PALETTE_SET if pal else r >> tshift] << tshift) + (r & ((1 << tshift) - 1))]
        row_total = I32(0)
        for v in range(256):
            row_total = I32(row_total + I32(I32(counts[v]) * bits[v]))
        total += row_total
    return total


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _estimate_hist(h, w, tile, c, choices, pick, tile_sets, min_log2, cost, sizes, totals, hist, phist, sym_count,
                   tshift):
    """_estimate_all from the tiles' histograms; totals[i]: the symbols' summed cost (what
    _rans_body would add up again to pick the lane count; 0 for a coded choice without
    symbols, sym_count[i] == 0, whose histogram rows are not read)."""
    for i in prange(choices.shape[0]):
        _, _, th, tw = _tile_box(i, tile, h, w)
        if pick[i]:
            size = 4 + choices[i, COL_PAL_SIZE] * c
            total = _dot_cost(phist[i], cost, tile_sets[i], True, tshift)
        else:
            size = 2 + c
            for k in range(c):
                size += choices[i, 5 + k]
            total = _dot_cost(hist[i], cost, tile_sets[i], False, tshift) if sym_count[i] else np.int64(0)
        coded = 0
        for k in range(c):
            coded += 1 - choices[i, 5 + k]
        if pick[i] or coded:
            n = th * tw * (1 if pick[i] else coded)
            size += (4 << _lanes_log2(total, min_log2, n)) + total // 128
        sizes[i] = size
        totals[i] = total


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _write_state(x, out, pos):
    """A lane's final state at out[pos:], 4 bytes little-endian; returns the position after."""
    for b in range(4):
        out[pos] = (x >> (8 * b)) & 255
        pos += 1
    return pos


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _write_words(words, n_words, out, pos):
    """words[:n_words] at out[pos:] in reverse (the order the decoder reads them), 2 bytes
    each little-endian; returns the position after."""
    for w in range(n_words - 1, -1, -1):
        out[pos] = words[w] & 255
        out[pos + 1] = words[w] >> 8
        pos += 2
    return pos


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _rans_put(x, flat_coder, entry, words, n_words):
    """One symbol into rANS state x, its coder entry at flat_coder[entry] (_coder_table,
    flattened): returns (the new state, the word count), the renormalisation word at
    words[n_words] (kept when emitted)."""
    packed = flat_coder[entry]
    reciprocal = flat_coder[entry | np.uint64(1)]
    f = packed & 0xFFFF
    # Renormalise without a branch: the word is always written, kept when emitted.
    emit = np.int64(x >= (f << (32 - PROB_BITS)))
    words[n_words] = x & 0xFFFF
    n_words += np.uint64(emit)
    x >>= 16 * emit
    # x // f as a multiply and a shift (a division costs several times more): exact for
    # x < f << 20, which renormalisation leaves (_coder_table).
    q = np.int64((np.uint64(x) * np.uint64(reciprocal)) >> np.uint64(RECIPROCAL_SHIFT))
    return (q << PROB_BITS) + (x - q * f) + (packed >> 16), n_words


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _scalar_puts(syms, tables, at, stop, mask, states, flat_coder, words, n_words):
    """The symbols syms[stop:at] (tables[stop:at] their tables) into the lanes of states
    (uint32; symbol i in lane i & mask), the last first: rANS codes backwards, so that the
    decoder reads forwards. flat_coder: _coder_table's, flattened. Returns the new word count."""
    while at > stop:
        # Unsigned indices: numba adds no negative-index fix-up to these loads and stores.
        at -= np.uint64(1)
        entry = (np.uint64(tables[at]) << np.uint64(9)) | (np.uint64(syms[at]) << np.uint64(1))
        j = at & mask
        states[j], n_words = _rans_put(np.int64(states[j]), flat_coder, entry, words, n_words)
    return n_words


# The encoder's rANS loop takes eight lanes at once with AVX2 (rans_avx2.rans_put8) in tiles of
# 8 lanes or more (98-99% of the coded tiles of the rendered and photo sets): 1.8-2.2x as fast
# as the scalar loop on the dev VM's Zen 3, 12-13% off a whole encode at the median
# (docs/BENCHMARKS.md "Encoder: eight rANS lanes at once"). PREPKIT_NO_AVX2=1 keeps it scalar,
# as on CPUs without AVX2.
if rans_avx2.AVAILABLE:

    @njit(nogil=True, cache=True, boundscheck=False, inline="always")
    def _vector_puts(syms, tables, at, mask, states, flat_coder, words, n_words):
        """_scalar_puts of syms[0:at] (at a multiple of 8, 8 lanes or more) eight at a time."""
        permute = rans_avx2.PERMUTE_DOWN
        while at > 0:
            at -= np.uint64(8)
            n_words = rans_avx2.rans_put8(syms, tables, at, states, at & mask, flat_coder, words, n_words, permute)
        return n_words
else:

    @njit(nogil=True, cache=True, boundscheck=False, inline="always")
    def _vector_puts(syms, tables, at, mask, states, flat_coder, words, n_words):
        """Without AVX2 (never called: _rans_body checks rans_avx2.AVAILABLE), _scalar_puts."""
        return _scalar_puts(syms, tables, at, np.uint64(0), mask, states, flat_coder, words, n_words)


@njit(nogil=True, cache=True, boundscheck=False)
def _rans_body(syms, s0, n, tables, coder, cost, words, out, pos, limit, min_log2, total):
    """Interleaved rANS of syms[s0 : s0 + n] (tables[:n] their tables): lane states then
    words at out[pos:]. total: the symbols' summed cost under these tables, or -1 to add it
    up here (it picks the lane count). Returns (new pos, lanes log2), or (-1, 0) when the
    body would reach `limit` (the caller then writes the raw tile). words: uint16 room for n
    words and 8 more (rans_put8's store)."""
    if total < 0:
        total = 0
        for j in range(n):
            total += cost[tables[j], syms[s0 + j]]
    log2 = _lanes_log2(total, min_log2, n)
    lanes = 1 << log2
    states = np.empty(MAX_LANES, np.uint32)
    for j in range(lanes):
        states[j] = STATE_LOW
    n_words = np.uint64(0)
    mask = np.uint64(lanes - 1)
    tile_syms = syms[s0 : s0 + n]
    flat_coder = coder.reshape(-1)  # [f | cum << 16, reciprocal] of (table, symbol) at 2 (256 table + symbol)
    at = np.uint64(n)
    vector = rans_avx2.AVAILABLE and lanes >= 8
    # With the vector loop, only the partial round (coded first) goes one symbol at a time.
    whole = at - (at & mask) if vector else np.uint64(0)
    n_words = _scalar_puts(tile_syms, tables, at, whole, mask, states, flat_coder, words, n_words)
    if vector:
        n_words = _vector_puts(tile_syms, tables, whole, mask, states, flat_coder, words, n_words)
    n_words = np.int64(n_words)
    if pos + 4 * lanes + 2 * n_words >= limit:
        return -1, 0
    for j in range(lanes):
        pos = _write_state(states[j], out, pos)
    return _write_words(words, n_words, out, pos), log2


@njit(nogil=True, cache=True, boundscheck=False)
def _encode_tile(image, y0, x0, th, tw, choice, const_vals, sets_row, min_log2, coder, cost, out, base,
                 syms, s0, n, tables, words, total, tshift):
    """Write one tile's payload at out[base:]; return its length (raw when not smaller).

    coder: _coder_table's [f | cum << 16, reciprocal] per (table, symbol)."""
    c = image.shape[2]
    raw_len = 1 + th * tw * c
    pos = base + 2
    for k in range(c):
        if choice[5 + k]:
            out[pos] = 0
        else:
            out[pos] = _channel_byte(choice[1 + k], sets_row[k])
        pos += 1
    for k in range(c):
        if choice[5 + k]:
            out[pos] = const_vals[k]
            pos += 1
    log2 = 0
    if n:
        _tile_tables(syms, s0, n, choice, c, th * tw, sets_row, tables, np.bool_(False), tshift)
        pos, log2 = _rans_body(syms, s0, n, tables, coder, cost, words, out, pos, base + raw_len, min_log2, total)
        if pos < 0:
            return _raw_tile(image, y0, x0, th, tw, out, base)
    if pos - base >= raw_len:
        return _raw_tile(image, y0, x0, th, tw, out, base)
    out[base] = f2.TILE_CODED
    out[base + 1] = choice[0] | (log2 << 4)
    return pos - base


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _write_palette(colours, n_colours, c, out, pos):
    """The packed colours[:n_colours] at out[pos:], C bytes each, channel 0 first (A2); returns
    the position after them."""
    for q in range(n_colours):
        for k in range(c):
            out[pos] = (colours[q] >> (8 * (c - 1 - k))) & 255
            pos += 1
    return pos


@njit(nogil=True, cache=True, boundscheck=False)
def _encode_palette_tile(image, y0, x0, th, tw, choice, colours, sets_row, min_log2, coder, cost, out, base,
                         syms, s0, n, tables, words, total, tshift):
    """Write one palette tile (A2 mode 2) at out[base:]; return its length (raw when not smaller)."""
    c = image.shape[2]
    raw_len = 1 + th * tw * c
    n_colours = choice[COL_PAL_SIZE]
    if 4 + n_colours * c >= raw_len:  # nothing written past the raw tile's room
        return _raw_tile(image, y0, x0, th, tw, out, base)
    out[base + 2] = n_colours - 1
    out[base + 3] = _channel_byte(choice[COL_PAL_PRED], sets_row[PALETTE_SET])
    pos = _write_palette(colours, n_colours, c, out, base + 4)
    _tile_tables(syms, s0, n, choice, c, th * tw, sets_row, tables, np.bool_(True), tshift)
    pos, log2 = _rans_body(syms, s0, n, tables, coder, cost, words, out, pos, base + raw_len, min_log2, total)
    if pos < 0:
        return _raw_tile(image, y0, x0, th, tw, out, base)
    out[base] = f2.TILE_PALETTE
    out[base + 1] = log2 << 4
    return pos - base


@njit(nogil=True, cache=True, boundscheck=False)
def _raw_tile(image, y0, x0, th, tw, out, base):
    c = image.shape[2]
    out[base] = f2.TILE_RAW
    pos = base + 1
    for y in range(th):
        for x in range(tw):
            for k in range(c):
                out[pos] = image[y0 + y, x0 + x, k]
                pos += 1
    return pos - base


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _encode_all(image, tile, choices, const_vals, colours, keep, pick, tile_sets, min_log2, coder, cost, totals, out,
                starts, lengths, sym_start, sym_count, syms, psym_start, psyms, tables, words, skip, tshift):
    """Every tile's payload at out[starts[i]:], except the skipped tiles' (length 0); totals[i]:
    its symbols' summed cost, or -1; tshift: 3 with plane contexts, else 2 (_tile_tables)."""
    h, w = image.shape[0], image.shape[1]
    chunks = tables.shape[0]
    for chunk in prange(chunks):
        for i in range(chunk, choices.shape[0], chunks):
            y0, x0, th, tw = _tile_box(i, tile, h, w)
            if skip[i]:
                lengths[i] = 0
            elif keep[i] and pick[i]:
                s0 = psym_start[i]
                lengths[i] = _encode_palette_tile(image, y0, x0, th, tw, choices[i], colours[i], tile_sets[i], min_log2, coder,
                                                  cost, out, starts[i], psyms, s0, psym_start[i + 1] - s0,
                                                  tables[chunk], words[chunk], totals[i], tshift)
            elif keep[i]:
                s0 = sym_start[i]
                lengths[i] = _encode_tile(image, y0, x0, th, tw, choices[i], const_vals[i], tile_sets[i], min_log2, coder, cost,
                                          out, starts[i], syms, s0, sym_count[i], tables[chunk],
                                          words[chunk], totals[i], tshift)
            else:
                lengths[i] = _raw_tile(image, y0, x0, th, tw, out, starts[i])


class _Scratch(NamedTuple):
    """Per-chunk work arrays of the encoder (row `chunk` belongs to one thread)."""

    planes: np.ndarray  # int32 (chunks, 4, 65, 65): colour-transformed planes of a tile, after a 0 row and column
    tables: np.ndarray  # int64 (chunks, MAX_VALUES): table index of each symbol of a tile
    words: np.ndarray  # uint16 (chunks, MAX_VALUES + 8): rANS words, in encoding order (+8: rans_put8's store)


def _encode_scratch(chunks: int) -> _Scratch:
    rows = getattr(_local, "encode_v2", None)
    if rows is None or rows.planes.shape[0] < chunks:
        side = max(fmt.TILE_SIZES) + 1
        rows = _Scratch(
            np.zeros((chunks, 4, side, side), np.int32),
            np.zeros((chunks, MAX_VALUES), np.int64),
            np.zeros((chunks, MAX_VALUES + 8), np.uint16),
        )
        _local.encode_v2 = rows
    return _Scratch(*(r[:chunks] for r in rows))


# The largest per-image arrays (symbols, histograms, payload scratch) come from per-thread
# buffers kept between encodes, from REUSE_MIN_BYTES up to REUSE_MAX_BYTES each. Allocated
# afresh, each was mapped page by page on first touch: up to 1,500 page faults per photograph
# and 280 per mask, depending on what the allocator had returned to the system before
# (docs/BENCHMARKS.md, "Encoder: masks and small images"). Smaller arrays come from the
# allocator's heap without faults, and the pool's bookkeeping would cost a small image more
# than it saves.
REUSE_MIN_BYTES = 128 << 10
REUSE_MAX_BYTES = 64 << 20


def _reused(name: str, shape: tuple[int, ...], dtype: type, zero: bool = False) -> np.ndarray:
    """An array of `shape` in this thread's buffer `name` (grown as needed; contents undefined
    unless zero). Only one array per name may be in use at a time."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if not REUSE_MIN_BYTES <= nbytes <= REUSE_MAX_BYTES:
        return np.zeros(shape, dtype) if zero else np.empty(shape, dtype)
    pool = _local.__dict__.setdefault("encode_buffers", {})
    buf = pool.get(name)
    if buf is None or buf.size < nbytes:
        buf = np.empty(max(nbytes, 0 if buf is None else buf.size * 5 // 4), np.uint8)
        pool[name] = buf
    out = buf[:nbytes].view(dtype).reshape(shape)
    if zero:
        out.fill(0)
    return out


def encode(image: np.ndarray, tile: int = 64, fast_decode: bool = False, runs_tiles: bool = True,
           runs_first: bool = True) -> bytes:
    """Encode an HxW or HxWxC uint8 image as a v2 stream, byte-identical to reference_v2;
    fast_decode leaves MED out (format_v2.encoder_predictors); runs_tiles=False writes no
    runs tiles (A2 mode 3; tests of the other modes on masks ask for that); runs_first=False
    weighs every runs candidate against its coded payload (runs.sure: tests compare both)."""
    image, flags = fmt.prepare(image, tile)
    from prepkit.lossless import cpu

    h, w, c = image.shape
    n = fmt.Header(h, w, c, tile, 0).n_tiles
    from prepkit.lossless import small_encoder  # (it imports this module)

    if small_encoder.applies(h, w, tile) and runs_tiles and runs_first:
        # Up to small_encoder.MAX_TILES tiles: the same stream from one compiled call, without
        # this module's glue in Python (docs/BENCHMARKS.md "Table sets from 32 tiles, and
        # images of up to 256 tiles in one compiled call").
        small = small_encoder.stream(image, f2.encoder_flags(flags, f2.encoder_wide_context(c),
                                                             f2.encoder_plane_context(c, n, fast_decode)),
                                     tile, fast_decode)
        if small is not None:
            return small
    if cpu.use_parallel(n):
        return _encode(image, flags, tile, fast_decode, runs_tiles, runs_first, try_one_set=True)
    # Too few tiles for the thread pool: its kernels would still start a parallel region per
    # call (each waking numba's other threads, which then spin on cores the caller needs),
    # about ten per image (docs/BENCHMARKS.md "Small images: one thread, one compiled call").
    with numba_threads(1):
        return _encode(image, flags, tile, fast_decode, runs_tiles, runs_first, try_one_set=True)


def _encode(image: np.ndarray, flags: int, tile: int, fast_decode: bool, runs_tiles: bool, runs_first: bool,
            one_set: bool = False, try_one_set: bool = False, nested: bool = False) -> bytes:
    """encode() of a prepared image (fmt.prepare) and its flags; one_set: every plane (palette
    index planes too) codes with table set 0; try_one_set: where format_v2.encoder_tries_one_set,
    the smaller of the stream with per-plane sets and the one with one set, from one tile
    analysis; nested: called from an encode whose arrays are still in use (the thread's
    reused buffers are its)."""

    def array(name: str, shape: tuple[int, ...], dtype: type, zero: bool = False) -> np.ndarray:
        if nested:
            return np.zeros(shape, dtype) if zero else np.empty(shape, dtype)
        return _reused(name, shape, dtype, zero)

    from prepkit.lossless import cpu

    h, w, c = image.shape
    n = fmt.Header(h, w, c, tile, 0).n_tiles
    header = fmt.Header(h, w, c, tile, f2.encoder_flags(flags, f2.encoder_wide_context(c),
                                                        f2.encoder_plane_context(c, n, fast_decode)), f2.VERSION)
    # Tables per set, as a shift: 8 (plane contexts tried) or 4 (A3).
    tshift = 3 if header.flags & f2.FLAG_PLANE_CONTEXT else 2
    chunks = numba.get_num_threads() if cpu.use_parallel(n) else 1
    scr = _encode_scratch(chunks)
    choices = np.zeros((n, N_CHOICE), np.int64)
    const_vals = np.zeros((n, 4), np.int64)
    # (Not zeroed: every reader of a tile's colours reads the palette size it was given,
    # each of them written by _palettes_all. Zeroed, a mask's 2 KiB per tile took 2-3% of its encode.)
    colours = array("colours", (n, MAX_PALETTE), np.int64)
    constant = np.zeros(n, np.bool_)
    n_predictors = f2.encoder_predictors(fast_decode)
    # Run symbols come with the palette candidates (their index planes), and the tiles sure
    # to become runs tiles (runs.sure: most tiles of a mask) skip the coded and palette
    # choices, their symbols and their payloads.
    runs_counts = np.zeros(n if runs_tiles else 0, np.int64)
    kept_syms = array("kept_syms", (n if runs_tiles else 0, KEPT_CAP), np.uint8)
    kept_ctxs = array("kept_ctxs", (n if runs_tiles else 0, KEPT_CAP), np.uint8)
    _palettes_all(image, tile, choices, colours, constant, scr.planes, n_predictors, runs_counts, kept_syms, kept_ctxs,
                  runs_first)
    if c == 1 and runs_tiles and runs_first and not one_set:
        # Most masks: constant tiles and runs tiles only, written in one call (mask_encoder).
        from prepkit.lossless import mask_encoder

        flat = mask_encoder.stream(image, header, choices[:, COL_PAL_SIZE], colours, constant, runs_counts, kept_syms,
                                   kept_ctxs)
        if flat is not None:
            return flat
    th, tw = fmt.tile_geometry(header)
    pal_sizes = choices[:, COL_PAL_SIZE].copy()
    found = _runs_found(pal_sizes, runs_counts, kept_syms, kept_ctxs, c) if runs_tiles else None
    sure = np.zeros(n, np.bool_)
    if found is not None and runs_first:
        sure[found.cands] = runs.sure(found.counts - found.heads, (th * tw)[found.cands], c)
        choices[sure, COL_PAL_SIZE] = 0
    min_log2 = f2.min_lanes_log2(fast_decode)
    # Each tile's symbols in a slot of its own (the most it can have), written as it is chosen.
    sym_start = np.concatenate([[0], np.cumsum(th * tw * c)]).astype(np.int64)
    sym_count = np.zeros(n, np.int64)
    syms = array("syms", (int(sym_start[-1]),), np.uint8)
    # Per-tile histograms (uint16, 8C or 4C x 256 per tile) replace the passes over the symbols of
    # every count and estimate below, where they take less memory than twice the symbols' slots.
    # Table sets per tile class (table_sets) need them as well.
    with_table_sets = table_sets.applies(n, c, fast_decode, 1 << tshift)
    use_hist = with_table_sets or n * (c << tshift) * 256 * 2 <= max(HISTOGRAM_BUDGET, 2 * syms.size)
    # (Not zeroed here: _choose_symbols_all writes or zeroes every tile's rows, in parallel.)
    hist = array("hist", (n if use_hist else 0, c << tshift, 256), np.uint16)
    _choose_symbols_all(image, tile, choices, const_vals, scr.planes, constant, sure, n_predictors, sym_start, sym_count,
                        syms, hist, tshift)
    n_coded = np.where(sure, 0, c - choices[:, 5 : 5 + c].sum(axis=1))  # (a sure tile has no coded choice)
    n_colours = choices[:, COL_PAL_SIZE]
    first = (n_colours > 0) & (choices[:, COL_PAL_COST] + 8 * n_colours * c < choices[:, COL_COST])
    psym_start = np.zeros(n + 1, np.int64)
    if first.any():
        np.cumsum(np.where(n_colours > 0, th * tw, 0), out=psym_start[1:])
    psyms = array("psyms", (int(psym_start[-1]),), np.uint8)
    phist = array("phist", (n if use_hist and first.any() else 0, 4, 256), np.uint16)  # (_palette_symbols_all's)
    counted = _Counted(h, w, c, tile, choices, min_log2, (sym_start, sym_count, syms, psym_start, psyms), hist, phist,
                       scr.tables, tshift)
    if first.any():
        _palette_symbols_all(image, tile, choices, colours, psym_start, psyms, scr.planes, phist)

    one_set_alike = False  # finish() sets it where finish(True) would write the same stream

    def finish(one_set: bool, counted: _Counted) -> bytes:
        """The stream from the tile analysis above: tables, payloads, runs tiles (with
        one_set, every plane in table set 0), with 1 << counted.tshift tables per set (plane
        contexts with eight, where they pay). Reads the analysis, never changes it."""
        nonlocal one_set_alike
        shift = counted.tshift
        stream_header = header if shift == tshift else fmt.Header(h, w, c, tile, header.flags & ~f2.FLAG_PLANE_CONTEXT,
                                                                  f2.VERSION)
        keep = ~sure  # sure tiles are counted in no table (and get no payload below)
        pick = np.zeros(n, np.bool_)
        n_sets = 1 if one_set else c  # default_sets clips every plane to set n_sets - 1
        if first.any():
            # As reference_v2.encode: a first guess gives tables (index planes in set C); each
            # candidate then takes the smaller estimate; set C stays only if a palette tile does.
            n_sets = 1 if one_set else c + 1
            sets = default_sets(n, c, n_sets)
            cost = frequencies.cost_table(counted.tables(keep, first, sets, n_sets))
            coded_size, _ = counted.estimates(pick, sets, cost)
            palette_size, _ = counted.estimates(n_colours > 0, sets, cost)
            pick = (n_colours > 0) & (palette_size < coded_size)
            if not pick.any():
                n_sets = 1 if one_set else c
        sets = default_sets(n, c, n_sets)
        counts = counted.counts(keep, pick, sets, n_sets)
        freq = frequencies.normalize_rows(counts)
        sizes, totals = counted.estimates(pick, sets, frequencies.cost_table(freq))
        raw_len = 1 + th * tw * c
        keep = (sizes < raw_len) & ~sure
        if not keep.all():
            counts = counted.counts(keep, pick, sets, n_sets)
            freq = frequencies.normalize_rows(counts)
            sizes, totals = counted.estimates(pick, sets, frequencies.cost_table(freq))
            if not use_hist:
                totals = np.full(n, -1, np.int64)
        splits = with_table_sets and not one_set
        # Plane contexts are weighed before the table-set proposal too (as reference_v2), which
        # saves the proposal with eight tables where they do not pay even with one set per plane.
        if shift == 3 and splits and not table_sets.plane_contexts_pay(counts, freq):
            return finish(one_set, counted.folded())
        if splits:
            sets, n_sets, freq, totals, counts = _with_table_sets(counted, keep, pick, sets, n_sets, freq, sizes,
                                                                  totals, counts)
        if shift == 3 and not table_sets.plane_contexts_pay(counts, freq):
            # Every choice again with four tables per set (the tables steer them), from the
            # same histograms folded (reference_v2 encodes again without plane contexts).
            return finish(one_set, counted.folded())
        # finish(True) writes this stream again: one channel, no palette first guess (whose
        # index set it would not have), and one table set after the table-set proposal.
        one_set_alike = c == 1 and not first.any() and n_sets == 1
        coder = _coder_table(freq)
        # A coded tile is written only while smaller than raw: raw_len bounds every payload
        # (the tile header is written first: tiny tiles get room for it too). Sure tiles get no
        # payload here (the reference writes them raw): their runs payloads replace nothing.
        # A tile of constant planes writes 2 + 2C bytes or a smaller raw tile: no more room, so
        # that a fresh buffer has no pages it never touches (each a page fault once touched).
        room = np.where(keep & ~pick & (n_coded == 0), 3 + 2 * c, np.maximum(raw_len, 3 + 2 * c))
        starts = np.concatenate([[0], np.cumsum(np.where(sure, 0, room))]).astype(np.int64)
        scratch = array("scratch", (int(starts[-1]),), np.uint8)
        lengths = np.zeros(n, np.int64)
        cost = frequencies.cost_table(freq)
        _encode_all(image, tile, choices, const_vals, colours, keep, pick, sets, min_log2, coder, cost, totals, scratch,
                    starts, lengths, *counted.symbols, scr.tables, scr.words, sure, shift)
        runs_parts = None
        if found is not None:
            current = np.where(sure, raw_len, lengths)  # a sure tile weighs against its raw payload
            runs_parts, freq = _with_runs(c, pal_sizes, colours, found, th * tw, current, freq, chunks, shift)
            became_runs = runs_parts.lengths > 0 if runs_parts is not None else np.zeros(n, np.bool_)
            if (sure & ~became_runs).any():
                # A sure tile that did not become a runs tile (rare: the runs tables did not pay
                # for themselves): the image again, every candidate weighed against its coded payload.
                one_set_alike = False
                return _encode(image, flags, tile, fast_decode, runs_tiles, False, one_set, nested=True)
        stream = _assemble(stream_header, freq, scratch, starts, lengths, runs_parts)
        n_tables = c << shift
        all_raw = f2.HEADER_SIZE + n_tables + f2.tile_table_size(raw_len, stream_header.flags) + int(raw_len.sum())
        if len(stream) <= all_raw:
            return stream
        keep[:] = False
        no_sure = np.zeros(n, np.bool_)  # (sure belongs to both finishes: not cleared in place)
        # Every tile raw: raw_len bytes each (a constant tile's room above is 3 + 2C: its raw
        # payload overwrote the next tile's start, or ran past the buffer for the last tile).
        starts = np.concatenate([[0], np.cumsum(raw_len)]).astype(np.int64)
        scratch = array("scratch", (int(starts[-1]),), np.uint8)
        _encode_all(image, tile, choices, const_vals, colours, keep, pick, sets, min_log2, coder, cost, totals, scratch,
                    starts, lengths, *counted.symbols, scr.tables, scr.words, no_sure, shift)
        return _assemble(stream_header, np.zeros((n_tables, 256), np.int32), scratch, starts, lengths, None)

    stream = finish(one_set, counted)
    if try_one_set and not one_set and f2.encoder_tries_one_set(n) and not one_set_alike:
        # the smaller of the two (reference_v2.encode)
        other = finish(True, counted)
        if len(other) < len(stream):
            return other
    return stream


@njit(nogil=True, cache=True, boundscheck=False)
def _rans_one_lane(syms, ctxs, n, table_base, coder, words, out, pos, limit):
    """_rans_body of one lane (a runs tile's), symbol j in table table_base + ctxs[j]: the
    state stays in a register instead of a round trip through memory per symbol (that store
    and load were most of the time). Returns the new pos, or -1 when the body would reach
    `limit`."""
    flat_coder = coder.reshape(-1)
    x = np.int64(STATE_LOW)
    n_words = np.uint64(0)
    at = np.uint64(n)
    base = np.uint64(table_base)
    while at > 0:
        at -= np.uint64(1)
        entry = ((base + np.uint64(ctxs[at])) << np.uint64(9)) | (np.uint64(syms[at]) << np.uint64(1))
        x, n_words = _rans_put(x, flat_coder, entry, words, n_words)
    n_words = np.int64(n_words)
    if pos + 4 + 2 * n_words >= limit:
        return -1
    return _write_words(words, n_words, out, _write_state(x, out, pos))


@njit(nogil=True, cache=True, boundscheck=False)
def _runs_payload(c, n_colours, colours, syms, ctxs, n, table_set, tshift, coder, words, out, base, limit, coded):
    """A runs payload (A2 mode runs.written_mode(n_colours, coded)) of n kept symbols (syms,
    ctxs: the palette's first, runs.palette_head, then the runs') at out[base:]: in mode 6
    every symbol, else the run symbols and the palette colours[:n_colours] as bytes; returns
    its length, or 0 where it would reach `limit` bytes (the tile keeps its other payload).
    table_set << tshift: the row of the runs set's first table."""
    mode = runs.written_mode(n_colours, coded)
    head = runs.palette_head(n_colours, c)  # the palette's symbols
    raw = mode != f2.TILE_RUNS_PALETTE
    pos = base + f2.RUNS_HEADER + (n_colours * c if raw else 0)
    if pos + 4 >= base + limit:
        return 0
    out[base] = mode
    out[base + 1] = table_set
    out[base + 2] = n_colours - 1
    skip = 0
    if raw:
        _write_palette(colours, n_colours, c, out, base + f2.RUNS_HEADER)
        skip = head
    end = _rans_one_lane(syms[skip:], ctxs[skip:], n - skip, table_set << tshift, coder, words, out, pos, base + limit)
    return end - base if end > 0 else 0


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _encode_runs_all(c, pal_sizes, colours, cands, kept, counts, kept_syms, kept_ctxs, table_set, tshift, coder, out,
                     starts, lengths, limits, words, coded):
    """Runs payloads (_runs_payload) of tiles i = cands[kept[k]] at out[starts[k]:] from their
    kept symbols (kept_*[i]); lengths[k] = 0 where the payload would reach limits[k] bytes."""
    chunks = words.shape[0]
    for chunk in prange(chunks):
        for k in range(chunk, kept.shape[0], chunks):
            q = kept[k]
            i = cands[q]
            lengths[k] = _runs_payload(c, pal_sizes[i], colours[i], kept_syms[i], kept_ctxs[i], counts[q], table_set,
                                       tshift, coder, words[chunk], out, starts[k], limits[k], coded)


class _RunsFound(NamedTuple):
    """The runs candidates of an image (tiles of 2 or more colours with a palette) and their
    run symbols (_palettes_all)."""

    cands: np.ndarray  # int64 (m,): tile numbers
    counts: np.ndarray  # int64 (m,): symbol counts (cut short past a runs tile's limit)
    kept_syms: np.ndarray  # uint8 (n tiles, KEPT_CAP): a candidate's symbols when at most RUNS_CAP run symbols
    kept_ctxs: np.ndarray  # uint8 (n tiles, KEPT_CAP): their contexts
    heads: np.ndarray  # int64 (m,): how many of a candidate's symbols are its palette's (runs.palette_head)
    fixed: np.ndarray  # int64 (m,): its runs payload's bytes besides the words (runs.fixed_bytes)


def _runs_found(pal_sizes: np.ndarray, runs_counts: np.ndarray, kept_syms: np.ndarray,
                kept_ctxs: np.ndarray, c: int) -> _RunsFound | None:
    """The candidates (pal_sizes > 0) and their symbols; None if there is none."""
    cands = np.flatnonzero(pal_sizes > 0)
    if cands.size == 0:
        return None
    heads, fixed = runs.heads_and_fixed(pal_sizes[cands].astype(np.int64), c)
    return _RunsFound(cands, runs_counts[cands], kept_syms, kept_ctxs, heads, fixed)


class _RunsParts(NamedTuple):
    """The runs payloads _with_runs wrote: tile i's at out[starts[i]:] when lengths[i] > 0."""

    out: np.ndarray  # uint8
    starts: np.ndarray  # int64 (n tiles,)
    lengths: np.ndarray  # int64 (n tiles,): 0 where the tile keeps its other payload


def _with_runs(c: int, pal_sizes: np.ndarray, colours: np.ndarray, found: _RunsFound, pixels: np.ndarray,
               current_all: np.ndarray, freq: np.ndarray, chunks: int, tshift: int
               ) -> tuple[_RunsParts | None, np.ndarray]:
    """(runs payloads, freq with the runs table set) as reference_v2.with_runs, or (None, freq)
    where no tile becomes a runs tile; pixels: every tile's pixel count (fmt.tile_geometry);
    current_all: every tile's payload length otherwise; tshift: 3 for eight tables per set."""
    cands = found.cands
    current = current_all[cands]
    fixed = found.fixed
    picked = runs.choose(found.kept_syms, found.kept_ctxs, cands, found.counts, fixed, current, pixels[cands],
                         found.heads)
    if picked is None:
        return None, freq
    chosen, runs_freq, coded = picked
    table_set = freq.shape[0] >> tshift
    all_freq = np.concatenate([freq, runs.table_set(runs_freq, 1 << tshift)])
    kept = np.flatnonzero(chosen)  # (runs.choose keeps only tiles of at most RUNS_CAP symbols)
    limits = current[kept]
    # A symbol emits at most one 16-bit word: room for that many, not for the payload each
    # replaces (a raw one for most: untouched pages, each a page fault).
    room = np.minimum(limits, fixed[kept] + 2 * found.counts[kept])
    starts = np.concatenate([[0], np.cumsum(room)]).astype(np.int64)
    out = np.empty(int(starts[-1]), np.uint8)
    lengths = np.zeros(kept.size, np.int64)
    words = np.empty((chunks, KEPT_CAP), np.int64)
    _encode_runs_all(c, pal_sizes, colours, cands, kept, found.counts, found.kept_syms, found.kept_ctxs, table_set,
                     tshift, _coder_table(all_freq), out, starts, lengths, limits, words, coded)
    if not lengths.any():
        return None, freq
    tile_starts = np.zeros(pixels.size, np.int64)
    tile_lengths = np.zeros(pixels.size, np.int64)
    tile_starts[cands[kept]] = starts[:-1]
    tile_lengths[cands[kept]] = lengths
    return _RunsParts(out, tile_starts, tile_lengths), all_freq


@njit(nogil=True, cache=True, boundscheck=False)
def _gather(scratch, starts, lengths, runs_out, runs_starts, runs_lengths, body, pos):
    """Every tile's payload in order into body from body[pos]: its runs payload where it has
    one, else the one at scratch[starts[i]:]."""
    for i in range(lengths.shape[0]):
        if runs_lengths[i]:
            src, at, size = runs_out, runs_starts[i], runs_lengths[i]
        else:
            src, at, size = scratch, starts[i], lengths[i]
        memops.copy(body, pos, src, at, size)
        pos += size


def _assemble(header: fmt.Header, freq: np.ndarray, scratch: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
              runs_parts: _RunsParts | None) -> bytes:
    """format_v2.assemble of the payloads in scratch (tile i's at starts[i], lengths[i] bytes),
    the runs payloads replacing theirs: one copy of the bytes, not a bytes object per tile."""
    if runs_parts is None:
        runs_parts = _RunsParts(scratch[:0], np.zeros_like(lengths), np.zeros_like(lengths))
    final = np.where(runs_parts.lengths > 0, runs_parts.lengths, lengths)
    head = np.frombuffer(f2.stream_head(header, freq, final), np.uint8)
    stream = np.empty(head.size + int(final.sum()), np.uint8)
    stream[: head.size] = head
    _gather(scratch, starts, lengths, runs_parts.out, runs_parts.starts, runs_parts.lengths, stream, head.size)
    return stream.tobytes()


# x // f = (x * ceil(2^44 / f)) >> 44 for every x < f << 20 and f <= 4096: the error term is
# below x / 2^44 < f / 2^24 <= 1 / f, too small to carry into the next integer, and the
# product stays below 2^64.
RECIPROCAL_SHIFT = 44


@njit(nogil=True, cache=True, boundscheck=False)
def _fill_coder(freq, coder):
    for t in range(freq.shape[0]):
        cum = np.int64(0)
        for s in range(256):
            f = np.int64(freq[t, s])
            coder[t, s, 0] = f | (cum << 16)
            coder[t, s, 1] = -((-(1 << RECIPROCAL_SHIFT)) // f) if f > 0 else 0
            cum += f


def _coder_table(freq: np.ndarray) -> np.ndarray:
    """int64 (n_tables, 256, 2): [f | cum << 16, ceil(2^44 / f)] per (table, symbol), the
    encoder's one load per symbol (0 for symbols of frequency 0, which are never coded)."""
    coder = np.empty(freq.shape + (2,), np.int64)
    _fill_coder(freq.astype(np.int64), coder)  # (int64 like mask_encoder's: one specialization)
    return coder


HISTOGRAM_BUDGET = 64 << 20  # bytes of per-tile histograms always allowed (_Counted)


class _Counted:
    """The encoder's symbols and what it counts from them: frequency tables over a set of
    tiles, and each tile's estimated size. From per-tile histograms when the encoder made
    them (hist has rows), else by passes over the symbols (_count_all, _estimate_all). A tile's
    histogram rows hold its counts only where it has symbols (symbols[1], the counts, > 0):
    every reader skips the others'."""

    def __init__(self, h: int, w: int, c: int, tile: int, choices: np.ndarray, min_log2: int,
                 symbols: tuple[np.ndarray, ...], hist: np.ndarray, phist: np.ndarray, tables: np.ndarray,
                 tshift: int) -> None:
        self.h, self.w, self.c, self.tile = h, w, c, tile
        self.choices, self.min_log2, self.symbols = choices, min_log2, symbols
        self.hist, self.phist, self.scratch = hist, phist, tables
        self.tshift = tshift  # tables per set: 1 << tshift
        # No coded or palette symbols at all (a mask of constant tiles and runs tiles): every
        # count is 0, and estimates need no pass over the tiles.
        self.empty = not (symbols[1] > 0).any() and symbols[4].size == 0

    def folded(self) -> _Counted:
        """The same analysis with four tables per set (no plane bits): each plane's eight
        histogram rows added in pairs (table_sets.fold_plane_contexts)."""
        hist = self.hist
        if hist.shape[0]:
            n = hist.shape[0]
            hist = hist.reshape(n, self.c, 2, f2.CONTEXTS, 256).sum(axis=2, dtype=np.uint16).reshape(n, -1, 256)
        return _Counted(self.h, self.w, self.c, self.tile, self.choices, self.min_log2, self.symbols, hist, self.phist,
                        self.scratch, 2)

    def tables(self, keep: np.ndarray, pick: np.ndarray, sets: np.ndarray, n_sets: int) -> np.ndarray:
        """Normalised frequency tables of the kept tiles' picked choices (planes in the sets of
        `sets`, a default_sets array)."""
        return frequencies.normalize_rows(self.counts(keep, pick, sets, n_sets))

    def counts(self, keep: np.ndarray, pick: np.ndarray, sets: np.ndarray, n_sets: int) -> np.ndarray:
        """(n_sets << tshift, 256) counts of (table, symbol) of the kept tiles' picked choices."""
        if self.empty:
            return np.zeros((n_sets << self.tshift, 256), np.int64)
        chunks = self.scratch.shape[0]
        if self.hist.shape[0]:
            # int32 partial counts (an image has at most 2^30 symbols): eight to a vector register
            counts = np.zeros((chunks, n_sets << self.tshift, 256), np.int32)
            _count_hist(self.c, self.choices, keep, pick, sets, self.hist, self.phist, self.symbols[1], counts,
                        self.tshift)
            totals = counts.sum(axis=0, dtype=np.int64)
        else:
            counts = np.zeros((chunks, 4, n_sets << self.tshift, 256), np.int64)
            _count_all(self.h, self.w, self.c, self.tile, self.choices, keep, pick, sets, *self.symbols, counts,
                       self.scratch, self.tshift)
            totals = counts.sum(axis=(0, 1))
        return totals

    def estimates(self, pick: np.ndarray, sets: np.ndarray, cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(estimated payload bytes, the symbols' summed cost) of every tile; the costs are -1 (for
        _rans_body to add up) without histograms."""
        n = self.choices.shape[0]
        sizes = np.zeros(n, np.int64)
        totals = np.full(n, -1, np.int64)
        if self.empty and not pick.any():
            # Every plane constant (a sure tile's too): 2 + C bytes and one per constant plane,
            # no lanes and no symbols (_estimate_hist and _estimate_all, in closed form).
            sizes[:] = 2 + self.c + self.choices[:, 5 : 5 + self.c].sum(axis=1)
            if self.hist.shape[0]:
                totals[:] = 0
        elif self.hist.shape[0]:
            _estimate_hist(self.h, self.w, self.tile, self.c, self.choices, pick, sets, self.min_log2,
                           cost.astype(np.int32), sizes, totals, self.hist, self.phist, self.symbols[1], self.tshift)
        else:
            _estimate_all(self.h, self.w, self.c, self.tile, self.choices, pick, sets, self.min_log2, cost, sizes,
                          *self.symbols, self.scratch, self.tshift)
        return sizes, totals


def default_sets(n: int, c: int, n_sets: int) -> np.ndarray:
    """(n, 5) table sets of every tile's planes 0-3 and palette index plane (PALETTE_SET) when
    each plane has its own: plane k in set k, index planes in set C (clipped to n_sets - 1)."""
    row = np.minimum(np.array([0, 1, 2, 3, c]), n_sets - 1)
    return np.repeat(row[None, :], n, axis=0).astype(np.int64)


def _with_table_sets(counted: _Counted, keep: np.ndarray, pick: np.ndarray, sets: np.ndarray, n_sets: int,
                     freq: np.ndarray, sizes: np.ndarray, totals: np.ndarray, counts: np.ndarray
                     ) -> tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray]:
    """(sets, n_sets, freq, totals, counts) with table sets per tile class (table_sets.propose,
    compiled)
    when the stream's measure (table_sets.stream_bytes) is smaller; else those given (as
    reference_v2.with_table_sets). sizes, totals: the estimates under freq; counts: freq's."""
    c, choices = counted.c, counted.choices
    n = choices.shape[0]
    planes = np.zeros((n, 5), np.bool_)  # the items: coded planes of kept tiles, index planes of palette tiles
    planes[:, :c] = (keep & ~pick)[:, None] & (choices[:, 5 : 5 + c] == 0)
    planes[:, PALETTE_SET] = keep & pick
    tile_of, plane_of = np.nonzero(planes)  # tile order, then plane order
    if tile_of.size < 2:  # nothing to split (table_sets.propose would leave the sets)
        return sets, n_sets, freq, totals, counts
    per_set = 1 << counted.tshift
    items = table_sets.histogram_items(counted.hist, counted.phist, tile_of, plane_of, per_set, PALETTE_SET)
    now = sets[tile_of, plane_of]
    proposal, n_proposed = table_sets.propose_compiled(items, now, n_sets, f2.MAX_SETS_PER_CHANNEL * c)
    if n_proposed == n_sets and (proposal == now).all():
        return sets, n_sets, freq, totals, counts
    proposed = np.zeros_like(sets)  # planes that are not items name no set: 0 is always valid
    proposed[tile_of, plane_of] = proposal
    proposed_counts = counted.counts(keep, pick, proposed, n_proposed)
    proposed_freq = frequencies.normalize_rows(proposed_counts)
    proposed_sizes, proposed_totals = counted.estimates(pick, proposed, frequencies.cost_table(proposed_freq))
    # Tiles' bytes besides their symbols, from the estimates (which add the symbols' costs // 128).
    overhead = int((sizes - totals // 128)[keep].sum())
    proposed_overhead = int((proposed_sizes - proposed_totals // 128)[keep].sum())
    before = table_sets.stream_bytes(overhead, counts, freq)
    after = table_sets.stream_bytes(proposed_overhead, proposed_counts, proposed_freq)
    if after < before:
        return proposed, n_proposed, proposed_freq, proposed_totals, proposed_counts
    return sets, n_sets, freq, totals, counts


# ----------------------------------------------------------------------------- decoder


def decode_table(plan: plan_mod.Plan) -> np.ndarray:
    """uint32 (n_tables, 4096): slot -> symbol | (f - 1) << 8 | (slot - cum) << 20, one load
    per decoded symbol (empty tables, flagged through plan.empty: undefined slots, never
    trusted: a decoder refuses a tile that draws a symbol from one)."""
    if plan.dec is not None:  # built by hostplan while it validated the tables
        return plan.dec[: plan.freq.shape[0] * f2.PROB_SCALE].reshape(-1, f2.PROB_SCALE)
    packed = np.empty((plan.lut.shape[0], f2.PROB_SCALE), np.uint32)
    _pack_tables(plan.lut, plan.freq, plan.cum, packed)
    return packed


@njit(nogil=True, cache=True, boundscheck=False)
def _pack_tables(lut, freq, cum, packed):
    for t in range(np.uint64(lut.shape[0])):
        for slot in range(np.uint64(lut.shape[1])):
            v = np.uint64(lut[t, slot])
            f = np.int64(freq[t, v])
            if f > 0:
                packed[t, slot] = v | ((f - 1) << 8) | ((slot - cum[t, v]) << 20)
            else:
                packed[t, slot] = v


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _context_value(symbols, i, wmask):
    """Context value u (A4) of the symbol at symbols[SYM0 + i]: the symbol 64 earlier, and
    with wmask = 255 (wide contexts; 0 otherwise) the largest of it and those 63, 65 and 128
    earlier."""
    at = np.uint64(i) + np.uint64(SYM0)
    return np.uint64(max(symbols[at - np.uint64(64)], _largest_back(symbols, at) & wmask))


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _rans_step(src, pos, last, i, mask, tset, dec, empty, ctx_of, wmask, back, symbols, states):
    """One symbol (A6), renormalisation branch-free with the word read clamped inside the
    payload: (new pos, error bits: 1 empty table, 2 words overrun). back: _plane_back's."""
    t = tset + ctx_of[_context_value(symbols, i, wmask)] + _plane_bit(symbols, np.uint64(i + SYM0), back)
    j = i & mask
    x = states[j]
    e = np.int64(dec[t, x & 4095])
    x = ((e >> 8) & 4095) * (x >> PROB_BITS) + (x >> PROB_BITS) + (e >> 20)
    need = np.int64(x < STATE_LOW)
    at = min(pos, last)
    word = np.int64(src[at]) | (np.int64(src[at + 1]) << 8)
    flags = empty[t] | (2 * (need & np.int64(pos > last)))
    states[j] = (x << (16 * need)) | (word * need)
    symbols[i + SYM0] = e & 255
    return pos + 2 * need, flags


if rans_avx2.AVAILABLE:

    @njit(nogil=True, cache=True, boundscheck=False, inline="always")
    def _table_bases32(symbols, i, table_of, ctx16, wmask, back, bases):
        """bases[k] = table_of[context value of symbol i + k] (+ the plane bit's rows, back:
        _plane_back's) for k < 32 (rans_avx2)."""
        row = symbols[np.uint64(i) : np.uint64(i + SYM0 + 32)]
        rans_avx2.table_bases32(row, np.uint64(0), table_of[0], ctx16, wmask, _prev32(symbols, i, back),
                                _plane_bit32(back), bases)

else:

    @njit(nogil=True, cache=True, boundscheck=False, inline="always")
    def _table_bases32(symbols, i, table_of, ctx16, wmask, back, bases):
        """bases[k] = table_of[context value of symbol i + k] (+ the plane bit's rows, back:
        _plane_back's) for k < 32."""
        for k in range(32):
            bit = _plane_bit(symbols, np.uint64(i + k + SYM0), back)
            bases[k] = table_of[_context_value(symbols, i + k, wmask)] + np.int64(bit << np.uint64(12))


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _prev32(symbols, i, back):
    """The 32 symbols one plane back of symbols i .. i + 31 (plane bits, back > 0; with back
    0 any 32 readable symbols, which _plane_bit32 then ignores)."""
    at = np.uint64(i + SYM0) - np.uint64(back) if back else np.uint64(i)
    return symbols[at : at + np.uint64(32)]


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _plane_bit32(back):
    """rans_avx2's pbit: what a plane bit adds to a context (PLANE_CONTEXT), 0 without plane bits."""
    return np.uint8(f2.PLANE_CONTEXT) if back else np.uint8(0)


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _words_ahead(src, pos, end):
    """How many 16-bit words the rounds of a tile whose words start at pos (and end at end)
    may read: its own and up to TAIL_WORDS after them, within src."""
    return np.uint64(max(min(src.size, end + 2 * TAIL_WORDS) - pos, 0) >> 1)


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _rounds32_left(i, stop, w, n_words):
    """How many whole 32-symbol rounds surely fit before symbol `stop` and in the words
    left (a round reads at most 32 words: one per lane)."""
    if i >= stop or w >= n_words:
        return np.int64(0)
    return min(np.int64(stop - i) >> 5, np.int64(n_words - w) >> 5)


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _two_symbols(words, last_word, w, i, row0, row1, x0, x1, flat, symbols):
    """Symbols i and i + 1 (lanes 0 and 1) from the table rows row0, row1 of the flat decode
    table: each to symbols[SYM0 + i], its lane state updated and renormalised from the
    words (clamped reads; w > the word count is caught by _rans). Returns (x0, x1, w)."""
    e0 = np.int64(flat[np.uint64(row0) + np.uint64(x0 & 4095)])
    e1 = np.int64(flat[np.uint64(row1) + np.uint64(x1 & 4095)])
    x0 = ((e0 >> 8) & 4095) * (x0 >> PROB_BITS) + (x0 >> PROB_BITS) + (e0 >> 20)
    x1 = ((e1 >> 8) & 4095) * (x1 >> PROB_BITS) + (x1 >> PROB_BITS) + (e1 >> 20)
    symbols[np.uint64(i + SYM0)] = e0 & 255
    symbols[np.uint64(i + SYM0 + 1)] = e1 & 255
    take = x0 < STATE_LOW
    x0 = ((x0 << 16) | np.int64(words[min(w, last_word)])) if take else x0
    w += np.uint64(take)
    take = x1 < STATE_LOW
    x1 = ((x1 << 16) | np.int64(words[min(w, last_word)])) if take else x1
    w += np.uint64(take)
    return x0, x1, w


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _rans_two_lanes(words, last_word, w, i, stop, table_of, ctx16, wmask, back, bases, flat, symbols, states):
    """_rans's whole rounds for 2 lanes, the states in local variables: each symbol's state
    update waits on the previous one of its lane, and a round trip through the states array
    would add a store-to-load forward to that chain. Narrow contexts take the table row from
    the symbol 64 back; wide ones get the rows of 32 symbols at a time (_table_bases32), off
    that chain (and so do plane bits, back > 0). Returns (i, w)."""
    x0 = states[0]
    x1 = states[1]
    while wmask == 0 and back == 0 and i + 2 <= stop:
        row0 = table_of[symbols[np.uint64(i + SYM0 - 64)]]
        row1 = table_of[symbols[np.uint64(i + SYM0 - 63)]]
        x0, x1, w = _two_symbols(words, last_word, w, i, row0, row1, x0, x1, flat, symbols)
        i += 2
    while i + 2 <= stop:
        _table_bases32(symbols, i, table_of, ctx16, wmask, back, bases)
        block_end = min(stop, i + 32)
        i0 = i
        while i + 2 <= block_end:
            b = np.uint64(i - i0)
            x0, x1, w = _two_symbols(words, last_word, w, i, bases[b], bases[b + np.uint64(1)], x0, x1, flat, symbols)
            i += 2
    states[0] = x0
    states[1] = x1
    return i, w


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _lane_symbol(row, j, x, base, flat):
    """Decode lane j's symbol of a whole round (row = symbols[i : i + SYM0 + lanes]) with
    the table row `base` into row[SYM0 + j]; return the lane's state before renormalisation."""
    # Unsigned indices: numba adds no negative-index fix-up to these loads.
    e = np.int64(flat[np.uint64(base) + np.uint64(x & 4095)])
    row[j + np.uint64(SYM0)] = e & 255
    return ((e >> 8) & 4095) * (x >> PROB_BITS) + (x >> PROB_BITS) + (e >> 20)


if rans_avx2.AVAILABLE:

    @njit(nogil=True, cache=True, boundscheck=False, inline="always")
    def _block32(symbols, i, lanes, x, flat, tbase, ctx16, wmask, back, bases, words, w, permute):
        """Symbols i .. i + 31 of a tile of 8, 16 or 32 lanes (whole rounds; their context
        symbols, at least 63 back, decoded): a 32-lane tile's round with its table rows in
        registers (rans_round32), else table_bases32 and the rounds' steps. The caller
        guarantees 32 readable words at w. Returns the new w."""
        if lanes == 32:
            return rans_avx2.rans_round32(symbols[np.uint64(i) : np.uint64(i + SYM0 + 32)], x, flat, tbase, ctx16,
                                          wmask, _prev32(symbols, i, back), _plane_bit32(back), words, w, permute)
        rans_avx2.table_bases32(symbols[np.uint64(i) : np.uint64(i + SYM0 + 32)], np.uint64(0), tbase, ctx16, wmask,
                                _prev32(symbols, i, back), _plane_bit32(back), bases)
        ulanes = np.uint64(lanes)
        for b0 in range(np.uint64(0), np.uint64(32), ulanes):
            row = symbols[np.uint64(i) + b0 : np.uint64(i + SYM0) + b0 + ulanes]
            for j0 in range(np.uint64(0), ulanes, np.uint64(8)):
                w = rans_avx2.rans_step8(row, j0, x, j0, flat, bases, b0 + j0, words, w, permute)
        return w

    @njit(nogil=True, cache=True, boundscheck=False)
    def _vector_rounds(words, n_words, w, i, stop, lanes, tbase, ctx16, wmask, back, bases, x, flat, symbols, states):
        """Whole rounds of `lanes` (8, 16 or 32) symbols, eight lanes per AVX2 step
        (rans_avx2), while a whole round of words is left; x: scratch for the uint32
        states; back: _plane_back's. Returns (i, w)."""
        ulanes = np.uint64(lanes)
        for j in range(lanes):
            x[j] = states[j]
        permute = rans_avx2.PERMUTE
        # Narrow contexts of 8 or 16 lanes: each step takes its contexts itself.
        if wmask == 0 and back == 0 and lanes != 32:
            while i + lanes <= stop and w + ulanes <= n_words:
                row = symbols[np.uint64(i) : np.uint64(i + SYM0 + lanes)]
                for j0 in range(np.uint64(0), ulanes, np.uint64(8)):
                    w = rans_avx2.rans_step8_narrow(row, j0, x, j0, flat, tbase, words, w, permute)
                i += lanes
        # Blocks of 32 symbols: their table rows at once (their context symbols are at least
        # 63 back: decoded), then the block's rounds. A 32-lane tile runs as many rounds as
        # surely fit in the plane and the words in one call (rans_rounds32: table rows and
        # lane states in registers), then again on what is left.
        if lanes == 32:
            n = _rounds32_left(i, stop, w, n_words)
            while n > 0:
                w = rans_avx2.rans_rounds32(np.uint64(n), symbols, np.uint64(i), x, tbase, ctx16, wmask,
                                            np.uint64(back), words, w, flat, permute)
                i += 32 * n
                n = _rounds32_left(i, stop, w, n_words)
        while i + lanes <= stop and w + ulanes <= n_words:
            rans_avx2.table_bases32(symbols[np.uint64(i) : np.uint64(i + SYM0 + 32)], np.uint64(0), tbase, ctx16, wmask,
                                    _prev32(symbols, i, back), _plane_bit32(back), bases)
            for b0 in range(np.uint64(0), np.uint64(32), ulanes):
                if i + lanes > stop or w + ulanes > n_words:
                    break
                row = symbols[np.uint64(i) : np.uint64(i + SYM0 + lanes)]
                for j0 in range(np.uint64(0), ulanes, np.uint64(8)):
                    w = rans_avx2.rans_step8(row, j0, x, j0, flat, bases, b0 + j0, words, w, permute)
                i += lanes
        for j in range(lanes):
            states[j] = x[j]
        return i, w

else:

    @njit(nogil=True, cache=True, boundscheck=False)
    def _vector_rounds(words, n_words, w, i, stop, lanes, tbase, ctx16, wmask, back, bases, x, flat, symbols, states):
        """No AVX2: the scalar rounds of _rans_rounds do all the work."""
        return i, w


# The decoder's kernels marked `_nrt=False` (from here to _decode_loop, and runs.decode_tile) never
# allocate, so they are compiled without numba's reference counts. With them, every array argument, view and slice that a
# per-tile or per-row call passes on took an atomic increment and decrement: NRT_incref and
# NRT_decref were 19% of the masks' decode time and 8% of small photographs' (perf, stop 38).
# Without them masks decode 10-15% faster and 512x512 photographs 3-11%; large images, whose
# time is in the symbols, gain nothing measurable (docs/BENCHMARKS.md "Decoder kernels without
# reference counts"). The arrays live as long as _decode_strided's call, which holds them.
@njit(nogil=True, cache=True, boundscheck=False, _nrt=False)
def _rans_rounds(words, n_words, last_word, w, i, stop, lanes, table_of, ctx16, wmask, back, bases, xstates, flat,
                 symbols, states, vector=True):
    """_rans's whole rounds of `lanes` symbols (lanes >= 4). With AVX2 (and `vector`, which
    tests turn off to compare), tiles of 8 or more lanes go eight lanes at a time
    (_vector_rounds) while a whole round of words is left; otherwise, and for the rounds
    after, each lane reads its word unchecked while a whole round of words is left
    (w + lanes <= n_words), and clamped in the last rounds (w > n_words is caught by the
    caller). A function of its own so that its few live values stay in registers.
    Returns (i, w)."""
    ulanes = np.uint64(lanes)
    if vector and lanes >= 8:
        # table_of[0] is the plane's context-0 table (context value 0 is context 0) times
        # 4096: the base to which the vector step adds context * 4096 + slot.
        i, w = _vector_rounds(words, n_words, w, i, stop, lanes, table_of[0], ctx16, wmask, back, bases, xstates,
                              flat, symbols, states)
    b = np.uint64(32)  # bases: the table rows of the next symbols, 32 at a time
    while i + lanes <= stop and w + ulanes <= n_words:
        if b == np.uint64(32):
            _table_bases32(symbols, i, table_of, ctx16, wmask, back, bases)
            b = np.uint64(0)
        row = symbols[np.uint64(i) : np.uint64(i + SYM0 + lanes)]
        for j in range(ulanes):
            x = _lane_symbol(row, j, states[j], bases[b + j], flat)
            # Arithmetic, not a select: LLVM turns a select here into an unpredictable branch.
            need = np.int64(x < STATE_LOW)
            states[j] = (x << (need << 4)) | (np.int64(words[w]) & -need)
            w += np.uint64(need)
        b += ulanes
        i += lanes
    while i + lanes <= stop:
        if b == np.uint64(32):
            _table_bases32(symbols, i, table_of, ctx16, wmask, back, bases)
            b = np.uint64(0)
        row = symbols[np.uint64(i) : np.uint64(i + SYM0 + lanes)]
        for j in range(ulanes):
            x = _lane_symbol(row, j, states[j], bases[b + j], flat)
            take = x < STATE_LOW
            word = np.int64(words[min(w, last_word)])  # clamped: w > n_words is caught by _rans
            states[j] = ((x << 16) | word) if take else x
            w += np.uint64(take)
        b += ulanes
        i += lanes
    return i, w


# A colour tile's row (up to 64 pixels of up to 4 bytes), with room for the byte that the
# last three-channel pixel's 32-bit store of _palette_pixels writes past it.
LINE_BYTES = 4 * max(fmt.TILE_SIZES) + 4


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _decode_scratch_arrays():
    """The decoder's scratch arrays, made once per thread, not per tile: _rans's lane
    states, map from context value to table row (table_of), next 32 symbols' table rows
    (bases) and the vector step's uint32 lane states; then the MED inverse's rows and
    diagonals (med_simd.scratch); then a runs tile's boundaries and colour maps
    (runs.decode_tile); then a palette's colours as 32-bit words (_palette_pixels); then
    the row that colour tiles are interleaved into before it is copied out (LINE_BYTES)."""
    return (np.empty(MAX_LANES, np.int64), np.empty(256, np.int64), np.empty(32, np.int32),
            np.empty(MAX_LANES, np.uint32), med_simd.scratch(), np.empty(128, np.int64),
            np.empty(runs.MAPS_BYTES, np.uint8), np.empty(256, np.uint32), np.empty(LINE_BYTES, np.uint8))


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _table_rows(tset, ctx_of, table_of):
    """table_of[u] = the flat decode table's row of context value u's table in set tset."""
    for v in range(256):
        table_of[v] = (tset + ctx_of[v]) * 4096


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _any_empty(empty, tset, tshift):
    """Whether any of the 1 << tshift tables of the set starting at row tset is empty."""
    found = np.int64(0)
    for t in range(tset, tset + (np.int64(1) << tshift)):
        found |= empty[t]
    return found != 0


@njit(nogil=True, cache=True, boundscheck=False, _nrt=False)
def _rans(src, pos, end, start, c, plane, base, lanes, dec, empty, ctx_of, ctx16, wmask, tshift, symbols, scratch,
          resume_i=0, resume_pos=-1):
    """Decode the tile's n_rans * plane symbols into symbols[SYM0:]; return an error code.
    tshift: 3 for a stream with plane contexts (eight tables per set, plane bits), else 2.
    resume_pos >= 0: symbols 0 .. resume_i - 1 are decoded already (_pair_rounds; resume_i a
    whole round), the lane states are in scratch[0] and the next word is at resume_pos; the
    planes before resume_i get only their checks.

    symbols[0:SYM0] is zero (the context symbols before the first, A4) and symbol i lands at
    symbols[SYM0 + i], so its context symbols are read without a branch (_context_value;
    ctx_of and ctx16 are the stream's rows of CONTEXT_OF and CONTEXT16, wmask 255 for wide
    contexts, else 0).
    Whole rounds of `lanes` symbols decode lane by lane, each lane taking its 16-bit word
    (through a u16 view of the payload) with a select, not a branch; the partial rounds at
    plane boundaries take one symbol at a time. table_of (256 int64, scratch) maps the
    context value to the row of the plane's table in the flat decode table, so a symbol
    costs three dependent loads and no address arithmetic. A symbol decoded from an empty
    table is found after the plane, by a scan that only runs when its table set has one.
    """
    mask = lanes - 1
    flags = np.int64(0)
    i = 0
    last = end - 2
    flat = dec.reshape(-1)
    states, table_of, bases, xstates = scratch[0], scratch[1], scratch[2], scratch[3]  # (_decode_scratch_arrays)
    if resume_pos >= 0:
        pos = resume_pos
    for k in range(c):
        chb = np.int64(src[start + 2 + k])
        if chb == 0:
            continue
        tset = base + ((chb >> 4) << tshift)
        _table_rows(tset, ctx_of, table_of)
        first = i
        back = _plane_back(np.uint64(first), plane, tshift, False)
        stop = i + plane
        if stop <= resume_i:  # decoded by _pair_rounds: the empty-table check alone
            if _any_empty(empty, tset, tshift if back else 2):
                for q in range(first, stop):
                    flags |= empty[tset + ctx_of[_context_value(symbols, q, wmask)]
                                   + _plane_bit(symbols, np.uint64(q + SYM0), back)]
            i = stop
            continue
        i = max(i, resume_i)
        while i < stop and (i & mask) != 0:
            pos, f = _rans_step(src, pos, last, i, mask, tset, dec, empty, ctx_of, wmask, back, symbols, states)
            flags |= f
            i += 1
        if i + lanes <= stop:
            n_words = np.uint64(max(end - pos, 0) >> 1)
            # The rounds read whole rounds of words unchecked while TAIL_WORDS words of src lie
            # ahead, the tile's own or those after it: a valid tile never takes a word past its
            # own (its last rounds need not go one symbol at a time), and w > n_words is refused
            # below whatever was read.
            n_ahead = _words_ahead(src, pos, end)
            words = src[pos : pos + 2 * np.int64(n_ahead)].view(np.uint16) if n_ahead > 0 else _NO_WORDS
            last_word = n_words - np.uint64(1) if n_words > 0 else np.uint64(0)
            last_ahead = n_ahead - np.uint64(1) if n_ahead > 0 else np.uint64(0)
            w = np.uint64(0)
            if lanes == 2:  # tiny tiles (masks): the two states in registers, not memory
                i, w = _rans_two_lanes(words, last_word, w, i, stop, table_of, ctx16, wmask, back, bases, flat,
                                       symbols, states)
            i, w = _rans_rounds(words, n_ahead, last_ahead, w, i, stop, lanes, table_of, ctx16, wmask, back, bases,
                                xstates, flat, symbols, states)
            if _any_empty(empty, tset, tshift if back else 2):  # (the plane-bit tables only with plane bits)
                for q in range(first, i):  # (an empty table's slots are undefined: bounded garbage)
                    flags |= empty[tset + ctx_of[_context_value(symbols, q, wmask)]
                                   + _plane_bit(symbols, np.uint64(q + SYM0), back)]
            if w > n_words:
                return plan_mod.ERR_TABLE if flags & 1 else plan_mod.ERR_WORDS
            pos += 2 * np.int64(w)
        while i < stop:
            pos, f = _rans_step(src, pos, last, i, mask, tset, dec, empty, ctx_of, wmask, back, symbols, states)
            flags |= f
            i += 1
    if flags & 1:
        return plan_mod.ERR_TABLE
    if flags & 2:
        return plan_mod.ERR_WORDS
    if pos != end:
        return plan_mod.ERR_WORDS
    for j in range(lanes):
        if states[j] != STATE_LOW:
            return plan_mod.ERR_STATE
    return 0


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _two_lane_plane(src, item):
    """The symbol count of a tile whose rANS part is one plane coded with 2 lanes (a coded
    one-channel tile or a palette tile: most mask tiles), else 0. Such tiles decode in pairs
    (_pair_symbols); a plane of odd size takes the one-tile path."""
    start = item[0]
    mode = src[start]
    plane = item[2] * item[3]
    if (src[start + 1] >> 4) != 1 or plane & 1:
        return 0
    if mode == f2.TILE_PALETTE or (mode == f2.TILE_CODED and item[4] == 1 and src[start + 2] != 0):
        return plane
    return 0


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _pair_setup(src, item, base, ctx_of, table_of):
    """A two-lane tile's (lane states' position, payload end, table set, wmask, wide flag);
    table_of gets the plane's table rows (base: the row of the image's first table in dec)."""
    start, end = item[0], item[1]
    wide = item[plan_mod.WIDE]
    if src[start] == f2.TILE_PALETTE:
        pos = start + 4 + (np.int64(src[start + 2]) + 1) * item[4]
        chb = np.int64(src[start + 3])
    else:
        pos = start + 3
        chb = np.int64(src[start + 2])
    tset = base + ((chb >> 4) << (2 + item[plan_mod.PLANE]))
    _table_rows(tset, ctx_of[wide], table_of)
    return pos, end, tset, np.uint8(255) if wide else np.uint8(0), wide


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _pair_check(src, pos, end, w, x0, x1, tset, empty, ctx, wmask, symbols, plane):
    """The checks _rans makes after a two-lane plane: every word used, final states, no
    symbol from an empty table."""
    if pos + 8 + 2 * np.int64(w) != end or x0 != STATE_LOW or x1 != STATE_LOW:
        return False
    if _any_empty(empty, tset, 2):  # (two-lane planes have no plane bits)
        for q in range(plane):
            if empty[tset + ctx[_context_value(symbols, q, wmask)]]:
                return False
    return True


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _rans_part(src, item):
    """Where a tile's rANS part is described, for _pair_rounds: (the `start` _rans reads its
    channel bytes from, its plane count, the position of its lane states, its lane count), or
    plane count 0 unless it is a coded or palette tile of 8, 16 or 32 lanes whose plane is
    whole blocks of 32 symbols (th * tw a multiple of 32) with at least one rANS plane."""
    start = item[0]
    mode = src[start]
    lanes_log2 = np.int64(src[start + 1]) >> 4
    lanes = np.int64(1) << lanes_log2
    if lanes_log2 < 3 or (item[2] * item[3]) & 31:
        return start, 0, start, lanes
    if mode == f2.TILE_PALETTE:
        return start + 1, 1, start + 4 + (np.int64(src[start + 2]) + 1) * item[4], lanes
    if mode != f2.TILE_CODED:
        return start, 0, start, lanes
    c = item[4]
    pos = start + 2 + c
    n_rans = 0
    for k in range(c):
        if src[start + 2 + k] == 0:
            pos += 1  # the constant plane's value byte
        else:
            n_rans += 1
    return start, c if n_rans else 0, pos, lanes


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _next_plane(src, start, c, k, i, plane, base, tshift):
    """The rANS plane after plane k - 1 of a tile (_rans_part's start and c), which starts at
    symbol i: (its index k, its context-0 table's row times 4096 in the flat decode table,
    its plane-bit distance); k = c when none is left."""
    while k < c and src[start + 2 + k] == 0:
        k += 1
    if k == c:
        return k, np.int64(0), np.uint64(0)
    tset = base + ((np.int64(src[start + 2 + k]) >> 4) << tshift)
    return k, tset * 4096, _plane_back(np.uint64(i), plane, tshift, False)


if rans_avx2.AVAILABLE:

    @njit(nogil=True, cache=True, boundscheck=False, _nrt=False, inline="always")
    def _pair_rounds(src, item_a, base_a, item_b, base_b, dec, empty, ctx_of, sym_a, sym_b, scratch_a, scratch_b,
                     both32):
        """Decode the rANS symbols of two tiles of 8, 16 or 32 lanes (_rans_part), their whole
        rounds in one loop, 32 symbols of one tile then 32 of the other: a tile's rounds form
        one chain (each round's table loads wait for the states and contexts of the round
        before), and the other tile's rounds fill the wait (docs/BENCHMARKS.md "Two tiles'
        rounds in one loop").
        Each tile then finishes in _rans (resume_i), which also makes every check a tile decoded
        on its own makes. Returns the two error codes, or (-1, -1) when a lane state is out of
        range (nothing decoded: each tile on its own then finds and names the error). both32:
        a constant, True when both tiles have 32 lanes."""
        start_a, c_a, pos_a, lanes_a = _rans_part(src, item_a)
        start_b, c_b, pos_b, lanes_b = _rans_part(src, item_b)
        if not (_lane_states(src, pos_a, lanes_a, scratch_a[0]) and _lane_states(src, pos_b, lanes_b, scratch_b[0])):
            return np.int64(-1), np.int64(-1)
        end_a, end_b = item_a[1], item_b[1]
        plane_a, plane_b = item_a[2] * item_a[3], item_b[2] * item_b[3]
        wide_a, wide_b = item_a[plan_mod.WIDE], item_b[plan_mod.WIDE]
        tshift_a, tshift_b = 2 + item_a[plan_mod.PLANE], 2 + item_b[plan_mod.PLANE]
        wmask_a = np.uint8(255) if wide_a else np.uint8(0)
        wmask_b = np.uint8(255) if wide_b else np.uint8(0)
        ctx16_a, ctx16_b = CONTEXT16[wide_a], CONTEXT16[wide_b]
        # Each tile's words as one run over its planes (_rans takes each plane's from where the
        # one before stopped: the same words in the same order), with the TAIL_WORDS words of
        # src after them, as _rans reads them: the rounds read whole rounds of words unchecked
        # to the tile's last round (a valid tile never takes a word past its own; _rans refuses
        # a resume position past the tile's end). Bounded by the tile's own words, a low-entropy
        # tile (a few hundred words for 12,288 symbols) left its last rounds, and its partner's,
        # to the one-tile loops.
        words_at_a, words_at_b = pos_a + 4 * lanes_a, pos_b + 4 * lanes_b
        n_words_a = _words_ahead(src, words_at_a, end_a)
        n_words_b = _words_ahead(src, words_at_b, end_b)
        words_a = src[words_at_a : words_at_a + 2 * np.int64(n_words_a)].view(np.uint16) if n_words_a else _NO_WORDS
        words_b = src[words_at_b : words_at_b + 2 * np.int64(n_words_b)].view(np.uint16) if n_words_b else _NO_WORDS
        xa, xb = scratch_a[3], scratch_b[3]
        for j in range(lanes_a):
            xa[j] = scratch_a[0][j]
        for j in range(lanes_b):
            xb[j] = scratch_b[0][j]
        flat = dec.reshape(-1)
        permute = rans_avx2.PERMUTE
        ka, tbase_a, back_a = _next_plane(src, start_a, c_a, 0, 0, plane_a, base_a, tshift_a)
        kb, tbase_b, back_b = _next_plane(src, start_b, c_b, 0, 0, plane_b, base_b, tshift_b)
        ia = ib = 0
        stop_a, stop_b = plane_a, plane_b
        wa = wb = np.uint64(0)
        u32 = np.uint64(32)
        while ka < c_a and kb < c_b:
            if both32:  # (a constant) as many rounds as surely fit in both tiles' planes and
                # words in one call (rans_pair32: the 64 lane states in registers)
                n = min(_rounds32_left(ia, stop_a, wa, n_words_a), _rounds32_left(ib, stop_b, wb, n_words_b))
                if n <= 0:
                    break
                wa, wb = rans_avx2.rans_pair32(np.uint64(n), sym_a, np.uint64(ia), xa, tbase_a, ctx16_a, wmask_a,
                                               back_a, words_a, wa, sym_b, np.uint64(ib), xb, tbase_b, ctx16_b,
                                               wmask_b, back_b, words_b, wb, flat, permute)
            else:  # one block of 32 symbols of each
                if wa + u32 > n_words_a or wb + u32 > n_words_b:
                    break
                n = 1
                wa = _block32(sym_a, ia, lanes_a, xa, flat, tbase_a, ctx16_a, wmask_a, back_a, scratch_a[2], words_a,
                              wa, permute)
                wb = _block32(sym_b, ib, lanes_b, xb, flat, tbase_b, ctx16_b, wmask_b, back_b, scratch_b[2], words_b,
                              wb, permute)
            ia += 32 * n
            ib += 32 * n
            if ia == stop_a:
                ka, tbase_a, back_a = _next_plane(src, start_a, c_a, ka + 1, ia, plane_a, base_a, tshift_a)
                stop_a += plane_a
            if ib == stop_b:
                kb, tbase_b, back_b = _next_plane(src, start_b, c_b, kb + 1, ib, plane_b, base_b, tshift_b)
                stop_b += plane_b
        for j in range(lanes_a):
            scratch_a[0][j] = xa[j]
        for j in range(lanes_b):
            scratch_b[0][j] = xb[j]
        err_a = _rans(src, words_at_a, end_a, start_a, c_a, plane_a, base_a, lanes_a, dec, empty, ctx_of[wide_a], ctx16_a,
                      wmask_a, tshift_a, sym_a, scratch_a, ia, words_at_a + 2 * np.int64(wa))
        err_b = _rans(src, words_at_b, end_b, start_b, c_b, plane_b, base_b, lanes_b, dec, empty, ctx_of[wide_b], ctx16_b,
                      wmask_b, tshift_b, sym_b, scratch_b, ib, words_at_b + 2 * np.int64(wb))
        return err_a, err_b

    @njit(nogil=True, cache=True, boundscheck=False, _nrt=False)
    def _pair_rounds32(src, item_a, base_a, item_b, base_b, dec, empty, ctx_of, sym_a, sym_b, scratch_a, scratch_b):
        """_pair_rounds of two 32-lane tiles: their rounds in rans_pair32 (the blocks of fewer
        lanes in the same loop cost the rendered set 2-4%, docs/BENCHMARKS.md)."""
        return _pair_rounds(src, item_a, base_a, item_b, base_b, dec, empty, ctx_of, sym_a, sym_b, scratch_a,
                            scratch_b, True)

    @njit(nogil=True, cache=True, boundscheck=False, _nrt=False)
    def _pair_blocks(src, item_a, base_a, item_b, base_b, dec, empty, ctx_of, sym_a, sym_b, scratch_a, scratch_b):
        """_pair_rounds of two tiles of which one or both have 8 or 16 lanes."""
        return _pair_rounds(src, item_a, base_a, item_b, base_b, dec, empty, ctx_of, sym_a, sym_b, scratch_a,
                            scratch_b, False)

else:

    @njit(nogil=True, cache=True, boundscheck=False)
    def _pair_rounds32(src, item_a, base_a, item_b, base_b, dec, empty, ctx_of, sym_a, sym_b, scratch_a, scratch_b):
        """No AVX2: tiles decode one at a time."""
        return np.int64(-1), np.int64(-1)

    _pair_blocks = _pair_rounds32


@njit(nogil=True, cache=True, boundscheck=False, _nrt=False)
def _pair_symbols(src, item_a, base_a, item_b, base_b, plane, dec, empty, ctx_of, sym_a, sym_b, scratch_a,
                  scratch_b):
    """Decode the symbols of two two-lane tiles (_two_lane_plane, the same plane size) in
    one loop: a tile's two lanes are two dependent chains of table loads, so a second tile's
    lanes in the same loop fill the wait (masks). True when both decoded cleanly; on False
    the caller decodes each on its own, which finds and names the error. scratch_a and
    scratch_b: lane states, table rows and bases (the first three of _decode_scratch_arrays);
    base_a, base_b: the rows of the two tiles' first tables in dec."""
    states_a, table_a, bases_a = scratch_a[0], scratch_a[1], scratch_a[2]
    states_b, table_b, bases_b = scratch_b[0], scratch_b[1], scratch_b[2]
    pos_a, end_a, tset_a, wmask_a, wide_a = _pair_setup(src, item_a, base_a, ctx_of, table_a)
    pos_b, end_b, tset_b, wmask_b, wide_b = _pair_setup(src, item_b, base_b, ctx_of, table_b)
    # (read_stream and the host plan put every rANS tile's lane states inside its payload)
    if not (_lane_states(src, pos_a, np.int64(2), states_a) and _lane_states(src, pos_b, np.int64(2), states_b)):
        return False
    xa0, xa1, xb0, xb1 = states_a[0], states_a[1], states_b[0], states_b[1]
    n_a = np.uint64((end_a - pos_a - 8) >> 1)
    n_b = np.uint64((end_b - pos_b - 8) >> 1)
    if n_a == 0 or n_b == 0:
        return False
    words_a = src[pos_a + 8 : pos_a + 8 + 2 * np.int64(n_a)].view(np.uint16)
    words_b = src[pos_b + 8 : pos_b + 8 + 2 * np.int64(n_b)].view(np.uint16)
    last_a, last_b = n_a - np.uint64(1), n_b - np.uint64(1)
    wa = wb = np.uint64(0)
    flat = dec.reshape(-1)
    for i0 in range(0, plane, 32):
        _table_bases32(sym_a, i0, table_a, CONTEXT16[wide_a], wmask_a, 0, bases_a)  # (one plane: no plane bits)
        _table_bases32(sym_b, i0, table_b, CONTEXT16[wide_b], wmask_b, 0, bases_b)
        for i in range(i0, min(plane, i0 + 32), 2):
            b = np.uint64(i - i0)
            xa0, xa1, wa = _two_symbols(words_a, last_a, wa, i, bases_a[b], bases_a[b + np.uint64(1)], xa0, xa1,
                                        flat, sym_a)
            xb0, xb1, wb = _two_symbols(words_b, last_b, wb, i, bases_b[b], bases_b[b + np.uint64(1)], xb0, xb1,
                                        flat, sym_b)
    return (_pair_check(src, pos_a, end_a, wa, xa0, xa1, tset_a, empty, ctx_of[wide_a], wmask_a, sym_a, plane)
            and _pair_check(src, pos_b, end_b, wb, xb0, xb1, tset_b, empty, ctx_of[wide_b], wmask_b, sym_b, plane))


@njit(nogil=True, cache=True, boundscheck=False, _nrt=False)
def _unpredict(symbols, i, p, row, th, tw, med_work):
    """Residuals -> plane: undo zig-zag of symbols[SYM0 + i:], then the predictor's prefix sums
    (uint8 wraps mod 256), or MED's diagonal steps (med_simd, med_work its scratch)."""
    plane = th * tw
    zs = symbols[SYM0 + i : SYM0 + i + plane]
    if p == f2.PRED_MED:
        med_simd.unpredict(zs, row, th, tw, med_work)
        return
    for q in range(plane):
        z = zs[q]
        row[q] = (z >> 1) ^ -(z & 1)
    if p == 1 or p == 3:  # running sums along the rows, 16 bytes per vector step
        prefix_simd.prefix_rows(row, th, tw)
    if p == 2 or p == 3:
        for y in range(1, th):
            cur = row[y * tw : y * tw + tw]
            above = row[(y - 1) * tw : y * tw]
            for x in range(tw):
                cur[x] += above[x]


@njit(nogil=True, cache=True, boundscheck=False, _nrt=False)
def _lane_states(src, pos, lanes, states):
    """Read the lane states at src[pos:]; False when one is below 2^16."""
    for j in range(lanes):
        value = np.int64(src[pos]) | (np.int64(src[pos + 1]) << 8) | (np.int64(src[pos + 2]) << 16) | (
            np.int64(src[pos + 3]) << 24)
        if value < STATE_LOW:
            return False
        states[j] = value
        pos += 4
    return True


@njit(nogil=True, cache=True, boundscheck=False, _nrt=False)
def _decode_palette(src, start, end, th, tw, c, base, out, out_base, out_w, oy, ox, ya, yb, xa, xb,
                    dec, empty, ctx_of, ctx16, wmask, tshift, symbols, scratch, index, decoded):
    """A palette tile (A2 mode 2): the index plane is a one-plane rANS decode whose channel
    byte sits at start + 3 (so _rans reads it as plane 0 of a tile starting at start + 1);
    every index must lie below P, then each pixel is its palette colour. `decoded`: the
    index symbols are in `symbols` already (_pair_symbols)."""
    n_colours = np.int64(src[start + 2]) + 1
    lanes = np.int64(1) << (np.int64(src[start + 1]) >> 4)
    pal = start + 4
    pos = pal + n_colours * c
    if not decoded:
        if not _lane_states(src, pos, lanes, scratch[0]):
            return plan_mod.ERR_STATE
        err = _rans(src, pos + 4 * lanes, end, start + 1, np.int64(1), th * tw, base, lanes, dec, empty, ctx_of, ctx16,
                    wmask, tshift, symbols, scratch, np.int64(0), np.int64(-1))
        if err:
            return err
    _unpredict(symbols, np.int64(0), _predictor_of(np.int64(src[start + 3])), index, th, tw, scratch[4])
    top = np.uint8(0)
    for q in range(th * tw):
        top = max(top, index[q])
    if top >= n_colours:
        return plan_mod.ERR_INDEX
    _palette_pixels(src, pal, n_colours, index, c, tw, out, out_base, out_w, oy, ox, ya, yb, xa, xb, scratch[7],
                    scratch[8])
    return 0


@njit(nogil=True, cache=True, boundscheck=False, _nrt=False)
def _palette_pixels(src, pal, n_colours, index, c, tw, out, out_base, out_w, oy, ox, ya, yb, xa, xb, words, line):
    """Write the requested region of an index plane (every index below n_colours) as the
    colours of the palette at src[pal:]. Colour pixels go into `line` (LINE_BYTES) as one
    32-bit store each from the palette as words (scratch, 256 uint32): a three-channel
    store's fourth byte is the next pixel's first, rewritten by its store (2.3x faster than
    three byte loads and stores, docs/BENCHMARKS.md "Runs tiles first"); each row is then
    copied out whole (_copy_line)."""
    if c == 1:  # masks: one load per pixel
        for y in range(ya, yb):
            d = out_base + ((oy + y) * out_w + ox + xa)
            line = out[d : d + (xb - xa)]
            row = index[y * tw + xa : y * tw + xb]
            for x in range(xb - xa):
                line[x] = src[pal + np.int64(row[x])]
        return
    for q in range(n_colours):
        at = pal + c * q
        word = np.uint32(src[at]) | (np.uint32(src[at + 1]) << np.uint32(8)) | (np.uint32(src[at + 2]) << np.uint32(16))
        if c == 4:
            word |= np.uint32(src[at + 3]) << np.uint32(24)
        words[q] = word
    if xb <= xa:
        return
    width = np.uint64(xb - xa)
    uc = np.uint64(c)
    for y in range(ya, yb):
        row = index[y * tw + xa : y * tw + xb]
        for x in range(width):
            memops.store32(line, uc * x, words[row[x]])
        _copy_line(out, out_base + ((oy + y) * out_w + ox + xa) * c, line, (xb - xa) * c)


@njit(nogil=True, cache=True, boundscheck=False, _nrt=False)
def _colour_inverse(planes, n, colour):
    """Planes 0-2 -> R, G, B in place (A5), whole planes at a time: plain loops over
    contiguous bytes, which LLVM turns into vector code."""
    p0 = planes[0, :n]
    p1 = planes[1, :n]
    p2 = planes[2, :n]
    if colour == 1:
        for q in range(n):
            g = p1[q]
            p0[q] += g
            p2[q] += g
    elif colour == 2:
        for q in range(n):
            cg = p1[q]
            co = p2[q]
            t = np.uint8(p0[q] - np.uint8(np.int8(cg) >> 1))
            g = np.uint8(cg + t)
            b = np.uint8(t - np.uint8(np.int8(co) >> 1))
            p0[q] = b + co
            p1[q] = g
            p2[q] = b
    elif colour == 3:
        for q in range(n):
            g = p1[q]
            r = np.uint8(p0[q] + g)
            p0[q] = r
            p2[q] += (r & g) + ((r ^ g) >> 1)  # floor((r + g) / 2) in bytes


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _copy_line(out, d, line, n):
    """out[d : d + n] = line[:n], a colour tile's row built in the scratch row `line`.

    Palette and runs tiles' colour rows, constant colour tiles' and the coded tiles' rows of
    crops and edge tiles are built (looked up, filled or interleaved byte by byte) in that row,
    which stays in the L1 cache, and copied out by memcpy (whole rows of coded tiles are stored
    as vectors instead, memops.interleave3 and interleave4). Written straight into an output
    larger than the caches, the same loops ran at 2.9 GB/s, a quarter of a memcpy's rate on
    this machine, and took 23% of the rendered set's decode time (docs/BENCHMARKS.md, "Colour
    rows through an L1 row (stop 37)"). The length is left variable on purpose: LLVM's
    inlined copy of a constant 192 bytes gave back the whole gain there, libc's memcpy keeps
    it."""
    memops.copy(out, d, line, 0, n)


@njit(nogil=True, cache=True, boundscheck=False, _nrt=False)
def _interleave(planes, c, tw, out, out_base, out_w, oy, ox, ya, yb, xa, xb, line):
    """Copy the requested region of the planes into the (row, column, channel) output: whole
    colour rows of 64 pixels as vector stores (memops.interleave3 and interleave4), other
    colour rows through `line` (LINE_BYTES of scratch, _copy_line), one loop per channel
    count so that the stores have a constant stride."""
    width = xb - xa
    for y in range(ya, yb):
        d = out_base + ((oy + y) * out_w + ox + xa) * c
        q0 = y * tw + xa
        if c == 1:
            if width == 64:  # a constant length: LLVM inlines the copy (no call to libc per row)
                memops.copy(out, d, planes[0], q0, 64)
            else:
                memops.copy(out, d, planes[0], q0, width)
            continue
        p0 = planes[0, q0 : q0 + width]
        p1 = planes[1, q0 : q0 + width]
        p2 = planes[2, q0 : q0 + width]
        if width == 64:  # a whole row: vector shuffles stored straight into the output
            if c == 3:
                memops.interleave3(p0, p1, p2, 0, out, d)
                memops.interleave3(p0, p1, p2, 32, out, d + 96)
            else:
                p3 = planes[3, q0 : q0 + width]
                memops.interleave4(p0, p1, p2, p3, 0, out, d)
                memops.interleave4(p0, p1, p2, p3, 32, out, d + 128)
            continue
        if c == 3:
            for x in range(width):
                line[3 * x] = p0[x]
                line[3 * x + 1] = p1[x]
                line[3 * x + 2] = p2[x]
            _copy_line(out, d, line, width * 3)
            continue
        p3 = planes[3, q0 : q0 + width]
        for x in range(width):
            line[4 * x] = p0[x]
            line[4 * x + 1] = p1[x]
            line[4 * x + 2] = p2[x]
            line[4 * x + 3] = p3[x]
        _copy_line(out, d, line, width * 4)


@njit(nogil=True, cache=True, boundscheck=False, _nrt=False)
def _fill_pixel(planes, c, out, out_base, out_w, oy, ox, ya, yb, xa, xb, line):
    """Write the pixel planes[:, 0] over the requested region of a tile (a colour pixel
    through one row of it built in `line`, _copy_line)."""
    width = np.uint64((xb - xa) * c)
    if c == 1:
        for y in range(ya, yb):
            d = np.uint64(out_base + ((oy + y) * out_w + ox + xa))
            if width == 64:  # a constant length: LLVM inlines the fill (no call to libc per row)
                memops.fill(out, d, 64, planes[0, 0])
            else:
                memops.fill(out, d, width, planes[0, 0])
        return
    for x in range(xb - xa):
        for k in range(c):
            line[c * x + k] = planes[k, 0]
    for y in range(ya, yb):
        _copy_line(out, np.uint64(out_base + ((oy + y) * out_w + ox + xa) * c), line, width)


@njit(nogil=True, cache=True, boundscheck=False, _nrt=False, inline="always")
def _region(item):
    """(ya, yb, xa, xb): the rows and columns of work item `item`'s tile that lie inside its
    output (all of them, or a crop's part)."""
    th, tw = item[2], item[3]
    out_h, out_w, oy, ox = item[7], item[8], item[9], item[10]
    return max(0, -oy), min(th, out_h - oy), max(0, -ox), min(tw, out_w - ox)


@njit(nogil=True, cache=True, boundscheck=False, _nrt=False, inline="always")
def _prefetch_output(item, out):
    """Prefetch for writing the cache lines of out that work item `item` will write.

    A tile's rows are a few cache lines each, one row apart in the output: as many streams as
    rows, more than the hardware prefetchers follow, so without this every line of an output
    that is not in the caches is a demand miss when the tile's rows are copied out."""
    c, out_base, out_w, oy, ox = item[4], item[6], item[8], item[9], item[10]
    ya, yb, xa, xb = _region(item)
    width = (xb - xa) * c
    for y in range(ya, yb):
        d = out_base + ((oy + y) * out_w + ox + xa) * c
        for q in range(0, width, 64):
            memops.prefetch_write(out, d + q)
        memops.prefetch_write(out, d + width - 1)


@njit(nogil=True, cache=True, boundscheck=False, _nrt=False)
def _decode_item(src, item, base, out, dec, empty, ctx_of, symbols, planes, scratch, decoded=False):
    """Decode one v2 work item (plan.py columns) into the flat output; return an error code.
    base: the row of the image's first table in dec and empty (_window_base). `decoded`:
    the tile's rANS symbols are in `symbols` already (_pair_symbols)."""
    start, end = item[0], item[1]
    th, tw, c = item[2], item[3], item[4]
    out_base, out_w, oy, ox = item[6], item[8], item[9], item[10]
    wide = item[plan_mod.WIDE]
    ctx = ctx_of[wide]  # the stream's contexts: CONTEXT_OF row 0 or 1
    ctx16 = CONTEXT16[wide]
    wmask = np.uint8(255) if wide else np.uint8(0)
    tshift = 2 + item[plan_mod.PLANE]  # eight tables per set with plane contexts, else four
    plane = th * tw
    ya, yb, xa, xb = _region(item)
    if src[start] == f2.TILE_RAW:
        for y in range(ya, yb):
            s0 = start + 1 + (y * tw + xa) * c
            d0 = out_base + ((oy + y) * out_w + ox + xa) * c
            memops.copy(out, d0, src, s0, (xb - xa) * c)
        return 0
    if src[start] >= f2.TILE_RUNS:  # (read_stream and hostplan refuse modes past LAST_MODE)
        # planes (4 planes back to back) leaves the 64 bytes after plane 0 that the fills need.
        err = runs.decode_tile(src, start, end, th, tw, c, base, tshift, dec.reshape(-1), empty, planes.reshape(-1),
                               scratch[6], scratch[5][:64], scratch[5][64:])
        if err:
            return err
        if c == 1:  # the plane holds the pixels
            _interleave(planes, np.int64(1), tw, out, out_base, out_w, oy, ox, ya, yb, xa, xb, scratch[8])
        else:  # the palette that decode_tile left in its maps
            _palette_pixels(scratch[6], np.int64(runs.PALETTE_AT), np.int64(src[start + 2]) + 1, planes[0, :plane], c,
                            tw, out, out_base, out_w, oy, ox, ya, yb, xa, xb, scratch[7], scratch[8])
        return 0
    if src[start] == f2.TILE_PALETTE:
        return _decode_palette(src, start, end, th, tw, c, base, out, out_base, out_w, oy, ox, ya, yb, xa, xb,
                               dec, empty, ctx, ctx16, wmask, tshift, symbols, scratch, planes[0, :plane], decoded)
    colour = np.int64(src[start + 1]) & 15
    n_rans = 0
    for k in range(c):
        if src[start + 2 + k] != 0:
            n_rans += 1
    if n_rans == 0:  # a constant tile (masks' and flat art's backgrounds): one pixel, repeated
        for k in range(c):
            planes[k, 0] = src[start + 2 + c + k]
        _colour_inverse(planes, np.int64(1), colour)
        _fill_pixel(planes, c, out, out_base, out_w, oy, ox, ya, yb, xa, xb, scratch[8])
        return 0
    lanes = np.int64(1) << (np.int64(src[start + 1]) >> 4)
    pos = start + 2 + c
    for k in range(c):
        if src[start + 2 + k] == 0:
            v = src[pos]
            pos += 1
            row = planes[k, :plane]
            for q in range(plane):
                row[q] = v
    if not decoded:
        if not _lane_states(src, pos, lanes, scratch[0]):
            return plan_mod.ERR_STATE
        err = _rans(src, pos + 4 * lanes, end, start, c, plane, base, lanes, dec, empty, ctx, ctx16, wmask,
                    tshift, symbols, scratch, np.int64(0), np.int64(-1))
        if err:
            return err
    # The MED planes' diagonal steps run side by side (med_simd.med_steps), the others
    # are undone plane by plane. (np.int64 counters: a literal 0 would make numba compile the
    # callees once more for it, while typing the loop.)
    i = np.int64(0)
    n_med = np.int64(0)
    for k in range(c):
        chb = np.int64(src[start + 2 + k])
        if chb == 0:
            continue
        if _predictor_of(chb) == f2.PRED_MED:
            med_simd.to_diagonals(symbols[SYM0 + i : SYM0 + i + plane], th, tw, scratch[4], n_med)
            n_med += 1
        else:
            _unpredict(symbols, i, _predictor_of(chb), planes[k, :plane], th, tw, scratch[4])
        i += plane
    if n_med:
        med_simd.med_steps(scratch[4], th + tw - 1, n_med)
        m = np.int64(0)
        for k in range(c):
            chb = np.int64(src[start + 2 + k])
            if chb != 0 and _predictor_of(chb) == f2.PRED_MED:
                med_simd.from_diagonals(planes[k, :plane], th, tw, scratch[4], m)
                m += 1
    _colour_inverse(planes, plane, colour)
    _interleave(planes, c, tw, out, out_base, out_w, oy, ox, ya, yb, xa, xb, scratch[8])
    return 0


# The most tables one image has (format_v2.max_sets for 4 channels, 8 tables each): a
# window slot's rows.
WINDOW_TABLES = f2.max_sets(4) * f2.MAX_SET_TABLES


@njit(nogil=True, cache=True, boundscheck=False)
def _expand_tables(freq, cum, empty, row, n, window, window_empty, at):
    """Tables row .. row + n - 1 of the plan (freq, cum: validated) as decode tables (the
    layout of decode_table: slot -> symbol | (f - 1) << 8 | (slot - cum) << 20) into
    window rows at .. at + n - 1, and their empty flags into window_empty. An empty table's
    slots are left as they were: decoders refuse a tile that draws a symbol from it."""
    for t in range(n):
        window_empty[at + t] = empty[row + t]
        if empty[row + t]:
            continue
        frequencies.expand_into(freq[row + t], cum[row + t], window[at + t])


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _window_base(b, freq, cum, empty, n_tables_at, window, window_empty, tags):
    """The window row where the tables of the image whose first table is plan row b start,
    expanding them first unless one of the window's two slots holds them already. The slot
    used last is kept (tags[2]), so the two tiles of a pair (_pair_symbols) from two images
    both stay in the window."""
    if tags[0] == b:
        slot = 0
    elif tags[1] == b:
        slot = 1
    else:
        slot = 1 - tags[2]
        _expand_tables(freq, cum, empty, b, n_tables_at[b], window, window_empty, slot * WINDOW_TABLES)
        tags[slot] = b
    tags[2] = slot
    return slot * WINDOW_TABLES


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _decode_strided(src, work, items, first, stride, out, errors, freq, cum, empty, n_tables_at, window,
                    window_empty, ctx_of, sym_a, sym_b, planes, pairs):
    """Decode items[first::stride]; with `pairs`, two two-lane tiles in a row (_two_lane_plane)
    take their symbols from one loop (_pair_symbols), each of its own otherwise.

    Each image's decode tables are expanded from freq/cum into this thread's window (two
    slots of WINDOW_TABLES tables) just before its first tile, not for the whole batch up
    front: a table is 16 KiB, and a batch of 256 small images had 16 MB of them, read back
    from memory one symbol at a time (a 32x32 image decoded in 22 us instead of 5)."""
    scratch_a = _decode_scratch_arrays()
    # The pair's second tile needs only lane states, table rows and bases (no MED scratch);
    # the empty rest gives it scratch_a's type, so _rans is compiled once for both.
    scratch_b = (np.empty(MAX_LANES, np.int64), np.empty(256, np.int64), np.empty(32, np.int32),
                 np.empty(MAX_LANES, np.uint32), np.empty(0, np.uint8), np.empty(0, np.int64), np.empty(0, np.uint8),
                 np.empty(0, np.uint32), np.empty(0, np.uint8))
    tags = np.array([-1, -1, 0], np.int64)  # the plan rows held by the window's two slots; the slot used last
    _decode_loop(src, work, items, first, stride, out, errors, freq, cum, empty, n_tables_at, window, window_empty,
                 ctx_of, sym_a, sym_b, planes, pairs, scratch_a, scratch_b, tags)


@njit(nogil=True, cache=True, boundscheck=False, _nrt=False)
def _decode_loop(src, work, items, first, stride, out, errors, freq, cum, empty, n_tables_at, window, window_empty,
                 ctx_of, sym_a, sym_b, planes, pairs, scratch_a, scratch_b, tags):
    """_decode_strided's loop over its items, compiled without reference
    counts (the note above _rans_rounds)."""
    j = np.int64(first)  # (a parfor index may be unsigned: uint64 + int64 would be a float)
    n = items.shape[0]
    ahead = j  # the first item whose output is not prefetched yet
    while j < n:
        i = items[j]
        k = j + stride
        while ahead <= k and ahead < n:  # this item's output and the next one's (pairs decode both)
            _prefetch_output(work[items[ahead]], out)
            ahead += stride
        base = _window_base(work[i, plan_mod.TABLE_BASE], freq, cum, empty, n_tables_at, window, window_empty, tags)
        if pairs and k < n:
            plane = _two_lane_plane(src, work[i])
            i2 = items[k]
            if plane and _two_lane_plane(src, work[i2]) == plane:
                base2 = _window_base(work[i2, plan_mod.TABLE_BASE], freq, cum, empty, n_tables_at, window,
                                     window_empty, tags)
                if _pair_symbols(src, work[i], base, work[i2], base2, plane, window, window_empty, ctx_of, sym_a,
                                 sym_b, scratch_a, scratch_b):
                    errors[i] = _decode_item(src, work[i], base, out, window, window_empty, ctx_of, sym_a, planes,
                                             scratch_a, np.bool_(True))
                    errors[i2] = _decode_item(src, work[i2], base2, out, window, window_empty, ctx_of, sym_b, planes,
                                              scratch_a, np.bool_(True))
                    j = k + stride
                    continue
                # (base stays valid: the second image's tables went to the other slot)
            part_a, part_b = _rans_part(src, work[i]), _rans_part(src, work[i2])
            if rans_avx2.AVAILABLE and part_a[1] and part_b[1]:
                base2 = _window_base(work[i2, plan_mod.TABLE_BASE], freq, cum, empty, n_tables_at, window,
                                     window_empty, tags)
                if part_a[3] == 32 and part_b[3] == 32:
                    err_a, err_b = _pair_rounds32(src, work[i], base, work[i2], base2, window, window_empty, ctx_of,
                                                  sym_a, sym_b, scratch_a, scratch_b)
                else:
                    err_a, err_b = _pair_blocks(src, work[i], base, work[i2], base2, window, window_empty, ctx_of,
                                                sym_a, sym_b, scratch_a, scratch_b)
                if err_a >= 0:
                    errors[i] = err_a if err_a else _decode_item(src, work[i], base, out, window, window_empty,
                                                                 ctx_of, sym_a, planes, scratch_a, np.bool_(True))
                    errors[i2] = err_b if err_b else _decode_item(src, work[i2], base2, out, window, window_empty,
                                                                  ctx_of, sym_b, planes, scratch_a, np.bool_(True))
                    j = k + stride
                    continue
        errors[i] = _decode_item(src, work[i], base, out, window, window_empty, ctx_of, sym_a, planes, scratch_a,
                                 np.bool_(False))
        j = k


@njit(nogil=True, cache=True, boundscheck=False)
def _table_counts(work, n_tables, counts):
    """counts[b] = how many tables the v2 image whose first table is plan row b has (its
    rows run to the next image's first row), at most WINDOW_TABLES: rows past an image's own
    belong to an image without work items here, which its tiles never index (validated)."""
    present = np.zeros(n_tables + 1, np.uint8)
    for r in range(work.shape[0]):
        if work[r, plan_mod.VERSION] == 2:
            present[work[r, plan_mod.TABLE_BASE]] = 1
    following = n_tables
    for b in range(n_tables - 1, -1, -1):
        if present[b]:
            counts[b] = min(following - b, WINDOW_TABLES)
            following = b


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _decode_items(src, work, items, out, errors, freq, cum, empty, n_tables_at, windows, window_empty, ctx_of,
                  symbols, planes, pairs):
    chunks = planes.shape[0]
    for chunk in prange(chunks):
        row = 2 * np.int64(chunk)
        _decode_strided(src, work, items, np.int64(chunk), chunks, out, errors, freq, cum, empty, n_tables_at, windows[chunk],
                        window_empty[chunk], ctx_of, symbols[row], symbols[row + 1], planes[chunk], pairs)


@njit(nogil=True, cache=True, boundscheck=False)
def _decode_items_serial(src, work, items, out, errors, freq, cum, empty, n_tables_at, windows, window_empty, ctx_of,
                         symbols, planes, pairs):
    _decode_strided(src, work, items, np.int64(0), np.int64(1), out, errors, freq, cum, empty, n_tables_at, windows[0], window_empty[0],
                    ctx_of, symbols[0], symbols[1], planes[0], pairs)


def _decode_scratch(chunks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """This thread's decoder scratch for `chunks` numba threads, kept between calls: two symbol
    rows per chunk (two-lane tiles decode in pairs, _pair_symbols), four planes, and a table
    window of two slots (uint32, 2 * WINDOW_TABLES x 4096: 1.1 MiB of address space, touched
    as far as the images' tables reach) with its empty flags."""
    rows = getattr(_local, "decode_v2", None)
    if rows is None or rows[1].shape[0] < chunks:
        rows = (np.zeros((2 * chunks, SYM0 + MAX_VALUES), np.uint8), np.zeros((chunks, 4, MAX_PLANE), np.uint8),
                np.zeros((chunks, 2 * WINDOW_TABLES, f2.PROB_SCALE), np.uint32),
                np.zeros((chunks, 2 * WINDOW_TABLES), np.int64))
        _local.decode_v2 = rows
    return rows[0][: 2 * chunks], rows[1][:chunks], rows[2][:chunks], rows[3][:chunks]


def decode_items(plan: plan_mod.Plan, items: np.ndarray, out: np.ndarray, errors: np.ndarray) -> None:
    """Decode the v2 work items `items` (indices into plan.work) into out; codes into errors."""
    from prepkit.lossless import cpu

    if items.size == 0:
        return
    n_tables = plan.freq.shape[0]
    n_tables_at = np.zeros(n_tables + 1, np.int64)
    _table_counts(plan.work, n_tables, n_tables_at)
    empty = plan.empty.astype(np.int64)
    if cpu.use_parallel(items.size):
        symbols, planes, windows, window_empty = _decode_scratch(numba.get_num_threads())
        _decode_items(plan.src, plan.work, items, out, errors, plan.freq, plan.cum, empty, n_tables_at, windows,
                      window_empty, CONTEXT_OF, symbols, planes, True)
    else:
        symbols, planes, windows, window_empty = _decode_scratch(1)
        _decode_items_serial(plan.src, plan.work, items, out, errors, plan.freq, plan.cum, empty, n_tables_at,
                             windows, window_empty, CONTEXT_OF, symbols, planes, True)


# Last, once every cached function above exists: the modules whose functions and constants
# are compiled into these kernels, and the CPU switches (rans_avx2.BUILD: PREPKIT_NO_AVX2,
# PREPKIT_NO_AVX512), are part of their key.
guard_disk_cache(globals(), (fmt, f2, plan_mod, frequencies, med_simd, memops, prefix_simd, rans_avx2, runs), extra=rans_avx2.BUILD)
