"""A ``torch.utils.data.IterableDataset`` over a store, for users who want a DataLoader.

    dataset = prepkit.reader.torch.StoreDataset("data/train", batch_size=256, seed=0,
                                                rank=rank, world_size=world_size,
                                                transforms=[...])
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=8,
                                         multiprocessing_context="spawn")
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        for images, labels in loader: ...

Each DataLoader worker runs its own CPU :class:`~prepkit.Reader` and takes every
``num_workers``-th batch of this rank's epoch, so together they yield the rank's batches
exactly once, with its numba loops on its share of the cores
(``prepkit.parallel.worker_threads``). ``set_epoch`` reaches the workers through shared
memory, so ``persistent_workers=True`` reshuffles every epoch too; call it between epochs,
before iterating the loader, not during an epoch. Use
``multiprocessing_context="spawn"``: numba's threading layer does not survive ``fork``.
(Inside a single process, ``prepkit.Reader`` itself is faster: it already decodes on
background threads with the GIL released.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from prepkit.parallel import limit_numba_threads, rank_threads, worker_threads
from prepkit.reader.reader import Reader


class StoreDataset(IterableDataset):
    """Yields ``(images, labels)`` torch batches (or ``(images, labels, masks)``)."""

    def __init__(self, store: str | os.PathLike[str], batch_size: int, **reader_options: Any) -> None:
        super().__init__()
        if reader_options.get("device", "cpu") != "cpu":
            raise ValueError("StoreDataset decodes in DataLoader workers on the CPU; use prepkit.Reader for device='cuda'")
        self.store = str(store)
        self.batch_size = batch_size
        self.reader_options = {**reader_options, "output": "torch"}
        # The epoch in shared memory: DataLoader workers hold a copy of this object, and with
        # persistent_workers=True that copy lives on between epochs, so an attribute set here
        # would never reach them (every epoch would replay the first one's order).
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()
        self._length = len(Reader(self.store, batch_size, **{**self.reader_options, "prefetch": 1}))

    @property
    def epoch(self) -> int:
        """The epoch whose batches the next iteration yields (``set_epoch``)."""
        return int(self._epoch.item())

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        self.set_epoch(epoch)

    def set_epoch(self, epoch: int) -> None:
        """Shuffle the next iteration as epoch ``epoch``, in every worker (persistent or not)."""
        self._epoch.fill_(int(epoch))

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        # Not a generator itself: the epoch is read when the iteration starts (a generator's
        # body would wait for the first batch), so every worker takes the same one.
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        options = self.reader_options
        if info is not None:
            # Each worker's numba loops on its share of the cores: a thread per core in every
            # worker kept them busy spinning (2 workers on 2 vCPUs: 4,250-4,330 against 9,570-11,820 images/s,
            # docs/BENCHMARKS.md "Numba threads in worker processes"). The Reader's own decode
            # threads (JPEG) get the same share unless the caller chose a count.
            share = worker_threads(workers, cores=rank_threads())  # (the rank's cores, under torchrun)
            limit_numba_threads(share)
            if options.get("threads") is None:
                options = {**options, "threads": share}
        return self._batches(self.epoch, worker, workers, options)

    def _batches(self, epoch: int, worker: int, workers: int, options: dict[str, Any]) -> Iterator[tuple[torch.Tensor, ...]]:
        """This worker's batches of the epoch: every ``workers``-th from batch ``worker``."""
        reader = Reader(self.store, self.batch_size, **options)
        reader.set_epoch(epoch)
        plan = reader.plan(epoch)
        for number in range(worker, len(plan), workers):
            batch, _ = reader._make_batch(plan, number)
            batch = reader._convert(batch)
            yield (batch.images, batch.labels) if batch.masks is None else (batch.images, batch.labels, batch.masks)
