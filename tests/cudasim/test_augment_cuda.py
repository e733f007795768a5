"""The CUDA kernels (run in numba's simulator) equal the numba CPU kernels.

Images are tiny because the simulator runs every GPU thread as Python.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from prepkit.augment import (
    RGB,
    CenterCrop,
    Grayscale,
    Normalize,
    Pipeline,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToDtype,
)
from prepkit.cudart import simulated

MEAN, STD = (0.485, 0.456, 0.406, 0.5), (0.229, 0.224, 0.225, 0.25)

SIMULATED = simulated()  # the simulator computes float32 without fused multiply-adds


def _pack(images):
    shapes = np.array([im.shape for im in images], np.int32)
    offsets = np.concatenate([[0], np.cumsum([im.size for im in images])[:-1]]).astype(np.int64)
    return np.concatenate([im.ravel() for im in images]), offsets, shapes


def _batch(channels: int, seed: int = 0):
    rs = np.random.default_rng(seed)
    sizes = [(12, 10), (7, 9), (1, 3)]
    return _pack([rs.integers(0, 256, (h, w, channels), dtype=np.uint8) for h, w in sizes])


def _pipelines(channels: int) -> list[Pipeline]:
    norm = Normalize(MEAN[:channels], STD[:channels])
    return [
        Pipeline([RandomResizedCrop((6, 5)), RandomHorizontalFlip(), ToDtype("float32", scale=True), norm]),
        Pipeline([ToDtype("float32", scale=True), Resize((4, 8), antialias=False), RandomHorizontalFlip(1.0)], layout="NHWC"),
        Pipeline([Resize((8, 6)), CenterCrop((5, 4)), ToDtype("bfloat16", scale=True)]),
        Pipeline([RandomHorizontalFlip(), RandomResizedCrop(3), ToDtype("float16", scale=True), norm]),
        Pipeline([RandomResizedCrop(4), RandomHorizontalFlip()], layout="NHWC"),
    ]


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_cuda_kernel_equals_cpu_kernel(channels) -> None:
    flat, offsets, shapes = _batch(channels, seed=channels)
    d_flat, d_offsets = cuda.to_device(flat), cuda.to_device(offsets)
    for pipe in _pipelines(channels):
        params = pipe.params(shapes, [3, 1, 2], seed=11, epoch=1)
        want = pipe(flat, offsets, shapes, params, device="cpu")
        got = pipe(d_flat, d_offsets, shapes, params, device="cuda").copy_to_host()
        assert got.dtype == want.dtype and got.shape == want.shape
        if want.dtype == np.uint8 and not SIMULATED:
            # A real GPU fuses a * b + c (NVVM's default -fma=1, which numba-cuda cannot turn
            # off): a value within an ulp of a rounding point may land one level apart.
            assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
            assert (got == want).mean() > 0.999
        elif want.dtype == np.uint8:
            np.testing.assert_array_equal(got, want)
        elif pipe.dtype == "bfloat16":  # bit patterns: at most one unit in the last place
            assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
        else:
            np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=1e-3, rtol=1e-3)


def test_cuda_mask_equals_cpu_mask() -> None:
    flat, offsets, shapes = _batch(1)
    pipe = Pipeline([RandomHorizontalFlip(), RandomResizedCrop((7, 6))])
    params = pipe.params(shapes, [0, 1, 2], seed=4)
    for mode in ("nearest", "nearest-exact"):
        want = pipe.apply_mask(flat, offsets, shapes, params, mode=mode)
        got = pipe.apply_mask(cuda.to_device(flat), cuda.to_device(offsets), shapes, params, device="cuda", mode=mode)
        np.testing.assert_array_equal(got.copy_to_host(), want)


def test_cuda_writes_into_a_given_output() -> None:
    flat, offsets, shapes = _batch(3)
    pipe = Pipeline([RandomResizedCrop(4), ToDtype("float32", scale=True)])
    params = pipe.params(shapes, [0, 1, 2])
    out = cuda.to_device(np.full((3, 3, 4, 4), np.nan, np.float32))
    pipe(cuda.to_device(flat), cuda.to_device(offsets), shapes, params, device="cuda", out=out)
    np.testing.assert_allclose(out.copy_to_host(), pipe(flat, offsets, shapes, params), atol=1e-5)


def test_cuda_split_equals_whole() -> None:
    flat, offsets, shapes = _batch(3, seed=8)
    pipe = Pipeline([RandomHorizontalFlip(), RandomResizedCrop((5, 6)), ToDtype("float32", scale=True),
                     Normalize(MEAN[:3], STD[:3])])  # fmt: skip
    whole = pipe(flat, offsets, shapes, pipe.params(shapes, [0, 1, 2], seed=2))
    first, second = pipe.split(2)  # crop and flip in uint8 on the CPU, the rest on the "GPU"
    mflat, moffsets, mshapes = first.apply_packed(flat, offsets, shapes, first.params(shapes, [0, 1, 2], seed=2))
    params = second.params(mshapes, [0, 1, 2], seed=2)
    got = second(cuda.to_device(mflat), cuda.to_device(moffsets), mshapes, params, device="cuda").copy_to_host()
    np.testing.assert_allclose(got, whole, atol=1e-3)


def test_host_pixels_are_refused_on_cuda() -> None:
    flat, offsets, shapes = _batch(3)
    pipe = Pipeline([RandomResizedCrop(4)])
    with pytest.raises(ValueError, match="device array"):
        pipe(flat, offsets, shapes, pipe.params(shapes, [0, 1, 2]), device="cuda")


def test_cuda_runs_on_a_given_stream() -> None:
    flat, offsets, shapes = _batch(4, seed=5)
    pipe = Pipeline([RandomResizedCrop((5, 3)), ToDtype("float32", scale=True)])
    params = pipe.params(shapes, [0, 1, 2], seed=1)
    stream = cuda.stream()
    got = pipe(cuda.to_device(flat, stream=stream), cuda.to_device(offsets, stream=stream), shapes, params,
               device="cuda", stream=stream)  # fmt: skip
    stream.synchronize()
    np.testing.assert_allclose(got.copy_to_host(), pipe(flat, offsets, shapes, params), atol=1e-3)


@pytest.mark.parametrize("first", [RGB(), Grayscale(), Grayscale(3)], ids=repr)
def test_cuda_channel_ops_on_a_mixed_batch_equal_cpu(first) -> None:
    rs = np.random.default_rng(2)
    images = [rs.integers(0, 256, (h, w, c), dtype=np.uint8) for (h, w), c in [((5, 4), 1), ((3, 6), 3), ((4, 4), 4)]]
    flat, offsets, shapes = _pack(images)
    pipe = Pipeline([first, RandomResizedCrop((3, 4)), RandomHorizontalFlip()], layout="NHWC")
    params = pipe.params(shapes, [0, 1, 2], seed=3)
    want = pipe(flat, offsets, shapes, params)
    got = pipe(cuda.to_device(flat), cuda.to_device(offsets), shapes, params, device="cuda").copy_to_host()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_cuda_mixup_and_cutmix_equal_cpu(layout) -> None:
    from prepkit.augment import CutMix, MixUp

    rs = np.random.default_rng(4)
    images = rs.random((3, 2, 3, 4) if layout == "NCHW" else (3, 3, 4, 2)).astype(np.float32)
    labels = np.array([1, 0, 2])
    for op in (MixUp(alpha=0.5, num_classes=3), CutMix(alpha=1.0, num_classes=3)):
        want, want_labels = op(images, labels, layout=layout, seed=2, number=1)
        d_images = cuda.to_device(images)
        got, got_labels = op(d_images, labels, layout=layout, seed=2, number=1)
        assert got is d_images  # mixed in place on the device
        np.testing.assert_allclose(got.copy_to_host(), want, atol=1e-6)
        np.testing.assert_array_equal(got_labels, want_labels)


def test_cuda_cutmix_of_16_bit_images_and_mixup_refuses_them() -> None:
    from prepkit.augment import CutMix, MixUp

    images = np.arange(3 * 1 * 4 * 4, dtype=np.float16).reshape(3, 1, 4, 4)
    want, _ = CutMix(num_classes=2)(images, np.array([0, 1, 1]), number=3)
    got, _ = CutMix(num_classes=2)(cuda.to_device(images.view(np.uint16)), np.array([0, 1, 1]), number=3)
    np.testing.assert_array_equal(got.copy_to_host().view(np.float16), want)
    with pytest.raises(ValueError, match="float32"):
        MixUp(num_classes=2)(cuda.to_device(images.view(np.uint16)), np.array([0, 1, 1]))


@pytest.mark.filterwarnings("ignore:overflow encountered")  # the simulator runs the uint64 hash as numpy scalars
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_cuda_random_erasing_equals_cpu(layout) -> None:
    from prepkit.augment import RandomErasing

    flat, offsets, shapes = _batch(3, seed=6)
    pipes = [
        Pipeline([RandomResizedCrop((6, 5)), ToDtype("float32", scale=True), RandomErasing(1.0, value="random")], layout=layout),
        Pipeline([Resize((5, 6)), RandomErasing(1.0, (0.2, 0.4), value=(9, 300, 4)), ToDtype("bfloat16", scale=True)], layout=layout),
        Pipeline([RandomResizedCrop(5), RandomErasing(0.9, value=77)], layout=layout),
    ]
    for pipe in pipes:
        params = pipe.params(shapes, [0, 1, 2], seed=5)
        assert params.erase[:, 2].max() > 0
        want = pipe(flat, offsets, shapes, params)
        got = pipe(cuda.to_device(flat), cuda.to_device(offsets), shapes, params, device="cuda").copy_to_host()
        if pipe.dtype == "bfloat16":
            assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
        else:
            np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=1e-5)


# Every step code of the colour stage, in sequences that chain the statistics steps.
_COLOUR_STEPS = [
    ([1, 2, 3, 4, 5], [1.3, 0.6, 1.7, 0.23, 1.8]),  # brightness, contrast, saturation, hue, sharpness
    ([6, 7, 8, 9, 0], [3.0, 0.45, 0.0, 0.0, 0.0]),  # posterize, solarize, autocontrast, equalize
    ([5, 9, 2, 8, 4], [0.2, 0.0, 1.9, 0.0, -0.4]),
]


@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("float_stage", [False, True], ids=["uint8", "float32"])
def test_cuda_colour_stage_equals_cpu(channels, float_stage) -> None:
    from dataclasses import replace

    from prepkit.augment import ColorJitter, RandAugment, TrivialAugmentWide

    rs = np.random.default_rng(channels)
    images = [rs.integers(0, 256, (h, w, channels), dtype=np.uint8) for h, w in [(9, 8), (7, 7), (8, 10)]]
    images[1][:4] = 200  # a large flat patch: ties in hue, a tall histogram bin
    flat, offsets, shapes = _pack(images)
    d_flat, d_offsets = cuda.to_device(flat), cuda.to_device(offsets)
    to_float = [ToDtype("float32", scale=True)]
    before, after = (to_float, []) if float_stage else ([], to_float)
    fixed = Pipeline([RandomResizedCrop((6, 7)), *before, RandAugment(num_ops=5), *after,
                      Normalize(MEAN[:channels], STD[:channels])])  # fmt: skip
    params = fixed.params(shapes, [0, 1, 2], seed=1)
    params = replace(params, colour_op=np.array([s[0] for s in _COLOUR_STEPS], np.int32),
                     colour_arg=np.array([s[1] for s in _COLOUR_STEPS], np.float64))  # fmt: skip
    drawn = Pipeline([Resize((6, 7)), *before, ColorJitter(0.5, 0.5, 0.5, 0.4), TrivialAugmentWide()], layout="NHWC")
    for pipe, p in ((fixed, params), (drawn, drawn.params(shapes, [4, 5, 6], seed=2))):
        want = pipe(flat, offsets, shapes, p)
        got = pipe(d_flat, d_offsets, shapes, p, device="cuda").copy_to_host()
        assert got.dtype == want.dtype
        if want.dtype == np.uint8 and not SIMULATED:
            # A real GPU fuses a * b + c (NVVM's default -fma=1, which numba-cuda cannot turn
            # off): a value within an ulp of a rounding point may land one level apart.
            assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
            assert (got == want).mean() > 0.999
        elif want.dtype == np.uint8:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("size", [(7, 7), (9, 8)], ids=["small-grid", "gemm-grid"])  # under / over 67 pixels
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_cuda_geometric_steps_equal_cpu(size, interpolation) -> None:
    from dataclasses import replace

    from prepkit.augment import TrivialAugmentWide
    from prepkit.augment.colour import geometric_step

    h, w = size
    rs = np.random.default_rng(h)
    images = [rs.integers(0, 256, (10, 11, 3), dtype=np.uint8) for _ in range(3)]
    flat, offsets, shapes = _pack(images)
    op = TrivialAugmentWide(interpolation=interpolation, fill=(250, 3, 128) if interpolation == "bilinear" else None)
    steps = [[("ShearX", 0.5), ("Rotate", 90.0)], [("TranslateY", -3.7), ("Rotate", 33.0)],
             [("ShearY", -0.3), ("Rotate", -180.0)]]  # fmt: skip
    rows = [[geometric_step(name, m, h, w, op) for name, m in sample] for sample in steps]
    for float_stage in (False, True):
        to_float = ToDtype("float32", scale=True)
        ops = [Resize(size), to_float, op] if float_stage else [Resize(size), op, to_float]
        pipe = Pipeline(ops, layout="NHWC")
        params = replace(
            pipe.params(shapes, [0, 1, 2]),
            colour_op=np.array([[code for code, _ in sample] for sample in rows], np.int32),
            colour_arg=np.zeros((3, 2)), colour_warp=np.array([[row for _, row in sample] for sample in rows]),
        )  # fmt: skip
        want = pipe(flat, offsets, shapes, params)
        got = pipe(cuda.to_device(flat), cuda.to_device(offsets), shapes, params, device="cuda").copy_to_host()
        np.testing.assert_array_equal(got, want)
        masks = pipe.apply_mask(flat, offsets, shapes, params)
        got_masks = pipe.apply_mask(cuda.to_device(flat), cuda.to_device(offsets), shapes, params, device="cuda")
        np.testing.assert_array_equal(got_masks.copy_to_host(), masks)
