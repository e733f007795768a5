"""Shared helpers for the augmentation tests: packing images and drawing batches."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from prepkit.augment import Pipeline, reference
from prepkit.augment.params import Params


def pack(images: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """HxWxC uint8 images -> (flat, offsets, shapes) as the decoders hand them over."""
    shapes = np.array([im.shape for im in images], dtype=np.int32).reshape(-1, 3)
    sizes = [im.size for im in images]
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    flat = np.concatenate([im.ravel() for im in images]) if images else np.zeros(0, np.uint8)
    return flat.astype(np.uint8), offsets, shapes


def random_images(seed: int, sizes: list[tuple[int, int]], channels: int) -> list[np.ndarray]:
    rs = np.random.default_rng(seed)
    return [rs.integers(0, 256, (h, w, channels), dtype=np.uint8) for h, w in sizes]


@st.composite
def batches(draw: st.DrawFn, max_side: int = 40, max_images: int = 4) -> tuple[list[np.ndarray], int]:
    """A batch of 1-4 random images with sides 1..max_side and 1, 3 or 4 channels."""
    channels = draw(st.sampled_from([1, 3, 4]))
    n = draw(st.integers(1, max_images))
    sizes = [(draw(st.integers(1, max_side)), draw(st.integers(1, max_side))) for _ in range(n)]
    return random_images(draw(st.integers(0, 2**16)), sizes, channels), channels


def run_reference(pipe: Pipeline, flat, offsets, shapes, params: Params) -> np.ndarray:
    """The numpy oracle for a whole pipeline, stacked like the kernels' output."""
    plan = pipe.plan(int(shapes[0, 2]))
    out = reference.augment(
        flat, offsets, shapes, params, antialias=plan.antialias, round_u8=plan.round_u8,
        scale=plan.scale.astype(np.float64), bias=plan.bias.astype(np.float64), dtype=pipe.dtype, layout=pipe.layout,
    )  # fmt: skip
    stacked = np.stack(out)
    return stacked


def as_float(array: np.ndarray, dtype: str) -> np.ndarray:
    """Kernel output as float64 for comparison (bfloat16 bits widened to float32 first)."""
    if dtype == "bfloat16":
        return (array.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return array.astype(np.float64)
