"""`prepkit bench-decode`: table, JSON records, chart, skipped formats."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from prepkit.cli import _register, cli
from tests.conftest import smooth_image, write_image

_register()

REQUIRED = {"format", "decoder", "device", "threads", "images_per_s", "decoded_mb_per_s", "size_ratio"}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for number in range(3):
        write_image(tmp_path / "imgs" / f"{number}.png", smooth_image(40, 56, seed=number))
    return tmp_path / "imgs"


def test_json_table_and_chart(folder: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, [
        "bench-decode", str(folder), "--repeat", "2", "--warmup", "0", "--threads", "2",
        "--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png"),
    ])
    assert result.exit_code == 0, result.output
    assert "png" in result.output and "prepkit-lossless" in result.output and "vs PNG" in result.output
    records = json.loads((tmp_path / "r.json").read_text())
    machine = [r for r in records if r["record"] == "machine"]
    assert len(machine) == 1 and machine[0]["cores"] >= 1 and machine[0]["cpu"] and "libraries" in machine[0]
    rows = [r for r in records if r["record"] == "result"]
    for row in rows:
        assert REQUIRED <= row.keys()
    measured = {(r["format"], r["decoder"], r["device"]): r for r in rows if not r["skipped"]}
    expected = [("png", "pillow", "cpu"), ("raw", "memcpy", "cpu"), ("prepkit-lossless", "numba", "cpu"),
                ("prepkit-lossless-v1", "numba", "cpu"), ("prepkit-lossless-fast", "numba", "cpu"),
                ("prepkit-lossless", "reader", "cpu"), ("webp-lossless-m6", "pillow", "cpu"),
                ("jpeg-q90", "pillow", "cpu")]
    if importlib.util.find_spec("pyspng"):
        expected.append(("png", "libspng", "cpu"))
    if importlib.util.find_spec("imagecodecs"):
        expected += [("jxl-lossless-e1", "imagecodecs", "cpu"), ("jxl-lossless-e7", "imagecodecs", "cpu"),
                     ("htj2k-lossless", "imagecodecs", "cpu")]
    for key in expected:
        assert key in measured, key
        assert measured[key]["images_per_s"] > 0 and measured[key]["threads"] == 2
    assert measured[("png", "pillow", "cpu")]["speedup_vs_png"] == pytest.approx(1.0)
    assert measured[("raw", "memcpy", "cpu")]["size_ratio"] == pytest.approx(1.0)
    assert 0 < measured[("prepkit-lossless", "numba", "cpu")]["size_ratio"] < 1
    # Sizes against PNG's: in total, and the worst image by its file name.
    png, ours = measured[("png", "pillow", "cpu")], measured[("prepkit-lossless", "numba", "cpu")]
    assert png["size_vs_png"] == pytest.approx(1.0) and png["worst_image_vs_png"] == pytest.approx(1.0)
    assert ours["size_vs_png"] == pytest.approx(ours["encoded_bytes"] / png["encoded_bytes"])
    ratios = [a / b for a, b in zip(ours["image_bytes"], png["image_bytes"], strict=True)]
    assert len(ratios) == 3 and ours["worst_image_vs_png"] == pytest.approx(max(ratios))
    assert ours["worst_image"] == f"{ratios.index(max(ratios))}.png"
    assert "worst image x PNG" in result.output and f"({ours['worst_image']})" in result.output
    cuda_rows = [r for r in rows if r["device"] == "cuda"]
    assert cuda_rows, "the cuda rows must be listed (measured, or skipped with a reason)"
    if not machine[0]["gpu"]:
        assert all(r["skipped"] for r in cuda_rows)
    with Image.open(tmp_path / "r.png") as chart:
        assert chart.format == "PNG" and chart.width > 400 and chart.height > 200


def test_missing_library_is_skipped_not_an_error(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "qoi", None)  # import qoi now raises ImportError
    result = CliRunner().invoke(cli, ["bench-decode", str(folder), "--repeat", "1", "--warmup", "0", "--device", "cpu", "--no-reader"])
    assert result.exit_code == 0, result.output
    assert "qoi" in result.output and "skipped: package 'qoi' not installed" in result.output


def test_new_lossless_rows_are_skipped_without_their_libraries(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "imagecodecs", None)
    monkeypatch.setitem(sys.modules, "pyspng", None)
    result = CliRunner().invoke(cli, ["bench-decode", str(folder), "--repeat", "1", "--warmup", "0", "--device", "cpu",
                                      "--no-reader"])
    assert result.exit_code == 0, result.output
    for name in ("jxl-lossless-e1", "jxl-lossless-e7", "htj2k-lossless"):
        assert f"{name:<23}imagecodecs  cpu     skipped: package 'imagecodecs' not installed" in result.output
    assert "libspng      cpu     skipped: package 'pyspng' not installed" in result.output
    assert "reader" not in result.output and "cuda" not in result.output


def test_store_input(folder: Path, tmp_path: Path) -> None:
    assert CliRunner().invoke(cli, ["shard", str(folder), str(tmp_path / "s"), "--layout", "raw", "--workers", "1"]).exit_code == 0
    result = CliRunner().invoke(cli, ["bench-decode", str(tmp_path / "s"), "--repeat", "1", "--warmup", "0", "--device", "cpu", "--limit", "2", "--no-reader"])
    assert result.exit_code == 0, result.output
    assert "2 images" in result.output
