"""The reader's GPU side: pinned staging buffers, its own CUDA streams, micro-batches.

For each batch:
1. the batch is cut into micro-batches whose staging memory (stored bytes plus decoded
   uint8 pixels) fits half of ``gpu_memory_budget`` (two are in flight at once);
2. micro-batch k's stored bytes are gathered into a pinned host buffer and copied to the
   GPU on stream k % 2, then decoded (into a device buffer reused by that stream) and
   augmented on that same stream straight into its slice of the batch's output, so the copy
   of k+1 overlaps the kernels of k;
3. nothing in that loop allocates (each stream slot owns grow-only device and pinned
   buffers, prepkit.cudart.StreamBuffers) or waits for the GPU: a slot's pinned memory is
   only waited on before it is rewritten, two micro-batches later;
4. the kernels' error codes are reduced on the device into one 16-byte accumulator per
   stream, copied into pinned memory at the end of the batch; an event is recorded on both
   streams. The consumer waits on the events (on its own stream with torch, on the host
   otherwise) and ``BatchToken.check`` reads the accumulators and raises the DecodeError
   naming the first bad sample, before the batch is handed over.

Streams are non-blocking at the lowest priority: torch's when torch is the output (so that
torch's caching allocator can track them), else created through the driver
(prepkit.cudart.make_stream). Events are created without timing and reused.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prepkit.cudart import StreamBuffers, make_stream, new_event
from prepkit.decode.engine import decode_samples, decoded_nbytes
from prepkit.decode.packed import PackedImages
from prepkit.errors import DecodeError
from prepkit.store.reader import Store

DEFAULT_GPU_BUDGET = 1 << 30  # 1 GiB of staging memory


def make_streams(count: int = 2, use_torch: bool = False, device: int = 0) -> tuple[list[Any], list[Any]]:
    """(numba streams, torch streams or None) on GPU ``device``: non-blocking, at the lowest
    priority. Call it with ``device``'s context current (GpuStager does)."""
    from numba import cuda

    if use_torch:
        try:
            import torch

            lowest, _ = torch.cuda.Stream.priority_range()  # type: ignore[call-arg]  # a staticmethod at run time
            torch_streams = [torch.cuda.Stream(device=device, priority=lowest) for _ in range(count)]
            return [cuda.external_stream(s.cuda_stream) for s in torch_streams], torch_streams
        except Exception:
            pass
    return [make_stream() for _ in range(count)], [None] * count


def split_micro_batches(stored: np.ndarray, decoded: np.ndarray, budget: int) -> list[range]:
    """Consecutive ranges of samples whose staging bytes stay within ``budget`` each
    (a single sample larger than the budget gets a micro-batch of its own)."""
    ranges, start, used = [], 0, 0
    for position, need in enumerate((stored + decoded).tolist()):
        if position > start and used + need > budget:
            ranges.append(range(start, position))
            start, used = position, 0
        used += need
    if start < len(stored):
        ranges.append(range(start, len(stored)))
    return ranges


@dataclass
class ErrorSink:
    """Where a decode launch reduces its error codes: a stream's device accumulator
    (int64[2]: bad tiles, min((position << 8) | code)) and the position in the batch of the
    micro-batch's first sample."""

    result: Any
    base: int


@dataclass
class _Slot:
    """Staging memory of one stream: reused once the stream's last work on it is done."""

    buffers: StreamBuffers = field(default_factory=StreamBuffers)
    event: Any = None  # recorded after each micro-batch on this stream (timing off, reused)
    used: bool = False  # whether the event was recorded since the slot was made


class BatchToken:
    """One run's (a field of a batch) events and error accumulators, pooled and reused."""

    def __init__(self, cuda: Any, streams: int) -> None:
        self.events = [new_event() for _ in range(streams)]
        self.record = cuda.pinned_array((streams, 2), dtype=np.int64)
        self.store_path = ""
        self.field = ""
        self.indices: np.ndarray = np.zeros(0, np.int64)
        self.checked = False

    def check(self) -> None:
        """Wait for the run's work, then raise the DecodeError naming its first bad sample."""
        if self.checked:
            return
        for event in self.events:
            event.synchronize()
        self.checked = True
        bad = self.record[:, 0]
        if int(bad.sum()) == 0:
            return
        first = int(self.record[bad > 0, 1].min())
        position, code = first >> 8, first & 255
        from prepkit.lossless.plan import ERROR_TEXT

        text = ERROR_TEXT.get(code, f"error code {code}")
        raise DecodeError(f"{self.store_path}: sample {int(self.indices[position])} ({self.field}): corrupt tile payload "
                          f"({text}); {int(bad.sum())} bad tile(s) in the batch")


class GpuStager:
    """Decodes and augments batches on the GPU under a staging-memory budget."""

    def __init__(self, store: Store, budget: int | None, use_torch: bool, device: int = 0) -> None:
        from numba import cuda

        self.cuda = cuda
        self.store = store
        self.device = int(device)
        self.budget = int(budget or DEFAULT_GPU_BUDGET)
        # Streams and events belong to GPU ``device`` whatever the constructing thread's
        # current device is (its current device is left as it was).
        with cuda.gpus[self.device]:
            self.streams, self.torch_streams = make_streams(2, use_torch, self.device)
            self._slots = [_Slot(event=new_event()) for _ in self.streams]
        self._tokens: collections.deque[BatchToken] = collections.deque()  # free tokens (append/pop are atomic)

    def _pinned(self, slot: _Slot, nbytes: int) -> np.ndarray:
        if slot.used:
            slot.event.synchronize()  # the last copy out of this slot's pinned memory must be finished
            slot.buffers.keep.clear()  # and the copies out of nvImageCodec's Images
        return slot.buffers.pinned("staging", max(nbytes, 1 << 16), np.uint8)

    def release(self, token: BatchToken) -> None:
        """Give a token back once its batch was handed over (its events waited on)."""
        self._tokens.append(token)

    def _token(self) -> BatchToken:
        try:
            token = self._tokens.pop()
        except IndexError:  # grows to the number of runs in flight (prefetch depth x fields), then stays
            token = BatchToken(self.cuda, len(self.streams))
        token.checked = False
        return token

    def mark(self) -> BatchToken:
        """A token for work queued outside ``run`` (decoded with its errors checked on the
        host): its events are recorded now on both streams, it reports no error."""
        token = self._token()
        token.record[:] = 0
        for event, stream in zip(token.events, self.streams, strict=True):
            event.record(stream)
        return token

    def decode_fresh(self, indices: np.ndarray, field: str) -> tuple[PackedImages, BatchToken]:
        """Decode a whole batch on stream 0 into fresh device memory (it becomes the output:
        no transforms, or the masks of a transfer-index batch), with the error codes reduced on
        the device like ``run``'s: no host sync here; ``token.check()`` raises at hand-over."""
        from prepkit.lossless import cuda as lossless_cuda

        token = self._token()
        token.store_path, token.field, token.indices = str(self.store.path), field, np.asarray(indices, np.int64)
        token.record[:] = 0
        stream, slot = self.streams[0], self._slots[0]
        result = slot.buffers.device("errors_total", 2, np.int64)
        lossless_cuda.reset_errors_kernel[1, 1, stream](result)
        arrays = self.store.field_arrays[field]
        stored = int((arrays.ranges[indices, 1] - arrays.ranges[indices, 0]).sum()) if len(indices) else 0
        packed = decode_samples(self.store, indices, field=field, device="cuda", pinned=self._pinned(slot, stored),
                                stream=stream, errors=ErrorSink(result, 0))
        slot.event.record(stream)
        slot.used = True
        result.copy_to_host(token.record[0], stream=stream)
        for event, each in zip(token.events, self.streams, strict=True):
            event.record(each)
        return packed, token

    def micro_batches(self, indices: Sequence[int] | np.ndarray, field: str) -> list[range]:
        arrays = self.store.field_arrays[field]
        position = np.asarray(indices, dtype=np.int64)
        stored = (arrays.ranges[position, 1] - arrays.ranges[position, 0]).astype(np.int64)
        decoded = np.prod(arrays.shapes[position].astype(np.int64), axis=1)
        return split_micro_batches(stored, decoded, self.budget // 2)

    def run(self, indices: np.ndarray, field: str, work: Any, rois: np.ndarray | None = None) -> BatchToken:
        """For each micro-batch: decode on its stream, then ``work(packed, span, stream, buffers)``
        (``buffers``: the stream slot's StreamBuffers, for the work's own small copies).

        Returns the run's token: its events are recorded after the last work on each stream;
        ``token.check()`` raises the DecodeError of a corrupt sample (after waiting on them).
        """
        from prepkit.lossless import cuda as lossless_cuda

        token = self._token()
        token.store_path, token.field, token.indices = str(self.store.path), field, np.asarray(indices, np.int64)
        results = []
        for stream, slot in zip(self.streams, self._slots, strict=True):
            result = slot.buffers.device("errors_total", 2, np.int64)
            lossless_cuda.reset_errors_kernel[1, 1, stream](result)
            results.append(result)
        arrays = self.store.field_arrays[field]
        for number, span in enumerate(self.micro_batches(indices, field)):
            which = number % 2
            stream, slot = self.streams[which], self._slots[which]
            part = indices[span.start : span.stop]
            stored = int((arrays.ranges[part, 1] - arrays.ranges[part, 0]).sum())
            pinned = self._pinned(slot, stored)
            part_rois = None if rois is None else rois[span.start : span.stop]
            decoded = decoded_nbytes(self.store, part, field, part_rois)
            device = slot.buffers.device("decoded", max(decoded, 1), np.uint8)
            packed = decode_samples(self.store, part, field=field, device="cuda", pinned=pinned, stream=stream,
                                    rois=part_rois, out=device, buffers=slot.buffers,
                                    errors=ErrorSink(results[which], span.start))
            work(packed, span, stream, slot.buffers)
            slot.event.record(stream)
            slot.used = True
        for which, stream in enumerate(self.streams):
            results[which].copy_to_host(token.record[which], stream=stream)
            token.events[which].record(stream)
        return token


