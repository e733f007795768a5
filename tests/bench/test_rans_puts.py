"""rans_puts: the encoder's eight-lane rANS loop against its scalar loop."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit.bench import rans_puts
from prepkit.lossless import rans_avx2


def test_synthetic_symbols_follow_their_tables() -> None:
    freq, flat_coder = rans_puts.synthetic_coder()
    assert (freq.sum(axis=1) == 4096).all() and flat_coder.shape == (rans_puts.CONTEXTS * 256 * 2,)
    syms, tables = rans_puts.synthetic_symbols(np.random.default_rng(0), freq, 4096)
    assert (freq[tables, syms] > 0).all()
    assert syms[tables == 0].mean() < syms[tables == rans_puts.CONTEXTS - 1].mean()  # flatter tables, larger symbols


def test_table_rows(capsys: pytest.CaptureFixture[str]) -> None:
    """Both rows, positive figures; the bench itself refuses loops that write different words."""
    if not rans_avx2.AVAILABLE:
        assert rans_puts.main(["--tiles", "1", "--repeat", "1"]) == 1
        return
    assert rans_puts.main(["--tiles", "2", "--repeat", "1"]) == 0
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][2:]
    assert [row[1].strip() for row in rows] == [rans_puts.SCALAR, rans_puts.VECTOR]
    assert all(float(row[2]) > 0 for row in rows)
