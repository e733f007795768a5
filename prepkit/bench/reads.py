"""Random-access read benchmark: prepkit's shard-index fast path against zarr-python.

    python -m prepkit.bench.reads [--samples 20000] [--size 32] [--reads 20000]

Builds a raw store of small images (CIFAR-sized by default) in a temporary folder, then
times, in one process on one core, random single-sample reads through:
- ``prepkit``: ``store[i]["image"]`` (decoded H x W x C array, label included);
- ``prepkit bytes``: ``store.read_bytes(i)`` (the stored bytes, a zero-copy view);
- ``zarr-python``: ``bytes_array[start:stop]`` on the same store's flat array;
- ``zarr-python (N,H,W,C)``: ``array[i]`` on a plain sharded 4-D array of the same pixels.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


def _rate(read: Callable[[int], object], indices: np.ndarray, seconds: float = 2.0) -> float:
    for index in indices[:100]:
        read(int(index))  # warm-up: open shard files, caches
    count, start = 0, time.perf_counter()
    while True:
        for index in indices:
            read(int(index))
        count += len(indices)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return count / elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--size", type=int, default=32, help="image side in pixels")
    parser.add_argument("--reads", type=int, default=5000, help="random indices per timed pass")
    parser.add_argument("--samples-per-shard", type=int, default=4096)
    args = parser.parse_args(argv)

    import zarr

    from prepkit.bench.machine import describe_machine, machine_line
    from prepkit.layouts import RawLayout
    from prepkit.store.reader import open_store
    from prepkit.store.writer import EncodedSample, plan_store, write_all

    rng = np.random.default_rng(0)
    side = args.size
    pixels = rng.integers(0, 256, size=(args.samples, side, side, 3), dtype=np.uint8)
    with tempfile.TemporaryDirectory() as folder:
        dest = Path(folder) / "store"
        plan = plan_store(
            {"image": RawLayout()}, {"image": [(side, side, 3)] * args.samples}, args.samples_per_shard,
            class_names=None, provenance={"command": "bench"}, items_digest="bench",
        )
        write_all(
            dest, plan,
            lambda i: EncodedSample(item=i, relpath=f"{i}.png", label=i % 10, fields={"image": (pixels[i].tobytes(), (side, side, 3))}),
            overwrite=True,
        )
        plain = zarr.create_array(
            str(Path(folder) / "plain"), shape=pixels.shape, shards=(args.samples_per_shard, side, side, 3),
            chunks=(1, side, side, 3), dtype="uint8", compressors=None,
        )
        plain[...] = pixels

        store = open_store(dest)
        assert np.array_equal(store[123]["image"], pixels[123])
        flat = zarr.open_array(dest / "image" / "bytes", mode="r")
        ranges = store.field_arrays["image"].ranges
        indices = rng.integers(0, args.samples, size=args.reads)
        results = {
            "prepkit store[i]": _rate(lambda i: store[i], indices),
            "prepkit read_bytes(i)": _rate(lambda i: store.read_bytes(i), indices),
            "zarr-python flat[start:stop]": _rate(lambda i: flat[int(ranges[i, 0]) : int(ranges[i, 1])], indices[:500]),
            "zarr-python (N,H,W,C)[i]": _rate(lambda i: plain[i], indices[:500]),
        }
    print(f"machine: {machine_line(describe_machine(with_gpu=False))}, zarr {zarr.__version__}")
    print(f"{args.samples} raw samples of {side}x{side}x3, random single-sample reads, one thread")
    baseline = results["zarr-python (N,H,W,C)[i]"]
    for name, rate in results.items():
        print(f"  {name:<32} {rate:>12,.0f} samples/s   {rate / baseline:8.1f}x zarr-python")


if __name__ == "__main__":
    main()
