"""Grayscale and RGB: channel conversion of packed uint8 images, mixed channels in a batch."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit.augment import (
    RGB,
    Grayscale,
    Normalize,
    Pipeline,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToDtype,
    op_from_dict,
)
from prepkit.augment.channels import reference, step_of
from prepkit.errors import PipelineError

from .helpers import pack, random_images

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _mixed_batch(seed: int = 0) -> list[np.ndarray]:
    rs = np.random.default_rng(seed)
    sizes_channels = [((9, 7), 1), ((6, 11), 3), ((8, 8), 4), ((1, 5), 3), ((4, 1), 1)]
    return [rs.integers(0, 256, (h, w, c), dtype=np.uint8) for (h, w), c in sizes_channels]


def _luma_equation(image: np.ndarray) -> np.ndarray:
    """torchvision's definition, written plainly: L = trunc(0.2989 R + 0.587 G + 0.114 B)."""
    r, g, b = (image[:, :, k].astype(np.float64) for k in range(3))
    return np.trunc(0.2989 * r + 0.587 * g + 0.114 * b)


@pytest.mark.parametrize("op", [RGB(), Grayscale(), Grayscale(3)], ids=repr)
def test_channel_ops_match_the_numpy_oracle_on_a_mixed_batch(op) -> None:
    images = _mixed_batch()
    flat, offsets, shapes = pack(images)
    pipe = Pipeline([op])
    out, out_offsets, out_shapes = pipe.apply_packed(flat, offsets, shapes, pipe.params(shapes, range(5)))
    step = step_of(op)
    assert (out_shapes[:, 2] == step.channels).all()
    for k, image in enumerate(images):
        got = out[out_offsets[k] : out_offsets[k] + out_shapes[k].prod()].reshape(out_shapes[k])
        np.testing.assert_array_equal(got, reference(image, step))


def test_grayscale_oracle_equals_torchvision_equation_within_float32_rounding() -> None:
    image = random_images(3, [(32, 32)], 3)[0]
    gray = reference(image, step_of(Grayscale()))[:, :, 0].astype(np.float64)
    exact = _luma_equation(image)
    # torch computes in float32: truncation may land one below at an exact integer.
    assert np.abs(gray - exact).max() <= 1
    assert (gray == exact).mean() > 0.99
    # Known values: white stays white (0.2989 + 0.587 + 0.114 = 0.9999 -> 254.97 -> 254).
    white = np.full((1, 1, 3), 255, np.uint8)
    assert int(reference(white, step_of(Grayscale()))[0, 0, 0]) == int(np.trunc(255 * 0.9999))


def test_rgb_repeats_gray_and_drops_alpha() -> None:
    gray = np.array([[[7], [200]]], np.uint8)
    rgba = np.array([[[1, 2, 3, 4]]], np.uint8)
    flat, offsets, shapes = pack([gray])
    pipe = Pipeline([RGB()], layout="NHWC")
    np.testing.assert_array_equal(pipe(flat, offsets, shapes, pipe.params(shapes, [0]))[0], [[[7] * 3, [200] * 3]])
    flat, offsets, shapes = pack([rgba])
    np.testing.assert_array_equal(pipe(flat, offsets, shapes, pipe.params(shapes, [0]))[0], [[[1, 2, 3]]])


def test_mixed_channel_batch_trains_through_a_full_pipeline() -> None:
    images = [im for im in _mixed_batch(1) if min(im.shape[:2]) > 1]
    flat, offsets, shapes = pack(images)
    ops = [RGB(), RandomResizedCrop(6), RandomHorizontalFlip(), ToDtype("float32", scale=True), Normalize(MEAN, STD)]
    pipe = Pipeline(ops)
    params = pipe.params(shapes, [0, 1, 2], seed=5)
    got = pipe(flat, offsets, shapes, params)
    assert got.shape == (3, 3, 6, 6) and got.dtype == np.float32
    # Same as converting each image first, then running the rest of the pipeline.
    converted = pack([reference(im, step_of(RGB())) for im in images])
    rest = Pipeline(ops[1:], stream_offset=1)
    want = rest(*converted, rest.params(converted[2], [0, 1, 2], seed=5))
    np.testing.assert_array_equal(got, want)


def test_mixed_channels_without_a_channel_op_say_what_to_do() -> None:
    flat, offsets, shapes = pack(_mixed_batch())
    pipe = Pipeline([Resize((4, 4))])
    with pytest.raises(PipelineError, match=r"RGB\(\)"):
        pipe(flat, offsets, shapes, pipe.params(shapes, range(5)))


@pytest.mark.parametrize(
    "ops", [[Resize(4), RGB()], [ToDtype("float32", scale=True), Grayscale()]], ids=["after-resize", "after-todtype"]
)
def test_channel_op_after_resample_or_value_op_is_refused(ops) -> None:
    with pytest.raises(PipelineError, match="Expected channel ops before"):
        Pipeline(ops)


def test_channel_ops_round_trip_and_validate() -> None:
    for op in (RGB(), Grayscale(3)):
        assert op_from_dict(op.to_dict()) == op
    with pytest.raises(PipelineError, match="Expected 1 or 3"):
        Grayscale(2)
    assert Pipeline([Grayscale(3), Resize(4)]).output_channels(1) == 3
    assert Pipeline([Resize(4)]).output_channels(4) == 4


def test_grayscale_equals_torch_on_every_rgb_value_sampled() -> None:
    """The CPU kernel against torchvision's rgb_to_grayscale run in torch (the float32
    products fused into the sums as torch's add_(alpha=) does) on 2 million colours."""
    import torch

    from tests.augment.torchvision_like import rgb_to_grayscale

    image = np.random.default_rng(5).integers(0, 256, (1000, 2000, 3), dtype=np.uint8)
    flat, offsets, shapes = pack([image])
    pipe = Pipeline([Grayscale()])
    out, _, _ = pipe.apply_packed(flat, offsets, shapes, pipe.params(shapes, range(1)))
    expected = rgb_to_grayscale(torch.from_numpy(image).permute(2, 0, 1).contiguous(), 1)[0].numpy()
    np.testing.assert_array_equal(out.reshape(1000, 2000), expected)
