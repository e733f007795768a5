"""The GPU Reader's host work per image on both benchmark sets (no GPU needed).

Default: ``engine.lossless_host_plan`` (headers, tables, work table, gather into a staging
buffer) over v2 lossless stores of the 2048x1024 mosaics and the 500x375 photos, in batches,
at each thread count; median of the passes after one warm-up. ``bench.hostprep`` compares the
old and new host paths on the mosaics; this is the quick view of both sets.

``--gpu-reader``: the whole ``Reader(device="cuda")``, without and with RandomResizedCrop +
flip + float + Normalize, under numba's CUDA simulator with every kernel launch replaced by a
no-op: what the Reader's threads cost the host per image, where a GPU would decode. The
simulator's copies to the "device" are numpy copies that a real GPU would make by DMA, so this
is an upper bound of the host work. On the H200 the Reader took 121 us per 500x375 image::

    python -m prepkit.bench.reader_host --threads 1 2 --repeat 5
    python -m prepkit.bench.reader_host --gpu-reader --sets 500x375
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

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


class _NoLaunch:
    """Stands for a CUDA kernel: ``kernel[config](*args)`` does nothing."""

    def __getitem__(self, config: object) -> Any:
        return lambda *args: None


class _ZeroErrors:
    """Stands for reset_errors_kernel: the error totals start at 0, as on a GPU."""

    def __getitem__(self, config: object) -> Any:
        def launch(result: Any) -> None:
            result.copy_to_device(np.zeros(result.shape, result.dtype))

        return launch


def reader_kernels() -> list[tuple[Any, str]]:
    """(module, attribute) of every CUDA kernel the Reader's GPU path launches."""
    from prepkit.augment import cuda as augment_cuda
    from prepkit.lossless import cuda as lossless_cuda
    from prepkit.lossless import cuda_v2

    names = ((lossless_cuda, ("decode_kernel", "reset_errors_kernel", "reduce_errors_kernel")),
             (cuda_v2, ("decode_kernel", "expand_tables_kernel")),
             (augment_cuda, ("augment_kernel", "mask_kernel", "erase_kernel", "channels_kernel", "colour_kernel",
                             "mask_warp_kernel", "mixup_kernel", "cutmix_kernel")))
    return [(module, name) for module, group in names for name in group]


def host_only_kernels() -> None:
    """Replace every kernel the Reader launches by a no-op (simulator only: the decoded pixels
    are then garbage, and error codes stay 0)."""
    from numba import config

    if not config.ENABLE_CUDASIM:
        raise RuntimeError("host_only_kernels needs NUMBA_ENABLE_CUDASIM=1 (it would leave a real GPU idle)")
    for module, name in reader_kernels():
        setattr(module, name, _ZeroErrors() if name == "reset_errors_kernel" else _NoLaunch())


def measure_gpu_reader(images: list[np.ndarray], count: int, batch: int, repeat: int,
                       transforms: list[Any]) -> float:
    """Microseconds per image of Reader(device="cuda") epochs (the fastest of ``repeat`` after
    one), kernels replaced by no-ops (call host_only_kernels first)."""
    import prepkit
    from prepkit.bench.reader import build

    with tempfile.TemporaryDirectory() as folder:
        store = build(images, Path(folder), "lossless", count, 64)
        reader = prepkit.Reader(store, batch_size=batch, shuffle=False, device="cuda", output="numpy",
                                transforms=transforms)
        seconds = []
        for epoch in range(repeat + 1):
            started = time.perf_counter()
            for _ in reader:
                pass
            if epoch:
                seconds.append(time.perf_counter() - started)
    return min(seconds) / count * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sets", nargs="+", default=["2048x1024", "500x375"], choices=["2048x1024", "500x375"])
    parser.add_argument("--gpu-reader", action="store_true", help="the whole GPU Reader, kernels as no-ops (simulator)")
    args = parser.parse_args(argv)
    if args.gpu_reader:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"  # before numba is imported (this module does not import it)

    from prepkit.bench import photos
    from prepkit.bench.machine import machine_line

    print(machine_line())
    sets = {"2048x1024": (photos.cityscapes_like, 128), "500x375": (photos.imagenet_like, 1024)}
    for name in args.sets:
        make, count = sets[name]
        images = make()
        if args.gpu_reader:
            from prepkit.augment import Normalize, RandomHorizontalFlip, RandomResizedCrop, ToDtype
            from prepkit.bench.gpu import MEAN, STD

            host_only_kernels()
            ops = [RandomResizedCrop(224), RandomHorizontalFlip(), ToDtype("float32", scale=True), Normalize(MEAN, STD)]
            for label, transforms in (("no transforms", []), ("RandomResizedCrop + flip + float + Normalize", ops)):
                us = measure_gpu_reader(images, count, args.batch, args.repeat, transforms)
                print(f"{name}, Reader(device='cuda'), {label}: {us:.1f} us per image (host only)", flush=True)
            continue
        for threads in args.threads:
            result = measure(images, count, args.batch, threads, args.repeat)
            print(f"{name}, {threads} threads: {result['wall_us']:.1f} us wall ({result['cpu_us']:.1f} us CPU) per image, "
                  f"gather {result['gather_us']:.1f} us wall", flush=True)


if __name__ == "__main__":
    main()
