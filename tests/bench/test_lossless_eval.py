"""lossless_eval: a row per installed library with pixel checks, skipped rows, ratios."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from prepkit.bench import decode as bench_decode
from prepkit.bench import lossless_eval
from tests.conftest import smooth_image


def installed_rows() -> set[tuple[str, str]]:
    """The (format, decoder) rows that must be measured with the libraries installed here."""
    rows = {("png", "pillow"), ("webp-lossless-m6", "pillow"), ("prepkit-lossless", "numba")}
    if importlib.util.find_spec("pyspng"):
        rows.add(("png", "libspng"))
    if importlib.util.find_spec("imagecodecs"):
        import imagecodecs

        if imagecodecs.JPEGXL.available:
            rows |= {("jxl-lossless-e1", "imagecodecs"), ("jxl-lossless-e7", "imagecodecs")}
        if imagecodecs.HTJ2K.available:
            rows.add(("htj2k-lossless", "imagecodecs"))
    return rows


def test_rows_for_every_installed_library_with_equal_pixels(small_sets: Path, tmp_path: Path) -> None:
    code = lossless_eval.main([str(small_sets), "--sets", "photos", "masks", "--limit", "1", "--repeat", "1",
                               "--warmup", "0", "--threads", "1", "2", "--json", str(tmp_path / "r.json"),
                               "--markdown", str(tmp_path / "r.md"), "--plot", str(tmp_path / "r.png")])
    assert code == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["machine"]["cores"] >= 1 and report["threads"] == [1, 2]
    rows = report["rows"]
    assert {r["set"] for r in rows} == {"photos", "masks"} and {r["images"] for r in rows} == {1}
    for set_name in ("photos", "masks"):
        measured = {(r["format"], r["decoder"]): r for r in rows if r["set"] == set_name and not r["skipped"]}
        assert installed_rows() <= measured.keys(), set_name
        for key, row in measured.items():
            assert row["pixels_equal"] is True, (set_name, key, row["mismatch"])
            assert row["encoded_bytes"] > 0 and row["size_vs_png"] > 0 and row["encode_s"] > 0
            assert set(row["images_per_s"]) == {"1", "2"} and min(row["images_per_s"].values()) > 0
        png = measured[("png", "pillow")]
        assert png["size_vs_png"] == pytest.approx(1.0) and png["vs_pillow_png"]["1"] == pytest.approx(1.0)
        ours = measured[("prepkit-lossless", "numba")]
        # One image: its own ratio is the median and the worst, and the total's ratio.
        assert len(ours["image_bytes"]) == 1 and sum(ours["image_bytes"]) == ours["encoded_bytes"]
        assert ours["median_image_vs_png"] == ours["worst_image_vs_png"] == pytest.approx(ours["size_vs_png"])
        webp = measured[("webp-lossless-m6", "pillow")]
        assert ours["worst_image_vs_webp"] == pytest.approx(ours["encoded_bytes"] / webp["encoded_bytes"])
        assert ours["worst_image_png"] == 0 and report["names"][set_name] == [ours_name(small_sets, set_name)]
        if ("png", "libspng") in measured:
            assert measured[("png", "libspng")]["encoded_bytes"] == png["encoded_bytes"]  # the same PNG files
            assert measured[("prepkit-lossless", "numba")]["vs_libspng"]["2"] > 0
    markdown = (tmp_path / "r.md").read_text()
    assert "### photos" in markdown and "x libspng 2T" in markdown and "prepkit-lossless" in markdown
    assert "per image x WebP-m6: median, worst" in markdown
    assert f"({ours_name(small_sets, 'masks')})" in markdown  # the worst image by name
    from PIL import Image

    with Image.open(tmp_path / "r.png") as chart:  # two panels, photos and masks
        assert chart.format == "PNG" and chart.width > 800 and chart.height > 600


def ours_name(folder: Path, set_name: str) -> str:
    """The name lossless_eval gives the first image of a set (--limit 1)."""
    first = next(entry for entry, _ in lossless_eval.load_manifest(folder)[set_name])
    return Path(first.file).stem.split("-", 1)[1]


def test_per_image_ratios_name_the_worst_image() -> None:
    assert bench_decode.per_image([50, 300, 90], [100, 200, 100]) == (pytest.approx(0.9), pytest.approx(1.5), 1)
    assert bench_decode.per_image([50, 300], [100, 200, 100]) == (None, None, None)  # not image for image
    assert bench_decode.per_image([], []) == (None, None, None)
    row = lossless_eval.Row("s", "f", "d", 3, 0, median_image_vs_png=0.9, worst_image_vs_png=1.5, worst_image_png=1)
    table = lossless_eval.format_markdown([row], [1], {"s": ["a", "b-long", "c"]})
    assert "| 0.900, 1.500 (b-long) |" in table
    assert "| 0.900, 1.500 (image 1) |" in lossless_eval.format_markdown([row], [1])


def test_a_missing_library_is_a_skipped_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "imagecodecs", None)  # import now raises ImportError
    monkeypatch.setitem(sys.modules, "pyspng", None)
    rows = lossless_eval.evaluate({"tiny": [smooth_image(24, 40, seed=1)]}, threads=[1], repeat=1, warmup=0)
    by_key = {(r.format, r.decoder): r for r in rows}
    for key in [("png", "libspng"), ("jxl-lossless-e1", "imagecodecs"), ("jxl-lossless-e7", "imagecodecs"),
                ("htj2k-lossless", "imagecodecs")]:
        assert by_key[key].skipped and "not installed" in by_key[key].skipped, key
        assert not by_key[key].images_per_s
    for key in [("png", "pillow"), ("prepkit-lossless", "numba")]:
        assert by_key[key].skipped is None and by_key[key].pixels_equal and by_key[key].images_per_s[1] > 0
    assert by_key[("prepkit-lossless", "numba")].vs_libspng == {}  # nothing to compare with
    assert "skipped: htj2k-lossless / imagecodecs: package 'imagecodecs' not installed" in (
        lossless_eval.format_markdown(rows, [1]))


def test_pixel_check_catches_a_changed_value_and_accepts_grey_as_rgb() -> None:
    source = smooth_image(8, 8, channels=1)
    assert lossless_eval.check_pixels([source.copy()], [source]) is None
    assert lossless_eval.check_pixels([source[:, :, 0]], [source]) is None  # HxW for HxWx1
    assert lossless_eval.check_pixels([np.repeat(source, 3, axis=2)], [source]) is None  # WebP's grey
    changed = source.copy()
    changed[3, 4, 0] ^= 1
    assert "1 differing values" in str(lossless_eval.check_pixels([changed], [source]))
    tinted = np.repeat(source, 3, axis=2)
    tinted[0, 0, 2] ^= 1
    assert "differing" in str(lossless_eval.check_pixels([tinted], [source]))
    assert "Expected uint8 (8, 8, 1)" in str(lossless_eval.check_pixels([source[:4]], [source]))
