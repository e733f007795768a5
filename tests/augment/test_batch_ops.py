"""MixUp and CutMix against torchvision's definitions written as numpy equations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prepkit.augment import CutMix, MixUp, Pipeline, RandomResizedCrop
from prepkit.augment.batch import split_batch_ops
from prepkit.errors import PipelineError


def _batch(layout: str = "NCHW", dtype: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    rs = np.random.default_rng(0)
    shape = (4, 3, 6, 7) if layout == "NCHW" else (4, 6, 7, 3)
    return rs.random(shape).astype(dtype), np.array([0, 2, 1, 2])


def _onehot(labels: np.ndarray, k: int) -> np.ndarray:
    return np.eye(k, dtype=np.float64)[labels]


def test_mixup_is_the_torchvision_blend_with_the_rolled_batch() -> None:
    images, labels = _batch()
    op = MixUp(alpha=0.4, num_classes=3)
    lam = op.params((6, 7), seed=1, epoch=2, number=5).lam
    got, got_labels = op(images, labels, seed=1, epoch=2, number=5)
    # torchvision: inpt.roll(1, 0).mul_(1.0 - lam).add_(inpt.mul(lam)), labels alike.
    want = np.roll(images, 1, axis=0).astype(np.float64) * (1 - lam) + images * lam
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    want_labels = np.roll(_onehot(labels, 3), 1, axis=0) * (1 - lam) + _onehot(labels, 3) * lam
    np.testing.assert_allclose(got_labels, want_labels, atol=1e-6)
    assert got_labels.dtype == np.float32 and got_labels.shape == (4, 3)
    np.testing.assert_allclose(got_labels.sum(axis=1), 1.0, atol=1e-6)


def test_mixup_float16_and_refuses_uint8() -> None:
    images, labels = _batch(dtype=np.float16)
    got, _ = MixUp(num_classes=3)(images, labels)
    lam = MixUp(num_classes=3).params((6, 7)).lam
    want = np.roll(images, 1, axis=0).astype(np.float32) * (1 - lam) + images.astype(np.float32) * lam
    np.testing.assert_allclose(got.astype(np.float32), want, atol=2e-3)
    with pytest.raises(PipelineError, match="float"):
        MixUp(num_classes=3)((images * 255).astype(np.uint8), labels)


@pytest.mark.parametrize("op", [MixUp(alpha=0.4, num_classes=3), CutMix(alpha=1.0, num_classes=3)])
def test_a_permuted_batch_mixes_like_its_contiguous_copy(op) -> None:
    """A channels-last batch transposed to NCHW (a view, not C-contiguous): MixUp had given
    it an output of the same strides, which its kernel could not compile for."""
    images, labels = _batch("NHWC")
    permuted = images.transpose(0, 3, 1, 2)
    assert not permuted.flags.c_contiguous
    got, got_labels = op(permuted, labels, seed=2)
    want, want_labels = op(np.ascontiguousarray(permuted), labels, seed=2)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_labels, want_labels)


def _cutmix_equation(h: int, w: int, lam: float, r_x: int, r_y: int) -> tuple[int, int, int, int, float]:
    """torchvision's CutMix box and adjusted lam, as written in _augment.py."""
    r = 0.5 * math.sqrt(1.0 - lam)
    r_w_half, r_h_half = int(r * w), int(r * h)
    x1, y1 = max(r_x - r_w_half, 0), max(r_y - r_h_half, 0)
    x2, y2 = min(r_x + r_w_half, w), min(r_y + r_h_half, h)
    return x1, y1, x2, y2, float(1.0 - (x2 - x1) * (y2 - y1) / (w * h))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint8])
def test_cutmix_pastes_the_torchvision_box(layout, dtype) -> None:
    images, labels = _batch(layout, np.float32)
    images = (images * 200).astype(dtype)
    op = CutMix(alpha=1.0, num_classes=4)
    for number in range(6):
        drawn = op.params((6, 7), seed=3, number=number)
        x1, y1, x2, y2 = drawn.box
        # The same box follows from the equation for some centre (r_x, r_y) in the image.
        centres = [(rx, ry) for rx in range(7) for ry in range(6)
                   if _cutmix_equation(6, 7, _lam_of(op, number), rx, ry)[:4] == drawn.box]  # fmt: skip
        assert centres, drawn
        assert drawn.lam == pytest.approx(_cutmix_equation(6, 7, _lam_of(op, number), *centres[0])[4])
        got, got_labels = op(images, labels, layout=layout, seed=3, number=number)
        want = images.copy()
        rolled = np.roll(images, 1, axis=0)
        if layout == "NCHW":
            want[:, :, y1:y2, x1:x2] = rolled[:, :, y1:y2, x1:x2]
        else:
            want[:, y1:y2, x1:x2] = rolled[:, y1:y2, x1:x2]
        np.testing.assert_array_equal(got, want)
        assert got.dtype == images.dtype
        lam = drawn.lam
        np.testing.assert_allclose(got_labels, np.roll(_onehot(labels, 4), 1, 0) * (1 - lam) + _onehot(labels, 4) * lam, atol=1e-6)


def _lam_of(op: CutMix, number: int) -> float:
    """The Beta draw CutMix made (MixUp with the same alpha draws the same first number)."""
    return MixUp(alpha=op.alpha).params((1, 1), seed=3, number=number).lam


def test_draws_depend_on_seed_epoch_and_batch_number_only() -> None:
    op = CutMix(alpha=1.0, num_classes=2)
    assert op.params((32, 32), seed=1, epoch=0, number=3) == op.params((32, 32), seed=1, epoch=0, number=3)
    draws = {MixUp().params((32, 32), seed=1, epoch=e, number=n).lam for e in range(3) for n in range(5)}
    assert len(draws) == 15
    lams = [MixUp(alpha=0.2).params((1, 1), number=n).lam for n in range(400)]
    # Beta(0.2, 0.2) has mean 1/2 and piles up near 0 and 1.
    assert abs(np.mean(lams) - 0.5) < 0.08 and np.mean((np.array(lams) < 0.1) | (np.array(lams) > 0.9)) > 0.4


def test_bad_labels_and_arguments_are_refused() -> None:
    images, labels = _batch()
    with pytest.raises(PipelineError, match="-1"):
        MixUp(num_classes=3)(images, np.array([0, -1, 1, 2]))
    with pytest.raises(PipelineError, match=r"\[0, 3\)"):
        CutMix(num_classes=3)(images, np.array([0, 3, 1, 2]))
    with pytest.raises(PipelineError, match="num_classes"):
        MixUp()(images, labels)
    with pytest.raises(PipelineError, match="alpha"):
        MixUp(alpha=0.0)
    with pytest.raises(PipelineError, match="batch op"):
        Pipeline([RandomResizedCrop(4), MixUp(num_classes=3)])
    with pytest.raises(PipelineError, match="only batch ops"):
        split_batch_ops([MixUp(num_classes=3), RandomResizedCrop(4)])
    ops, batch_ops = split_batch_ops([RandomResizedCrop(4), CutMix(num_classes=2)])
    assert len(ops) == 1 and isinstance(batch_ops[0], CutMix)


def test_mixed_float_labels_mix_again() -> None:
    images, labels = _batch()
    once, soft = MixUp(num_classes=3)(images, labels, number=1)
    _, twice = CutMix()(once, soft, number=2)
    assert twice.shape == (4, 3)
    np.testing.assert_allclose(twice.sum(axis=1), 1.0, atol=1e-6)
