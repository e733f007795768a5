"""Where a Reader's batches are decoded and augmented: a CPU executor and a GPU executor.

Both run one loop over the decoded fields (image, then mask when asked) and share the crop
plan (crop-aware decoding wherever the layout can decode regions). Every GPU path - fused
augmentation, no transforms, and the transfer index (first ops on the CPU) - goes through
:class:`GpuExecutor`: its streams, its reusable buffers, its pooled events and error checks
(prepkit.reader.gpu), its device.
"""

from __future__ import annotations

import abc
import contextlib
from dataclasses import replace
from typing import Any

import numpy as np

from prepkit.decode.engine import decode_samples, decoded_nbytes, supports_rois
from prepkit.decode.packed import PackedImages
from prepkit.errors import DecodeError
from prepkit.reader.config import ReaderConfig
from prepkit.reader.outputs import device_view, stack_or_list
from prepkit.store.reader import Store

#: What an executor produces for a batch: (images, masks or None, events or None).
Produced = tuple[Any, Any, list[Any] | None]


class Executor(abc.ABC):
    """What both executors share: the store, the options, the pipeline, the crop plan."""

    def __init__(self, store: Store, config: ReaderConfig, pipeline: Any) -> None:
        self.store, self.config, self.pipeline = store, config, pipeline

    def params(self, pipeline: Any, shapes: np.ndarray, indices: np.ndarray, epoch: int) -> Any:
        return pipeline.params(shapes, indices, seed=self.config.seed, epoch=epoch)

    def crop_plan(self, field: str, indices: np.ndarray, epoch: int) -> tuple[Any, np.ndarray | None, Any]:
        """(params on the full images, regions to decode or None, params on those regions).

        Where the layout decodes regions (lossless), only the tiles under each sample's
        source window are decoded (a RandomResizedCrop reads a fraction of the image); the
        params are then moved into the decoded region's coordinates.
        """
        shapes = self.store.field_arrays[field].shapes[indices].astype(np.int32)
        params = self.params(self.pipeline, shapes, indices, epoch)
        if not (self.config.crop_decode and supports_rois(self.store, field)):
            return params, None, params
        region = params.region.astype(np.int64)
        rois = np.column_stack([region[:, 0], region[:, 1], region[:, 0] + region[:, 2], region[:, 1] + region[:, 3]])
        moved = np.array(params.region, copy=True)
        moved[:, :2] = 0
        return params, rois, replace(params, region=moved)

    @abc.abstractmethod
    def produce(self, indices: np.ndarray, epoch: int) -> Produced:
        """Decode (and augment) one batch: (images, masks or None, events for hand_over)."""

    def scope(self) -> Any:
        """A context in which the consumer thread may touch this executor's device."""
        return contextlib.nullcontext()

    def hand_over(self, events: list[Any] | None, batch: Any) -> None:  # noqa: B027 (the CPU has nothing to wait for)
        """Order the consumer after the batch's work and raise its decode errors."""


class CpuExecutor(Executor):
    """Decodes (numba, threads) and augments (fused numba kernel) on the host."""

    def __init__(self, store: Store, config: ReaderConfig, pipeline: Any) -> None:
        super().__init__(store, config, pipeline)
        self._scratch: dict[str, np.ndarray] = {}

    def _host_scratch(self, field: str, nbytes: int) -> np.ndarray:
        buffer = self._scratch.get(field)
        if buffer is None or buffer.size < nbytes:
            buffer = np.empty(int(nbytes * 1.25) + 1, dtype=np.uint8)
            self._scratch[field] = buffer
        return buffer

    def produce(self, indices: np.ndarray, epoch: int) -> Produced:
        outputs = [self.field(indices, field, epoch) for field in self.config.pixel_fields]
        return outputs[0], outputs[1] if len(outputs) > 1 else None, None

    def field(self, indices: np.ndarray, field: str, epoch: int) -> Any:
        threads = self.config.threads
        if self.pipeline is None:
            return stack_or_list(decode_samples(self.store, indices, field=field, device="cpu", threads=threads))
        _, rois, params = self.crop_plan(field, indices, epoch)
        # The decoded pixels only live until the fused kernel has read them: decode into a
        # buffer reused from batch to batch (fresh memory costs a page fault per 4 KiB).
        scratch = self._host_scratch(field, decoded_nbytes(self.store, indices, field, rois))
        packed = decode_samples(self.store, indices, field=field, device="cpu", threads=threads, rois=rois, out=scratch)
        if field == "mask":
            return self.pipeline.apply_mask(packed.flat, packed.offsets, packed.shapes, params, "cpu",
                                            mode=self.config.mask_mode)
        return self.pipeline(packed.flat, packed.offsets, packed.shapes, params, "cpu")


class GpuExecutor(Executor):
    """Decodes and augments on the reader's GPU through one GpuStager (two streams)."""

    def __init__(self, store: Store, config: ReaderConfig, pipeline: Any) -> None:
        super().__init__(store, config, pipeline)
        from prepkit.reader.gpu import GpuStager

        self.cpu_part = self.gpu_part = None
        if pipeline is not None and config.transfer_index:
            self.cpu_part, self.gpu_part = pipeline.split(config.transfer_index)
        self.stager = GpuStager(store, config.gpu_memory_budget, use_torch=config.output == "torch",
                                device=config.device_index or 0)

    def produce(self, indices: np.ndarray, epoch: int) -> Produced:
        if self.pipeline is None:
            return self._plain(indices)
        if self.cpu_part is not None:
            return self._after_cpu_part(indices, epoch)
        outputs, events = [], []
        for field in self.config.pixel_fields:
            full, rois, params = self.crop_plan(field, indices, epoch)
            mask = field == "mask"
            target = self.allocate(self.pipeline, len(indices), full, dtype="uint8" if mask else None,
                                   channels=1 if mask else None)
            events.append(self.stager.run(indices, field, self._work(target, params, mask), rois))
            outputs.append(target)
        if self.config.on_error == "skip":
            # The producer must know now, to decode the batch again without its bad samples.
            self.check(events, release=False)
        return outputs[0], outputs[1] if len(outputs) > 1 else None, events

    def _work(self, target: Any, params: Any, mask: bool) -> Any:
        """The kernel queued after each micro-batch's decode, on its stream, into its slice."""

        def work(packed: PackedImages, span: range, stream: Any, buffers: Any) -> None:
            self.run_pipeline(packed, _slice_params(params, span), target, span, stream, buffers, mask)

        return work

    def run_pipeline(self, packed: PackedImages, params: Any, target: Any, span: range, stream: Any, buffers: Any = None,
                     mask: bool = False, pipeline: Any = None) -> None:
        """The fused kernel (or the mask kernel) for samples ``span``, queued on ``stream``."""
        pipeline = pipeline or self.pipeline
        out = device_view(target)[span.start : span.stop]
        if mask:
            pipeline.apply_mask(packed.flat, packed.offsets, packed.shapes, params, "cuda", mode=self.config.mask_mode,
                                out=out, stream=stream, buffers=buffers)
        else:
            pipeline(packed.flat, packed.offsets, packed.shapes, params, "cuda", out=out, stream=stream, buffers=buffers)

    def _plain(self, indices: np.ndarray) -> Produced:
        """No transforms: the decoded images themselves (fresh device memory: they are the output)."""
        outputs, tokens = [], []
        for field in self.config.pixel_fields:
            packed, token = self.stager.decode_fresh(indices, field)
            outputs.append(stack_or_list(packed))
            tokens.append(token)
        if self.config.on_error == "skip":
            self.check(tokens, release=False)  # the producer must know now, as in produce()
        return outputs[0], outputs[1] if len(outputs) > 1 else None, tokens

    def _after_cpu_part(self, indices: np.ndarray, epoch: int) -> Produced:
        """Transfer index k > 0: the first k ops in uint8 on the CPU, one copy, the rest on the GPU."""
        from numba import cuda

        assert self.cpu_part is not None and self.gpu_part is not None, "set when transfer_index > 0"
        packed = decode_samples(self.store, indices, device="cpu", threads=self.config.threads)
        first = self.params(self.cpu_part, packed.shapes, indices, epoch)
        flat, offsets, shapes = self.cpu_part.apply_packed(packed.flat, packed.offsets, packed.shapes, first)
        stream = self.stager.streams[0]
        device_flat = cuda.to_device(flat, stream=stream)
        second = self.params(self.gpu_part, shapes, indices, epoch)
        images = self.allocate(self.gpu_part, len(indices), second, channels=self.gpu_part.output_channels(int(shapes[0][2])))
        everything = range(len(indices))
        self.run_pipeline(PackedImages(device_flat, offsets, shapes, "cuda"), second, images, everything, stream,
                          pipeline=self.gpu_part)
        masks, tokens = None, [self.stager.mark()]
        if "mask" in self.config.pixel_fields:
            full, rois, params = self.crop_plan("mask", indices, epoch)
            masks = self.allocate(self.pipeline, len(indices), full, dtype="uint8", channels=1)
            tokens.append(self.stager.run(indices, "mask", self._work(masks, params, True), rois))
            if self.config.on_error == "skip":
                self.check(tokens, release=False)
        return images, masks, tokens

    def allocate(self, pipeline: Any, count: int, params: Any, dtype: str | None = None, channels: int | None = None) -> Any:
        """The batch's output on the reader's GPU (torch's caching allocator with torch)."""
        if channels is None:
            stored = int(self.store.field_arrays["image"].shapes[0][2]) if len(self.store) else 3
            channels = pipeline.output_channels(stored)
        h, w = params.uniform_size()
        shape = (count, channels, h, w) if pipeline.layout == "NCHW" else (count, h, w, channels)
        dtype = dtype or pipeline.dtype
        if self.config.output == "torch":
            import torch

            torch_dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "uint8": torch.uint8}[dtype]
            stream = self.stager.torch_streams[0]
            if stream is not None:
                with torch.cuda.stream(stream):
                    return torch.empty(shape, dtype=torch_dtype, device=self.config.torch_device)
            return torch.empty(shape, dtype=torch_dtype, device=self.config.torch_device)
        from numba import cuda

        storage = {"float32": np.float32, "float16": np.uint16, "bfloat16": np.uint16, "uint8": np.uint8}[dtype]
        return cuda.device_array(shape, dtype=storage)

    # -- consumer side ---------------------------------------------------------------------
    def scope(self) -> Any:
        from numba import cuda

        return cuda.gpus[self.config.device_index or 0]

    def hand_over(self, events: list[Any] | None, batch: Any) -> None:
        if events:
            self.wait(events, batch)
            self.check(events)

    def check(self, events: list[Any], release: bool = True) -> None:
        """Raise the DecodeError of a corrupt sample found by the kernels of these runs.
        The tokens go back to the pool at hand-over (``release``) or when the batch fails
        (it is never handed over)."""
        failed = False
        try:
            for token in events:
                token.check()
        except DecodeError:
            failed = True
            raise
        finally:
            if release or failed:
                for token in events:
                    self.stager.release(token)

    def wait(self, tokens: list[Any], batch: Any) -> None:
        """The consumer waits for the batch: on its torch stream, else on the host."""
        events = [event for token in tokens for event in token.events]
        if self.config.output == "torch":
            import torch
            from numba import cuda

            consumer = torch.cuda.current_stream(self.config.device_index)
            numba_consumer = cuda.external_stream(consumer.cuda_stream)
            for event in events:
                event.wait(numba_consumer)
            for tensor in (batch.images, batch.masks):
                if isinstance(tensor, torch.Tensor):
                    tensor.record_stream(consumer)  # memory stays reserved until the consumer is done
        else:
            for event in events:
                event.synchronize()


def _slice_params(params: Any, span: range) -> Any:
    from dataclasses import fields

    return replace(params, **{f.name: getattr(params, f.name)[span.start : span.stop] for f in fields(params)})
