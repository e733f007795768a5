"""small_images: crops of the evaluation sets decoded one per call, against libspng and Pillow."""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np
import pytest

from prepkit.bench import small_images


def test_crops_are_deterministic_and_of_the_asked_side(small_sets: Path) -> None:
    first = small_images.crops(small_sets, 32, 2)
    again = small_images.crops(small_sets, 32, 2)
    assert len(first) >= 4 and all(a.shape[:2] == (32, 32) for a in first)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))


def test_rows_per_side(small_sets: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = numba.get_num_threads()
    small_images.main([str(small_sets), "--sides", "32", "64", "--crops", "1", "--repeat", "2"])
    assert numba.get_num_threads() == before  # it times on one thread, then gives the setting back
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [row.split("|")[1].strip() for row in rows] == ["32", "64"]
    for row in rows:  # decode and encode timings, ratios and the size ratio: positive numbers
        numbers = [float(x) for x in row.strip("|").split("|")[1:]]
        assert len(numbers) == 10 and min(numbers) > 0
        decode_us, spng_us, encode_us, png_encode_us = numbers[1], numbers[2], numbers[6], numbers[7]
        # The ratios are printed to 0.01 from the unrounded times, which are printed to 0.1 us.
        assert numbers[4] == pytest.approx(spng_us / decode_us, abs=_tolerance(spng_us, decode_us))
        assert numbers[8] == pytest.approx(png_encode_us / encode_us, abs=_tolerance(png_encode_us, encode_us))


def _tolerance(numerator: float, denominator: float) -> float:
    """How far a ratio printed to 0.01 can lie from the ratio of two values printed to 0.1."""
    return 0.005 + numerator / denominator * (0.05 / numerator + 0.05 / denominator) + 1e-9


def test_measure_encode_times_both_encoders() -> None:
    image = np.arange(32 * 32 * 3, dtype=np.uint8).reshape(32, 32, 3)
    times = small_images.measure_encode([image, image[:16, :16].copy()], 2)
    assert set(times) == {"prepkit-lossless", "pillow"} and min(times.values()) > 0


def test_a_decoder_that_does_not_give_the_image_back_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    from prepkit import lossless

    image = np.arange(32 * 32 * 3, dtype=np.uint8).reshape(32, 32, 3)
    monkeypatch.setattr(lossless, "decode", lambda data: np.zeros((32, 32, 3), np.uint8))
    with pytest.raises(AssertionError, match="prepkit-lossless did not give an image back"):
        small_images.measure([image], 1)
