"""Remote reading through the block cache: same batches, fewer requests, next-use eviction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import prepkit
from prepkit.ingest.build import build_store
from prepkit.ingest.images import ImageOptions
from prepkit.layouts import RawLayout
from prepkit.seaweedfs import SeaweedServer
from prepkit.store.cache import BlockCache
from tests.conftest import smooth_image, write_image


def replay(policy: str, schedule: list[str], limit_blocks: int, tmp_path: Path) -> int:
    """Hits of a cache of ``limit_blocks`` 10-byte blocks that reads ``schedule`` in order."""
    cache = BlockCache(tmp_path / f"{policy}-{limit_blocks}", limit=10 * limit_blocks, policy=policy)
    now = [0]
    uses: dict[str, list[int]] = {}
    for at, key in enumerate(schedule):
        uses.setdefault(key, []).append(at)
    cache.next_use = lambda key: float(next((u for u in uses.get(key, []) if u > now[0]), float("inf")))
    hits = 0
    for position, key in enumerate(schedule):
        now[0] = position
        if cache.get(key) is not None:
            hits += 1
        else:
            cache.put(key, bytes(10))
    return hits


def test_next_use_eviction_beats_lru_on_a_repeated_scan(tmp_path: Path) -> None:
    # Two epochs over 8 blocks with room for 2 (25%): LRU evicts each block just before its
    # reuse and never hits; next use keeps blocks that come back soonest.
    schedule = [f"b{i}" for i in range(8)] * 2
    assert replay("lru", schedule, 2, tmp_path) == 0
    assert replay("next-use", schedule, 2, tmp_path) == 2
    # With room for everything both hit on every reuse.
    assert replay("lru", schedule, 8, tmp_path) == replay("next-use", schedule, 8, tmp_path) == 8


def test_the_cache_stays_within_its_limit_and_refuses_bad_settings(tmp_path: Path) -> None:
    cache = BlockCache(tmp_path / "c", limit=25)
    for number in range(6):
        cache.put(f"k{number}", bytes(10))
    assert sum(p.stat().st_size for p in (tmp_path / "c").iterdir() if not p.name.startswith(".")) <= 25
    assert cache.put("huge", bytes(26)) is False
    with pytest.raises(ValueError, match="Expected cache policy 'next-use' or 'lru'. Got 'fifo'"):
        BlockCache(tmp_path / "d", limit=10, policy="fifo")


@pytest.fixture
def remote_store(tmp_path: Path, seaweed: SeaweedServer, s3_url: str) -> tuple[Path, str]:
    root = tmp_path / "dataset"
    for number in range(24):
        write_image(root / f"class{number % 3}" / f"{number:03d}.png", smooth_image(16, 16, seed=number))
    local = tmp_path / "local"
    for dest in (str(local), s3_url):
        build_store(str(root), dest, layout=RawLayout(), options=ImageOptions(), samples_per_shard=8, workers=1,
                    storage_options=seaweed.storage_options())
    return local, s3_url


def test_cached_reader_gives_the_same_batches_and_the_next_epoch_is_prefetched(
    remote_store: tuple[Path, str], seaweed: SeaweedServer, tmp_path: Path
) -> None:
    local, url = remote_store
    store = prepkit.open_store(url, storage_options=seaweed.storage_options(), cache_dir=tmp_path / "cache",
                               cache_limit=1 << 30, block_size=2048)
    reader = prepkit.Reader(store, batch_size=5, seed=2, shards_in_use=1)
    mine = prepkit.Reader(local, batch_size=5, seed=2, shards_in_use=1)
    for epoch in (0, 1):
        reader.set_epoch(epoch)
        mine.set_epoch(epoch)
        for a, b in zip(mine, reader, strict=True):
            assert np.array_equal(a.indices, b.indices)
            assert all(np.array_equal(x, y) for x, y in zip(a.images, b.images, strict=True))
    first, second = store.fetcher.history[0], store.fetcher.stats
    shard_bytes = 24 * 16 * 16 * 3
    # Epoch 0 fetched every sample's block once, in block-sized requests (not one per sample).
    assert shard_bytes <= first.bytes_fetched and first.requests < 24
    # Epoch 1 finds every block in the cache: no misses, nothing fetched again.
    assert second.misses == 0 and second.hits > 0 and second.requests == 0
    summary = first.summary()
    assert summary["requests"] == first.requests and summary["hit_rate"] == round(first.hit_rate, 4)
    assert summary["first_read_s"] is not None and summary["first_read_s"] >= 0


def test_ranks_of_a_node_share_the_cache(remote_store: tuple[Path, str], seaweed: SeaweedServer, tmp_path: Path) -> None:
    _, url = remote_store
    options = seaweed.storage_options()
    one = prepkit.open_store(url, storage_options=options, cache_dir=tmp_path / "node", cache_limit=1 << 30, block_size=4096)
    two = prepkit.open_store(url, storage_options=options, cache_dir=tmp_path / "node", cache_limit=1 << 30, block_size=4096)
    list(prepkit.Reader(one, batch_size=4, seed=0, rank=0, world_size=1, shuffle=False))
    list(prepkit.Reader(two, batch_size=4, seed=0, rank=0, world_size=1, shuffle=False))
    assert one.fetcher.stats.requests > 0
    assert two.fetcher.stats.requests == 0 and two.fetcher.stats.misses == 0
