"""``prepkit.Reader``: stream a store into a training loop.

    reader = prepkit.Reader("data/train", batch_size=256, device="cuda", seed=0,
                            rank=rank, world_size=world_size, output="torch",
                            transforms=[RandomResizedCrop(224), RandomHorizontalFlip(),
                                        ToDtype("float32", scale=True),
                                        Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    for epoch in range(epochs):
        reader.set_epoch(epoch)
        for batch in reader:
            loss = model(batch.images).loss(batch.labels)

Semantics a DDP user expects: ``set_epoch`` as on DistributedSampler (the order depends on
seed and epoch only; call it every epoch), every rank yields ``len(reader)`` batches, and
``state_dict()`` / ``load_state_dict()`` resume mid-epoch at the next unconsumed batch.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from prepkit.cudart import activate, cuda_index, parse_device
from prepkit.decode.engine import decode_samples, decoded_nbytes, supports_rois
from prepkit.decode.packed import PackedImages
from prepkit.errors import DecodeError, PipelineError, PrepkitError
from prepkit.reader.arguments import check_reader_arguments
from prepkit.reader.batch import Batch
from prepkit.reader.order import EpochPlan, plan_epoch
from prepkit.reader.prefetch import Prefetcher
from prepkit.reader.stats import EpochStats
from prepkit.store.extras import check_pad_value
from prepkit.store.reader import Store, open_store

OUTPUTS = ("numpy", "torch", "cupy", "dlpack")


class Reader:
    """Iterates :class:`Batch` objects from a store; see the module docstring.

    Parameters beyond the obvious ones:
    - ``transforms``: prepkit.augment ops (torchvision names), fused into one kernel;
    - ``transfer_index``: on cuda, run the first k ops on the CPU in uint8 and the rest on
      the GPU (default 0: everything on the GPU);
    - ``fields``: ``("image", "label")``, plus ``"mask"`` for segmentation stores and any of
      the store's extra fields (``store.extra_fields``), which come in ``batch.extras``;
    - ``pad_fields``: ``{name: value}`` for variable-length array fields wanted as one padded
      array (plus ``batch.lengths[name]``) instead of a list of arrays;
    - ``output``: "numpy" (numba device arrays on cuda), "torch", "cupy", or "dlpack"
      (arrays any DLPack consumer takes without a copy: ``jax.dlpack.from_dlpack``,
      ``torch.from_dlpack``);
    - ``shards_in_use``: keep at most this many shards in the shuffle at a time;
    - ``gpu_memory_budget``: staging bytes on the GPU (micro-batches keep within it);
    - ``on_error``: "raise" (a DecodeError naming the sample) or "skip" (warn, drop it);
    - ``prefetch``: batches prepared ahead in the background;
    - ``crop_decode``: for lossless stores, decode only the tiles under each crop;
    - ``storage_options``: obstore keys for a store given as a URL (``s3://...``);
    - ``cache_dir``, ``cache_limit`` (bytes, default 10 GiB), ``cache_policy`` ("next-use" or
      "lru"): read a remote store in blocks through an on-disk cache that the ranks of a node
      may share, prefetched along this reader's order (:func:`prepkit.open_store`).

    ``reader.stats`` reports the iteration in progress or last run (time to first batch, epoch
    time, bytes fetched, requests, cache hit rate: :class:`~prepkit.reader.stats.EpochStats`);
    ``reader.history`` the epochs iterated to their end.
    """

    def __init__(
        self,
        store: str | os.PathLike[str] | Store,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        device: str = "cpu",
        transforms: Sequence[Any] = (),
        transfer_index: int | None = None,
        fields: Sequence[str] = ("image", "label"),
        layout: str = "NCHW",
        output: str = "numpy",
        shards_in_use: int | None = None,
        gpu_memory_budget: int | None = None,
        prefetch: int = 2,
        threads: int | None = None,
        on_error: str = "raise",
        mask_mode: str = "nearest",
        crop_decode: bool = True,
        pad_fields: Mapping[str, float] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | None = None,
        cache_policy: str = "next-use",
    ) -> None:
        check_reader_arguments(
            batch_size=batch_size, seed=seed, rank=rank, world_size=world_size, shuffle=shuffle, drop_last=drop_last,
            device=device, output=output, outputs=OUTPUTS, on_error=on_error, fields=fields,
            shards_in_use=shards_in_use, gpu_memory_budget=gpu_memory_budget, prefetch=prefetch, threads=threads,
            transfer_index=transfer_index, mask_mode=mask_mode, crop_decode=crop_decode,
            storage_options=storage_options, cache_dir=cache_dir, cache_limit=cache_limit, cache_policy=cache_policy,
        )
        self.store = self._open(store, storage_options, cache_dir, cache_limit, cache_policy)
        if "mask" in fields and "mask" not in self.store.fields:
            raise ValueError(f"Reader: Expected a store with a mask field (fields asks for 'mask'). Got {self.store.path} without one.")
        schema = self.store.extra_fields
        unknown = [f for f in fields if f not in ("image", "label", "mask") and f not in schema]
        if unknown:
            raise ValueError(f"Reader: Expected fields among image, label, mask and the store's extra fields "
                             f"{sorted(schema)}. Got {unknown}.")
        self.extra_names = tuple(f for f in fields if f in schema)
        self.pad_fields = dict(pad_fields or {})
        for name, value in self.pad_fields.items():
            if name not in self.extra_names:
                raise ValueError(f"Reader: pad_fields: Expected names of extra fields in fields {self.extra_names}. Got {name!r}.")
            check_pad_value(schema[name], name, value)
        self.batch_size = int(batch_size)
        self.shuffle, self.seed, self.drop_last = shuffle, int(seed), drop_last
        self.rank, self.world_size = int(rank), int(world_size)
        # "cuda:N" is kept as device "cuda" on GPU N; plain "cuda" resolves N now (torch's
        # current device, else LOCAL_RANK, else 0), so every thread of this reader uses one GPU.
        kind, index = parse_device(device)
        self.device, self.output, self.on_error = kind, output, on_error
        self.device_index = cuda_index(index) if kind == "cuda" else None
        self.fields = tuple(fields)
        self.shards_in_use = shards_in_use
        self.prefetch = prefetch
        self.threads = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        self.mask_mode = mask_mode
        self.crop_decode = crop_decode
        self.batch_ops: list[Any] = []
        if not hasattr(transforms, "ops"):  # a list of ops: MixUp / CutMix at its end run per batch
            from prepkit.augment.batch import split_batch_ops

            transforms, self.batch_ops = split_batch_ops(transforms)
        self.pipeline = self._make_pipeline(transforms, layout)
        self.transfer_index = 0 if transfer_index is None else int(transfer_index)
        self._cpu_part = self._gpu_part = None
        if self.pipeline is not None and kind == "cuda" and self.transfer_index:
            self._cpu_part, self._gpu_part = self.pipeline.split(self.transfer_index)
        elif self.transfer_index and kind == "cpu":
            raise PipelineError("transfer_index applies to device='cuda' only")
        self._stager: Any = None
        if kind == "cuda":
            from prepkit.reader.gpu import GpuStager

            self._stager = GpuStager(self.store, gpu_memory_budget, use_torch=output == "torch", device=self.device_index or 0)
        self._scratch: dict[str, np.ndarray] = {}
        self.epoch = 0
        self._next_batch = 0
        self._active: Prefetcher[Any] | None = None
        self._plan_cache: tuple[int, EpochPlan] | None = None
        self.stats: EpochStats | None = None
        self.history: list[EpochStats] = []
        self.plan(0)  # validates rank, world size and batch size now

    @staticmethod
    def _open(store: str | os.PathLike[str] | Store, storage_options: Mapping[str, Any] | None,
              cache_dir: str | os.PathLike[str] | None, cache_limit: int | None, cache_policy: str) -> Store:
        if not isinstance(store, Store):
            return open_store(store, storage_options=dict(storage_options or {}), cache_dir=cache_dir,
                              cache_limit=cache_limit, cache_policy=cache_policy)
        if storage_options is not None:
            raise ValueError(f"Reader: Expected storage_options with a store path or URL. Got an open store ({store.path}): "
                             "pass them to open_store.")
        if cache_dir is not None:
            if store.fetcher is not None:
                raise ValueError(f"Reader: Expected cache_dir with a store that has no cache. Got {store.path}, "
                                 f"which reads through {store.cache_settings and store.cache_settings['cache_dir']}.")
            store.attach_cache(cache_dir, cache_limit or (10 << 30), policy=cache_policy)
        return store

    @staticmethod
    def _make_pipeline(transforms: Sequence[Any], layout: str) -> Any:
        if not transforms:
            return None
        from prepkit.augment import Pipeline

        return transforms if isinstance(transforms, Pipeline) else Pipeline(list(transforms), layout=layout)  # type: ignore[arg-type]

    # -- order and state ------------------------------------------------------------------
    def plan(self, epoch: int) -> EpochPlan:
        """This rank's batches for ``epoch``."""
        if self._plan_cache is None or self._plan_cache[0] != epoch:
            shard_of = None
            if self.shards_in_use is not None:
                arrays = self.store.field_arrays["image"]
                shard_of = (arrays.ranges[:, 0] // np.uint64(arrays.geometry.capacity)).astype(np.int64)
            plan = plan_epoch(
                len(self.store), batch_size=self.batch_size, seed=self.seed, epoch=epoch, rank=self.rank,
                world_size=self.world_size, shuffle=self.shuffle, drop_last=self.drop_last,
                shard_of_sample=shard_of, shards_in_use=self.shards_in_use,
            )
            self._plan_cache = (epoch, plan)
        return self._plan_cache[1]

    def __len__(self) -> int:
        return len(self.plan(self.epoch))

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch (the order depends on seed and epoch); restarts at its first batch."""
        self.close()
        self.epoch = int(epoch)
        self._next_batch = 0

    @property
    def epoch_finished(self) -> bool:
        """True once every batch of the current epoch has been handed over."""
        return self._next_batch >= len(self.plan(self.epoch))

    def state_dict(self) -> dict[str, Any]:
        """Where this reader stands: resume with :meth:`load_state_dict`."""
        return {
            "epoch": self.epoch, "next_batch": self._next_batch, "seed": self.seed, "rank": self.rank,
            "world_size": self.world_size, "batch_size": self.batch_size, "num_samples": len(self.store),
            "shuffle": self.shuffle, "drop_last": self.drop_last,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at the first batch not consumed when ``state`` was taken."""
        for key in ("seed", "world_size", "batch_size", "num_samples", "shuffle", "drop_last"):
            mine = len(self.store) if key == "num_samples" else getattr(self, key)
            if state.get(key) != mine:
                raise ValueError(f"state_dict was taken with {key}={state.get(key)!r}, this reader has {key}={mine!r}")
        self.close()
        self.epoch = int(state["epoch"])
        self._next_batch = int(state["next_batch"])

    # -- iteration ------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Batch]:
        started = time.perf_counter()  # the generator's body runs at the first next(): the start of iteration
        self.close()
        plan = self.plan(self.epoch)
        if self._next_batch >= len(plan):
            self._next_batch = 0  # a finished epoch iterated again starts over, like a DataLoader
        start = self._next_batch
        stats = self.stats = EpochStats(epoch=self.epoch, first_batch=start)
        fetcher = getattr(self.store, "fetcher", None)
        if fetcher is not None:  # a remote store with a cache: it reads ahead along this order and the next epoch's
            fetcher.schedule(np.concatenate([plan.indices[start * self.batch_size :], self.plan(self.epoch + 1).indices]),
                             tuple(f for f in self.store.fields if f in self.fields))
            stats.fetch = fetcher.stats
        prefetcher: Prefetcher[Any] = Prefetcher(lambda n: self._make_batch(plan, n), range(start, len(plan)), depth=self.prefetch,
                                                 on_start=self._select_device)
        self._active = prefetcher
        try:
            for batch in prefetcher:
                batch = self._hand_over(batch)
                self._next_batch = batch.number + 1
                stats.batches += 1
                stats.samples += len(batch.indices)
                if stats.time_to_first_batch_s is None:
                    stats.time_to_first_batch_s = time.perf_counter() - started
                yield batch
            stats.epoch_s = time.perf_counter() - started
            self.history.append(stats)
        finally:
            prefetcher.close()
            if self._active is prefetcher:
                self._active = None

    def close(self) -> None:
        """Stop the background thread (also done when iteration ends or the reader is dropped)."""
        if self._active is not None:
            self._active.close()
            self._active = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- producing one batch (background thread) ----------------------------------------------
    def _select_device(self) -> None:
        """Make the reader's GPU current in the producer thread: numba would attach device 0
        to it (on a multi-GPU machine every rank would decode on GPU 0)."""
        if self.device_index is not None:
            activate(self.device_index)

    @property
    def _torch_device(self) -> str:
        return "cpu" if self.device_index is None else f"cuda:{self.device_index}"

    def _make_batch(self, plan: EpochPlan, number: int) -> tuple[Batch, list[Any] | None]:
        indices = plan.batch(number)
        try:
            return self._produce(indices, number)
        except DecodeError:
            if self.on_error == "raise":
                raise
        # Only a batch that failed pays for finding its bad samples one by one.
        return self._produce(self._drop_bad(indices), number)

    def _produce(self, indices: np.ndarray, number: int) -> tuple[Batch, list[Any] | None]:
        labels = self.store.labels[indices]
        events = None
        if self.device == "cpu":
            images = self._cpu_field(indices, "image")
            masks = self._cpu_field(indices, "mask") if "mask" in self.fields else None
        else:
            images, masks, events = self._gpu_batch(indices)
        batch = Batch(images=images, labels=labels, indices=indices, masks=masks, epoch=self.epoch, number=number)
        for name in self.extra_names:
            values, lengths = self.store.extra_columns[name].gather(indices, self.pad_fields.get(name))
            batch.extras[name] = values
            if lengths is not None:
                batch.lengths[name] = lengths
        return batch, events

    def _drop_bad(self, indices: np.ndarray) -> np.ndarray:
        good = []
        for index in indices.tolist():
            try:
                for field in ("image", "mask") if "mask" in self.fields else ("image",):
                    decode_samples(self.store, [index], field=field, device="cpu")
                good.append(index)
            except PrepkitError as error:
                warnings.warn(f"skipping sample {index}: {error}", RuntimeWarning, stacklevel=2)
        return np.array(good, dtype=np.int64)

    def _params(self, pipeline: Any, shapes: np.ndarray, indices: np.ndarray) -> Any:
        return pipeline.params(shapes, indices, seed=self.seed, epoch=self.epoch)

    def _host_scratch(self, field: str, nbytes: int) -> np.ndarray:
        buffer = self._scratch.get(field)
        if buffer is None or buffer.size < nbytes:
            buffer = np.empty(int(nbytes * 1.25) + 1, dtype=np.uint8)
            self._scratch[field] = buffer
        return buffer

    def _crop_plan(self, field: str, indices: np.ndarray) -> tuple[Any, np.ndarray | None, Any]:
        """(params on the full images, regions to decode or None, params on those regions).

        For lossless samples only the tiles under each sample's source window are decoded
        (a RandomResizedCrop reads a fraction of the image); the params are then moved
        into the decoded region's coordinates.
        """
        shapes = self.store.field_arrays[field].shapes[indices].astype(np.int32)
        params = self._params(self.pipeline, shapes, indices)
        if not (self.crop_decode and supports_rois(self.store, field)):
            return params, None, params
        region = params.region.astype(np.int64)
        rois = np.column_stack([region[:, 0], region[:, 1], region[:, 0] + region[:, 2], region[:, 1] + region[:, 3]])
        moved = np.array(params.region, copy=True)
        moved[:, :2] = 0
        return params, rois, replace(params, region=moved)

    def _cpu_field(self, indices: np.ndarray, field: str) -> Any:
        if self.pipeline is None:
            return _stack_or_list(decode_samples(self.store, indices, field=field, device="cpu", threads=self.threads))
        _, rois, params = self._crop_plan(field, indices)
        # The decoded pixels only live until the fused kernel has read them: decode into a
        # buffer reused from batch to batch (fresh memory costs a page fault per 4 KiB).
        scratch = self._host_scratch(field, decoded_nbytes(self.store, indices, field, rois))
        packed = decode_samples(self.store, indices, field=field, device="cpu", threads=self.threads, rois=rois, out=scratch)
        if field == "mask":
            return self.pipeline.apply_mask(packed.flat, packed.offsets, packed.shapes, params, "cpu", mode=self.mask_mode)
        return self.pipeline(packed.flat, packed.offsets, packed.shapes, params, "cpu")

    def _gpu_batch(self, indices: np.ndarray) -> tuple[Any, Any, list[Any]]:
        from numba import cuda

        stager = self._stager
        events: list[Any] = []
        masks = None
        if self.pipeline is None:
            packed = decode_samples(self.store, indices, device="cuda", stream=stager.streams[0])
            images = _stack_or_list(packed)
            if "mask" in self.fields:
                masks = _stack_or_list(decode_samples(self.store, indices, field="mask", device="cuda", stream=stager.streams[0]))
            event = cuda.event()
            event.record(stager.streams[0])
            return images, masks, [event]
        if self._cpu_part is not None:
            return self._gpu_batch_after_cpu_part(indices)
        full_params, rois, params = self._crop_plan("image", indices)
        images = self._allocate_output(self.pipeline, len(indices), full_params)

        def augment(packed: PackedImages, span: range, stream: Any, buffers: Any) -> None:
            self._run_on_stream(self.pipeline, packed, _slice_params(params, span), images, span, stream, buffers)

        events.append(stager.run(indices, "image", augment, rois))
        if "mask" in self.fields:
            full_mask_params, mask_rois, mask_params = self._crop_plan("mask", indices)
            masks = self._allocate_output(self.pipeline, len(indices), full_mask_params, dtype="uint8", channels=1)

            def mask(packed: PackedImages, span: range, stream: Any, buffers: Any) -> None:
                target = _device_view(masks)[span.start : span.stop]
                self.pipeline.apply_mask(packed.flat, packed.offsets, packed.shapes, _slice_params(mask_params, span), "cuda",
                                         mode=self.mask_mode, out=target, stream=stream, buffers=buffers)

            events.append(stager.run(indices, "mask", mask, mask_rois))
        if self.on_error == "skip":
            # The producer must know now, to decode the batch again without its bad samples.
            self._check(events, release=False)
        return images, masks, events

    def _gpu_batch_after_cpu_part(self, indices: np.ndarray) -> tuple[Any, Any, list[Any]]:
        """Transfer index k > 0: the first k ops in uint8 on the CPU, one copy, the rest on the GPU."""
        from numba import cuda

        assert self._cpu_part is not None and self._gpu_part is not None, "set when transfer_index > 0"
        packed = decode_samples(self.store, indices, device="cpu", threads=self.threads)
        first_params = self._params(self._cpu_part, packed.shapes, indices)
        flat, offsets, shapes = self._cpu_part.apply_packed(packed.flat, packed.offsets, packed.shapes, first_params)
        stream = self._stager.streams[0]
        device_flat = cuda.to_device(flat, stream=stream)
        second_params = self._params(self._gpu_part, shapes, indices)
        images = self._allocate_output(self._gpu_part, len(indices), second_params, channels=self._gpu_part.output_channels(int(shapes[0][2])))
        self._run_on_stream(self._gpu_part, PackedImages(device_flat, offsets, shapes, "cuda"), second_params, images, range(len(indices)), stream)
        masks = None
        if "mask" in self.fields:
            mask_packed = decode_samples(self.store, indices, field="mask", device="cuda", stream=stream)
            params = self._params(self.pipeline, mask_packed.shapes, indices)
            masks = self._allocate_output(self.pipeline, len(indices), params, dtype="uint8", channels=1)
            self.pipeline.apply_mask(mask_packed.flat, mask_packed.offsets, mask_packed.shapes, params, "cuda",
                                     mode=self.mask_mode, out=_device_view(masks), stream=stream)
        event = cuda.event()
        event.record(stream)
        return images, masks, [event]

    def _run_on_stream(self, pipeline: Any, packed: PackedImages, params: Any, images: Any, span: range, stream: Any,
                       buffers: Any = None) -> None:
        """The fused kernel for one micro-batch, queued on ``stream`` after its decode."""
        target = _device_view(images)[span.start : span.stop]
        pipeline(packed.flat, packed.offsets, packed.shapes, params, "cuda", out=target, stream=stream, buffers=buffers)

    def _allocate_output(self, pipeline: Any, count: int, params: Any, dtype: str | None = None, channels: int | None = None) -> Any:
        if channels is None:
            stored = int(self.store.field_arrays["image"].shapes[0][2]) if len(self.store) else 3
            channels = pipeline.output_channels(stored)
        h, w = params.uniform_size()
        shape = (count, channels, h, w) if pipeline.layout == "NCHW" else (count, h, w, channels)
        dtype = dtype or pipeline.dtype
        if self.output == "torch":
            import torch

            torch_dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "uint8": torch.uint8}[dtype]
            stream = self._stager.torch_streams[0]
            if stream is not None:
                with torch.cuda.stream(stream):
                    return torch.empty(shape, dtype=torch_dtype, device=self._torch_device)
            return torch.empty(shape, dtype=torch_dtype, device=self._torch_device)
        from numba import cuda

        storage = {"float32": np.float32, "float16": np.uint16, "bfloat16": np.uint16, "uint8": np.uint8}[dtype]
        return cuda.device_array(shape, dtype=storage)

    # -- handing over (consumer thread) --------------------------------------------------------
    def _check(self, events: list[Any], release: bool = True) -> None:
        """Raise the DecodeError of a corrupt sample found by the kernels of these runs
        (BatchTokens; plain events carry no error codes). The tokens go back to the pool at
        hand-over (``release``) or when the batch fails (it is never handed over)."""
        from prepkit.reader.gpu import BatchToken

        tokens = [e for e in events if isinstance(e, BatchToken)]
        failed = False
        try:
            for token in tokens:
                token.check()
        except DecodeError:
            failed = True
            raise
        finally:
            if release or failed:
                for token in tokens:
                    self._stager.release(token)

    def _hand_over(self, produced: Any) -> Batch:
        batch, events = produced
        with self._device_scope():  # the consumer thread may have another GPU current
            if events:
                self._wait(events, batch)
                self._check(events)
            if self.batch_ops:
                self._mix(batch)
            return self._convert(batch)

    def _device_scope(self) -> Any:
        """A context with the reader's GPU current for numba (nothing on the CPU)."""
        if self.device_index is None:
            return contextlib.nullcontext()
        from numba import cuda

        return cuda.gpus[self.device_index]

    def _mix(self, batch: Batch) -> None:
        """MixUp / CutMix on the finished batch (on the consumer's stream on the GPU)."""
        dtype = getattr(self.pipeline, "dtype", "uint8")
        layout = getattr(self.pipeline, "layout", "NHWC")  # without transforms, images stack as NHWC
        images, stream = batch.images, 0
        if isinstance(images, list):
            raise PipelineError("MixUp/CutMix: Expected images of one size (add a resize to transforms). Got a list.")
        if self.device == "cpu" and dtype == "float16":
            images = images.view(np.float16)
        elif self.device == "cuda" and self.output == "torch":
            import torch
            from numba import cuda

            stream = cuda.external_stream(torch.cuda.current_stream(self.device_index).cuda_stream)
            if images.dtype == torch.bfloat16:  # no __cuda_array_interface__ for bfloat16
                images = images.view(torch.int16)
        labels = batch.labels
        for slot, op in enumerate(self.batch_ops):
            images, labels = op(images, labels, layout=layout, seed=self.seed, epoch=batch.epoch, number=batch.number,
                                slot=slot, stream=stream)  # fmt: skip
        if self.device == "cpu":
            batch.images = images.view(batch.images.dtype) if dtype == "float16" else images
        batch.labels = labels

    def _wait(self, events: list[Any], batch: Batch) -> None:
        events = [event for e in events for event in getattr(e, "events", [e])]
        if self.output == "torch":
            import torch
            from numba import cuda

            consumer = torch.cuda.current_stream(self.device_index)
            numba_consumer = cuda.external_stream(consumer.cuda_stream)
            for event in events:
                event.wait(numba_consumer)
            for tensor in (batch.images, batch.masks):
                if isinstance(tensor, torch.Tensor):
                    tensor.record_stream(consumer)  # memory stays reserved until the consumer is done
        else:
            for event in events:
                event.synchronize()

    def _convert(self, batch: Batch) -> Batch:
        dtype = getattr(self.pipeline, "dtype", "uint8") if self.pipeline is not None else "uint8"
        if self.output == "numpy":
            if self.device == "cpu" and dtype == "float16" and isinstance(batch.images, np.ndarray) and batch.images.dtype == np.uint16:
                batch.images = batch.images.view(np.float16)
            return batch
        if self.output == "torch":
            import torch

            batch.images = _to_torch(batch.images, dtype, self._torch_device)
            batch.masks = None if batch.masks is None else _to_torch(batch.masks, "uint8", self._torch_device)
            labels = torch.from_numpy(np.asarray(batch.labels))
            batch.labels = labels.to(self._torch_device, non_blocking=True) if self.device == "cuda" else labels
            # Numeric extras go where labels go; ragged lists stay lists (of CPU tensors).
            for name, values in batch.extras.items():
                if isinstance(values, np.ndarray):
                    tensor = torch.from_numpy(values)
                    batch.extras[name] = tensor.to(self._torch_device, non_blocking=True) if self.device == "cuda" else tensor
                else:
                    batch.extras[name] = [torch.from_numpy(v) if isinstance(v, np.ndarray) else v for v in values]
            batch.lengths = {name: torch.from_numpy(lengths) for name, lengths in batch.lengths.items()}
            return batch
        if self.output == "dlpack":
            from prepkit.interop import DLPackArray

            if self.device == "cuda":

                def export(array: Any) -> DLPackArray:
                    return DLPackArray(array, device_id=self.device_index)

                batch.images = _map(batch.images, export)
                batch.masks = None if batch.masks is None else _map(batch.masks, export)
            return batch
        import cupy

        with cupy.cuda.Device(self.device_index or 0):  # CuPy arrays of this reader's GPU
            batch.images = _map(batch.images, cupy.asarray)
            batch.masks = None if batch.masks is None else _map(batch.masks, cupy.asarray)
        return batch


def _map(value: Any, function: Any) -> Any:
    return [function(v) for v in value] if isinstance(value, list) else function(value)


def _to_torch(value: Any, dtype: str, device: str = "cuda") -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, list):
        return [_to_torch(v, dtype, device) for v in value]
    if isinstance(value, np.ndarray):
        tensor = torch.from_numpy(value)
    else:
        tensor = torch.as_tensor(value, device=device)  # __cuda_array_interface__: no copy
    if dtype == "bfloat16" and tensor.dtype in (torch.uint16, torch.int16):
        return tensor.view(torch.bfloat16)
    if dtype == "float16" and tensor.dtype in (torch.uint16, torch.int16):
        return tensor.view(torch.float16)
    return tensor


def _device_view(array: Any) -> Any:
    """A numba view of a device output (numba array or torch tensor), writable in place."""
    try:
        import torch

        if isinstance(array, torch.Tensor):
            from numba import cuda

            if array.dtype in (torch.bfloat16, torch.float16):
                array = array.view(torch.int16)
            return cuda.as_cuda_array(array)
    except ImportError:
        pass
    return array


def _slice_params(params: Any, span: range) -> Any:
    from dataclasses import fields, replace

    return replace(params, **{f.name: getattr(params, f.name)[span.start : span.stop] for f in fields(params)})


def _stack_or_list(packed: PackedImages) -> Any:
    """Images of one shape become one (N, H, W, C) array; mixed sizes stay a list."""
    if len(packed) and (packed.shapes == packed.shapes[0]).all():
        h, w, c = (int(v) for v in packed.shapes[0])
        total = len(packed) * h * w * c
        return packed.flat[:total].reshape((len(packed), h, w, c))
    return packed.to_list()
