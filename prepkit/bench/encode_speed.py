"""Lossless encode speed against Pillow's PNG encoder, per evaluation set.

    python -m prepkit.bench.encode_speed out/evalsets --threads 1 2 --repeat 3 --limit 12

The sets are those of `python -m prepkit.bench.evalsets build`. For each set, in interleaved
rounds, every image is encoded by Pillow's PNG encoder (default settings; it has no threads)
and by `prepkit.lossless.encode` (bitstream v2, default and fast_decode) on each numba thread
count. A figure is the median over the rounds of the set's total; the ratio is PNG's seconds
over prepkit's (the issue's target: >= 10x). Output: a markdown table, optionally JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, "PNG")
    return buffer.getvalue()


def encoders(threads: Sequence[int]) -> dict[str, Callable[[np.ndarray], bytes]]:
    """Name -> encode function; prepkit's run on their numba thread count (then restore it)."""
    import numba

    from prepkit import lossless

    def prepkit_encoder(n: int, fast_decode: bool) -> Callable[[np.ndarray], bytes]:
        def encode(image: np.ndarray) -> bytes:
            previous = numba.get_num_threads()
            numba.set_num_threads(n)
            try:
                return lossless.encode(image, fast_decode=fast_decode)
            finally:
                numba.set_num_threads(previous)

        return encode

    found: dict[str, Callable[[np.ndarray], bytes]] = {"Pillow PNG": _png}
    for n in threads:
        found[f"prepkit v2, {n}T"] = prepkit_encoder(n, False)
        found[f"prepkit v2 fast_decode, {n}T"] = prepkit_encoder(n, True)
    return found


def measure(images: list[np.ndarray], coders: dict[str, Callable[[np.ndarray], bytes]],
            repeat: int) -> dict[str, float]:
    """Median seconds to encode all images, per encoder, over `repeat` interleaved rounds
    (after one untimed pass each: numba compiles on first use)."""
    for encode in coders.values():
        encode(min(images, key=lambda image: image.size))
    times: dict[str, list[float]] = {name: [] for name in coders}
    for _ in range(repeat):
        for name, encode in coders.items():
            start = time.perf_counter()
            for image in images:
                encode(image)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    from prepkit.bench.lossless_eval import load_sets
    from prepkit.bench.machine import describe_machine, machine_line

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets_dir", help="a folder written by `python -m prepkit.bench.evalsets build`")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="numba thread counts")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds (a figure is the median)")
    parser.add_argument("--sets", nargs="+", help="only these sets")
    parser.add_argument("--limit", type=int, help="at most this many images per set, evenly spaced")
    parser.add_argument("--json", help="write the figures and the machine as JSON here")
    args = parser.parse_args(argv)
    sets = load_sets(args.sets_dir, args.sets, args.limit)
    coders = encoders(args.threads)
    machine = describe_machine(with_gpu=False)
    print(f"machine: {machine_line(machine)}")
    print()
    print("| set | images | encoder | seconds | x Pillow PNG's speed |")
    print("|---|---|---|---|---|")
    results: dict[str, Any] = {}
    for name, images in sets.items():
        seconds = measure(images, coders, args.repeat)
        results[name] = seconds
        for coder, value in seconds.items():
            print(f"| {name} | {len(images)} | {coder} | {value:.3f} | {seconds['Pillow PNG'] / value:.2f} |",
                  flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"machine": machine, "repeat": args.repeat, "seconds": results}, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
