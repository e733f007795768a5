"""rans_rounds: one tile's 32-lane rounds against two and three tiles' interleaved."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit.bench import rans_rounds
from prepkit.lossless import cpu_v2, rans_avx2


def test_interleaved_loops_decode_what_each_tile_decodes_alone() -> None:
    if not rans_avx2.AVAILABLE:  # the intrinsic needs AVX2; main says so (below)
        assert rans_rounds.main(["--rounds", "8", "--repeat", "1"]) == 1
        return
    rng = np.random.default_rng(4)
    flat = rans_rounds.synthetic_tables()
    ctx16 = cpu_v2.CONTEXT16[1].copy()
    rounds = 64
    words = rng.integers(0, 1 << 16, rounds * 32 + 64, dtype=np.uint16)
    states = [rng.integers(1 << 16, 1 << 31, 32).astype(np.uint32) for _ in range(3)]
    alone = []
    for x in states:
        sym = np.zeros(rans_rounds.SYM0 + rounds * 32 + 64, np.uint8)
        x = x.copy()
        used = rans_rounds.one_tile(sym, x, flat, ctx16, words, rans_avx2.PERMUTE, rounds)
        alone.append((sym, x, int(used)))
    assert len({sym[rans_rounds.SYM0 :].tobytes() for sym, _, _ in alone}) == 3  # different states, symbols
    syms = [np.zeros_like(alone[0][0]) for _ in range(3)]
    xs = [x.copy() for x in states]
    used = rans_rounds.three_tiles(*syms, *xs, flat, ctx16, words, rans_avx2.PERMUTE, rounds)
    assert int(used) == sum(u for _, _, u in alone)
    for sym, x, (want_sym, want_x, _) in zip(syms, xs, alone, strict=True):
        np.testing.assert_array_equal(sym, want_sym)
        np.testing.assert_array_equal(x, want_x)


def test_table_rows(capsys: pytest.CaptureFixture[str]) -> None:
    if not rans_avx2.AVAILABLE:
        return  # covered by the test above
    assert rans_rounds.main(["--rounds", "16", "--repeat", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and line.split("|")[2].strip()[:1].isdigit()]
    assert [row.split("|")[1].strip() for row in rows] == ["one tile", "two tiles", "three tiles"]
    assert all(float(row.split("|")[2]) > 0 for row in rows)
