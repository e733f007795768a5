"""The MED inverse (bitstream v2, A4) one anti-diagonal at a time, for the numba CPU decoder.

Each pixel under MED needs its left neighbour, so a row is a serial chain. All the pixels of
one anti-diagonal (y + x = d) depend only on the two diagonals before it, though: the pixel's
left and upper neighbours lie on diagonal d - 1, its upper-left one on d - 2. So the plane is
re-laid out diagonal-major (`diag[d, y]` = the pixel at row y, column d - y), and one 64-byte
vector step decodes a whole diagonal; lane y's neighbours are then

    L  = lane y of the previous step's pixels,
    U  = lane y - 1 of the previous step's pixels (a one-lane shift),
    UL = the previous step's U,

kept in registers from step to step. A tile of th x tw pixels takes th + tw - 1 steps (127 for
a full tile, 32 pixels per step on average) instead of th * tw scalar ones. Per lane:

    t  = L + U - UL in unsigned saturating bytes     (clamping below 0 or above 255 does not
                                                      change the median of L, U and t)
    P  = max(min(L, U), min(max(L, U), t))            MED as a median of three
    P  = L in row 0, U in column 0 (lane y on diagonal y)
    pixel = residual + P mod 256

Lanes outside the tile (x < 0, x >= tw, y >= th) compute bytes no inside lane ever reads.
The steps of one plane form a single dependency chain, so a tile's MED planes (up to four)
run their steps side by side in one loop (`med_steps`), which overlaps the chains.

The plane goes to and from the diagonal layout by 16 x 16 byte transposes (four rounds of
byte interleaves, `punpcklbw`/`punpckhbw` on x86) of 16 rows loaded at a one-byte skew per
row: row y0 + j from column d0 - y0 - j, two blocks (d0 and d0 + 16) per 32-byte vector where
both are needed. The rows live in a padded scratch (PITCH bytes per
row, LEFT bytes before column 0) so that the skewed loads and stores of the ragged ends fall
into the padding. Everything is generic LLVM vector IR (shuffles, saturating adds, compares),
so it compiles on any CPU numba runs on. `to_diagonals`, `med_steps` and `from_diagonals` are
the numba entry points (`unpredict` chains them for one plane); `reference_v2.unpredict` is the
plain numpy reference the tests compare them with.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from prepkit.jitcache import guard_disk_cache
from prepkit.lossless import memops

BLOCK = 16  # rows and columns of one transpose
LANES = 64  # lanes of the diagonal step: the largest tile side
LEFT = BLOCK  # padding before column 0 of a scratch row: skewed loads start up to 15 bytes early
PITCH = LEFT + LANES + 2 * BLOCK  # and end up to 31 bytes past column tw - 1
PAD_ROWS = LANES + BLOCK  # the last row block of a partial tile reads up to 15 rows past th
DIAG_ROWS = 2 * LANES  # diagonals 0 .. th + tw - 2, and the last transpose's 16 rows past them
PLANES = 4  # planes whose diagonal steps run side by side (a tile's MED planes)
DIAG_AT = PAD_ROWS * PITCH  # the scratch: the padded rows, then PLANES planes of diagonals
DIAG_BYTES = DIAG_ROWS * LANES
SCRATCH_BYTES = DIAG_AT + PLANES * DIAG_BYTES

_I1, _I8, _I32, _I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
_V16 = ir.VectorType(_I8, BLOCK)
_V64 = ir.VectorType(_I8, LANES)


def _mask(values: list[int]) -> ir.Constant:
    return ir.Constant(ir.VectorType(_I32, len(values)), values)


def _transpose(builder: ir.IRBuilder, rows: list[ir.Value], blocks: int = 1) -> list[ir.Value]:
    """16 x 16 bytes (in each 16-byte part of 16 * `blocks`-byte rows): four rounds of
    interleaving row i with row i + 8 (low halves into row 2i, high halves into row 2i + 1)
    leave the transpose. The interleaves stay within each 16-byte part."""
    width = blocks * BLOCK
    low = _mask([h * BLOCK + k for h in range(blocks) for j in range(BLOCK // 2) for k in (j, width + j)])
    high = _mask([h * BLOCK + k for h in range(blocks) for j in range(BLOCK // 2, BLOCK) for k in (j, width + j)])
    for _ in range(4):
        out = []
        for i in range(BLOCK // 2):
            out.append(builder.shuffle_vector(rows[i], rows[i + BLOCK // 2], low))
            out.append(builder.shuffle_vector(rows[i], rows[i + BLOCK // 2], high))
        rows = out
    return rows


def _transposes(blocks: int, src_block: int = BLOCK, dst_block: int = BLOCK):
    """An intrinsic (src, src_at, src_stride, dst, dst_at, dst_stride) that transposes `blocks`
    16 x 16 byte blocks (1 or 2) side by side in 16 * blocks-byte vectors: block b's row j at
    src[src_at + j * src_stride + b * src_block], its transpose's row t to dst[dst_at + t *
    dst_stride + b * dst_block] (unaligned; src and dst may be one array when the blocks do not
    overlap). Rows of blocks src_block = 16 apart are one load, dst_block = 16 apart one
    store. The interleaves stay within 16-byte parts, so one 32-byte shuffle does the work of
    two 16-byte ones (the transposes are shuffle-bound: one or two ports)."""
    vector = ir.VectorType(_I8, blocks * BLOCK)
    halves = [_mask(list(range(b * BLOCK, (b + 1) * BLOCK))) for b in range(blocks)]
    join = _mask(list(range(blocks * BLOCK)))

    @intrinsic
    def transpose(typingctx, src, src_at, src_stride, dst, dst_at, dst_stride):
        sig = types.none(src, types.int64, types.int64, dst, types.int64, types.int64)

        def codegen(context, builder, signature, args):
            src_v, src_at_v, src_stride_v, dst_v, dst_at_v, dst_stride_v = args
            src_data = context.make_array(signature.args[0])(context, builder, src_v).data
            dst_data = context.make_array(signature.args[3])(context, builder, dst_v).data

            def pointer(data: ir.Value, base: ir.Value, stride: ir.Value, row: int, offset: int,
                        ty: ir.Type) -> ir.Value:
                at = builder.add(base, builder.add(builder.mul(stride, ir.Constant(_I64, row)),
                                                   ir.Constant(_I64, offset)))
                return builder.bitcast(builder.gep(data, [at]), ty.as_pointer())

            rows = []
            for j in range(BLOCK):
                if blocks == 1 or src_block == BLOCK:  # the blocks' rows are contiguous: one load
                    rows.append(builder.load(pointer(src_data, src_at_v, src_stride_v, j, 0, vector), align=1))
                    continue
                pieces = [builder.load(pointer(src_data, src_at_v, src_stride_v, j, b * src_block, _V16), align=1)
                          for b in range(blocks)]
                rows.append(builder.shuffle_vector(pieces[0], pieces[1], join))
            for t, row in enumerate(_transpose(builder, rows, blocks)):
                if blocks == 1 or dst_block == BLOCK:
                    builder.store(row, pointer(dst_data, dst_at_v, dst_stride_v, t, 0, vector), align=1)
                    continue
                for b in range(blocks):
                    half = builder.shuffle_vector(row, ir.Constant(vector, ir.Undefined), halves[b])
                    builder.store(half, pointer(dst_data, dst_at_v, dst_stride_v, t, b * dst_block, _V16), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return transpose


# One block; two whose rows are side by side in the padded rows and whose diagonals are 16
# diagonals apart (rows to diagonals), and the other way round.
transpose16 = _transposes(1)
_pair_to_diagonals = _transposes(2, BLOCK, BLOCK * LANES)
_pair_from_diagonals = _transposes(2, BLOCK * LANES, BLOCK)


def _call(builder: ir.IRBuilder, name: str, *values: ir.Value) -> ir.Value:
    function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V64, [_V64] * len(values)), name)
    return builder.call(function, list(values))


def _umin(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_unsigned("<", a, b), a, b)


def _umax(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_unsigned(">", a, b), a, b)


def _diagonal_steps(chains: int):
    """An intrinsic (work, steps) that runs the diagonal steps of `chains` planes in one loop:
    plane m's diagonals at work[DIAG_AT + m * DIAG_BYTES + d * 64 + y]. Each plane is one
    dependency chain of steps; side by side, the chains overlap."""

    @intrinsic
    def steps_of(typingctx, work, steps):
        sig = types.none(work, types.int64)

        def codegen(context, builder, signature, args):
            work_v, steps_v = args
            data = context.make_array(signature.args[0])(context, builder, work_v).data
            zero = ir.Constant(_V64, [0] * LANES)
            lane = ir.Constant(_V64, list(range(LANES)))
            row0 = builder.icmp_unsigned("==", lane, zero)
            # promoted to registers by LLVM
            previous = [cgutils.alloca_once_value(builder, zero) for _ in range(chains)]
            previous_up = [cgutils.alloca_once_value(builder, zero) for _ in range(chains)]
            with cgutils.for_range(builder, steps_v) as loop:
                d = loop.index
                # Column 0 is lane y on diagonal y (d < 64 here; for larger d no lane matches).
                d8 = builder.trunc(builder.select(builder.icmp_unsigned("<", d, ir.Constant(_I64, LANES)), d,
                                                  ir.Constant(_I64, 255)), _I8)
                splat = builder.shuffle_vector(builder.insert_element(ir.Constant(_V64, ir.Undefined), d8,
                                                                      ir.Constant(_I64, 0)),
                                               ir.Constant(_V64, ir.Undefined), _mask([0] * LANES))
                column0 = builder.icmp_unsigned("==", lane, splat)
                for m in range(chains):
                    left = builder.load(previous[m])
                    upleft = builder.load(previous_up[m])
                    up = builder.shuffle_vector(zero, left, _mask([0] + [LANES + y - 1 for y in range(1, LANES)]))
                    at = builder.add(builder.mul(d, ir.Constant(_I64, LANES)), ir.Constant(_I64, DIAG_AT + m * DIAG_BYTES))
                    pointer = builder.bitcast(builder.gep(data, [at]), _V64.as_pointer())
                    residual = builder.load(pointer, align=1)
                    t = _call(builder, "llvm.usub.sat.v64i8",
                              _call(builder, "llvm.uadd.sat.v64i8", left, _call(builder, "llvm.usub.sat.v64i8", up, upleft)),
                              _call(builder, "llvm.usub.sat.v64i8", upleft, up))
                    low, high = _umin(builder, left, up), _umax(builder, left, up)
                    predicted = _umax(builder, low, _umin(builder, high, t))
                    predicted = builder.select(column0, up, predicted)
                    predicted = builder.select(row0, left, predicted)
                    pixel = builder.add(residual, predicted)
                    builder.store(pixel, pointer, align=1)
                    builder.store(pixel, previous[m])
                    builder.store(up, previous_up[m])
            return context.get_dummy_value()

        return sig, codegen

    return steps_of


_steps1, _steps2, _steps3, _steps4 = (_diagonal_steps(n) for n in range(1, PLANES + 1))


@njit(nogil=True, cache=True, boundscheck=False)
def med_steps(work, steps, count):
    """The diagonal steps (the recurrence in the module docstring) of planes 0 .. count - 1
    (1 to 4) laid out by to_diagonals, in one loop."""
    if count == 1:
        _steps1(work, steps)
    elif count == 2:
        _steps2(work, steps)
    elif count == 3:
        _steps3(work, steps)
    else:
        _steps4(work, steps)


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def scratch():
    """The scratch bytes the MED inverse needs, made once per thread: the padded rows, then
    the diagonals of up to four planes."""
    return np.empty(SCRATCH_BYTES, np.uint8)


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _unzigzag(zigzag, src_at, work, dst_at, n):
    """work[dst_at : dst_at + n] = the residuals of the zig-zag symbols zigzag[src_at : src_at + n]."""
    for x in range(n):
        z = zigzag[src_at + x]
        work[dst_at + x] = (z >> 1) ^ -(z & 1)


@njit(nogil=True, cache=True, boundscheck=False)
def to_diagonals(zigzag, th, tw, work, m):
    """Zig-zag residual symbols of a th x tw plane (row-major, th, tw <= 64) -> residuals laid
    out diagonal-major as plane m (0..3) of the scratch `work`."""
    if tw == LANES:  # full tiles: rows of a constant length, one vector each
        for y in range(th):
            _unzigzag(zigzag, y * LANES, work, y * PITCH + LEFT, LANES)
    else:
        for y in range(th):
            _unzigzag(zigzag, y * tw, work, y * PITCH + LEFT, tw)
    # Block (y0, d0): rows y0 .. y0 + 15 from column d0 - y0 - j (row j of the block), that is
    # diagonals d0 .. d0 + 15 at lanes y0 .. y0 + 15; d0 covers every diagonal those rows touch.
    at = DIAG_AT + m * DIAG_BYTES
    for y0 in range(0, th, BLOCK):
        end = y0 + tw + BLOCK - 1
        d0 = y0
        while d0 + BLOCK < end:  # two blocks at a time while both are needed
            _pair_to_diagonals(work, y0 * PITCH + LEFT + d0 - y0, PITCH - 1, work, at + d0 * LANES + y0, LANES)
            d0 += 2 * BLOCK
        if d0 < end:
            transpose16(work, y0 * PITCH + LEFT + d0 - y0, PITCH - 1, work, at + d0 * LANES + y0, LANES)


@njit(nogil=True, cache=True, boundscheck=False)
def from_diagonals(row, th, tw, work, m):
    """Plane m's decoded diagonals in `work` -> the th x tw plane, row-major, into row."""
    at = DIAG_AT + m * DIAG_BYTES
    for y0 in range(0, th, BLOCK):
        end = y0 + tw + BLOCK - 1
        d0 = y0
        while d0 + BLOCK < end:
            _pair_from_diagonals(work, at + d0 * LANES + y0, LANES, work, y0 * PITCH + LEFT + d0 - y0, PITCH - 1)
            d0 += 2 * BLOCK
        if d0 < end:
            transpose16(work, at + d0 * LANES + y0, LANES, work, y0 * PITCH + LEFT + d0 - y0, PITCH - 1)
    if tw == LANES:  # full tiles: a constant length, so LLVM copies inline (not a call to libc per row)
        for y in range(th):
            memops.copy(row, y * LANES, work, y * PITCH + LEFT, LANES)
    else:
        for y in range(th):
            memops.copy(row, y * tw, work, y * PITCH + LEFT, tw)


@njit(nogil=True, cache=True, boundscheck=False)
def unpredict(zigzag, row, th, tw, work):
    """Zig-zag residual symbols of one th x tw plane -> its pixels under MED, into row; work
    is `scratch()`. (A tile's MED planes go through to_diagonals, med_steps and
    from_diagonals together: cpu_v2._decode_item.)"""
    to_diagonals(zigzag, th, tw, work, np.int64(0))
    med_steps(work, th + tw - 1, np.int64(1))
    from_diagonals(row, th, tw, work, np.int64(0))


# The kernels inline memops' intrinsics: see prepkit.jitcache.
guard_disk_cache(globals(), (memops,))
