"""Byte fills and copies for numba kernels as LLVM's memset and memcpy, and unaligned
four-byte stores.

A plain `for x in range(n): out[d + x] = v` loop is vectorised or turned into a memset by
LLVM only when it can prove enough about the arrays where the loop ends up after inlining:
the same fill took 0.17 us per 64 x 64 tile in a small kernel and 0.9 us inside the v2
decoder (docs/BENCHMARKS.md "Runs tiles"). These intrinsics emit the memset and memcpy
calls themselves, so every caller gets the library's vector code. No bounds checks: the
callers keep every range inside its array.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _byte_address(context, builder, array_type, array, at):
    """i8* to element `at` (an integer) of a contiguous uint8 array."""
    data = context.make_array(array_type)(context, builder, array).data
    return builder.gep(data, [at])


@intrinsic
def fill(typingctx, array, at, count, value):
    """array[at : at + count] = value (uint8 array, count >= 0)."""

    def codegen(context, builder, signature, args):
        arr, start, n, v = args
        ptr = _byte_address(context, builder, signature.args[0], arr, start)
        byte = builder.trunc(v, ir.IntType(8)) if v.type != ir.IntType(8) else v
        cgutils.memset(builder, ptr, n, byte)
        return context.get_dummy_value()

    return types.none(array, at, count, value), codegen


@intrinsic
def copy(typingctx, dst, dst_at, src, src_at, count):
    """dst[dst_at : dst_at + count] = src[src_at : src_at + count] (uint8 arrays, no overlap)."""

    def codegen(context, builder, signature, args):
        d, d_at, s, s_at, n = args
        d_ptr = _byte_address(context, builder, signature.args[0], d, d_at)
        s_ptr = _byte_address(context, builder, signature.args[2], s, s_at)
        cgutils.raw_memcpy(builder, d_ptr, s_ptr, n, 1)
        return context.get_dummy_value()

    return types.none(dst, dst_at, src, src_at, count), codegen


@intrinsic
def store32(typingctx, array, at, value):
    """array[at : at + 4] = the low 32 bits of value, little-endian (uint8 array, any `at`:
    an unaligned store). Three-channel palette pixels are written with it four bytes at a time,
    each store's fourth byte overwritten by the next pixel (cpu_v2._palette_pixels)."""

    def codegen(context, builder, signature, args):
        arr, start, v = args
        ptr = builder.bitcast(_byte_address(context, builder, signature.args[0], arr, start), ir.IntType(32).as_pointer())
        word = v
        if v.type.width > 32:
            word = builder.trunc(v, ir.IntType(32))
        elif v.type.width < 32:
            word = builder.zext(v, ir.IntType(32))
        builder.store(word, ptr, align=1)
        return context.get_dummy_value()

    return types.none(array, at, value), codegen


@intrinsic
def prefetch_write(typingctx, array, at):
    """Ask for the cache line of array[at] (uint8 array) for writing, into every level: a hint,
    no fault on any address."""

    def codegen(context, builder, signature, args):
        arr, start = args
        ptr = _byte_address(context, builder, signature.args[0], arr, start)
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32]),
            "llvm.prefetch.p0i8")
        builder.call(fn, [ptr, ir.Constant(i32, 1), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.none(array, at), codegen
