"""Differential fuzzing of the v2 CUDA decoder against the CPU decoder.

    NUMBA_ENABLE_CUDASIM=1 python -m prepkit.fuzz_cuda --seconds 600 [--seed 0]

Mutates small valid streams (prepkit.fuzz.mutate) and decodes each with device="cpu" and
device="cuda" (numba's simulator without a GPU; tiny images keep it quick). Both must reject
the stream with a prepkit error, or both must return the same pixels; anything else (one
rejects and the other does not, different pixels, another exception type) is a finding.
"""

from __future__ import annotations

import argparse
import random
import traceback

import numpy as np

from prepkit import cudasim
from prepkit.errors import PrepkitError
from prepkit.fuzz import FuzzReport, budget, mutate


def _seeds(seed: int) -> list[bytes]:
    """Small v2 streams covering coded, constant, mask, raw, palette, runs and MED tiles, both
    tile table forms, plane contexts (and one v1 stream)."""
    from prepkit import lossless
    from prepkit.lossless import format_v2

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:20, 0:18]
    smooth = (y * 3 + x * 5) % 256
    rgb = np.clip(np.stack([smooth, smooth + 20, smooth // 2], 2) + rng.normal(0, 3, (20, 18, 3)), 0, 255)
    mask = np.zeros((17, 21), np.uint8)
    mask[3:12, 4:15] = 5
    images = [rgb.astype(np.uint8), mask, np.full((9, 9, 4), 77, np.uint8),
              rng.integers(0, 256, (8, 8, 3), dtype=np.uint8), smooth.astype(np.uint8)[:16, :16]]
    from prepkit.fuzz import palette_images

    images += [image[:17, :17] for image in palette_images(rng)]  # palette tiles (mode 2), simulator-sized
    seeds = [lossless.encode(image, tile=16, version=2) for image in images]
    seeds.append(lossless.encode(images[0], tile=16, version=1))
    seeds.append(_med_seed())
    seeds.append(format_v2.with_tile_table(seeds[1], short=False))  # the first v2 streams' u32 offsets
    from prepkit.fuzz import runs_images
    from prepkit.lossless import reference_v2

    # runs tiles with a coded palette (mode 6), with raw palettes (mode 5), without implied
    # labels (mode 4), without row repeats (mode 3)
    for repeats, same, coded in ((True, True, True), (True, True, False), (True, False, False), (False, False, False)):
        seeds.extend(reference_v2.runs_stream(image, tile=32, repeats=repeats, same=same, coded=coded)
                     for image in runs_images(rng))
    seeds.append(reference_v2.encode(images[0], tile=16, plane_context=True))  # plane contexts (A4)
    return seeds


def _med_seed() -> bytes:
    """A 64-tile of 36 rows (both bands of the CUDA MED wavefront) whose plane is MED-coded:
    diagonal edges plus one bit of noise, the first of 16 fixed noise patterns for which the
    encoder picks MED."""
    from prepkit import lossless
    from prepkit.lossless import format_v2 as f2

    ty, tx = np.mgrid[0:36, 0:12]
    edges = np.where(tx + ty > 20, 170, 60) + np.where(ty > 2 * tx + 8, 40, 0)
    for pattern in range(16):
        image = (edges + np.random.default_rng(pattern).integers(0, 2, edges.shape)).astype(np.uint8)
        stream = lossless.encode(image, tile=64, version=2)
        if f2.read_stream(np.frombuffer(stream, np.uint8)).predictor[0, 0] == f2.PRED_MED:
            return stream
    raise AssertionError("Expected a noise pattern for which the encoder picks MED. Got none in 16.")


def _decode(data: bytes, device: str) -> np.ndarray | None:
    """The decoded pixels, or None when the stream is rejected with a prepkit error."""
    from prepkit import lossless

    try:
        out = lossless.decode_batch([data], device=device)[0]
    except PrepkitError:
        return None
    return np.asarray(out) if device == "cpu" else out.copy_to_host()


def fuzz_lossless_cuda(seconds: float | None = None, seed: int = 0, cases: int | None = None) -> FuzzReport:
    """Mutated streams through the CPU and the CUDA batch decoders: reject or agree. Runs for
    `seconds` or `cases` cases (fuzz.budget)."""
    rng = random.Random(seed)
    seeds = _seeds(seed)
    report = FuzzReport("lossless cpu vs cuda")
    go_on = budget(seconds, cases)
    while go_on(report):
        data = mutate(rng.choice(seeds), rng)
        report.cases += 1
        try:
            cpu = _decode(data, "cpu")
            gpu = _decode(data, "cuda")
        except Exception:
            report.findings.append(traceback.format_exc(limit=6))
            continue
        if cpu is None and gpu is None:
            report.rejected += 1
        elif cpu is None or gpu is None or cpu.shape != gpu.shape or not np.array_equal(cpu, gpu):
            report.findings.append(f"cpu and cuda disagree on a {len(data)}-byte stream: {data.hex()}")
        else:
            report.accepted += 1
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    cudasim.tune()  # under the simulator: faster, and its shared arrays allocated under a lock
    report = fuzz_lossless_cuda(args.seconds, args.seed)
    print(report.line())
    for finding in report.findings[:5]:
        print(finding)
    raise SystemExit(1 if report.findings else 0)


if __name__ == "__main__":
    main()
