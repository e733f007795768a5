"""Shared fixtures: tiny datasets made in the test, and the bundled sample photos."""

from __future__ import annotations

import functools
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
SAMPLE_PHOTOS = REPO / "samples" / "photos"


def smooth_image(height: int, width: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    """A photo-like test image: smooth gradients plus mild noise (compresses like a photo)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    planes = []
    for c in range(channels):
        phase = rng.uniform(0, 6.28)
        plane = 127 + 60 * np.sin(x / (7 + 3 * c) + phase) + 50 * np.cos(y / (11 + c) - phase)
        planes.append(plane + rng.normal(0, 4, size=(height, width)))
    return np.clip(np.stack(planes, axis=-1), 0, 255).astype(np.uint8)


@functools.cache
def _bomb_png(side: int) -> bytes:
    """A valid grey PNG of side x side black pixels, built once per session: zlib at level 1
    over the rows took 0.86 s for 20,000 x 20,000 on the dev VM, where Pillow's save took
    2.6 s (5.8 s for 30,000) in every test that wrote one."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    compressor = zlib.compressobj(1)
    row = bytes(side + 1)  # filter byte 0, then the row's zeros
    idat = b"".join(compressor.compress(row) for _ in range(side)) + compressor.flush()
    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)  # 8-bit grey, no interlace
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def write_bomb_png(path: Path, side: int = 20_000) -> Path:
    """A decompression bomb: a PNG of a few hundred KB that opens as side x side pixels
    (20,000 x 20,000 is 400M pixels, past prepkit's 2^28 and Pillow's own limits)."""
    path.write_bytes(_bomb_png(side))
    return path


def write_image(path: Path, pixels: np.ndarray, **save: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels).save(path, **save)
    return path


@pytest.fixture
def class_folder(tmp_path: Path) -> Path:
    """An ImageFolder-style dataset: 3 classes, 7 small images of varied sizes and formats."""
    root = tmp_path / "dataset"
    sizes = [(20, 30), (17, 17), (33, 9), (8, 40), (25, 25), (12, 31), (40, 22)]
    classes = ["zebra", "ant", "moose"]
    for number, (h, w) in enumerate(sizes):
        label = classes[number % 3]
        suffix = ".png" if number % 2 else ".jpg"
        write_image(root / label / f"img{number:02d}{suffix}", smooth_image(h, w, seed=number), quality=95)
    return root


@pytest.fixture
def sample_photos() -> Path:
    assert SAMPLE_PHOTOS.is_dir(), "bundled sample photos are missing"
    return SAMPLE_PHOTOS


def store_files(root: Path) -> dict[str, bytes]:
    """Every file of a store by relative path (the lock file excluded), for byte comparisons."""
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            if name == ".prepkit.lock":
                continue
            path = Path(folder) / name
            files[str(path.relative_to(root))] = path.read_bytes()
    return files


def lossless_store(root: Path, sizes: list[tuple[int, int]], version: int, samples_per_shard: int) -> Path:
    """A lossless store (16x16 tiles, bitstream ``version``) of smooth RGB images of the given
    (height, width), built through a manifest in ``root``; returns the store's path."""
    import json

    from prepkit.ingest.build import build_store
    from prepkit.ingest.images import ImageOptions
    from prepkit.layouts import LosslessLayout

    rows = []
    for number, (height, width) in enumerate(sizes):
        write_image(root / f"{number}.png", smooth_image(height, width, seed=number))
        rows.append({"path": f"{number}.png", "label": 0})
    (root / "m.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    dest = root / "store"
    build_store(str(root / "m.jsonl"), str(dest), layout=LosslessLayout(tile=16, version=version),
                options=ImageOptions(), samples_per_shard=samples_per_shard, workers=1)
    return dest
