"""prepkit's lossless image codec: independent tiles, per-tile colour transforms and
predictors, and an interleaved rANS entropy stage (bitstream v2; v1 used Rice codes and stays
decodable) that decodes in parallel on CPU (numba) and GPU (numba CUDA).

The bitstream is specified in docs/LOSSLESS.md.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from prepkit.lossless import cpu
from prepkit.lossless import format as _fmt
from prepkit.lossless import format_v2 as _fmt2
from prepkit.lossless import plan as _plan
from prepkit.lossless.format import Header, read_header

__all__ = [
    "Header",
    "decode",
    "decode_batch",
    "decode_batch_packed",
    "encode",
    "max_encoded_size",
    "read_header",
]

Roi = tuple[int, int, int, int]


VERSIONS = (1, 2)
# v2 is the default: smaller than v1 on every kind of image (8-26% on photographs, 1.5x-13x
# on rendered content and masks, where v1's Rice stage spends a bit per value); it decodes at
# about libspng's speed on one CPU core (1.3-1.4x faster with fast_decode=True, which leaves
# the MED predictor out); v1's CPU decoder is about 3x faster on photographs
# (docs/BENCHMARKS.md), so version=1 stays available for CPU-bound photo pipelines.
DEFAULT_VERSION = 2
MASK_VERSION = 2


def encode(image: np.ndarray, tile: int = 64, version: int = DEFAULT_VERSION, *, fast_decode: bool = False) -> bytes:
    """Encode an HxW or HxWxC (C in 1, 3, 4) uint8 image; tile is 16, 32 or 64; version is
    the bitstream version to write (2, the default, or 1). With version 2, fast_decode=True
    leaves out the MED predictor and table sets per tile class: 10% larger on the evaluation
    photographs, 1.2-1.4x faster to decode on a CPU (docs/BENCHMARKS.md); version 1 ignores it.

    Raises ValueError for any other dtype, shape, tile size or version.
    """
    if version == 2:
        from prepkit.lossless import cpu_v2

        return cpu_v2.encode(image, tile, fast_decode)
    if version == 1:
        return cpu.encode(image, tile)
    raise ValueError(f"version must be one of {VERSIONS}, got {version!r}")


def max_encoded_size(height: int, width: int, channels: int, tile: int = 64, version: int = DEFAULT_VERSION) -> int:
    """A guaranteed upper bound on len(encode(img, tile, version)) for any image of this shape."""
    if version == 2:
        return _fmt2.max_encoded_size(height, width, channels, tile)
    if version == 1:
        return _fmt.max_encoded_size(height, width, channels, tile)
    raise ValueError(f"version must be one of {VERSIONS}, got {version!r}")


def decode(data: object, roi: Roi | None = None) -> np.ndarray:
    """Decode a stream exactly; roi = (y0, x0, y1, x1) decodes only the tiles it touches.

    Returns HxW for a stream encoded from a 2-D image, HxWxC otherwise (cropped to roi).
    Raises prepkit.errors.CodecError on a malformed, truncated or hostile stream.
    """
    if roi is None:  # one compiled call for a whole small v2 stream (prepkit.lossless.single)
        from prepkit.lossless import single

        image = single.decode(data)
        if image is not None:
            return image
    # The batch path itself: it decodes what the one-call path left, or raises the CodecError.
    return _planned_batch([data], "cpu", None if roi is None else [roi])[0]


_host_buffers = threading.local()


def _check_device(device: str) -> None:
    if device not in ("cpu", "cuda"):
        raise ValueError(f"Expected device to be 'cpu' or 'cuda'. Got {device!r}.")


def _workspace() -> Any:
    """This thread's reused host buffers (a hostplan.Workspace)."""
    space = getattr(_host_buffers, "space", None)
    if space is None:
        from prepkit.lossless import hostplan

        space = _host_buffers.space = hostplan.Workspace()
    return space


def _build_plan(buffers: Sequence[object], rois: Sequence[Roi | None] | None, device: str = "cpu") -> _plan.Plan:
    """The validated plan of a batch, from hostplan's numba validation: the same plan and the
    same refusals as plan.build in 3-4x less time (about 0.07 instead of 0.27 ms for a
    1280x800 mask), which matters for small images on the CPU and, on "cuda", where the host
    work of a batch competes with a kernel that decodes it in about the same time.

    The plan lives in this thread's reused host buffers (valid until its next batch: the
    decoders below finish reading it before they return). On "cuda" the bytes are gathered
    by several threads straight into a pinned buffer that the thread keeps (grown to the
    largest batch's compressed size), and the decode tables are left for the device to
    expand: the public API's host work for 24 images of 2048x1024 went from 24.5-25.9 to
    7.1-9.1 ms on the dev VM (docs/BENCHMARKS.md, "First GPU run")."""
    from prepkit.lossless import hostplan

    space = _workspace()
    if device != "cuda":  # the CPU decoder expands each image's tables as it reaches it (cpu_v2)
        return hostplan.plan_buffers(buffers, rois, workspace=space, pack_tables=False)
    from prepkit.cudart import StreamBuffers

    arrays = [_fmt.as_bytes(b) for b in buffers]
    pinned = getattr(_host_buffers, "pinned", None)
    if pinned is None:
        pinned = _host_buffers.pinned = StreamBuffers()
    staging = pinned.pinned("staging", sum(a.size for a in arrays), np.uint8)
    return hostplan.plan_buffers(arrays, rois, staging=staging, threads=hostplan.default_threads(), workspace=space,
                                 pack_tables=False)


def decode_batch_packed(
    buffers: Sequence[object],
    device: str = "cpu",
    rois: Sequence[Roi | None] | None = None,
    out: object | None = None,
) -> tuple[Any, Any, Any]:  # numpy arrays on "cpu", numba device arrays on "cuda"
    """Decode many streams into one flat uint8 buffer.

    Returns (flat, offsets int64[N], shapes int32[N, 3]); image i is
    flat[offsets[i] : offsets[i] + h*w*c] in HxWxC C-order. numpy arrays on "cpu", numba
    device arrays on "cuda" (one kernel launch for the whole batch). `out`, a contiguous
    1-D uint8 array (a device array on "cuda") at least as large as the result, is written
    instead of a new buffer: a reader that reuses it avoids faulting in fresh memory for
    every batch, which costs more than the decoding on some VMs (docs/BENCHMARKS.md).

    The calling thread keeps its host buffers between calls (grown, never shrunk): on
    "cuda" a pinned one of at least the compressed size of its largest batch.
    """
    _check_device(device)
    if device == "cpu" and rois is None:  # one compiled call for whole v2 streams (prepkit.lossless.single)
        from prepkit.lossless import single

        done = single.decode_many(buffers, out, _workspace())
        if done is not None:
            return done[:3]
    plan = _build_plan(buffers, rois, device)
    if device == "cpu":
        if out is not None and not isinstance(out, np.ndarray):
            raise ValueError(f"Expected a numpy array for out on the cpu. Got {type(out).__name__}.")
        return cpu.decode_plan(plan, out), plan.offsets, plan.shapes
    if device == "cuda":
        from prepkit.lossless import cuda  # numba.cuda is imported only when asked for

        return cuda.decode_plan(plan, out=out)
    raise ValueError(f"Expected device to be 'cpu' or 'cuda'. Got {device!r}.")


def decode_batch(
    buffers: Sequence[object], device: str = "cpu", rois: Sequence[Roi | None] | None = None
) -> list:
    """Decode many streams; a list of numpy arrays (cpu) or device-array views (cuda).
    Host buffers as decode_batch_packed's."""
    _check_device(device)
    if device == "cpu" and rois is None:
        from prepkit.lossless import single

        done = single.decode_many(buffers, None, _workspace())
        if done is not None:
            flat_cpu, offsets, shapes, flags = done
            return [flat_cpu[o : o + h * w * c].reshape((h, w) if f & _fmt.FLAG_2D else (h, w, c))
                    for o, (h, w, c), f in zip(offsets.tolist(), shapes.tolist(), flags.tolist(), strict=True)]
    return _planned_batch(buffers, device, rois)


def _planned_batch(buffers: Sequence[object], device: str, rois: Sequence[Roi | None] | None) -> list:
    """decode_batch through the host plan (every batch the one-call path does not take)."""
    plan = _build_plan(buffers, rois, device)
    flat: Any  # a numpy array, or a numba device array on "cuda" (numba is untyped)
    if device == "cpu":
        flat = cpu.decode_plan(plan)
    elif device == "cuda":
        from prepkit.lossless import cuda

        flat = cuda.decode_plan(plan)[0]
    else:
        raise ValueError(f"Expected device to be 'cpu' or 'cuda'. Got {device!r}.")
    return [
        flat[o : o + math.prod(s)].reshape(s) for o, s in zip(plan.offsets.tolist(), plan.out_shapes, strict=True)
    ]
