"""lossless_sizes over evaluation sets: one row per set, then one per image with its ratios."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prepkit.bench import lossless_sizes
from prepkit.bench.evalsets import load_manifest


def test_per_image_rows_of_the_evaluation_sets(small_sets: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lossless_sizes.main([str(small_sets), "--sets", "masks", "rendered", "--limit", "2"])
    lines = capsys.readouterr().out.splitlines()
    sets = [line.split("|")[1].strip() for line in lines[2:] if not line.startswith("|   ")]
    assert sorted(sets) == ["masks", "rendered"]
    names = {Path(entry.file).name for entry, _ in load_manifest(small_sets)["masks"][:2]}
    image_rows = [line for line in lines if line.startswith("|   ")]
    assert len(image_rows) == 4 and names <= {row.split()[1] for row in image_rows}
    for row in image_rows:  # PNG bytes, WebP / PNG, v2 / PNG, v2 / WebP: all positive numbers
        numbers = [float(x) for x in re.findall(r"\| ([0-9.]+) ", row)]
        assert len(numbers) == 4 and min(numbers) > 0
