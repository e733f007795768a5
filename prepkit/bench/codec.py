"""Compare prepkit's lossless codec with PNG (Pillow) and QOI on the benchmark photo sets.

    python -m prepkit.bench.codec [--threads N] [--repeat R]

For each set it reports sizes (relative to raw and to PNG at Pillow's default level),
encode time against Pillow's PNG encoder, and decode throughput against Pillow PNG and QOI.
Every decoder gets N threads: a thread pool of N for Pillow and QOI (one image per task),
numba's thread count N for ours (tiles of one image in parallel). Per-image decoders free
each output right away; decode_batch returns the whole set in one buffer. Times are the
median of R timed runs after one warm-up run, all codecs interleaved round-robin.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image

from prepkit.parallel import keeps_numba_threads


def _median_times(runs: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Median wall time of each run. Runs are interleaved round-robin, so that a slow
    period of a shared machine slows every codec alike instead of one of them."""
    for run in runs.values():
        run()  # warm-up: compilation, caches, allocator
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


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
            # Tasks return only the shape: outputs are freed as soon as they are made, as in
            # a loader that consumes each image, so the allocator reuses warm memory instead
            # of faulting in fresh pages (about 9 us per 4 KiB page on the VMs measured).
            return lambda: list(pool.map(lambda item: fn(item).shape, items))

        pngs = [_png_encode(img) for img in images]
        qois = [qoi.encode(np.ascontiguousarray(img)) for img in images]
        ours = [lossless.encode(img) for img in images]
        for data, img in zip(ours, images, strict=True):  # never report numbers for a broken codec
            if not np.array_equal(lossless.decode(data), img):
                raise AssertionError(f"{name}: lossless round trip failed")
        reused = np.empty(raw, np.uint8)  # what a reader that keeps its batch buffer does
        t = _median_times(
            {
                "png_enc": lambda: list(pool.map(_png_encode, images)),
                "qoi_enc": lambda: list(pool.map(lambda im: qoi.encode(np.ascontiguousarray(im)), images)),
                "our_enc": lambda: [lossless.encode(img) for img in images],
                "png_dec": pooled(_png_decode, pngs),
                "qoi_dec": pooled(qoi.decode, qois),
                "our_dec": lambda: [lossless.decode(d).shape for d in ours],
                "our_batch": lambda: lossless.decode_batch(ours),
                "our_packed": lambda: lossless.decode_batch_packed(ours, out=reused),
            },
            repeat,
        )
        t_png_enc, t_qoi_enc, t_our_enc = t["png_enc"], t["qoi_enc"], t["our_enc"]
        t_png_dec, t_qoi_dec, t_our_dec, t_our_batch = t["png_dec"], t["qoi_dec"], t["our_dec"], t["our_batch"]
        t_our_packed = t["our_packed"]
    n = len(images)
    png, q, o = (sum(map(len, s)) for s in (pngs, qois, ours))
    rows = [
        f"| {name} | {threads} | PNG (Pillow) | {png / raw:.3f} | 1.000 | {t_png_enc * 1e3 / n:.1f} | 1.0x | {n / t_png_dec:.1f} | 1.00x |",
        f"| {name} | {threads} | QOI | {q / raw:.3f} | {q / png:.3f} | {t_qoi_enc * 1e3 / n:.1f} | {t_png_enc / t_qoi_enc:.1f}x | {n / t_qoi_dec:.1f} | {t_png_dec / t_qoi_dec:.2f}x |",
        f"| {name} | {threads} | prepkit lossless | {o / raw:.3f} | {o / png:.3f} | {t_our_enc * 1e3 / n:.1f} | {t_png_enc / t_our_enc:.1f}x | {n / t_our_dec:.1f} | {t_png_dec / t_our_dec:.2f}x |",
        f"| {name} | {threads} | prepkit decode_batch | | | | | {n / t_our_batch:.1f} | {t_png_dec / t_our_batch:.2f}x |",
        f"| {name} | {threads} | prepkit decode_batch_packed, reused out | | | | | {n / t_our_packed:.1f} | {t_png_dec / t_our_packed:.2f}x |",
    ]
    return rows


@keeps_numba_threads
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
