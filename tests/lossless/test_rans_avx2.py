"""The AVX2 rANS step (rans_avx2) against its numpy reference, and the decoder's vector
rounds against its scalar rounds on the same inputs."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import numpy as np
import pytest
from numba import njit

from prepkit.lossless import cpu_v2, rans_avx2
from prepkit.lossless import format_v2 as f2

needs_avx2 = pytest.mark.skipif(not rans_avx2.AVAILABLE, reason="this CPU has no AVX2 (the scalar loop runs)")
needs_avx512 = pytest.mark.skipif(not rans_avx2.AVX512, reason="this CPU has no AVX-512 VBMI2 (8 lanes per step run)")


def random_tables(rng: np.random.Generator, n_tables: int) -> np.ndarray:
    """A flat decode table (cpu_v2.decode_table layout) of n_tables valid tables: each slot
    holds symbol | (f - 1) << 8 | (slot - cum) << 20 for random frequencies summing to 4096.
    Odd tables hold symbols below 20 only, so decoded symbols cross every context bound."""
    flat = np.zeros(n_tables * 4096, np.uint32)
    for t in range(n_tables):
        alphabet = 20 if t % 2 else 256
        n_symbols = int(rng.integers(alphabet // 2, alphabet + 1))
        symbols = np.sort(rng.choice(alphabet, n_symbols, replace=False))
        cuts = np.sort(rng.choice(np.arange(1, 4096), n_symbols - 1, replace=False))
        freq = np.diff(np.concatenate([[0], cuts, [4096]]))
        cum = np.concatenate([[0], np.cumsum(freq)[:-1]])
        for s, f, c in zip(symbols, freq, cum, strict=True):
            slots = np.arange(c, c + f)
            flat[t * 4096 + slots] = s | ((f - 1) << 8) | ((slots - c) << 20)
    return flat


@njit
def _step(row, at, states, j0, flat, tbase, ctx16, wmask, prev, pbit, words, w):
    """table_bases32 for the 32 symbols from row[at + SYM0] (prev: their symbols one plane
    back, pbit: what a plane bit adds), then the step on the first 8."""
    bases = np.empty(32, np.int32)
    rans_avx2.table_bases32(row, np.uint64(at), tbase, ctx16, wmask, prev, pbit, bases)
    return rans_avx2.rans_step8(row, np.uint64(at), states, np.uint64(j0), flat, bases, np.uint64(0), words,
                                np.uint64(w), rans_avx2.PERMUTE)


@njit
def _narrow_step(row, at, states, j0, flat, tbase, words, w):
    """rans_step8_narrow, the vector step of narrow streams (contexts taken in the step)."""
    return rans_avx2.rans_step8_narrow(row, np.uint64(at), states, np.uint64(j0), flat, tbase, words, np.uint64(w),
                                       rans_avx2.PERMUTE)

def _assert_same(vector: tuple, reference: tuple) -> None:
    """The vector code's (word index, symbol row, lane states) equal the reference's."""
    assert vector[0] == reference[0]
    np.testing.assert_array_equal(vector[1], reference[1])
    np.testing.assert_array_equal(vector[2], reference[2])


def shuffle_table(wide: bool) -> np.ndarray:
    """The vector step's ctx16 for narrow or wide contexts."""
    return cpu_v2.CONTEXT16[int(wide)]


def test_permute_rows_send_the_kth_needing_lane_to_word_k() -> None:
    for mask in range(256):
        needing = [j for j in range(8) if mask >> j & 1]
        assert [int(rans_avx2.PERMUTE[mask, j]) for j in needing] == list(range(len(needing)))


@needs_avx2
@pytest.mark.parametrize(("wide", "narrow_step", "plane_bits"),
                         [(False, False, False), (True, False, False), (False, True, False), (True, False, True),
                          (False, False, True)])
def test_step_matches_the_numpy_reference(wide: bool, narrow_step: bool, plane_bits: bool) -> None:
    """table_bases32 + rans_step8 on narrow and wide contexts, with and without plane bits
    (FLAG_PLANE_CONTEXT), and rans_step8_narrow (what narrow streams without plane bits
    run), against one numpy reference."""
    rng = np.random.default_rng(5 + wide + 2 * narrow_step + 4 * plane_bits)
    flat = random_tables(rng, 12)
    ctx16, wmask = shuffle_table(wide), np.uint8(255 if wide else 0)
    for _ in range(300):
        # context symbols around the context bounds 0, 2, 6, 8 and above 15 (the shuffle's
        # clamp); mostly zeros, so that the largest of four is often a small value
        values = np.array([0, 0, 0, 0, 1, 2, 3, 6, 7, 8, 9, 15, 16, 200, 255], np.uint8)
        row = rng.choice(values, 168)
        states = rng.integers(1 << 16, 1 << 32, 32, dtype=np.uint64).astype(np.uint32)
        words = rng.integers(0, 1 << 16, 48).astype(np.uint16)
        tbase = int(rng.integers(0, 5)) * 4096
        j0, w = int(rng.choice([0, 8, 16, 24])), int(rng.integers(0, 40))
        prev = rng.choice(values, 64)  # (ignored without plane bits: pbit 0)
        pbit = np.uint8(f2.PLANE_CONTEXT if plane_bits else 0)
        row_v, states_v, row_r, states_r = row.copy(), states.copy(), row.copy(), states.copy()
        if narrow_step:
            w_v = _narrow_step(row_v, j0, states_v, j0, flat, tbase, words, w)
        else:
            w_v = _step(row_v, j0, states_v, j0, flat, tbase, ctx16, wmask, prev[j0 : j0 + 32], pbit, words, w)
        w_r = rans_avx2.step_reference(row_r, j0, states_r, j0, flat, tbase, wide, words, w,
                                       prev if plane_bits else None)
        _assert_same((w_v, row_v, states_v), (w_r, row_r, states_r))


@njit
def _round32(row, states, flat, tbase, ctx16, wmask, prev, pbit, words, w):
    return rans_avx2.rans_round32(row, states, flat, tbase, ctx16, wmask, prev, pbit, words, np.uint64(w),
                                  rans_avx2.PERMUTE)


@needs_avx2
@pytest.mark.parametrize("plane_bits", [False, True])
@pytest.mark.parametrize("wide", [False, True])
def test_fused_round_matches_four_reference_steps(wide: bool, plane_bits: bool) -> None:
    """rans_round32 (a 32-lane round with its table rows in registers) against step_reference
    on lanes 0-7, 8-15, 16-23 and 24-31 in turn, with and without plane bits."""
    rng = np.random.default_rng(31 + wide + 2 * plane_bits)
    flat = random_tables(rng, 12)
    ctx16, wmask = shuffle_table(wide), np.uint8(255 if wide else 0)
    values = np.array([0, 0, 0, 0, 1, 2, 3, 6, 7, 8, 9, 15, 16, 200, 255], np.uint8)
    for _ in range(200):
        row = rng.choice(values, cpu_v2.SYM0 + 40)
        states = rng.integers(1 << 16, 1 << 32, 32, dtype=np.uint64).astype(np.uint32)
        words = rng.integers(0, 1 << 16, 80).astype(np.uint16)
        tbase = int(rng.integers(0, 5)) * 4096
        w = int(rng.integers(0, 40))
        prev = rng.choice(values, 32)  # (ignored without plane bits: pbit 0)
        row_v, states_v, row_r, states_r = row.copy(), states.copy(), row.copy(), states.copy()
        w_v = _round32(row_v, states_v, flat, tbase, ctx16, wmask, prev, np.uint8(f2.PLANE_CONTEXT if plane_bits else 0), words, w)
        w_r = w
        for j0 in (0, 8, 16, 24):
            w_r = rans_avx2.step_reference(row_r, j0, states_r, j0, flat, tbase, wide, words, w_r,
                                           prev if plane_bits else None)
        _assert_same((w_v, row_v, states_v), (w_r, row_r, states_r))


@functools.cache
def _pair32_call(width: int, hardware: bool):
    """A compiled call of rans_pair32 with `width` lanes per step, the table entries by a load
    per lane or (`hardware`) by gather instructions."""
    pair32 = rans_avx2.PAIR32[width, hardware]

    @njit
    def call(n, sym_a, i_a, x_a, tbase_a, ctx16_a, wmask_a, back_a, words_a, w_a, sym_b, i_b, x_b, tbase_b, ctx16_b,
             wmask_b, back_b, words_b, w_b, flat):
        return pair32(np.uint64(n), sym_a, np.uint64(i_a), x_a, tbase_a, ctx16_a, wmask_a, np.uint64(back_a), words_a,
                      np.uint64(w_a), sym_b, np.uint64(i_b), x_b, tbase_b, ctx16_b, wmask_b, np.uint64(back_b),
                      words_b, np.uint64(w_b), flat, rans_avx2.PERMUTE)

    return call


def _reference_rounds(n: int, row: np.ndarray, i: int, states: np.ndarray, flat: np.ndarray, tbase: int,
                      wide: bool, back: int, words: np.ndarray, w: int) -> int:
    """n rounds of a 32-lane tile from symbol i by step_reference, with plane bits from the
    symbols `back` before each (none when back is 0). Returns the new w."""
    for r in range(n):
        at = i + 32 * r
        prev = None
        if back:  # step_reference reads prev[at + lane]: the symbol `back` before that lane's
            start = at + cpu_v2.SYM0 - back
            prev = np.concatenate([np.zeros(at, np.uint8), row[start : start + 32]])
        for j0 in (0, 8, 16, 24):
            w = rans_avx2.step_reference(row, at + j0, states, j0, flat, tbase, wide, words, w, prev)
    return w


@needs_avx2
@pytest.mark.parametrize("width", [8, pytest.param(16, marks=needs_avx512)])
@pytest.mark.parametrize("backs", [(0, 0), (96, 0), (0, 160), (224, 96)])
@pytest.mark.parametrize("wides", [(False, True), (True, False), (True, True)])
@pytest.mark.parametrize("hardware", [False, True])
def test_pair_of_32_lane_tiles_matches_the_reference_rounds(wides: tuple[bool, bool], backs: tuple[int, int],
                                                            width: int, hardware: bool) -> None:
    """rans_pair32 (n rounds of two 32-lane tiles, lane states in registers) with 8 lanes per
    step (AVX2) and 16 (AVX-512), the table entries by loads and by gather instructions,
    against step_reference round by round on each tile, with
    different contexts, plane bits and starting symbols per tile."""
    rng = np.random.default_rng(7 + 2 * wides[0] + 4 * wides[1] + backs[0] + backs[1])
    flat = random_tables(rng, 12)
    values = np.array([0, 0, 0, 0, 1, 2, 3, 6, 7, 8, 9, 15, 16, 200, 255], np.uint8)
    for _ in range(60):
        n = int(rng.integers(1, 5))
        tiles = []
        for wide, back in zip(wides, backs, strict=True):
            i = back + 32 * int(rng.integers(0, 3))  # plane bits look a whole plane back
            tiles.append(dict(row=rng.choice(values, cpu_v2.SYM0 + i + 32 * n + 8),
                              i=i, states=rng.integers(1 << 16, 1 << 32, 32, dtype=np.uint64).astype(np.uint32),
                              tbase=int(rng.integers(0, 5)) * 4096, wide=wide, back=back,
                              words=rng.integers(0, 1 << 16, 32 * n + 40).astype(np.uint16),
                              w=int(rng.integers(0, 40))))
        vector = [{**t, "row": t["row"].copy(), "states": t["states"].copy()} for t in tiles]
        a, b = vector
        call = _pair32_call(width, hardware)
        w_a, w_b = call(n, a["row"], a["i"], a["states"], a["tbase"], shuffle_table(a["wide"]),
                        np.uint8(255 if a["wide"] else 0), a["back"], a["words"], a["w"], b["row"], b["i"],
                        b["states"], b["tbase"], shuffle_table(b["wide"]), np.uint8(255 if b["wide"] else 0),
                        b["back"], b["words"], b["w"], flat)
        for t, v, w_v in zip(tiles, vector, (w_a, w_b), strict=True):
            w_r = _reference_rounds(n, t["row"], t["i"], t["states"], flat, t["tbase"], t["wide"], t["back"],
                                    t["words"], t["w"])
            _assert_same((w_v, v["row"], v["states"]), (w_r, t["row"], t["states"]))


@needs_avx2
@pytest.mark.parametrize("back", [0, 100])
@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("lanes", [8, 16, 32])
def test_vector_rounds_equal_the_scalar_rounds(lanes: int, wide: bool, back: int) -> None:
    """_rans_rounds with and without the AVX2 steps, from the same states, words and tables
    (any inputs: both are the same function of them), stop inside and at a plane's end, and
    word areas that run out mid-plane (the scalar rounds then finish with clamped reads);
    back > 0: with plane bits from the symbols that far back."""
    rng = np.random.default_rng(lanes + 100 * wide + back)
    flat = random_tables(rng, 12 if back else 8)  # set 1's four tables, and four more for plane bits
    sym0 = cpu_v2.SYM0
    ctx_of = cpu_v2.CONTEXT_OF[int(wide)]
    ctx16, wmask = shuffle_table(wide), np.uint8(255 if wide else 0)
    for n_words, stop in [(4000, 4096), (300, 4096), (4000, 1000), (lanes, 4096)]:
        words = rng.integers(0, 1 << 16, n_words).astype(np.uint16)
        symbols = np.zeros(sym0 + 4096 + 64, np.uint8)
        symbols[:sym0] = rng.integers(0, 20, sym0) * (rng.random(sym0) < 0.3)  # first rounds' contexts
        start_states = rng.integers(1 << 16, 1 << 32, cpu_v2.MAX_LANES, dtype=np.uint64).astype(np.int64)
        table_of = ((4 + ctx_of) * 4096).astype(np.int64)  # table set 1
        results = []
        for vector in (True, False):
            states, out = start_states.copy(), symbols.copy()
            i, w = cpu_v2._rans_rounds(words, np.uint64(n_words), np.uint64(n_words - 1), np.uint64(0), 0, stop,
                                       lanes, table_of, ctx16, wmask, back, np.empty(32, np.int32),
                                       np.empty(cpu_v2.MAX_LANES, np.uint32), flat, out, states, vector)
            results.append((i, w, states, out))
        (i_v, w_v, states_v, out_v), (i_s, w_s, states_s, out_s) = results
        assert (i_v, w_v) == (i_s, w_s)
        assert i_v == stop - stop % lanes
        np.testing.assert_array_equal(states_v[:lanes], states_s[:lanes])
        np.testing.assert_array_equal(out_v, out_s)
        contexts = ctx_of[out_v[sym0 : sym0 + i_v]]
        assert np.isin(np.arange(4), contexts).all()  # every context was decoded from


@pytest.mark.parametrize("value", [None, "0", "1"])
def test_gather_instructions_where_they_pay_or_when_asked(value: str | None) -> None:
    """The decoder reads its table entries by gather instructions where gathers_pay says so
    for this CPU, unless PREPKIT_HW_GATHER decides (1: gathers, 0: loads), and the choice is
    part of the disk cache's key (BUILD), so a cached kernel of the other kind is not reused."""
    env = {k: v for k, v in os.environ.items() if k != "PREPKIT_HW_GATHER"}
    if value is not None:
        env["PREPKIT_HW_GATHER"] = value
    out = subprocess.run([sys.executable, "-c", "from llvmlite import binding as llvm; "
                          "from prepkit.lossless import rans_avx2 as r; "
                          "print(r.HARDWARE_GATHER, r.BUILD, r.gathers_pay(llvm.get_host_cpu_name()))"],
                         env=env, capture_output=True, text=True, check=True)
    chosen, build, pays = out.stdout.split()
    hardware = pays == "True" if value is None else value == "1"
    assert chosen == str(hardware)
    assert build.endswith(f"hardware_gather={hardware}")


@pytest.mark.parametrize(("cpu_name", "pays"), [
    ("znver3", True), ("znver4", True), ("znver5", True), ("znver10", True),
    ("znver1", False), ("znver2", False), ("znver", False), ("icelake-server", False),
    ("skylake-avx512", False), ("sapphirerapids", False), ("generic", False), ("", False),
])
def test_gathers_pay_on_zen3_and_later_only(cpu_name: str, pays: bool) -> None:
    """Gathers where they were measured faster (Zen 3) and on later Zen cores; loads on every
    other CPU name, Intel's included (gathers slowed by the Gather Data Sampling microcode)."""
    assert rans_avx2.gathers_pay(cpu_name) is pays


# ----------------------------------------------------------------------------- encoder


def test_permute_down_rows_list_the_emitting_lanes_from_lane_7_down() -> None:
    for mask in range(256):
        emitting = [j for j in range(7, -1, -1) if mask >> j & 1]
        assert [int(v) for v in rans_avx2.PERMUTE_DOWN[mask, : len(emitting)]] == emitting


def _coder_with_extremes(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Frequency rows (summing to 4096) and their _coder_table, flattened: random tables, one
    symbol of frequency 4096 (a certain symbol) and one of many symbols of frequency 1."""
    freq = np.zeros((4, 256), np.int64)
    for t in range(2):
        cuts = np.sort(rng.choice(np.arange(1, 4096), 255, replace=False))
        freq[t] = np.diff(np.concatenate([[0], cuts, [4096]]))
    freq[2, 7] = 4096
    freq[3, :255] = 1
    freq[3, 255] = 4096 - 255
    return freq, cpu_v2._coder_table(freq).reshape(-1)


@njit
def _puts_vector(syms, tables, states, flat_coder, words):
    """The encoder's vector loop (cpu_v2._vector_puts: rans_put8) over 16 lanes."""
    return cpu_v2._vector_puts(syms, tables, np.uint64(syms.size), np.uint64(15), states, flat_coder, words,
                               np.uint64(0))


@njit
def _puts_scalar(syms, tables, states, flat_coder, words):
    """The scalar encoder's loop (cpu_v2._scalar_puts: _rans_put) over the same symbols and lanes."""
    return cpu_v2._scalar_puts(syms, tables, np.uint64(syms.size), np.uint64(0), np.uint64(15), states, flat_coder,
                               words, np.uint64(0))


@needs_avx2
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_encoder_step_matches_the_scalar_encoder(seed: int) -> None:
    """rans_put8 (eight lanes at once, the quotient by a division in doubles) writes the same
    words in the same order and leaves the same states as the scalar encoder, whose quotient
    comes from a 45-bit reciprocal: random tables, a certain symbol (f = 4096, never a word),
    symbols of frequency 1 (a word nearly every time), and lane states from the whole range
    the encoder keeps, 2^16 .. 2^32 - 1, the extremes included."""
    rng = np.random.default_rng(seed)
    freq, flat_coder = _coder_with_extremes(rng)
    n = 8 * 512
    tables = rng.integers(0, 4, n).astype(np.int64)
    syms = np.empty(n, np.uint8)
    for t in range(4):
        where = tables == t
        present = np.flatnonzero(freq[t])
        syms[where] = rng.choice(present, int(where.sum()), p=freq[t, present] / 4096)
    start = rng.integers(1 << 16, 1 << 32, 16, dtype=np.uint64).astype(np.uint32)
    start[:2] = [1 << 16, (1 << 32) - 1]
    results = []
    for puts in (_puts_vector, _puts_scalar):
        states, words = start.copy(), np.zeros(n + 8, np.uint16)
        nw = puts(syms, tables, states, flat_coder, words)
        results.append((nw, words[:nw], states))
    (nw_v, words_v, states_v), (nw_s, words_s, states_s) = results
    assert nw_v == nw_s > n // 8  # the frequency-1 symbols emit words
    np.testing.assert_array_equal(words_v, words_s)
    np.testing.assert_array_equal(states_v, states_s)
    assert (states_v >= 1 << 16).all()


def test_double_division_gives_the_integer_quotient_at_every_frequency() -> None:
    """rans_put8's argument, checked in numpy's doubles (IEEE like vdivpd): for every f the
    encoder divides by and the states x < f << 20 it divides, truncating x / f in doubles
    is x // f, at and around every multiple of f where rounding could carry."""
    f = np.arange(1, 4097, dtype=np.int64)[:, None]
    top = f << 20
    k = np.arange(0, 1 << 20, 4099, dtype=np.int64)[None, :]
    for x in (k * f, k * f - 1, k * f + f - 1, np.broadcast_to(top - 1, (f.size, k.size))):
        x = np.clip(x, 0, top - 1)
        assert ((x.astype(np.float64) / f.astype(np.float64)).astype(np.int64) == x // f).all()
