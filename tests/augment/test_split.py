"""Expresso's transfer index: the first k ops on the CPU, the rest elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit.augment import CenterCrop, Normalize, Pipeline, RandomHorizontalFlip, RandomResizedCrop, Resize, ToDtype
from prepkit.errors import PipelineError

from .helpers import pack, random_images

OPS = [
    RandomHorizontalFlip(),
    RandomResizedCrop((14, 18)),
    RandomHorizontalFlip(),
    ToDtype("float32", scale=True),
    Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
]


def run_split(pipe: Pipeline, k: int, images, indices, seed: int, epoch: int) -> np.ndarray:
    first, second = pipe.split(k)
    flat, offsets, shapes = pack(images)
    mid = first.apply_packed(flat, offsets, shapes, first.params(shapes, indices, seed, epoch))
    mflat, moffsets, mshapes = mid
    assert mflat.dtype == np.uint8  # what crosses to the GPU is uint8
    return second(mflat, moffsets, mshapes, second.params(mshapes, indices, seed, epoch))


@pytest.mark.parametrize("k", range(len(OPS) - 1))
def test_split_equals_the_whole_pipeline(k) -> None:
    images = random_images(3, [(40, 31), (17, 64), (64, 64), (23, 23)], 3)
    pipe = Pipeline(OPS)
    indices = np.array([5, 6, 7, 8])
    flat, offsets, shapes = pack(images)
    whole = pipe(flat, offsets, shapes, pipe.params(shapes, indices, seed=1, epoch=4))
    parts = run_split(pipe, k, images, indices, seed=1, epoch=4)
    # The CPU part rounds the resampled pixels to uint8 as torchvision would, and so
    # does the whole pipeline: the results agree to float rounding.
    np.testing.assert_allclose(parts, whole, atol=1e-3)


def test_split_with_resize_after_the_transfer() -> None:
    images = random_images(4, [(40, 31), (17, 64)], 1)
    pipe = Pipeline([RandomHorizontalFlip(), CenterCrop(16), Resize((9, 7)), ToDtype("float32", scale=True)])
    flat, offsets, shapes = pack(images)
    whole = pipe(flat, offsets, shapes, pipe.params(shapes, [0, 1], seed=9))
    np.testing.assert_allclose(run_split(pipe, 2, images, [0, 1], seed=9, epoch=0), whole, atol=1e-3)


def test_first_part_must_stay_uint8() -> None:
    with pytest.raises(PipelineError, match="end in uint8.*Got float32"):
        Pipeline(OPS).split(4)
    with pytest.raises(PipelineError, match="0 <= k <= 5"):
        Pipeline(OPS).split(6)


def test_default_split_sends_everything_to_the_second_part() -> None:
    first, second = Pipeline(OPS).split(0)
    assert first.ops == () and second.ops == tuple(OPS)
