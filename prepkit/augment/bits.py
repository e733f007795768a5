"""float32 -> float16 / bfloat16 bit patterns, usable from numba CPU and CUDA code.

numba's CPU target has no float16 arithmetic and no target has bfloat16, so the fused
kernels compute in float32 and store the 16-bit pattern as uint16; the caller views the
result as float16 (numpy) or bfloat16 (``tensor.view(torch.bfloat16)``). Both
conversions round to nearest, ties to even, like numpy's ``astype(float16)`` and
torch's float32 -> bfloat16 conversion.

The functions below are plain Python on integers; :mod:`prepkit.augment.cpu` and
:mod:`prepkit.augment.cuda` compile them for their target. Only reading a float32's
bits needs target support: an LLVM bitcast intrinsic, with a numpy fallback for the
CUDA simulator (which runs kernels as Python).
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.core.extending import intrinsic


@intrinsic
def float32_bits(typingctx, value):
    """The IEEE bits of a float32 as uint32 (a free bitcast, no memory round trip)."""
    if value != types.float32:
        return None
    signature = types.uint32(types.float32)

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], context.get_value_type(types.uint32))

    return signature, codegen


def float32_bits_python(value: float) -> int:
    """Pure-Python twin of :func:`float32_bits` for the CUDA simulator."""
    return int(np.array([value], dtype=np.float32).view(np.uint32)[0])


def bfloat16_from_bits(u: int) -> int:
    """bfloat16 bits of the float32 with bits ``u`` (round to nearest even; NaN -> quiet NaN)."""
    if (u & 0x7F800000) == 0x7F800000 and (u & 0x007FFFFF) != 0:
        return ((u >> 16) & 0x8000) | 0x7FC0
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def float16_from_bits(u: int) -> int:
    """float16 bits of the float32 with bits ``u`` (round to nearest even, with subnormals)."""
    sign = (u >> 16) & 0x8000
    exponent = (u >> 23) & 0xFF
    mantissa = u & 0x7FFFFF
    if exponent == 0xFF:  # inf or NaN
        return sign | 0x7C00 | (0x200 if mantissa != 0 else 0)
    e = exponent - 112  # rebias 127 -> 15
    if e >= 31:
        return sign | 0x7C00  # overflow to infinity
    if e <= 0:
        if e < -10:
            return sign  # too small even for a subnormal: signed zero
        mantissa = mantissa | 0x800000
        shift = 14 - e
        m = mantissa >> shift
        rest = mantissa & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        if rest > half or (rest == half and (m & 1) == 1):
            m += 1
        return sign | m
    m = mantissa >> 13
    rest = mantissa & 0x1FFF
    if rest > 0x1000 or (rest == 0x1000 and (m & 1) == 1):
        m += 1
    # A carry out of the mantissa correctly bumps the exponent (up to infinity).
    return sign | ((e << 10) + m)
