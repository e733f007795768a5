"""Deterministic benchmark image sets built from the photos bundled in scikit-image's wheel.

Nothing is downloaded: the files are read straight from ``skimage/data/``. Both sets keep
real sensor noise: the Cityscapes-like set is a mosaic of native-resolution crops (never
upscaled) and the ImageNet-like set is made of downscaled or cropped photos, as ImageNet's
JPEG-derived images are.
"""

from __future__ import annotations

import os
from functools import cache

import numpy as np
from PIL import Image

PHOTOS = (
    "astronaut.png",
    "chelsea.png",
    "coffee.png",
    "hubble_deep_field.jpg",
    "ihc.png",
    "motorcycle_left.png",
    "motorcycle_right.png",
    "retina.jpg",
    "rocket.jpg",
    "color.png",
)


def data_dir() -> str:
    """The folder of scikit-image's bundled sample data."""
    import skimage  # imported here: only the benchmark needs scikit-image

    return os.path.join(os.path.dirname(skimage.__file__), "data")


@cache
def load_photo(name: str) -> np.ndarray:
    """One bundled photo as (H, W, 3) uint8."""
    with Image.open(os.path.join(data_dir(), name)) as im:
        return np.asarray(im.convert("RGB")).copy()


def cityscapes_like(count: int = 10, height: int = 1024, width: int = 2048) -> list[np.ndarray]:
    """``count`` RGB mosaics of native-resolution photo crops, a different layout each."""
    photos = [load_photo(name) for name in PHOTOS]
    images = []
    for index in range(count):
        rng = np.random.default_rng(1000 + index)
        canvas = np.zeros((height, width, 3), np.uint8)
        y = 0
        while y < height:
            row_h = min(int(rng.integers(224, 512)), height - y)
            if height - y - row_h < 128:  # no sliver rows at the bottom
                row_h = height - y
            x = 0
            while x < width:
                cell_w = min(int(rng.integers(256, 640)), width - x)
                if width - x - cell_w < 128:
                    cell_w = width - x
                fits = [p for p in photos if p.shape[0] >= row_h and p.shape[1] >= cell_w]
                photo = fits[int(rng.integers(len(fits)))] if fits else _largest(photos)
                crop = _random_crop(photo, row_h, cell_w, rng)
                canvas[y : y + crop.shape[0], x : x + crop.shape[1]] = crop
                x += cell_w
            y += row_h
        images.append(canvas)
    return images


def imagenet_like(count: int = 17, height: int = 375, width: int = 500) -> list[np.ndarray]:
    """``count`` RGB images of width x height: each photo downscaled, then extra random crops."""
    images = []
    rng = np.random.default_rng(7)
    for index in range(count):
        photo = load_photo(PHOTOS[index % len(PHOTOS)])
        if index < len(PHOTOS):
            # Whole photo, centre-cropped to 4:3 then resized (downscaled where larger).
            ph, pw = photo.shape[:2]
            ch, cw = (ph, ph * width // height) if pw * height >= ph * width else (pw * height // width, pw)
            y0, x0 = (ph - ch) // 2, (pw - cw) // 2
            region = photo[y0 : y0 + ch, x0 : x0 + cw]
        else:
            # A native-resolution crop, as large as the photo allows, at a random place.
            region = _random_crop(photo, min(photo.shape[0], height), min(photo.shape[1], width), rng)
        resized = Image.fromarray(region).resize((width, height), Image.Resampling.LANCZOS)
        images.append(np.asarray(resized).copy())
    return images


def _largest(photos: list[np.ndarray]) -> np.ndarray:
    return max(photos, key=lambda p: p.shape[0] * p.shape[1])


def _random_crop(photo: np.ndarray, h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    h, w = min(h, photo.shape[0]), min(w, photo.shape[1])
    y0 = int(rng.integers(photo.shape[0] - h + 1))
    x0 = int(rng.integers(photo.shape[1] - w + 1))
    return photo[y0 : y0 + h, x0 : x0 + w]
