"""Output dtypes: float16 and bfloat16 bit patterns, uint8 casts."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from prepkit.augment import Normalize, Pipeline, RandomResizedCrop, ToDtype, bits
from prepkit.augment import cpu as cpu_kernels

from .helpers import pack, random_images


@njit(cache=False)
def _convert(values, kind, out):  # type: ignore[no-untyped-def]
    for i in range(values.size):
        u = bits.float32_bits(values[i])
        out[i] = cpu_kernels.float16_from_bits(u) if kind == 1 else cpu_kernels.bfloat16_from_bits(u)


def _interesting_floats() -> np.ndarray:
    rs = np.random.default_rng(0)
    random_bits = rs.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65519.99, 65520.0, 2.0**-24, 2.0**-25,
                         2.0**-25 * 1.0000001, 1.5 * 2.0**-24, 2.5 * 2.0**-24, 6.1e-5, 1.0 + 2.0**-11,
                         1.0 + 3 * 2.0**-11, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 3.4e38, 1e-40],
                        dtype=np.float32)  # fmt: skip
    scaled = (rs.standard_normal(100_000) * 10.0 ** rs.uniform(-8, 6, 100_000)).astype(np.float32)
    return np.concatenate([random_bits, specials, -specials, scaled])


def test_float16_bits_match_numpy() -> None:
    values = _interesting_floats()
    out = np.zeros(values.size, np.uint16)
    _convert(values, 1, out)
    with np.errstate(over="ignore"):
        want = values.astype(np.float16).view(np.uint16)
    nan = np.isnan(values)
    np.testing.assert_array_equal(out[~nan], want[~nan])
    assert np.isnan(out[nan].view(np.float16)).all()


def test_bfloat16_bits_match_torch() -> None:
    torch = pytest.importorskip("torch")
    values = _interesting_floats()
    out = np.zeros(values.size, np.uint16)
    _convert(values, 2, out)
    want = torch.from_numpy(values).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    nan = np.isnan(values)
    np.testing.assert_array_equal(out[~nan], want[~nan])
    assert torch.isnan(torch.from_numpy(out[nan].view(np.int16)).view(torch.bfloat16)).all()


OPS = [RandomResizedCrop(12), ToDtype("float32", scale=True), Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]


def _run(dtype: str | None) -> np.ndarray:
    images = random_images(0, [(30, 40), (25, 17), (64, 48)], 3)
    flat, offsets, shapes = pack(images)
    pipe = Pipeline(OPS + ([ToDtype(dtype)] if dtype else []))
    return pipe(flat, offsets, shapes, pipe.params(shapes, [0, 1, 2], seed=5))


def test_float16_output_is_the_rounded_float32_output() -> None:
    f16 = _run("float16")
    assert f16.dtype == np.float16
    np.testing.assert_array_equal(f16, _run(None).astype(np.float16))


def test_bfloat16_output_is_torchs_rounding_of_the_float32_output() -> None:
    torch = pytest.importorskip("torch")
    bf16 = _run("bfloat16")
    assert bf16.dtype == np.uint16  # bit pattern: tensor.view(torch.bfloat16)
    as_torch = torch.from_numpy(bf16.view(np.int16)).view(torch.bfloat16)
    want = torch.from_numpy(_run(None)).to(torch.bfloat16)
    assert torch.equal(as_torch, want)


def test_float_to_uint8_follows_torchvision_scaling_and_saturates() -> None:
    images = [np.array([[[0], [1], [127], [254], [255]]], np.uint8).reshape(1, 5, 1)]
    flat, offsets, shapes = pack(images)
    pipe = Pipeline([ToDtype("float32", scale=True), ToDtype("uint8", scale=True)])
    out = pipe(flat, offsets, shapes, pipe.params(shapes, [0]))
    np.testing.assert_array_equal(out.ravel(), [0, 1, 127, 254, 255])  # x/255*255.999 truncated
    shifted = Pipeline([ToDtype("float32", scale=True), Normalize((0.5,), (0.25,)), ToDtype("uint8")])
    out = shifted(flat, offsets, shapes, shifted.params(shapes, [0]))
    # (x/255 - 0.5) / 0.25 in [-2, 2]: negatives saturate to 0, truncation elsewhere
    np.testing.assert_array_equal(out.ravel(), [0, 0, 0, 1, 2])
