"""Reader overhead: samples/s delivered by ``prepkit.Reader`` against the bare cost of the
same decode and augmentation done in a plain loop, on the same samples, in one run.

    python -m prepkit.bench.reader [--images 256] [--batch 64] [--layout lossless|jpeg|raw]

The images are the ImageNet-like set (real photographs at about 500x375, see
``prepkit.bench.photos``), repeated to ``--images``. Transforms: RandomResizedCrop(224),
RandomHorizontalFlip, ToDtype(float32, scale=True), Normalize (ImageNet statistics).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from prepkit.parallel import keeps_numba_threads

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def build(images: list[np.ndarray], folder: Path, layout_name: str, count: int, per_shard: int) -> Path:
    from prepkit.layouts import make_layout
    from prepkit.store.writer import EncodedSample, plan_store, write_all

    layout = make_layout(layout_name)
    encoded = [layout.encode(image) for image in images]
    shapes = [images[i % len(images)].shape for i in range(count)]
    plan = plan_store(
        {"image": layout}, {"image": [(s[0], s[1], s[2]) for s in shapes]}, per_shard,
        class_names=None, provenance={"command": "bench"}, items_digest="bench",
    )
    dest = folder / layout_name
    write_all(
        dest, plan,
        lambda i: EncodedSample(i, str(i), i % 10, {"image": (encoded[i % len(images)], (shapes[i][0], shapes[i][1], shapes[i][2]))}),
        overwrite=True,
    )
    return dest


@keeps_numba_threads
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--layout", default="lossless", choices=["raw", "jpeg", "lossless"])
    parser.add_argument("--repeat", type=int, default=9, help="interleaved rounds (median reported)")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)

    import numba

    from prepkit.augment import Normalize, Pipeline, RandomHorizontalFlip, RandomResizedCrop, ToDtype
    from prepkit.bench.machine import machine_line
    from prepkit.bench.photos import imagenet_like
    from prepkit.decode import decode_samples
    from prepkit.decode.engine import decoded_nbytes
    from prepkit.reader import Reader
    from prepkit.reader.order import plan_epoch
    from prepkit.store.reader import open_store

    threads = args.threads or numba.config.NUMBA_NUM_THREADS
    numba.set_num_threads(threads)
    ops = [RandomResizedCrop(224), RandomHorizontalFlip(), ToDtype("float32", scale=True), Normalize(MEAN, STD)]
    pipeline = Pipeline(ops)
    with tempfile.TemporaryDirectory() as folder:
        path = build(imagenet_like(), Path(folder), args.layout, args.images, per_shard=128)
        store = open_store(path)
        order = plan_epoch(len(store), batch_size=args.batch, seed=0, epoch=0)

        # The bare loop reuses its decode buffer too, so that only the reader's own costs differ.
        scratch = np.empty(max(decoded_nbytes(store, order.batch(n)) for n in range(len(order))), dtype=np.uint8)

        def bare() -> None:
            for number in range(len(order)):
                indices = order.batch(number)
                packed = decode_samples(store, indices, threads=threads, out=scratch)
                params = pipeline.params(packed.shapes, indices, seed=0, epoch=0)
                pipeline(packed.flat, packed.offsets, packed.shapes, params)

        same_work = Reader(store, batch_size=args.batch, seed=0, transforms=ops, threads=threads, crop_decode=False)
        default = Reader(store, batch_size=args.batch, seed=0, transforms=ops, threads=threads)

        def through(reader: Reader):
            def run() -> None:
                for _ in reader:
                    pass

            return run

        runs = (("bare decode + augment loop", bare), ("prepkit.Reader", through(same_work)),
                ("prepkit.Reader crop-aware", through(default)))
        for _, run in runs:
            run()  # warm-up (numba compilation, page cache)
        # Interleaved rounds: a busy spell of this shared machine hits every contender alike.
        times: dict[str, list[float]] = {name: [] for name, _ in runs}
        for _ in range(args.repeat):
            for name, run in runs:
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
        results = {name: len(store) / statistics.median(values) for name, values in times.items()}
    print(f"machine: {machine_line()}; numba threads {threads}")
    print(f"{len(store)} ImageNet-like samples ({args.layout}), batch {args.batch}, RandomResizedCrop(224)+flip+float32+Normalize")
    bare_rate = results["bare decode + augment loop"]
    for name, rate in results.items():
        print(f"  {name:<28} {rate:>9.1f} samples/s   {rate / bare_rate:6.3f}x bare")
    overhead = 1 - results["prepkit.Reader"] / bare_rate
    print(f"reader overhead (same work: whole-image decode): {overhead * 100:+.1f}% "
          "(negative: the reader is faster, its prefetch overlaps work)")


if __name__ == "__main__":
    main()
