"""numba CPU kernels: the encoder and the decoder, parallel over tiles.

The same steps as reference.py, written for speed. The decoder has no per-value branch on
the data: the unary section becomes terminator positions through a byte lookup table (each
byte stores its 8 candidate positions at the index given by a popcount prefix), the low bits
of 8 values come from one unaligned 64-bit load, and the inverse predictor is a vectorized
column add plus row scans. Safety: plan.build validated every header and tile table before
this runs; inside a tile the Rice parameters, the low-bit length and the terminator count are
checked before the data they describe is used, and 8-byte loads near the end of the input
fall back to a checked byte loop, so hostile payloads cannot move any read or write out of
bounds.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

from prepkit.jitcache import guard_disk_cache
from prepkit.lossless import format as fmt
from prepkit.lossless import plan as plan_mod

BLOCK = fmt.BLOCK
MAX_K = fmt.MAX_K


def _bit_tables() -> tuple[np.ndarray, np.ndarray]:
    popcount = np.array([bin(b).count("1") for b in range(256)], np.int32)
    positions = np.zeros((256, 8), np.int32)
    for b in range(256):
        set_bits = [i for i in range(8) if b >> i & 1]
        positions[b, : len(set_bits)] = set_bits
    return popcount, positions


POPCOUNT, POSITIONS = _bit_tables()
MAX_VALUES = 4 * max(fmt.TILE_SIZES) ** 2  # values in the largest tile (64 x 64 x 4)
MAX_BLOCKS = MAX_VALUES // BLOCK
_local = threading.local()  # per-thread scratch, reused across calls (see _scratch)


# ----------------------------------------------------------------------------- encoder


@njit(nogil=True, cache=True, boundscheck=False)
def _tile_values(image, y0, x0, th, tw, colour, values):
    """Zig-zagged gradient residuals of one tile, channel-planar, into values[:th*tw*c]."""
    c = image.shape[2]
    plane = th * tw
    for y in range(th):
        for x in range(tw):
            for ch in range(c):
                v = np.int32(image[y0 + y, x0 + x, ch])
                left = np.int32(image[y0 + y, x0 + x - 1, ch]) if x > 0 else 0
                up = np.int32(image[y0 + y - 1, x0 + x, ch]) if y > 0 else 0
                ul = np.int32(image[y0 + y - 1, x0 + x - 1, ch]) if x > 0 and y > 0 else 0
                values[ch * plane + y * tw + x] = (v - left - up + ul) & 255
    if colour:
        for i in range(plane):
            g = np.int32(values[plane + i])
            values[i] = (np.int32(values[i]) - g) & 255
            values[2 * plane + i] = (np.int32(values[2 * plane + i]) - g) & 255
    for i in range(c * plane):
        s = np.int32(values[i])
        s = s - 256 if s > 127 else s
        values[i] = (s << 1) ^ (s >> 31)  # zig-zag: 2s or -2s-1
    return c * plane


@njit(nogil=True, cache=True, boundscheck=False)
def _encode_tile(image, y0, x0, th, tw, colour, out, base, max_len, values, ks):
    """Write one tile's payload at out[base:]; return its length in bytes."""
    # values and ks are reused scratch; out[base : base + max_len] is this tile's region of a
    # reused buffer: clear both (the unary writer ORs bits in, padding values must be 0).
    values[: ((th * tw * image.shape[2] + BLOCK - 1) // BLOCK) * BLOCK] = 0
    out[base : base + max_len] = 0
    n = _tile_values(image, y0, x0, th, tw, colour, values)
    n_blocks = (n + BLOCK - 1) // BLOCK
    b_len = 0
    for b in range(n_blocks):
        best_k = 0
        best = 1 << 30
        for k in range(MAX_K + 1):
            cost = BLOCK * k
            for i in range(BLOCK):
                cost += values[b * BLOCK + i] >> k
            if cost < best:
                best = cost
                best_k = k
        ks[b] = best_k
        b_len += 2 * best_k
    a_len = (n_blocks + 1) // 2
    for i in range(a_len):
        lo = ks[2 * i]
        hi = ks[2 * i + 1] if 2 * i + 1 < n_blocks else 0
        out[base + i] = lo | (hi << 4)
    # Low bits: each block is 16 * k bits = 2k bytes, so blocks start on byte boundaries.
    pos = base + a_len
    for b in range(n_blocks):
        k = ks[b]
        acc = np.uint64(0)
        nbits = 0
        mask = (1 << k) - 1
        for i in range(BLOCK):
            acc |= np.uint64(values[b * BLOCK + i] & mask) << np.uint64(nbits)
            nbits += k
            if nbits >= 32:
                for _ in range(4):
                    out[pos] = acc & np.uint64(255)
                    acc >>= np.uint64(8)
                    pos += 1
                nbits -= 32
        while nbits > 0:
            out[pos] = acc & np.uint64(255)
            acc >>= np.uint64(8)
            pos += 1
            nbits -= 8
    # Unary high parts: q zero bits then a one bit, LSB-first.
    c_start = pos
    bit = 0
    for b in range(n_blocks):
        k = ks[b]
        for i in range(BLOCK):
            bit += values[b * BLOCK + i] >> k
            out[c_start + (bit >> 3)] |= 1 << (bit & 7)
            bit += 1
    return c_start + (bit + 7) // 8 - base


@njit(nogil=True, cache=True, boundscheck=False)
def _encode_some(image, tile, colour, scratch, starts, lengths, first, step, values, ks):
    """Encode tiles first, first + step, ... with one set of scratch arrays."""
    h, w = image.shape[0], image.shape[1]
    tiles_x = (w + tile - 1) // tile
    for i in range(first, lengths.size, step):
        ty = i // tiles_x
        tx = i - ty * tiles_x
        th = min(tile, h - ty * tile)
        tw = min(tile, w - tx * tile)
        lengths[i] = _encode_tile(
            image, ty * tile, tx * tile, th, tw, colour, scratch, starts[i], starts[i + 1] - starts[i], values, ks
        )


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _encode_tiles(image, tile, colour, scratch, starts, lengths, values, ks):
    chunks = values.shape[0]
    for chunk in prange(chunks):
        _encode_some(image, tile, colour, scratch, starts, lengths, np.int64(chunk), chunks, values[chunk], ks[chunk])


@njit(nogil=True, cache=True, boundscheck=False)
def _encode_tiles_serial(image, tile, colour, scratch, starts, lengths, values, ks):
    _encode_some(image, tile, colour, scratch, starts, lengths, np.int64(0), np.int64(1), values[0], ks[0])


@njit(nogil=True, cache=True, boundscheck=False)
def _gather(scratch, starts, offsets, out):
    for i in range(starts.size - 1):  # starts and offsets have n_tiles + 1 entries
        n = offsets[i + 1] - offsets[i]
        out[offsets[i] : offsets[i] + n] = scratch[starts[i] : starts[i] + n]


def _encode_scratch(size: int, chunks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-thread reused encoder buffers: payload scratch of at least size bytes, and
    values/ks rows for `chunks` chunks (fresh pages cost about 9 us each on the VMs measured)."""
    buffer = getattr(_local, "encode_buffer", None)
    if buffer is None or buffer.size < size:
        buffer = np.empty(size, np.uint8)
        _local.encode_buffer = buffer
    rows = getattr(_local, "encode_rows", None)
    if rows is None or rows[0].shape[0] < chunks:
        rows = (np.zeros((chunks, MAX_VALUES), np.int32), np.zeros((chunks, MAX_BLOCKS), np.int32))
        _local.encode_rows = rows
    return buffer, rows[0], rows[1]


def encode(image: np.ndarray, tile: int = 64) -> bytes:
    """Encode an HxW or HxWxC uint8 image with the numba kernels."""

    image, flags = fmt.prepare(image, tile)
    h, w, c = image.shape
    header = fmt.Header(h, w, c, tile, flags)
    th, tw = fmt.tile_geometry(header)
    _, max_len = fmt.payload_bounds(-(-(th * tw * c) // BLOCK))
    starts = np.concatenate([[0], np.cumsum(max_len)]).astype(np.int64)
    lengths = np.zeros(header.n_tiles, np.int64)
    chunks = numba.get_num_threads() if use_parallel(header.n_tiles) else 1
    scratch, values, ks = _encode_scratch(int(starts[-1]), chunks)
    if chunks > 1:
        _encode_tiles(image, tile, header.colour, scratch, starts, lengths, values[:chunks], ks[:chunks])
    else:
        _encode_tiles_serial(image, tile, header.colour, scratch, starts, lengths, values, ks)
    first = fmt.HEADER_SIZE + header.table_size
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    out = np.empty(first + int(offsets[-1]), np.uint8)
    out[: fmt.HEADER_SIZE] = np.frombuffer(header.pack(), np.uint8)
    out[fmt.HEADER_SIZE : first] = np.frombuffer((offsets + first).astype("<u4").tobytes(), np.uint8)
    _gather(scratch, starts, offsets + first, out)
    return out.tobytes()


# ----------------------------------------------------------------------------- decoder


@intrinsic
def load64(typingctx, array, index):
    """8 bytes little-endian from a uint8 array at index, as one unaligned load.

    numba does not fold the byte-by-byte version into one load (measured 2x slower on the
    value stage). No bounds check: callers make sure index + 8 <= array.size.
    """

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        pointer = builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(64).as_pointer())
        return builder.load(pointer, align=1)

    return types.int64(array, index), codegen


@intrinsic
def popcount64(typingctx, value):
    """Number of one bits of an int64 (one popcnt instruction)."""

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return types.int64(value), codegen


@intrinsic
def _add8(typingctx, dst, dst_index, table, table_index, value):
    """dst[dst_index : dst_index + 8] = table[table_index : table_index + 8] + value.

    int32 arrays; one 256-bit load, add and store (numba leaves the 8-step loop scalar:
    8 stores per byte of unary code, the decoder's slowest stage before this). No bounds
    check: callers guarantee both ranges.
    """
    vec = ir.VectorType(ir.IntType(32), 8)

    def codegen(context, builder, signature, args):
        dst_data = context.make_array(signature.args[0])(context, builder, args[0]).data
        table_data = context.make_array(signature.args[2])(context, builder, args[2]).data
        loaded = builder.load(builder.bitcast(builder.gep(table_data, [args[3]]), vec.as_pointer()), align=4)
        splat = builder.insert_element(ir.Constant(vec, None), args[4], ir.Constant(ir.IntType(32), 0))
        splat = builder.shuffle_vector(splat, ir.Constant(vec, None), ir.Constant(vec, [0] * 8))
        target = builder.bitcast(builder.gep(dst_data, [args[1]]), vec.as_pointer())
        builder.store(builder.add(loaded, splat), target, align=4)
        return context.get_dummy_value()

    return types.none(dst, types.uint64, table, types.int64, types.int32), codegen


@njit(nogil=True, cache=True, boundscheck=False)
def _load64_tail(src, at):
    """The bytes of src[at : at + 8] that exist, little-endian, zeros beyond the end."""
    word = np.int64(0)
    for i in range(min(8, src.size - at)):
        word |= np.int64(src[at + i]) << (8 * i)
    return word


@njit(nogil=True, cache=True, boundscheck=False)
def _decode_item(src, item, out, popcount, positions, flat_positions, ks, block_start, ends, res):
    """Decode one work item (see plan.py) into the flat output; return an error code.

    ks, block_start, ends and res are scratch arrays big enough for the largest tile.
    """
    start, end = item[0], item[1]
    th, tw, c, colour = item[2], item[3], item[4], item[5]
    out_base, out_h, out_w, oy, ox = item[6], item[7], item[8], item[9], item[10]
    n = th * tw * c
    n_blocks = (n + BLOCK - 1) // BLOCK
    n_vals = n_blocks * BLOCK
    a_len = (n_blocks + 1) // 2
    # Section A: Rice parameters, and where each block's low bits start (2k bytes each).
    pos = start + a_len
    k_or = 0
    for b in range(n_blocks):
        k = (np.int64(src[start + (b >> 1)]) >> ((b & 1) * 4)) & 15
        k_or |= k
        ks[b] = k
        block_start[b] = pos
        pos += 2 * k
    if k_or > MAX_K:
        return plan_mod.ERR_K
    if pos > end:
        return plan_mod.ERR_LOW_BITS
    # Section C must hold exactly one terminator per value and end in a nonzero byte;
    # checked first, so the flattening below can never run past `ends`.
    # (Hot loops index slice views with range variables: numba then drops its negative-index
    # wraparound code, which otherwise blocks vectorization; measured 10x on the column sums.)
    unary = src[pos:end]
    n_words = unary.size // 8
    total = 0
    for w in range(n_words):
        total += popcount64(load64(unary, 8 * w))
    for p in range(8 * n_words, unary.size):
        total += popcount[unary[p]]
    if total != n_vals or unary[unary.size - 1] == 0:
        return plan_mod.ERR_UNARY
    # Positions of the terminating one bits: each byte writes its 8 candidates from a
    # table at the index given by the popcount of the bits before it (no branch per bit;
    # within a 64-bit word the 8 bytes do not wait for each other).
    ends[0] = -1
    j = np.uint64(1)
    for w in range(n_words):
        word = load64(unary, 8 * w)
        for i in range(8):
            byte = (word >> (8 * i)) & 255
            at = j + np.uint64(popcount64(word & ((np.int64(1) << (8 * i)) - 1)))
            bit0 = np.int32(64 * w + 8 * i)
            _add8(ends, at, flat_positions, byte * 8, bit0)
        j += np.uint64(popcount64(word))
    for p in range(8 * n_words, unary.size):
        byte = unary[p]
        bit0 = np.int32(p * 8)
        for t in range(8):
            ends[j + np.uint64(t)] = bit0 + positions[byte, t]
        j += np.uint64(popcount[byte])
    # Values: the low bits of values 0-7 of a block lie in its first k bytes and those of
    # values 8-15 in the next k bytes; four 28-bit slices of two 64-bit loads feed the 16
    # values in a loop LLVM unrolls into straight-line code.
    too_big = np.int32(0)
    for b in range(n_blocks):
        k = np.int32(ks[b])
        mask = np.int32((1 << k) - 1)
        at = block_start[b]
        if at + k + 8 <= src.size:
            w0 = load64(src, at)
            w1 = load64(src, at + k)
        else:  # the last blocks of the input: no 8 bytes left to load at once
            w0 = _load64_tail(src, at)
            w1 = _load64_tail(src, at + k)
        s0 = np.int32(w0 & 0xFFFFFFF)
        s1 = np.int32((w0 >> (4 * k)) & 0xFFFFFFF)
        s2 = np.int32(w1 & 0xFFFFFFF)
        s3 = np.int32((w1 >> (4 * k)) & 0xFFFFFFF)
        # High parts are the gaps between consecutive terminators.
        later = ends[b * BLOCK + 1 : b * BLOCK + BLOCK + 1]
        earlier = ends[b * BLOCK : b * BLOCK + BLOCK]
        rv = res[b * BLOCK : b * BLOCK + BLOCK]
        for i in range(BLOCK):
            quarter = i >> 2
            word = s0 if quarter == 0 else (s1 if quarter == 1 else (s2 if quarter == 2 else s3))
            v = ((later[i] - earlier[i] - 1) << k) | ((word >> ((i & 3) * k)) & mask)
            too_big |= v
            rv[i] = (v >> 1) ^ -(v & 1)  # undo zig-zag; the uint8 store keeps it mod 256
    if too_big > 255 or too_big < 0:
        return plan_mod.ERR_VALUE
    # Inverse predictor, part 1: prefix sums down the columns, mod 256 (vectorizes).
    plane = th * tw
    for ch in range(c):
        for y in range(1, th):
            cur = res[ch * plane + y * tw : ch * plane + y * tw + tw]
            above = res[ch * plane + (y - 1) * tw : ch * plane + y * tw]
            for x in range(tw):
                cur[x] += above[x]
    # Part 2: running sums along each row, in place, one chain per channel; then the colour
    # transform and the interleaved copy into the requested region, which LLVM vectorizes.
    ya, yb = max(0, -oy), min(th, out_h - oy)
    xa, xb = max(0, -ox), min(tw, out_w - ox)
    for y in range(ya, yb):
        row = y * tw
        for ch in range(c):
            line_in = res[ch * plane + row : ch * plane + row + xb]
            run = np.uint8(0)
            for x in range(xb):
                run += line_in[x]
                line_in[x] = run
    gain = np.uint8(colour)
    width = xb - xa
    for y in range(ya, yb):
        row = y * tw + xa
        dst = out_base + ((oy + y) * out_w + ox + xa) * c
        line = out[dst : dst + width * c]
        t0 = res[row : row + width]
        if c == 1:
            for x in range(width):
                line[x] = t0[x]
            continue
        t1 = res[plane + row : plane + row + width]
        t2 = res[2 * plane + row : 2 * plane + row + width]
        if c == 3:
            for x in range(width):
                g = t1[x]
                line[3 * x] = t0[x] + g * gain
                line[3 * x + 1] = g
                line[3 * x + 2] = t2[x] + g * gain
        else:
            t3 = res[3 * plane + row : 3 * plane + row + width]
            for x in range(width):
                g = t1[x]
                line[4 * x] = t0[x] + g * gain
                line[4 * x + 1] = g
                line[4 * x + 2] = t2[x] + g * gain
                line[4 * x + 3] = t3[x]
    return 0


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _decode_items(src, work, out, errors, popcount, positions, flat_positions, scratch):
    # One chunk per scratch row: chunk c decodes items c, c + chunks, ... with its own
    # scratch, so no thread allocates per tile.
    chunks = scratch.ks.shape[0]
    for chunk in prange(chunks):
        for i in range(chunk, work.shape[0], chunks):
            errors[i] = _decode_item(
                src, work[i], out, popcount, positions, flat_positions,
                scratch.ks[chunk], scratch.block_start[chunk], scratch.ends[chunk], scratch.res[chunk],
            )


@njit(nogil=True, cache=True, boundscheck=False)
def _decode_items_serial(src, work, out, errors, popcount, positions, flat_positions, scratch):
    for i in range(work.shape[0]):
        errors[i] = _decode_item(
            src, work[i], out, popcount, positions, flat_positions,
            scratch.ks[0], scratch.block_start[0], scratch.ends[0], scratch.res[0],
        )


class DecodeScratch(NamedTuple):
    """Per-chunk scratch rows for the decoder, sized for the largest tile (64x64x4)."""

    ks: np.ndarray  # int64 (chunks, MAX_BLOCKS)
    block_start: np.ndarray  # int64 (chunks, MAX_BLOCKS)
    ends: np.ndarray  # int32 (chunks, MAX_VALUES + 16): terminator positions; writes reach n_vals + 8
    res: np.ndarray  # uint8 (chunks, MAX_VALUES)


def _scratch(chunks: int) -> DecodeScratch:
    """Scratch reused across calls, one set per Python thread (decode may run concurrently
    in several threads). Allocating it per tile or per call cost more than the decoding
    itself on VMs where every fresh page faults in at about 9 us."""
    cached = getattr(_local, "decode", None)
    if cached is None or cached.ks.shape[0] < chunks:
        cached = DecodeScratch(
            np.zeros((chunks, MAX_BLOCKS), np.int64),
            np.zeros((chunks, MAX_BLOCKS), np.int64),
            np.zeros((chunks, MAX_VALUES + 16), np.int32),
            np.zeros((chunks, MAX_VALUES), np.uint8),
        )
        _local.decode = cached
    return cached


# Below this many tiles per thread a parallel launch costs more than it saves. Measured on
# a 2-vCPU VM: a 500x375 image (48 tiles) decodes 1.9x faster on 2 threads than on 1 when
# the machine is idle, but when other processes hold the CPUs, OpenMP workers spin-waiting
# for a core made tiny images up to 7x slower in parallel, hence a floor rather than none.
MIN_TILES_PER_THREAD = 16


def serial_tiles() -> int:
    """The most tiles a kernel keeps on the calling thread (use_parallel): any number with
    one numba thread, fewer than MIN_TILES_PER_THREAD per thread otherwise."""
    threads = numba.get_num_threads()
    return np.iinfo(np.int64).max if threads == 1 else MIN_TILES_PER_THREAD * threads - 1


def use_parallel(n_tiles: int) -> bool:
    """Whether a kernel over n_tiles tiles should run on numba's thread pool."""
    if n_tiles < 2 * MIN_TILES_PER_THREAD:  # too few for two threads: skip get_num_threads (3 us)
        return False
    return n_tiles > serial_tiles()


def decode_plan(plan: plan_mod.Plan, out: np.ndarray | None = None) -> np.ndarray:
    """Run the CPU decoders over a validated plan (v1 and v2 items, each with its kernel);
    return the flat output buffer (out[:plan.total] when out is given)."""
    if out is None:
        out = np.empty(plan.total, np.uint8)
    else:
        plan_mod.check_out(out, plan.total)
        out = out[: plan.total]
    errors = np.zeros(plan.work.shape[0], np.int64)  # (int64 like single.py's: one specialization)
    present = plan.versions  # hostplan's plans record them: no scan of the work table
    if present <= {1}:
        _decode_v1(plan.src, plan.work, out, errors)
    elif present == {2}:
        from prepkit.lossless import cpu_v2

        cpu_v2.decode_items(plan, np.arange(plan.work.shape[0]), out, errors)
    else:
        from prepkit.lossless import cpu_v2

        versions = plan.work[:, plan_mod.VERSION]
        v1 = np.flatnonzero(versions == 1)
        if v1.size:
            sub = np.zeros(v1.size, np.int64)
            _decode_v1(plan.src, np.ascontiguousarray(plan.work[v1]), out, sub)
            errors[v1] = sub
        cpu_v2.decode_items(plan, np.flatnonzero(versions == 2), out, errors)
    plan_mod.raise_errors(plan, errors)
    return out


def _decode_v1(src: np.ndarray, work: np.ndarray, out: np.ndarray, errors: np.ndarray) -> None:
    if use_parallel(work.shape[0]):
        chunks = numba.get_num_threads()
        scratch = _scratch(chunks)
        scratch = DecodeScratch(*(a[:chunks] for a in scratch))
        _decode_items(src, work, out, errors, POPCOUNT, POSITIONS, POSITIONS.reshape(-1), scratch)
    else:
        scratch = _scratch(1)
        _decode_items_serial(src, work, out, errors, POPCOUNT, POSITIONS, POSITIONS.reshape(-1), scratch)


# The kernels read format's and plan's constants: see prepkit.jitcache.
guard_disk_cache(globals(), (fmt, plan_mod))
