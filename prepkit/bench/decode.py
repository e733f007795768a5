"""``prepkit bench-decode``: every format decoded side by side, on the same images, in one run.

For each format the images are encoded once, then decoded ``repeat`` times after
``warmup`` untimed passes; a figure is the median pass. All formats run in the same
process, in interleaved rounds, so their ratios hold on a noisy machine.

Decoders (a format whose library is missing is listed as skipped, with the reason):

| format | decoder | device |
| --- | --- | --- |
| png | Pillow, libspng (pyspng) | cpu |
| jpeg | Pillow, nvImageCodec | cpu; nvImageCodec also cuda |
| webp-lossless-m6 | Pillow (lossless, method 6) | cpu |
| jxl-lossless-e1, jxl-lossless-e7 | imagecodecs (JPEG-XL lossless, effort 1 and 7) | cpu |
| htj2k-lossless | imagecodecs (HTJ2K, reversible) | cpu |
| qoi | qoi | cpu |
| raw | memory copy | cpu; cuda (host-to-device copy from pinned memory) |
| prepkit-lossless | numba | cpu; cuda (host-to-device copy of the compressed bytes included) |
| prepkit-lossless-v1 | numba | cpu (bitstream v1, `--lossless-version 1`) |
| prepkit-lossless-fast | numba | cpu; cuda (bitstream v2 without MED, `--lossless-fast-decode`) |
| reader | prepkit.Reader on a prepkit-lossless store, end to end | cpu; cuda |

CPU decoders run on ``threads`` threads (a thread pool for the per-image libraries, numba's
thread count for prepkit's kernels).
Decoders are timed in interleaved rounds (one pass of each in turn) so that the ratios hold
on a noisy machine; a figure is the median round.
"""

from __future__ import annotations

import io
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from prepkit.bench.machine import describe_machine
from prepkit.parallel import keeps_numba_threads


@dataclass
class Result:
    """One (format, decoder, device, threads) measurement, or a skipped one."""

    format: str
    decoder: str
    device: str
    threads: int
    images: int = 0
    images_per_s: float | None = None
    decoded_mb_per_s: float | None = None
    size_ratio: float | None = None  # stored bytes / raw pixel bytes
    speedup_vs_png: float | None = None
    encoded_bytes: int | None = None
    size_vs_png: float | None = None  # stored bytes / PNG's (Pillow's default encoder)
    image_bytes: list[int] = field(default_factory=list)  # each image's stored bytes, in input order
    # The largest of the images' own ratios to PNG's bytes, and that image's name: a total
    # is carried by the largest images and can hide the kind of image a format handles badly.
    worst_image_vs_png: float | None = None
    worst_image: str | None = None
    skipped: str | None = None

    def record(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Candidate:
    format: str
    decoder: str
    device: str
    encode: Callable[[np.ndarray], bytes] | None
    run: Callable[[list[bytes], int], Callable[[], None]]  # (encoded, threads) -> one timed pass
    skipped: str | None = None
    stored_bytes: Callable[[list[bytes]], int] = field(default=lambda encoded: sum(len(e) for e in encoded))
    # Every image decoded by the timed path, for checking pixels (None where not lossless).
    decode_all: Callable[[list[bytes]], list[np.ndarray]] | None = None


# The formats that must give back the exact pixels (lossless_eval measures these).
LOSSLESS_FORMATS = ("png", "webp-lossless-m6", "jxl-lossless-e1", "jxl-lossless-e7", "htj2k-lossless",
                    "prepkit-lossless", "prepkit-lossless-v1", "prepkit-lossless-fast")


def _pillow_encoder(fmt: str, **options: Any) -> Callable[[np.ndarray], bytes]:
    def encode(image: np.ndarray) -> bytes:
        from PIL import Image

        buffer = io.BytesIO()
        Image.fromarray(image[:, :, 0] if image.shape[2] == 1 else image).save(buffer, format=fmt, **options)
        return buffer.getvalue()

    return encode


def _pool_run(decode_one: Callable[[bytes], Any]) -> Callable[[list[bytes], int], Callable[[], None]]:
    def prepare(encoded: list[bytes], threads: int) -> Callable[[], None]:
        pool = ThreadPoolExecutor(threads) if threads > 1 else None

        def one_pass() -> None:
            if pool is None:
                for data in encoded:
                    decode_one(data)
            else:
                list(pool.map(decode_one, encoded))

        return one_pass

    return prepare


def _pillow_decode(data: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image)


def _each(decode_one: Callable[[bytes], Any]) -> Callable[[list[bytes]], list[np.ndarray]]:
    return lambda encoded: [np.asarray(decode_one(data)) for data in encoded]


def _plane(image: np.ndarray) -> np.ndarray:
    """HxW for a one-channel HxWx1 image (what the image libraries expect), else the image."""
    return image[:, :, 0] if image.ndim == 3 and image.shape[2] == 1 else image


def _imagecodecs_candidates() -> list[Candidate]:
    """JPEG-XL (effort 1 and 7) and HTJ2K lossless through imagecodecs, or skipped rows."""
    names = [("jxl-lossless-e1", "JPEGXL"), ("jxl-lossless-e7", "JPEGXL"), ("htj2k-lossless", "HTJ2K")]
    try:
        import imagecodecs
    except ImportError:
        return [Candidate(name, "imagecodecs", "cpu", None, _pool_run(lambda d: d),
                          skipped="package 'imagecodecs' not installed") for name, _ in names]
    found = []
    for name, codec in names:
        missing = None if getattr(imagecodecs, codec).available else f"imagecodecs built without {codec}"
        if codec == "JPEGXL":
            effort = int(name[-1])

            def encode(image: np.ndarray, effort: int = effort) -> bytes:
                return bytes(imagecodecs.jpegxl_encode(_plane(image), lossless=True, effort=effort))

            decode_one: Callable[[bytes], Any] = imagecodecs.jpegxl_decode
        else:
            def encode(image: np.ndarray, effort: int = 0) -> bytes:
                return bytes(imagecodecs.htj2k_encode(_plane(image), level=0, reversible=True))

            decode_one = imagecodecs.htj2k_decode
        found.append(Candidate(name, "imagecodecs", "cpu", encode, _pool_run(decode_one), skipped=missing,
                               decode_all=_each(decode_one)))
    return found


def _libspng_candidate() -> Candidate:
    """libspng (pyspng) decoding the same PNG bytes as Pillow: pyspng has no encoder."""
    try:
        import pyspng
    except ImportError:
        return Candidate("png", "libspng", "cpu", None, _pool_run(lambda d: d), skipped="package 'pyspng' not installed")
    return Candidate("png", "libspng", "cpu", _pillow_encoder("PNG"), _pool_run(pyspng.load),
                     decode_all=_each(pyspng.load))


def _cuda_available() -> str | None:
    """None if a real CUDA GPU can be used, else the reason."""
    try:
        from numba import config, cuda

        if config.ENABLE_CUDASIM:
            return "numba CUDA simulator is on (NUMBA_ENABLE_CUDASIM=1)"
        if not cuda.is_available():
            return "no CUDA GPU available"
        return None
    except Exception as error:
        return f"numba CUDA unavailable: {error}"


def candidates(quality: int, devices: Sequence[str]) -> list[Candidate]:
    """Every (format, decoder, device) to measure; unavailable ones carry a skip reason."""
    from prepkit import lossless
    from prepkit.decode import jpeg as jpeg_module

    found: list[Candidate] = []
    no_cuda = _cuda_available() if "cuda" in devices else None
    if "cpu" in devices:
        found.append(Candidate("png", "pillow", "cpu", _pillow_encoder("PNG"), _pool_run(_pillow_decode),
                               decode_all=_each(_pillow_decode)))
        found.append(_libspng_candidate())
        found.append(Candidate(f"jpeg-q{quality}", "pillow", "cpu", _pillow_encoder("JPEG", quality=quality), _pool_run(_pillow_decode)))
        nv_error = jpeg_module.nvimgcodec_error()

        def nv_run(encoded: list[bytes], threads: int) -> Callable[[], None]:
            # Shapes are checked by decode_host; decode without the check for a fair figure.
            def decode_one(data: bytes) -> Any:
                return np.asarray(jpeg_module._decoder("cpu").decode(np.frombuffer(data, np.uint8)))

            return _pool_run(decode_one)(encoded, threads)

        found.append(Candidate(f"jpeg-q{quality}", "nvimgcodec", "cpu", _pillow_encoder("JPEG", quality=quality), nv_run, skipped=nv_error))
        found.append(Candidate("webp-lossless-m6", "pillow", "cpu", _pillow_encoder("WEBP", lossless=True, method=6),
                               _pool_run(_pillow_decode), decode_all=_each(_pillow_decode)))
        found.extend(_imagecodecs_candidates())
        try:
            import qoi as qoi_module

            found.append(Candidate("qoi", "qoi", "cpu", lambda image: qoi_module.encode(np.ascontiguousarray(image)), _pool_run(qoi_module.decode)))
        except ImportError:
            found.append(Candidate("qoi", "qoi", "cpu", None, _pool_run(lambda d: d), skipped="package 'qoi' not installed"))
        found.append(Candidate("raw", "memcpy", "cpu", lambda image: image.tobytes(), _pool_run(lambda d: np.frombuffer(d, np.uint8).copy())))
        found.append(Candidate("prepkit-lossless", "numba", "cpu", lossless.encode, _lossless_cpu_run,
                               decode_all=_lossless_cpu_decode_all))
        # Bitstream v1 (--lossless-version 1): larger on flat content, faster on photographs.
        found.append(Candidate("prepkit-lossless-v1", "numba", "cpu", lambda image: lossless.encode(image, version=1),
                               _lossless_cpu_run, decode_all=_lossless_cpu_decode_all))
        # v2 without the MED predictor (--lossless-fast-decode): a little larger, faster on a CPU.
        found.append(Candidate("prepkit-lossless-fast", "numba", "cpu", _fast_encode, _lossless_cpu_run,
                               decode_all=_lossless_cpu_decode_all))
    if "cuda" in devices:
        found.append(Candidate("raw", "h2d-copy", "cuda", lambda image: image.tobytes(), _raw_cuda_run, skipped=no_cuda))
        found.append(Candidate("prepkit-lossless", "numba-cuda", "cuda", lossless.encode, _lossless_cuda_run, skipped=no_cuda))
        found.append(Candidate("prepkit-lossless-fast", "numba-cuda", "cuda", _fast_encode, _lossless_cuda_run,
                               skipped=no_cuda))
        nv_error = jpeg_module.nvimgcodec_error()
        found.append(Candidate(f"jpeg-q{quality}", "nvimgcodec", "cuda", _pillow_encoder("JPEG", quality=quality), _jpeg_cuda_run, skipped=no_cuda or nv_error))
    return found


def _fast_encode(image: np.ndarray) -> bytes:
    from prepkit import lossless

    return lossless.encode(image, fast_decode=True)


def _decoded_size(encoded: list[bytes]) -> int:
    from prepkit import lossless

    headers = [lossless.read_header(data) for data in encoded]
    return sum(h.height * h.width * h.channels for h in headers)


def _lossless_cpu_run(encoded: list[bytes], threads: int) -> Callable[[], None]:
    import numba

    from prepkit import lossless

    # Decode the batch into a buffer reused across passes, as the reader does: a fresh buffer
    # would mostly measure page faults (docs/BENCHMARKS.md, lossless codec caveats).
    out = np.empty(_decoded_size(encoded), dtype=np.uint8)

    def one_pass() -> None:
        numba.set_num_threads(threads)
        lossless.decode_batch_packed(encoded, device="cpu", out=out)

    return one_pass


def _lossless_cpu_decode_all(encoded: list[bytes]) -> list[np.ndarray]:
    """The images as the timed path decodes them: one packed batch, split."""
    from prepkit import lossless

    flat, offsets, shapes = lossless.decode_batch_packed(encoded, device="cpu")
    images = []
    for offset, shape in zip(np.asarray(offsets), np.asarray(shapes), strict=True):
        size = int(np.prod(shape))
        images.append(np.asarray(flat)[int(offset) : int(offset) + size].reshape(tuple(int(n) for n in shape)))
    return images


def _raw_cuda_run(encoded: list[bytes], threads: int) -> Callable[[], None]:
    from numba import cuda

    pinned = cuda.pinned_array(sum(len(e) for e in encoded), dtype=np.uint8)
    position = 0
    for data in encoded:
        pinned[position : position + len(data)] = np.frombuffer(data, np.uint8)
        position += len(data)
    device = cuda.device_array(pinned.size, dtype=np.uint8)

    def one_pass() -> None:
        device.copy_to_device(pinned)
        cuda.synchronize()

    return one_pass


def _lossless_cuda_run(encoded: list[bytes], threads: int) -> Callable[[], None]:
    from numba import cuda

    from prepkit import lossless

    out = cuda.device_array(_decoded_size(encoded), dtype=np.uint8)

    def one_pass() -> None:
        lossless.decode_batch_packed(encoded, device="cuda", out=out)  # includes the host-to-device copy
        cuda.synchronize()

    return one_pass


def _jpeg_cuda_run(encoded: list[bytes], threads: int) -> Callable[[], None]:
    from numba import cuda

    from prepkit.decode import jpeg as jpeg_module

    decoder = jpeg_module._decoder("cuda")
    arrays = [np.frombuffer(e, np.uint8) for e in encoded]

    def one_pass() -> None:
        decoder.decode(arrays)
        cuda.synchronize()

    return one_pass


def _reader_candidates(images: list[np.ndarray], devices: Sequence[str], folder: Path) -> list[tuple[Candidate, Callable[[int], Callable[[], None]]]]:
    """The Reader end to end on a lossless store of the same images."""
    from prepkit.layouts import LosslessLayout
    from prepkit.reader import Reader
    from prepkit.store.writer import EncodedSample, plan_store, write_all

    layout = LosslessLayout()
    encoded = [layout.encode(image) for image in images]
    shapes = [(image.shape[0], image.shape[1], image.shape[2]) for image in images]
    plan = plan_store(
        {"image": layout}, {"image": shapes}, len(images),
        class_names=None, provenance={"command": "bench-decode"}, items_digest="bench",
    )
    write_all(folder / "reader-store", plan, lambda i: EncodedSample(i, f"{i}", None, {"image": (encoded[i], shapes[i])}), overwrite=True)
    found: list[tuple[Candidate, Callable[[int], Callable[[], None]]]] = []
    no_cuda = _cuda_available()
    for device in devices:
        def make(threads: int, device: str = device) -> Callable[[], None]:
            import numba

            batch = max(1, min(64, len(images)))
            reader = Reader(folder / "reader-store", batch_size=batch, shuffle=False, device=device, threads=threads)

            def one_pass() -> None:
                numba.set_num_threads(threads)
                for _ in reader:
                    pass
                if device == "cuda":
                    from numba import cuda

                    cuda.synchronize()

            return one_pass

        candidate = Candidate("prepkit-lossless", "reader", device, None, lambda e, t: (lambda: None),
                              skipped=no_cuda if device == "cuda" else None)
        found.append((candidate, make))
    return found


def interleaved_medians(passes: Sequence[Callable[[], None]], repeat: int,
                        progress: Callable[[str], None] = lambda text: None) -> list[float]:
    """The median seconds of each pass over ``repeat`` rounds that run every pass in turn.

    Interleaving makes a busy spell of a shared machine hit every decoder alike, so the
    ratios between them hold even when the absolute figures are noisy.
    """
    timings: list[list[float]] = [[] for _ in passes]
    for round_number in range(repeat):
        progress(f"round {round_number + 1} of {repeat}")
        for index, one_pass in enumerate(passes):
            start = time.perf_counter()
            one_pass()
            timings[index].append(time.perf_counter() - start)
    return [statistics.median(t) for t in timings]


@keeps_numba_threads
def run_benchmark(
    images: list[np.ndarray],
    *,
    threads: int,
    devices: Sequence[str],
    repeat: int = 5,
    warmup: int = 1,
    quality: int = 90,
    with_reader: bool = True,
    progress: Callable[[str], None] = lambda text: None,
    names: Sequence[str] | None = None,
) -> tuple[list[Result], dict[str, Any]]:
    """Measure every available decoder on ``images``; returns (results, machine). ``names``
    (one per image, e.g. file names) name the worst image of each format against PNG.

    Every decoder is prepared and warmed up first; then ``repeat`` rounds time one pass of
    each decoder in turn, so a busy spell of a shared machine hits all of them alike.
    """
    raw_bytes = sum(image.nbytes for image in images)
    results: list[Result] = []
    passes: list[tuple[Result, Callable[[], None]]] = []
    encoded_cache: dict[str, list[bytes]] = {}

    def prepare(result: Result, make: Callable[[], Callable[[], None]], label: str) -> None:
        results.append(result)
        progress(f"preparing {label}")
        try:
            one_pass = make()
            for _ in range(warmup):
                one_pass()
        except Exception as error:  # a broken optional library must not end the benchmark
            result.skipped = f"failed: {type(error).__name__}: {error}"
            return
        passes.append((result, one_pass))

    with tempfile.TemporaryDirectory() as folder:
        for candidate in candidates(quality, devices):
            result = Result(candidate.format, candidate.decoder, candidate.device,
                            threads if candidate.device == "cpu" else 1, images=len(images))
            if candidate.skipped:
                result.skipped = candidate.skipped
                results.append(result)
                continue

            def make(candidate: Candidate = candidate, result: Result = result) -> Callable[[], None]:
                if candidate.format not in encoded_cache:
                    encoded_cache[candidate.format] = [candidate.encode(image) for image in images]  # type: ignore[misc]
                encoded = encoded_cache[candidate.format]
                result.encoded_bytes = candidate.stored_bytes(encoded)
                result.image_bytes = [candidate.stored_bytes([data]) for data in encoded]
                result.size_ratio = result.encoded_bytes / raw_bytes
                return candidate.run(encoded, threads)

            prepare(result, make, f"{candidate.format} / {candidate.decoder} / {candidate.device}")
        if with_reader:
            for candidate, make_reader in _reader_candidates(images, devices, Path(folder)):
                result = Result(candidate.format, candidate.decoder, candidate.device, threads, images=len(images))
                if candidate.skipped:
                    result.skipped = candidate.skipped
                    results.append(result)
                    continue
                lossless_row = next((r for r in results if r.format == "prepkit-lossless" and r.size_ratio), None)
                result.size_ratio = lossless_row.size_ratio if lossless_row else None
                prepare(result, partial(make_reader, threads), f"reader / {candidate.device}")
        medians = interleaved_medians([one_pass for _, one_pass in passes], repeat, progress)
    for (result, _), seconds in zip(passes, medians, strict=True):
        result.images_per_s = len(images) / seconds
        result.decoded_mb_per_s = raw_bytes / seconds / 1e6
    png = next((r for r in results if r.format == "png" and r.images_per_s), None)
    for result in results:
        if png and png.images_per_s and result.images_per_s:
            result.speedup_vs_png = result.images_per_s / png.images_per_s
    relate_sizes(results, names)
    machine = describe_machine(with_gpu="cuda" in devices)
    machine.update({"threads": threads, "repeat": repeat, "warmup": warmup, "images": len(images),
                    "raw_bytes": raw_bytes, "shapes": sorted({tuple(map(int, i.shape)) for i in images})[:8]})
    return results, machine


def per_image(sizes: Sequence[int], reference: Sequence[int]) -> tuple[float | None, float | None, int | None]:
    """(median, largest, index of the largest) of sizes[i] / reference[i]; Nones where the
    lists do not pair up image for image (or are empty)."""
    if not sizes or len(sizes) != len(reference) or min(reference) <= 0:
        return None, None, None
    ratios = np.asarray(sizes, np.float64) / np.asarray(reference, np.float64)
    worst = int(np.argmax(ratios))
    return float(np.median(ratios)), float(ratios[worst]), worst


def relate_sizes(results: list[Result], names: Sequence[str] | None = None) -> None:
    """Fill size_vs_png and the worst image's ratio from the PNG row's bytes (Pillow's)."""
    png = next((r for r in results if r.format == "png" and r.image_bytes), None)
    if png is None or not png.encoded_bytes:
        return
    for result in results:
        if result.skipped or result.encoded_bytes is None:
            continue
        result.size_vs_png = result.encoded_bytes / png.encoded_bytes
        _, result.worst_image_vs_png, worst = per_image(result.image_bytes, png.image_bytes)
        if worst is not None:
            result.worst_image = names[worst] if names is not None and worst < len(names) else f"image {worst}"


def format_table(results: list[Result]) -> str:
    """A fixed-width text table of the results (skipped rows last, with their reason)."""
    header = (f"{'format':<23}{'decoder':<13}{'device':<7}{'threads':>7}{'images/s':>11}{'MB/s':>9}{'size/raw':>10}"
              f"{'vs PNG':>9}{'size x PNG':>12}  worst image x PNG")
    lines = [header, "-" * len(header)]
    for r in results:
        if r.skipped:
            continue
        ratio = f"{r.size_ratio:.3f}" if r.size_ratio is not None else "-"
        speed = f"{r.speedup_vs_png:.2f}x" if r.speedup_vs_png is not None else "-"
        size = f"{r.size_vs_png:.3f}" if r.size_vs_png is not None else "-"
        worst = f"{r.worst_image_vs_png:.3f} ({r.worst_image})" if r.worst_image_vs_png is not None else "-"
        lines.append(f"{r.format:<23}{r.decoder:<13}{r.device:<7}{r.threads:>7}{r.images_per_s:>11.1f}"
                     f"{r.decoded_mb_per_s:>9.0f}{ratio:>10}{speed:>9}{size:>12}  {worst}")
    for r in results:
        if r.skipped:
            lines.append(f"{r.format:<23}{r.decoder:<13}{r.device:<7} skipped: {r.skipped}")
    return "\n".join(lines)


def plot(results: list[Result], machine: dict[str, Any], path: str, title: str = "") -> None:
    """A horizontal bar chart of images/s (log scale), size/raw annotated on each bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results if r.images_per_s]
    rows.sort(key=lambda r: r.images_per_s or 0)
    labels = [f"{r.format} ({r.decoder}, {r.device})" for r in rows]
    values = [r.images_per_s or 0.0 for r in rows]
    colours = ["#d62728" if r.format.startswith("prepkit") else ("#1f77b4" if r.device == "cpu" else "#2ca02c") for r in rows]
    figure, axis = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.6))
    bars = axis.barh(labels, values, color=colours)
    axis.set_xscale("log")
    axis.set_xlabel("images decoded per second (log scale, higher is better)")
    for bar, row in zip(bars, rows, strict=True):
        note = f" {row.images_per_s:,.0f}/s"
        if row.size_vs_png is not None:
            note += f"  size {row.size_vs_png:.2f}x PNG"
        elif row.size_ratio is not None:
            note += f"  size {row.size_ratio:.2f}x raw"
        if row.speedup_vs_png:
            note += f"  {row.speedup_vs_png:.1f}x PNG"
        axis.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, note, va="center", fontsize=8)
    gpu = machine.get("gpu") or "no GPU"
    axis.set_title(title or f"bench-decode: {machine['images']} images, {machine['threads']} CPU threads, {gpu}", fontsize=10)
    axis.set_xlim(right=max(values) * 8 if values else 10)  # room for the labels
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
