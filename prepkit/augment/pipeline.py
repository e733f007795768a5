"""Compile a list of ops into one fused augmentation and run it on "cpu" or "cuda".

A :class:`Pipeline` checks the op order once (each op's ``output_spec``), then reduces
the ops to a fused plan: per sample a source window, resized size, output offset and
flip (:mod:`prepkit.augment.params`), and per channel ``value * scale + bias`` plus an
output dtype. One kernel call per batch then reads the packed uint8 images and writes
the final array.

Example::

    pipe = Pipeline([RandomResizedCrop(224), RandomHorizontalFlip(),
                     ToDtype("float32", scale=True),
                     Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    params = pipe.params(shapes, indices, seed=0, epoch=3)
    batch = pipe(flat, offsets, shapes, params)          # (N, 3, 224, 224) float32
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from prepkit.augment import channels as channel_ops
from prepkit.augment import colour, cpu, erasing
from prepkit.augment.cpu import KIND_BFLOAT16, KIND_FLOAT16, KIND_FLOAT32, KIND_UINT8, Plan
from prepkit.augment.ops import (
    FLOAT_DTYPES,
    GEOMETRIC_OPS,
    Normalize,
    Op,
    RandomErasing,
    Spec,
    ToDtype,
    op_from_dict,
)
from prepkit.augment.params import Params, compute_params
from prepkit.errors import PipelineError

Layout = Literal["NCHW", "NHWC"]
Device = Literal["cpu", "cuda"]

_KINDS = {"float32": KIND_FLOAT32, "float16": KIND_FLOAT16, "bfloat16": KIND_BFLOAT16, "uint8": KIND_UINT8}
#: numpy dtype of the array each output dtype is written into (16-bit floats as bits).
_STORAGE = {"float32": np.float32, "float16": np.uint16, "bfloat16": np.uint16, "uint8": np.uint8}


class Pipeline:
    """A fused augmentation: geometry, value ops and cast in a single pass per batch.

    ``ops`` run in order with torchvision.transforms.v2 meaning; at most one of them
    may resample (RandomResizedCrop or Resize). ``layout`` is the output layout.
    Outputs of dtype bfloat16 come back as uint16 arrays holding the bfloat16 bits
    (numba has no bfloat16): torch users call ``tensor.view(torch.bfloat16)``.
    """

    def __init__(self, ops: Sequence[Op], layout: Layout = "NCHW", *, stream_offset: int = 0) -> None:
        ops = tuple(op_from_dict(op) if isinstance(op, dict) else op for op in ops)
        for position, op in enumerate(ops):
            if not isinstance(op, Op):
                hint = ""
                if type(op).__name__ in ("MixUp", "CutMix"):
                    hint = " (MixUp and CutMix are batch ops: call them on a batch, or end the Reader's transforms with them)"
                raise PipelineError(f"ops[{position}]: Expected a prepkit.augment op. Got {type(op).__name__}{hint}.")
        if layout not in ("NCHW", "NHWC"):
            raise PipelineError(f"layout: Expected 'NCHW' or 'NHWC'. Got {layout!r}.")
        self.ops = ops
        self.layout: Layout = layout
        self.stream_offset = int(stream_offset)
        self.antialias = True
        self.round_u8 = False
        spec = Spec()
        self.erasing: RandomErasing | None = None
        self.erase_position = -1
        self.erase_dtype = "uint8"
        #: ops[colour_start:colour_end] is the colour stage (empty when there is none).
        self.colour_start = self.colour_end = -1
        self.colour_dtype = "uint8"
        for position, op in enumerate(ops):
            if self.erasing is not None and isinstance(op, (RandomErasing, *GEOMETRIC_OPS)):
                raise PipelineError(
                    f"ops[{position}] {type(op).__name__}: Expected no geometric op and no second RandomErasing "
                    "after RandomErasing (it fills a box of the finished output). Got one; move it earlier."
                )
            self._check_colour_order(position, op)
            if op.colour_stage:
                if self.colour_start < 0:
                    self.colour_start, self.colour_dtype = position, spec.dtype
                self.colour_end = position + 1
            if isinstance(op, RandomErasing):
                self.erasing, self.erase_position, self.erase_dtype = op, position, spec.dtype
            if spec.quantized_from_float and op.changes_values:
                raise PipelineError(
                    f"ops[{position}] {type(op).__name__}: Expected ToDtype(uint8) of float data to be the "
                    "last value op (the fused kernel casts once, at the end). Got a value op after it."
                )
            try:
                after = op.output_spec(spec)
            except PipelineError as exc:
                raise PipelineError(f"ops[{position}] {exc}") from None
            if op.resamples:
                self.antialias = bool(getattr(op, "antialias", True))  # every resampling op has one
                # torchvision resizes uint8 images to uint8 (rounded).
                self.round_u8 = spec.dtype == "uint8"
            spec = after
        self.spec = spec
        self.dtype: str = spec.dtype
        # Channel ops run first, as one per-pixel pass each over the stored pixels.
        self.channel_steps = [channel_ops.step_of(op) for op in ops if op.converts_channels]

    def _check_colour_order(self, position: int, op: Op) -> None:
        """The colour stage is one run of colour ops after all geometry and before RandomErasing."""
        name = f"ops[{position}] {type(op).__name__}"
        if op.colour_stage and self.erasing is not None:
            raise PipelineError(
                f"{name}: Expected colour ops before RandomErasing (the erasing pass runs last). Got one after it."
            )
        if op.colour_stage and 0 <= self.colour_end < position:
            raise PipelineError(
                f"{name}: Expected the colour ops next to each other (they run as one stage). Got "
                f"{type(self.ops[self.colour_end]).__name__} between them."
            )
        if self.colour_start >= 0 and isinstance(op, GEOMETRIC_OPS):
            raise PipelineError(
                f"{name}: Expected no geometric op after a colour op (the colour stage runs on the finished "
                "geometry, as torchvision's colour ops see the cropped image). Got one; move it earlier."
            )

    @property
    def has_colour(self) -> bool:
        """Does this pipeline have a colour stage (ColorJitter, TrivialAugmentWide, RandAugment)?"""
        return self.colour_start >= 0

    def colour_plans(self, channels: int) -> tuple[Plan, Plan]:
        """(the fused kernel's plan up to the colour stage, the value side after it).

        The first writes float32 NHWC scratch holding the image at the stage (uint8 data as
        whole numbers); the second's scale, bias, kind and layout finish the colour pass.
        """
        scale, bias = _affine(self.ops[: self.colour_start], channels, "uint8")
        before = Plan(self.antialias, self.round_u8, scale, bias, KIND_FLOAT32, False)
        scale, bias = _affine(self.ops[self.colour_end :], channels, self.colour_dtype)
        return before, Plan(False, False, scale, bias, _KINDS[self.dtype], self.layout == "NCHW")

    def __repr__(self) -> str:
        return f"Pipeline({list(self.ops)!r}, layout={self.layout!r})"

    # -- serialisation ---------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly description; :meth:`from_dict` rebuilds an equal pipeline."""
        return {"layout": self.layout, "ops": [op.to_dict() for op in self.ops]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Pipeline:
        """Rebuild a pipeline from :meth:`to_dict` output."""
        return cls([op_from_dict(op) for op in data["ops"]], layout=data.get("layout", "NCHW"))

    # -- planning --------------------------------------------------------------------

    def params(self, shapes: np.ndarray, indices: np.ndarray, seed: int = 0, epoch: int = 0) -> Params:
        """Draw this batch's geometry on the host from (seed, epoch, sample index).

        The same sample index gets the same crop box and flip whatever else is in the
        batch, on either device.
        """
        return compute_params(self.ops, shapes, indices, seed, epoch, self.stream_offset)

    def channel_affine(self, channels: int) -> tuple[np.ndarray, np.ndarray]:
        """float32[C] ``scale`` and ``bias``: all value ops folded into ``v * scale + bias``."""
        return _affine(self.ops, channels, "uint8")

    def erase_fill(self, channels: int) -> tuple[bool, np.ndarray, np.ndarray, np.ndarray]:
        """(random, fill, scale, bias) of RandomErasing: the fill at the op's position and
        the value ops after it folded into ``fill * scale + bias``."""
        assert self.erasing is not None
        scale, bias = _affine(self.ops[self.erase_position + 1 :], channels, self.erase_dtype)
        random = self.erasing.value == "random"
        fill = np.zeros(channels) if random else self.erasing.fill(channels)
        if self.erase_dtype == "uint8":
            fill = np.clip(np.trunc(fill), 0, 255)  # torch stores the float fill into uint8 by truncation
        return random, fill.astype(np.float32), scale, bias

    def plan(self, channels: int) -> Plan:
        """The value side of the fused kernel for ``channels``-channel images."""
        scale, bias = self.channel_affine(channels)
        return Plan(self.antialias, self.round_u8, scale, bias, _KINDS[self.dtype], self.layout == "NCHW")

    def output_channels(self, channels: int) -> int:
        """Channels of the output for ``channels``-channel input (changed by Grayscale / RGB)."""
        return self.channel_steps[-1].channels if self.channel_steps else int(channels)

    def convert_channels(self, flat: Any, offsets: Any, shapes: Any, device: Device = "cpu", stream: Any = 0) -> tuple[Any, Any, Any]:
        """Run the channel ops (if any) over a packed batch; returns the packed result.

        Images may differ in channel count on the way in; on the way out they all have
        :meth:`output_channels`. Without channel ops the inputs come back untouched.
        """
        if not self.channel_steps:
            return flat, offsets, shapes
        shapes_h = _host_shapes(shapes)
        bad = ~np.isin(shapes_h[:, 2], (1, 3, 4))
        if bad.any():
            raise PipelineError(f"shapes: Expected 1, 3 or 4 channels per image. Got {int(shapes_h[bad][0, 2])}.")
        if device == "cpu":
            flat, offsets = _host_inputs(flat, offsets, shapes_h)
            for step in self.channel_steps:
                flat, offsets, shapes_h = channel_ops.convert_cpu(flat, offsets, shapes_h, step)
            return flat, offsets, shapes_h
        _check_device(device)
        from prepkit.augment import cuda as cuda_kernels

        for step in self.channel_steps:
            flat, offsets, shapes_h = cuda_kernels.convert_channels(flat, offsets, shapes_h, step, stream)
        return flat, offsets, shapes_h

    def split(self, k: int = 0) -> tuple[Pipeline, Pipeline]:
        """Expresso's transfer index: (first k ops, the rest).

        The first part runs where the data is (usually the CPU) and must leave uint8
        images, so uint8 crosses to the GPU (4x less than float32); its output is NHWC
        and rounded to uint8 exactly as torchvision rounds uint8 tensors. The second part
        draws the same random numbers as it would inside the whole pipeline. The default,
        k = 0, sends the packed uint8 images as they are and does everything on the GPU.
        """
        if not 0 <= k <= len(self.ops):
            raise PipelineError(f"split: Expected 0 <= k <= {len(self.ops)}. Got {k}.")
        first = Pipeline(self.ops[:k], layout="NHWC", stream_offset=self.stream_offset)
        if first.dtype != "uint8":
            raise PipelineError(
                f"split({k}): Expected the first part to end in uint8 (it is transferred). Got {first.dtype} "
                "(move the ToDtype to the second part)."
            )
        return first, Pipeline(self.ops[k:], layout=self.layout, stream_offset=self.stream_offset + k)

    # -- running ---------------------------------------------------------------------

    def __call__(
        self,
        flat: Any,
        offsets: Any,
        shapes: Any,
        params: Params,
        device: Device = "cpu",
        out: Any = None,
        stream: Any = 0,
        buffers: Any = None,
    ) -> Any:
        """Augment a packed batch into an (N, C, h, w) or (N, h, w, C) array.

        On "cpu" inputs are numpy arrays and a numpy array comes back; on "cuda" inputs
        are device arrays (anything with ``__cuda_array_interface__``) and a numba device
        array comes back. ``out`` (optional) receives the result in place: a C-contiguous
        array of the output shape whose dtype is the output dtype (uint16 or int16 for
        bfloat16, e.g. ``torch_tensor.view(torch.int16)``). ``stream`` (cuda only) is the
        numba stream the small parameter copies and the single kernel launch are queued
        on (e.g. ``cuda.external_stream(torch.cuda.current_stream().cuda_stream)``);
        the call does not synchronise. Channel ops (Grayscale, RGB) run first, so the
        images of a batch may differ in channel count when the pipeline has one.
        ``buffers`` (cuda, a prepkit.cudart.StreamBuffers owned by ``stream``'s caller):
        the per-image parameters go through its reusable pinned and device buffers instead
        of fresh allocations (the caller rewrites them only after the stream passed them).
        """
        flat, offsets, shapes = self.convert_channels(flat, offsets, shapes, device, stream)
        shapes_h, channels, shape, out_offsets = self._batch_output(shapes, params, device)
        plan = self.plan(channels)
        if device == "cpu":
            result, target = _host_output(out, shape, self.dtype)
            flat, offsets = _host_inputs(flat, offsets, shapes_h)
            if self.has_colour:
                colour.check_channels(channels)
                colour.check_fill(self.ops, channels)
                before, after = self.colour_plans(channels)
                scratch = np.empty(target.shape[0], np.float32)
                cpu.augment(flat, offsets, shapes_h, params, before, scratch, out_offsets)
                h, w = params.uniform_size()
                colour.colour_cpu(scratch, params.colour_op, params.colour_arg, params.warp_rows(), self.colour_dtype == "uint8",
                                  channels, h, w, after.scale, after.bias, after.kind, after.nchw, target)  # fmt: skip
            else:
                cpu.augment(flat, offsets, shapes_h, params, plan, target, out_offsets)
            if self.erasing is not None:
                erasing.erase_cpu(target, params.erase, params.erase_key, *self.erase_fill(channels), plan.kind,
                                  plan.nchw, shape)  # fmt: skip
            return result
        _check_device(device)
        from prepkit.augment import cuda as cuda_kernels  # lazy: needs numba-cuda

        erase = None if self.erasing is None else self.erase_fill(channels)
        stage = None
        if self.has_colour:
            colour.check_channels(channels)
            colour.check_fill(self.ops, channels)
            stage = (*self.colour_plans(channels), self.colour_dtype == "uint8")
        return cuda_kernels.augment(
            flat, offsets, shapes_h, params, plan, shape, self.dtype, out, out_offsets, stream, erase, stage, buffers
        )

    def apply_mask(
        self,
        flat: Any,
        offsets: Any,
        shapes: Any,
        params: Params,
        device: Device = "cpu",
        mode: Literal["nearest", "nearest-exact"] = "nearest",
        out: Any = None,
        stream: Any = 0,
        buffers: Any = None,
    ) -> Any:
        """Apply the same geometry to masks (usually 1 channel) with nearest sampling.

        No value ops, uint8 out, shaped (N, C, h, w) or (N, h, w, C) by the layout. The
        geometric steps of TrivialAugmentWide / RandAugment (shears, translations, rotations)
        move the masks as they move the images, with nearest sampling and 0 where the mask is
        uncovered (torchvision's auto-augment refuses masks; prepkit keeps them aligned).
        ``mode="nearest"`` picks pixel floor(r * s), what torchvision v2 does to masks;
        ``"nearest-exact"`` picks floor((r + 0.5) * s), centred like the bilinear image.
        ``buffers``: as for ``__call__``.
        """
        if mode not in ("nearest", "nearest-exact"):
            raise PipelineError(f"mode: Expected 'nearest' or 'nearest-exact'. Got {mode!r}.")
        shapes_h, channels, shape, out_offsets = self._batch_output(shapes, params, device)
        exact = mode == "nearest-exact"
        if device == "cpu":
            result, target = _host_output(out, shape, "uint8")
            flat, offsets = _host_inputs(flat, offsets, shapes_h)
            cpu.mask(flat, offsets, shapes_h, params, exact, self.layout == "NCHW", target, out_offsets)
            if colour.has_warp(params.colour_op):
                h, w = params.uniform_size()
                colour.warp_masks_cpu(target, params.colour_op, params.warp_rows(), channels, h, w, self.layout == "NCHW")
            return result
        _check_device(device)
        from prepkit.augment import cuda as cuda_kernels

        return cuda_kernels.mask(
            flat, offsets, shapes_h, params, exact, self.layout == "NCHW", shape, out, out_offsets, stream, buffers
        )

    def _batch_output(self, shapes: Any, params: Params, device: str) -> tuple[np.ndarray, int, tuple[int, ...], np.ndarray]:
        """(host shapes, channels, output shape, per-image output offsets) of a batch."""
        shapes_h = _host_shapes(shapes)
        channels = _channels(shapes_h)
        h, w = params.uniform_size()
        n = len(params)
        shape = (n, channels, h, w) if self.layout == "NCHW" else (n, h, w, channels)
        return shapes_h, channels, shape, np.arange(n, dtype=np.int64) * (h * w * channels)

    def apply_packed(
        self, flat: np.ndarray, offsets: np.ndarray, shapes: np.ndarray, params: Params
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Run on the CPU into the packed layout (flat, offsets, shapes), HWC per image.

        Sizes may differ per image. This is how the first part of :meth:`split` hands
        its uint8 images over; only uint8 pipelines can produce packed output.
        """
        if self.dtype != "uint8":
            raise PipelineError(f"apply_packed: Expected a uint8 pipeline. Got output dtype {self.dtype}.")
        if self.erasing is not None:
            raise PipelineError("apply_packed: Expected no RandomErasing (it runs on the batch output). Got one.")
        if self.has_colour:
            raise PipelineError("apply_packed: Expected no colour op (the colour stage runs on the batch output). Got one.")
        flat, offsets, shapes = self.convert_channels(flat, offsets, shapes, "cpu")
        shapes_h = _host_shapes(shapes)
        channels = _channels(shapes_h)
        sizes = params.out_size.astype(np.int64).prod(axis=1) * channels
        out_offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        out = np.empty(int(sizes.sum()), np.uint8)
        plan = self.plan(channels)._replace(nchw=False)
        flat, offsets = _host_inputs(flat, offsets, shapes_h)
        cpu.augment(flat, offsets, shapes_h, params, plan, out, out_offsets)
        out_shapes = np.concatenate([params.out_size, np.full((len(params), 1), channels, np.int32)], axis=1)
        return out, out_offsets, out_shapes


def _affine(ops: Sequence[Op], channels: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """float32[C] ``scale`` and ``bias`` of the value ops in ``ops`` applied to ``dtype`` data."""
    scale, bias = np.ones(channels), np.zeros(channels)
    for op in ops:
        if isinstance(op, ToDtype):
            if dtype == "uint8" and op.dtype in FLOAT_DTYPES and op.scale:
                scale, bias = scale / 255.0, bias / 255.0
            elif dtype in FLOAT_DTYPES and op.dtype == "uint8" and op.scale:
                # torchvision: image.mul(255 + 1 - 1e-3).to(uint8)
                scale, bias = scale * 255.999, bias * 255.999
            dtype = op.dtype
        elif isinstance(op, Normalize):
            mean, std = op.channel_arrays(channels)
            scale, bias = scale / std, (bias - mean) / std
    return scale.astype(np.float32), bias.astype(np.float32)


def _check_device(device: str) -> None:
    if device != "cuda":
        raise PipelineError(f"device: Expected 'cpu' or 'cuda'. Got {device!r}.")


def _host_shapes(shapes: Any) -> np.ndarray:
    """Shapes are small and drive the launch, so they live on the host (copied if needed)."""
    if hasattr(shapes, "copy_to_host"):
        shapes = shapes.copy_to_host()
    shapes = np.ascontiguousarray(shapes, dtype=np.int32)
    if shapes.ndim != 2 or shapes.shape[1] != 3:
        raise PipelineError(f"shapes: Expected int32[N, 3] (H, W, C). Got shape {shapes.shape}.")
    return shapes


def _channels(shapes: np.ndarray) -> int:
    channels = np.unique(shapes[:, 2])
    if len(channels) != 1 or int(channels[0]) not in (1, 3, 4):
        raise PipelineError(
            f"shapes: Expected one channel count of 1, 3 or 4 for the batch. Got {channels.tolist()} "
            "(put RGB() or Grayscale() first to convert a store of mixed channels)."
        )
    return int(channels[0])


def _host_inputs(flat: Any, offsets: Any, shapes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    flat = np.asarray(flat)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if flat.dtype != np.uint8 or flat.ndim != 1:
        raise PipelineError(f"flat: Expected a 1-D uint8 buffer. Got {flat.dtype} with shape {flat.shape}.")
    if offsets.shape != (shapes.shape[0],):
        raise PipelineError(f"offsets: Expected int64[{shapes.shape[0]}]. Got shape {offsets.shape}.")
    ends = offsets + shapes.astype(np.int64).prod(axis=1)
    if len(offsets) and (offsets.min() < 0 or ends.max() > flat.shape[0]):
        raise PipelineError(
            f"offsets: Expected images inside flat ({flat.shape[0]} bytes). Got one ending at {ends.max()}."
        )
    return np.ascontiguousarray(flat), offsets


def _host_output(out: Any, shape: tuple[int, ...], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(the array handed back, its 1-D storage the kernel writes)."""
    storage = _STORAGE[dtype]
    if out is None:
        target = np.empty(int(np.prod(shape)), storage)
        result = target.view(np.float16) if dtype == "float16" else target
        return result.reshape(shape), target
    array = np.asarray(out)
    expected = {"float16": (np.float16, np.uint16), "bfloat16": (np.uint16, np.int16)}.get(dtype, (storage,))
    if array.shape != shape or array.dtype not in [np.dtype(d) for d in expected] or not array.flags.c_contiguous:
        raise PipelineError(
            f"out: Expected a C-contiguous {shape} array of {dtype} ({'/'.join(np.dtype(d).name for d in expected)}). "
            f"Got {array.dtype} {array.shape}."
        )
    return out, array.reshape(-1).view(storage)
