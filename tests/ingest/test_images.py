"""Source image normalization: modes, EXIF orientation, downscaling, masks, bad files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from prepkit.errors import IngestError
from prepkit.ingest.images import (
    ImageOptions,
    load_image,
    load_image_bytes,
    load_mask,
    load_pixels,
    parse_background,
    probe_size,
    scaled_size,
)
from tests.conftest import smooth_image, write_bomb_png, write_image


def test_modes_become_rgb(tmp_path: Path) -> None:
    rgb = smooth_image(6, 5)
    gray = Image.fromarray(rgb[:, :, 0], "L")
    cases = {
        "gray.png": gray,
        "cmyk.jpg": Image.fromarray(rgb).convert("CMYK"),
        "palette.png": Image.fromarray(rgb).convert("P"),
        "rgba.png": Image.fromarray(np.dstack([rgb, np.full(rgb.shape[:2], 255, np.uint8)]), "RGBA"),
    }
    for name, image in cases.items():
        image.save(tmp_path / name)
        pixels = load_image(str(tmp_path / name), ImageOptions())
        assert pixels.shape == (6, 5, 3) and pixels.dtype == np.uint8, name
    np.testing.assert_array_equal(load_image(str(tmp_path / "gray.png"), ImageOptions())[:, :, 1], rgb[:, :, 0])
    np.testing.assert_array_equal(load_image(str(tmp_path / "rgba.png"), ImageOptions()), rgb)


def _transparent_sources() -> dict[str, Image.Image]:
    """Every kind of source with transparency: RGBA, LA, PA, and palettes with a transparent
    index or per-entry transparency bytes; hidden colours under transparent pixels."""
    rgb = smooth_image(6, 5, seed=3)
    alpha = np.arange(30, dtype=np.uint8).reshape(6, 5) * 8
    palette = Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE, colors=8)
    palette_bytes = palette.copy()
    palette_bytes.info["transparency"] = bytes([0, 64, 128, 255, 30, 0, 200, 90])
    pa = palette.convert("PA")
    pa.putalpha(Image.fromarray(alpha))
    return {
        "rgba.png": Image.fromarray(np.dstack([rgb, alpha]), "RGBA"),
        "la.png": Image.fromarray(np.dstack([rgb[:, :, 0], alpha]), "LA"),
        "palette_index.png": palette,
        "palette_bytes.png": palette_bytes,
        "pa": pa,
    }


@pytest.mark.filterwarnings("ignore:Palette images with Transparency")
def test_alpha_is_dropped_as_pillow_convert_rgb_does(tmp_path: Path) -> None:
    sources = _transparent_sources()
    sources["palette_index.png"].info["transparency"] = 2
    for name, image in sources.items():
        expected = np.asarray(image.convert("RGB"))
        assert load_pixels(image, name, ImageOptions()).tolist() == expected.tolist(), name
        if name.endswith(".png"):
            save = {"transparency": image.info["transparency"]} if "transparency" in image.info else {}
            image.save(tmp_path / name, **save)
            with Image.open(tmp_path / name) as reopened:
                assert reopened.mode == image.mode, name
                from_file = np.asarray(reopened.convert("RGB"))
            np.testing.assert_array_equal(load_image(str(tmp_path / name), ImageOptions()), from_file, err_msg=name)
            data = (tmp_path / name).read_bytes()
            np.testing.assert_array_equal(load_image_bytes(data, name, ImageOptions()), from_file, err_msg=name)


def test_alpha_composite_onto_chosen_background() -> None:
    rgba = np.zeros((2, 2, 4), np.uint8)
    rgba[..., :3] = 200
    rgba[0, 0, 3] = 0
    rgba[0, 1, 3] = 128
    rgba[1, 1, 3] = 255
    image = Image.fromarray(rgba, "RGBA")
    white = load_pixels(image, "a", ImageOptions(alpha="composite", background=(255, 255, 255)))
    expected = Image.alpha_composite(Image.new("RGBA", (2, 2), (255, 255, 255, 255)), image).convert("RGB")
    np.testing.assert_array_equal(white, np.asarray(expected))
    assert white[0, 0].tolist() == [255, 255, 255] and white[1, 1].tolist() == [200, 200, 200]
    black = load_pixels(image, "a", ImageOptions(alpha="composite"))
    assert black[0, 0].tolist() == [0, 0, 0]
    assert load_pixels(image, "a", ImageOptions())[0, 0].tolist() == [200, 200, 200]  # the default drops alpha
    assert load_pixels(image, "a", ImageOptions(mode="keep")).shape == (2, 2, 4)


def test_alpha_options_are_checked() -> None:
    with pytest.raises(ValueError, match="alpha"):
        ImageOptions(alpha="blend")
    with pytest.raises(ValueError, match="background"):
        ImageOptions(alpha="composite", background=(0, 0, 256))
    with pytest.raises(ValueError, match="mode 'keep'"):
        ImageOptions(mode="keep", alpha="composite")
    assert parse_background("255,128,0") == (255, 128, 0) and parse_background("7") == (7, 7, 7)
    with pytest.raises(ValueError, match="R,G,B"):
        parse_background("1,2")


def test_sixteen_bit_is_scaled_not_clipped(tmp_path: Path) -> None:
    values = np.array([[0, 256, 65535], [1000, 32768, 40000]], dtype=np.uint16)
    Image.fromarray(values).save(tmp_path / "deep.png")
    pixels = load_image(str(tmp_path / "deep.png"), ImageOptions())
    np.testing.assert_array_equal(pixels[:, :, 0], values >> 8)
    assert load_image(str(tmp_path / "deep.png"), ImageOptions(mode="keep")).shape == (2, 3, 1)


def test_keep_mode_keeps_gray(tmp_path: Path) -> None:
    write_image(tmp_path / "g.png", smooth_image(4, 7, channels=1))
    assert load_image(str(tmp_path / "g.png"), ImageOptions(mode="keep")).shape == (4, 7, 1)


def test_exif_orientation_is_applied(tmp_path: Path) -> None:
    pixels = smooth_image(10, 20)
    image = Image.fromarray(pixels)
    exif = image.getexif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    image.save(tmp_path / "rotated.jpg", exif=exif.tobytes(), quality=95)
    loaded = load_image(str(tmp_path / "rotated.jpg"), ImageOptions())
    assert loaded.shape == (20, 10, 3)
    assert probe_size(str(tmp_path / "rotated.jpg"), ImageOptions()) == (20, 10, 3)


def test_max_side_keeps_aspect(tmp_path: Path) -> None:
    write_image(tmp_path / "wide.png", smooth_image(50, 200))
    assert load_image(str(tmp_path / "wide.png"), ImageOptions(max_side=100)).shape == (25, 100, 3)
    assert load_image(str(tmp_path / "wide.png"), ImageOptions(max_side=400)).shape == (50, 200, 3)
    assert scaled_size(3, 1000, 10) == (1, 10)


def test_mask_keeps_palette_indices(tmp_path: Path) -> None:
    indices = (np.arange(48).reshape(6, 8) % 19).astype(np.uint8)
    mask = Image.fromarray(indices, "P")
    mask.putpalette(list(np.random.default_rng(0).integers(0, 256, 768)))
    mask.save(tmp_path / "mask.png")
    loaded = load_mask(str(tmp_path / "mask.png"), ImageOptions())
    np.testing.assert_array_equal(loaded[:, :, 0], indices)
    Image.fromarray(smooth_image(6, 8)).save(tmp_path / "rgb_mask.png")
    with pytest.raises(IngestError, match="one channel"):
        load_mask(str(tmp_path / "rgb_mask.png"), ImageOptions())


@pytest.mark.parametrize(
    "name, content, reason",
    [
        ("empty.png", b"", "empty"),
        ("text.jpg", b"hello, I am not an image\n" * 4, "not a recognized image"),
    ],
)
def test_bad_files_name_the_file(tmp_path: Path, name: str, content: bytes, reason: str) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(IngestError, match=reason) as info:
        load_image(str(tmp_path / name), ImageOptions())
    assert str(tmp_path / name) in str(info.value)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_truncated_files_are_reported(tmp_path: Path, fmt: str) -> None:
    path = write_image(tmp_path / f"t.{fmt.lower()}", smooth_image(64, 64), format=fmt)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(IngestError, match="cannot decode|truncated") as info:
        load_image(str(path), ImageOptions())
    assert str(path) in str(info.value)


def test_decompression_bomb_is_refused_before_decoding(tmp_path: Path) -> None:
    write_bomb_png(tmp_path / "bomb.png")  # a few hundred KB on disk
    assert (tmp_path / "bomb.png").stat().st_size < 2_000_000
    with pytest.raises(IngestError, match="decompression bomb"):
        load_image(str(tmp_path / "bomb.png"), ImageOptions())


def test_missing_and_looping_files(tmp_path: Path) -> None:
    (tmp_path / "loop.png").symlink_to(tmp_path / "loop.png")
    with pytest.raises(IngestError, match=str(tmp_path / "loop.png")):
        load_image(str(tmp_path / "loop.png"), ImageOptions())
    with pytest.raises(IngestError, match="not found"):
        load_image(str(tmp_path / "gone.png"), ImageOptions())
