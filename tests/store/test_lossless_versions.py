"""Stores record the lossless bitstream version; `convert` upgrades a v1 store to v2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import prepkit
from prepkit.ingest import build
from prepkit.ingest.build import build_store
from prepkit.ingest.images import ImageOptions
from prepkit.layouts import LosslessLayout, layout_from_dict, make_layout
from prepkit.store.convert import convert_store


def _manifest(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    rows = []
    for i in range(3):
        yy, xx = np.mgrid[0:45, 0:70]
        image = np.stack([(yy * 3 + xx + 40 * k) % 256 for k in range(3)], 2) + rng.integers(0, 9, (45, 70, 3))
        mask = ((yy // 15 + xx // 30 + i) % 3).astype(np.uint8)
        Image.fromarray(image.astype(np.uint8)).save(folder / f"{i}.png")
        Image.fromarray(mask).save(folder / f"{i}_mask.png")
        rows.append({"path": f"{i}.png", "label": i, "mask": f"{i}_mask.png"})
    (folder / "m.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return folder / "m.jsonl"


def test_layout_records_version_and_old_stores_read_as_v1() -> None:
    assert make_layout("lossless") == LosslessLayout(64, 2)  # images: v2 by default
    assert make_layout("lossless", lossless_version=1) == LosslessLayout(64, 1)
    assert LosslessLayout().to_dict() == {"name": "lossless", "tile": 64, "version": 2}
    assert build.mask_layout() == LosslessLayout(64, 2)  # masks: v2
    assert layout_from_dict({"name": "lossless", "tile": 32}) == LosslessLayout(32, 1)
    with pytest.raises(ValueError, match="version"):
        LosslessLayout(version=5)


def test_convert_upgrades_a_v1_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _manifest(tmp_path)
    monkeypatch.setattr(build, "mask_layout", lambda: LosslessLayout(version=1))
    build_store(str(source), str(tmp_path / "v1"), layout=LosslessLayout(version=1), options=ImageOptions(),
                samples_per_shard=2, workers=1)
    monkeypatch.undo()
    convert_store(str(tmp_path / "v1"), str(tmp_path / "v2"), layout=make_layout("lossless"),
                  samples_per_shard=None, workers=1, overwrite=False)
    with prepkit.open_store(tmp_path / "v1") as old, prepkit.open_store(tmp_path / "v2") as new:
        for name in ("image", "mask"):
            assert old.field_arrays[name].layout == LosslessLayout(64, 1)
            assert new.field_arrays[name].layout == LosslessLayout(64, 2)
        attrs = json.loads((tmp_path / "v2" / "zarr.json").read_text())["attributes"]["prepkit"]
        assert {f["layout"]["version"] for f in attrs["fields"].values()} == {2}
        for i in range(len(old)):
            for name in ("image", "mask"):
                assert bytes(old.read_bytes(i, name))[4] == 1
                assert bytes(new.read_bytes(i, name))[4] == 2
                np.testing.assert_array_equal(new[i][name], old[i][name])
