"""numba CUDA decoder for bitstream version 2 (docs/LOSSLESS.md, section A).

One launch decodes every v2 tile of a batch; one block of one warp (32 threads) per tile.
Inside a tile:

1. rANS: lane j of the warp is rANS lane j (docs A6); it decodes symbols j, j + L, ... in
   order. The lanes that need a 16-bit word in a step take them in lane order: a ballot and
   a popcount of the lower lanes give each its word index. One 32-bit load per symbol from a
   packed decode table (symbol | (f - 1) << 8 | (slot - cum) << 20, built on the host) gives
   symbol, frequency and bias. The context symbols (64 back; with wide contexts also 63, 65
   and 128 back, A4) come from a ring of the last 256 symbols in shared memory, each
   written twice (at i mod 256 and 256 above) so that every read is the lane's base
   address plus a constant; they were decoded at least one step earlier, by any lane, and
   a warp barrier per step orders those writes before the reads.
2. Symbols land in shared memory at a fixed row pitch of 64 bytes (the largest tile side),
   the rANS planes first (back to back, so symbol i is at row i // tw), then the constant
   planes. Rows are word aligned, so the passes below work on 32-bit words of 4 columns.
3. Row pass (every plane but MED ones): each lane owns one word (4 columns) of a row:
   zig-zag undone on the 4 bytes at once, a running sum inside the word, then a segmented
   warp scan (16 lanes per row) of the word totals for the left and gradient predictors.
4. Column pass (up and gradient): a lane owns a word column and walks down it, adding with a
   carry-free byte-wise add (no bank conflicts: consecutive lanes, consecutive words).
   MED planes (predictor 4, not a prefix sum) go as a wavefront instead: lane j decodes
   columns 2(t - j) and 2(t - j) + 1 of row j at step t, and later row j + 32 the same way;
   the pixels above come from lane j - 1 by a shuffle, and the lane undoes the zig-zag of
   the two residuals it reads.
5. Colour inverse on 4 pixels at once (byte-wise add/sub/half on words) and the interleaved
   write of the part of the tile inside the requested region.

All tile-local arithmetic is 32-bit (np.int32 / np.uint32 wrapped explicitly: numba widens
int32 op int32 to int64) and uses shifts and masks instead of division. Safety: plan.build
ran format_v2.read_stream on every stream (modes, lane counts, channel bytes and lengths are
consistent); inside the kernel every 16-bit word read is bounded by the tile's word count,
lane states are checked on entry and exit, and an error code per tile is checked after the
launch. v1 items of a mixed batch go to the v1 kernel (cuda.py) in a second launch.

Imported only when device="cuda" is asked for and the batch holds a v2 stream.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import config, cuda, types

from prepkit.lossless import format_v2 as f2
from prepkit.lossless import plan as plan_mod

i32 = np.int32
u32 = np.uint32
PROB_SCALE = f2.PROB_SCALE
u64 = np.uint64
u8 = np.uint8
WARP = 32
FULL_MASK = 0xFFFFFFFF
PITCH_LOG2 = 6  # shared-memory row pitch: 64 bytes = 16 words, the largest tile side
WORDS_PER_ROW = 16
LOW7 = 0x7F7F7F7F
HIGH1 = 0x80808080
ONES = 0x01010101
# Context of a symbol from its context value u clamped to 9 (every u > 8 is context 3): 2 bits
# each, narrow and wide contexts (format_v2.context_of_value).
CONTEXT_BITS_NARROW = sum(int(f2.context_of_value(np.array(u), False)) << (2 * u) for u in range(10))
CONTEXT_BITS_WIDE = sum(int(f2.context_of_value(np.array(u), True)) << (2 * u) for u in range(10))
assert f2.NARROW_THRESHOLDS[2] == 8 and f2.WIDE_THRESHOLDS[2] <= 8  # u > 8 is context 3 in both
RING = 256  # context ring: the last 256 symbols (the farthest context is 128 back)
RING_BYTES = 2 * RING  # each symbol stored twice (see the rANS pass)


if config.ENABLE_CUDASIM:
    # numba's simulator has no warp intrinsics. A block is one warp here, so shared memory
    # and barriers give the same results (tests only; the GPU build uses the intrinsics).

    @cuda.jit(device=True)
    def _ballot(scratch, pred):
        lane = cuda.threadIdx.x
        scratch[lane] = 1 if pred else 0
        cuda.syncthreads()
        mask = 0
        for j in range(WARP):
            mask |= scratch[j] << j
        cuda.syncthreads()
        return mask

    @cuda.jit(device=True)
    def _shfl_up(scratch, value, delta):
        lane = cuda.threadIdx.x
        scratch[lane] = value
        cuda.syncthreads()
        got = scratch[lane - delta] if lane >= delta else value
        cuda.syncthreads()
        return got

    @cuda.jit(device=True)
    def _shfl_xor(scratch, value, mask):
        lane = cuda.threadIdx.x
        scratch[lane] = value
        cuda.syncthreads()
        got = scratch[lane ^ mask]
        cuda.syncthreads()
        return got

    @cuda.jit(device=True)
    def _syncwarp():
        pass  # a block is one warp and the shuffles above are barriers already

    @cuda.jit(device=True)
    def _shfl_idx(scratch, value, src_lane):
        lane = cuda.threadIdx.x
        scratch[lane] = value
        cuda.syncthreads()
        got = scratch[src_lane]
        cuda.syncthreads()
        return got

else:

    @cuda.jit(device=True, inline=True)
    def _ballot(scratch, pred):
        return cuda.ballot_sync(FULL_MASK, pred)

    @cuda.jit(device=True, inline=True)
    def _shfl_up(scratch, value, delta):
        return cuda.shfl_up_sync(FULL_MASK, value, delta)

    @cuda.jit(device=True, inline=True)
    def _shfl_xor(scratch, value, mask):
        return cuda.shfl_xor_sync(FULL_MASK, value, mask)

    @cuda.jit(device=True, inline=True)
    def _shfl_idx(scratch, value, src_lane):
        return cuda.shfl_sync(FULL_MASK, value, src_lane)

    @cuda.jit(device=True, inline=True)
    def _syncwarp():
        cuda.syncwarp(FULL_MASK)


@cuda.jit(device=True, inline=True)
def _warp_max(scratch, value):
    """The largest of the warp's 32 values (a butterfly of xor shuffles), on every lane."""
    for d in (16, 8, 4, 2, 1):
        value = i32(max(value, i32(_shfl_xor(scratch, value, d))))
    return value


@cuda.jit(device=True, inline=True)
def _predictor(chb):
    """Predictor 0..4 of a rANS channel byte (format_v2.channel_predictor): bits 2-3, plus 4
    when bit 1 is set (validation allows bits 2-3 only with bit 1 clear or as 0)."""
    return i32(((chb >> i32(2)) & i32(3)) | (((chb >> i32(1)) & i32(1)) << i32(2)))


@cuda.jit(device=True, inline=True)
def _median_of(left, up, upleft):
    """MED (docs A4) as the median of L, U and L + U - UL: four min/max, no branches."""
    return i32(max(min(left, up), min(max(left, up), i32(i32(left + up) - upleft))))


@cuda.jit(device=True, inline=True)
def _add8(a, b):
    """Byte-wise a + b mod 256 of 4 packed bytes (no carry between bytes)."""
    return u32(((a & u32(LOW7)) + (b & u32(LOW7))) ^ ((a ^ b) & u32(HIGH1)))


@cuda.jit(device=True, inline=True)
def _sub8(a, b):
    """Byte-wise a - b mod 256 of 4 packed bytes (no borrow between bytes)."""
    return u32(((a | u32(HIGH1)) - (b & u32(LOW7))) ^ ((a ^ ~b) & u32(HIGH1)))


@cuda.jit(device=True, inline=True)
def _half8(a):
    """Byte-wise floor(s / 2) of each byte read as a signed byte (docs A5's h)."""
    return u32(((a >> u32(1)) & u32(LOW7)) | (a & u32(HIGH1)))


@cuda.jit(device=True, inline=True)
def _mean8(a, b):
    """Byte-wise floor((a + b) / 2) of 4 packed bytes read as unsigned (no carry between
    bytes: the sum of the two terms is at most 255 in each byte)."""
    return u32((a & b) + (((a ^ b) >> u32(1)) & u32(LOW7)))


@cuda.jit(device=True, inline=True)
def _unzigzag8(w):
    """Byte-wise zig-zag inverse: (z >> 1) ^ -(z & 1) of each byte, mod 256."""
    low = w & u32(ONES)
    return u32(((w >> u32(1)) & u32(LOW7)) ^ u32(low * u32(255)))


@cuda.jit(device=True, inline=True)
def _set_row(base, r_sets, r, tshift):
    """The first table row of rANS plane r's table set (4 bits per plane in r_sets)."""
    return i32(base + i32(((r_sets >> i32(4 * r)) & i32(15)) << tshift))


@cuda.jit(device=True, inline=True)
def _empty_mask(empty, tbase, tshift):
    """Bit x set when context x of the table set starting at row tbase is an empty table
    (1 << tshift tables: 8 with plane contexts, else 4)."""
    mask = i32(empty[u32(tbase)] | (empty[u32(tbase + 1)] << 1) | (empty[u32(tbase + 2)] << 2)
               | (empty[u32(tbase + 3)] << 3))
    if tshift == i32(3):
        mask = i32(mask | (empty[u32(tbase + 4)] << 4) | (empty[u32(tbase + 5)] << 5) | (empty[u32(tbase + 6)] << 6)
                   | (empty[u32(tbase + 7)] << 7))
    return mask


@cuda.jit(device=True, inline=True)
def _runs_symbol(src, dec, table, x, ws, nw, w):
    """One symbol of a runs tile's single rANS lane from table `table`: (symbol, x, words
    read); a read past the nw words only counts (the tile is refused after its row)."""
    e = dec[u32(i32(table << i32(12)) | i32(x & u32(4095)))]
    x = u32(u32(u32((e >> u32(8)) & u32(4095)) + u32(1)) * (x >> u32(12)) + (e >> u32(20)))
    if x < u32(f2.STATE_LOW):
        if w < nw:
            at = ws + u64(u32(w << i32(1)))
            x = u32((x << u32(16)) | u32(src[at]) | (u32(src[at + u64(1)]) << u32(8)))
        w = i32(w + i32(1))
    return i32(e & u32(255)), x, w


@cuda.jit(device=True, inline=True)
def _runs_label(rank, c0, c1, c2, left, n_colours):
    """The index of a label rank (runs._label): the distinct candidates c0, c1, c2 (-1:
    absent) other than left, then every index in increasing order; -1 past the order."""
    k = i32(0)
    if c0 >= i32(0) and c0 != left:
        if rank == i32(0):
            return c0
        k = i32(1)
    if c1 >= i32(0) and c1 != left and c1 != c0:
        if rank == k:
            return c1
        k = i32(k + i32(1))
    if c2 >= i32(0) and c2 != left and c2 != c0 and c2 != c1:
        if rank == k:
            return c2
        k = i32(k + i32(1))
    # The (rank - k)-th index that is none of them, in at most five steps (runs._label).
    q = i32(rank - k)
    for _ in range(5):
        n = i32(i32(0 <= left and left <= q) + i32(0 <= c0 and c0 <= q and c0 != left))
        n = i32(n + i32(0 <= c1 and c1 <= q and c1 != left and c1 != c0))
        n = i32(n + i32(0 <= c2 and c2 <= q and c2 != left and c2 != c0 and c2 != c1))
        q = i32(i32(rank - k) + n)
    return q if q < n_colours else i32(-1)


@cuda.jit(device=True, inline=True)
def _palette_pixels(src, pal_at, c, smem, th, tw, out, out_base, out_w, oy, ox, ya, yb, xa, xb, lane):
    """The requested region of an index plane in smem (row pitch 64) as palette colours."""
    span = i32(xb - xa)
    for yo in range(ya, yb):
        first = i32(i32(i32(oy + yo) * out_w) + ox + xa)
        for xo in range(lane, span, WARP):  # sass: palette output
            idx = i32(smem[u32(i32(i32(yo) << i32(PITCH_LOG2)) + xa + i32(xo))])
            colour_at = pal_at + u64(u32(i32(idx * c)))
            dst = out_base + u64(u32(i32(i32(first + i32(xo)) * c)))
            for k in range(c):
                out[dst + u64(k)] = src[colour_at + u64(k)]


# A mode 6 tile's decoded palette: with one channel in the context ring after the run
# boundaries (at most 255 bytes); with three or four after the index plane, th rows of 64
# bytes (at most 1,020 bytes: shared_bytes makes room for them).
RING_PALETTE_AT = 128
PALETTE_BYTES = 4 * 256


@cuda.jit(device=True, inline=True)
def _runs_palette(c, th, smem, ring):
    """(array, offset) of a mode 6 runs tile's decoded palette in shared memory."""
    if c == i32(1):
        return ring, u32(RING_PALETTE_AT)
    return smem, u32(i32(th) << i32(PITCH_LOG2))


@cuda.jit(device=True)
def _runs_tile(src, start, end, th, tw, c, base, tshift, dec, empty, smem, bounds):
    """A runs tile (A2 mode 3, 4 with row repeats, 5 with implied labels too, or 6 with a coded
    palette, decoded to _runs_palette's place) on one thread: its index plane into smem (row
    pitch 64); returns an error code (the checks of
    runs.decode_tile). bounds: 128 bytes of shared memory for the run boundaries (columns <
    64) of the row above and of this row (not a local array: that would put a stack frame on
    every tile of the kernel)."""
    coded = src[start] == f2.TILE_RUNS_PALETTE
    same = coded or src[start] == f2.TILE_RUNS_SAME
    repeats = same or src[start] == f2.TILE_RUNS_REPEAT
    tset = i32(base + i32(i32(src[start + u64(1)]) << tshift))
    if empty[u32(tset + i32(f2.RUN_CTX_LABEL))] != 0:
        return i32(plan_mod.ERR_TABLE)
    row_ctx = i32(f2.RUN_CTX_ROW) if repeats else i32(f2.RUN_CTX_LABEL)  # a row's first symbol after row 0
    if th > i32(1) and empty[u32(tset + row_ctx)] != 0:
        return i32(plan_mod.ERR_TABLE)
    n_colours = i32(i32(src[start + u64(2)]) + i32(1))
    pal = start + u64(f2.RUNS_HEADER)
    if not coded:
        for q in range(1, n_colours):  # strictly increasing packed colours
            a = pal + u64(u32(i32(q) * c))
            b = a - u64(u32(c))
            k = i32(0)
            while k < i32(c - i32(1)) and src[a + u64(u32(k))] == src[b + u64(u32(k))]:
                k = i32(k + i32(1))
            if src[a + u64(u32(k))] <= src[b + u64(u32(k))]:
                return i32(plan_mod.ERR_RUNS)
    pos = pal if coded else pal + u64(u32(n_colours * c))
    x = u32(u32(src[pos]) | (u32(src[pos + u64(1)]) << u32(8)) | (u32(src[pos + u64(2)]) << u32(16))
            | (u32(src[pos + u64(3)]) << u32(24)))
    if x < u32(f2.STATE_LOW):
        return i32(plan_mod.ERR_STATE)
    ws = pos + u64(4)
    nw = i32((end - ws) >> u64(1))
    w = i32(0)
    above = bounds[:64]
    starts = bounds[64:128]
    if coded:  # (A2 mode 6) the palette from the lane, where _runs_palette says
        palette, pal_at = _runs_palette(c, th, smem, bounds)
        for k in range(min(c, i32(3))):
            if empty[u32(tset + i32(f2.RUN_CTX_PALETTE) + i32(k))] != 0:
                return i32(plan_mod.ERR_TABLE)
        for q in range(n_colours):
            d0 = i32(0)
            for k in range(c):
                v, x, w = _runs_symbol(src, dec, i32(tset + i32(f2.RUN_CTX_PALETTE) + min(i32(k), i32(2))), x, ws,
                                       nw, w)
                d = v
                if k == 0:
                    d0 = v
                else:
                    d = i32(i32(i32(v >> i32(1)) ^ i32(-i32(v & i32(1)))) + (d0 if k < 3 else i32(0)))
                at = u32(i32(pal_at) + i32(i32(q) * c) + i32(k))
                before = i32(palette[at - u32(c)]) if q > 0 else i32(0)
                palette[at] = u8(i32(before + d) & i32(255))
        if w > nw:
            return i32(plan_mod.ERR_WORDS)
        for q in range(1, n_colours):  # strictly increasing packed colours
            a = u32(i32(pal_at) + i32(i32(q) * c))
            b = a - u32(c)
            k = i32(0)
            while k < i32(c - i32(1)) and palette[a + u32(k)] == palette[b + u32(k)]:
                k = i32(k + i32(1))
            if palette[a + u32(k)] <= palette[b + u32(k)]:
                return i32(plan_mod.ERR_RUNS)
    n_above = i32(0)
    y = i32(-1)
    while i32(y + i32(1)) < th:
        y = i32(y + i32(1))
        row = i32(y << i32(PITCH_LOG2))
        up = i32(row - i32(1 << PITCH_LOG2))
        c0 = i32(smem[u32(up)]) if y > i32(0) else i32(-1)
        first_ctx = row_ctx if y > i32(0) else i32(f2.RUN_CTX_LABEL)
        rank, x, w = _runs_symbol(src, dec, i32(tset + first_ctx), x, ws, nw, w)
        if repeats and y > i32(0) and rank == i32(f2.RUN_REPEAT):
            if empty[u32(tset + i32(f2.RUN_CTX_LENGTH))] != 0:
                return i32(plan_mod.ERR_TABLE)
            more, x, w = _runs_symbol(src, dec, i32(tset + i32(f2.RUN_CTX_LENGTH)), x, ws, nw, w)
            if i32(y + more) >= th:
                return i32(plan_mod.ERR_RUNS)
            for k in range(i32(more + i32(1))):  # (the boundaries above stay the repeated row's)
                at = i32(row + i32(i32(k) << i32(PITCH_LOG2)))
                for q in range(tw):
                    smem[u32(at + i32(q))] = smem[u32(up + i32(q))]
            y = i32(y + more)
            if w > nw:
                return i32(plan_mod.ERR_WORDS)
            continue
        label = _runs_label(rank, c0, i32(-1), i32(-1), i32(-1), n_colours)
        if label < i32(0):
            return i32(plan_mod.ERR_RUNS)
        a0 = i32(0)
        j = i32(0)
        n_starts = i32(0)
        while True:  # sass: runs (one run symbol)
            while j < n_above and i32(above[u32(j)]) <= a0:
                j = i32(j + i32(1))
            near = j < n_above
            ctx = i32(f2.RUN_CTX_NEAR) if near else i32(f2.RUN_CTX_FAR)
            if empty[u32(tset + ctx)] != 0:
                return i32(plan_mod.ERR_TABLE)
            m, x, w = _runs_symbol(src, dec, i32(tset + ctx), x, ws, nw, w)
            explicit = not same  # whether a label symbol follows the boundary (A2 mode 5)
            if same and m >= i32(f2.RUN_OTHER):
                m = i32(m - i32(f2.RUN_OTHER))
                explicit = True
                if m == i32(f2.RUN_END) or m == i32(f2.RUN_PASS):
                    return i32(plan_mod.ERR_RUNS)
            a1 = tw
            if m == i32(f2.RUN_END):
                a1 = tw
            elif m == i32(f2.RUN_LENGTH):
                if empty[u32(tset + i32(f2.RUN_CTX_LENGTH))] != 0:
                    return i32(plan_mod.ERR_TABLE)
                length, x, w = _runs_symbol(src, dec, i32(tset + i32(f2.RUN_CTX_LENGTH)), x, ws, nw, w)
                a1 = i32(i32(a0 + i32(1)) + length)
                if a1 >= tw:
                    return i32(plan_mod.ERR_RUNS)
            elif not near or m >= i32(f2.RUN_SYMBOLS):
                return i32(plan_mod.ERR_RUNS)
            elif m == i32(f2.RUN_PASS):
                j = i32(j + i32(1))
                continue
            else:
                a1 = i32(i32(above[u32(j)]) + i32(m - i32(f2.RUN_NEAR + f2.RUN_REACH)))
                if a1 >= tw:
                    return i32(plan_mod.ERR_RUNS)
            if a1 <= a0:
                return i32(plan_mod.ERR_RUNS)
            for q in range(a0, a1):
                smem[u32(row + i32(q))] = u8(label)
            if a1 == tw:
                break
            c0 = i32(smem[u32(up + a1)]) if y > i32(0) else i32(-1)
            c1 = i32(smem[u32(up + i32(min(i32(a1 + i32(1)), i32(tw - i32(1)))))]) if y > i32(0) else i32(-1)
            c2 = i32(smem[u32(i32(row + a0) - i32(1))]) if a0 > i32(0) else i32(-1)
            rank = i32(0)
            if explicit:
                rank, x, w = _runs_symbol(src, dec, i32(tset + i32(f2.RUN_CTX_LABEL)), x, ws, nw, w)
            label = _runs_label(rank, c0, c1, c2, label, n_colours)
            if label < i32(0):
                return i32(plan_mod.ERR_RUNS)
            starts[u32(n_starts)] = u8(a1)
            n_starts = i32(n_starts + i32(1))
            a0 = a1
        if w > nw:
            return i32(plan_mod.ERR_WORDS)
        for q in range(n_starts):
            above[u32(q)] = starts[u32(q)]
        n_above = n_starts
    if w != nw:
        return i32(plan_mod.ERR_WORDS)
    if x != u32(f2.STATE_LOW):
        return i32(plan_mod.ERR_STATE)
    return i32(0)


@cuda.jit
def decode_kernel(src, work, dec, empty, out, errors):
    """Decode v2 work item blockIdx.x (one tile) into out; errors[item] gets a code or 0.

    src: uint8 batch; work: int64 plan rows; dec: uint32 (n_tables * 4096) packed decode
    table; empty: int32 (n_tables,) 1 for an empty table. Dynamic shared memory: at least
    C * th * 64 bytes for every item (set by the launch).

    Index discipline: tile-local values are int32 (i32) and every array index is unsigned
    (u32 inside the tile, u64 for global byte offsets), so numba emits neither 64-bit
    index math nor its negative-index wraparound.
    """
    item = cuda.blockIdx.x
    lane = i32(cuda.threadIdx.x)
    smem = cuda.shared.array(0, types.uint8)  # a numba type: the simulator needs one here
    words = smem.view(np.uint32)
    scratch = cuda.shared.array(WARP, types.int64)  # used by the simulator's warp intrinsics only
    ring = cuda.shared.array(RING_BYTES, types.uint8)  # context symbols, see rANS below

    start = u64(work[item, plan_mod.SRC_START])
    end = u64(work[item, plan_mod.SRC_END])
    th = i32(work[item, plan_mod.TH])
    tw = i32(work[item, plan_mod.TW])
    c = i32(work[item, plan_mod.CH])
    out_base = u64(work[item, plan_mod.OUT_BASE])
    out_h = i32(work[item, plan_mod.OUT_H])
    out_w = i32(work[item, plan_mod.OUT_W])
    oy = i32(work[item, plan_mod.OY])
    ox = i32(work[item, plan_mod.OX])
    base = i32(work[item, plan_mod.TABLE_BASE])
    wide = work[item, plan_mod.WIDE] != 0
    tshift = i32(i32(2) + i32(work[item, plan_mod.PLANE]))  # eight tables per set with plane contexts
    ya = i32(max(i32(0), i32(-oy)))
    yb = i32(min(th, i32(out_h - oy)))
    xa = i32(max(i32(0), i32(-ox)))
    xb = i32(min(tw, i32(out_w - ox)))

    if src[start] == f2.TILE_RAW:
        row_len = i32((xb - xa) * c)
        for y in range(ya, yb):
            s0 = start + u64(u32(i32(i32(y * tw + xa) * c) + i32(1)))
            d0 = out_base + u64(u32(i32(i32(i32(oy + y) * out_w) + ox + xa) * c))
            for j in range(lane, row_len, WARP):
                out[d0 + u64(u32(j))] = src[s0 + u64(u32(j))]
        if lane == 0:
            errors[item] = 0
        return

    if src[start] >= f2.TILE_RUNS:  # (the host refused modes past LAST_MODE)
        # One thread decodes the runs (each symbol's table depends on the one before); the
        # warp then checks and writes the index plane as a palette tile's.
        code = i32(0)
        if lane == 0:
            code = _runs_tile(src, start, end, th, tw, c, base, tshift, dec, empty, smem, ring)  # (no ring here)
        code = _warp_max(scratch, code)
        if code != 0:
            if lane == 0:
                errors[item] = code
            return
        cuda.syncthreads()
        if src[start] == f2.TILE_RUNS_PALETTE:  # the palette _runs_tile decoded into shared memory
            palette, pal_at = _runs_palette(c, th, smem, ring)
            _palette_pixels(palette, u64(pal_at), c, smem, th, tw, out, out_base, out_w, oy, ox, ya, yb, xa, xb, lane)
        else:
            _palette_pixels(src, start + u64(f2.RUNS_HEADER), c, smem, th, tw, out, out_base, out_w, oy, ox, ya, yb, xa,
                            xb, lane)
        if lane == 0:
            errors[item] = 0
        return

    info = i32(src[start + u64(1)])
    colour = i32(info & i32(15))
    lanes_log2 = i32(info >> i32(4))
    lanes = i32(i32(1) << lanes_log2)
    # Palette tile (A2 mode 2): one rANS plane (the indices) in slot 0, channel byte at byte 3.
    n_colours = i32(0)
    pal_at = start + u64(4)
    if src[start] == f2.TILE_PALETTE:
        n_colours = i32(i32(src[start + u64(2)]) + i32(1))
        chb = i32(src[start + u64(3)])
        n_rans = i32(1)
        slots = i32(0)
        r_sets = i32(chb >> i32(4))
        r_preds = _predictor(chb)
        pos = pal_at + u64(u32(n_colours * c))
    else:
        # Per channel: its shared-memory slot (rANS planes first, in channel order, then the
        # constant ones); per rANS plane r: table set and predictor, packed in registers.
        n_rans = i32(0)
        for k in range(c):
            if src[start + u64(u32(k + 2))] != 0:
                n_rans = i32(n_rans + i32(1))
        slots = i32(0)
        r_sets = i32(0)
        r_preds = i32(0)
        rans_i = i32(0)
        const_i = n_rans
        pos = start + u64(u32(c + 2))
        for k in range(c):
            chb = i32(src[start + u64(u32(k + 2))])
            if chb != 0:
                slots = i32(slots | (rans_i << i32(2 * k)))
                r_sets = i32(r_sets | ((chb >> i32(4)) << i32(4 * rans_i)))
                r_preds = i32(r_preds | (_predictor(chb) << i32(3 * rans_i)))
                rans_i = i32(rans_i + i32(1))
            else:
                slots = i32(slots | (const_i << i32(2 * k)))
                fill = u32(u32(src[pos]) * u32(ONES))
                pos += u64(1)
                row0 = i32(const_i * th)
                for j in range(lane, i32(th << i32(4)), WARP):
                    words[u32(i32(row0 << i32(4)) + j)] = fill
                const_i = i32(const_i + i32(1))

    code = i32(0)
    if n_rans > 0:
        n = i32(i32(n_rans * th) * tw)
        ws = pos + u64(u32(lanes << i32(2)))  # the 16-bit words follow the lane states
        n_words = (end - ws) >> u64(1)
        if n_words > u64(n):  # each symbol reads at most one word: such a tile cannot end right
            code = i32(plan_mod.ERR_WORDS)
            n_words = u64(n)
        nw = i32(n_words)
        active = lane < lanes
        x = u32(f2.STATE_LOW)
        if active:
            at = pos + u64(u32(lane << i32(2)))
            x = u32(u32(src[at]) | (u32(src[at + u64(1)]) << u32(8)) | (u32(src[at + u64(2)]) << u32(16))
                    | (u32(src[at + u64(3)]) << u32(24)))
            if x < u32(f2.STATE_LOW):
                code = i32(plan_mod.ERR_STATE)
        # Cursor of symbol i = lane: row yy (over all rANS planes, which are back to back)
        # and column xx.
        yy = i32(0)
        xx = lane
        while xx >= tw:
            xx = i32(xx - tw)
            yy = i32(yy + i32(1))
        # Context ring: symbol i at ring[i % 256] and ring[i % 256 + 256], so symbol i - d is
        # at ring[i % 256 + 256 - d] for every d <= 128. Zeros stand for the symbols before
        # the start (A4).
        for j in range(lane, i32(RING_BYTES), WARP):
            ring[u32(j)] = 0
        cuda.syncthreads()  # (the block is this one warp)
        wmask = i32(255) if wide else i32(0)
        context_bits = i32(CONTEXT_BITS_WIDE) if wide else i32(CONTEXT_BITS_NARROW)
        plane = i32(0)
        plane_end = th
        while yy >= plane_end:
            plane = i32(plane + i32(1))
            plane_end = i32(plane_end + th)
        # Each rANS plane's empty-table mask, 8 bits per plane, made once: the plane change in
        # the loop below then only shifts registers.
        emasks = u32(0)
        for r in range(n_rans):
            emasks = u32(emasks | (u32(_empty_mask(empty, _set_row(base, r_sets, r, tshift), tshift)) << u32(8 * r)))
        # the plane's first decode-table entry: (table row) << 12, so that the loop adds ctx << 12
        tbase = i32(_set_row(base, r_sets, plane, tshift) << i32(12))
        emask = i32((emasks >> u32(8 * plane)) & u32(255))
        empty_hit = i32(0)
        # Plane bits (A4, FLAG_PLANE_CONTEXT): past the first rANS plane of a tile of at least
        # PLANE_CONTEXT_MIN_PIXELS pixels, context | PLANE_CONTEXT when the symbol one plane
        # back (th rows up in shared memory, decoded steps ago) is not 0. Branch-free in the
        # loop: in the first plane, or without plane bits, pback is 0 (a load of the lane's
        # own slot) and pone 0.
        plane_bits = tshift == i32(3) and i32(th * tw) >= i32(f2.PLANE_CONTEXT_MIN_PIXELS)
        pback_on = i32(th << i32(PITCH_LOG2)) if plane_bits else i32(0)
        pone_on = i32(1) if plane_bits else i32(0)  # 4 * pone is PLANE_CONTEXT or 0
        pback = pback_on if plane > i32(0) else i32(0)
        pone = pone_on if plane > i32(0) else i32(0)
        lane_below = u32((u32(1) << u32(lane)) - u32(1))
        ptr = i32(0)
        steps = i32(i32(n + lanes - i32(1)) >> lanes_log2)
        i = lane
        i_end = i32(lane + i32(steps << lanes_log2))  # every lane runs the same steps
        while i < i_end:  # sass: rans (one symbol per lane per step)
            live = active and i < n
            need = False
            if live:
                addr = i32((yy << i32(PITCH_LOG2)) + xx)
                q = u32(i32(i & i32(RING - 1)) + i32(RING))
                far = i32(max(max(i32(ring[q - u32(63)]), i32(ring[q - u32(65)])), i32(ring[q - u32(128)])))
                u = i32(max(i32(ring[q - u32(64)]), i32(far & wmask)))
                # ctx: the 2-bit field of context_bits for min(u, 9), 3 from 9 up
                ctx = i32((context_bits >> i32(i32(min(u, i32(9))) << i32(1))) & i32(3))
                # + 4 * min(S, pone): 4 when plane bits are on and the symbol one plane back is
                # not 0, no branch (ctx < 4, so + is |)
                ctx = i32(ctx + i32(i32(min(i32(smem[u32(addr - pback)]), pone)) << i32(2)))
                empty_hit = i32(empty_hit | i32(u32(emask) >> u32(ctx)))
                e = dec[u32(i32(tbase + i32(ctx << i32(12))) | i32(x & u32(4095)))]
                x = u32(u32(u32((e >> u32(8)) & u32(4095)) + u32(1)) * (x >> u32(12)) + (e >> u32(20)))
                sym = u8(e & u32(255))
                smem[u32(addr)] = sym
                ring[q] = sym
                ring[q - u32(RING)] = sym
                need = x < u32(f2.STATE_LOW)
            mask = u32(_ballot(scratch, need))
            if need:
                idx = i32(ptr + i32(cuda.popc(mask & lane_below)))
                if idx < nw:
                    at = ws + u64(u32(idx << i32(1)))
                    x = u32((x << u32(16)) | u32(src[at]) | (u32(src[at + u64(1)]) << u32(8)))
                else:
                    code = i32(plan_mod.ERR_WORDS)
            ptr = i32(ptr + i32(cuda.popc(mask)))
            _syncwarp()  # this step's ring writes before the next steps' reads
            i = i32(i + lanes)
            xx = i32(xx + lanes)
            while xx >= tw:  # once per row at most when lanes <= tw
                xx = i32(xx - tw)
                yy = i32(yy + i32(1))
            while yy >= plane_end:  # sass: rare (the next rANS plane: its table set)
                plane = i32(plane + i32(1))
                plane_end = i32(plane_end + th)
                if plane < n_rans:
                    tbase = i32(_set_row(base, r_sets, plane, tshift) << i32(12))
                    emask = i32((emasks >> u32(8 * plane)) & u32(255))
                    pback = pback_on
                    pone = pone_on
        if active and x != u32(f2.STATE_LOW):
            code = i32(plan_mod.ERR_STATE)
        if ptr != nw and code == 0:
            code = i32(plan_mod.ERR_WORDS)
        # Last: a symbol from an empty table is the cause the CPU decoder names too (its
        # garbage symbols then leave states and words wrong as well).
        if empty_hit & i32(1):
            code = i32(plan_mod.ERR_TABLE)
    # One code for the tile: the largest of the lanes' (any non-zero one rejects the tile).
    code = _warp_max(scratch, code)
    if code != 0:
        if lane == 0:
            errors[item] = code
        return
    cuda.syncthreads()

    # Row pass: zig-zag inverse and, for left/gradient, the prefix sum along each row.
    # Lanes 0-15 take one row and lanes 16-31 the next; lane & 15 is the word column. MED
    # planes skip it: the MED pass undoes the zig-zag of the two pixels it reads, which
    # saves them a pass over shared memory.
    half = i32(lane >> i32(4))
    col = i32(lane & i32(15))
    for r in range(n_rans):
        pred = i32((r_preds >> i32(3 * r)) & i32(7))
        if pred == i32(f2.PRED_MED):
            continue
        for y0 in range(0, th, 2):  # sass: rows (4 pixel-channels per lane)
            y = i32(y0 + half)
            a = u32(i32(i32(i32(r * th) + y) << i32(4)) + col)
            w = u32(0)
            if y < th:
                w = _unzigzag8(words[a])
            if pred & i32(1):
                w = _add8(w, w << u32(8))
                w = _add8(w, w << u32(16))
                total = i32(w >> u32(24))
                run = total
                for d in (1, 2, 4, 8):
                    other = i32(_shfl_up(scratch, run, d))
                    if col >= d:
                        run = i32(run + other)
                carry = u32(i32(run - total) & i32(255))
                w = _add8(w, u32(carry * u32(ONES)))
            if y < th:
                words[a] = w
    cuda.syncthreads()

    # Column pass (up, gradient): a lane walks down one word column of one plane.
    for unit in range(lane, i32(n_rans << i32(4)), WARP):
        r = i32(unit >> i32(4))
        if ((r_preds >> i32(3 * r)) & i32(7)) & i32(2):  # up (2) and gradient (3), not MED (4)
            a = u32(i32(i32(r * th) << i32(4)) + i32(unit & i32(15)))
            run = u32(0)
            for _ in range(th):  # sass: columns (4 pixel-channels per lane)
                run = _add8(run, words[a])
                words[a] = run
                a = u32(a + u32(WORDS_PER_ROW))
    cuda.syncthreads()

    # MED pass (predictor 4): each prediction needs the pixel to its left and the one above,
    # so a plane goes as a wavefront, two pixels (one 16-bit pair of columns) per lane and
    # step. Lane j decodes columns 2b and 2b + 1 of row j at step j + b, then those of row
    # 32 + j at step j + 32 + b (row 31 is done by then). The two pixels above are the pair
    # lane j - 1 decoded at the step before (one shuffle, which also keeps the lanes in step),
    # except for row 32, whose row 31 lane 0 reads back from shared memory; the left and
    # upper-left pixels stay in registers. ceil(tw / 2) + 31 steps for up to 32 rows, 32 more
    # for 64 (95 for a 64x64 tile: 0.74 steps per pixel of a lane). Selects, not branches,
    # where they can: a divergent branch costs a reconvergence point per step.
    prev_lane = i32(i32(lane + i32(WARP - 1)) & i32(WARP - 1))
    pairs = smem.view(np.uint16)
    n_pairs = i32(i32(tw + i32(1)) >> i32(1))
    for r in range(n_rans):
        if ((r_preds >> i32(3 * r)) & i32(7)) == i32(f2.PRED_MED):
            at0 = i32(i32(i32(r * th) + lane) << i32(PITCH_LOG2 - 1))  # pair 0 of row j of plane r
            at1 = i32(at0 + i32(WARP << i32(PITCH_LOG2 - 1)))  # of row 32 + j
            # row 31 (any row of the plane when th <= 32: then read, never used)
            row31 = i32(i32(i32(r * th) + i32(min(i32(WARP - 1), i32(th - 1)))) << i32(PITCH_LOG2 - 1))
            rows0 = i32(lane < th)
            rows1 = i32(i32(lane + i32(WARP)) < th)
            cur = i32(0)
            left = i32(0)
            upleft = i32(0)
            n_steps = i32(n_pairs + i32(WARP - 1))
            if th > i32(WARP):
                n_steps = i32(n_steps + i32(WARP))
            t = i32(0)
            while t < n_steps:  # sass: med (two pixels per lane per step)
                got = i32(_shfl_idx(scratch, cur, prev_lane))
                _syncwarp()  # lane 31's row 31 in shared memory, for lane 0's row 32
                b = i32(t - lane)
                in2 = i32(-i32(b >= i32(WARP)))  # all ones on the lane's second row
                b = i32(b - i32(i32(WARP) & in2))
                at = i32(at0 ^ i32(i32(at0 ^ at1) & in2))
                live = i32(rows0 ^ i32(i32(rows0 ^ rows1) & in2)) & i32(u32(b) < u32(n_pairs))
                above31 = i32(pairs[u32(row31 + i32(b & i32(31)))])
                up = got if lane != i32(0) else i32(above31 & in2)  # lane 0's row 0: zero above
                edge = i32(-i32(b == i32(0)))  # column 0: zero left and upper-left (A4)
                up0 = i32(up & i32(255))
                up1 = i32(up >> i32(8))
                if live != i32(0):
                    a = u32(at + b)
                    residuals = i32(_unzigzag8(u32(pairs[a])))  # the row pass left MED planes zig-zagged
                    v0 = i32(i32(residuals + _median_of(i32(left & ~edge), up0, i32(upleft & ~edge))) & i32(255))
                    v1 = i32(i32(i32(residuals >> i32(8)) + _median_of(v0, up1, up0)) & i32(255))
                    cur = i32(v0 | i32(v1 << i32(8)))
                    pairs[a] = u32(cur)
                    left = v1
                upleft = up1
                t = i32(t + i32(1))
    cuda.syncthreads()

    if n_colours > 0:
        # Every index of the tile below P (whatever the region), then pixel = palette colour.
        bad = i32(0)
        for yq in range(th):
            for xq in range(lane, tw, WARP):  # sass: palette check
                if i32(smem[u32(i32(i32(yq) << i32(PITCH_LOG2)) + i32(xq))]) >= n_colours:
                    bad = i32(plan_mod.ERR_INDEX)
        bad = _warp_max(scratch, bad)
        if bad != 0:
            if lane == 0:
                errors[item] = bad
            return
        _palette_pixels(src, pal_at, c, smem, th, tw, out, out_base, out_w, oy, ox, ya, yb, xa, xb, lane)
        if lane == 0:
            errors[item] = 0
        return

    # Colour inverse (4 pixels per word) and the interleaved write of the requested region.
    # Lanes form rows of 2^width_log2 word columns (>= the words the region spans in a
    # row), 32 >> width_log2 rows per pass: no division by the span.
    p_off0 = u32(i32(i32(slots & i32(3)) * th) << i32(4))
    p_off1 = u32(i32(i32((slots >> i32(2)) & i32(3)) * th) << i32(4))
    p_off2 = u32(i32(i32((slots >> i32(4)) & i32(3)) * th) << i32(4))
    p_off3 = u32(i32(i32((slots >> i32(6)) & i32(3)) * th) << i32(4))
    x_lo = i32(xa >> i32(2))
    x_hi = i32(i32(xb + i32(3)) >> i32(2))
    width_log2 = i32(0)
    while (i32(1) << width_log2) < i32(x_hi - x_lo):
        width_log2 = i32(width_log2 + i32(1))
    wc = i32(x_lo + i32(lane & i32(i32(i32(1) << width_log2) - i32(1))))
    x0 = i32(wc << i32(2))
    y_first = i32(ya + i32(lane >> width_log2))
    y_step = i32(WARP >> width_log2)
    if wc < x_hi and c == i32(1):
        # Masks and grey images: no colour transform, one plane word and four bytes out.
        for y in range(y_first, yb, y_step):  # sass: output1
            p0 = words[p_off0 + u32(i32(y << i32(4)) + wc)]
            line = i32(i32(i32(oy + y) * out_w) + ox + x0)
            for j in range(4):
                x = i32(x0 + j)
                if x >= xa and x < xb:
                    out[out_base + u64(u32(i32(line + j)))] = (p0 >> u32(8 * j)) & u32(255)
    elif wc < x_hi:
        for y in range(y_first, yb, y_step):  # sass: output
            row = u32(i32(y << i32(4)) + wc)
            p0 = words[p_off0 + row]
            p1 = words[p_off1 + row]
            p2 = words[p_off2 + row]
            p3 = u32(0)
            if c == 4:
                p3 = words[p_off3 + row]
            if colour == 1:
                p0 = _add8(p0, p1)
                p2 = _add8(p2, p1)
            elif colour == 2:
                t = _sub8(p0, _half8(p1))
                g = _add8(p1, t)
                b = _sub8(t, _half8(p2))
                p0 = _add8(b, p2)
                p1 = g
                p2 = b
            elif colour == 3:
                p0 = _add8(p0, p1)
                p2 = _add8(p2, _mean8(p0, p1))
            # Pixel x0 + j goes to out_base + ((oy + y) * out_w + ox + x0 + j) * c; the
            # term in brackets is >= 0 for every pixel inside the region.
            line = i32(i32(i32(oy + y) * out_w) + ox + x0)
            for j in range(4):
                x = i32(x0 + j)
                if x >= xa and x < xb:
                    sh = u32(8 * j)
                    d = out_base + u64(u32(i32(line + j) * c))
                    out[d] = (p0 >> sh) & u32(255)
                    out[d + u64(1)] = (p1 >> sh) & u32(255)
                    out[d + u64(2)] = (p2 >> sh) & u32(255)
                    if c == 4:
                        out[d + u64(3)] = (p3 >> sh) & u32(255)
    if lane == 0:
        errors[item] = 0


@cuda.jit
def expand_tables_kernel(freq, cum, dec):
    """Packed decode tables on the device: one block per table, thread v writes the slots of
    symbol v (cum[v] .. cum[v] + freq[v] - 1) as decode_table does; an empty table (all
    frequencies 0) becomes 0 in every slot. The host then copies 2 KiB per table (freq, cum)
    instead of 16 KiB, and never builds the 4096-slot tables itself."""
    t = cuda.blockIdx.x
    v = cuda.threadIdx.x
    base = t * PROB_SCALE
    if cum[t, 256] == 0:
        per = PROB_SCALE // 256
        for k in range(per):
            dec[base + v * per + k] = u32(0)
        return
    f = freq[t, v]
    start = cum[t, v]
    packed = u32(v) | (u32(f - 1) << u32(8))
    for j in range(f):
        dec[base + start + j] = packed | (u32(j) << u32(20))


def device_tables(plan: plan_mod.Plan, buffers: Any, stream: Any) -> Any:
    """The plan's packed decode tables on the device: copied when the host has them (plan.dec,
    or plan.lut from plan.build, packed by numba in microseconds), else expanded there from
    freq/cum (expand_tables_kernel: the GPU Reader's host plan skips the packing)."""
    from prepkit.lossless import cuda as cuda_v1

    n_tables = plan.freq.shape[0]
    if plan.dec is not None or plan.lut.shape[0] == n_tables or n_tables == 0:
        return cuda_v1.upload(buffers, "dec", decode_table(plan), stream)
    freq = cuda_v1.upload(buffers, "freq", np.ascontiguousarray(plan.freq, np.int32), stream)
    cum = cuda_v1.upload(buffers, "cum", np.ascontiguousarray(plan.cum, np.int32), stream)
    dec = cuda_v1.device_scratch(buffers, "dec", n_tables * PROB_SCALE, np.uint32, stream)
    for start, stop in cuda_v1.chunks(n_tables, cuda_v1.MAX_GRID_X):
        expand_tables_kernel[stop - start, 256, stream](freq[start:stop], cum[start:stop], dec[start * PROB_SCALE :])
    return dec


def decode_table(plan: plan_mod.Plan) -> np.ndarray:
    """uint32 (n_tables * 4096): symbol | (f - 1) << 8 | (slot - cum) << 20 per (table, slot),
    the CPU decoder's packed table (cpu_v2.decode_table), flat. One load per decoded symbol
    instead of three (lut, freq, cum); empty tables are 0 and flagged through plan.empty."""
    from prepkit.lossless import cpu_v2

    if plan.dec is not None:
        return plan.dec
    if plan.lut.shape[0] == 0:
        return np.zeros(1, np.uint32)
    return np.ascontiguousarray(cpu_v2.decode_table(plan).reshape(-1))


def shared_bytes(work: np.ndarray) -> int:
    """Dynamic shared memory of a launch: C * th rows of 64 bytes for the largest item, and for
    a colour item th rows and a mode 6 runs tile's palette (_runs_palette)."""
    if work.shape[0] == 0:
        return 4
    rows = int((work[:, plan_mod.CH] * work[:, plan_mod.TH]).max())
    colour = work[:, plan_mod.CH] >= 3
    palette = int((work[colour, plan_mod.TH] << PITCH_LOG2).max()) + PALETTE_BYTES if colour.any() else 0
    return max(4, rows << PITCH_LOG2, palette)


def decode_plan(
    plan: plan_mod.Plan, stream: object = 0, out: object | None = None, pinned: np.ndarray | None = None,
    buffers: Any = None, errors: Any = None,
) -> tuple[object, object, object]:
    """Same contract as cuda.decode_plan (buffers, errors and the return value included).

    v2 items run in launches of decode_kernel; v1 items of a mixed batch in launches of the
    v1 kernel (each in chunks of at most cuda.MAX_GRID_X tiles).
    """
    from prepkit.lossless import cuda as cuda_v1

    source = cuda_v1.stage_source(plan, pinned)
    if buffers is not None:
        src = buffers.device("src", max(source.size, 1), np.uint8)
        if source.size:
            src[: source.size].copy_to_device(source, stream=stream)
    else:
        src = cuda.to_device(source if source.size else np.zeros(1, np.uint8), stream=stream)
    target: Any = out
    if target is None:
        target = cuda.device_array(max(plan.total, 1), np.uint8, stream=stream)
    else:
        plan_mod.check_out(target, plan.total)
    n_items = plan.work.shape[0]
    is_v2 = plan.work[:, plan_mod.VERSION] == f2.VERSION
    v2_items = np.flatnonzero(is_v2)
    v1_items = np.flatnonzero(~is_v2)
    codes = cuda_v1.device_scratch(buffers, "errors", n_items, np.int32, stream)
    if v2_items.size:
        # All-v2 batches (the usual case) launch on the plan's own table: no gather of it.
        whole = v2_items.size == n_items
        work = cuda_v1.upload(buffers, "work", plan.work if whole else plan.work[v2_items], stream)
        dec = device_tables(plan, buffers, stream)
        empty = cuda_v1.upload(buffers, "empty", np.asarray(plan.empty, np.int32).reshape(-1)
                               if plan.empty.size else np.zeros(1, np.int32), stream)
        shared = shared_bytes(plan.work if whole else plan.work[v2_items])
        for start, stop in cuda_v1.chunks(v2_items.size, cuda_v1.MAX_GRID_X):
            decode_kernel[stop - start, WARP, stream, shared](src, work[start:stop], dec, empty, target, codes[start:stop])
    if v1_items.size:
        base = v2_items.size  # the v1 codes follow the v2 codes in the one scratch array
        work = cuda_v1.upload(buffers, "work_v1", plan.work[v1_items], stream)
        for start, stop in cuda_v1.chunks(v1_items.size, cuda_v1.MAX_GRID_X):
            cuda_v1.decode_kernel[stop - start, cuda_v1.THREADS, stream](
                src, work[start:stop], target, codes[base + start : base + stop]
            )
    if n_items:
        _check(plan, codes[:n_items], np.concatenate([v2_items, v1_items]), stream, buffers, errors)
    if buffers is not None:
        return target[: plan.total], None, None
    offsets = cuda.to_device(plan.offsets, stream=stream)
    shapes = cuda.to_device(plan.shapes, stream=stream)
    return target[: plan.total], offsets, shapes


def _check(plan: plan_mod.Plan, codes: Any, items: np.ndarray, stream: Any, buffers: Any, errors: Any) -> None:
    """Errors of the launches (``codes[j]`` is plan item ``items[j]``): reduced on the device
    into ``errors`` when given, else read back now (CodecError naming the first bad image)."""
    from prepkit.lossless import cuda as cuda_v1

    if errors is not None:
        cuda_v1.report_errors(codes, plan.image_of_item[items], stream, buffers, errors, "image_of_item")
        return
    host = codes.copy_to_host(stream=stream)
    if stream != 0:
        stream.synchronize()  # the copy is asynchronous: read only after it is done
    full = np.zeros(plan.work.shape[0], np.int32)
    full[items] = host
    plan_mod.raise_errors(plan, full)


def kernel_signatures() -> list[tuple]:
    """(python function, signature) of every v2 CUDA kernel, for compile_ptx checks."""
    from numba import types

    sig = (types.uint8[::1], types.int64[:, ::1], types.uint32[::1], types.int32[::1], types.uint8[::1],
           types.int32[::1])
    return [(decode_kernel.py_func, sig)]
