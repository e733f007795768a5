"""Plain-numpy encoder and decoder: slow, short, and the oracle the tests compare against.

Every step is written the obvious way; prepkit/lossless/cpu.py and cuda.py do the same
work with compiled kernels and must produce the same bytes and pixels.
"""

from __future__ import annotations

import numpy as np

from prepkit.errors import CodecError
from prepkit.lossless import format as fmt


def residuals(tile: np.ndarray, colour: bool) -> np.ndarray:
    """Gradient-predictor residuals of one (th, tw, C) tile, mod 256, as uint8."""
    x = tile.astype(np.int32)
    padded = np.zeros((x.shape[0] + 1, x.shape[1] + 1, x.shape[2]), np.int32)
    padded[1:, 1:] = x  # neighbours outside the tile are 0
    predicted = padded[1:, :-1] + padded[:-1, 1:] - padded[:-1, :-1]  # left + up - upleft
    r = (x - predicted) & 255
    if colour:
        r[..., 0] = (r[..., 0] - r[..., 1]) & 255
        r[..., 2] = (r[..., 2] - r[..., 1]) & 255
    return r.astype(np.uint8)


def zigzag(r: np.ndarray) -> np.ndarray:
    """Map a mod-256 residual read as int8 s to 2s (s >= 0) or -2s-1 (s < 0)."""
    s = r.astype(np.int8).astype(np.int32)
    return np.where(s >= 0, 2 * s, -2 * s - 1).astype(np.uint8)


def unzigzag(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.int32)
    return np.where(z & 1, -((z + 1) >> 1), z >> 1).astype(np.int32) & 255


def encode_tile(tile: np.ndarray, colour: bool) -> bytes:
    """One tile's payload: k nibbles, low bits, unary high parts (see docs/LOSSLESS.md)."""
    values = zigzag(residuals(tile, colour)).transpose(2, 0, 1).reshape(-1).astype(np.int64)
    n_blocks = -(-values.size // fmt.BLOCK)
    blocks = np.zeros(n_blocks * fmt.BLOCK, np.int64)
    blocks[: values.size] = values
    blocks = blocks.reshape(n_blocks, fmt.BLOCK)  # type: ignore[assignment]  # same array, 2-D view
    # Rice cost of each k in bits (the 16 terminator bits are the same for every k).
    costs = np.stack([fmt.BLOCK * k + (blocks >> k).sum(axis=1) for k in range(fmt.MAX_K + 1)], 1)
    ks = np.argmin(costs, axis=1)  # first minimum: smallest k on ties
    nibbles = np.zeros(2 * ((n_blocks + 1) // 2), np.uint8)
    nibbles[:n_blocks] = ks
    section_a = (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8)
    low_bits = [
        ((blocks[b, :, None] >> np.arange(ks[b])) & 1).reshape(-1) for b in range(n_blocks)
    ]
    section_b = np.packbits(np.concatenate(low_bits + [np.zeros(0, np.int64)]).astype(np.uint8), bitorder="little")
    q = (blocks >> ks[:, None]).reshape(-1)
    unary = np.zeros(int(q.sum()) + q.size, np.uint8)
    unary[np.cumsum(q + 1) - 1] = 1  # q zero bits, then a one bit
    section_c = np.packbits(unary, bitorder="little")
    return section_a.tobytes() + section_b.tobytes() + section_c.tobytes()


def encode(image: np.ndarray, tile: int = 64) -> bytes:
    """Encode an HxW or HxWxC uint8 image (reference implementation)."""
    image, flags = fmt.prepare(image, tile)
    h, w, c = image.shape
    header = fmt.Header(h, w, c, tile, flags)
    payloads = []
    for ty in range(header.tiles_y):
        for tx in range(header.tiles_x):
            part = image[ty * tile : (ty + 1) * tile, tx * tile : (tx + 1) * tile]
            payloads.append(encode_tile(part, header.colour))
    offsets = np.cumsum([0] + [len(p) for p in payloads]) + fmt.HEADER_SIZE + header.table_size
    return header.pack() + offsets.astype("<u4").tobytes() + b"".join(payloads)


def decode_tile(payload: np.ndarray, th: int, tw: int, c: int, colour: bool) -> np.ndarray:
    """Decode one tile's payload to (th, tw, c) uint8, checking every count it relies on."""
    n = th * tw * c
    n_blocks = -(-n // fmt.BLOCK)
    a_len = (n_blocks + 1) // 2
    nib = payload[:a_len]
    ks = np.stack([nib & 15, nib >> 4], 1).reshape(-1)[:n_blocks].astype(np.int64)
    if ks.max() > fmt.MAX_K:
        raise CodecError(f"Rice parameter {ks.max()} above the maximum {fmt.MAX_K}")
    b_len = int(2 * ks.sum())
    if a_len + b_len > payload.size:
        raise CodecError(f"tile payload of {payload.size} bytes too short for {a_len + b_len} bytes of low bits")
    low_bits = np.unpackbits(payload[a_len : a_len + b_len], bitorder="little").astype(np.int64)
    unary = np.unpackbits(payload[a_len + b_len :], bitorder="little")
    ends = np.flatnonzero(unary)
    if ends.size != n_blocks * fmt.BLOCK or ends[-1] // 8 != (unary.size // 8) - 1:
        raise CodecError(f"unary section: Expected {n_blocks * fmt.BLOCK} values filling it. Got {ends.size}.")
    q = np.diff(np.concatenate([[-1], ends])) - 1
    values = np.zeros(n_blocks * fmt.BLOCK, np.int64)
    pos = 0
    for b, k in enumerate(ks):
        bits = low_bits[pos : pos + fmt.BLOCK * k].reshape(fmt.BLOCK, k)
        low = (bits << np.arange(k)).sum(axis=1)
        values[b * fmt.BLOCK : (b + 1) * fmt.BLOCK] = (q[b * fmt.BLOCK : (b + 1) * fmt.BLOCK] << k) | low
        pos += fmt.BLOCK * k
    if values.max() > 255:
        raise CodecError("a decoded value exceeds 255")
    r = unzigzag(values[:n]).reshape(c, th, tw).transpose(1, 2, 0)
    out = np.cumsum(np.cumsum(r, axis=0), axis=1) & 255  # inverse of the gradient predictor
    if colour:
        out[..., 0] = (out[..., 0] + out[..., 1]) & 255
        out[..., 2] = (out[..., 2] + out[..., 1]) & 255
    return out.astype(np.uint8)


def decode(data: bytes, roi: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """Decode a stream (reference implementation); roi = (y0, x0, y1, x1) crops the result."""
    header = fmt.read_header(data)
    offsets = fmt.read_tile_table(data, header)
    buf = np.frombuffer(memoryview(data).cast("B"), np.uint8)
    t = header.tile
    out = np.zeros((header.height, header.width, header.channels), np.uint8)
    th_all, tw_all = fmt.tile_geometry(header)
    for i in range(header.n_tiles):
        ty, tx = divmod(i, header.tiles_x)
        payload = buf[offsets[i] : offsets[i + 1]]
        tile = decode_tile(payload, int(th_all[i]), int(tw_all[i]), header.channels, header.colour)
        out[ty * t : ty * t + tile.shape[0], tx * t : tx * t + tile.shape[1]] = tile
    y0, x0, y1, x1 = fmt.normalize_roi(header, roi)
    out = out[y0:y1, x0:x1]
    return out[:, :, 0] if header.is_2d else out
