"""Compare prepkit's lossless codec with PNG (Pillow) and QOI on the benchmark photo sets.

    python -m prepkit.bench.codec [--threads N] [--repeat R]

For each set it reports sizes (relative to raw and to PNG at Pillow's default level),
encode time against Pillow's PNG encoder, and decode throughput against Pillow PNG and QOI.
Every decoder gets N threads: a thread pool of N for Pillow and QOI (one image per task),
numba's thread count N for ours (tiles of one image in parallel). Times are the median of
R timed runs after one warm-up run.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

import numpy as np
from PIL import Image


def _median_time(run: Callable[[], object], repeat: int) -> float:
    run()  # warm-up: compilation, caches, allocator
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _png_encode(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")  # Pillow's default level (6)
    return buffer.getvalue()


def _png_decode(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im)


def machine_line() -> str:
    """CPU model, logical cores, Python and library versions."""
    import numba

    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import PIL

    return (
        f"{model}, {os.cpu_count()} logical cores, Python {platform.python_version()}, "
        f"numpy {np.__version__}, numba {numba.__version__}, Pillow {PIL.__version__}"
    )


def bench_set(name: str, images: Sequence[np.ndarray], threads: int, repeat: int) -> list[str]:
    """Measure one image set; return markdown table rows."""
    import numba
    import qoi

    from prepkit import lossless

    numba.set_num_threads(threads)
    raw = sum(img.nbytes for img in images)
    with ThreadPoolExecutor(threads) as pool:

        def pooled(fn: Callable, items: Sequence) -> Callable[[], list]:
            return lambda: list(pool.map(fn, items))

        pngs = [_png_encode(img) for img in images]
        qois = [qoi.encode(np.ascontiguousarray(img)) for img in images]
        ours = [lossless.encode(img) for img in images]
        for data, img in zip(ours, images):  # never report numbers for a broken codec
            if not np.array_equal(lossless.decode(data), img):
                raise AssertionError(f"{name}: lossless round trip failed")
        t_png_enc = _median_time(pooled(_png_encode, images), repeat)
        t_qoi_enc = _median_time(pooled(lambda im: qoi.encode(np.ascontiguousarray(im)), images), repeat)
        t_our_enc = _median_time(lambda: [lossless.encode(img) for img in images], repeat)
        t_png_dec = _median_time(pooled(_png_decode, pngs), repeat)
        t_qoi_dec = _median_time(pooled(qoi.decode, qois), repeat)
        t_our_dec = _median_time(lambda: [lossless.decode(d) for d in ours], repeat)
        t_our_batch = _median_time(lambda: lossless.decode_batch(ours), repeat)
    n = len(images)
    png, q, o = (sum(map(len, s)) for s in (pngs, qois, ours))
    rows = [
        f"| {name} | {threads} | PNG (Pillow) | {png / raw:.3f} | 1.000 | {t_png_enc * 1e3 / n:.1f} | 1.0x | {n / t_png_dec:.1f} | 1.00x |",
        f"| {name} | {threads} | QOI | {q / raw:.3f} | {q / png:.3f} | {t_qoi_enc * 1e3 / n:.1f} | {t_png_enc / t_qoi_enc:.1f}x | {n / t_qoi_dec:.1f} | {t_png_dec / t_qoi_dec:.2f}x |",
        f"| {name} | {threads} | prepkit lossless | {o / raw:.3f} | {o / png:.3f} | {t_our_enc * 1e3 / n:.1f} | {t_png_enc / t_our_enc:.1f}x | {n / t_our_dec:.1f} | {t_png_dec / t_our_dec:.2f}x |",
        f"| {name} | {threads} | prepkit decode_batch | | | | | {n / t_our_batch:.1f} | {t_png_dec / t_our_batch:.2f}x |",
    ]
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    """Run the comparison and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="threads for every codec (default 1)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per measurement (default 5)")
    args = parser.parse_args(argv)
    from prepkit.bench import photos

    sets = {
        "cityscapes-like 10 x 2048x1024": photos.cityscapes_like(),
        "imagenet-like 17 x 500x375": photos.imagenet_like(),
    }
    print(f"machine: {machine_line()}")
    print(f"threads: {args.threads}, repeat: {args.repeat} (median after one warm-up)")
    print()
    print("| set | threads | codec | size/raw | size/PNG | encode ms/img | encode speed vs PNG | decode img/s | decode vs PNG |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, images in sets.items():
        for row in bench_set(name, images, args.threads, args.repeat):
            print(row)


if __name__ == "__main__":
    main()
