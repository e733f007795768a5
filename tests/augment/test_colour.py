"""The colour stage (ColorJitter, TrivialAugmentWide, RandAugment): the numba CPU kernel
against the numpy oracle and against torchvision's v2 kernels transcribed in torch
(tests/augment/torchvision_like.py); draws, order rules and serialisation."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit.augment import (
    CenterCrop,
    ColorJitter,
    Normalize,
    Pipeline,
    RandAugment,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToDtype,
    TrivialAugmentWide,
    cpu,
    op_from_dict,
    reference,
)
from prepkit.augment import colour_math as cm
from prepkit.augment.colour import AUGMENT_SPACE, linspace_f32, magnitudes
from prepkit.errors import PipelineError

from . import torchvision_like
from .helpers import pack, random_images

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
N = 48  # images per batch: enough that every op and permutation shows up
COLOUR_OPS = [ColorJitter(0.5, 0.6, 0.7, 0.3), TrivialAugmentWide(), RandAugment(), RandAugment(3, 25, 31)]


def _scratch_reference(pipe: Pipeline, flat, offsets, shapes, params) -> np.ndarray:
    """The numpy oracle of a whole pipeline: the fused kernel up to the stage, then
    reference.colour per image, then the value ops after it (float64)."""
    channels = int(shapes[0, 2])
    h, w = params.uniform_size()
    before, after = pipe.colour_plans(channels)
    scratch = np.empty(len(params) * h * w * channels, np.float32)
    cpu.augment(flat, offsets, shapes, params, before, scratch, np.arange(len(params), dtype=np.int64) * h * w * channels)
    images = scratch.reshape(len(params), h, w, channels)
    out = np.stack([
        reference.colour(images[k], params.colour_op[k], params.colour_arg[k], pipe.colour_dtype == "uint8",
                         params.colour_warp[k])
        for k in range(len(params))
    ])  # fmt: skip
    out = out * after.scale.astype(np.float32) + after.bias.astype(np.float32)
    return out.transpose(0, 3, 1, 2) if pipe.layout == "NCHW" else out


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("op", COLOUR_OPS, ids=lambda op: type(op).__name__)
@pytest.mark.parametrize("float_first", [False, True], ids=["uint8", "float32"])
def test_matches_torchvision_kernels(op, channels, float_first) -> None:
    # No resample before the stage, so torch sees exactly the pixels the stage sees.
    import torch

    images = random_images(channels, [(13, 12)] * N, channels)
    if channels == 3:
        images[0][:] = 77  # a flat image: autocontrast's and equalize's special cases
        images[1][..., 1] = images[1][..., 0]  # ties between channels in the hue conversion
    flat, offsets, shapes = pack(images)
    ops = [CenterCrop((11, 10)), RandomHorizontalFlip()]
    ops += [ToDtype("float32", scale=True), op] if float_first else [op, ToDtype("float32", scale=True)]
    pipe = Pipeline(ops)
    indices = np.arange(N) * 7
    params = pipe.params(shapes, indices, seed=5, epoch=2)
    got = pipe(flat, offsets, shapes, params)
    off = 0
    for k in range(N):
        want = torchvision_like.apply(ops, images[k], int(indices[k]), seed=5, epoch=2).to(torch.float32).numpy()
        diff = np.abs(got[k] - want)
        if not float_first:  # uint8 arithmetic: equal, value for value
            np.testing.assert_array_equal(got[k], want, err_msg=f"sample {k}: {params.colour_op[k]}")
        else:
            # Float sharpness differs from torch's conv2d by the float32 summation order; a later
            # posterize / solarize / equalize can turn that into one level.
            off += int((diff > 1e-5).sum())
            assert diff.max() <= 1e-5 or cm.SHARPNESS in params.colour_op[k], (k, params.colour_op[k], diff.max())
    assert off <= 3


@pytest.mark.parametrize("op", COLOUR_OPS, ids=lambda op: type(op).__name__)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_cpu_kernel_equals_numpy_oracle_after_a_resample(op, layout) -> None:
    images = random_images(3, [(40, 31), (17, 64), (64, 64), (23, 23)] * 6, 3)
    flat, offsets, shapes = pack(images)
    for ops in (
        [RandomResizedCrop(12), RandomHorizontalFlip(), op, ToDtype("float32", scale=True), Normalize(MEAN, STD)],
        [Resize((9, 14)), ToDtype("float32", scale=True), op, Normalize(MEAN, STD)],
        [RandomResizedCrop((7, 9)), op],
    ):
        pipe = Pipeline(ops, layout=layout)
        params = pipe.params(shapes, np.arange(len(images)), seed=1, epoch=0)
        got = pipe(flat, offsets, shapes, params)
        want = _scratch_reference(pipe, flat, offsets, shapes, params)
        if pipe.dtype == "uint8":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)


def test_every_step_code_and_permutation_is_drawn() -> None:
    shapes = np.tile([[8, 8, 3]], (2000, 1)).astype(np.int32)
    indices = np.arange(2000)
    jitter = Pipeline([ColorJitter(0.1, 0.2, 0.3, 0.1)]).params(shapes, indices, seed=3)
    assert len({tuple(row) for row in jitter.colour_op}) == 24  # every order of the four
    assert (np.sort(jitter.colour_op, axis=1) == [cm.BRIGHTNESS, cm.CONTRAST, cm.SATURATION, cm.HUE]).all()
    for column, code in enumerate([cm.BRIGHTNESS, cm.CONTRAST, cm.SATURATION]):
        factors = jitter.colour_arg[jitter.colour_op == code]
        low, high = 1 - 0.1 * (column + 1), 1 + 0.1 * (column + 1)
        assert low <= factors.min() < low + 0.02 and high - 0.02 < factors.max() < high
    trivial = Pipeline([TrivialAugmentWide()]).params(shapes, indices, seed=3)
    counts = np.bincount(trivial.colour_op[:, 0], minlength=15)[:10]  # 10+: geometric (test_geometric.py)
    assert counts[cm.HUE] == 0 and (np.delete(counts, cm.HUE) > 2000 / 14 * 0.7).all()
    brightness = trivial.colour_arg[trivial.colour_op[:, 0] == cm.BRIGHTNESS, 0]
    assert brightness.min() < 0.1 and brightness.max() > 1.9 and (np.abs(brightness - 1) <= 0.99 + 1e-6).all()
    rand = Pipeline([RandAugment(num_ops=3, magnitude=0)]).params(shapes, indices, seed=3)
    assert rand.colour_op.shape == (2000, 3)
    assert set(np.unique(rand.colour_arg[rand.colour_op == cm.BRIGHTNESS])) == {1.0}  # magnitude bin 0


def test_magnitude_tables_are_torchvisions() -> None:
    import torch

    for bins in (2, 5, 10, 31, 64):
        for wide in (True, False):
            for name in AUGMENT_SPACE:
                want = torchvision_like.auto_magnitudes(name, bins, wide)
                got = magnitudes(name, bins, wide)
                if want is None:
                    assert got is None
                else:
                    np.testing.assert_array_equal(got, want.to(torch.float64).numpy(), err_msg=f"{name} {bins}")
        np.testing.assert_array_equal(linspace_f32(0.3, -2.0, bins), torch.linspace(0.3, -2.0, bins).numpy())


def test_dict_round_trip_and_validation() -> None:
    for op in COLOUR_OPS + [ColorJitter(brightness=(0.2, 3.0), hue=(-0.5, 0.1))]:
        assert op_from_dict(op.to_dict()) == op
    assert ColorJitter(brightness=1.5).brightness == (0.0, 2.5)  # clipped at 0, as torchvision
    assert ColorJitter(contrast=0).contrast is None
    for bad in ({"hue": 0.6}, {"brightness": -0.1}, {"saturation": (2.0, 1.0)}, {"contrast": "x"}):
        with pytest.raises(PipelineError, match="ColorJitter"):
            ColorJitter(**bad)
    with pytest.raises(PipelineError, match="magnitude"):
        RandAugment(magnitude=31)
    with pytest.raises(PipelineError, match="num_magnitude_bins"):
        TrivialAugmentWide(num_magnitude_bins=1)


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ([ColorJitter(0.1), RandomResizedCrop(8)], "no geometric op after a colour op"),
        ([Resize(8), RandomErasing(), TrivialAugmentWide()], "before RandomErasing"),
        ([Resize(8), ColorJitter(0.1), ToDtype("float32", scale=True), RandAugment()], "next to each other"),
        ([Resize(8), ToDtype("float16", scale=True), ColorJitter(0.1)], "uint8 or float32"),
    ],
)
def test_order_rules(ops, message) -> None:
    with pytest.raises(PipelineError, match=message):
        Pipeline(ops)


def test_four_channels_and_packed_output_are_refused() -> None:
    flat, offsets, shapes = pack(random_images(0, [(6, 6)], 4))
    pipe = Pipeline([Resize((4, 4)), ColorJitter(0.2)])
    with pytest.raises(PipelineError, match="1 or 3-channel"):
        pipe(flat, offsets, shapes, pipe.params(shapes, [0]))
    with pytest.raises(PipelineError, match="colour"):
        pipe.apply_packed(flat, offsets, shapes, pipe.params(shapes, [0]))


def test_consecutive_colour_ops_chain_and_erasing_follows() -> None:
    images = random_images(9, [(20, 20)] * 6, 3)
    flat, offsets, shapes = pack(images)
    ops = [CenterCrop(10), ColorJitter(0.4, 0.4), TrivialAugmentWide(), ToDtype("float32", scale=True),
           RandomErasing(1.0, value=0.25)]  # fmt: skip
    pipe = Pipeline(ops)
    params = pipe.params(shapes, np.arange(6), seed=2)
    assert params.colour_op.shape == (6, 5)
    got = pipe(flat, offsets, shapes, params)
    without = Pipeline(ops[:-1])
    plain = without(flat, offsets, shapes, params)
    for k in range(6):
        top, left, h, w = params.erase[k]
        box = np.zeros((10, 10), bool)
        box[top : top + h, left : left + w] = True
        assert (got[k][:, box] == np.float32(0.25)).all()
        np.testing.assert_array_equal(got[k][:, ~box], plain[k][:, ~box])
