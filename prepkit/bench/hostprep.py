"""Host work of the GPU Reader's lossless path, measured without a GPU.

    python -m prepkit.bench.hostprep STORE [--batch 64] [--crop 224] [--threads T] [--json F]
    python -m prepkit.bench.hostprep --make-store DIR [--images 64] ...

Per batch, what the producer thread does before the first CUDA call: validate the headers
and tile tables, build the kernels' work table (and v2 decode tables), and stage the stored
bytes in the (pinned, here ordinary) staging buffer. Two paths in interleaved rounds, same
batches: ``old`` (per-sample Python: header loop, ``plan.build``, ``np.concatenate``, copy to
the staging buffer, v2 decode table) and ``new`` (``prepkit.lossless.hostplan``: numba over
the batch, threaded gather straight from the shard memory maps). With ``--crop`` the regions
are those RandomResizedCrop(crop) draws and only the tiles they touch are staged.
``--make-store`` writes a lossless store of the 2048x1024 Cityscapes-like set first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np


def make_store(folder: Path, images: int, per_shard: int, version: int = 1) -> Path:
    """A lossless store (bitstream ``version``) of ``images`` 2048x1024 Cityscapes-like photos."""
    from prepkit.bench.photos import cityscapes_like
    from prepkit.layouts import LosslessLayout
    from prepkit.store.writer import EncodedSample, plan_store, write_all

    photos = cityscapes_like()
    layout = LosslessLayout(version=version)
    encoded = [layout.encode(image) for image in photos]
    shapes: list[tuple[int, int, int]] = []
    for i in range(images):
        h, w, c = (int(v) for v in photos[i % len(photos)].shape)
        shapes.append((h, w, c))
    plan = plan_store({"image": layout}, {"image": shapes}, per_shard, class_names=None,
                      provenance={"command": "bench hostprep"}, items_digest="bench")
    dest = folder / f"lossless-v{version}"
    write_all(dest, plan, lambda i: EncodedSample(i, str(i), 0, {"image": (encoded[i % len(photos)], shapes[i])}),
              overwrite=True)
    return dest


def old_host_work(store: Any, indices: list[int], rois: np.ndarray | None, staging: np.ndarray) -> Any:
    """The GPU path's host work before hostplan: the Python validation loop and plan.build,
    then the copy into the staging buffer and the v2 decode table (lossless/cuda*.decode_plan)."""
    from prepkit.decode.engine import _shapes
    from prepkit.decode.rois import check_rois
    from prepkit.lossless import cpu_v2
    from prepkit.lossless import plan as lossless_plan
    from prepkit.lossless.format import read_header

    shapes = _shapes(store, indices, "image")
    buffers = [store.read_bytes(i) for i in indices]
    for data in buffers:  # the per-sample header check of engine._decode_lossless
        read_header(data)
    regions = None
    if rois is not None:
        checked = check_rois(rois, shapes, indices)
        regions = [(int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in checked]
    plan = lossless_plan.build(buffers, regions)
    staging[: plan.src.size] = plan.src
    if 2 in plan.versions:
        np.ascontiguousarray(cpu_v2.decode_table(plan).reshape(-1))  # cuda_v2.decode_table
        np.ascontiguousarray(plan.work[plan.work[:, lossless_plan.VERSION] == 2])
    return plan


def new_host_work(store: Any, indices: list[int], rois: np.ndarray | None, staging: np.ndarray,
                  threads: int, timings: dict[str, float] | None = None) -> Any:
    """engine.lossless_host_plan, the host work of the GPU path (``timings`` gets the gather time)."""
    from prepkit.decode.engine import _shapes, lossless_host_plan

    return lossless_host_plan(store, indices, "image", _shapes(store, indices, "image"), rois, staging, threads,
                              timings=timings)


def _staged_equals_store(store: Any, batch: list[int], region: np.ndarray | None, staging: np.ndarray,
                         threads: int) -> bool:
    """Every work item's staged bytes are the stored bytes of its tile (plan.build's, read
    with Store.read_bytes); without regions the staged buffer is the samples back to back."""
    from prepkit.lossless import plan as lossless_plan

    new = new_host_work(store, batch, region, staging, threads)
    buffers = [store.read_bytes(i) for i in batch]
    if region is None and not np.array_equal(new.src, np.concatenate(buffers)):
        return False
    regions = None if region is None else [(int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in region]
    old = lossless_plan.build(buffers, regions)
    if not np.array_equal(new.work[:, 2:], old.work[:, 2:]):
        return False
    a, b = new.work[:, :2], old.work[:, :2]
    return all(np.array_equal(new.src[x[0] : x[1]], old.src[y[0] : y[1]]) for x, y in zip(a, b, strict=True))


def crop_regions(store: Any, indices: list[int], crop: int, seed: int) -> np.ndarray:
    """The (y0, x0, y1, x1) regions RandomResizedCrop(crop) draws for these samples."""
    from prepkit.augment import Pipeline, RandomResizedCrop
    from prepkit.decode.engine import _shapes

    shapes = _shapes(store, indices, "image")
    params = Pipeline([RandomResizedCrop(crop)]).params(shapes, np.asarray(indices), seed=0, epoch=seed)
    y, x, h, w = (params.region[:, k].astype(np.int64) for k in range(4))
    return np.column_stack([y, x, y + h, x + w])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store", nargs="?", help="a lossless store (or use --make-store)")
    parser.add_argument("--make-store", metavar="DIR", help="write a 2048x1024 lossless store here first")
    parser.add_argument("--images", type=int, default=64, help="images of the store --make-store writes")
    parser.add_argument("--version", type=int, default=1, choices=[1, 2], help="bitstream of the --make-store store")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--crop", type=int, default=None, help="crop-aware: RandomResizedCrop(CROP) regions")
    parser.add_argument("--threads", type=int, default=2, help="gather threads of the new path")
    parser.add_argument("--repeat", type=int, default=7, help="interleaved rounds (median reported)")
    parser.add_argument("--json", metavar="F", help="write the results here")
    args = parser.parse_args(argv)
    if (args.store is None) == (args.make_store is None):
        parser.error("give STORE or --make-store DIR (one of them)")

    import numba

    from prepkit.bench.machine import machine_line
    from prepkit.store.reader import Store

    path = Path(args.store) if args.store else make_store(Path(args.make_store), args.images, max(1, args.images // 2),
                                                                     args.version)
    store = Store(path)
    if store.field_arrays["image"].layout.name != "lossless":
        parser.error(f"{path}: Expected a lossless store. Got layout {store.field_arrays['image'].layout.name!r}.")
    count = len(store)
    batches = [[(b * args.batch + i) % count for i in range(args.batch)] for b in range(max(1, -(-count // args.batch)))]
    rois = [None if args.crop is None else crop_regions(store, batch, args.crop, number) for number, batch in enumerate(batches)]
    ranges = store.field_arrays["image"].ranges
    stored = max(int((ranges[b, 1] - ranges[b, 0]).sum()) for b in batches)
    staging = np.zeros(stored, np.uint8)  # pinned memory on a GPU machine; touched once here
    for batch, region in zip(batches, rois, strict=True):  # compile and warm the page cache
        old_host_work(store, batch, region, staging)
        new_host_work(store, batch, region, staging, args.threads)
    # Wall seconds, and CPU seconds of the process (all threads): on a loaded machine the CPU
    # time is the steadier figure.
    times: dict[str, list[float]] = {k: [] for k in ("old", "new", "new_gather", "old_cpu", "new_cpu", "new_gather_cpu")}
    staged_bytes = 0
    for _ in range(args.repeat):
        start, cpu = time.perf_counter(), time.process_time()
        for batch, region in zip(batches, rois, strict=True):
            old_host_work(store, batch, region, staging)
        times["old"].append(time.perf_counter() - start)
        times["old_cpu"].append(time.process_time() - cpu)
        parts: dict[str, float] = {"gather": 0.0, "gather_cpu": 0.0}
        staged_bytes = 0
        start, cpu = time.perf_counter(), time.process_time()
        for batch, region in zip(batches, rois, strict=True):
            staged_bytes += new_host_work(store, batch, region, staging, args.threads, parts).src.size
        times["new"].append(time.perf_counter() - start)
        times["new_cpu"].append(time.process_time() - cpu)
        times["new_gather"].append(parts["gather"])
        times["new_gather_cpu"].append(parts["gather_cpu"])
    images = sum(len(b) for b in batches)
    med = {k: statistics.median(v) for k, v in times.items()}
    staged_equal = _staged_equals_store(store, batches[-1], rois[-1], staging, args.threads)
    shape = store.shape(0)
    per_image = {k: 1e6 * v / images for k, v in med.items()}
    result = {
        "store": str(path), "images": images, "batch": args.batch, "crop": args.crop, "threads": args.threads,
        "image_shape": list(shape), "repeat": args.repeat, "machine": machine_line(),
        "numba_threads": numba.get_num_threads(),
        "old_us_per_image": per_image["old"], "old_cpu_us_per_image": per_image["old_cpu"],
        "new_us_per_image": per_image["new"], "new_cpu_us_per_image": per_image["new_cpu"],
        "new_table_us_per_image": per_image["new"] - per_image["new_gather"],
        "new_table_cpu_us_per_image": per_image["new_cpu"] - per_image["new_gather_cpu"],
        "new_gather_us_per_image": per_image["new_gather"], "new_gather_cpu_us_per_image": per_image["new_gather_cpu"],
        "speedup": med["old"] / med["new"], "speedup_cpu": med["old_cpu"] / med["new_cpu"],
        "staged_bytes_per_image": staged_bytes / images,
        "gather_gb_s": staged_bytes / med["new_gather"] / 1e9,
        "gather_gb_s_per_thread_cpu": staged_bytes / med["new_gather_cpu"] / 1e9,
        "staged_equals_store": staged_equal,
    }
    r = result
    print(r["machine"])
    print(f"{images} images of {tuple(shape)} in batches of {args.batch}, crop {args.crop}, {args.threads} gather "
          f"threads, median of {args.repeat} interleaved rounds; wall us (CPU us, all threads) per image")
    print("| path | total | header + table | gather | GB/s gathered: wall (per thread, CPU) |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| old: plan.build + concatenate + copy | {r['old_us_per_image']:.1f} ({r['old_cpu_us_per_image']:.1f}) | | | |")
    print(f"| new: hostplan | {r['new_us_per_image']:.1f} ({r['new_cpu_us_per_image']:.1f}) "
          f"| {r['new_table_us_per_image']:.1f} ({r['new_table_cpu_us_per_image']:.1f}) "
          f"| {r['new_gather_us_per_image']:.1f} ({r['new_gather_cpu_us_per_image']:.1f}) "
          f"| {r['gather_gb_s']:.2f} ({r['gather_gb_s_per_thread_cpu']:.2f}) |")
    print(f"old / new: {r['speedup']:.1f}x wall, {r['speedup_cpu']:.1f}x CPU; staged "
          f"{r['staged_bytes_per_image'] / 1e6:.3f} MB per image; staged bytes equal the store's: {staged_equal}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
