"""prepkit.bench.workers: its inputs, its check of the stores and its table (the timed runs
start a process each, minutes in all: they run from the command)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from prepkit.bench import workers


def test_crops_are_deterministic_pngs_of_the_side_asked(tmp_path: Path) -> None:
    workers.write_crops(tmp_path / "a", 7, 16, seed=3)
    workers.write_crops(tmp_path / "b", 7, 16, seed=3)
    files = sorted((tmp_path / "a").iterdir())
    assert len(files) == 7
    for path in files:
        pixels = np.asarray(Image.open(path))
        assert pixels.shape == (16, 16, 3) and pixels.dtype == np.uint8
    assert workers.same_files(tmp_path / "a", tmp_path / "b")
    workers.write_crops(tmp_path / "c", 7, 16, seed=4)
    assert not workers.same_files(tmp_path / "a", tmp_path / "c")


def test_same_files_sees_a_missing_or_changed_file(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "sub" / "x.bin").write_bytes(b"123")
    assert workers.same_files(tmp_path / "a", tmp_path / "b")
    (tmp_path / "b" / "sub" / "x.bin").write_bytes(b"124")
    assert not workers.same_files(tmp_path / "a", tmp_path / "b")
    (tmp_path / "b" / "sub" / "x.bin").write_bytes(b"123")
    (tmp_path / "b" / "y.bin").write_bytes(b"")
    assert not workers.same_files(tmp_path / "a", tmp_path / "b")


def test_all_cores_each_sets_the_override_and_the_share_clears_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREPKIT_WORKER_THREADS", "5")
    assert workers._env(workers.ALL, 8)["PREPKIT_WORKER_THREADS"] == "8"
    assert "PREPKIT_WORKER_THREADS" not in workers._env(workers.SHARE, 8)


def test_labels_name_each_process_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREPKIT_WORKER_THREADS", raising=False)
    assert workers.threads_label(1, workers.SHARE, 8) == "8 (one process: the command's own)"
    assert workers.threads_label(4, workers.SHARE, 8) == "2 (a share of the cores)"
    assert workers.threads_label(4, workers.ALL, 8) == "8 (all cores each)"


def test_table_keeps_the_rows_order_and_groups_thousands(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [("shard --layout lossless, seconds", 2, "1 (a share of the cores)", 7.9),
            ("shard --layout lossless, seconds", 2, "2 (all cores each)", 79.0),
            ("DataLoader over the lossless store, images/s", 2, "1 (a share of the cores)", 11818.91)]
    workers.print_table(rows, 3000, 32)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "---" not in line]
    assert lines[1:] == ["| shard --layout lossless, seconds | 2 | 1 (a share of the cores) | 7.90 |",
                         "| shard --layout lossless, seconds | 2 | 2 (all cores each) | 79.00 |",
                         "| DataLoader over the lossless store, images/s | 2 | 1 (a share of the cores) | 11,818.91 |"]


def test_ranks_rate_runs_every_rank_both_ways(tmp_path: Path) -> None:
    """Two Reader processes as a node's ranks over a tiny store: each reads its part of every
    epoch, both ways (the rate's figure itself is the command's)."""
    from prepkit.ingest.build import build_store
    from prepkit.ingest.images import ImageOptions
    from prepkit.layouts import LosslessLayout

    workers.write_crops(tmp_path / "src", 40, 16)
    build_store(str(tmp_path / "src"), str(tmp_path / "store"), layout=LosslessLayout(), options=ImageOptions(),
                samples_per_shard=16, workers=1)
    script = tmp_path / "rank.py"
    script.write_text(workers.RANK)
    for way in (workers.SHARE, workers.ALL):
        assert workers.ranks_rate(tmp_path / "store", 2, 16, way, 2, script) > 0
