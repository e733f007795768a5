"""The evaluation-set builder: four sets, the right kinds and dtypes, centre crops."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from prepkit.bench import evalsets


def test_small_build_writes_four_sets_and_a_manifest(small_sets: Path) -> None:
    manifest = json.loads((small_sets / "manifest.json").read_text())
    files = manifest["files"]
    assert {f["set"] for f in files} == set(evalsets.SETS)
    assert manifest["small"] is True and manifest["missing_packages"] == []  # small never looks at wallpapers
    for record in files:
        assert set(record) == {"set", "file", "source", "kind", "height", "width", "channels"}
        with Image.open(small_sets / record["file"]) as image:
            assert image.format == "PNG"
            pixels = np.asarray(image)
        assert pixels.dtype == np.uint8
        assert pixels.shape[:2] == (record["height"], record["width"])
        assert max(pixels.shape[:2]) <= evalsets.SMALL_SIDE
        assert (1 if pixels.ndim == 2 else pixels.shape[2]) == record["channels"]
        assert record["source"].startswith(("scikit-image", "rendered"))


def test_each_set_holds_its_kind_of_image(small_sets: Path) -> None:
    sets = evalsets.load_manifest(small_sets)
    assert all(e.kind == "photo" and p.ndim == 3 for e, p in sets["photos"])
    assert {e.channels for e, _ in sets["medical"]} == {1, 3}
    # Medical images have dark surroundings: some pixels are (near) black in each.
    assert all(int(p.min()) <= 16 for _, p in sets["medical"])
    assert {"terminal", "screenshot"} <= {e.kind for e, _ in sets["rendered"]}
    for entry, mask in sets["masks"]:
        assert mask.ndim == 2 and mask.dtype == np.uint8, entry.file
        assert 2 <= len(np.unique(mask)) <= evalsets.MAX_LABELS and int(mask.max()) < evalsets.MAX_LABELS


def test_crop_centre_keeps_native_pixels() -> None:
    image = np.arange(300 * 200 * 3, dtype=np.uint32).reshape(300, 200, 3).astype(np.uint8)
    cropped = evalsets.crop_centre(image, 128)
    assert cropped.shape == (128, 128, 3)
    np.testing.assert_array_equal(cropped, image[86:214, 36:164])
    assert evalsets.crop_centre(image, 400) is not image and evalsets.crop_centre(image, 400).shape == image.shape


def test_masks_are_relabelled_to_at_most_twenty_classes() -> None:
    photo = np.random.default_rng(0).integers(0, 256, (64, 96, 3), dtype=np.uint8)
    for mask in (evalsets.felzenszwalb_mask(photo), evalsets.slic_mask(photo), evalsets.polygon_mask(96, 64, 1)):
        assert mask.shape == (64, 96) and mask.dtype == np.uint8
        assert int(mask.max()) < evalsets.MAX_LABELS


def test_photographic_wallpapers_are_named_by_stem_or_theme() -> None:
    # The classifier keys on file stems (Ubuntu) and theme folders (Plasma), not on paths.
    assert "Kite" in evalsets.PHOTOGRAPHIC_WALLPAPERS and "Altai" not in evalsets.PHOTOGRAPHIC_WALLPAPERS
    assert all("/" not in name and "." not in name for name in evalsets.PHOTOGRAPHIC_WALLPAPERS)


def test_missing_manifest_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="Expected an evaluation-set folder with manifest.json"):
        evalsets.load_manifest(tmp_path)
