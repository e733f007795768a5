"""The evaluation-set builder: five sets, the right kinds and dtypes, centre crops, screenshots
from the documentation packages."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from prepkit.bench import evalsets


def test_small_build_writes_five_sets_and_a_manifest(small_sets: Path) -> None:
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
    # No documentation package in a small build: the drawn terminal and UI panel stand in.
    assert sorted((e.kind, p.ndim) for e, p in sets["screenshots"]) == [("screenshot", 3), ("terminal", 3)]
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


def _png(path: Path, width: int, height: int) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (width, height), (200, 10, 10)).save(path)
    return str(path)


def test_screenshots_come_from_the_packages_files_large_enough_in_turn(tmp_path: Path) -> None:
    info = tmp_path / "dpkg"
    info.mkdir()
    docs = tmp_path / "docs"
    big_a = [_png(docs / "a" / f"shot{k}.png", 400, 300) for k in range(5)]
    icon = _png(docs / "a" / "icon.png", 64, 64)  # below MIN_SCREENSHOT_PIXELS
    stray = _png(docs / "a" / "stray.png", 400, 300)  # in the folder, not in the package's file list
    big_b = [_png(docs / "b" / f"win{k}.png", 500, 250) for k in range(2)]
    (info / "pkg-a.list").write_text("\n".join([str(docs / "a"), *big_a, icon]) + "\n")
    (info / "pkg-b:all.list").write_text("\n".join(big_b) + "\n")
    folders = {"pkg-a": (str(docs / "a"),), "pkg-b": (str(docs / "b"),), "pkg-c": (str(docs / "c"),)}
    found, missing = evalsets.screenshots(folders, str(info), limit=5)
    assert missing == ["pkg-c"]
    # Both of pkg-b's, and three of pkg-a's five, evenly spaced (first, middle, last), in turn.
    assert found == [(big_a[0], "pkg-a"), (big_b[0], "pkg-b"), (big_a[2], "pkg-a"), (big_b[1], "pkg-b"),
                     (big_a[4], "pkg-a")]
    assert all(path not in (icon, stray) for path, _ in found)
    assert evalsets.screenshots(folders, str(info), limit=2)[0] == [(big_a[0], "pkg-a"), (big_b[0], "pkg-b")]
    assert len(evalsets.screenshots(folders, str(info), limit=100)[0]) == 7


def test_the_screenshot_folders_name_the_makefiles_packages() -> None:
    makefile = (Path(__file__).parents[2] / "Makefile").read_text()
    line = next(text for text in makefile.splitlines() if text.startswith("SCREENSHOT_PACKAGES :="))
    assert line.split(":=")[1].split() == list(evalsets.SCREENSHOT_PACKAGES)


def _inv3(path: Path, volume: np.ndarray, masks: list[np.ndarray]) -> None:
    """A tiny InVesalius project as the CT package ships one: plists and raw arrays, tarred
    and gzipped, each mask one larger on every axis than the volume."""
    import io
    import plistlib
    import tarfile

    files = {"matrix.dat": volume.astype(np.int16).tobytes()}
    main = {"matrix": {"dtype": "int16", "filename": "matrix.dat", "shape": list(volume.shape)},
            "window_level": -18.0, "window_width": 406.0, "masks": {}}
    for k, mask in enumerate(masks):
        padded = np.full(tuple(n + 1 for n in mask.shape), 1, np.uint8)  # index 0: not a voxel
        padded[1:, 1:, 1:] = np.where(mask, 255, 0)
        files[f"mask_{k}.dat"] = padded.tobytes()
        files[f"mask_{k}.plist"] = plistlib.dumps({"mask_file": f"mask_{k}.dat", "mask_shape": list(padded.shape)})
        main["masks"][str(k)] = f"mask_{k}.plist"
    files["main.plist"] = plistlib.dumps(main)
    with tarfile.open(path, "w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(f"tmpabc/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def test_a_ct_study_gives_windowed_slices_and_nested_labels(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    volume = rng.integers(-1024, 3000, (20, 6, 5)).astype(np.int16)
    tissue = volume > -142
    bone = volume > 300
    _inv3(tmp_path / "c.inv3", volume, [bone, tissue])
    study = evalsets.read_invesalius(tmp_path / "c.inv3")
    np.testing.assert_array_equal(study.volume, volume)
    assert (study.window_level, study.window_width) == (-18.0, 406.0)
    assert len(study.masks) == 2
    np.testing.assert_array_equal(study.masks[0], bone)
    np.testing.assert_array_equal(study.masks[1], tissue)
    # Labels by decreasing extent: 1 soft tissue, 2 bone (the larger mask holds the smaller).
    np.testing.assert_array_equal(evalsets.ct_labels(study.masks), np.where(bone, 2, np.where(tissue, 1, 0)))
    assert evalsets.ct_slices(study, 4) == [2, 7, 12, 17]
    hu = np.array([-1024, -221, -18, 185, 3000])
    np.testing.assert_array_equal(evalsets.window(hu, -18.0, 406.0), [0, 0, 128, 255, 255])


def test_every_missing_package_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evalsets, "CT_STUDY", str(tmp_path / "no.inv3"))
    monkeypatch.setattr(evalsets, "wallpapers", lambda: ([], ["gnome-backgrounds", "ukui-wallpapers"]))
    monkeypatch.setattr(evalsets, "screenshots", lambda limit: ([], ["gimp-help-en"]))
    added: list[str] = []
    missing = evalsets.package_images(lambda *args: added.append(args[1]), dict.fromkeys(evalsets.SETS, 0), 40)
    assert added == []
    assert missing == [evalsets.CT_PACKAGE, "gnome-backgrounds", "ukui-wallpapers", "gimp-help-en"]


def test_package_images_adds_the_ct_slices_and_masks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    volume = np.random.default_rng(1).integers(-1024, 3000, (30, 6, 5)).astype(np.int16)
    _inv3(tmp_path / "c.inv3", volume, [volume > 300, volume > -142])
    monkeypatch.setattr(evalsets, "CT_STUDY", str(tmp_path / "c.inv3"))
    monkeypatch.setattr(evalsets, "wallpapers", lambda: ([], []))
    monkeypatch.setattr(evalsets, "screenshots", lambda limit: ([], []))
    added: list[tuple[str, str, str]] = []
    missing = evalsets.package_images(lambda set_name, name, pixels, source, kind: added.append((set_name, name, kind)),
                                      dict.fromkeys(evalsets.SETS, 0), 40)
    assert missing == []
    slices = evalsets.ct_slices(evalsets.read_invesalius(tmp_path / "c.inv3"))
    assert added == [entry for k in slices for entry in (("medical", f"ct-{k:03d}", "ct"),
                                                          ("masks", f"ct-{k:03d}", "mask-ct"))]
