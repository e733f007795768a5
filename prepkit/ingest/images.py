"""Open one source image and normalize it into the pixels prepkit stores.

Order of operations (the same for every worker, so output is deterministic):
1. open and check the header against the pixel limit (decompression bombs are refused
   before any pixel is decoded);
2. apply the EXIF orientation;
3. convert the mode: ``"rgb"`` (default) makes every input RGB uint8, like
   ``Image.convert("RGB")`` but with 16-bit inputs scaled rather than clipped; ``"keep"``
   keeps L, RGB and RGBA and converts anything else to RGB;
4. downscale so the longer side is at most ``max_side`` (aspect kept, Lanczos).

Masks (segmentation labels) are never converted to RGB: a palette image keeps its
indices, and they are resized with nearest-neighbour sampling.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps

from prepkit.errors import IngestError

DEFAULT_MAX_PIXELS = 1 << 28  # 268M pixels: a 16384 x 16384 image still opens
MODES = ("rgb", "keep")
_KEPT_MODES = ("L", "RGB", "RGBA")
_SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")


@dataclass(frozen=True)
class ImageOptions:
    """How source images are normalized (recorded in the store's provenance)."""

    mode: str = "rgb"
    max_side: int | None = None
    max_pixels: int = DEFAULT_MAX_PIXELS


def _open_without_pillow_limit(path: str) -> Image.Image:
    """Image.open without Pillow's own pixel limit: prepkit applies ``max_pixels`` itself
    (Pillow's limit is lower than prepkit's default and only warns below twice its value).
    Workers are processes, so changing the module-wide setting for this call is safe."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        previous = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = None
        try:
            return Image.open(path)
        finally:
            Image.MAX_IMAGE_PIXELS = previous


def _open_checked(path: str, max_pixels: int) -> Image.Image:
    try:
        image = _open_without_pillow_limit(path)
    except FileNotFoundError:
        raise IngestError(f"{path}: file not found") from None
    except PermissionError:
        raise IngestError(f"{path}: permission denied") from None
    except IsADirectoryError:
        raise IngestError(f"{path}: is a directory") from None
    except Image.UnidentifiedImageError:
        raise IngestError(_empty_or_unknown(path)) from None
    except OSError as error:
        raise IngestError(f"{path}: cannot open ({error.strerror or error})") from None
    width, height = image.size
    if width * height > max_pixels:
        image.close()
        raise IngestError(
            f"{path}: {width}x{height} = {width * height} pixels exceeds the limit of "
            f"{max_pixels} (possible decompression bomb; raise --max-pixels to allow it)"
        )
    if width < 1 or height < 1:
        image.close()
        raise IngestError(f"{path}: image has no pixels ({width}x{height})")
    return image


def _empty_or_unknown(path: str) -> str:
    try:
        import os

        if os.path.getsize(path) == 0:
            return f"{path}: file is empty (0 bytes)"
    except OSError:
        pass
    return f"{path}: not a recognized image format"


def _load_pixels(image: Image.Image, path: str) -> Image.Image:
    try:
        image.load()
        return ImageOps.exif_transpose(image)
    except Exception as error:  # Pillow raises many types for broken data; name the file
        reason = str(error) or type(error).__name__
        raise IngestError(f"{path}: cannot decode image ({reason})") from None


def _sixteen_bit_to_l(image: Image.Image) -> Image.Image:
    # Pillow's convert() clips 16-bit values at 255; scale to the 8-bit range instead.
    values = np.asarray(image).astype(np.int64)
    scaled = np.clip(values >> 8, 0, 255).astype(np.uint8)
    return Image.fromarray(scaled, mode="L")


def _convert_mode(image: Image.Image, mode: str) -> Image.Image:
    if image.mode in _SIXTEEN_BIT_MODES:
        image = _sixteen_bit_to_l(image)
    if mode == "keep":
        if image.mode in _KEPT_MODES:
            return image
        if image.mode in ("LA", "PA") or (image.mode == "P" and "transparency" in image.info):
            return image.convert("RGBA")
        return image.convert("RGB")
    if image.mode == "RGB":
        return image
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        # Composite on black explicitly, so transparent pixels do not keep hidden colours.
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (0, 0, 0, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def scaled_size(width: int, height: int, max_side: int | None) -> tuple[int, int]:
    """(width, height) after downscaling so the longer side is at most ``max_side``."""
    if max_side is None or max(width, height) <= max_side:
        return width, height
    scale = max_side / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def load_image(path: str, options: ImageOptions) -> np.ndarray:
    """Read ``path`` and return its normalized pixels as an H x W x C uint8 array."""
    image = _open_checked(path, options.max_pixels)
    with image:
        pixels = _load_pixels(image, path)
        pixels = _convert_mode(pixels, options.mode)
        width, height = scaled_size(pixels.width, pixels.height, options.max_side)
        if (width, height) != pixels.size:
            pixels = pixels.resize((width, height), Image.Resampling.LANCZOS)
        array = np.asarray(pixels, dtype=np.uint8)
    if array.ndim == 2:
        array = array[:, :, None]
    return np.ascontiguousarray(array)


def load_mask(path: str, options: ImageOptions) -> np.ndarray:
    """Read a segmentation mask as H x W x 1 uint8 class indices (never converted to RGB)."""
    image = _open_checked(path, options.max_pixels)
    with image:
        pixels = _load_pixels(image, path)
        if pixels.mode in _SIXTEEN_BIT_MODES:
            values = np.asarray(pixels)
            if values.max(initial=0) > 255:
                raise IngestError(f"{path}: mask has class indices above 255 (max {int(values.max())})")
            pixels = Image.fromarray(values.astype(np.uint8), mode="L")
        elif pixels.mode == "1":
            pixels = pixels.convert("L")
        elif pixels.mode not in ("L", "P"):
            raise IngestError(
                f"{path}: a mask must have one channel (palette, L or 16-bit); found mode {pixels.mode}"
            )
        width, height = scaled_size(pixels.width, pixels.height, options.max_side)
        if (width, height) != pixels.size:
            pixels = pixels.resize((width, height), Image.Resampling.NEAREST)
        # For palette images np.asarray gives the indices, which is what a label map holds.
        array = np.asarray(pixels, dtype=np.uint8)
    return np.ascontiguousarray(array[:, :, None])


def probe_size(path: str, options: ImageOptions) -> tuple[int, int, int] | None:
    """Cheap header read: (height, width, channels) the stored image will have, or None
    if the header cannot be read (the sample will then fail properly at encode time)."""
    try:
        image = _open_without_pillow_limit(path)
        with image:
            width, height = image.size
            orientation = image.getexif().get(0x0112, 1) if hasattr(image, "getexif") else 1
            mode = image.mode
            transparent = "transparency" in image.info
    except Exception:
        return None
    if orientation in (5, 6, 7, 8):
        width, height = height, width
    width, height = scaled_size(width, height, options.max_side)
    if options.mode == "rgb":
        channels = 3
    elif mode in ("L", *_SIXTEEN_BIT_MODES):
        channels = 1
    elif mode in ("RGBA", "LA", "PA") or (mode == "P" and transparent):
        channels = 4
    else:
        channels = 3
    return height, width, channels
