"""Storage layouts: how one sample's pixels become stored bytes, and back.

A layout is a small frozen dataclass with validated fields and a dict round trip (the
dict goes into the store's attributes), in the style of zarr-python's codecs:

- ``raw``: the H x W x C uint8 pixels, C-order, as they are;
- ``jpeg``: a baseline JPEG written by Pillow at ``quality``;
- ``lossless``: prepkit's tiled lossless codec (:mod:`prepkit.lossless`).

``max_stored_size`` is a guaranteed upper bound on the stored size of an image of a
given shape; the store writer sizes its shards with it before encoding anything.
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from prepkit.errors import CodecError

LAYOUT_NAMES = ("raw", "jpeg", "lossless")


class Layout(Protocol):
    name: ClassVar[str]
    crops: ClassVar[bool]  # whether decode_batch can decode just a region of each sample

    def decode_batch(self, request: Any) -> Any:
        """Decode a batch (a prepkit.decode.engine.DecodeRequest) into PackedImages, on the
        request's device; raises CodecError or DecodeError naming the sample."""
        ...

    def encode(self, pixels: np.ndarray) -> bytes: ...

    def decode(self, data: bytes | memoryview | np.ndarray, shape: tuple[int, int, int]) -> np.ndarray: ...

    def max_stored_size(self, height: int, width: int, channels: int) -> int: ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class RawLayout:
    """Uncompressed pixels: the fastest to read, the largest on disk."""

    name: ClassVar[str] = "raw"
    crops: ClassVar[bool] = False

    def decode_batch(self, request: Any) -> Any:
        """The batch's stored bytes are its packed pixels (checked against the shapes)."""
        from prepkit.decode import engine

        return engine.decode_raw(request)

    def encode(self, pixels: np.ndarray) -> bytes:
        return np.ascontiguousarray(pixels, dtype=np.uint8).tobytes()

    def decode(self, data: bytes | memoryview | np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
        flat = np.frombuffer(data, dtype=np.uint8)
        expected = shape[0] * shape[1] * shape[2]
        if flat.size != expected:
            raise CodecError(f"raw sample: Expected {expected} bytes for shape {shape}. Got {flat.size}.")
        return flat.reshape(shape).copy()

    def max_stored_size(self, height: int, width: int, channels: int) -> int:
        return height * width * channels

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name}


JPEG_MAX_SIDE = 65500  # libjpeg's JPEG_MAX_DIMENSION


@dataclass(frozen=True)
class JpegLayout:
    """Baseline JPEG via Pillow (decoded by nvImageCodec on the GPU)."""

    name: ClassVar[str] = "jpeg"
    crops: ClassVar[bool] = False

    def decode_batch(self, request: Any) -> Any:
        """nvImageCodec on cuda; its CPU backend or Pillow on the host, in a thread pool."""
        from prepkit.decode import engine

        return engine.decode_jpeg(request)
    quality: int = 90
    subsampling: str = "4:2:0"

    def __post_init__(self) -> None:
        if not isinstance(self.quality, int) or not 1 <= self.quality <= 100:
            raise ValueError(f"Expected JPEG quality to be between 1 and 100. Got {self.quality}.")
        if self.subsampling not in ("4:4:4", "4:2:2", "4:2:0"):
            raise ValueError(f"Expected JPEG subsampling to be 4:4:4, 4:2:2 or 4:2:0. Got {self.subsampling!r}.")

    def encode(self, pixels: np.ndarray) -> bytes:
        from PIL import Image

        height, width, channels = pixels.shape
        if channels not in (1, 3):
            raise CodecError(f"Expected 1 or 3 channels for JPEG (use --mode rgb). Got {channels}.")
        if max(height, width) > JPEG_MAX_SIDE:
            raise CodecError(f"Expected JPEG sides of at most {JPEG_MAX_SIDE} pixels. Got {width}x{height}.")
        image = Image.fromarray(pixels[:, :, 0] if channels == 1 else pixels)
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=self.quality, subsampling=self.subsampling)
        return buffer.getvalue()

    def decode(self, data: bytes | memoryview | np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
        from PIL import Image

        try:
            with Image.open(io.BytesIO(bytes(data))) as image:
                if image.format != "JPEG":
                    raise CodecError(f"stored sample: Expected JPEG. Got {image.format}.")
                pixels = np.asarray(image, dtype=np.uint8)
        except CodecError:
            raise
        except Exception as error:
            raise CodecError(f"cannot decode stored JPEG ({error})") from None
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        if pixels.shape != tuple(shape):
            raise CodecError(f"stored JPEG: Expected to decode to {tuple(shape)}. Got {pixels.shape}.")
        return pixels

    def max_stored_size(self, height: int, width: int, channels: int) -> int:
        # Baseline Huffman coding spends at most 27 bits on a coefficient (16-bit code plus
        # 11 magnitude bits) and byte stuffing can double that: 8x raw plus the headers is
        # a true upper bound, and only costs shard-index entries, never disk space.
        return 8 * height * width * max(channels, 3) + 65536

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self)}


@dataclass(frozen=True)
class LosslessLayout:
    """prepkit's tiled lossless codec: smaller than PNG, decodes in parallel on GPU and CPU."""

    name: ClassVar[str] = "lossless"
    crops: ClassVar[bool] = True

    def decode_batch(self, request: Any) -> Any:
        """One decode of the whole batch (one kernel launch on cuda), regions only with rois."""
        from prepkit.decode import engine

        return engine.decode_lossless(request)
    tile: int = 64
    version: int = 2  # bitstream version written (docs/LOSSLESS.md); stores record it
    # v2 without the MED predictor: a little larger, faster to decode on a CPU (v1 ignores it)
    fast_decode: bool = False

    def __post_init__(self) -> None:
        if self.tile not in (16, 32, 64):
            raise ValueError(f"Expected lossless tile size to be 16, 32 or 64. Got {self.tile!r}.")
        if self.version not in (1, 2):
            raise ValueError(f"Expected lossless bitstream version 1 or 2. Got {self.version!r}.")
        if not isinstance(self.fast_decode, bool):
            raise ValueError(f"Expected lossless fast_decode to be true or false. Got {self.fast_decode!r}.")

    def encode(self, pixels: np.ndarray) -> bytes:
        from prepkit import lossless

        return lossless.encode(pixels, tile=self.tile, version=self.version, fast_decode=self.fast_decode)

    def decode(self, data: bytes | memoryview | np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
        from prepkit import lossless

        pixels = lossless.decode(bytes(data) if not isinstance(data, bytes) else data)
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        if pixels.shape != tuple(shape):
            raise CodecError(f"stored lossless image: Expected to decode to {tuple(shape)}. Got {pixels.shape}.")
        return pixels

    def max_stored_size(self, height: int, width: int, channels: int) -> int:
        from prepkit import lossless

        return lossless.max_encoded_size(height, width, channels, tile=self.tile, version=self.version)

    def to_dict(self) -> dict[str, Any]:
        options = asdict(self)
        if not self.fast_decode:  # stores written without it read the same in older prepkit
            del options["fast_decode"]
        return {"name": self.name, **options}


_LAYOUTS: dict[str, type] = {"raw": RawLayout, "jpeg": JpegLayout, "lossless": LosslessLayout}


def layout_from_dict(config: dict[str, Any]) -> Layout:
    """Rebuild a layout from the dict stored in a store's attributes."""
    options = dict(config)
    name = options.pop("name", None)
    if not isinstance(name, str) or name not in _LAYOUTS:
        raise ValueError(f"Expected a layout among {', '.join(LAYOUT_NAMES)}. Got {name!r}.")
    if name == "lossless":
        options.setdefault("version", 1)  # stores written before v2 did not record it
    try:
        return _LAYOUTS[name](**options)
    except TypeError as error:
        raise ValueError(f"layout {name!r}: bad options {options!r} ({error})") from None


def make_layout(name: str, *, quality: int = 90, lossless_version: int = 2, lossless_fast_decode: bool = False) -> Layout:
    """The layout called ``name`` with the command-line options that apply to it."""
    if name == "jpeg":
        return JpegLayout(quality=quality)
    if name == "lossless":
        return LosslessLayout(version=lossless_version, fast_decode=lossless_fast_decode)
    return layout_from_dict({"name": name})
