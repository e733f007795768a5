"""Auto-augment's geometric ops (ShearX/Y, TranslateX/Y, Rotate) in the colour stage:
each against torchvision's affine / rotate transcribed in torch (grid_sample as torchvision
calls it), the numba kernel against the numpy oracle, the 14-op draw, masks and arguments."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit.augment import CenterCrop, Pipeline, RandAugment, ToDtype, TrivialAugmentWide, op_from_dict, reference
from prepkit.augment import warp_math as wm
from prepkit.augment.colour import AUGMENT_SPACE, colour_cpu, geometric_step, magnitudes
from prepkit.augment.cpu import KIND_FLOAT32, KIND_UINT8
from prepkit.errors import PipelineError

from . import torchvision_like
from .helpers import pack, random_images

GEOMETRIC = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")
SIZES = [(7, 9), (13, 13), (31, 17), (5, 6), (16, 16)]  # odd, square (rot90 paths), under 67 pixels


def _stage(images: list[np.ndarray], codes: np.ndarray, warp: np.ndarray, is_u8: bool) -> np.ndarray:
    """Run the CPU colour kernel on same-sized float32 HWC images; returns float32 NHWC."""
    n, (h, w, c) = len(images), images[0].shape
    scratch = np.stack(images).astype(np.float32).reshape(-1)
    out = np.empty(scratch.shape[0], np.uint8 if is_u8 else np.float32)
    ones, zeros = np.ones(c, np.float32), np.zeros(c, np.float32)
    colour_cpu(scratch, codes, np.zeros(codes.shape), warp, is_u8, c, h, w, ones, zeros,
               KIND_UINT8 if is_u8 else KIND_FLOAT32, False, out)  # fmt: skip
    return out.reshape(n, h, w, c).astype(np.float32)


def _ties(row: np.ndarray, h: int, w: int) -> np.ndarray:
    """Output pixels whose source point (the step's inverse matrix, in float64) lies within
    1e-3 of a rounding tie (x.5) in x or y: where nearest's choice turns on float32 rounding."""
    oy, ox = np.mgrid[0:h, 0:w].astype(np.float64)
    xb, yb = ox - 0.5 * (w - 1), oy - 0.5 * (h - 1)
    a = row.astype(np.float64)
    ix = (xb * a[0] + yb * a[1] + a[2] + 1) * (0.5 * w) - 0.5
    iy = (xb * a[3] + yb * a[4] + a[5] + 1) * (0.5 * h) - 0.5
    return (np.abs(ix - np.floor(ix) - 0.5) < 1e-3) | (np.abs(iy - np.floor(iy) - 0.5) < 1e-3)


def _assert_matches_torch(got: np.ndarray, want: np.ndarray, what: str, *, ties: np.ndarray | None = None,
                          close: float = 0.0) -> None:
    """got equals torch's result value for value, except where torch's own float32 rounding
    differs between CPU builds (measured: the same torch 2.13 wheel on an AMD EPYC VM, AVX2,
    and a Xeon VM, AVX-512, where these tests were exact): nearest pixels on a rounding tie
    (`ties`, a pixel mask; at most 5% of the values) and bilinear values off by at most `close`
    times the largest value (at least 1: a coordinate a few ulps away moves a value in
    proportion to the range it blends, fill included)."""
    differ = got != want
    if ties is not None:
        assert differ.mean() <= 0.05, f"{what}: {differ.sum()} of {differ.size} values differ from torch"
        assert not (differ.any(axis=-1) & ~ties).any(), f"{what}: a pixel off a rounding tie differs from torch"
    else:
        off = np.abs(got - want) / max(1.0, float(np.abs(want).max()))
        assert off.max(initial=0.0) <= close, f"{what}: differs from torch by {off.max()} (more than {close})"


def _cases(wide: bool, h: int, w: int) -> list[tuple[str, float]]:
    """Every (op, signed magnitude) of the op's table, plus rotate's multiples of 90."""
    cases = []
    for name in GEOMETRIC:
        table = magnitudes(name, 31, wide, h, w)
        assert table is not None
        cases += [(name, float(m)) for m in table] + [(name, -float(m)) for m in table[1::3]]
    return cases + [("Rotate", a) for a in (90.0, -90.0, 180.0, -180.0, 270.0, 45.0)]


def _torch(image: np.ndarray, name: str, magnitude: float, interpolation: str, fill, is_u8: bool) -> np.ndarray:
    import torch

    img = torch.from_numpy(image).permute(2, 0, 1).contiguous()
    img = img if is_u8 else img.to(torch.float32) / 255
    out = torchvision_like.auto_apply(img, name, magnitude, interpolation, fill)
    return out.permute(1, 2, 0).to(torch.float32).numpy()


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("fill", [None, 0, (200.0, 17.0, 90.5)], ids=["no-fill", "fill-0", "fill-rgb"])
def test_nearest_uint8_equals_torch_affine_exactly(channels, fill) -> None:
    if fill is not None and not isinstance(fill, int) and channels == 1:
        fill = (200.0,)
    op = TrivialAugmentWide(fill=fill)
    for s, (h, w) in enumerate(SIZES):
        image = random_images(s, [(h, w)], channels)[0]
        for wide in (True, False):
            cases = _cases(wide, h, w)
            rows = [geometric_step(name, m, h, w, op if wide else RandAugment(fill=fill)) for name, m in cases]
            codes = np.array([[code] for code, _ in rows], np.int32)
            got = _stage([image] * len(cases), codes, np.stack([row for _, row in rows])[:, None], True)
            for k, (name, m) in enumerate(cases):
                want = _torch(image, name, m, "nearest", None if fill is None else list(np.atleast_1d(fill)), True)
                _assert_matches_torch(got[k], want, f"{name}({m}) on {h}x{w}x{channels}",
                                      ties=_ties(rows[k][1], h, w))


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("is_u8", [True, False], ids=["uint8", "float32"])
@pytest.mark.parametrize("fill", [None, 128.0, 0.25], ids=["no-fill", "fill-128", "fill-0.25"])
def test_bilinear_and_float_data_equal_torch(channels, is_u8, fill) -> None:
    # torch's compiled grid_sample fuses its multiply-adds (the unnormalize and the corner sum);
    # prepkit fuses the same ones, so bilinear matches value for value too.
    op = TrivialAugmentWide(interpolation="bilinear", fill=fill)
    for s, (h, w) in enumerate(SIZES):
        image = random_images(10 + s, [(h, w)], channels)[0]
        data = image.astype(np.float32) if is_u8 else image.astype(np.float32) / 255
        cases = _cases(True, h, w)
        rows = [geometric_step(name, m, h, w, op) for name, m in cases]
        codes = np.array([[code] for code, _ in rows], np.int32)
        got = _stage([data] * len(cases), codes, np.stack([row for _, row in rows])[:, None], is_u8)
        for k, (name, m) in enumerate(cases):
            want = _torch(image, name, m, "bilinear", fill, is_u8)
            _assert_matches_torch(got[k], want, f"{name}({m}) on {h}x{w}x{channels}", close=1 / 200 if is_u8 else 1e-4)  # uint8: one level
    # nearest on float data copies values: exact
    image = random_images(3, [(13, 13)], channels)[0].astype(np.float32) / 255
    code, row = geometric_step("Rotate", 33.0, 13, 13, TrivialAugmentWide())
    got = _stage([image], np.array([[code]], np.int32), row[None, None], False)[0]
    np.testing.assert_array_equal(got, _torch((image * 255).astype(np.uint8), "Rotate", 33.0, "nearest", None, False))


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
def test_cpu_kernel_equals_numpy_oracle(interpolation) -> None:
    rng = np.random.default_rng(4)
    for s, (h, w) in enumerate(SIZES):
        for is_u8 in (True, False):
            images = [img.astype(np.float32) / (1 if is_u8 else 255) for img in random_images(20 + s, [(h, w)] * 12, 3)]
            picks = [(GEOMETRIC[k % 5], float(rng.uniform(-40, 40))) for k in range(12)]
            rows = [geometric_step(name, m, h, w, TrivialAugmentWide(interpolation=interpolation,
                                                                     fill=(9.0, 99.0, 250.0) if k % 2 else None))
                    for k, (name, m) in enumerate(picks)]  # fmt: skip
            codes = np.array([[code, code] for code, _ in rows], np.int32)  # two warps in a row
            warp = np.stack([np.stack([row, row]) for _, row in rows])
            got = _stage(images, codes, warp, is_u8)
            for k in range(12):
                want = reference.colour(images[k], codes[k], np.zeros(2), is_u8, warp[k])
                np.testing.assert_allclose(got[k], want, rtol=0, atol=0 if is_u8 else 1e-6, err_msg=str(picks[k]))


def test_all_fourteen_ops_are_drawn_with_torchvisions_magnitudes() -> None:
    n = 4200
    shapes = np.tile([[12, 10, 3]], (n, 1)).astype(np.int32)
    params = Pipeline([TrivialAugmentWide()]).params(shapes, np.arange(n), seed=3)
    codes, rows = params.colour_op[:, 0], params.colour_warp[:, 0]
    t1, t3, t2, t5 = rows[:, 1], rows[:, 3], rows[:, 2], rows[:, 5]
    affine = codes == wm.AFFINE_NEAREST
    kinds = {
        "ShearX": affine & (t1 != 0) & (t3 == 0),
        "ShearY": affine & (t1 == 0) & (t3 != 0),
        "Rotate": (affine & (t1 != 0) & (t3 != 0)) | (codes == wm.ROTATE_180),
        "TranslateX": affine & (t1 == 0) & (t3 == 0) & (t5 == 0) & (t2 != 0),
        "TranslateY": affine & (t1 == 0) & (t3 == 0) & (t2 == 0) & (t5 != 0),
    }
    expected = n / 14
    for name, hit in kinds.items():
        assert 0.75 * expected < hit.sum() < 1.2 * expected, (name, int(hit.sum()))
    for code in range(1, 10):  # the colour ops but hue (Color is saturation)
        if code != 4:
            assert 0.8 * expected < (codes == code).sum() < 1.2 * expected, code
    # Shears reach tan(atan(0.99)) both ways; translations 32 px (a 1/(w/2) step per pixel).
    shear = kinds["ShearX"]
    assert np.abs(t1[shear]).max() == pytest.approx(0.99 / 5, rel=1e-5) and (t1[shear] > 0).any() and (t1[shear] < 0).any()
    shift = -t2[kinds["TranslateX"]] * 5
    assert shift.min() == pytest.approx(-32) and shift.max() == pytest.approx(32)
    assert np.allclose(shift, np.round(shift), atol=1e-5)  # int(magnitude) pixels
    # RandAugment: the same list, its num_ops columns
    rand = Pipeline([RandAugment(num_ops=2, magnitude=30)]).params(shapes, np.arange(n), seed=3)
    assert rand.colour_op.shape == (n, 2) and (rand.colour_op >= wm.AFFINE_NEAREST).mean() > 0.3
    assert len(AUGMENT_SPACE) == 14 and AUGMENT_SPACE == torchvision_like.AUTO_OPS


def test_magnitude_tables_are_torchvisions_for_geometric_ops() -> None:
    import torch

    for bins in (2, 7, 31):
        for wide in (True, False):
            for name in GEOMETRIC:
                want = torchvision_like.auto_magnitudes(name, bins, wide, 33, 57)
                got = magnitudes(name, bins, wide, 33, 57)
                assert want is not None and got is not None
                np.testing.assert_array_equal(got, want.to(torch.float64).numpy(), err_msg=f"{name} {bins} {wide}")


def test_pipeline_equals_torch_end_to_end_with_fill_and_bilinear() -> None:
    import torch

    images = random_images(2, [(15, 14)] * 60, 3)
    flat, offsets, shapes = pack(images)
    for op in (TrivialAugmentWide(fill=(10, 20, 30)), RandAugment(num_ops=3, magnitude=20, interpolation="bilinear", fill=128)):
        ops = [CenterCrop((13, 11)), op, ToDtype("float32", scale=True)]
        pipe = Pipeline(ops)
        params = pipe.params(shapes, np.arange(60), seed=8, epoch=1)
        got = pipe(flat, offsets, shapes, params)
        assert (params.colour_op >= wm.AFFINE_NEAREST).any()
        differ = 0
        for k in range(60):
            want = torchvision_like.apply(ops, images[k], k, seed=8, epoch=1).to(torch.float32).numpy()
            # Exact but for torch's build-dependent float32 ties (_assert_matches_torch): nearest
            # steps can move a tie pixel by a whole value, so only the share of values is bounded.
            assert (got[k] != want).mean() <= 0.03, f"sample {k}: {params.colour_op[k]}"
            differ += int((got[k] != want).sum())
        assert differ <= 0.01 * got[:60].size


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_masks_move_with_the_geometric_steps(layout) -> None:
    # A 1-channel image used as its own mask: where the stage drew only geometric steps, the
    # image (nearest, no fill) and the mask must come out equal, zeros where uncovered included.
    images = random_images(5, [(12, 12)] * 80, 1)
    for img in images:
        img[img == 0] = 1  # so that zeros in the output can only be uncovered pixels
    flat, offsets, shapes = pack(images)
    pipe = Pipeline([CenterCrop(11), RandAugment(num_ops=2, magnitude=25)], layout=layout)
    params = pipe.params(shapes, np.arange(80), seed=1)
    image_out = pipe(flat, offsets, shapes, params)
    mask_out = pipe.apply_mask(flat, offsets, shapes, params)
    colour_steps = (params.colour_op != 0) & (params.colour_op < wm.AFFINE_NEAREST)
    geometric_only = ~colour_steps.any(axis=1) & (params.colour_op >= wm.AFFINE_NEAREST).any(axis=1)
    assert geometric_only.sum() >= 10
    np.testing.assert_array_equal(mask_out[geometric_only], image_out[geometric_only])
    assert (mask_out[geometric_only] == 0).any()  # something was uncovered
    # Without geometric steps the mask is the plain crop.
    plain = Pipeline([CenterCrop(11)], layout=layout).apply_mask(flat, offsets, shapes, params)
    untouched = ~(params.colour_op >= wm.AFFINE_NEAREST).any(axis=1)
    np.testing.assert_array_equal(mask_out[untouched], plain[untouched])


def test_arguments_round_trip_and_validation() -> None:
    class Mode:  # what torchvision's InterpolationMode.BILINEAR looks like
        value = "bilinear"

    assert TrivialAugmentWide(interpolation=Mode()).interpolation == "bilinear"
    for op in (TrivialAugmentWide(interpolation="bilinear", fill=(1, 2, 3)), RandAugment(3, 4, fill=7)):
        assert op_from_dict(op.to_dict()) == op
    assert RandAugment(fill=7).fill == (7.0,)
    with pytest.raises(PipelineError, match=r"interpolation: Expected 'nearest' or 'bilinear'"):
        TrivialAugmentWide(interpolation="bicubic")
    with pytest.raises(PipelineError, match=r"RandAugment.fill: Expected None, a number"):
        RandAugment(fill={"Image": 3})
    flat, offsets, shapes = pack(random_images(0, [(6, 6)], 1))
    pipe = Pipeline([TrivialAugmentWide(fill=(1, 2, 3))])
    with pytest.raises(PipelineError, match=r"fill: Expected 1 or 1 values for 1-channel images. Got 3"):
        pipe(flat, offsets, shapes, pipe.params(shapes, [0]))
