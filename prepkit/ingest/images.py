"""Open one source image and normalize it into the pixels prepkit stores.

Order of operations (the same for every worker, so output is deterministic):
1. open and check the header against the pixel limit (decompression bombs are refused
   before any pixel is decoded);
2. apply the EXIF orientation;
3. convert the mode: ``"rgb"`` (default) makes every input RGB uint8 exactly as Pillow's
   ``Image.convert("RGB")`` does (what torchvision's ImageFolder loader calls: an alpha
   channel is dropped, the colour channels kept), except that 16-bit inputs are scaled
   rather than clipped; ``alpha="composite"`` composites images with transparency onto
   ``background`` instead. ``"keep"`` keeps L, RGB and RGBA and converts anything else to
   RGB;
4. downscale so the longer side is at most ``max_side`` (aspect kept, Lanczos).

Sources are files (``load_image(path)``), encoded bytes (``load_image_bytes``: decoded
as a file with the same content would be) or pixels already decoded by the caller, a PIL
image or a numpy array (``load_pixels``: stored as given, no EXIF orientation applied,
since whoever decoded them already chose).

Masks (segmentation labels) are never converted to RGB: a palette image keeps its
indices, and they are resized with nearest-neighbour sampling.
"""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass
from typing import IO

import numpy as np
from PIL import Image, ImageOps

from prepkit.errors import IngestError

DEFAULT_MAX_PIXELS = 1 << 28  # 268M pixels: a 16384 x 16384 image still opens
MODES = ("rgb", "keep")
ALPHA_MODES = ("drop", "composite")
_KEPT_MODES = ("L", "RGB", "RGBA")
_SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")


@dataclass(frozen=True)
class ImageOptions:
    """How source images are normalized (recorded in the store's provenance)."""

    mode: str = "rgb"
    max_side: int | None = None
    max_pixels: int = DEFAULT_MAX_PIXELS
    # What becomes of transparency when an image is made RGB (mode "rgb"): "drop" keeps the
    # colour channels as Pillow's convert("RGB") and torchvision do; "composite" blends onto
    # ``background`` (R, G, B).
    alpha: str = "drop"
    background: tuple[int, int, int] = (0, 0, 0)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"image mode: Expected one of {', '.join(MODES)}. Got {self.mode!r}.")
        if self.alpha not in ALPHA_MODES:
            raise ValueError(f"alpha: Expected one of {', '.join(ALPHA_MODES)}. Got {self.alpha!r}.")
        background = tuple(self.background)
        if len(background) != 3 or not all(isinstance(v, int) and 0 <= v <= 255 for v in background):
            raise ValueError(f"background: Expected three integers in [0, 255] (R, G, B). Got {self.background!r}.")
        if self.alpha == "composite" and self.mode == "keep":
            raise ValueError("alpha: Expected 'drop' with mode 'keep' (it keeps the alpha channel). Got 'composite'.")
        object.__setattr__(self, "background", background)


def parse_background(text: str) -> tuple[int, int, int]:
    """``"255,255,255"`` (R,G,B) or ``"128"`` (gray) as an (R, G, B) tuple."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        values = []
    if len(values) == 1:
        values *= 3
    if len(values) != 3 or not all(0 <= v <= 255 for v in values):
        raise ValueError(f"background: Expected R,G,B or one gray level, integers in [0, 255]. Got {text!r}.")
    return values[0], values[1], values[2]


def _open_without_pillow_limit(path: str | IO[bytes]) -> Image.Image:
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


def _open_checked(path: str, max_pixels: int, data: bytes | None = None) -> Image.Image:
    """Open ``path``, or the encoded ``data`` (then ``path`` only names it in errors)."""
    try:
        image = _open_without_pillow_limit(path if data is None else io.BytesIO(data))
    except FileNotFoundError:
        raise IngestError(f"{path}: file not found") from None
    except PermissionError:
        raise IngestError(f"{path}: permission denied") from None
    except IsADirectoryError:
        raise IngestError(f"{path}: is a directory") from None
    except Image.UnidentifiedImageError:
        if data is not None:
            raise IngestError(f"{path}: " + ("encoded image is empty (0 bytes)" if not data else "not a recognized image format")) from None
        raise IngestError(_empty_or_unknown(path)) from None
    except OSError as error:
        raise IngestError(f"{path}: cannot open ({error.strerror or error})") from None
    try:
        check_size(image.size, max_pixels, path)
    except IngestError:
        image.close()
        raise
    return image


def check_size(size: tuple[int, int], max_pixels: int, where: str) -> None:
    """Refuse an image over the pixel limit (decompression bombs) or without pixels."""
    width, height = size
    if width * height > max_pixels:
        raise IngestError(
            f"{where}: {width}x{height} = {width * height} pixels exceeds the limit of "
            f"{max_pixels} (possible decompression bomb; raise --max-pixels to allow it)"
        )
    if width < 1 or height < 1:
        raise IngestError(f"{where}: image has no pixels ({width}x{height})")


def _empty_or_unknown(path: str) -> str:
    try:
        if os.path.getsize(path) == 0:
            return f"{path}: file is empty (0 bytes)"
    except OSError:
        pass
    return f"{path}: not a recognized image format"


def _load_pixels(image: Image.Image, path: str, orient: bool = True) -> Image.Image:
    try:
        image.load()
        return ImageOps.exif_transpose(image) if orient else image
    except Exception as error:  # Pillow raises many types for broken data; name the file
        reason = str(error) or type(error).__name__
        raise IngestError(f"{path}: cannot decode image ({reason})") from None


def _sixteen_bit_to_l(image: Image.Image) -> Image.Image:
    # Pillow's convert() clips 16-bit values at 255; scale to the 8-bit range instead.
    values = np.asarray(image).astype(np.int64)
    scaled = np.clip(values >> 8, 0, 255).astype(np.uint8)
    return Image.fromarray(scaled, mode="L")


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (image.mode == "P" and "transparency" in image.info)


def _convert_mode(image: Image.Image, options: ImageOptions) -> Image.Image:
    if image.mode in _SIXTEEN_BIT_MODES:
        image = _sixteen_bit_to_l(image)
    if options.mode == "keep":
        if image.mode in _KEPT_MODES:
            return image
        if _has_alpha(image):
            return image.convert("RGBA")
        return image.convert("RGB")
    if image.mode == "RGB":
        return image
    if options.alpha == "composite" and _has_alpha(image):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (*options.background, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    with warnings.catch_warnings():
        # Pillow warns that a palette with transparency bytes should become RGBA first;
        # dropping the transparency is exactly what convert("RGB") (and torchvision) does.
        warnings.simplefilter("ignore", UserWarning)
        return image.convert("RGB")


def scaled_size(width: int, height: int, max_side: int | None) -> tuple[int, int]:
    """(width, height) after downscaling so the longer side is at most ``max_side``."""
    if max_side is None or max(width, height) <= max_side:
        return width, height
    scale = max_side / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


def _normalized(pixels: Image.Image, options: ImageOptions) -> np.ndarray:
    pixels = _convert_mode(pixels, options)
    width, height = scaled_size(pixels.width, pixels.height, options.max_side)
    if (width, height) != pixels.size:
        pixels = pixels.resize((width, height), Image.Resampling.LANCZOS)
    array = np.asarray(pixels, dtype=np.uint8)
    if array.ndim == 2:
        array = array[:, :, None]
    return np.ascontiguousarray(array)


def load_image(path: str, options: ImageOptions) -> np.ndarray:
    """Read ``path`` and return its normalized pixels as an H x W x C uint8 array. A PNG that
    libspng decodes to exactly Pillow's pixels is read by libspng, in about half the time
    (``png_fast``, when ``pyspng`` is installed); everything else by Pillow."""
    pixels = _fast_png(path, None, options)
    if pixels is not None:
        return pixels
    image = _open_checked(path, options.max_pixels)
    with image:
        return _normalized(_load_pixels(image, path), options)


def _fast_png(path: str, data: bytes | None, options: ImageOptions, mask: bool = False) -> np.ndarray | None:
    """png_fast.read (read_mask for a mask) of the ``.png`` file ``path`` (or of ``data`` that
    starts as a PNG), or None where Pillow must read it (including a file that cannot be read:
    Pillow's path names the reason)."""
    from prepkit.ingest import png_fast

    if not png_fast.available():
        return None
    if data is None:
        if not path.lower().endswith(".png"):
            return None
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            return None
    elif not data.startswith(png_fast.SIGNATURE):
        return None
    return png_fast.read_mask(data, path, options) if mask else png_fast.read(data, path, options)


def load_image_bytes(data: bytes, where: str, options: ImageOptions) -> np.ndarray:
    """Decode an encoded image (PNG, JPEG, ...) exactly as a file holding ``data`` would be."""
    pixels = _fast_png(where, data, options)
    if pixels is not None:
        return pixels
    image = _open_checked(where, options.max_pixels, data)
    with image:
        return _normalized(_load_pixels(image, where), options)


def pil_from_array(array: np.ndarray, where: str) -> Image.Image:
    """An H x W or H x W x C (C in 1..4) uint8 array as the PIL image of the matching mode."""
    if array.dtype != np.uint8:
        raise IngestError(f"{where}: Expected a uint8 pixel array. Got dtype {array.dtype}.")
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (2, 3, 4)):
        raise IngestError(f"{where}: Expected an H x W or H x W x C array with C in 1, 2, 3, 4. Got shape {array.shape}.")
    mode = "L" if array.ndim == 2 else {2: "LA", 3: "RGB", 4: "RGBA"}[array.shape[2]]
    return Image.fromarray(np.ascontiguousarray(array), mode=mode)


def load_pixels(image: Image.Image | np.ndarray, where: str, options: ImageOptions) -> np.ndarray:
    """Normalize pixels the caller already decoded (a PIL image, or a uint8 array read as
    L/LA/RGB/RGBA by its channel count), as a file's pixels after decoding would be."""
    pixels = pil_from_array(image, where) if isinstance(image, np.ndarray) else image
    check_size(pixels.size, options.max_pixels, where)
    return _normalized(_load_pixels(pixels, where, orient=False), options)


def load_mask(path: str, options: ImageOptions, data: bytes | None = None) -> np.ndarray:
    """Read a segmentation mask as H x W x 1 uint8 class indices (never converted to RGB);
    from the encoded ``data`` when given (``path`` then only names it). An 8-bit grey PNG
    mask is read by libspng where installed (``png_fast.read_mask``)."""
    labels = _fast_png(path, data, options, mask=True)
    if labels is not None:
        return labels
    image = _open_checked(path, options.max_pixels, data)
    with image:
        return _mask_pixels(_load_pixels(image, path), path, options)


def load_mask_pixels(image: Image.Image | np.ndarray, where: str, options: ImageOptions) -> np.ndarray:
    """A mask the caller already decoded: a one-channel PIL image or an H x W (x 1) array."""
    if isinstance(image, np.ndarray):
        if image.ndim == 3 and image.shape[2] == 1:
            image = image[:, :, 0]
        if image.ndim != 2:
            raise IngestError(f"{where}: Expected a mask of shape H x W or H x W x 1. Got shape {image.shape}.")
        if image.dtype != np.uint8:
            if image.dtype.kind not in "iu" or image.size and (image.min() < 0 or image.max() > 255):
                raise IngestError(f"{where}: Expected mask class indices in [0, 255] (uint8). Got dtype {image.dtype}.")
            image = image.astype(np.uint8)
        image = Image.fromarray(np.ascontiguousarray(image), mode="L")
    check_size(image.size, options.max_pixels, where)
    return _mask_pixels(_load_pixels(image, where, orient=False), where, options)


def _mask_pixels(pixels: Image.Image, path: str, options: ImageOptions) -> np.ndarray:
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


def probe_size(path: str, options: ImageOptions, data: bytes | None = None) -> tuple[int, int, int] | None:
    """Cheap header read: (height, width, channels) the stored image will have, or None
    if the header cannot be read (the sample will then fail properly at encode time).
    Reads the encoded ``data`` instead of the file when given."""
    try:
        image = _open_without_pillow_limit(path if data is None else io.BytesIO(data))
        with image:
            if image.format == "PNG" and not _png_may_orient(path, data):
                orientation = 1  # (Pillow's getexif of a PNG decodes every pixel to look past them)
            else:
                orientation = image.getexif().get(0x0112, 1) if hasattr(image, "getexif") else 1
            return stored_shape(image, options, orient=orientation in (5, 6, 7, 8))
    except Exception:
        return None


def _png_may_orient(path: str, data: bytes | None) -> bool:
    """Whether a PNG has a chunk Pillow could take an EXIF orientation from, from its chunk
    headers alone (png_fast.scan); True where they do not parse."""
    from prepkit.ingest import png_fast

    if data is not None:
        found = png_fast.scan(io.BytesIO(data))
    else:
        with open(path, "rb") as handle:
            found = png_fast.scan(handle)
    return found is None or found.orientation_chunks


def stored_shape(image: Image.Image, options: ImageOptions, orient: bool = False) -> tuple[int, int, int]:
    """(height, width, channels) that normalizing ``image`` gives, from its header only;
    ``orient``: its EXIF orientation swaps width and height."""
    width, height = image.size
    if orient:
        width, height = height, width
    width, height = scaled_size(width, height, options.max_side)
    if options.mode == "rgb":
        channels = 3
    elif image.mode in ("L", *_SIXTEEN_BIT_MODES):
        channels = 1
    elif _has_alpha(image):
        channels = 4
    else:
        channels = 3
    return height, width, channels
