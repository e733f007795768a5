"""RandomErasing: torchvision's box sampling, fills, order rules (end-to-end torch checks are
in test_torch_equivalence.py)."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit.augment import (
    Normalize,
    Pipeline,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToDtype,
    op_from_dict,
    rng,
)
from prepkit.augment.erasing import normal_at, reference_normals
from prepkit.errors import PipelineError

from . import torchvision_like
from .helpers import pack, random_images

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def test_boxes_follow_torchvision_get_params() -> None:
    op = RandomErasing(p=0.7, scale=(0.05, 0.6), ratio=(0.2, 4.0))
    indices = np.arange(300)
    heights, widths = 5 + indices % 23, 3 + (indices * 7) % 31
    shapes = np.stack([heights, widths, np.full(300, 3)], axis=1)
    params = Pipeline([op]).params(shapes, indices, seed=4, epoch=1)
    u = rng.uniform(4, 1, indices, 0, 41)
    erased = 0
    for k in indices:
        box = torchvision_like.erasing_get_params(int(heights[k]), int(widths[k]), op.scale, op.ratio, u[k])
        want = box if (box is not None and u[k, 0] < op.p) else (0, 0, 0, 0)
        assert tuple(params.erase[k]) == want, k
        erased += want[2] > 0
    assert 100 < erased < 240  # p = 0.7 of 300, minus samples where no attempt fits


def test_constant_fill_carries_through_later_value_ops() -> None:
    images = random_images(1, [(10, 12), (9, 9)], 3)
    flat, offsets, shapes = pack(images)
    ops = [Resize((8, 8)), RandomErasing(1.0, value=(10, 20, 30)), ToDtype("float32", scale=True), Normalize(MEAN, STD)]
    pipe = Pipeline(ops)
    params = pipe.params(shapes, [0, 1], seed=2)
    got = pipe(flat, offsets, shapes, params)
    plain = Pipeline([op for op in ops if not isinstance(op, RandomErasing)])(flat, offsets, shapes, params)
    assert (params.erase[:, 2] > 0).all()
    for k in range(2):
        top, left, h, w = params.erase[k]
        box = np.zeros((8, 8), bool)
        box[top : top + h, left : left + w] = True
        want_fill = (np.array([10, 20, 30]) / 255.0 - MEAN) / STD
        np.testing.assert_allclose(got[k][:, box], np.repeat(want_fill[:, None], box.sum(), 1), atol=1e-5)
        np.testing.assert_array_equal(got[k][:, ~box], plain[k][:, ~box])


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_random_fill_is_standard_normal_and_matches_the_oracle(layout) -> None:
    images = random_images(2, [(40, 40)] * 3, 3)
    flat, offsets, shapes = pack(images)
    pipe = Pipeline([ToDtype("float32", scale=True), RandomErasing(1.0, scale=(0.3, 0.3), value="random")], layout=layout)
    params = pipe.params(shapes, [5, 6, 7], seed=9)
    got = pipe(flat, offsets, shapes, params)
    values = []
    for k in range(3):
        top, left, h, w = params.erase[k]
        assert h > 0
        box = got[k][:, top : top + h, left : left + w] if layout == "NCHW" else got[k][top : top + h, left : left + w].transpose(2, 0, 1)
        want = reference_normals(int(params.erase_key[k]), 3, h, w)
        np.testing.assert_allclose(box, want, rtol=1e-5, atol=1e-5)
        values.append(box.ravel())
    sample = np.concatenate(values)
    assert abs(sample.mean()) < 0.1 and abs(sample.std() - 1) < 0.1
    with np.errstate(over="ignore"):  # uint64 wrap-around is intended (numba wraps silently)
        first = normal_at(np.uint64(int(params.erase_key[0])), 0)
    assert first == pytest.approx(float(reference_normals(int(params.erase_key[0]), 1, 1, 1)[0, 0, 0]))


def test_order_rules_and_round_trip() -> None:
    with pytest.raises(PipelineError, match="after RandomErasing"):
        Pipeline([RandomErasing(), RandomResizedCrop(4)])
    with pytest.raises(PipelineError, match="after RandomErasing"):
        Pipeline([ToDtype("float32", scale=True), RandomErasing(), RandomHorizontalFlip()])
    with pytest.raises(PipelineError, match="float data"):
        Pipeline([RandomErasing(value="random")])
    with pytest.raises(PipelineError, match="value"):
        RandomErasing(value="noise")
    with pytest.raises(PipelineError, match="1 or 3 values"):
        pipe = Pipeline([RandomErasing(1.0, value=(1, 2))])
        images = random_images(0, [(6, 6)], 3)
        flat, offsets, shapes = pack(images)
        pipe(flat, offsets, shapes, pipe.params(shapes, [0]))
    for op in (RandomErasing(), RandomErasing(0.3, (0.1, 0.2), (0.5, 2.0), "random"), RandomErasing(value=(1, 2, 3))):
        assert op_from_dict(op.to_dict()) == op
