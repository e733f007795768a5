"""Reading a remote store fast: block reads ahead of the known order, through a shared cache.

A shard object is read in blocks of ``block_size`` bytes (8 MiB by default): one ranged GET
fetches every sample in a block, so samples read in shard order (``shards_in_use``) cost one
request per block instead of one per sample. The reader hands its order for the epoch (and
the next one, so the boundary does not stall) to :meth:`BlockFetcher.schedule`; a background
thread then walks the blocks in order of first use and keeps up to ``ahead`` of them in
flight on ``workers`` threads. Fetched blocks go to a :class:`~prepkit.store.cache.BlockCache`
evicted by next use in this same schedule. :attr:`BlockFetcher.stats` counts per epoch.
"""

from __future__ import annotations

import bisect
import functools
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from prepkit.store.cache import BlockCache

if TYPE_CHECKING:
    from prepkit.store.reader import Store

DEFAULT_BLOCK = 8 << 20


@dataclass
class FetchStats:
    """One epoch's remote reading (from one :meth:`BlockFetcher.schedule` to the next).

    ``bytes_fetched`` and ``requests`` count every ranged GET of the epoch, the prefetches of
    the next epoch's first blocks included. Each block read by a sample is a hit if the block
    was in the cache before this epoch fetched anything (cached by an earlier epoch, by another
    rank, or prefetched across the boundary by the previous epoch), a miss if this epoch had
    to fetch it; ``waits`` counts the reads that blocked on a fetch still running or started
    on demand. A cold epoch has hit rate 0, a warm epoch of a store that fits in the cache 1.
    """

    bytes_fetched: int = 0
    requests: int = 0
    hits: int = 0
    misses: int = 0
    waits: int = 0
    started: float = field(default_factory=time.perf_counter)
    first_read_s: float | None = None
    fetched: set[str] = field(default_factory=set, repr=False)  # block names fetched this epoch

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def summary(self) -> dict[str, float | int | None]:
        """The epoch's figures as a dict (``first_read_s``: from the epoch's start to its first read)."""
        return {"bytes_fetched": self.bytes_fetched, "requests": self.requests, "hit_rate": round(self.hit_rate, 4),
                "waits": self.waits, "first_read_s": None if self.first_read_s is None else round(self.first_read_s, 4)}


class BlockFetcher:
    """Block reads of one remote store through ``cache``, prefetched along a schedule."""

    def __init__(self, store: Store, cache: BlockCache, *, block_size: int = DEFAULT_BLOCK, ahead: int = 8,
                 workers: int = 4) -> None:
        if store.remote is None:
            raise ValueError(f"Expected a store in object storage. Got the local store {store.path}.")
        self.store = store
        self.cache = cache
        self.block_size = int(block_size)
        self.ahead = max(1, ahead)
        self.stats = FetchStats()
        self.history: list[FetchStats] = []
        self._uses: dict[str, list[int]] = {}
        self._order: list[tuple[int, str, str, int]] = []
        self._position = 0
        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="prepkit-fetch")
        self._inflight: dict[str, Future[bytes]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._generation = 0
        self._thread: threading.Thread | None = None
        self._sizes: dict[str, int] = {}
        self._closed = False
        self._idle = False
        cache.next_use = self._next_use

    # -- the schedule -----------------------------------------------------------------
    def blocks_of(self, index: int, field_name: str) -> list[tuple[str, str, int]]:
        """The blocks sample ``index``'s ``field_name`` bytes lie in: (name, object key, block number)."""
        arrays = self.store.field_arrays[field_name]
        start, stop = (int(v) for v in arrays.ranges[index])
        if stop <= start:
            return []
        capacity = arrays.geometry.capacity
        shard = start // capacity
        handle = self.store._shard(arrays, shard)
        first = (handle.base + start - shard * capacity) // self.block_size
        last = (handle.base + stop - 1 - shard * capacity) // self.block_size
        key = f"{field_name}/bytes/c/{shard}"
        return [(f"{field_name}-{shard}-{b}", key, b) for b in range(first, last + 1)]

    def schedule(self, indices: np.ndarray, fields: tuple[str, ...] = ("image",)) -> None:
        """The samples about to be read, in order (this epoch's rest, then the next epoch's)."""
        uses: dict[str, list[int]] = {}
        order: list[tuple[int, str, str, int]] = []  # (position, block name, object key, block)
        for position, index in enumerate(np.asarray(indices).tolist()):
            for name in fields:
                for block in self.blocks_of(int(index), name):
                    seen = uses.setdefault(block[0], [])
                    if seen and seen[-1] == position:
                        continue
                    if not seen or seen[-1] < position - 1:  # a new run of uses: fetch again if evicted
                        order.append((position, *block))
                    seen.append(position)
        with self._lock:
            if self.stats.requests or self.stats.hits or self.stats.misses:
                self.history.append(self.stats)
            self.stats = FetchStats()
            self._uses, self._order, self._position = uses, order, 0
            self._generation += 1
            self._wake.notify_all()
        if self._thread is None:
            self._thread = threading.Thread(target=self._prefetch_loop, name="prepkit-prefetch", daemon=True)
            self._thread.start()

    def _next_use(self, name: str) -> float:
        uses = self._uses.get(name)
        if not uses:
            return float("inf")
        at = bisect.bisect_left(uses, self._position)
        return float(uses[at]) if at < len(uses) else float("inf")

    # -- fetching ---------------------------------------------------------------------
    def _fetch(self, name: str, key: str, block: int) -> bytes:
        remote = self.store.remote
        assert remote is not None
        size = self._sizes.get(key)
        if size is None:
            size = self._sizes[key] = remote.size(key)
        start = block * self.block_size
        data = remote.get_range(key, start, min(size, start + self.block_size))
        with self._lock:
            self.stats.bytes_fetched += len(data)
            self.stats.requests += 1
            self.stats.fetched.add(name)  # before the cache holds it: a read then counts it a miss
        self.cache.put(name, data)
        return data

    def _start_fetch(self, name: str, key: str, block: int) -> Future[bytes]:
        future = self._inflight.get(name)
        if future is None:
            future = self._pool.submit(self._fetch, name, key, block)
            self._inflight[name] = future
            future.add_done_callback(functools.partial(self._done, name))
        return future

    def _done(self, name: str, _: Future[bytes]) -> None:
        with self._lock:
            self._inflight.pop(name, None)
            self._wake.notify_all()

    def _prefetch_loop(self) -> None:
        cursor, generation = 0, -1
        while not self._closed:
            with self._lock:
                if generation != self._generation:
                    cursor, generation = 0, self._generation
                # Blocks whose use has passed are skipped; at most ``ahead`` runs in front of the reader.
                while cursor < len(self._order) and self._order[cursor][0] < self._position:
                    cursor += 1
                front = bisect.bisect_left(self._order, (self._position,))
                window_done = cursor >= len(self._order) or cursor >= front + self.ahead
                if window_done or len(self._inflight) >= self.ahead:
                    idle = window_done and not self._inflight
                    if idle and not self._idle:
                        self._wake.notify_all()  # wakes wait_idle()
                    self._idle = idle
                    self._wake.wait(0.05)
                    continue
                self._idle = False
                _, name, key, block = self._order[cursor]
                cursor += 1
                if not self.cache.contains(name):
                    self._start_fetch(name, key, block)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait until the prefetcher has fetched everything it may fetch ahead of the reader's
        current position (True), or ``timeout`` seconds passed (False)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            generation = self._generation
            self._idle = False  # the prefetch loop confirms it after looking at the schedule
            while not (self._idle and self._generation == generation):
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None:
                    return False
                self._wake.wait(min(left, 0.05))
        return True

    def read(self, key: str, start: int, stop: int) -> bytes:
        """Bytes [start, stop) of shard object ``key``, from cached or fetched blocks."""
        field_name, _, _, shard = key.split("/")
        parts = []
        first, last = start // self.block_size, (stop - 1) // self.block_size
        for block in range(first, last + 1):
            name = f"{field_name}-{shard}-{block}"
            with self._lock:
                uses = self._uses.get(name)
                if uses:
                    at = bisect.bisect_left(uses, self._position)
                    if at < len(uses):
                        self._position = uses[at]
                        self._wake.notify_all()
            data = self.cache.get(name)
            if data is None:
                with self._lock:
                    self.stats.misses += 1
                    self.stats.waits += 1
                    future = self._start_fetch(name, key, block)
                data = future.result()
            else:
                with self._lock:
                    if name in self.stats.fetched:
                        self.stats.misses += 1  # prefetched this epoch: fetched, not found in the cache
                    else:
                        self.stats.hits += 1
            if self.stats.first_read_s is None:
                self.stats.first_read_s = time.perf_counter() - self.stats.started
            offset = block * self.block_size
            parts.append(data[max(start, offset) - offset : min(stop, offset + len(data)) - offset])
        return b"".join(parts)

    def close(self) -> None:
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
