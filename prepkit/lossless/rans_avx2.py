"""Eight rANS lanes at once with AVX2 (bitstream v2, A6), for the numba CPU decoder.

LLVM does not vectorise the rANS rounds on its own: each lane's table entry is a load at an
address computed from its state (a gather, which LLVM's cost model refuses on AMD CPUs), and
the lanes that renormalise take their words in lane order (a prefix count across lanes). So
this module writes one step of eight lanes directly in LLVM IR, with the AVX2 gather and
permute instructions, as a numba intrinsic that `cpu_v2._rans_rounds` calls four times per
round of 32 lanes:

    u      = the 8 context symbols (the symbols 64 back, one per lane)
    ctx    = (u > 0) + (u > 2) + (u > 8)                     one vpshufb on min(u, 15)
    e      = dec[tbase + ctx * 4096 + (x & 4095)]            one vpgatherdd
    symbol = e & 255                                        8 bytes stored at row[64 + j0]
    x      = ((e >> 8) & 4095) * (x >> 12) + (x >> 12) + (e >> 20)
    need   = x < 2^16                                       a lane mask, then its popcount
    word   = the next 8 words, permuted so that the k-th lane needing one gets word k
    x      = need ? (x << 16) | word : x

The permutation of each of the 256 lane masks is a row of PERMUTE (vpermd's indices). The
caller guarantees 8 readable words at `w` and 72 bytes of `row` from `at`; the decoded values
equal the scalar loop's (tests compare both on every lane count and on random tables).

AVAILABLE is False on a CPU without AVX2 (or not x86-64); the decoder then keeps its scalar
loop. The numpy reference of this step is `step_reference`.
"""
from __future__ import annotations

import os

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# PREPKIT_NO_AVX2=1 forces the scalar loop (tests compare both; also a switch for users).
AVAILABLE = (llvm.get_process_triple().startswith("x86_64") and bool(llvm.get_host_cpu_features().get("avx2", False))
             and os.environ.get("PREPKIT_NO_AVX2", "") in ("", "0"))

# PERMUTE[m, j]: the index among the 8 loaded words of the word lane j takes under mask m
# (the number of lanes below j that need one); lanes that take none get index 0 (unused).
PERMUTE = np.array([[bin(m & ((1 << j) - 1)).count("1") for j in range(8)] for m in range(256)], np.int32)

_I8, _I16, _I32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)
_V8I8, _V8I16, _V8I32 = (ir.VectorType(t, 8) for t in (_I8, _I16, _I32))
_V16I8, _V16I32 = ir.VectorType(_I8, 16), ir.VectorType(_I32, 16)
# The context (A4) of every symbol value below 16; 15 stands for every larger value (context 3).
CONTEXT16 = [(u > 0) + (u > 2) + (u > 8) for u in range(16)]


def _splat(value: int) -> ir.Constant:
    return ir.Constant(_V8I32, [value] * 8)


def _address(builder: ir.IRBuilder, context, aryty, array, index: ir.Value, vector: ir.Type) -> ir.Value:
    """A pointer to element `index` of a numba array, cast to point at `vector`."""
    data = context.make_array(aryty)(context, builder, array).data
    return builder.bitcast(builder.gep(data, [index]), vector.as_pointer())


@intrinsic
def rans_step8(typingctx, row, at, states, j0, flat, tbase, words, w, permute):
    """One step of lanes j0..j0+7: contexts from row[at:at+8], symbols to row[at+64:at+72],
    states[j0:j0+8] (uint32) updated, words read from words[w:]; returns the new w (uint64).
    flat is the uint32 decode table (cpu_v2.decode_table, flattened), tbase the index of the
    tile plane's context-0 table in it, permute PERMUTE."""
    sig = types.uint64(row, types.uint64, states, types.uint64, flat, types.int64, words, types.uint64, permute)

    def codegen(context, builder, signature, args):
        row_v, at_v, states_v, j0_v, flat_v, tbase_v, words_v, w_v, permute_v = args
        tys = signature.args
        module = builder.module
        gather = cgutils.get_or_insert_function(
            module, ir.FunctionType(_V8I32, [_V8I32, ir.PointerType(_I8), _V8I32, _V8I32, _I8]),
            "llvm.x86.avx2.gather.d.d.256")
        permd = cgutils.get_or_insert_function(module, ir.FunctionType(_V8I32, [_V8I32, _V8I32]),
                                               "llvm.x86.avx2.permd")
        ctpop = cgutils.get_or_insert_function(module, ir.FunctionType(_I32, [_I32]), "llvm.ctpop.i32")
        pshufb = cgutils.get_or_insert_function(module, ir.FunctionType(_V16I8, [_V16I8, _V16I8]),
                                                "llvm.x86.ssse3.pshuf.b.128")

        # ctx = CONTEXT16[min(u, 15)] for the 8 context symbols u, one byte shuffle (vpshufb).
        u = builder.load(_address(builder, context, tys[0], row_v, at_v, _V8I8), align=1)
        u = builder.shuffle_vector(u, ir.Constant(_V8I8, ir.Undefined), ir.Constant(_V16I32, list(range(8)) * 2))
        fifteen = ir.Constant(_V16I8, [15] * 16)
        u = builder.select(builder.icmp_unsigned(">", u, fifteen), fifteen, u)
        ctx = builder.call(pshufb, [ir.Constant(_V16I8, CONTEXT16), u])
        ctx = builder.zext(builder.shuffle_vector(ctx, ctx, ir.Constant(_V8I32, list(range(8)))), _V8I32)
        states_p = _address(builder, context, tys[2], states_v, j0_v, _V8I32)
        x = builder.load(states_p, align=4)
        base = builder.insert_element(ir.Constant(_V8I32, ir.Undefined), builder.trunc(tbase_v, _I32), ir.Constant(_I32, 0))
        base = builder.shuffle_vector(base, ir.Constant(_V8I32, ir.Undefined), ir.Constant(_V8I32, [0] * 8))
        index = builder.add(builder.add(base, builder.shl(ctx, _splat(12))), builder.and_(x, _splat(4095)))
        flat_p = builder.bitcast(context.make_array(tys[4])(context, builder, flat_v).data, ir.PointerType(_I8))
        e = builder.call(gather, [_splat(0), flat_p, index, _splat(-1), ir.Constant(_I8, 4)])

        out_at = builder.add(at_v, ir.Constant(at_v.type, 64))
        builder.store(builder.trunc(e, _V8I8), _address(builder, context, tys[0], row_v, out_at, _V8I8), align=1)
        high = builder.lshr(x, _splat(12))
        freq_less_one = builder.and_(builder.lshr(e, _splat(8)), _splat(4095))
        x = builder.add(builder.add(builder.mul(freq_less_one, high), high), builder.lshr(e, _splat(20)))

        need = builder.icmp_unsigned("==", builder.lshr(x, _splat(16)), _splat(0))
        mask = builder.zext(builder.bitcast(need, _I8), _I32)
        count = builder.call(ctpop, [mask])
        next_words = builder.load(_address(builder, context, tys[6], words_v, w_v, _V8I16), align=2)
        perm_row = builder.mul(builder.zext(mask, ir.IntType(64)), ir.Constant(ir.IntType(64), 8))
        perm_p = _address(builder, context, tys[8], permute_v, perm_row, _V8I32)
        word = builder.call(permd, [builder.zext(next_words, _V8I32), builder.load(perm_p, align=4)])
        refilled = builder.or_(builder.shl(x, _splat(16)), word)
        builder.store(builder.select(need, refilled, x), states_p, align=4)
        return builder.add(w_v, builder.zext(count, w_v.type))

    return sig, codegen


def step_reference(row: np.ndarray, at: int, states: np.ndarray, j0: int, flat: np.ndarray, tbase: int,
                   words: np.ndarray, w: int) -> int:
    """Plain numpy version of rans_step8 (same arguments but PERMUTE; returns the new w)."""
    for j in range(j0, j0 + 8):
        u = int(row[at + j - j0])
        ctx = (u > 0) + (u > 2) + (u > 8)
        x = int(states[j])
        e = int(flat[tbase + ctx * 4096 + (x & 4095)])
        row[at + 64 + j - j0] = e & 255
        x = ((e >> 8) & 4095) * (x >> 12) + (x >> 12) + (e >> 20)
        if x < 1 << 16:
            x = (x << 16) | int(words[w])
            w += 1
        states[j] = x
    return w
