"""Issue 7's bad-input matrix through `prepkit shard --on-error skip`: every file is either
stored correctly or reported with its path and reason, and every good file is stored."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import prepkit
from prepkit.cli import _register, cli
from tests.conftest import smooth_image, write_bomb_png, write_image

_register()


def build_matrix(root: Path, layout: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Returns (file name -> expected stored RGB pixels, file name -> expected reason)."""
    root.mkdir(parents=True)
    stored: dict[str, np.ndarray] = {}
    reported: dict[str, str] = {}
    base = smooth_image(24, 32)

    write_image(root / "good.png", base)
    stored["good.png"] = base

    png = write_image(root / "truncated.png", smooth_image(64, 64))
    png.write_bytes(png.read_bytes()[:200])
    reported["truncated.png"] = "cannot decode|truncated|Truncated"
    jpg = write_image(root / "truncated.jpg", smooth_image(64, 64), quality=90)
    jpg.write_bytes(jpg.read_bytes()[:300])
    reported["truncated.jpg"] = "cannot decode|truncated|Truncated"

    (root / "zero.png").write_bytes(b"")
    reported["zero.png"] = "empty"

    Image.fromarray(base).save(root / "really_a_png.jpg", format="PNG")  # wrong extension: content wins
    stored["really_a_png.jpg"] = base

    (root / "text.png").write_text("this is a text file, not an image\n")
    reported["text.png"] = "not a recognized image format"

    Image.fromarray(base).convert("CMYK").save(root / "cmyk.jpg", quality=100)
    with Image.open(root / "cmyk.jpg") as image:
        stored["cmyk.jpg"] = np.asarray(image.convert("RGB"))

    deep = (np.arange(24 * 32, dtype=np.uint16).reshape(24, 32) * 85).astype(np.uint16)
    Image.fromarray(deep).save(root / "sixteen.png")
    stored["sixteen.png"] = np.repeat((deep >> 8).astype(np.uint8)[:, :, None], 3, axis=2)

    palette = Image.fromarray(base).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    palette.info["transparency"] = 0
    palette.save(root / "palette_transparent.png", transparency=0)
    with Image.open(root / "palette_transparent.png") as image:  # transparency dropped, as torchvision's loader
        stored["palette_transparent.png"] = np.asarray(image.convert("RGB"))

    rotated = Image.fromarray(base)
    exif = rotated.getexif()
    exif[0x0112] = 8  # rotate 90 degrees counter-clockwise to display
    rotated.save(root / "exif_rotated.png", exif=exif.tobytes())
    stored["exif_rotated.png"] = np.rot90(base, k=1)

    one = np.array([[[10, 200, 30]]], dtype=np.uint8)
    write_image(root / "one_pixel.png", one)
    stored["one_pixel.png"] = one

    write_bomb_png(root / "bomb.png")
    reported["bomb.png"] = "decompression bomb"

    write_image(root / "no_permission.png", base)
    reported["no_permission.png"] = "permission denied"

    (root / "loop.png").symlink_to(root / "loop.png")
    reported["loop.png"] = "cannot open"

    # 2x70000: raw stores it; JPEG (65,500) and the lossless codec (65,535) cannot.
    wide = np.zeros((2, 70000, 3), np.uint8)
    wide[:, ::7] = 255
    write_image(root / "wide.png", wide)
    if layout == "raw":
        stored["wide.png"] = wide
    else:
        reported["wide.png"] = "cannot be stored as " + layout

    latin = os.fsdecode(b"caf\xe9.png")
    write_image(root / latin, base)
    stored[latin] = base
    return stored, reported


@pytest.mark.parametrize("layout", ["raw", "jpeg", "lossless"])
def test_every_file_is_stored_or_reported(layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stored, reported = build_matrix(tmp_path / "src", layout)
    unreadable = str(tmp_path / "src" / "no_permission.png")
    if os.geteuid() == 0:
        # root reads any file whatever its mode, so make the open itself fail the way a
        # file without read permission fails for everybody else.
        import builtins

        real_open = builtins.open

        def guarded_open(file, *args, **kwargs):  # type: ignore[no-untyped-def]
            if os.fspath(file) == unreadable:
                raise PermissionError(13, "Permission denied", unreadable)
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr(builtins, "open", guarded_open)
    else:
        os.chmod(unreadable, 0)
    result = CliRunner().invoke(cli, ["shard", str(tmp_path / "src"), str(tmp_path / "s"), "--layout", layout,
                                      "--on-error", "skip", "--workers", "1", "--samples-per-shard", "4"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    store = prepkit.open_store(tmp_path / "s")
    names = {os.fsdecode(os.fsencode(store.source_path(i))): i for i in range(len(store))}
    assert set(names) == set(stored), (sorted(names), sorted(stored))
    for name, expected in stored.items():
        got = store[names[name]]["image"]
        if layout == "jpeg":  # lossy: the same image, within JPEG q90's error
            assert got.shape == expected.shape, name
            assert np.abs(got.astype(int) - expected).mean() < 6, name
        else:
            np.testing.assert_array_equal(got, expected, err_msg=name)
    report = [json.loads(line) for line in (tmp_path / "s" / "skipped.jsonl").read_text().splitlines()]
    reasons = {Path(entry["path"]).name: entry["reason"] for entry in report}
    assert set(reasons) == set(reported)
    for name, reason in reported.items():
        assert re.search(reason, reasons[name]), (name, reasons[name])
