"""A bounded on-disk cache of shard blocks, evicted by next use in a known schedule.

Keys are block names (``image-3-0``: field, shard, block number); values are the block's
bytes, one file each. The reader knows the order in which it will need every block (its
epoch plan), so on eviction it drops the block whose next use is furthest away, or never
comes (Belady's rule), rather than the least recently used one: LRU evicts exactly the blocks
a shuffled epoch is about to revisit. ``policy="lru"`` is kept for comparison.

Several processes of one node (the ranks) may share ``directory``: files are written under a
temporary name and renamed into place, and eviction runs under an ``flock`` on
``directory/.lock``; a block another rank evicted is simply fetched again.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable
from pathlib import Path

POLICIES = ("next-use", "lru")


class BlockCache:
    """``get(key)``, ``put(key, data)``; at most ``limit`` bytes in ``directory``."""

    def __init__(self, directory: str | os.PathLike[str], limit: int, policy: str = "next-use") -> None:
        if policy not in POLICIES:
            raise ValueError(f"Expected cache policy 'next-use' or 'lru'. Got {policy!r}.")
        if limit <= 0:
            raise ValueError(f"Expected a positive cache_limit in bytes. Got {limit}.")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.limit = int(limit)
        self.policy = policy
        self._lock = threading.Lock()
        self._last_use: dict[str, int] = {}
        self._clock = 0
        # The schedule's answer to "when is this block needed next?" (inf: never).
        self.next_use: Callable[[str], float] = lambda key: float("inf")

    def _path(self, key: str) -> Path:
        return self.directory / key

    def get(self, key: str) -> bytes | None:
        """The cached block, or None."""
        try:
            data = self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        with self._lock:
            self._clock += 1
            self._last_use[key] = self._clock
        return data

    def contains(self, key: str) -> bool:
        return self._path(key).is_file()

    def put(self, key: str, data: bytes) -> bool:
        """Store a block, evicting others if needed; False if it should not be kept at all."""
        if len(data) > self.limit:
            return False
        with self._lock, open(self.directory / ".lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                if not self._make_room(key, len(data)):
                    return False
                temporary = self._path(f".{key}.{os.getpid()}.{threading.get_ident()}.tmp")
                temporary.write_bytes(data)
                os.replace(temporary, self._path(key))
                self._clock += 1
                self._last_use[key] = self._clock
                return True
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _make_room(self, key: str, size: int) -> bool:
        files = {p.name: p.stat().st_size for p in self.directory.iterdir() if not p.name.startswith(".")}
        used = sum(files.values()) - files.get(key, 0)
        if used + size <= self.limit:
            return True
        if self.policy == "next-use":
            # Never evict a block needed sooner than the one coming in: keep the sooner one instead.
            mine = self.next_use(key)
            order = sorted(files, key=lambda name: -self.next_use(name))
            victims = []
            for name in order:
                if used + size <= self.limit:
                    break
                if name == key or self.next_use(name) < mine:
                    continue
                victims.append(name)
                used -= files[name]
        else:
            order = sorted(files, key=lambda name: self._last_use.get(name, 0))
            victims = []
            for name in order:
                if used + size <= self.limit:
                    break
                if name != key:
                    victims.append(name)
                    used -= files[name]
        if used + size > self.limit:
            return False
        for name in victims:
            try:
                self._path(name).unlink()
            except FileNotFoundError:
                pass
            self._last_use.pop(name, None)
        return True
