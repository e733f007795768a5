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
    fast = LosslessLayout(fast_decode=True)
    assert fast.to_dict() == {"name": "lossless", "tile": 64, "version": 2, "fast_decode": True}
    assert layout_from_dict(fast.to_dict()) == fast and make_layout("lossless", lossless_fast_decode=True) == fast
    assert build.mask_layout(True) == fast
    with pytest.raises(ValueError, match="fast_decode"):
        LosslessLayout(fast_decode="yes")  # type: ignore[arg-type]
    assert build.mask_layout() == LosslessLayout(64, 2)  # masks: v2
    assert layout_from_dict({"name": "lossless", "tile": 32}) == LosslessLayout(32, 1)
    with pytest.raises(ValueError, match="version"):
        LosslessLayout(version=5)


def test_convert_upgrades_a_v1_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _manifest(tmp_path)
    monkeypatch.setattr(build, "mask_layout", lambda fast_decode=False: LosslessLayout(version=1))
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


def _med_planes(stream: bytes) -> int:
    from prepkit.lossless import format_v2 as f2

    s = f2.read_stream(np.frombuffer(stream, np.uint8))
    return int(((s.ch_mode == f2.CH_RANS) & (s.predictor == f2.PRED_MED)).sum())


def test_fast_decode_from_the_cli_and_through_convert(tmp_path: Path) -> None:
    """`prepkit shard --lossless-fast-decode` writes images and masks without MED planes and
    records fast_decode; `convert` back to the default layout brings MED back, pixels equal."""
    from click.testing import CliRunner

    from prepkit.cli import _register, cli

    _register()

    source = _manifest(tmp_path)
    result = CliRunner().invoke(cli, ["shard", str(source), str(tmp_path / "fast"), "--layout", "lossless",
                                       "--lossless-fast-decode", "--workers", "1", "--samples-per-shard", "2"])
    assert result.exit_code == 0, result.output
    convert_store(str(tmp_path / "fast"), str(tmp_path / "small"), layout=make_layout("lossless"),
                  samples_per_shard=None, workers=1, overwrite=False)
    with prepkit.open_store(tmp_path / "fast") as fast, prepkit.open_store(tmp_path / "small") as small:
        for name in ("image", "mask"):
            assert fast.field_arrays[name].layout == LosslessLayout(64, 2, fast_decode=True)
            assert small.field_arrays[name].layout == LosslessLayout(64, 2)
        assert sum(_med_planes(bytes(fast.read_bytes(i, n))) for i in range(len(fast)) for n in ("image", "mask")) == 0
        assert sum(_med_planes(bytes(small.read_bytes(i, "image"))) for i in range(len(small))) > 0
        for i in range(len(fast)):
            for name in ("image", "mask"):
                np.testing.assert_array_equal(small[i][name], fast[i][name])
