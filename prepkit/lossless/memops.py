"""Byte fills and copies for numba kernels as LLVM's memset and memcpy, unaligned four-byte
stores, and planes interleaved into pixels by vector shuffles (interleave3, interleave4).

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


def _interleaver(channels: int, pixels: int):
    """An intrinsic that stores `pixels` pixels of `channels` planes as interleaved bytes."""
    i8, i32 = ir.IntType(8), ir.IntType(32)
    plane_vector = ir.VectorType(i8, pixels)
    pair_vector = ir.VectorType(i32, 2 * pixels)
    # Byte k * pixels + x of the planes side by side (planes 0-1, then 2-3 or 2 and padding)
    # is channel k of pixel x; pixel x's channels go to bytes channels * x + k.
    order = [k * pixels + x for x in range(pixels) for k in range(channels)]

    def codegen(context, builder, signature, args):
        planes = [builder.load(builder.bitcast(_byte_address(context, builder, signature.args[k], args[k], args[channels]),
                                               plane_vector.as_pointer()), align=1) for k in range(channels)]
        low = builder.shuffle_vector(planes[0], planes[1], ir.Constant(pair_vector, list(range(2 * pixels))))
        if channels == 3:
            high = builder.shuffle_vector(planes[2], ir.Constant(plane_vector, ir.Undefined),
                                          ir.Constant(pair_vector, list(range(pixels)) * 2))
        else:
            high = builder.shuffle_vector(planes[2], planes[3], ir.Constant(pair_vector, list(range(2 * pixels))))
        pixels_vector = builder.shuffle_vector(low, high, ir.Constant(ir.VectorType(i32, len(order)), order))
        dst, dst_at = args[channels + 1], args[channels + 2]
        ptr = _byte_address(context, builder, signature.args[channels + 1], dst, dst_at)
        builder.store(pixels_vector, builder.bitcast(ptr, pixels_vector.type.as_pointer()), align=1)
        return context.get_dummy_value()

    return codegen


# Pixels per call of interleave3 and interleave4: one AVX2 register of each plane.
INTERLEAVE_PIXELS = 32
_INTERLEAVE3 = _interleaver(3, INTERLEAVE_PIXELS)
_INTERLEAVE4 = _interleaver(4, INTERLEAVE_PIXELS)


@intrinsic
def interleave3(typingctx, p0, p1, p2, at, dst, dst_at):
    """dst[dst_at : dst_at + 96] = pixels at .. at + 31 of planes p0, p1, p2 as RGB bytes
    (uint8 arrays). One shuffle of three vectors and one store, which LLVM lowers to byte
    shuffles: the same rows stored byte by byte into an L1 row and copied out took 1.2-1.5x as
    long (docs/BENCHMARKS.md "Colour rows stored as vectors (stop 62)")."""
    return types.none(p0, p1, p2, at, dst, dst_at), _INTERLEAVE3


@intrinsic
def interleave4(typingctx, p0, p1, p2, p3, at, dst, dst_at):
    """dst[dst_at : dst_at + 128] = pixels at .. at + 31 of planes p0-p3 as RGBA bytes."""
    return types.none(p0, p1, p2, p3, at, dst, dst_at), _INTERLEAVE4
