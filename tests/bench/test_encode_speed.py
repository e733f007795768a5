"""encode_speed: PNG and prepkit encoders timed per set and thread count, figures as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from prepkit.bench import encode_speed


def test_every_encoder_timed_per_set(small_sets: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = encode_speed.main([str(small_sets), "--sets", "photos", "masks", "--limit", "1", "--repeat", "1",
                              "--threads", "1", "2", "--json", str(tmp_path / "e.json")])
    assert code == 0
    report = json.loads((tmp_path / "e.json").read_text())
    assert set(report["seconds"]) == {"photos", "masks"}
    names = {"Pillow PNG", "prepkit v2, 1T", "prepkit v2, 2T", "prepkit v2 fast_decode, 1T",
             "prepkit v2 fast_decode, 2T"}
    for seconds in report["seconds"].values():
        assert set(seconds) == names and min(seconds.values()) > 0
    assert "| masks | 1 | prepkit v2, 2T |" in capsys.readouterr().out


def test_prepkit_encoders_are_lossless_and_restore_the_thread_count() -> None:
    import numba

    from prepkit import lossless

    image = (np.arange(40 * 50 * 3).reshape(40, 50, 3) % 251).astype(np.uint8)
    before = numba.get_num_threads()
    coders = encode_speed.encoders([1])
    for name, encode in coders.items():
        data = encode(image)
        if name.startswith("prepkit"):
            np.testing.assert_array_equal(lossless.decode(data), image)
        assert numba.get_num_threads() == before
    assert encode_speed.measure([image], coders, repeat=2).keys() == coders.keys()
