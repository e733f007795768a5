"""The reader's GPU side: pinned staging buffers, its own CUDA streams, micro-batches.

For each batch:
1. the batch is cut into micro-batches whose staging memory (stored bytes plus decoded
   uint8 pixels) fits half of ``gpu_memory_budget`` (two are in flight at once);
2. micro-batch k's stored bytes are gathered into a pinned host buffer and copied to the
   GPU on stream k % 2, then decoded (into a device buffer reused by that stream) and
   augmented on that same stream straight into its slice of the batch's output, so the copy
   of k+1 overlaps the kernels of k;
3. an event is recorded on both streams; the consumer waits on it (on its own stream with
   torch, on the host otherwise). No device-wide synchronization anywhere.

Streams are created at the lowest priority when torch can make them (as L3 does, so that
decoding never delays the model's kernels), otherwise as ordinary numba streams.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from prepkit.decode.engine import decode_samples, decoded_nbytes
from prepkit.store.reader import Store

DEFAULT_GPU_BUDGET = 1 << 30  # 1 GiB of staging memory


def make_streams(count: int = 2, use_torch: bool = False) -> tuple[list[Any], list[Any]]:
    """(numba streams, torch streams or None) at the lowest priority where possible."""
    from numba import cuda

    if use_torch:
        try:
            import torch

            lowest, _ = torch.cuda.Stream.priority_range()  # type: ignore[call-arg]  # a staticmethod at run time
            torch_streams = [torch.cuda.Stream(priority=lowest) for _ in range(count)]
            return [cuda.external_stream(s.cuda_stream) for s in torch_streams], torch_streams
        except Exception:
            pass
    return [cuda.stream() for _ in range(count)], [None] * count


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
class _Slot:
    """Staging memory of one stream: reused once the stream's last work on it is done."""

    pinned: np.ndarray
    device: Any = None
    event: Any = None


class GpuStager:
    """Decodes and augments batches on the GPU under a staging-memory budget."""

    def __init__(self, store: Store, budget: int | None, use_torch: bool) -> None:
        from numba import cuda

        self.cuda = cuda
        self.store = store
        self.budget = int(budget or DEFAULT_GPU_BUDGET)
        self.streams, self.torch_streams = make_streams(2, use_torch)
        self._slots = [_Slot(cuda.pinned_array(1 << 16, dtype=np.uint8)) for _ in self.streams]

    def _pinned(self, slot: _Slot, nbytes: int) -> np.ndarray:
        if slot.event is not None:
            slot.event.synchronize()  # the last copy out of this buffer must be finished
        if slot.pinned.size < nbytes:
            slot.pinned = self.cuda.pinned_array(max(nbytes, 2 * slot.pinned.size), dtype=np.uint8)
        return slot.pinned

    def micro_batches(self, indices: Sequence[int] | np.ndarray, field: str) -> list[range]:
        arrays = self.store.field_arrays[field]
        position = np.asarray(indices, dtype=np.int64)
        stored = (arrays.ranges[position, 1] - arrays.ranges[position, 0]).astype(np.int64)
        decoded = np.prod(arrays.shapes[position].astype(np.int64), axis=1)
        return split_micro_batches(stored, decoded, self.budget // 2)

    def run(self, indices: np.ndarray, field: str, work: Any, rois: np.ndarray | None = None) -> list[Any]:
        """For each micro-batch: decode on its stream, then ``work(packed, span, stream)``.

        Returns one event per stream, recorded after the last work on it.
        """
        for number, span in enumerate(self.micro_batches(indices, field)):
            which = number % 2
            stream, slot = self.streams[which], self._slots[which]
            part = indices[span.start : span.stop]
            arrays = self.store.field_arrays[field]
            stored = int((arrays.ranges[part, 1] - arrays.ranges[part, 0]).sum())
            pinned = self._pinned(slot, stored)
            part_rois = None if rois is None else rois[span.start : span.stop]
            decoded = decoded_nbytes(self.store, part, field, part_rois)
            if slot.device is None or slot.device.size < decoded:
                slot.device = self.cuda.device_array(max(int(decoded * 1.25), 1 << 16), dtype=np.uint8)
            packed = decode_samples(self.store, part, field=field, device="cuda", pinned=pinned, stream=stream,
                                    rois=part_rois, out=slot.device)
            work(packed, span, stream)
            slot.event = self.cuda.event()
            slot.event.record(stream)
        events = []
        for stream in self.streams:
            event = self.cuda.event()
            event.record(stream)
            events.append(event)
        return events
