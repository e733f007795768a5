"""The GPU Reader's host work per image on both benchmark sets (no GPU needed).

``engine.lossless_host_plan`` (headers, tables, work table, gather into a staging buffer)
over v2 lossless stores of the 2048x1024 mosaics and the 500x375 photos, in batches, at each
thread count; median of the passes after one warm-up. ``bench.hostprep`` compares the old and
new host paths on the mosaics; this is the quick view of both sets::

    python -m prepkit.bench.reader_host --threads 1 2 --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def measure(images: list[np.ndarray], count: int, batch: int, threads: int, repeat: int) -> dict[str, float]:
    """Microseconds per image (wall, CPU, and the gather's wall share) over ``count`` samples."""
    from prepkit.bench.reader import build
    from prepkit.decode import engine
    from prepkit.store.reader import open_store

    with tempfile.TemporaryDirectory() as folder:
        store = open_store(build(images, Path(folder), "lossless", count, 64))
        arrays = store.field_arrays["image"]
        batches = [np.arange(start, min(start + batch, count)) for start in range(0, count, batch)]
        staging = np.empty(batch * int((arrays.ranges[:, 1] - arrays.ranges[:, 0]).max()) + 1, np.uint8)
        timings: dict[str, float] = {}

        def one_pass() -> None:
            for indices in batches:
                engine.lossless_host_plan(store, indices, "image", arrays.shapes[indices], None, staging, threads,
                                          timings)

        one_pass()
        timings.clear()
        walls, cpus = [], []
        for _ in range(repeat):
            started, cpu = time.perf_counter(), time.process_time()
            one_pass()
            walls.append(time.perf_counter() - started)
            cpus.append(time.process_time() - cpu)
    return {"wall_us": statistics.median(walls) / count * 1e6, "cpu_us": statistics.median(cpus) / count * 1e6,
            "gather_us": timings["gather"] / (repeat * count) * 1e6}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    from prepkit.bench import photos
    from prepkit.bench.machine import machine_line

    print(machine_line())
    for name, images, count in (("2048x1024", photos.cityscapes_like(), 128), ("500x375", photos.imagenet_like(), 1024)):
        for threads in args.threads:
            result = measure(images, count, args.batch, threads, args.repeat)
            print(f"{name}, {threads} threads: {result['wall_us']:.1f} us wall ({result['cpu_us']:.1f} us CPU) per image, "
                  f"gather {result['gather_us']:.1f} us wall", flush=True)


if __name__ == "__main__":
    main()
