"""The fuzz harness, for a few seconds per target (the long run is `python -m prepkit.fuzz`)."""

from __future__ import annotations

import random

from prepkit.fuzz import fuzz_lossless, fuzz_store, mutate


def test_mutations_change_the_input() -> None:
    rng = random.Random(0)
    data = bytes(range(200))
    changed = sum(mutate(data, rng) != data for _ in range(200))
    assert changed > 150


def test_lossless_decoder_survives_mutations() -> None:
    report = fuzz_lossless(cases=400, seed=11)
    assert not report.findings, report.findings[0]
    # A fixed case count (speed-independent); the mutations must reach both outcomes.
    assert report.cases == 400 and report.rejected > 50 and report.accepted > 20


def test_store_reader_survives_mutations() -> None:
    report = fuzz_store(cases=60, seed=12)
    assert not report.findings, report.findings[0]
    assert report.cases == 60 and report.rejected > 10 and report.accepted > 0
