"""Batch ops: MixUp and CutMix on an augmented batch and its labels (torchvision v2 meaning).

They run after the fused per-sample pipeline, on the whole output batch, because each
image is mixed with its neighbour: as torchvision does, the batch is paired with itself
rolled by one (image i with image i - 1, image 0 with the last one) and one ``lam`` is
drawn per batch from Beta(alpha, alpha). Integer labels become one-hot float32 rows
(N, num_classes) mixed with the same weight.

* ``MixUp``: ``out = lam * x + (1 - lam) * roll(x, 1)`` (float images only, as torchvision).
* ``CutMix``: a box of the rolled batch is pasted into every image; the box is centred at a
  uniform pixel (r_x, r_y) with half-sides ``int(0.5 * sqrt(1 - lam) * W)`` and
  ``int(... * H)``, clipped to the image, and the labels are mixed with
  ``lam' = 1 - box area / image area``.

Parameters are drawn on the host from (seed, epoch, batch number), so a resumed epoch mixes
exactly as the first run did. On the CPU the ops take numpy arrays and return new ones; on
the GPU they take device arrays (numba, torch, CuPy) and work in place with one copy and one
kernel launch on the given stream.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numba import njit, prange

from prepkit.errors import PipelineError

_STREAM_SALT = 0x6D697863  # separates the batch draws from any per-sample stream


class MixParams(NamedTuple):
    """What one batch op draws for a batch: the weight and (CutMix) the box x1, y1, x2, y2."""

    lam: float
    box: tuple[int, int, int, int] | None


def _batch_rng(seed: int, epoch: int, number: int, slot: int) -> np.random.Generator:
    words = [seed & (2**64 - 1), epoch & (2**64 - 1), number, slot, _STREAM_SALT]
    return np.random.default_rng(np.random.SeedSequence(words))


def one_hot(labels: Any, num_classes: int) -> np.ndarray:
    """float32 (N, num_classes) one-hot rows of int labels, or a PipelineError naming the bad one."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise PipelineError(f"labels: Expected a 1-D integer array. Got {labels.dtype} with shape {labels.shape}.")
    bad = (labels < 0) | (labels >= num_classes)
    if bad.any():
        k = int(np.argmax(bad))
        raise PipelineError(
            f"labels: Expected values in [0, {num_classes}) for one-hot mixing. Got {int(labels[k])} at "
            f"batch position {k} (-1 means the sample has no label)."
        )
    rows = np.zeros((labels.shape[0], num_classes), np.float32)
    rows[np.arange(labels.shape[0]), labels] = 1.0
    return rows


@dataclass(frozen=True)
class _MixBase:
    alpha: float = 1.0
    num_classes: int | None = None

    def __post_init__(self) -> None:
        alpha = float(self.alpha)
        if not (math.isfinite(alpha) and alpha > 0):
            raise PipelineError(f"{type(self).__name__}.alpha: Expected a finite value > 0. Got {self.alpha!r}.")
        object.__setattr__(self, "alpha", alpha)
        n = self.num_classes
        if n is not None and (isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1):
            raise PipelineError(f"{type(self).__name__}.num_classes: Expected a positive int or None. Got {n!r}.")

    def to_dict(self) -> dict[str, Any]:
        return {"name": type(self).__name__, "configuration": {"alpha": self.alpha, "num_classes": self.num_classes}}

    def mix_labels(self, labels: Any, lam: float) -> np.ndarray:
        """``lam * one_hot(y) + (1 - lam) * one_hot(roll(y, 1))`` as float32 (N, num_classes).

        Labels already given as float (N, K) rows (a previous batch op) are mixed as they are.
        """
        labels = np.asarray(labels)
        if labels.ndim == 2 and labels.dtype.kind == "f":
            rows = labels.astype(np.float32)
        elif self.num_classes is None:
            raise PipelineError(f"{type(self).__name__}: Expected num_classes for integer labels. Got None.")
        else:
            rows = one_hot(labels, int(self.num_classes))
        return (np.roll(rows, 1, axis=0) * np.float32(1.0 - lam) + rows * np.float32(lam)).astype(np.float32)

    def _draw_lam(self, rng: np.random.Generator) -> float:
        return float(rng.beta(self.alpha, self.alpha))

    def params(self, size: tuple[int, int], seed: int = 0, epoch: int = 0, number: int = 0, slot: int = 0) -> MixParams:
        """This batch's draw; ``size`` is the (H, W) of the images, ``number`` the batch's
        position in the epoch and ``slot`` the op's position among the batch ops."""
        raise NotImplementedError

    def __call__(
        self, images: Any, labels: Any, *, layout: str = "NCHW", seed: int = 0, epoch: int = 0, number: int = 0,
        slot: int = 0, stream: Any = 0,
    ) -> tuple[Any, np.ndarray]:  # fmt: skip
        """Mix a batch: (images, float32 labels (N, num_classes)).

        ``images`` is (N, C, H, W) or (N, H, W, C) per ``layout``: a numpy array (a new
        array comes back) or a device array (mixed in place, queued on ``stream``).
        """
        if layout not in ("NCHW", "NHWC"):
            raise PipelineError(f"layout: Expected 'NCHW' or 'NHWC'. Got {layout!r}.")
        shape = tuple(int(v) for v in images.shape)
        if len(shape) != 4 or shape[0] < 1:
            raise PipelineError(f"{type(self).__name__}: Expected a batch of shape (N, C, H, W) or (N, H, W, C). Got {shape}.")
        if np.asarray(labels).shape[0] != shape[0]:
            raise PipelineError(f"labels: Expected {shape[0]} (one per image). Got {np.asarray(labels).shape[0]}.")
        size = (shape[2], shape[3]) if layout == "NCHW" else (shape[1], shape[2])
        drawn = self.params(size, seed, epoch, number, slot)
        mixed_labels = self.mix_labels(labels, drawn.lam)
        return self._mix_images(images, drawn, layout, stream), mixed_labels

    def _mix_images(self, images: Any, drawn: MixParams, layout: str, stream: Any) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class MixUp(_MixBase):
    """torchvision's ``MixUp(alpha=1.0, num_classes=None)``: blend each image with the previous one."""

    def params(self, size: tuple[int, int], seed: int = 0, epoch: int = 0, number: int = 0, slot: int = 0) -> MixParams:
        return MixParams(self._draw_lam(_batch_rng(seed, epoch, number, slot)), None)

    def _mix_images(self, images: Any, drawn: MixParams, layout: str, stream: Any) -> Any:
        if isinstance(images, np.ndarray):
            if images.dtype not in (np.float32, np.float16):
                raise PipelineError(
                    f"MixUp: Expected float32 or float16 images (torchvision mixes floats only). Got {images.dtype}; "
                    "put ToDtype(float32, scale=True) in the pipeline."
                )
            # (out like the contiguous copy: like a permuted batch, its layout 'A' failed to compile)
            source = np.ascontiguousarray(images)
            out = np.empty_like(source)
            if images.dtype == np.float32:
                _mixup_cpu(source, np.float32(drawn.lam), out)
            else:  # numba has no float16 arithmetic on the CPU: numpy in float32
                out[...] = images.astype(np.float32) * np.float32(drawn.lam) + np.roll(images, 1, axis=0).astype(
                    np.float32
                ) * np.float32(1.0 - drawn.lam)
            return out
        from prepkit.augment import cuda as cuda_kernels

        return cuda_kernels.mix_batch(images, drawn.lam, None, layout, stream)


@dataclass(frozen=True)
class CutMix(_MixBase):
    """torchvision's ``CutMix(alpha=1.0, num_classes=None)``: paste a box of the previous image."""

    def params(self, size: tuple[int, int], seed: int = 0, epoch: int = 0, number: int = 0, slot: int = 0) -> MixParams:
        rng = _batch_rng(seed, epoch, number, slot)
        lam = self._draw_lam(rng)
        h, w = size
        r_x, r_y = int(rng.integers(w)), int(rng.integers(h))
        r = 0.5 * math.sqrt(1.0 - lam)
        half_w, half_h = int(r * w), int(r * h)
        x1, y1 = max(r_x - half_w, 0), max(r_y - half_h, 0)
        x2, y2 = min(r_x + half_w, w), min(r_y + half_h, h)
        return MixParams(1.0 - (x2 - x1) * (y2 - y1) / (w * h), (x1, y1, x2, y2))

    def _mix_images(self, images: Any, drawn: MixParams, layout: str, stream: Any) -> Any:
        assert drawn.box is not None
        if isinstance(images, np.ndarray):
            source = np.ascontiguousarray(images)
            # A paste is a copy: view 16-bit floats (and bfloat16 bits) as uint16 for numba.
            as_bits = source.view(np.uint16) if source.dtype == np.float16 else source
            out = np.empty_like(as_bits)
            _cutmix_cpu(as_bits, np.asarray(drawn.box, np.int64), layout == "NCHW", out)
            return out.view(images.dtype)
        from prepkit.augment import cuda as cuda_kernels

        return cuda_kernels.mix_batch(images, drawn.lam, drawn.box, layout, stream)


BATCH_OPS: dict[str, type[_MixBase]] = {"MixUp": MixUp, "CutMix": CutMix}
BatchOp = _MixBase


def split_batch_ops(transforms: Sequence[Any]) -> tuple[list[Any], list[BatchOp]]:
    """(per-sample ops, trailing batch ops) of a transform list; batch ops must come last."""
    items = list(transforms)
    first = next((k for k, t in enumerate(items) if isinstance(t, BatchOp)), len(items))
    tail = items[first:]
    for position, item in enumerate(tail, start=first):
        if not isinstance(item, BatchOp):
            raise PipelineError(
                f"transforms[{position}] {type(item).__name__}: Expected only batch ops (MixUp, CutMix) after the "
                "first batch op (they run on the whole augmented batch). Got a per-sample op."
            )
    return items[:first], tail


@njit(parallel=True, nogil=True, cache=True)
def _mixup_cpu(images, lam, out):
    n = images.shape[0]
    rest = np.float32(1.0) - lam
    flat_in = images.reshape(n, -1)
    flat_out = out.reshape(n, -1)
    for i in prange(n):
        prev = (i + n - 1) % n
        for k in range(flat_in.shape[1]):
            flat_out[i, k] = flat_in[i, k] * lam + flat_in[prev, k] * rest


@njit(parallel=True, nogil=True, cache=True)
def _cutmix_cpu(images, box, nchw, out):
    n = images.shape[0]
    x1, y1, x2, y2 = box[0], box[1], box[2], box[3]
    for i in prange(n):
        prev = (i + n - 1) % n
        out[i] = images[i]
        if nchw:
            for c in range(images.shape[1]):
                out[i, c, y1:y2, x1:x2] = images[prev, c, y1:y2, x1:x2]
        else:
            out[i, y1:y2, x1:x2, :] = images[prev, y1:y2, x1:x2, :]


__all__ = ["BATCH_OPS", "BatchOp", "CutMix", "MixParams", "MixUp", "one_hot", "split_batch_ops"]
