"""rans_rounds: one tile's 32-lane rounds against two and three tiles' interleaved."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit.bench import rans_rounds
from prepkit.lossless import cpu_v2, rans_avx2


def _tiles_alone(seed: int, n_tiles: int, rounds: int) -> tuple:
    """Tables, words and n_tiles lane states, and what each tile's rounds decode alone
    (one_tile): (flat, ctx16, words, states, [(symbols, states after, words read)])."""
    rng = np.random.default_rng(seed)
    flat = rans_rounds.synthetic_tables()
    ctx16 = cpu_v2.CONTEXT16[1].copy()
    words = rng.integers(0, 1 << 16, rounds * 32 + 64, dtype=np.uint16)
    states = [rng.integers(1 << 16, 1 << 31, 32).astype(np.uint32) for _ in range(n_tiles)]
    alone = []
    for x in states:
        sym, x = np.zeros(rans_rounds.SYM0 + rounds * 32 + 64, np.uint8), x.copy()
        alone.append((sym, x, int(rans_rounds.one_tile(sym, x, flat, ctx16, words, rans_avx2.PERMUTE, rounds))))
    return flat, ctx16, words, states, alone


def _assert_decodes_alike(syms: list, xs: list, used: int, alone: list) -> None:
    assert used == sum(u for _, _, u in alone)
    for sym, x, (want_sym, want_x, _) in zip(syms, xs, alone, strict=True):
        np.testing.assert_array_equal(sym, want_sym)
        np.testing.assert_array_equal(x, want_x)


def test_interleaved_loops_decode_what_each_tile_decodes_alone() -> None:
    if not rans_avx2.AVAILABLE:  # the intrinsic needs AVX2; main says so (below)
        assert rans_rounds.main(["--rounds", "8", "--repeat", "1"]) == 1
        return
    rounds = 64
    flat, ctx16, words, states, alone = _tiles_alone(4, 3, rounds)
    assert len({sym[rans_rounds.SYM0 :].tobytes() for sym, _, _ in alone}) == 3  # different states, symbols
    syms = [np.zeros_like(alone[0][0]) for _ in range(3)]
    xs = [x.copy() for x in states]
    used = rans_rounds.three_tiles(*syms, *xs, flat, ctx16, words, rans_avx2.PERMUTE, rounds)
    _assert_decodes_alike(syms, xs, int(used), alone)


@pytest.mark.parametrize("hardware", [False, True])
@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("tiles", [1, 2])
def test_register_loops_decode_what_the_round_loop_decodes(width: int, tiles: int, hardware: bool) -> None:
    """The bench's "in registers" rows (rans_rounds32, rans_pair32), with the table entries by
    loads and by gathers, decode the symbols, lane states and word counts of one_tile's rounds."""
    if not rans_avx2.AVAILABLE or (width == 16 and not rans_avx2.AVX512):
        assert not rans_avx2.AVX512  # (covered where the CPU has the instructions)
        return
    rounds = 40
    flat, ctx16, words, states, alone = _tiles_alone(5, 2, rounds)
    syms = [np.zeros_like(alone[0][0]) for _ in range(2)]
    xs = [x.copy() for x in states]
    used = rans_rounds.registers_loop(width, tiles, hardware)(*syms, *xs, flat, ctx16, words, rans_avx2.PERMUTE, rounds)
    _assert_decodes_alike(syms[:tiles], xs[:tiles], int(used), alone[:tiles])


def test_table_rows(capsys: pytest.CaptureFixture[str]) -> None:
    if not rans_avx2.AVAILABLE:
        return  # covered by the test above
    assert rans_rounds.main(["--rounds", "16", "--repeat", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and line.split("|")[2].strip()[:1].isdigit()]
    widths = (8, 16) if rans_avx2.AVX512 else (8,)
    assert [row.split("|")[1].strip() for row in rows] == ["one tile", "two tiles", "three tiles"] + [
        f"{name}, in registers, {width} lanes per step{suffix}" for suffix in ("", ", gather instructions")
        for width in widths for name in ("one tile", "two tiles")]
    assert all(float(row.split("|")[2]) > 0 for row in rows)
