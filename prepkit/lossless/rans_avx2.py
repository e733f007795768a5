"""Eight rANS lanes at once with AVX2 (bitstream v2, A6), for the numba CPU decoder.

LLVM does not vectorise the rANS rounds on its own: each lane's table entry is a load at an
address computed from its state (a gather, which LLVM's cost model refuses on AMD CPUs), and
the lanes that renormalise take their words in lane order (a prefix count across lanes). So
this module writes one step of eight lanes directly in LLVM IR, with AVX2's permute
instructions, as a numba intrinsic that `cpu_v2._rans_rounds` calls four times per round
of 32 lanes:

    e      = dec[bases[j] + (x & 4095)]                      a load per lane (_table_entries)
    symbol = e & 255                                        8 bytes stored at row[128 + j0]
    x      = ((e >> 8) & 4095) * (x >> 12) + (x >> 12) + (e >> 20)
    need   = x < 2^16                                       a lane mask, then its popcount
    word   = the next 8 words, permuted so that the k-th lane needing one gets word k
    x      = need ? (x << 16) | word : x

where bases[j] = tbase + ctx * 4096 comes from `table_bases32`, which computes the contexts
of 32 symbols at once (every context symbol is at least 63 back, so 32 symbols' contexts are
known before the first of them is decoded, whatever the lane count):

    u      = the context values (A4): the symbols 64 back, with wide contexts the largest
             of those 63, 64, 65 and 128 back               8-byte loads, byte shifts, vpmaxub
    ctx    = ctx16[min(u, 15)]                              one vpshufb

A 32-lane tile of a wide stream runs whole rounds as `rans_round32`: the 32 table rows and
the four steps in one intrinsic, the rows in registers instead of stored to `bases` and
loaded back by each step. That took the 2.6-6.8% that wide contexts cost colour images'
decodes back to the speed of narrow ones (docs/BENCHMARKS.md "Wide contexts for colour
images"). `rans_rounds32` (one tile) and `rans_pair32` (two tiles, a round of each in turn)
run many such rounds in one loop of IR whose lane states are loop values, which LLVM keeps
in registers: in an array, as between calls of rans_round32, each round stored them and
loaded them back (docs/BENCHMARKS.md "Lane states in registers"). On a CPU with AVX-512
VBMI2, rans_pair32's steps take 16 lanes each (`_decode_step16`): sixteen table loads, and
the renormalising lanes' words placed by one expanding load (`vpexpandw`) instead of the
permutation table. Tiles of 8 or 16 lanes of narrow streams keep `rans_step8_narrow`, which
takes its contexts in the step.

The permutation of each of the 256 lane masks is a row of PERMUTE (vpermd's indices). The
caller guarantees 8 readable words at `w` and 136 bytes of `row` from `at`; the decoded values
equal the scalar loop's (tests compare both on every lane count and on random tables).

Each step reads its lanes' table entries with the gather instruction (vpgatherdd) on AMD's
Zen 3 and later and with one scalar load per lane elsewhere (`gathers_pay`). On the dev VM's
Ice Lake the loads return sooner, and the rounds wait on them (`_table_entries`); on its Zen 3
the gathers are faster. PREPKIT_HW_GATHER=1 (gathers) or 0 (loads) overrides the choice.

The encoder's loop has its own eight-lane step, `rans_put8`: one table entry per lane
(f | cum << 16, gathered from the scalar encoder's table), the words of the lanes that
renormalise packed by PERMUTE_DOWN in the order the scalar encoder writes them, and the
quotient x // f by a division in doubles, which is exact for every state the encoder
divides, where the scalar loop multiplies by a 45-bit reciprocal that AVX2 cannot (it has
no 64-bit multiply). Tests compare it with the scalar encoder's loop (`cpu_v2._scalar_puts`).

AVAILABLE is False on a CPU without AVX2 (or not x86-64); the decoder and the encoder then
keep their scalar loops. The numpy reference of the decoder's step is `step_reference`.
"""
from __future__ import annotations

import os

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from prepkit.lossless import format_v2 as f2

# PREPKIT_NO_AVX2=1 forces the scalar loop (tests compare both; also a switch for users).
_FEATURES = llvm.get_host_cpu_features()
AVAILABLE = (llvm.get_process_triple().startswith("x86_64") and bool(_FEATURES.get("avx2", False))
             and os.environ.get("PREPKIT_NO_AVX2", "") in ("", "0"))
# AVX-512 with VBMI2 (vpexpandw): rans_pair32 takes 16 lanes per step (below);
# PREPKIT_NO_AVX512=1 keeps 8 (tests run both where the CPU has it).
AVX512 = (AVAILABLE and all(_FEATURES.get(f, False) for f in ("avx512f", "avx512bw", "avx512vl", "avx512vbmi2"))
          and os.environ.get("PREPKIT_NO_AVX512", "") in ("", "0"))


def gathers_pay(cpu_name: str) -> bool:
    """Whether a step should read its lanes' table entries with the gather instruction on the
    CPU that LLVM names cpu_name (llvmlite's get_host_cpu_name), rather than a load per lane.
    Yes on AMD's Zen 3 and later ("znver3", ...): on the dev VM's Zen 3 the gathers took the
    two-tile rounds from 1.29-1.35 to 1.05 ns per symbol, and one-thread decodes of the
    evaluation's photographs and rendered images 17-22% less time (medical images: no
    consistent gain; docs/BENCHMARKS.md "Gathers again on Zen 3"). No elsewhere: Intel's
    microcode for Gather Data Sampling slows the gathers of its Skylake to Ice Lake
    generations (on the dev VM's Ice Lake the loads were 11-19% faster), and Zen 1 and 2 are
    known for slow gathers (not measured here). CPUs not measured keep the loads."""
    name = cpu_name.lower()
    return name.startswith("znver") and name[5:].isdigit() and int(name[5:]) >= 3


# How a step reads its lanes' table entries: the CPU's gather instruction where gathers_pay,
# else one load per lane (_table_entries says why); PREPKIT_HW_GATHER=1 or 0 decides instead.
_GATHER_SETTING = os.environ.get("PREPKIT_HW_GATHER", "")
HARDWARE_GATHER = (gathers_pay(llvm.get_host_cpu_name()) if _GATHER_SETTING == ""
                   else _GATHER_SETTING != "0")
# The CPU switches above, for the disk cache's key (jitcache.guard_disk_cache's extra).
BUILD = f"avx2={AVAILABLE},avx512={AVX512},hardware_gather={HARDWARE_GATHER}"

# PERMUTE[m, j]: the index among the 8 loaded words of the word lane j takes under mask m
# (the number of lanes below j that need one); lanes that take none get index 0 (unused).
PERMUTE = np.array([[bin(m & ((1 << j) - 1)).count("1") for j in range(8)] for m in range(256)], np.int32)

_I8, _I16, _I32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)
_V8I8, _V8I16, _V8I32 = (ir.VectorType(t, 8) for t in (_I8, _I16, _I32))
_V16I8, _V16I32 = ir.VectorType(_I8, 16), ir.VectorType(_I32, 16)
_V32I8, _V32I32 = ir.VectorType(_I8, 32), ir.VectorType(_I32, 32)
SYM0 = f2.CONTEXT_HISTORY  # symbol i of a round sits at row[SYM0 + i] (cpu_v2.SYM0)
# The narrow context (A4) of every value below 16; 15 stands for every larger value.
NARROW16 = [int(f2.context_of_value(np.array(u), False)) for u in range(16)]


def _splat(value: int, width: int = 8) -> ir.Constant:
    return ir.Constant(ir.VectorType(_I32, width), [value] * width)


def _address(builder: ir.IRBuilder, context, aryty, array, index: ir.Value, vector: ir.Type) -> ir.Value:
    """A pointer to element `index` of a numba array, cast to point at `vector`."""
    data = context.make_array(aryty)(context, builder, array).data
    return builder.bitcast(builder.gep(data, [index]), vector.as_pointer())


def _bases_vectors(context, builder: ir.IRBuilder, row_ty, row_v, at_v, tbase_v, ctx16_ty, ctx16_v,
                   wmask_v, prev_ty, prev_v, pbit_v, prev_at=None, width: int = 8) -> list[ir.Value]:
    """The table rows of the 32 symbols row[at+SYM0 : at+SYM0+32] as 32 / width vectors of
    <width x i32> (tbase + 4096 * context, A4), plus pbit (uint8: PLANE_CONTEXT or 0) where
    prev[prev_at : prev_at+32] (the symbols one plane back; prev_at 0 when None) is not 0:
    table_bases32's computation, which rans_round32 and _rounds_loop keep in registers."""
    pshufb = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V32I8, [_V32I8, _V32I8]),
                                            "llvm.x86.avx2.pshuf.b")
    data = context.make_array(row_ty)(context, builder, row_v).data

    def back(distance: int) -> ir.Value:
        """The 32 bytes S(i - distance .. i - distance + 31), distance a multiple of 8,
        as four 8-byte loads, each exactly one earlier 8-byte store of the vector step:
        a load spanning several stores still in flight may wait for them to reach the
        cache. (Measured on the dev VM, 32-byte loads ran as fast: kept for CPUs that
        forward stores less well, an unconfirmed reason.)"""
        parts = []
        for k in range(4):
            at = builder.add(at_v, ir.Constant(at_v.type, SYM0 - distance + 8 * k))
            parts.append(builder.load(_address(builder, context, row_ty, row_v, at, _V8I8), align=1))
        low = builder.shuffle_vector(parts[0], parts[1], ir.Constant(_V16I32, list(range(16))))
        high = builder.shuffle_vector(parts[2], parts[3], ir.Constant(_V16I32, list(range(16))))
        return builder.shuffle_vector(low, high, ir.Constant(_V32I32, list(range(32))))

    def byte(distance: int) -> ir.Value:
        """S(i - distance) as element 0 of a vector (one byte inside an earlier store)."""
        value = builder.load(builder.gep(data, [builder.add(at_v, ir.Constant(at_v.type, SYM0 - distance))]))
        return builder.insert_element(ir.Constant(_V32I8, ir.Undefined), value, ir.Constant(_I32, 0))

    def umax(a: ir.Value, b: ir.Value) -> ir.Value:
        return builder.select(builder.icmp_unsigned(">", a, b), a, b)

    def splat32(value: ir.Value, vector: ir.VectorType) -> ir.Value:
        one = builder.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(_I32, 0))
        return builder.shuffle_vector(one, ir.Constant(vector, ir.Undefined), ir.Constant(_V32I32, [0] * 32))

    # u = max(S(i-64), wmask & max(S(i-63), S(i-65), S(i-128))), ctx = ctx16[min(u, 15)].
    # S(i-63) and S(i-65) are S(i-64) shifted by one byte either way, with S(i-32) and
    # S(i-65) brought in as single bytes.
    above = back(64)
    above_right = builder.shuffle_vector(above, byte(32), ir.Constant(_V32I32, list(range(1, 33))))
    above_left = builder.shuffle_vector(byte(65), above, ir.Constant(_V32I32, [0] + list(range(32, 63))))
    wide = builder.and_(umax(umax(above_right, above_left), back(128)), splat32(wmask_v, _V32I8))
    u = umax(above, wide)
    fifteen = ir.Constant(_V32I8, [15] * 32)
    u = builder.select(builder.icmp_unsigned(">", u, fifteen), fifteen, u)
    table16 = builder.load(_address(builder, context, ctx16_ty, ctx16_v, ir.Constant(ir.IntType(64), 0), _V16I8),
                           align=1)
    table32 = builder.shuffle_vector(table16, table16, ir.Constant(_V32I32, list(range(16)) * 2))
    ctx = builder.call(pshufb, [table32, u])
    # The plane bit (FLAG_PLANE_CONTEXT): + pbit where the symbol one plane back is not 0.
    if prev_at is None:
        prev_at = ir.Constant(ir.IntType(64), 0)
    prev = builder.load(_address(builder, context, prev_ty, prev_v, prev_at, _V32I8), align=1)
    zero = ir.Constant(_V32I8, [0] * 32)
    ctx = builder.add(ctx, builder.select(builder.icmp_unsigned("!=", prev, zero), splat32(pbit_v, _V32I8), zero))
    vector = ir.VectorType(_I32, width)
    base = builder.insert_element(ir.Constant(vector, ir.Undefined), builder.trunc(tbase_v, _I32),
                                  ir.Constant(_I32, 0))
    base = builder.shuffle_vector(base, ir.Constant(vector, ir.Undefined), ir.Constant(vector, [0] * width))
    out = []
    for k in range(32 // width):
        part = builder.shuffle_vector(ctx, ctx, ir.Constant(vector, list(range(width * k, width * k + width))))
        out.append(builder.add(base, builder.shl(builder.zext(part, vector), _splat(12, width))))
    return out


@intrinsic
def table_bases32(typingctx, row, at, tbase, ctx16, wmask, prev, pbit, bases):
    """bases[0:32] (int32) = tbase + 4096 * context of the symbols row[at+SYM0 : at+SYM0+32]
    (A4), from the context symbols before them in row; ctx16 (16 uint8) is the context of
    each value below 16 (15: every larger one), wmask (uint8) 255 for wide contexts and 0
    otherwise; plane bits (FLAG_PLANE_CONTEXT): the context + pbit (uint8, PLANE_CONTEXT or
    0) where prev[0:32], the symbols one plane back, is not 0. The caller guarantees that
    those 32 symbols' context symbols are decoded."""
    sig = types.void(row, types.uint64, types.int64, ctx16, types.uint8, prev, types.uint8, bases)

    def codegen(context, builder, signature, args):
        row_v, at_v, tbase_v, ctx16_v, wmask_v, prev_v, pbit_v, bases_v = args
        tys = signature.args
        vectors = _bases_vectors(context, builder, tys[0], row_v, at_v, tbase_v, tys[3], ctx16_v, wmask_v, tys[5],
                                 prev_v, pbit_v)
        # Stored as four 32-byte vectors, the loads rans_step8 makes: a load that takes part
        # of a wider store cannot always be forwarded from it (it waits for the cache).
        for k in range(4):
            out_p = _address(builder, context, tys[7], bases_v, ir.Constant(ir.IntType(64), 8 * k), _V8I32)
            builder.store(vectors[k], out_p, align=4)
        return context.get_dummy_value()

    return sig, codegen


def _table_entries(builder: ir.IRBuilder, flat_p: ir.Value, index: ir.Value, width: int,
                   hardware: bool) -> ir.Value:
    """<width x i32> of flat_p[index[j]] (flat_p an i8 pointer to the uint32 table).

    hardware=False: one scalar load per lane, the index taken out of the vector and the value
    put back into it (vpextrd, vpinsrd). hardware=True: one gather instruction (vpgatherdd).
    Which one the decoder takes: gathers_pay. Intel's 2023 microcode for Gather Data Sampling
    slows gathers on the Skylake to Ice Lake and Tiger Lake generations. On the dev VM (Ice
    Lake-SP) sixteen loads took 48-56 cycles from index to vector against 59-71 for a 16-lane
    gather. A tile's rounds are one latency chain, and the decoder ran 11-19% faster with the
    loads (docs/BENCHMARKS.md "Table entries by loads, not gathers"). Alone, the loads'
    throughput is lower (41-42 cycles against 28-35): they load one shuffle port. On AMD's
    Zen 3, with eight lanes per step (no AVX-512), the gathers are the faster of the two
    (docs/BENCHMARKS.md "Gathers again on Zen 3")."""
    vector = ir.VectorType(_I32, width)
    if not hardware:
        table = builder.bitcast(flat_p, ir.PointerType(_I32))
        entries = ir.Constant(vector, ir.Undefined)
        for j in range(width):
            lane = ir.Constant(_I32, j)
            value = builder.load(builder.gep(table, [builder.extract_element(index, lane)]), align=4)
            entries = builder.insert_element(entries, value, lane)
        return entries
    if width == 16:
        lanes = ir.VectorType(ir.IntType(1), 16)
        gather = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vector, [vector, ir.PointerType(_I8), vector, lanes, _I32]),
            "llvm.x86.avx512.mask.gather.dpi.512")
        return builder.call(gather, [_splat(0, 16), flat_p, index, ir.Constant(lanes, [1] * 16),
                                     ir.Constant(_I32, 4)])
    gather = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vector, [vector, ir.PointerType(_I8), vector, vector, _I8]),
        "llvm.x86.avx2.gather.d.d.256")
    return builder.call(gather, [_splat(0), flat_p, index, _splat(-1), ir.Constant(_I8, 4)])


def _lookup_update(context, builder: ir.IRBuilder, tys, row_v, at_v, x: ir.Value, table_base: ir.Value, flat_v,
                   width: int, hardware: bool) -> tuple[ir.Value, ir.Value]:
    """The part of a rANS step that does not depend on its width's refill: each lane's table
    entry (_table_entries), the symbols stored to row[at+SYM0 : at+SYM0+width], the states
    updated. Returns (states, lanes that need a word); tys as _decode_step's."""
    index = builder.add(table_base, builder.and_(x, _splat(4095, width)))
    flat_p = builder.bitcast(context.make_array(tys[4])(context, builder, flat_v).data, ir.PointerType(_I8))
    e = _table_entries(builder, flat_p, index, width, hardware)
    out_at = builder.add(at_v, ir.Constant(at_v.type, SYM0))
    symbols = ir.VectorType(_I8, width)
    builder.store(builder.trunc(e, symbols), _address(builder, context, tys[0], row_v, out_at, symbols), align=1)
    high = builder.lshr(x, _splat(12, width))
    freq_less_one = builder.and_(builder.lshr(e, _splat(8, width)), _splat(4095, width))
    x = builder.add(builder.add(builder.mul(freq_less_one, high), high), builder.lshr(e, _splat(20, width)))
    return x, builder.icmp_unsigned("<", x, _splat(1 << 16, width))


def _decode_step(context, builder: ir.IRBuilder, tys, row_v, at_v, states_p, x: ir.Value, table_base: ir.Value,
                 flat_v, words_v, w_v, permute_v, hardware: bool = HARDWARE_GATHER):
    """The rANS step of 8 lanes once each lane's table row (table_base, <8 x i32>) is known:
    table entries, symbol store to row[at+SYM0 : at+SYM0+8], state update (_lookup_update) and
    renormalisation, the words permuted into place by PERMUTE (the states back to states_p);
    returns the new word index, or (states, word index) when states_p is None (the states
    stay a value: _rounds_loop). tys: the argument types of (row, at, states, j0, flat, _,
    words, w, permute) at indices 0, 4, -3 and -1."""
    permd = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V8I32, [_V8I32, _V8I32]),
                                           "llvm.x86.avx2.permd")
    ctpop = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32, [_I32]), "llvm.ctpop.i32")
    x, need = _lookup_update(context, builder, tys, row_v, at_v, x, table_base, flat_v, 8, hardware)
    mask = builder.zext(builder.bitcast(need, _I8), _I32)
    count = builder.call(ctpop, [mask])
    next_words = builder.load(_address(builder, context, tys[-3], words_v, w_v, _V8I16), align=2)
    perm_row = builder.mul(builder.zext(mask, ir.IntType(64)), ir.Constant(ir.IntType(64), 8))
    perm_p = _address(builder, context, tys[-1], permute_v, perm_row, _V8I32)
    word = builder.call(permd, [builder.zext(next_words, _V8I32), builder.load(perm_p, align=4)])
    refilled = builder.or_(builder.shl(x, _splat(16)), word)
    x = builder.select(need, refilled, x)
    w_v = builder.add(w_v, builder.zext(count, w_v.type))
    if states_p is None:
        return x, w_v
    builder.store(x, states_p, align=4)
    return w_v


def _decode_step16(context, builder: ir.IRBuilder, tys, row_v, at_v, x: ir.Value, table_base: ir.Value, flat_v,
                   words_v, w_v, hardware: bool = HARDWARE_GATHER) -> tuple[ir.Value, ir.Value]:
    """_decode_step on 16 lanes with AVX-512: the sixteen table entries, and the words of the lanes
    that renormalise taken in lane order by one expanding load (vpexpandw, which reads
    exactly as many words as lanes need one) instead of a permutation table. Returns the new
    states and word index; tys as _decode_step's."""
    v16i1, v16i16 = ir.VectorType(ir.IntType(1), 16), ir.VectorType(_I16, 16)
    expand = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(v16i16, [ir.PointerType(_I16), v16i1, v16i16]),
        "llvm.masked.expandload.v16i16")
    ctpop = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32, [_I32]), "llvm.ctpop.i32")
    x, need = _lookup_update(context, builder, tys, row_v, at_v, x, table_base, flat_v, 16, hardware)
    count = builder.call(ctpop, [builder.zext(builder.bitcast(need, ir.IntType(16)), _I32)])
    words_p = builder.bitcast(_address(builder, context, tys[-3], words_v, w_v, _V8I16), ir.PointerType(_I16))
    word = builder.zext(builder.call(expand, [words_p, need, ir.Constant(v16i16, [0] * 16)]), _V16I32)
    x = builder.select(need, builder.or_(builder.shl(x, _splat(16, 16)), word), x)
    return x, builder.add(w_v, builder.zext(count, w_v.type))


@intrinsic
def rans_step8(typingctx, row, at, states, j0, flat, bases, b0, words, w, permute):
    """One step of lanes j0..j0+7: symbols to row[at+SYM0 : at+SYM0+8], states[j0:j0+8]
    (uint32) updated, words read from words[w:]; returns the new w (uint64). flat is the
    uint32 decode table (cpu_v2.decode_table, flattened), bases[b0:b0+8] (int32) the eight
    symbols' table bases in it (table_bases32), permute PERMUTE."""
    sig = types.uint64(row, types.uint64, states, types.uint64, flat, bases, types.uint64, words, types.uint64,
                       permute)

    def codegen(context, builder, signature, args):
        row_v, at_v, states_v, j0_v, flat_v, bases_v, b0_v, words_v, w_v, permute_v = args
        tys = signature.args
        table_base = builder.load(_address(builder, context, tys[5], bases_v, b0_v, _V8I32), align=4)
        states_p = _address(builder, context, tys[2], states_v, j0_v, _V8I32)
        x = builder.load(states_p, align=4)
        return _decode_step(context, builder, tys, row_v, at_v, states_p, x, table_base, flat_v, words_v, w_v,
                            permute_v)

    return sig, codegen


@intrinsic
def rans_round32(typingctx, row, states, flat, tbase, ctx16, wmask, prev, pbit, words, w, permute):
    """A whole round of a 32-lane tile: table_bases32, then rans_step8 on lanes 0-7, 8-15,
    16-23 and 24-31, with the table rows in registers (no bases array). row = symbols[i :
    i + SYM0 + 32], states the 32 uint32 lane states, prev and pbit as table_bases32's; the caller
    guarantees 32 readable words at w. Returns the new w. (Two rounds of a 16-lane tile this
    way measured 1-2% slower than table_bases32 and two rounds of steps, so 16- and 8-lane
    tiles keep those.)"""
    sig = types.uint64(row, states, flat, types.int64, ctx16, types.uint8, prev, types.uint8, words, types.uint64,
                       permute)

    def codegen(context, builder, signature, args):
        row_v, states_v, flat_v, tbase_v, ctx16_v, wmask_v, prev_v, pbit_v, words_v, w_v, permute_v = args
        tys = signature.args
        i64 = ir.IntType(64)
        vectors = _bases_vectors(context, builder, tys[0], row_v, ir.Constant(i64, 0), tbase_v, tys[4], ctx16_v,
                                 wmask_v, tys[6], prev_v, pbit_v)
        # _decode_step reads the types of (row, at, states, j0, flat, _, words, w, permute)
        step_tys = (tys[0], types.uint64, tys[1], types.uint64, tys[2], None, tys[8], types.uint64, tys[10])
        for k in range(4):
            j0 = ir.Constant(i64, 8 * k)
            states_p = _address(builder, context, tys[1], states_v, j0, _V8I32)
            x = builder.load(states_p, align=4)
            w_v = _decode_step(context, builder, step_tys, row_v, j0, states_p, x, vectors[k], flat_v, words_v, w_v,
                               permute_v)
        return w_v

    return sig, codegen


@intrinsic
def rans_step8_narrow(typingctx, row, at, states, j0, flat, tbase, words, w, permute):
    """rans_step8 for narrow contexts (A4: the symbol 64 back alone), the context computed
    in the step from one 8-byte load (no table_bases32; faster for these streams,
    docs/BENCHMARKS.md "Wide contexts"): contexts from row[at+SYM0-64 : at+SYM0-56], tbase
    the index of the tile plane's context-0 table in flat; otherwise as rans_step8."""
    sig = types.uint64(row, types.uint64, states, types.uint64, flat, types.int64, words, types.uint64, permute)

    def codegen(context, builder, signature, args):
        row_v, at_v, states_v, j0_v, flat_v, tbase_v, words_v, w_v, permute_v = args
        tys = signature.args
        pshufb = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V16I8, [_V16I8, _V16I8]),
                                                "llvm.x86.ssse3.pshuf.b.128")
        # ctx = NARROW16[min(u, 15)] for the 8 context symbols u, one byte shuffle (vpshufb).
        u_at = builder.add(at_v, ir.Constant(at_v.type, SYM0 - 64))
        u = builder.load(_address(builder, context, tys[0], row_v, u_at, _V8I8), align=1)
        u = builder.shuffle_vector(u, ir.Constant(_V8I8, ir.Undefined), ir.Constant(_V16I32, list(range(8)) * 2))
        fifteen = ir.Constant(_V16I8, [15] * 16)
        u = builder.select(builder.icmp_unsigned(">", u, fifteen), fifteen, u)
        ctx = builder.call(pshufb, [ir.Constant(_V16I8, NARROW16), u])
        ctx = builder.zext(builder.shuffle_vector(ctx, ctx, ir.Constant(_V8I32, list(range(8)))), _V8I32)
        states_p = _address(builder, context, tys[2], states_v, j0_v, _V8I32)
        x = builder.load(states_p, align=4)
        base = builder.insert_element(ir.Constant(_V8I32, ir.Undefined), builder.trunc(tbase_v, _I32),
                                      ir.Constant(_I32, 0))
        base = builder.shuffle_vector(base, ir.Constant(_V8I32, ir.Undefined), ir.Constant(_V8I32, [0] * 8))
        table_base = builder.add(base, builder.shl(ctx, _splat(12)))
        return _decode_step(context, builder, tys, row_v, at_v, states_p, x, table_base, flat_v, words_v, w_v,
                            permute_v)

    return sig, codegen


def _rounds_loop(context, builder: ir.IRBuilder, n_v: ir.Value, tiles: list[tuple], flat: tuple,
                 permute: tuple, width: int, hardware: bool) -> list[ir.Value]:
    """The IR of n_v rounds of 32-lane tiles, a round of each tile in turn (rans_round32's
    code), looping with the lane states as loop values: LLVM keeps them in registers, where
    states in an array go to memory and back every round (docs/BENCHMARKS.md "Lane states in
    registers"). Each tile is a tuple of (type, value) pairs (symbols, i, states, tbase,
    ctx16, wmask, back, words, w); flat and permute are (type, value). width: the lanes per
    step, 8 (AVX2, _decode_step) or 16 (AVX-512, _decode_step16); hardware: the table entries
    by gather instructions (_table_entries). Returns each tile's new w."""
    i64 = ir.IntType(64)
    zero64 = ir.Constant(i64, 0)

    steps = 32 // width
    vector = ir.VectorType(_I32, width)

    def states_at(tile, k):
        (states_ty, states_v) = tile[2]
        return _address(builder, context, states_ty, states_v, ir.Constant(i64, width * k), vector)

    first_states = [builder.load(states_at(tile, k), align=4) for tile in tiles for k in range(steps)]
    entry = builder.block
    head = builder.append_basic_block("rounds32.head")
    body = builder.append_basic_block("rounds32.body")
    done = builder.append_basic_block("rounds32.done")
    builder.branch(head)
    builder.position_at_end(head)
    round_phi = builder.phi(i64)
    round_phi.add_incoming(zero64, entry)
    w_phis = [builder.phi(i64) for _ in tiles]
    x_phis = [builder.phi(vector) for _ in first_states]
    for phi, value in zip(w_phis + x_phis, [tile[8][1] for tile in tiles] + first_states, strict=True):
        phi.add_incoming(value, entry)
    builder.cbranch(builder.icmp_unsigned("<", round_phi, n_v), body, done)

    builder.position_at_end(body)
    offset = builder.shl(round_phi, ir.Constant(i64, 5))
    new_w, new_x = [], []
    for t, tile in enumerate(tiles):
        (sym_ty, sym_v), (_, i_v), _, (_, tbase_v), (c16_ty, c16_v), (_, wmask_v), (_, back_v), (words_ty, words_v), _ = tile
        at = builder.add(i_v, offset)
        # The plane bit's symbols (_prev32): `back` before each, or none (pbit 0) when back is 0.
        has_back = builder.icmp_unsigned("!=", back_v, zero64)
        prev_at = builder.select(has_back, builder.sub(builder.add(at, ir.Constant(i64, SYM0)), back_v), at)
        pbit = builder.select(has_back, ir.Constant(_I8, f2.PLANE_CONTEXT), ir.Constant(_I8, 0))
        vectors = _bases_vectors(context, builder, sym_ty, sym_v, at, tbase_v, c16_ty, c16_v, wmask_v, sym_ty,
                                 sym_v, pbit, prev_at, width)
        # _decode_step reads the types of (row, at, states, j0, flat, _, words, w, permute)
        step_tys = (sym_ty, types.uint64, None, types.uint64, flat[0], None, words_ty, types.uint64, permute[0])
        w_v = w_phis[t]
        for k in range(steps):
            step_at = builder.add(at, ir.Constant(i64, width * k))
            if width == 16:
                x, w_v = _decode_step16(context, builder, step_tys, sym_v, step_at, x_phis[steps * t + k], vectors[k],
                                        flat[1], words_v, w_v, hardware)
            else:
                x, w_v = _decode_step(context, builder, step_tys, sym_v, step_at, None, x_phis[steps * t + k],
                                      vectors[k], flat[1], words_v, w_v, permute[1], hardware)
            new_x.append(x)
        new_w.append(w_v)
    round_phi.add_incoming(builder.add(round_phi, ir.Constant(i64, 1)), builder.block)
    for phi, value in zip(w_phis + x_phis, new_w + new_x, strict=True):
        phi.add_incoming(value, builder.block)
    builder.branch(head)

    builder.position_at_end(done)
    for t, tile in enumerate(tiles):
        for k in range(steps):
            builder.store(x_phis[steps * t + k], states_at(tile, k), align=4)
    return list(w_phis)


def _tile_types(symbols, states, ctx16, words) -> list:
    """The argument types of one tile of rans_rounds32 / rans_pair32."""
    u64 = types.uint64
    return [symbols, u64, states, types.int64, ctx16, types.uint8, u64, words, u64]


def _rounds32_intrinsic(width: int, hardware: bool):
    """rans_rounds32 with `width` lanes per step, table entries by gathers when `hardware`."""

    @intrinsic
    def rans_rounds32(typingctx, n, symbols, i, states, tbase, ctx16, wmask, back, words, w, flat, permute):
        """n rounds of a 32-lane tile from symbol i: rans_round32 n times, the lane states
        (uint32, loaded from states and stored back at the end) in registers in between.
        back: the plane bit's distance (_plane_back; 0: no plane bits). The caller guarantees
        32n readable words at w and that the n rounds stay in the tile's plane. Returns the
        new w."""
        sig = types.uint64(types.uint64, *_tile_types(symbols, states, ctx16, words), flat, permute)

        def codegen(context, builder, signature, args):
            pairs = list(zip(signature.args, args, strict=True))
            return _rounds_loop(context, builder, args[0], [tuple(pairs[1:10])], pairs[10], pairs[11], width,
                                hardware)[0]

        return sig, codegen

    return rans_rounds32


def _pair32_intrinsic(width: int, hardware: bool):
    """rans_pair32 with `width` lanes per step, table entries by gathers when `hardware`."""

    @intrinsic
    def rans_pair32(typingctx, n, sym_a, i_a, x_a, tbase_a, ctx16_a, wmask_a, back_a, words_a, w_a,
                    sym_b, i_b, x_b, tbase_b, ctx16_b, wmask_b, back_b, words_b, w_b, flat, permute):
        """rans_rounds32 of two tiles in one loop, a round of one then a round of the other
        (the other's round fills each round's wait for its table loads, as in
        cpu_v2._pair_rounds). Returns (w_a, w_b)."""
        sig = types.UniTuple(types.uint64, 2)(types.uint64, *_tile_types(sym_a, x_a, ctx16_a, words_a),
                                              *_tile_types(sym_b, x_b, ctx16_b, words_b), flat, permute)

        def codegen(context, builder, signature, args):
            pairs = list(zip(signature.args, args, strict=True))
            w_values = _rounds_loop(context, builder, args[0], [tuple(pairs[1:10]), tuple(pairs[10:19])],
                                    pairs[19], pairs[20], width, hardware)
            return context.make_tuple(builder, signature.return_type, w_values)

        return sig, codegen

    return rans_pair32


# ROUNDS32 and PAIR32 hold both widths and both ways of reading the table entries, keyed by
# (width, hardware gather), for tests and prepkit.bench.rans_rounds. The decoder takes 16
# lanes per step for pairs with AVX-512 (0.35 against 0.46-0.48 ns per symbol on stop 42's
# host) and 8 for a tile alone, whose rounds are one latency chain: 16 lanes per step make it
# two chains instead of four, no faster (0.63-0.65 against 0.58-0.62 ns).
ROUNDS32 = {(width, hardware): _rounds32_intrinsic(width, hardware) for width in (8, 16) for hardware in (False, True)}
PAIR32 = {(width, hardware): _pair32_intrinsic(width, hardware) for width in (8, 16) for hardware in (False, True)}
rans_rounds32 = ROUNDS32[8, HARDWARE_GATHER]
rans_pair32 = PAIR32[16 if AVX512 else 8, HARDWARE_GATHER]


# ----------------------------------------------------------------------------- encoder

# PERMUTE_DOWN[m, k]: the lane of the k-th lane from lane 7 down whose bit is set in the mask
# m (the encoder's word order: the last symbol's lane first); 0 past the last (unused).
PERMUTE_DOWN = np.array([[j for j in range(7, -1, -1) if m >> j & 1] + [0] * (8 - bin(m).count("1"))
                         for m in range(256)], np.int32)


@intrinsic
def rans_put8(typingctx, syms, tables, at, states, j0, coder, words, nw, permute):
    """Encode the eight symbols syms[at : at+8] (tables[at : at+8] their tables, int64) into
    the lanes j0 .. j0+7 of states (uint32), the last symbol first, as the scalar encoder
    (cpu_v2._scalar_puts) does them one by one; coder is cpu_v2._coder_table's (int64 pairs
    [f | cum << 16, reciprocal] per table and symbol), flattened:

        p      = the low 32 bits of coder[table, symbol, 0]    one gather (_table_entries)
        f, cum = p & 0xFFFF, p >> 16
        emit   = (x >> 20) >= f, the word x & 0xFFFF            (x >= f << 20 without overflow)
        x      = emit ? x >> 16 : x
        q      = x // f                                         a division in doubles (below)
        x      = (q << 12) + x - q * f + cum

    The emitted words go to words[nw:] in the scalar loop's order (lane 7 first: the
    permutation PERMUTE_DOWN of the emit mask, then one 16-byte store: the caller leaves 8
    words of room). Returns the new nw."""
    sig = types.uint64(syms, tables, types.uint64, states, types.uint64, coder, words, types.uint64, permute)

    def codegen(context, builder, signature, args):
        syms_v, tables_v, at_v, states_v, j0_v, coder_v, words_v, nw_v, permute_v = args
        tys = signature.args
        i64 = ir.IntType(64)
        v8i64 = ir.VectorType(i64, 8)
        permd = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_V8I32, [_V8I32, _V8I32]),
                                               "llvm.x86.avx2.permd")
        ctpop = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I32, [_I32]), "llvm.ctpop.i32")
        symbol = builder.zext(builder.load(_address(builder, context, tys[0], syms_v, at_v, _V8I8), align=1), _V8I32)
        table = builder.trunc(builder.load(_address(builder, context, tys[1], tables_v, at_v, v8i64), align=8), _V8I32)
        # The entry's first int64, f | cum << 16, is the uint32 at 4 * (table << 8 | symbol).
        index = builder.or_(builder.shl(table, _splat(10)), builder.shl(symbol, _splat(2)))
        coder_p = builder.bitcast(context.make_array(tys[5])(context, builder, coder_v).data, ir.PointerType(_I8))
        p = _table_entries(builder, coder_p, index, 8, HARDWARE_GATHER)
        states_p = _address(builder, context, tys[3], states_v, j0_v, _V8I32)
        x = builder.load(states_p, align=4)
        f = builder.and_(p, _splat(0xFFFF))
        emit = builder.icmp_unsigned(">=", builder.lshr(x, _splat(20)), f)
        mask = builder.zext(builder.bitcast(emit, _I8), _I32)
        perm_p = _address(builder, context, tys[8], permute_v, builder.mul(builder.zext(mask, i64), ir.Constant(i64, 8)),
                          _V8I32)
        word = builder.trunc(builder.call(permd, [x, builder.load(perm_p, align=4)]), _V8I16)
        builder.store(word, _address(builder, context, tys[6], words_v, nw_v, _V8I16), align=2)
        nw_v = builder.add(nw_v, builder.zext(builder.call(ctpop, [mask]), i64))
        x = builder.select(emit, builder.lshr(x, _splat(16)), x)
        # q = x // f by a division in doubles: both exact, the quotient correctly rounded, so
        # it stays below the next integer (x < 2^32: its fraction is at most 1 - 1/f, its error
        # at most 2^-33) and truncation gives x // f exactly, as the scalar reciprocal does.
        v8f64 = ir.VectorType(ir.DoubleType(), 8)
        q = builder.fptosi(builder.fdiv(builder.uitofp(x, v8f64), builder.sitofp(f, v8f64)), _V8I32)  # q < 2^20
        x = builder.add(builder.add(builder.shl(q, _splat(12)), builder.sub(x, builder.mul(q, f))),
                        builder.lshr(p, _splat(16)))
        builder.store(x, states_p, align=4)
        return nw_v

    return sig, codegen


def step_reference(row: np.ndarray, at: int, states: np.ndarray, j0: int, flat: np.ndarray, tbase: int,
                   wide: bool, words: np.ndarray, w: int, prev: np.ndarray | None = None) -> int:
    """Plain numpy version of table_bases32 then rans_step8 on the first 8 of the 32 bases
    (ctx16 and wmask from `wide`; prev[k]: the symbol one plane back of row[SYM0 + k] for
    plane bits, or None; returns the new w)."""
    distances = f2.WIDE_DISTANCES if wide else (f2.CONTEXT_DISTANCE,)
    for j in range(j0, j0 + 8):
        i = at + j - j0 + SYM0  # where this lane's symbol goes
        u = max(int(row[i - d]) for d in distances)
        ctx = int(f2.context_of_value(np.array(u), wide))
        if prev is not None and prev[at + j - j0] > 0:
            ctx += f2.PLANE_CONTEXT
        x = int(states[j])
        e = int(flat[tbase + ctx * 4096 + (x & 4095)])
        row[i] = e & 255
        x = ((e >> 8) & 4095) * (x >> 12) + (x >> 12) + (e >> 20)
        if x < 1 << 16:
            x = (x << 16) | int(words[w])
            w += 1
        states[j] = x
    return w
