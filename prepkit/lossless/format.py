"""The lossless bitstream: constants, the header, the tile table, and their validation.

Everything a decoder needs to know before touching a tile's payload lives here, checked in
plain Python/numpy, so the unchecked numba kernels only ever see offsets that lie inside
the buffer. docs/LOSSLESS.md is the normative description of the format.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from prepkit.errors import CodecError

MAGIC = b"PKLL"
VERSION = 1
HEADER_SIZE = 20
_HEADER = struct.Struct("<4sBBBBIIHH")  # magic, version, flags, channels, reserved, W, H, tile, reserved

FLAG_2D = 0x01  # the encoded image was a 2-D (H, W) array; decode returns 2-D
FLAG_COLOUR = 0x02  # residuals of channel 0 and 2 had channel 1's residual subtracted
KNOWN_FLAGS = FLAG_2D | FLAG_COLOUR

BLOCK = 16  # values per Rice block
MAX_K = 7  # largest Rice parameter; 8 would never beat 7 (see docs/LOSSLESS.md)
MAX_BLOCK_BYTES = 18  # one block never costs more than 144 bits (k = 7)
TILE_SIZES = (16, 32, 64)
CHANNELS = (1, 3, 4)
MAX_SIDE = 65535
MAX_PIXELS = 1 << 28  # keeps every stream far below the 4 GiB reach of u32 offsets


@dataclass(frozen=True)
class Header:
    """The fixed-size header of an encoded image."""

    height: int
    width: int
    channels: int
    tile: int
    flags: int
    version: int = VERSION

    @property
    def is_2d(self) -> bool:
        """Whether the encoded image was HxW (decode returns a 2-D array)."""
        return bool(self.flags & FLAG_2D)

    @property
    def colour(self) -> bool:
        """Whether the colour decorrelation of residuals is applied."""
        return bool(self.flags & FLAG_COLOUR)

    @property
    def tiles_y(self) -> int:
        return -(-self.height // self.tile)

    @property
    def tiles_x(self) -> int:
        return -(-self.width // self.tile)

    @property
    def n_tiles(self) -> int:
        return self.tiles_y * self.tiles_x

    @property
    def table_size(self) -> int:
        """Bytes of the tile offset table (n_tiles + 1 u32 entries)."""
        return 4 * (self.n_tiles + 1)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape decode() returns."""
        if self.is_2d:
            return (self.height, self.width)
        return (self.height, self.width, self.channels)

    def pack(self) -> bytes:
        return _HEADER.pack(
            MAGIC, self.version, self.flags, self.channels, 0, self.width, self.height, self.tile, 0
        )


def check_shape(height: int, width: int, channels: int, tile: int) -> None:
    """Raise ValueError if an image of this shape cannot be encoded with this tile size."""
    if tile not in TILE_SIZES:
        raise ValueError(f"Expected tile to be one of {TILE_SIZES}. Got {tile}.")
    if channels not in CHANNELS:
        raise ValueError(f"Expected channels to be one of {CHANNELS}. Got {channels}.")
    if not (1 <= height <= MAX_SIDE and 1 <= width <= MAX_SIDE):
        raise ValueError(f"Expected height and width to be in 1..{MAX_SIDE}. Got {height}x{width}.")
    if height * width > MAX_PIXELS:
        raise ValueError(f"Expected at most {MAX_PIXELS} pixels per image. Got {height * width}.")


def payload_bounds(n_blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest possible payload in bytes of tiles with n_blocks Rice blocks.

    Smallest: section A plus one unary bit per value. Largest: section A, at most 144 bits
    (18 bytes) per block for sections B and C together, and the padding of C's last byte.
    """
    a_len = (n_blocks + 1) // 2
    return a_len + 2 * n_blocks, a_len + MAX_BLOCK_BYTES * n_blocks + 1


def tile_geometry(header: Header) -> tuple[np.ndarray, np.ndarray]:
    """Per tile (row-major): (th, tw) as int64 arrays."""
    t = header.tile
    ys = np.minimum(t, header.height - t * np.arange(header.tiles_y))
    xs = np.minimum(t, header.width - t * np.arange(header.tiles_x))
    th = np.repeat(ys, header.tiles_x).astype(np.int64)
    tw = np.tile(xs, header.tiles_y).astype(np.int64)
    return th, tw


def max_encoded_size(height: int, width: int, channels: int, tile: int = 64) -> int:
    """A guaranteed upper bound on len(encode(img)) for any image of this shape."""
    check_shape(height, width, channels, tile)
    header = Header(height, width, channels, tile, 0)
    th, tw = tile_geometry(header)
    _, largest = payload_bounds(-(-(th * tw * channels) // BLOCK))
    return HEADER_SIZE + header.table_size + int(largest.sum())


def as_bytes(data: object) -> np.ndarray:
    """A read-only uint8 view of any bytes-like object (CodecError if it is not one)."""
    try:
        view = memoryview(data)  # type: ignore[arg-type]
        if not view.c_contiguous:
            raise ValueError("not contiguous")
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")  # raises for non-contiguous buffers
    except (TypeError, ValueError):
        raise CodecError(f"Expected a contiguous bytes-like object. Got {type(data).__name__}.") from None
    return np.frombuffer(view, np.uint8)


def read_header(data: object) -> Header:
    """Parse and validate the header of an encoded image (raises CodecError)."""
    buf = as_bytes(data)
    if buf.size < HEADER_SIZE:
        raise CodecError(f"stream too short for a header: Expected {HEADER_SIZE} bytes. Got {buf.size}.")
    magic, version, flags, channels, reserved, width, height, tile, reserved2 = _HEADER.unpack(
        buf[:HEADER_SIZE].tobytes()
    )
    if magic != MAGIC:
        raise CodecError(f"bad magic: Expected {MAGIC!r}. Got {magic!r}.")
    if version == 2:
        from prepkit.lossless import format_v2  # imports this module: resolved lazily

        return format_v2.read_header(buf)[0]
    if version != VERSION:
        raise CodecError(f"unsupported codec version: Expected 1 or 2. Got {version}.")
    if flags & ~KNOWN_FLAGS:
        raise CodecError(f"unknown flag bits: Expected a subset of {KNOWN_FLAGS:#x}. Got {flags:#x}.")
    if reserved or reserved2:
        raise CodecError(f"reserved header fields: Expected 0. Got {reserved} and {reserved2}.")
    try:
        check_shape(height, width, channels, tile)
    except ValueError as exc:
        raise CodecError(f"invalid header: {exc}") from None
    if flags & FLAG_2D and channels != 1:
        raise CodecError(f"2-D flag: Expected 1 channel. Got {channels}.")
    if flags & FLAG_COLOUR and channels < 3:
        raise CodecError(f"colour flag: Expected 3 or 4 channels. Got {channels}.")
    return Header(height, width, channels, tile, flags, version)


def u32_offsets(buf: np.ndarray, at: int, n: int) -> np.ndarray:
    """The n + 1 absolute u32 tile offsets of the table at `at` (v1, and v2 without its
    short tile table), checked: the table inside the stream, the first tile right after it,
    the last tile ending the stream."""
    start = at + 4 * (n + 1)
    if buf.size < start:
        raise CodecError(f"stream too short for the tile table: Expected {start} bytes. Got {buf.size}.")
    offsets = buf[at:start].view("<u4").astype(np.int64)
    if offsets[0] != start:
        raise CodecError(f"first tile offset: Expected {start}. Got {offsets[0]}.")
    if offsets[n] != buf.size:
        raise CodecError(f"last tile offset: Expected the stream length {buf.size}. Got {offsets[n]}.")
    return offsets


def read_tile_table(data: object, header: Header | None = None) -> np.ndarray:
    """Validate the tile table; return int64 offsets (n_tiles + 1), absolute in the stream.

    Checks that offsets start right after the table, increase, stay inside the buffer, end
    exactly at its end, and that each tile's length is plausible for its pixel count.
    """
    buf = as_bytes(data)
    if header is None:
        header = read_header(buf)
    if header.version != VERSION:
        raise CodecError(f"read_tile_table reads version {VERSION} streams, got version {header.version}")
    offsets = u32_offsets(buf, HEADER_SIZE, header.n_tiles)
    lengths = np.diff(offsets)
    th, tw = tile_geometry(header)
    low, high = payload_bounds(-(-(th * tw * header.channels) // BLOCK))
    bad = np.flatnonzero((lengths < low) | (lengths > high))
    if bad.size:
        i = int(bad[0])
        raise CodecError(
            f"tile {i}: payload length {int(lengths[i])} outside the possible range {int(low[i])}..{int(high[i])}"
        )
    return offsets


def normalize_roi(header: Header, roi: tuple[int, int, int, int] | None) -> tuple[int, int, int, int]:
    """Check roi = (y0, x0, y1, x1) against the image; None means the whole image."""
    if roi is None:
        return (0, 0, header.height, header.width)
    try:
        y0, x0, y1, x1 = (int(v) for v in roi)
    except (TypeError, ValueError):
        raise ValueError(f"Expected roi to be (y0, x0, y1, x1). Got {roi!r}.") from None
    if not (0 <= y0 < y1 <= header.height and 0 <= x0 < x1 <= header.width):
        raise ValueError(
            f"roi {roi} must satisfy 0 <= y0 < y1 <= {header.height} and 0 <= x0 < x1 <= {header.width}"
        )
    return (y0, x0, y1, x1)


def prepare(image: np.ndarray, tile: int) -> tuple[np.ndarray, int]:
    """Validate an input image; return it as contiguous (H, W, C) uint8 and the header flags."""
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise ValueError(f"Expected image to be uint8. Got {image.dtype}.")
    flags = 0
    if image.ndim == 2:
        image = image[:, :, None]
        flags |= FLAG_2D
    elif image.ndim != 3:
        raise ValueError(f"Expected image to be HxW or HxWxC. Got shape {image.shape}.")
    check_shape(image.shape[0], image.shape[1], image.shape[2], tile)
    if image.shape[2] >= 3:
        flags |= FLAG_COLOUR
    # Writable as well as contiguous: numba compiles a kernel again for a read-only array,
    # and images from Pillow (np.asarray of a PIL image, what ingest passes) are read-only.
    # Copying those costs a memcpy; compiling every encoder kernel a second time cost 35 s on
    # the first store a fresh install wrote after `prepkit warmup`.
    return np.require(image, requirements=["C", "W"]), flags
