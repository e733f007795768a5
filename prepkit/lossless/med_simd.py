"""The MED inverse (bitstream v2, A4) eight rows at a time, for the numba CPU decoder.

Each pixel under MED needs its left neighbour, so a row is a serial chain; the scalar decoder
ran four rows skewed by a column each to overlap four chains, at about 19 instructions per
pixel. Here eight rows run as the eight byte lanes of one vector: at step x, lane k decodes
row y0 + k, column x - k. Lane k's upper neighbour is then the pixel lane k - 1 decoded at the
previous step (its current left value), and its upper-left one is its own previous upper
neighbour, so the step loads only the eight residuals, plus the row above for lane 0:

    U  = (L shifted up one lane) with lane 0 = the pixel above lane 0
    t  = L + U - UL in unsigned saturating bytes     (clamping below 0 or above 255 does not
                                                      change the median of L, U and t)
    P  = max(min(L, U), min(max(L, U), t))            MED as a median of three
    L  = the residual + P mod 256, in the lanes whose column is inside 1 .. tw - 1;
         the others store back the byte they loaded (the ramps of the skew)

The lanes are LLVM vector operations (generic IR: saturating adds, min/max and byte
inserts/extracts; no CPU-specific intrinsic), so the step compiles on any CPU numba runs on.
Lanes whose row is past the tile (the last group) load and store lane 0's byte before lane 0
does, so they change nothing. `unpredict_rows` is the numba loop; `reference_v2.unpredict` is
the plain numpy reference tests compare it with.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

GROUP = 8  # rows per vector step

_I8, _I64 = ir.IntType(8), ir.IntType(64)
_V8I8 = ir.VectorType(_I8, GROUP)


def _umin(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_unsigned("<", a, b), a, b)


def _umax(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_unsigned(">", a, b), a, b)


@intrinsic
def med_step8(typingctx, row, base, stride, live, x, tw, left, upleft, above):
    """One step of a row group: lane k's residual at row[base + k * stride] (base = the
    group's first row start + x, stride = tw - 1), for the `live` lanes (the others use lane
    0's byte); left and upleft are the lane vectors L and UL packed in uint64s (lane k in
    byte k), above the pixel above lane 0. Returns (new L, this step's U)."""
    sig = types.UniTuple(types.uint64, 2)(row, types.int64, types.int64, types.int64, types.int64, types.int64,
                                          types.uint64, types.uint64, types.uint8)

    def codegen(context, builder, signature, args):
        row_v, base_v, stride_v, live_v, x_v, tw_v, left_v, upleft_v, above_v = args
        usat_add = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V8I8, [_V8I8, _V8I8]),
                                                  "llvm.uadd.sat.v8i8")
        usat_sub = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V8I8, [_V8I8, _V8I8]),
                                                  "llvm.usub.sat.v8i8")
        data = context.make_array(signature.args[0])(context, builder, row_v).data
        addresses = []
        residual = ir.Constant(_V8I8, ir.Undefined)
        for k in range(GROUP):
            offset = builder.select(builder.icmp_signed("<", ir.Constant(_I64, k), live_v),
                                    builder.mul(stride_v, ir.Constant(_I64, k)), ir.Constant(_I64, 0))
            address = builder.gep(data, [builder.add(base_v, offset)])
            addresses.append(address)
            residual = builder.insert_element(residual, builder.load(address), ir.Constant(_I64, k))

        left = builder.bitcast(left_v, _V8I8)
        upleft = builder.bitcast(upleft_v, _V8I8)
        # U = L shifted up a lane, `above` in lane 0, as integer arithmetic: built with vector
        # inserts LLVM picks AMD's SSE4a insertq, which made this step 14x slower on this VM.
        up = builder.bitcast(builder.or_(builder.shl(left_v, ir.Constant(_I64, 8)), builder.zext(above_v, _I64)), _V8I8)
        t = builder.call(usat_sub, [builder.call(usat_add, [left, builder.call(usat_sub, [up, upleft])]),
                                    builder.call(usat_sub, [upleft, up])])
        low, high = _umin(builder, left, up), _umax(builder, left, up)
        pixel = builder.add(residual, _umax(builder, low, _umin(builder, high, t)))

        # Lane k is inside the tile's columns 1 .. tw - 1 when x - k - 1 < tw - 1 (unsigned).
        lanes = ir.Constant(ir.VectorType(_I64, GROUP), list(range(GROUP)))
        column = builder.sub(builder.sub(_splat64(builder, x_v), lanes), ir.Constant(lanes.type, [1] * GROUP))
        inside = builder.icmp_unsigned("<", column, _splat64(builder, builder.sub(tw_v, ir.Constant(_I64, 1))))
        inside = builder.and_(inside, builder.icmp_signed("<", lanes, _splat64(builder, live_v)))
        pixel = builder.select(inside, pixel, residual)
        for k in reversed(range(GROUP)):  # dead lanes (high k) store lane 0's byte before lane 0 does
            builder.store(builder.extract_element(pixel, ir.Constant(_I64, k)), addresses[k])
        result = (builder.bitcast(pixel, _I64), builder.bitcast(up, _I64))
        return context.make_tuple(builder, signature.return_type, result)

    return sig, codegen


def _splat64(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    vector = builder.insert_element(ir.Constant(ir.VectorType(_I64, GROUP), ir.Undefined), value,
                                    ir.Constant(_I64, 0))
    return builder.shuffle_vector(vector, vector, ir.Constant(ir.VectorType(ir.IntType(32), GROUP), [0] * GROUP))


@njit(nogil=True, cache=True, boundscheck=False)
def unpredict_rows(row, th, tw):
    """Rows 1 .. th - 1 of a residual plane (row 0 and column 0 already decoded) -> pixels
    under MED, eight rows per group, the group's rows skewed by a column each."""
    stride = tw - 1
    for y0 in range(1, th, GROUP):
        live = min(GROUP, th - y0)
        a0 = y0 * tw
        left = np.uint64(row[a0])
        upleft = np.uint64(row[a0 - tw])
        for x in range(1, tw + live - 1):
            # The pixel above lane 0 (for x >= tw lane 0 is done: any byte of the group will do).
            above = row[a0 - tw + x]
            left, upleft = med_step8(row, a0 + x, stride, live, x, tw, left, upleft, above)
