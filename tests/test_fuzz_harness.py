"""The fuzz harness, for a few seconds per target (the long run is `python -m prepkit.fuzz`)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from prepkit.fuzz import fuzz_encoders, fuzz_lossless, fuzz_store, mutate


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


def test_hostile_store_corpus_is_refused_by_every_probe(tmp_path: Path) -> None:
    """The issue-15 regression corpus: every tampered store is refused or reported by open,
    inspect, the Reader and verify --decode, with prepkit errors only and no hang."""
    from prepkit.fuzz import _make_store, _probe_all, hostile_cases, replay_corpus

    # The probes themselves work: on the untampered store only verify's "ok" is reported.
    assert _probe_all(_make_store(tmp_path)) == ["verify --decode says ok"]
    report = replay_corpus(timeout=60)
    assert not report.findings, "\n".join(report.findings)
    assert report.cases == len(hostile_cases()) >= 30 and report.rejected == report.cases - 1


def test_the_encoders_agree_on_random_small_images() -> None:
    """Both lossless encoder paths (and the reference, every 25th case) write the same
    stream for random patchworks of up to 256 tiles."""
    report = fuzz_encoders(cases=40, seed=13)
    assert report.cases == 40 and report.accepted == 40 and not report.findings, report.findings


def test_a_short_path_that_writes_other_bytes_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    from prepkit.lossless import small_encoder

    stream = small_encoder.stream

    def flipped(*args: object) -> bytes | None:
        data = stream(*args)  # type: ignore[arg-type]
        return None if data is None else data[:-1] + bytes([data[-1] ^ 1])

    monkeypatch.setattr(small_encoder, "stream", flipped)
    report = fuzz_encoders(cases=10, seed=13)
    assert len(report.findings) == 10 and "differ" in report.findings[0]
