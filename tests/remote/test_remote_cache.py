"""Remote reading through the block cache: same batches, fewer requests, next-use eviction."""

from __future__ import annotations

import multiprocessing
import pickle
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


def test_the_reader_takes_the_cache_arguments_and_checks_them(
    remote_store: tuple[Path, str], seaweed: SeaweedServer, tmp_path: Path
) -> None:
    local, url = remote_store
    options = seaweed.storage_options()
    reader = prepkit.Reader(url, batch_size=5, seed=1, shards_in_use=1, storage_options=options,
                            cache_dir=tmp_path / "cache", cache_limit=1 << 20, cache_policy="lru")
    assert reader.store.cache_settings is not None
    assert reader.store.cache_settings["cache_limit"] == 1 << 20 and reader.store.fetcher.cache.policy == "lru"
    mine = prepkit.Reader(local, batch_size=5, seed=1, shards_in_use=1)
    for a, b in zip(mine, reader, strict=True):
        assert np.array_equal(a.indices, b.indices) and np.array_equal(a.images, b.images)
    assert reader.stats is not None and reader.stats.requests > 0
    assert any(p.name.startswith("image-") for p in (tmp_path / "cache").iterdir())
    # An open store without a cache gets one from the Reader.
    store = prepkit.open_store(url, storage_options=options)
    assert prepkit.Reader(store, batch_size=5, cache_dir=tmp_path / "other").store.fetcher is not None
    with pytest.raises(ValueError, match="Expected cache_dir with cache_limit or cache_policy"):
        prepkit.Reader(url, batch_size=5, storage_options=options, cache_limit=100)
    with pytest.raises(ValueError, match="Expected cache_policy to be one of"):
        prepkit.Reader(url, batch_size=5, storage_options=options, cache_dir=tmp_path / "c", cache_policy="fifo")
    with pytest.raises(ValueError, match="Expected cache_limit >= 1. Got 0"):
        prepkit.Reader(url, batch_size=5, storage_options=options, cache_dir=tmp_path / "c", cache_limit=0)
    with pytest.raises(ValueError, match="Expected storage_options with a store path or URL"):
        prepkit.Reader(store, batch_size=5, storage_options=options)
    with pytest.raises(ValueError, match="Expected cache_dir with a store that has no cache"):
        prepkit.Reader(reader.store, batch_size=5, cache_dir=tmp_path / "c")
    with pytest.raises(prepkit.errors.StoreError, match="Expected a store in object storage for a cache. Got a local store"):
        prepkit.Reader(local, batch_size=5, cache_dir=tmp_path / "c")


def test_per_epoch_report_cold_then_warm(remote_store: tuple[Path, str], seaweed: SeaweedServer, tmp_path: Path) -> None:
    _, url = remote_store
    reader = prepkit.Reader(url, batch_size=5, seed=3, shards_in_use=1, storage_options=seaweed.storage_options(),
                            cache_dir=tmp_path / "cache", cache_limit=1 << 30)
    for epoch in (0, 1):
        reader.set_epoch(epoch)
        batches = list(reader)
        stats = reader.stats
        assert stats is not None and stats.epoch == epoch and stats.batches == len(batches) == len(reader)
        assert stats.samples == 24
        assert stats.time_to_first_batch_s is not None and stats.epoch_s is not None
        assert 0 < stats.time_to_first_batch_s < stats.epoch_s
    cold, warm = reader.history
    # Cold: every block read was fetched in this epoch; the whole store came over the wire.
    assert cold.hit_rate == 0.0 and cold.misses > 0 and cold.requests > 0
    assert cold.bytes_fetched >= 24 * 16 * 16 * 3
    # Warm (the store fits in the cache): every read is a hit, nothing is fetched.
    assert warm.hit_rate == 1.0 and warm.requests == 0 and warm.bytes_fetched == 0 and warm.hits > 0
    assert warm.summary()["hit_rate"] == 1.0 and cold.summary()["requests"] == cold.requests
    # A local store reports its timings too, and no remote traffic.
    local = prepkit.Reader(remote_store[0], batch_size=5)
    list(local)
    assert local.stats is not None and local.stats.requests == 0 and local.stats.time_to_first_batch_s is not None


def test_the_next_epochs_first_blocks_are_fetched_before_it_starts(
    remote_store: tuple[Path, str], seaweed: SeaweedServer, tmp_path: Path
) -> None:
    _, url = remote_store
    store = prepkit.open_store(url, storage_options=seaweed.storage_options(), cache_dir=tmp_path / "cache",
                               cache_limit=1 << 30, block_size=768)  # about one block per sample
    # Rank 0 of 2 reads half the samples per epoch: pick a seed whose epoch 1 starts with a
    # block that epoch 0 never reads, so only the boundary prefetch can bring it in early.
    for seed in range(20):
        reader = prepkit.Reader(store, batch_size=3, seed=seed, rank=0, world_size=2)
        read_in_0 = {b[0] for i in reader.plan(0).indices.tolist() for b in store.fetcher.blocks_of(i, "image")}
        first_of_1 = {b[0] for i in reader.plan(1).batch(0).tolist() for b in store.fetcher.blocks_of(i, "image")}
        if first_of_1 - read_in_0:
            break
    else:
        pytest.fail("no seed gives an epoch 1 that starts outside epoch 0")
    cache = store.fetcher.cache
    list(reader)
    assert store.fetcher.wait_idle(timeout=30)
    epoch0 = reader.stats
    assert epoch0 is not None and epoch0.fetch is not None
    new = first_of_1 - read_in_0
    assert all(cache.contains(name) for name in first_of_1)
    assert new <= epoch0.fetch.fetched  # requested during epoch 0, for epoch 1
    assert epoch0.requests > len(read_in_0)
    reader.set_epoch(1)
    iterator = iter(reader)
    next(iterator)
    epoch1 = reader.stats
    assert epoch1 is not None and epoch1.fetch is not None
    assert not (first_of_1 & epoch1.fetch.fetched)  # the first batch fetched nothing
    iterator.close()


def read_in_a_worker(store: prepkit.Store) -> tuple[dict[str, object] | None, int, int]:
    """Runs in a spawn process: read one epoch of the unpickled store through its cache."""
    reader = prepkit.Reader(store, batch_size=6, seed=0, shards_in_use=1)
    list(reader)
    assert reader.stats is not None
    return store.cache_settings, reader.stats.requests, reader.stats.hits


def test_a_pickled_store_keeps_its_cache(remote_store: tuple[Path, str], seaweed: SeaweedServer, tmp_path: Path) -> None:
    _, url = remote_store
    store = prepkit.open_store(url, storage_options=seaweed.storage_options(), cache_dir=tmp_path / "cache",
                               cache_limit=1 << 30, block_size=4096, cache_policy="lru")
    list(prepkit.Reader(store, batch_size=6, seed=0, shards_in_use=1))  # fills the cache
    copy = pickle.loads(pickle.dumps(store))
    assert copy.cache_settings == store.cache_settings and copy.fetcher is not copy and copy.fetcher is not None
    assert copy.fetcher.block_size == 4096 and copy.fetcher.cache.policy == "lru"
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        settings, requests, hits = pool.apply(read_in_a_worker, (store,))
    # The worker read every block from the cache the parent filled: no request at all.
    assert settings == store.cache_settings
    assert requests == 0 and hits > 0
