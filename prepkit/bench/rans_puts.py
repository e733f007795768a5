"""The encoder's rANS loop alone: eight lanes at once (AVX2) against one symbol at a time.

    python -m prepkit.bench.rans_puts [--tiles 64] [--repeat 7]

What `cpu_v2._rans_body` spends on the symbols of a 64 x 64 RGB tile (12,288 symbols, 32
lanes) after it has chosen the lane count: `cpu_v2._scalar_puts` (a 45-bit reciprocal
multiply per symbol) against `cpu_v2._vector_puts` (rans_avx2.rans_put8: a table entry per
lane and the quotient by a division in doubles). Synthetic tables: eight contexts of
geometric residual distributions (as prepkit.bench.rans_rounds), symbols drawn from them.
Both loops run in turn on the same symbols, `repeat` rounds; a figure is the fastest round's
ns per symbol, one thread. The loops must write the same words and states (checked).
Needs AVX2 (rans_avx2.AVAILABLE).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from numba import njit

from prepkit.bench import rans_rounds
from prepkit.lossless import cpu_v2, frequencies, rans_avx2
from prepkit.parallel import keeps_numba_threads

TILE_SYMBOLS = 64 * 64 * 3
LANES = 32
CONTEXTS = 8
SCALAR, VECTOR = "scalar, one symbol at a time", "AVX2, eight lanes at once"  # the table's rows


def synthetic_coder() -> tuple[np.ndarray, np.ndarray]:
    """(freq (CONTEXTS, 256), its cpu_v2._coder_table flattened): geometric distributions of zig-zag
    residuals, from about 2 to about 5 bits per symbol."""
    counts = np.zeros((CONTEXTS, 256), np.int64)
    for t in range(CONTEXTS):
        p = 0.45 - 0.05 * t
        counts[t] = np.maximum(1, (1e6 * p * (1 - p) ** np.arange(256)).astype(np.int64))
    freq = frequencies.normalize_rows(counts)
    return freq, cpu_v2._coder_table(freq).reshape(-1)


def synthetic_symbols(rng: np.random.Generator, freq: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n symbols (uint8) and their tables (int64), each drawn from its table's distribution."""
    tables = rng.integers(0, CONTEXTS, n).astype(np.int64)
    syms = np.empty(n, np.uint8)
    for t in range(CONTEXTS):
        where = tables == t
        syms[where] = rng.choice(256, int(where.sum()), p=freq[t] / freq[t].sum())
    return syms, tables


@njit(nogil=True)
def scalar_tiles(syms, tables, flat_coder, states, words, tiles):
    """_scalar_puts over `tiles` tiles of the same symbols; returns the last tile's word count."""
    n_words = np.uint64(0)
    for _ in range(tiles):
        states[:LANES] = cpu_v2.STATE_LOW
        n_words = cpu_v2._scalar_puts(syms, tables, np.uint64(syms.size), np.uint64(0), np.uint64(LANES - 1), states,
                                      flat_coder, words, np.uint64(0))
    return n_words


@njit(nogil=True)
def vector_tiles(syms, tables, flat_coder, states, words, tiles):
    """_vector_puts (rans_put8) over the same tiles."""
    n_words = np.uint64(0)
    for _ in range(tiles):
        states[:LANES] = cpu_v2.STATE_LOW
        n_words = cpu_v2._vector_puts(syms, tables, np.uint64(syms.size), np.uint64(LANES - 1), states, flat_coder,
                                      words, np.uint64(0))
    return n_words


def measure(tiles: int, repeat: int) -> dict[str, float]:
    """The fastest ns per symbol of each loop over `repeat` rounds (after a first that
    compiles and checks that both write the same words and states)."""
    rng = np.random.default_rng(7)
    freq, flat_coder = synthetic_coder()
    syms, tables = synthetic_symbols(rng, freq, TILE_SYMBOLS)
    loops = {SCALAR: scalar_tiles, VECTOR: vector_tiles}
    results = []
    for loop in loops.values():
        states, words = np.empty(LANES, np.uint32), np.zeros(TILE_SYMBOLS + 8, np.uint16)
        n_words = int(loop(syms, tables, flat_coder, states, words, 1))
        results.append((n_words, words[:n_words].copy(), states.copy()))
    (n_a, words_a, states_a), (n_b, words_b, states_b) = results
    if n_a != n_b or not np.array_equal(words_a, words_b) or not np.array_equal(states_a, states_b):
        raise AssertionError("the vector loop's words or states differ from the scalar loop's")
    best = {name: np.inf for name in loops}
    states, words = np.empty(LANES, np.uint32), np.zeros(TILE_SYMBOLS + 8, np.uint16)
    for _ in range(repeat):
        for name, loop in loops.items():
            start = time.perf_counter()
            loop(syms, tables, flat_coder, states, words, tiles)
            best[name] = min(best[name], (time.perf_counter() - start) / (tiles * TILE_SYMBOLS))
    return {name: seconds * 1e9 for name, seconds in best.items()}


@keeps_numba_threads
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiles", type=int, default=64, help="tiles per timed round")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    if not rans_avx2.AVAILABLE:
        print("rans_avx2 is not available on this CPU (no AVX2): the encoder takes its scalar loop.")
        return 1
    import numba

    numba.set_num_threads(1)
    rans_rounds.print_table(measure(args.tiles, args.repeat), SCALAR)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
