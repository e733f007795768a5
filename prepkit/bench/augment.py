"""CPU benchmark of the fused augmentation kernel against torch, op by op.

    python -m prepkit.bench.augment [--batch 64] [--repeats 7] [--threads N]

A batch of random uint8 images of ImageNet-like sizes (about 500x375) goes through
RandomResizedCrop(224) + RandomHorizontalFlip + ToDtype(float32, scale=True) +
Normalize, to an (N, 3, 224, 224) float32 batch:

* prepkit: ``Pipeline.params`` (host draws) + one fused numba kernel call;
* torch uint8: per image, what torchvision v2 does on a CPU uint8 tensor: crop view,
  ``interpolate`` on uint8 (antialias), flip, ``to(float32) / 255``, normalize;
* torch float: the same but converting the crop to float32 before interpolating;
* prepkit + ColorJitter(0.4, 0.4, 0.4, 0.1) / + TrivialAugmentWide(): the same pipeline with
  the colour stage after the flip (one more pass over the 224x224 output).

torch uses the crop boxes and flips prepkit drew, and the same number of threads.
Reports the median of the repeats.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np

from prepkit.parallel import keeps_numba_threads

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _images(batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rs = np.random.default_rng(seed)
    sides = [(int(rs.integers(333, 376)), int(rs.integers(450, 501))) for _ in range(batch)]
    sides = [(w, h) if k % 4 == 0 else (h, w) for k, (h, w) in enumerate(sides)]  # some portrait
    images = [rs.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sides]
    shapes = np.array([im.shape for im in images], np.int32)
    offsets = np.concatenate([[0], np.cumsum([im.size for im in images])[:-1]]).astype(np.int64)
    return np.concatenate([im.ravel() for im in images]), offsets, shapes


def _median_seconds(contenders: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median wall time of each contender; rounds interleave them, so background load
    on a shared machine hits all of them alike."""
    for fn in contenders.values():
        fn()  # warm up (and compile)
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


@keeps_numba_threads
def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print one line per contender."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)

    import numba
    import torch

    from prepkit.augment import (
        ColorJitter,
        Normalize,
        Op,
        Pipeline,
        RandomHorizontalFlip,
        RandomResizedCrop,
        ToDtype,
        TrivialAugmentWide,
    )

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    torch.set_num_threads(args.threads)
    flat, offsets, shapes = _images(args.batch)
    load = os.getloadavg()
    pipe = Pipeline(
        [RandomResizedCrop(224), RandomHorizontalFlip(), ToDtype("float32", scale=True), Normalize(MEAN, STD)]
    )
    indices = np.arange(args.batch)
    epoch = [0]

    def prepkit_run(colour: Op | None = None) -> np.ndarray:
        run = pipe
        if colour is not None:
            run = Pipeline([*pipe.ops[:2], colour, *pipe.ops[2:]])
        epoch[0] += 1
        params = run.params(shapes, indices, seed=0, epoch=epoch[0])
        return run(flat, offsets, shapes, params)

    params = pipe.params(shapes, indices, seed=0, epoch=0)
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    sources = [
        torch.from_numpy(flat[o : o + int(np.prod(s))].reshape(tuple(s))).permute(2, 0, 1)
        for o, s in zip(offsets, shapes, strict=True)
    ]

    def torch_run(float_first: bool) -> torch.Tensor:
        out = torch.empty((args.batch, 3, 224, 224), dtype=torch.float32)
        for k, image in enumerate(sources):
            y0, x0, h, w = (int(v) for v in params.region[k])
            crop = image[:, y0 : y0 + h, x0 : x0 + w][None]
            if float_first:
                crop = crop.to(torch.float32)
            resized = torch.nn.functional.interpolate(
                crop, size=(224, 224), mode="bilinear", align_corners=False, antialias=True
            )[0]
            if params.flip[k]:
                resized = resized.flip(-1)
            value = resized.to(torch.float32).mul_(1.0 / 255)
            out[k] = value.sub_(mean).div_(std)
        return out

    results = _median_seconds(
        {
            "prepkit fused (numba CPU)": lambda: prepkit_run(),
            "torch uint8 interpolate (torchvision v2 CPU path)": lambda: torch_run(False),
            "torch float32 interpolate": lambda: torch_run(True),
            "prepkit fused + ColorJitter(0.4, 0.4, 0.4, 0.1)": lambda: prepkit_run(ColorJitter(0.4, 0.4, 0.4, 0.1)),
            "prepkit fused + TrivialAugmentWide()": lambda: prepkit_run(TrivialAugmentWide()),
        },
        args.repeats,
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; threads: "
        f"numba {numba.get_num_threads()} ({numba.threading_layer()}), torch {torch.get_num_threads()}; "
        f"torch {torch.__version__}, numba {numba.__version__}"
    )
    print(f"load average before: {load[0]:.2f} (other processes share these cores)")
    print(f"batch: {args.batch} random uint8 images ~500x375 -> (N, 3, 224, 224) float32; median of {args.repeats}")
    for name, seconds in results.items():
        print(f"{name:52s} {seconds * 1e3:8.1f} ms/batch {args.batch / seconds:8.0f} images/s")


if __name__ == "__main__":
    main()
