"""The numba CPU kernel against the numpy oracle, over drawn shapes and parameters."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prepkit.augment import (
    CenterCrop,
    Normalize,
    Pipeline,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToDtype,
)
from prepkit.augment.params import Params

from .helpers import as_float, batches, pack, random_images, run_reference

out_sides = st.integers(1, 24)
MEAN, STD = (0.485, 0.456, 0.406, 0.5), (0.229, 0.224, 0.225, 0.25)


@st.composite
def pipelines(draw: st.DrawFn, channels: int) -> Pipeline:
    """A valid pipeline from a few shapes of op lists, with drawn parameters."""
    size = (draw(out_sides), draw(out_sides))
    aa = draw(st.booleans())
    flip = RandomHorizontalFlip(draw(st.sampled_from([0.0, 0.5, 1.0])))
    dtype = draw(st.sampled_from(["float32", "float16", "bfloat16"]))
    norm = Normalize(MEAN[:channels], STD[:channels])
    crop = CenterCrop((draw(st.integers(1, size[0])), draw(st.integers(1, size[1]))))
    scale = draw(st.sampled_from([(0.08, 1.0), (0.5, 1.0), (1.0, 1.0)]))
    kind = draw(st.integers(0, 5))
    short = draw(out_sides)
    short_crop = CenterCrop((draw(st.integers(1, short)), draw(st.integers(1, short))))
    ops = [
        [RandomResizedCrop(size, scale=scale, antialias=aa), flip, ToDtype(dtype, scale=True), norm],
        [Resize(size, antialias=aa), flip, crop, ToDtype("float32", scale=True)],
        [ToDtype("float32", scale=True), Resize(size, antialias=aa), norm, ToDtype("uint8", scale=True), flip],
        [RandomResizedCrop(size, antialias=aa)],
        [Resize(short, antialias=aa), short_crop, flip],
        [flip, ToDtype(dtype, scale=False)],
    ][kind]
    return Pipeline(ops, layout=draw(st.sampled_from(["NCHW", "NHWC"])))


def _compare(pipe: Pipeline, got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    if pipe.dtype == "uint8":
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
        return
    diff = np.abs(as_float(got, pipe.dtype) - as_float(want, pipe.dtype))
    # Outputs are compared after the 16-bit rounding: allow one unit in the last place.
    tol = {"float32": 1e-3, "float16": 1e-3 + 2.0**-10 * np.abs(as_float(want, "float16")),
           "bfloat16": 1e-3 + 2.0**-7 * np.abs(as_float(want, "bfloat16"))}[pipe.dtype]  # fmt: skip
    if not pipe.round_u8:
        assert (diff <= tol).all(), diff.max()
        return
    # Resampling uint8 rounds to uint8 (as torchvision); a float32 sum just below or
    # above a .5 tie may round one step differently from the float64 oracle.
    step = float(np.max(np.abs(pipe.plan(got.shape[1 if pipe.layout == "NCHW" else -1]).scale)))
    assert (diff <= tol + step * 1.001).all(), diff.max()
    assert (diff > tol).mean() < 0.02


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_cpu_kernel_matches_reference(data) -> None:
    images, channels = data.draw(batches(max_images=6))
    pipe = data.draw(pipelines(channels))
    flat, offsets, shapes = pack(images)
    indices = np.arange(len(images)) * 3
    params = pipe.params(shapes, indices, seed=data.draw(st.integers(0, 99)), epoch=1)
    sizes = np.unique(params.out_size, axis=0)
    if len(sizes) > 1:  # Resize(int) without a fixed crop: one image at a time
        for i in range(len(images)):
            f, o, s = pack([images[i]])
            p = pipe.params(s, indices[i : i + 1], seed=0)
            _compare(pipe, pipe(f, o, s, p), run_reference(pipe, f, o, s, p))
        return
    _compare(pipe, pipe(flat, offsets, shapes, params), run_reference(pipe, flat, offsets, shapes, params))


def test_tiny_images_and_outputs() -> None:
    images = random_images(0, [(1, 1), (1, 9), (9, 1), (2, 3)], 3)
    flat, offsets, shapes = pack(images)
    for size in [(1, 1), (1, 5), (7, 1), (31, 17)]:
        pipe = Pipeline([RandomResizedCrop(size), ToDtype("float32")])
        params = pipe.params(shapes, np.arange(4), seed=9)
        np.testing.assert_allclose(pipe(flat, offsets, shapes, params), run_reference(pipe, flat, offsets, shapes, params), atol=1e-3)


def test_one_by_one_source_fills_the_output_with_its_value() -> None:
    flat, offsets, shapes = pack([np.array([[[10, 200, 77]]], np.uint8)])
    pipe = Pipeline([Resize((5, 4))])
    out = pipe(flat, offsets, shapes, pipe.params(shapes, [0]))
    assert (out[0, :, :, :] == np.array([10, 200, 77])[:, None, None]).all()


def test_layouts_are_transposes() -> None:
    images = random_images(1, [(30, 20), (11, 40)], 3)
    flat, offsets, shapes = pack(images)
    ops = [RandomResizedCrop((9, 13)), RandomHorizontalFlip(), ToDtype("float32", scale=True)]
    nchw, nhwc = Pipeline(ops), Pipeline(ops, layout="NHWC")
    params = nchw.params(shapes, [4, 5], seed=2)
    np.testing.assert_array_equal(nchw(flat, offsets, shapes, params).transpose(0, 2, 3, 1), nhwc(flat, offsets, shapes, params))


def test_flip_mirrors_the_output() -> None:
    images = random_images(2, [(17, 23), (8, 8)], 4)
    flat, offsets, shapes = pack(images)
    base = [Resize((7, 11)), CenterCrop((5, 6))]
    kept = Pipeline(base + [RandomHorizontalFlip(0.0)])
    flipped = Pipeline(base + [RandomHorizontalFlip(1.0)])
    a = kept(flat, offsets, shapes, kept.params(shapes, [0, 1]))
    b = flipped(flat, offsets, shapes, flipped.params(shapes, [0, 1]))
    np.testing.assert_array_equal(a[..., ::-1], b)


def test_crop_and_flip_without_resampling_copy_pixels_exactly() -> None:
    image = random_images(3, [(9, 12)], 3)[0]
    flat, offsets, shapes = pack([image])
    pipe = Pipeline([RandomHorizontalFlip(1.0), CenterCrop((4, 5))], layout="NHWC")
    out = pipe(flat, offsets, shapes, pipe.params(shapes, [0]))
    # flip first: the centre crop of the mirrored image (top 2, left round(3.5) = 4)
    np.testing.assert_array_equal(out[0], image[:, ::-1][2:6, 4:9])


def test_out_argument_receives_the_result() -> None:
    images = random_images(4, [(20, 20), (30, 25)], 3)
    flat, offsets, shapes = pack(images)
    pipe = Pipeline([RandomResizedCrop(8), ToDtype("float32", scale=True)])
    params = pipe.params(shapes, [0, 1])
    out = np.full((2, 3, 8, 8), np.nan, np.float32)
    assert pipe(flat, offsets, shapes, params, out=out) is out
    np.testing.assert_array_equal(out, pipe(flat, offsets, shapes, params))
    with pytest.raises(ValueError, match="C-contiguous"):
        pipe(flat, offsets, shapes, params, out=np.zeros((2, 3, 8, 8), np.float64))


def test_out_argument_accepts_a_torch_tensor() -> None:
    torch = pytest.importorskip("torch")
    images = random_images(5, [(20, 20), (30, 25)], 3)
    flat, offsets, shapes = pack(images)
    pipe = Pipeline([RandomResizedCrop(8), ToDtype("bfloat16", scale=True)])
    params = pipe.params(shapes, [0, 1])
    tensor = torch.zeros((2, 3, 8, 8), dtype=torch.bfloat16)
    pipe(flat, offsets, shapes, params, out=tensor.view(torch.int16))
    expected = pipe(flat, offsets, shapes, params)
    np.testing.assert_array_equal(tensor.view(torch.int16).numpy().view(np.uint16), expected)


def test_batch_mixing_upscales_and_a_2x_downscale() -> None:
    # Regression: with full fast-math and the horizontal tap count computed in two
    # places (buffer size, loop), this batch got garbage (zeros) in the 36 -> 18 image,
    # depending on the pixel data; the count is now computed once per image and
    # fast-math limited to reassociation and contraction.
    images = random_images(3, [(40, 31), (17, 64), (64, 64), (23, 23)], 3)
    flat, offsets, shapes = pack([images[3]] * 3 + [images[2]])
    pipe = Pipeline([RandomResizedCrop((14, 18)), RandomHorizontalFlip(), ToDtype("float32")])
    params = Params(
        region=np.array([[6, 7, 17, 13]] * 3 + [[3, 18, 39, 36]], np.int32),
        resized=np.array([[14, 18]] * 4, np.int32),
        offset=np.zeros((4, 2), np.int32),
        out_size=np.array([[14, 18]] * 4, np.int32),
        flip=np.array([False, False, False, True]),
    )
    np.testing.assert_allclose(pipe(flat, offsets, shapes, params), run_reference(pipe, flat, offsets, shapes, params), atol=1e-3)
