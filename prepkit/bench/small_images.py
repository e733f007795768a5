"""Small images, one at a time: `lossless.decode` against libspng and Pillow, `lossless.encode`
against Pillow's PNG encoder, and sizes.

    python -m prepkit.bench.small_images out/evalsets [--sides 32 64 128 256] [--crops 8]

A dataset of thumbnails or patches (CIFAR-sized images, 64x64 crops of scans, small masks)
read one sample per call pays every decoder's fixed cost per image: parsing, validation,
tables. This takes ``--crops`` crops of each side from every evaluation set (fixed seed: the
same crops every run), checks that every decoder gives the crop back exactly, then times one
call per image, interleaved across decoders (median of ``--repeat`` rounds), on one thread;
then one encode call per image, prepkit's and Pillow's PNG encoder (default settings)
interleaved the same way. Sizes are the sums over the crops against Pillow's PNG.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from prepkit.parallel import keeps_numba_threads


def crops(folder: str | Path, side: int, count: int, seed: int = 0) -> list[np.ndarray]:
    """``count`` crops of side x side from each evaluation set that has images that large."""
    from prepkit.bench.lossless_eval import load_sets

    rng = np.random.default_rng(seed)
    out = []
    for images in load_sets(folder).values():
        large = [a for a in images if min(a.shape[:2]) > side]
        for k in range(count if large else 0):
            a = large[k % len(large)]
            y, x = int(rng.integers(0, a.shape[0] - side)), int(rng.integers(0, a.shape[1] - side))
            out.append(np.ascontiguousarray(a[y : y + side, x : x + side]))
    return out


def measure(images: list[np.ndarray], repeat: int) -> dict[str, dict[str, float]]:
    """{decoder: {"us": median microseconds per image, "bytes": stored bytes}}."""
    import pyspng

    from prepkit import lossless
    from prepkit.bench.decode import _pillow_decode
    from prepkit.bench.encode_speed import _png

    pngs = [_png(a) for a in images]
    streams = [lossless.encode(a) for a in images]
    decoders: dict[str, tuple[list[bytes], Callable[[bytes], np.ndarray]]] = {
        "prepkit-lossless": (streams, lossless.decode),
        "libspng": (pngs, pyspng.load),
        "pillow": (pngs, _pillow_decode),
    }
    for name, (stored, decode) in decoders.items():
        for data, image in zip(stored, images, strict=True):
            if not np.array_equal(np.asarray(decode(data)).reshape(image.shape), image):
                raise AssertionError(f"{name} did not give an image back exactly")
    times: dict[str, list[float]] = {name: [] for name in decoders}
    for _ in range(repeat):
        for name, (stored, decode) in decoders.items():
            started = time.perf_counter()
            for data in stored:
                decode(data)
            times[name].append((time.perf_counter() - started) / len(stored))
    return {name: {"us": statistics.median(times[name]) * 1e6, "bytes": float(sum(map(len, decoders[name][0])))}
            for name in decoders}


def measure_encode(images: list[np.ndarray], repeat: int) -> dict[str, float]:
    """{encoder: median microseconds per image}: prepkit's lossless encoder and Pillow's PNG,
    interleaved (encode_speed.measure)."""
    from prepkit import lossless
    from prepkit.bench import encode_speed

    encoders: dict[str, Callable[[np.ndarray], bytes]] = {"prepkit-lossless": lossless.encode,
                                                           "pillow": encode_speed._png}
    seconds = encode_speed.measure(images, encoders, repeat)
    return {name: total / len(images) * 1e6 for name, total in seconds.items()}


@keeps_numba_threads
def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sets_dir")
    parser.add_argument("--sides", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--crops", type=int, default=8, help="crops per set and side")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    import numba

    from prepkit.bench.machine import machine_line

    numba.set_num_threads(1)
    print(machine_line())
    print("| side | images | decode us/image | libspng | Pillow | x libspng | x Pillow | encode us/image "
          "| PNG encode | x PNG encode | bytes / PNG |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for side in args.sides:
        images = crops(args.sets_dir, side, args.crops)
        result = measure(images, args.repeat)
        encode = measure_encode(images, args.repeat)
        ours, spng, pil = result["prepkit-lossless"], result["libspng"], result["pillow"]
        ours_enc, png_enc = encode["prepkit-lossless"], encode["pillow"]
        print(f"| {side} | {len(images)} | {ours['us']:.1f} | {spng['us']:.1f} | {pil['us']:.1f} | "
              f"{spng['us'] / ours['us']:.2f} | {pil['us'] / ours['us']:.2f} | {ours_enc:.1f} | {png_enc:.1f} | "
              f"{png_enc / ours_enc:.2f} | {ours['bytes'] / spng['bytes']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
