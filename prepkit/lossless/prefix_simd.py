"""Row prefix sums mod 256 sixteen bytes per vector step, for the numba CPU decoder.

The inverse of the left and gradient predictors (A4) runs a prefix sum along every row of a
residual plane. As a scalar loop each byte waits for the previous one (a chain of one add per
byte); here a 16-byte block is summed in four shift-and-add steps (shifts by 1, 2, 4 and 8
bytes, `pslldq` on x86), then the running total of the row so far is added to every lane. Only
that last add waits for the previous block, so the blocks of a row, and the rows, overlap.

The steps are generic LLVM vector IR (shufflevector with a zero vector, adds), so they compile
on any CPU numba runs on. `prefix_rows` is the numba loop; `reference_v2.unpredict` is the
plain numpy reference the tests compare it with.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

BLOCK = 16  # bytes per vector step

_I8, _I32, _I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
_V16I8 = ir.VectorType(_I8, BLOCK)


def _shifted_up(builder: ir.IRBuilder, vector: ir.Value, k: int) -> ir.Value:
    """Lane j gets lane j - k (zero for j < k): a byte shift towards the high lanes."""
    zero = ir.Constant(_V16I8, [0] * BLOCK)
    mask = [j if j < k else BLOCK + j - k for j in range(BLOCK)]  # 0..15: zero's lanes, 16..: vector's
    return builder.shuffle_vector(zero, vector, ir.Constant(ir.VectorType(_I32, BLOCK), mask))


@intrinsic
def prefix16(typingctx, row, at, carry):
    """row[at .. at + 15] += their running sums plus carry (mod 256), in place; returns the
    new row[at + 15] (the carry of the next block)."""
    sig = types.uint8(row, types.int64, types.uint8)

    def codegen(context, builder, signature, args):
        row_v, at_v, carry_v = args
        data = context.make_array(signature.args[0])(context, builder, row_v).data
        pointer = builder.bitcast(builder.gep(data, [at_v]), _V16I8.as_pointer())
        block = builder.load(pointer, align=1)
        for k in (1, 2, 4, 8):
            block = builder.add(block, _shifted_up(builder, block, k))
        splat = builder.insert_element(ir.Constant(_V16I8, ir.Undefined), carry_v, ir.Constant(_I64, 0))
        splat = builder.shuffle_vector(splat, splat, ir.Constant(ir.VectorType(_I32, BLOCK), [0] * BLOCK))
        block = builder.add(block, splat)
        builder.store(block, pointer, align=1)
        return builder.extract_element(block, ir.Constant(_I64, BLOCK - 1))

    return sig, codegen


@njit(nogil=True, cache=True, boundscheck=False)
def prefix_rows(row, th, tw):
    """Every row of a th x tw uint8 plane (row-major, contiguous) -> its running sums mod 256:
    whole 16-byte blocks as vector steps, the rest of a row (tw % 16 bytes) scalar."""
    whole = tw - tw % BLOCK
    for y in range(th):
        base = y * tw
        carry = np.uint8(0)
        for x in range(0, whole, BLOCK):
            carry = prefix16(row, base + x, carry)
        line = row[base + whole : base + tw]
        for x in range(tw - whole):
            carry += line[x]
            line[x] = carry
