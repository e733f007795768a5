"""The fused pipeline against torchvision semantics run op by op with torch (CPU).

torch.nn.functional.interpolate(mode="bilinear", align_corners=False, antialias=...)
is what torchvision v2 uses to resize tensors, so resizing is compared with torch
itself; the other ops are transcribed in tests/augment/torchvision_like.py.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from prepkit.augment import (  # noqa: E402
    RGB,
    CenterCrop,
    Grayscale,
    Normalize,
    Pipeline,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToDtype,
)

from . import torchvision_like  # noqa: E402
from .helpers import as_float, pack, random_images  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 60), st.integers(1, 60), st.integers(1, 40), st.integers(1, 40),
    st.booleans(), st.sampled_from([1, 3, 4]), st.integers(0, 999),
)  # fmt: skip
def test_float_resize_matches_torch_interpolate(h, w, oh, ow, antialias, channels, seed) -> None:
    # torch 2.13's CPU antialias kernel gives every output row the same value when the
    # output is one pixel wide ([[10, 20], [200, 220]] -> 3x1 gives [15, 15, 15]);
    # prepkit interpolates the rows ([15, 112.5, 210], as torch does without antialias).
    assume(not (antialias and ow == 1))
    image = random_images(seed, [(h, w)], channels)[0]
    flat, offsets, shapes = pack([image])
    pipe = Pipeline([ToDtype("float32"), Resize((oh, ow), antialias=antialias)])
    got = pipe(flat, offsets, shapes, pipe.params(shapes, [0]))[0]
    x = torch.from_numpy(image).permute(2, 0, 1)[None].float()
    want = torch.nn.functional.interpolate(x, size=(oh, ow), mode="bilinear", align_corners=False, antialias=antialias)
    np.testing.assert_allclose(got, want[0].numpy(), atol=2e-3)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 60), st.integers(2, 60), st.integers(1, 40), st.integers(1, 40), st.booleans(), st.integers(0, 999))
def test_uint8_resize_matches_torch_uint8_interpolate_within_one(h, w, oh, ow, antialias, seed) -> None:
    # torch's CPU uint8 kernel uses fixed-point weights and rounds between passes (and
    # trips an internal assert on one-pixel-wide inputs, hence sides >= 2 here).
    image = random_images(seed, [(h, w)], 3)[0]
    flat, offsets, shapes = pack([image])
    pipe = Pipeline([Resize((oh, ow), antialias=antialias)])
    got = pipe(flat, offsets, shapes, pipe.params(shapes, [0]))[0]
    x = torch.from_numpy(image).permute(2, 0, 1)[None].contiguous(memory_format=torch.channels_last)
    want = torch.nn.functional.interpolate(x, size=(oh, ow), mode="bilinear", align_corners=False, antialias=antialias)
    assert np.abs(got.astype(int) - want[0].numpy().astype(int)).max() <= 1


OP_LISTS = [
    [RandomResizedCrop(24), RandomHorizontalFlip(), ToDtype("float32", scale=True), Normalize(MEAN, STD)],
    [RandomHorizontalFlip(), RandomResizedCrop((16, 20), scale=(0.3, 1.0), antialias=False), ToDtype("float32", scale=True)],
    [ToDtype("float32", scale=True), Resize(20), CenterCrop(16), RandomHorizontalFlip(), Normalize(MEAN, STD)],
    [Resize(21), RandomHorizontalFlip(), CenterCrop((15, 17)), ToDtype("float32", scale=True)],
    [RandomHorizontalFlip(), CenterCrop(9), Resize((5, 7)), ToDtype("float32", scale=True), ToDtype("uint8", scale=True)],
    [ToDtype("float32", scale=True), RandomResizedCrop(12), Normalize(MEAN, STD), ToDtype("float16")],
    [Grayscale(3), RandomResizedCrop(14), ToDtype("float32", scale=True), Normalize(MEAN, STD)],
    [RGB(), RandomHorizontalFlip(), Grayscale(), Resize((9, 11)), ToDtype("float32", scale=True)],
    [RandomResizedCrop(16), ToDtype("float32", scale=True), Normalize(MEAN, STD), RandomErasing(p=0.9, value="random")],
    [Resize((14, 12)), RandomErasing(p=0.8, value=(300, 7.9, 20)), ToDtype("float32", scale=True), Normalize(MEAN, STD)],
    [RandomResizedCrop(15), ToDtype("float32", scale=True), RandomErasing(1.0, value=0.5), ToDtype("bfloat16")],
]


@pytest.mark.parametrize("ops", OP_LISTS, ids=lambda ops: "+".join(type(op).__name__ for op in ops))
def test_pipeline_matches_torchvision_op_by_op(ops) -> None:
    images = random_images(11, [(40, 31), (17, 64), (64, 64), (23, 23), (50, 9)], 3)
    flat, offsets, shapes = pack(images)
    pipe = Pipeline(ops)
    indices = np.array([3, 1, 4, 1_000_000, 5])
    params = pipe.params(shapes, indices, seed=7, epoch=2)
    got = as_float(pipe(flat, offsets, shapes, params), pipe.dtype)
    for k, image in enumerate(images):
        want = torchvision_like.apply(ops, image, int(indices[k]), seed=7, epoch=2).to(torch.float64).numpy()
        assert got[k].shape == want.shape
        diff = np.abs(got[k] - want)
        # One uint8 rounding step (at a .5 tie) is the largest legitimate difference.
        step = 1.0 if pipe.dtype == "uint8" else float(np.max(np.abs(pipe.plan(3).scale)))
        assert diff.max() <= step * 1.01 + 2e-3, diff.max()
        assert (diff > 2e-3).mean() < 0.05
