"""One decode entry for a batch of stored samples, any layout, on "cpu" or "cuda".

Each layout decodes batches itself (``Layout.decode_batch(request)`` in prepkit.layouts,
on the CPU and on CUDA); the functions here are what the layouts call.

    packed = decode_samples(store, indices, device="cuda")

- raw: the gathered stored bytes already are the packed pixels; on cuda that is one
  host-to-device copy of the batch (from pinned memory when a pinned buffer is given);
- jpeg: nvImageCodec (nvJPEG) on the GPU; nvImageCodec's CPU backend or Pillow on the host,
  in a thread pool (each thread with its own decoder);
- lossless: prepkit's codec, one call (one kernel launch on cuda) for the whole batch.

Every stored sample is validated before any kernel reads it (the codecs check their own
headers; raw sizes are checked against the recorded shapes here).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from prepkit.decode.packed import PackedImages, packed_offsets
from prepkit.decode.rois import check_rois
from prepkit.errors import CodecError, DecodeError
from prepkit.parallel import thread_pool
from prepkit.store.reader import Store

DEVICES = ("cpu", "cuda")

#: Sample indices: a sequence of ints or an integer numpy array.
Indices = Sequence[int] | np.ndarray


@dataclass
class DecodeRequest:
    """One batch to decode: what ``Layout.decode_batch`` gets (see decode_samples for the
    meaning of each option)."""

    store: Store
    indices: list[int]
    field: str
    shapes: np.ndarray  # int32 (N, 3): the recorded shapes
    offsets: np.ndarray  # int64 (N,): where each whole image starts in the packed output
    total: int  # bytes of the packed whole images
    device: str = "cpu"
    threads: int | None = None
    pinned: np.ndarray | None = None
    stream: Any = 0
    rois: np.ndarray | None = None
    out: Any = None
    buffers: Any = None
    errors: Any = None


def gather_bytes(store: Store, indices: Indices, field: str = "image", out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Copy the stored bytes of ``indices`` back to back into one buffer.

    Returns (buffer, offsets, lengths). ``out`` (e.g. a pinned host buffer) is used when it
    is large enough; the returned buffer is a view of it.
    """
    views = [store.read_bytes(int(i), field) for i in indices]
    lengths = np.array([v.size for v in views], dtype=np.int64)
    offsets = np.zeros(len(views), dtype=np.int64)
    if len(views) > 1:
        np.cumsum(lengths[:-1], out=offsets[1:])
    total = int(lengths.sum())
    buffer = out[:total] if out is not None and out.size >= total else np.empty(total, dtype=np.uint8)
    for view, start in zip(views, offsets, strict=True):
        buffer[start : start + view.size] = view
    return buffer, offsets, lengths


def _shapes(store: Store, indices: Indices, field: str) -> np.ndarray:
    return store.field_arrays[field].shapes[np.asarray(indices, dtype=np.int64)].astype(np.int32).reshape(-1, 3)


def decode_samples(
    store: Store,
    indices: Indices,
    *,
    field: str = "image",
    device: str = "cpu",
    threads: int | None = None,
    pinned: np.ndarray | None = None,
    stream: Any = 0,
    rois: np.ndarray | None = None,
    out: Any = None,
    buffers: Any = None,
    errors: Any = None,
) -> PackedImages:
    """Decode samples ``indices`` of ``store``'s ``field`` into a :class:`PackedImages`.

    ``rois`` (int[N, 4] of y0, x0, y1, x1), for the lossless layout only: decode just the
    tiles each region touches and return the regions (crop-aware decoding).
    ``pinned``: a pinned host buffer to stage the stored bytes in before the copy to the GPU
    (raw and lossless).
    ``out``: a reusable 1-D uint8 buffer (numpy on cpu, device array on cuda) for the decoded
    pixels, used when large enough: fresh memory costs a page fault per 4 KiB, which on some
    machines costs more than decoding (see docs/BENCHMARKS.md).
    ``buffers`` (a prepkit.cudart.StreamBuffers) and ``errors`` (an ErrorSink), lossless on
    cuda: the kernels' tables live in the stream slot's reusable memory and their error codes
    are reduced on the device into ``errors`` instead of being read back here (the owner of
    ``errors`` raises the DecodeError once the batch is done).
    """
    if device not in DEVICES:
        raise ValueError(f"Expected device to be one of {DEVICES}. Got {device!r}.")
    indices = [int(i) for i in indices]
    shapes = _shapes(store, indices, field)
    layout = store.field_arrays[field].layout
    offsets, total = packed_offsets(shapes)
    request = DecodeRequest(store, indices, field, shapes, offsets, total, device, threads, pinned, stream, rois, out,
                            buffers, errors)
    decode_batch = getattr(layout, "decode_batch", None)
    if decode_batch is None:
        raise DecodeError(f"{store.path}: no decoder for layout {layout.name!r}")
    try:
        return decode_batch(request)
    except CodecError as error:
        raise DecodeError(f"{store.path}: {error}") from None


def decoded_nbytes(store: Store, indices: Indices, field: str = "image", rois: np.ndarray | None = None) -> int:
    """Bytes of the packed decoded pixels of ``indices`` (of their regions, with ``rois``)."""
    shapes = _shapes(store, indices, field).astype(np.int64)
    if rois is None:
        return int(np.prod(shapes, axis=1).sum()) if len(shapes) else 0
    rois = check_rois(rois, shapes, [int(i) for i in indices])
    return int(((rois[:, 2] - rois[:, 0]) * (rois[:, 3] - rois[:, 1]) * shapes[:, 2]).sum())


def supports_rois(store: Store, field: str = "image") -> bool:
    """Whether ``decode_samples`` can decode only a region of this field's samples."""
    return bool(getattr(store.field_arrays[field].layout, "crops", False))


def _fits(out: Any, nbytes: int) -> bool:
    return out is not None and out.size >= nbytes


def decode_raw(request: DecodeRequest) -> PackedImages:
    """Raw layout: the gathered stored bytes are the packed pixels (one host-to-device copy
    on cuda, from the pinned buffer when given)."""
    r = request
    store, indices, field, shapes, offsets, device, pinned, stream, out = (
        r.store, r.indices, r.field, r.shapes, r.offsets, r.device, r.pinned, r.stream, r.out)
    host_target = pinned if device == "cuda" else out
    buffer, stored_offsets, lengths = gather_bytes(store, indices, field, out=host_target)
    expected = np.prod(shapes.astype(np.int64), axis=1) if len(shapes) else lengths
    bad = np.flatnonzero(lengths != expected)
    if bad.size:
        i = int(bad[0])
        raise DecodeError(f"{store.path}: sample {indices[i]}: raw sample: Expected {expected[i]} bytes for shape {tuple(shapes[i])}. Got {lengths[i]}.")
    if device == "cpu":
        return PackedImages(buffer, offsets, shapes, "cpu")
    from numba import cuda

    if _fits(out, buffer.size):
        device_flat = out[: buffer.size]
        device_flat.copy_to_device(buffer, stream=stream)
        return PackedImages(device_flat, offsets, shapes, "cuda")
    return PackedImages(cuda.to_device(buffer, stream=stream), offsets, shapes, "cuda")


def decode_jpeg(request: DecodeRequest) -> PackedImages:
    """JPEG layout: nvImageCodec on cuda; nvImageCodec's CPU backend or Pillow on the host,
    in a pool of ``threads`` threads."""
    from prepkit.decode import jpeg

    r = request
    store, indices, field, shapes, offsets, total, device, threads, stream, out = (
        r.store, r.indices, r.field, r.shapes, r.offsets, r.total, r.device, r.threads, r.stream, r.out)
    keep = None if r.buffers is None else r.buffers.keep

    datas = [store.read_bytes(i, field) for i in indices]
    if device == "cuda":
        from numba import cuda

        flat = out[:total] if _fits(out, total) else cuda.device_array(max(total, 1), dtype=np.uint8, stream=stream)[:total]
        jpeg.decode_device(datas, shapes, indices, flat, offsets, stream, keep)
        return PackedImages(flat, offsets, shapes, "cuda")
    flat = out[:total] if _fits(out, total) else np.empty(total, dtype=np.uint8)

    def work(span: range) -> None:
        pixels = jpeg.decode_host([datas[i] for i in span], shapes[span.start : span.stop], indices[span.start : span.stop])
        for i, image in zip(span, pixels, strict=True):
            flat[offsets[i] : offsets[i] + image.size] = image.reshape(-1)

    workers = max(1, min(threads or 1, len(indices)))
    if workers == 1:
        work(range(len(indices)))
    else:
        step = -(-len(indices) // workers)
        spans = [range(s, min(s + step, len(indices))) for s in range(0, len(indices), step)]
        list(thread_pool("jpeg", workers).map(work, spans))
    return PackedImages(flat, offsets, shapes, "cpu")


def decode_lossless(request: DecodeRequest) -> PackedImages:
    """Lossless layout: prepkit's codec over the whole batch (regions only with rois)."""
    if request.device == "cuda":
        return _decode_lossless_cuda(request)
    r = request
    # The host plan the GPU path uses (headers checked against the recorded shapes, naming
    # the sample; tables validated and the work table built in numba; only the tile rows of
    # the regions gathered): 3-4x less host time than plan.build, which small images notice.
    # One gather thread: the Reader's CPU workers already fill the cores.
    # Its shapes are the regions' (checked by check_rois), its channels the headers' (checked
    # against the recorded shapes).
    plan = lossless_host_plan(r.store, r.indices, r.field, r.shapes, r.rois, threads=1)
    target = r.out if _fits(r.out, plan.total) else None
    from prepkit.lossless import cpu

    return PackedImages(cpu.decode_plan(plan, target), np.asarray(plan.offsets, dtype=np.int64),
                        np.asarray(plan.shapes, dtype=np.int32), "cpu")


_host_plan_space = threading.local()


def lossless_host_plan(store: Store, indices: Indices, field: str, shapes: np.ndarray, rois: np.ndarray | None,
                       pinned: np.ndarray | None = None, threads: int | None = None,
                       timings: dict[str, float] | None = None) -> Any:
    """The host work of the GPU lossless path, without per-sample Python: headers checked
    against the recorded shapes, tables validated and the work table built in numba
    (prepkit.lossless.hostplan), the stored bytes (only the tile rows of ``rois``) gathered
    from the shard memory maps into ``pinned`` by ``threads`` threads. Returns the Plan the
    CUDA kernels take (without packed v2 decode tables: the device expands them); raises
    DecodeError naming the bad sample.

    The plan's tables live in this thread's reused workspace until its next call: the
    caller copies them to the device first (a copy from pageable memory has read them when
    it returns)."""
    from prepkit.lossless import hostplan

    space = getattr(_host_plan_space, "space", None)
    if space is None:
        space = _host_plan_space.space = hostplan.Workspace()
    try:
        return hostplan.store_plan(store, indices, field, shapes, rois, staging=pinned, threads=threads,
                                   timings=timings, workspace=space, pack_tables=False)
    except CodecError as error:
        raise DecodeError(f"{store.path}: {error}") from None


def _decode_lossless_cuda(r: DecodeRequest) -> PackedImages:
    from prepkit.lossless import cuda

    plan = lossless_host_plan(r.store, r.indices, r.field, r.shapes, r.rois, r.pinned, r.threads)
    target = r.out if _fits(r.out, plan.total) else None
    flat = cuda.decode_plan(plan, stream=r.stream, out=target, pinned=r.pinned, buffers=r.buffers, errors=r.errors)[0]
    return PackedImages(flat, np.asarray(plan.offsets, dtype=np.int64), plan.shapes, "cuda")
