"""Crop-aware decoding: decoding only the tiles under a RandomResizedCrop, against decoding
whole images, for lossless samples, in one run.

    python -m prepkit.bench.crop [--set cityscapes|imagenet] [--batch 16] [--repeat 5]

For each batch, RandomResizedCrop(224) (torchvision's default scale (0.08, 1)) draws a
source window per image; "whole" decodes every image and "crop-aware" decodes only the
tiles each window touches (``prepkit.lossless.decode_batch_packed(..., rois=...)``).
Both feed the same fused augmentation, whose output is checked to be identical.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=["cityscapes", "imagenet"], default="cityscapes")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    from dataclasses import replace

    import numba

    from prepkit import lossless
    from prepkit.augment import Pipeline, RandomResizedCrop, ToDtype
    from prepkit.bench.machine import machine_line
    from prepkit.bench.photos import cityscapes_like, imagenet_like

    images = cityscapes_like() if args.set == "cityscapes" else imagenet_like()
    streams = [lossless.encode(image) for image in images]
    batch = [streams[i % len(streams)] for i in range(args.batch)]
    shapes = np.array([images[i % len(images)].shape for i in range(args.batch)], dtype=np.int32)
    pipeline = Pipeline([RandomResizedCrop(224), ToDtype("float32", scale=True)])

    def epoch_params(epoch: int):
        return pipeline.params(shapes, np.arange(args.batch), seed=0, epoch=epoch)

    def whole(epoch: int) -> np.ndarray:
        flat, offsets, decoded = lossless.decode_batch_packed(batch)
        return pipeline(flat, offsets, decoded, epoch_params(epoch))

    def crop_aware(epoch: int) -> np.ndarray:
        params = epoch_params(epoch)
        region = params.region.astype(np.int64)
        rois = [(int(y), int(x), int(y + h), int(x + w)) for y, x, h, w in region]
        flat, offsets, decoded = lossless.decode_batch_packed(batch, rois=rois)
        moved = params.region.copy()
        moved[:, :2] = 0
        return pipeline(flat, offsets, decoded, replace(params, region=moved))

    for epoch in range(3):
        assert np.array_equal(whole(epoch), crop_aware(epoch)), "crop-aware output differs"
    fractions = []
    for epoch in range(args.repeat):
        region = epoch_params(epoch).region.astype(np.float64)
        fractions.append(float((region[:, 2] * region[:, 3] / (shapes[:, 0] * shapes[:, 1])).mean()))
    results = {}
    for name, run in (("whole images", whole), ("crop-aware", crop_aware)):
        run(0)
        times = []
        for epoch in range(args.repeat):
            start = time.perf_counter()
            run(epoch)
            times.append(time.perf_counter() - start)
        results[name] = args.batch / statistics.median(times)
    print(f"machine: {machine_line()}; numba threads {numba.get_num_threads()}")
    print(f"{args.set}-like lossless images {shapes[0][1]}x{shapes[0][0]}, batch {args.batch}, "
          f"RandomResizedCrop(224): crops cover {np.mean(fractions) * 100:.0f}% of the image on average")
    for name, rate in results.items():
        print(f"  {name:<14} {rate:8.1f} images/s (decode + augment)")
    print(f"crop-aware speed-up: {results['crop-aware'] / results['whole images']:.2f}x")


if __name__ == "__main__":
    main()
