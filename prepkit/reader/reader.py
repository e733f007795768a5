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

import os
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from prepkit.cudart import activate
from prepkit.decode.engine import decode_samples
from prepkit.errors import DecodeError, PipelineError, PrepkitError
from prepkit.parallel import numba_threads
from prepkit.reader.batch import Batch
from prepkit.reader.config import OUTPUTS, ReaderConfig
from prepkit.reader.executors import CpuExecutor, Executor, GpuExecutor
from prepkit.reader.order import EpochPlan, plan_epoch
from prepkit.reader.outputs import convert
from prepkit.reader.prefetch import Prefetcher
from prepkit.reader.stats import EpochStats
from prepkit.store.reader import Store, open_store

__all__ = ["OUTPUTS", "Reader"]


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
    - ``threads``: CPU threads for decoding and numba's parallel loops (default every core;
      under a launcher that starts a node's ranks, the rank's share:
      :func:`prepkit.parallel.rank_threads`);
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
        # Every option checked once, before the store is opened (ReaderConfig).
        self.config = config = ReaderConfig.build(
            batch_size=batch_size, shuffle=shuffle, seed=seed, rank=rank, world_size=world_size, drop_last=drop_last,
            device=device, transfer_index=transfer_index, fields=fields, layout=layout, output=output,
            shards_in_use=shards_in_use, gpu_memory_budget=gpu_memory_budget, prefetch=prefetch, threads=threads,
            on_error=on_error, mask_mode=mask_mode, crop_decode=crop_decode, pad_fields=pad_fields,
            storage_options=storage_options, cache_dir=cache_dir, cache_limit=cache_limit, cache_policy=cache_policy,
        )
        self.store = self._open(store, storage_options, cache_dir, cache_limit, cache_policy)
        config.check_store(self.store)
        self.batch_ops: list[Any] = []
        if not hasattr(transforms, "ops"):  # a list of ops: MixUp / CutMix at its end run per batch
            from prepkit.augment.batch import split_batch_ops

            transforms, self.batch_ops = split_batch_ops(transforms)
        self.pipeline = self._make_pipeline(transforms, layout)
        self.executor: Executor = (GpuExecutor if config.device == "cuda" else CpuExecutor)(self.store, config, self.pipeline)
        self.epoch = 0
        self._next_batch = 0
        self._active: Prefetcher[Any] | None = None
        self._plan_cache: tuple[int, EpochPlan] | None = None
        self.stats: EpochStats | None = None
        self.history: list[EpochStats] = []
        self.plan(0)  # validates rank, world size and batch size now

    # The options, as attributes (read-only views of self.config).
    batch_size = property(lambda self: self.config.batch_size)
    shuffle = property(lambda self: self.config.shuffle)
    seed = property(lambda self: self.config.seed)
    drop_last = property(lambda self: self.config.drop_last)
    rank = property(lambda self: self.config.rank)
    world_size = property(lambda self: self.config.world_size)
    device = property(lambda self: self.config.device)
    device_index = property(lambda self: self.config.device_index)
    output = property(lambda self: self.config.output)
    on_error = property(lambda self: self.config.on_error)
    fields = property(lambda self: self.config.fields)
    shards_in_use = property(lambda self: self.config.shards_in_use)
    prefetch = property(lambda self: self.config.prefetch)
    threads = property(lambda self: self.config.threads)
    mask_mode = property(lambda self: self.config.mask_mode)
    crop_decode = property(lambda self: self.config.crop_decode)
    transfer_index = property(lambda self: self.config.transfer_index)
    extra_names = property(lambda self: self.config.extra_names)
    pad_fields = property(lambda self: self.config.pad_fields)
    _torch_device = property(lambda self: self.config.torch_device)

    @property
    def _stager(self) -> Any:
        """The GPU executor's stager (None on the CPU)."""
        return getattr(self.executor, "stager", None)

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

    def _cpu_threads(self) -> AbstractContextManager[None]:
        """numba's parallel loops on the reader's threads, where the reader runs any on the
        CPU: with a thread per core in each of a node's ranks, the ranks' OpenMP threads spin
        against each other. (A GPU reader without CPU ops leaves numba's CPU pool unstarted: a
        started pool kills a process that forks after it.)"""
        if self.config.device == "cpu" or self.config.transfer_index:
            return numba_threads(self.config.threads)
        return nullcontext()

    def _make_batch(self, plan: EpochPlan, number: int) -> tuple[Batch, list[Any] | None]:
        indices = plan.batch(number)
        with self._cpu_threads():
            try:
                return self._produce(indices, number)
            except DecodeError:
                if self.on_error == "raise":
                    raise
            # Only a batch that failed pays for finding its bad samples one by one.
            return self._produce(self._drop_bad(indices), number)

    def _produce(self, indices: np.ndarray, number: int) -> tuple[Batch, list[Any] | None]:
        labels = self.store.labels[indices]
        images, masks, events = self.executor.produce(indices, self.epoch)
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
                for field in self.config.pixel_fields:
                    decode_samples(self.store, [index], field=field, device="cpu")
                good.append(index)
            except PrepkitError as error:
                warnings.warn(f"skipping sample {index}: {error}", RuntimeWarning, stacklevel=2)
        return np.array(good, dtype=np.int64)

    # -- handing over (consumer thread) --------------------------------------------------------
    def _hand_over(self, produced: Any) -> Batch:
        batch, events = produced
        with self.executor.scope():  # the consumer thread may have another GPU current
            self.executor.hand_over(events, batch)
            if self.batch_ops:
                with self._cpu_threads():
                    self._mix(batch)
            return self._convert(batch)

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

    def _convert(self, batch: Batch) -> Batch:
        dtype = getattr(self.pipeline, "dtype", "uint8") if self.pipeline is not None else "uint8"
        return convert(batch, self.config, dtype)
