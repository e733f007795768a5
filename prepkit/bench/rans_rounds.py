"""The CPU decoder's 32-lane rANS rounds alone: one tile's rounds in a loop against two or
three tiles' rounds interleaved (cpu_v2._pair_rounds decodes tiles in pairs).

    python -m prepkit.bench.rans_rounds [--rounds 4096] [--repeat 5]

Synthetic tables (eight contexts of geometric residual distributions, 2.2 to 4.5 bits per
symbol) and random words; ns per decoded symbol, one thread. A tile's rounds are one chain:
each round's table loads wait for the lane states and the contexts from the round before,
so a second tile's independent rounds in the same loop fill the wait; the third-tile column
shows where the loop stops being latency-bound. The rows "in registers" run the same rounds
as the decoder does since stop 42: many rounds per call with the lane states kept in registers
(rans_avx2.rans_rounds32, rans_pair32), with 8 lanes per step (AVX2) and, on a CPU with
AVX-512 VBMI2, 16, each with the table entries read by a load per lane and by gather
instructions (the decoder takes the gathers on AMD's Zen 3 and later, the loads elsewhere:
rans_avx2.gathers_pay; PREPKIT_HW_GATHER=1 or 0 decides instead). The rows before them take
the process's choice. Needs AVX2 (rans_avx2.AVAILABLE).
"""
from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

import numpy as np
from numba import njit

from prepkit.bench.machine import machine_line
from prepkit.lossless import cpu_v2, frequencies, rans_avx2
from prepkit.lossless import format_v2 as f2
from prepkit.parallel import keeps_numba_threads

SYM0 = cpu_v2.SYM0
TABLES = 8


def synthetic_tables() -> np.ndarray:
    """Flat decode tables (cpu_v2.decode_table's layout) of TABLES geometric distributions."""
    flat = np.zeros(TABLES * 4096, np.uint32)
    for t in range(TABLES):
        counts = np.maximum(1, np.round(1e6 * (0.35 + 0.07 * t) ** np.arange(256))).astype(np.int64)
        freq = f2.normalize(counts).astype(np.int64)
        cum = np.concatenate([[0], np.cumsum(freq)[:-1]])
        frequencies.expand_into(freq, cum, flat[t * 4096 : (t + 1) * 4096])
    return flat


@njit(nogil=True, boundscheck=False)
def _rounds(sym, x, flat, ctx16, words, w, permute, r):
    at = np.uint64(32 * r)
    return rans_avx2.rans_round32(sym[at : at + np.uint64(SYM0 + 32)], x, flat, 0, ctx16, np.uint8(255),
                                  sym[at : at + np.uint64(32)], np.uint8(0), words, w, permute)


@njit(nogil=True, boundscheck=False)
def one_tile(sym, x, flat, ctx16, words, permute, rounds):
    """`rounds` rounds of one tile; returns the words read."""
    w = np.uint64(0)
    for r in range(rounds):
        w = _rounds(sym, x, flat, ctx16, words, w, permute, r)
    return w


@njit(nogil=True, boundscheck=False)
def two_tiles(sym_a, sym_b, x_a, x_b, flat, ctx16, words, permute, rounds):
    """A round of tile a, then one of tile b, `rounds` times each."""
    w_a, w_b = np.uint64(0), np.uint64(0)
    for r in range(rounds):
        w_a = _rounds(sym_a, x_a, flat, ctx16, words, w_a, permute, r)
        w_b = _rounds(sym_b, x_b, flat, ctx16, words, w_b, permute, r)
    return w_a + w_b


@njit(nogil=True, boundscheck=False)
def three_tiles(sym_a, sym_b, sym_c, x_a, x_b, x_c, flat, ctx16, words, permute, rounds):
    """Rounds of three tiles in turn."""
    w_a, w_b, w_c = np.uint64(0), np.uint64(0), np.uint64(0)
    for r in range(rounds):
        w_a = _rounds(sym_a, x_a, flat, ctx16, words, w_a, permute, r)
        w_b = _rounds(sym_b, x_b, flat, ctx16, words, w_b, permute, r)
        w_c = _rounds(sym_c, x_c, flat, ctx16, words, w_c, permute, r)
    return w_a + w_b + w_c


@functools.cache
def registers_loop(width: int, tiles: int, hardware: bool = False) -> Callable:
    """`rounds` rounds of one tile (rans_rounds32) or two (rans_pair32) in one call, `width`
    lanes per step, the table entries by a load per lane or (`hardware`) by gathers; returns
    the words read."""
    if tiles == 1:
        rounds32 = rans_avx2.ROUNDS32[width, hardware]

        @njit(nogil=True, boundscheck=False)
        def one(sym_a, sym_b, x_a, x_b, flat, ctx16, words, permute, rounds):
            return rounds32(np.uint64(rounds), sym_a, np.uint64(0), x_a, 0, ctx16, np.uint8(255), np.uint64(0),
                            words, np.uint64(0), flat, permute)

        return one
    pair32 = rans_avx2.PAIR32[width, hardware]

    @njit(nogil=True, boundscheck=False)
    def two(sym_a, sym_b, x_a, x_b, flat, ctx16, words, permute, rounds):
        w_a, w_b = pair32(np.uint64(rounds), sym_a, np.uint64(0), x_a, 0, ctx16, np.uint8(255), np.uint64(0), words,
                          np.uint64(0), sym_b, np.uint64(0), x_b, 0, ctx16, np.uint8(255), np.uint64(0), words,
                          np.uint64(0), flat, permute)
        return w_a + w_b

    return two


def row_name(name: str, width: int, hardware: bool) -> str:
    """The table row of a loop in registers."""
    return f"{name}, in registers, {width} lanes per step" + (", gather instructions" if hardware else "")


def measure(rounds: int, repeat: int) -> dict[str, float]:
    """The fastest ns per symbol of each loop over `repeat` runs."""
    rng = np.random.default_rng(1)
    flat = synthetic_tables()
    ctx16 = cpu_v2.CONTEXT16[1].copy()
    words = rng.integers(0, 1 << 16, rounds * 32 + 64, dtype=np.uint16)  # a round reads at most 32

    def tile() -> tuple[np.ndarray, np.ndarray]:
        return np.zeros(SYM0 + rounds * 32 + 64, np.uint8), rng.integers(1 << 16, 1 << 31, 32).astype(np.uint32)

    best = {"one tile": np.inf, "two tiles": np.inf, "three tiles": np.inf}
    widths = (8, 16) if rans_avx2.AVX512 else (8,)
    registers = {row_name(name, width, hardware): (registers_loop(width, tiles, hardware), tiles)
                 for hardware in (False, True) for width in widths for name, tiles in (("one tile", 1), ("two tiles", 2))}
    best.update({name: np.inf for name in registers})
    for _ in range(repeat + 1):  # the first pass compiles
        (s_a, x_a), (s_b, x_b), (s_c, x_c) = tile(), tile(), tile()
        start = time.perf_counter()
        one_tile(s_a, x_a, flat, ctx16, words, rans_avx2.PERMUTE, rounds)
        best["one tile"] = min(best["one tile"], (time.perf_counter() - start) / (32 * rounds))
        start = time.perf_counter()
        two_tiles(s_a, s_b, x_a, x_b, flat, ctx16, words, rans_avx2.PERMUTE, rounds)
        best["two tiles"] = min(best["two tiles"], (time.perf_counter() - start) / (64 * rounds))
        start = time.perf_counter()
        three_tiles(s_a, s_b, s_c, x_a, x_b, x_c, flat, ctx16, words, rans_avx2.PERMUTE, rounds)
        best["three tiles"] = min(best["three tiles"], (time.perf_counter() - start) / (96 * rounds))
        for name, (loop, tiles) in registers.items():
            start = time.perf_counter()
            loop(s_a, s_b, x_a, x_b, flat, ctx16, words, rans_avx2.PERMUTE, rounds)
            best[name] = min(best[name], (time.perf_counter() - start) / (32 * tiles * rounds))
    return {name: seconds * 1e9 for name, seconds in best.items()}


@keeps_numba_threads
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4096, help="32-symbol rounds per tile")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    if not rans_avx2.AVAILABLE:
        print("rans_avx2 is not available on this CPU (no AVX2): the decoder takes its scalar loop.")
        return 1
    import numba

    numba.set_num_threads(1)
    ns = measure(args.rounds, args.repeat)
    print_table(ns, "one tile")
    return 0


def print_table(ns: dict[str, float], baseline: str) -> None:
    """The machine, then a markdown table of each loop's ns per symbol and its speed against
    the loop named `baseline` (also prepkit.bench.rans_puts's)."""
    print(f"Machine: {machine_line()}\n")
    print(f"| loop | ns per symbol | x {baseline} |\n| --- | --- | --- |")
    for name, value in ns.items():
        print(f"| {name} | {value:.3f} | {ns[baseline] / value:.2f} |")


if __name__ == "__main__":
    raise SystemExit(main())
