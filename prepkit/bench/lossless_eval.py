"""Size and speed of prepkit's lossless codec against PNG, libspng, WebP, JPEG-XL and HTJ2K.

``python -m prepkit.bench.lossless_eval SETS_DIR [--threads 1 2] [--repeat N] [--limit N]
[--json F] [--markdown F] [--plot F.png]`` reads the evaluation sets that
``prepkit.bench.evalsets`` built and reports, per set and per lossless format: total bytes,
size relative to PNG (Pillow's default encoder), the same ratio image by image (median and
worst, and the worst image's name) against PNG and against WebP lossless (method 6), since a
set's total is carried by its largest images and hides the small ones a format handles badly
(``--plot`` draws every image's); encode seconds (one pass over the set, the faster of two for
encoders under FAST_ENCODE_S; `prepkit.bench.encode_speed` times prepkit's encoder in interleaved rounds) and
how many times faster than PNG's encoder that is, decoded images/s at
each thread count, and decode speed relative to Pillow's PNG and to libspng.

The decoders are the lossless ones of ``prepkit bench-decode`` (one list, in
``prepkit.bench.decode.candidates``); prepkit's row uses whatever ``prepkit.lossless`` is at run
time, decoding with ``decode_batch_packed`` into a reused buffer as the Reader does. Every
decoder's output is checked equal to the source pixels before anything is timed. All
(set, decoder, threads) passes are timed in one interleaved run, so the ratios hold on a shared
machine: a figure is the median of ``repeat`` rounds. A library that is not installed is
reported as a skipped row.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prepkit.bench import decode as bench_decode
from prepkit.bench.evalsets import SETS, load_manifest
from prepkit.bench.machine import describe_machine, machine_line
from prepkit.parallel import keeps_numba_threads


@dataclass
class Row:
    """One (set, format, decoder) line of the comparison, or a skipped one."""

    set: str
    format: str
    decoder: str
    images: int
    raw_bytes: int
    encoded_bytes: int | None = None
    size_vs_png: float | None = None  # encoded bytes / Pillow PNG bytes
    image_bytes: list[int] = field(default_factory=list)  # each image's encoded bytes, in the set's order
    # Image by image: this format's bytes / PNG's (or WebP-m6's), the median and the largest
    # ratio, and the index of the image with the largest
    median_image_vs_png: float | None = None
    worst_image_vs_png: float | None = None
    worst_image_png: int | None = None
    median_image_vs_webp: float | None = None
    worst_image_vs_webp: float | None = None
    worst_image_webp: int | None = None
    encode_s: float | None = None
    encode_speedup_vs_png: float | None = None  # PNG encode seconds / this format's
    pixels_equal: bool | None = None
    mismatch: str | None = None
    images_per_s: dict[int, float] = field(default_factory=dict)  # threads -> images/s
    vs_pillow_png: dict[int, float] = field(default_factory=dict)
    vs_libspng: dict[int, float] = field(default_factory=dict)
    skipped: str | None = None

    def record(self) -> dict[str, Any]:
        return asdict(self)


FAST_ENCODE_S = 10.0  # encoders whose first pass over a set took less are timed twice (the faster counts)


def lossless_candidates() -> list[bench_decode.Candidate]:
    """The CPU decoders of ``bench-decode`` whose formats are lossless."""
    return [c for c in bench_decode.candidates(90, ["cpu"]) if c.format in bench_decode.LOSSLESS_FORMATS]


def as_hwc(image: np.ndarray) -> np.ndarray:
    """HxWxC view of an HxW or HxWxC image (the layout bench-decode's encoders take)."""
    return image[:, :, None] if image.ndim == 2 else image


def check_pixels(decoded: list[np.ndarray], sources: list[np.ndarray]) -> str | None:
    """None when every decoded image equals its source, else what differs first."""
    if len(decoded) != len(sources):
        return f"Expected {len(sources)} decoded images. Got {len(decoded)}."
    for index, (got, want) in enumerate(zip(decoded, sources, strict=True)):
        got = np.asarray(got)
        if want.shape[2] == 1 and got.ndim == 3 and got.shape[2] in (3, 4) and got.shape[:2] == want.shape[:2]:
            # WebP has no grey mode: a grey image comes back as RGB(A); lossless when R = G = B = source.
            if got.shape[2] == 4 and not np.all(got[:, :, 3] == 255):
                return f"image {index}: Expected an opaque decode of a grey image. Got alpha below 255."
            got = got[:, :, :3]
            want = np.repeat(want, 3, axis=2)
        if got.dtype != want.dtype or got.size != want.size:
            return f"image {index}: Expected {want.dtype} {want.shape}. Got {got.dtype} {got.shape}."
        if not np.array_equal(got.reshape(want.shape), want):
            differing = int(np.count_nonzero(got.reshape(want.shape) != want))
            return f"image {index}: Expected the source pixels. Got {differing} differing values."
    return None


@keeps_numba_threads
def evaluate(
    sets: dict[str, list[np.ndarray]],
    *,
    threads: Sequence[int] = (1, 2),
    repeat: int = 3,
    warmup: int = 1,
    progress: Callable[[str], None] = lambda text: None,
) -> list[Row]:
    """Encode, check and time every lossless decoder on every set; one row per (set, decoder).

    Encoded streams are shared between decoders of the same format (Pillow and libspng read
    the same PNG files).
    """
    rows: list[Row] = []
    passes: list[tuple[Row, int, Callable[[], None]]] = []
    for set_name, originals in sets.items():
        images = [np.ascontiguousarray(as_hwc(image)) for image in originals]
        raw_bytes = sum(image.nbytes for image in images)
        encoded_by_format: dict[str, tuple[list[bytes], float]] = {}
        for candidate in lossless_candidates():
            row = Row(set_name, candidate.format, candidate.decoder, len(images), raw_bytes)
            rows.append(row)
            if candidate.skipped:
                row.skipped = candidate.skipped
                continue
            label = f"{set_name} / {candidate.format} / {candidate.decoder}"
            try:
                if candidate.format not in encoded_by_format:
                    progress(f"encoding {label}")
                    candidate.encode(min(images, key=lambda image: image.size))  # type: ignore[misc]  # JIT, init
                    start = time.perf_counter()
                    encoded = [candidate.encode(image) for image in images]  # type: ignore[misc]
                    seconds = time.perf_counter() - start
                    if seconds < FAST_ENCODE_S:
                        # A second pass for the fast encoders: the first can include loading
                        # numba functions that the warm-up image did not reach (palette tiles)
                        # and faulting in fresh buffers; the slow encoders are not rerun.
                        start = time.perf_counter()
                        for image in images:
                            candidate.encode(image)  # type: ignore[misc]
                        seconds = min(seconds, time.perf_counter() - start)
                    encoded_by_format[candidate.format] = (encoded, seconds)
                encoded, row.encode_s = encoded_by_format[candidate.format]
                row.encoded_bytes = candidate.stored_bytes(encoded)
                row.image_bytes = [candidate.stored_bytes([data]) for data in encoded]
                if candidate.decode_all is not None:
                    row.mismatch = check_pixels(candidate.decode_all(encoded), images)
                    row.pixels_equal = row.mismatch is None
                for count in threads:
                    one_pass = candidate.run(encoded, count)
                    for _ in range(warmup):
                        one_pass()
                    passes.append((row, count, one_pass))
            except Exception as error:  # a broken optional library must not end the benchmark
                row.skipped = f"failed: {type(error).__name__}: {error}"
    progress(f"timing {len(passes)} passes, {repeat} interleaved rounds")
    medians = bench_decode.interleaved_medians([one_pass for _, _, one_pass in passes], repeat, progress)
    for (row, count, _), seconds in zip(passes, medians, strict=True):
        row.images_per_s[count] = row.images / seconds
    _relate(rows)
    return rows


def _relate(rows: list[Row]) -> None:
    """Fill the ratios against Pillow's PNG (size, encode and decode speed), libspng and WebP-m6."""
    for row in rows:
        same_set = [r for r in rows if r.set == row.set and not r.skipped]
        pillow = next((r for r in same_set if r.format == "png" and r.decoder == "pillow"), None)
        libspng = next((r for r in same_set if r.format == "png" and r.decoder == "libspng"), None)
        webp = next((r for r in same_set if r.format == "webp-lossless-m6"), None)
        if row.skipped:
            continue
        if pillow and pillow.encoded_bytes and row.encoded_bytes is not None:
            row.size_vs_png = row.encoded_bytes / pillow.encoded_bytes
        if pillow:
            row.median_image_vs_png, row.worst_image_vs_png, row.worst_image_png = bench_decode.per_image(
                row.image_bytes, pillow.image_bytes)
        if webp:
            row.median_image_vs_webp, row.worst_image_vs_webp, row.worst_image_webp = bench_decode.per_image(
                row.image_bytes, webp.image_bytes)
        if pillow and pillow.encode_s and row.encode_s:
            row.encode_speedup_vs_png = pillow.encode_s / row.encode_s
        for count, speed in row.images_per_s.items():
            if pillow and count in pillow.images_per_s:
                row.vs_pillow_png[count] = speed / pillow.images_per_s[count]
            if libspng and count in libspng.images_per_s:
                row.vs_libspng[count] = speed / libspng.images_per_s[count]


def format_markdown(rows: list[Row], threads: Sequence[int], names: dict[str, list[str]] | None = None) -> str:
    """One markdown table per set; skipped rows follow their set's table with the reason.
    names: each set's image names (for the worst images), in the order evaluated."""
    lines: list[str] = []
    header = ["format", "decoder", "MB", "x PNG size", "per image x PNG: median, worst",
              "per image x WebP-m6: median, worst", "encode s", "encode x PNG"]
    for count in threads:
        header += [f"img/s {count}T", f"x Pillow PNG {count}T", f"x libspng {count}T"]
    header.append("pixels")
    set_names = [s for s in dict.fromkeys(r.set for r in rows)]
    for set_name in set_names:
        in_set = [r for r in rows if r.set == set_name]
        first = in_set[0]
        lines.append(f"### {set_name}: {first.images} images, {first.raw_bytes / 1e6:.1f} MB of pixels")
        lines.append("")
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        for r in in_set:
            if r.skipped:
                continue
            cells = [r.format, r.decoder, _number(r.encoded_bytes and r.encoded_bytes / 1e6, 2),
                     _number(r.size_vs_png, 3),
                     _spread_cell(r.median_image_vs_png, r.worst_image_vs_png, r.worst_image_png, set_name, names),
                     _spread_cell(r.median_image_vs_webp, r.worst_image_vs_webp, r.worst_image_webp, set_name, names),
                     _number(r.encode_s, 2), _number(r.encode_speedup_vs_png, 2)]
            for count in threads:
                cells += [_number(r.images_per_s.get(count), 1), _number(r.vs_pillow_png.get(count), 2),
                          _number(r.vs_libspng.get(count), 2)]
            cells.append("equal" if r.pixels_equal else ("-" if r.pixels_equal is None else f"DIFFER: {r.mismatch}"))
            lines.append("| " + " | ".join(cells) + " |")
        for r in in_set:
            if r.skipped:
                lines.append(f"\nskipped: {r.format} / {r.decoder}: {r.skipped}")
        lines.append("")
    return "\n".join(lines)


def _number(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _image_name(names: dict[str, list[str]] | None, set_name: str, index: int) -> str:
    """Image ``index`` of a set by name, or by its number where the names are not known."""
    known = names.get(set_name, []) if names else []
    return known[index] if index < len(known) else f"image {index}"


def _spread_cell(median: float | None, worst: float | None, index: int | None, set_name: str,
                 names: dict[str, list[str]] | None) -> str:
    """'median, worst (image)' of a per-image ratio."""
    if median is None or worst is None or index is None:
        return "-"
    return f"{median:.3f}, {worst:.3f} ({_image_name(names, set_name, index)})"


PLOT_TICKS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0)


def plot_sizes(rows: list[Row], names: dict[str, list[str]], path: str | Path, title: str = "") -> None:
    """A chart of every image's size against PNG's, one panel per set, one column of points
    per format (log scale; PNG is the line at 1): the spread and the outliers a total hides.
    Each format's worst image is named beside its point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    set_names = list(dict.fromkeys(r.set for r in rows))
    figure, axes = plt.subplots(len(set_names), 1, figsize=(10, 3.2 * len(set_names) + 0.6), squeeze=False)
    for axis, set_name in zip(axes[:, 0], set_names, strict=True):
        by_format: dict[str, Row] = {}
        for r in rows:  # one row per format (Pillow and libspng read the same PNG files)
            if r.set == set_name and not r.skipped and r.image_bytes:
                by_format.setdefault(r.format, r)
        png = by_format.get("png")
        if png is None:
            continue
        formats = [f for f in by_format if f != "png"]
        jitter = np.random.default_rng(0)
        for x, fmt in enumerate(formats):
            ratios = np.asarray(by_format[fmt].image_bytes, np.float64) / np.asarray(png.image_bytes, np.float64)
            median, largest, worst = bench_decode.per_image(by_format[fmt].image_bytes, png.image_bytes)
            if median is None or largest is None or worst is None:
                continue
            colour = "#d62728" if fmt.startswith("prepkit") else "#1f77b4"
            axis.scatter(x + jitter.uniform(-0.18, 0.18, ratios.size), ratios, s=10, alpha=0.6, color=colour)
            axis.hlines(median, x - 0.3, x + 0.3, color="black", linewidth=1.5)
            axis.annotate(_image_name(names, set_name, worst), (x, largest), textcoords="offset points",
                          xytext=(6, 0), fontsize=6, va="center")
        axis.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        axis.set_yscale("log")
        low, high = axis.get_ylim()
        axis.set_yticks([t for t in PLOT_TICKS if low <= t <= high])
        axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
        axis.set_xticks(range(len(formats)), formats, fontsize=7)
        axis.set_ylabel("bytes / PNG's (log)")
        axis.set_title(f"{set_name}: {len(png.image_bytes)} images (black bar: median; PNG is the dashed line)",
                       fontsize=9)
    figure.suptitle(title or "Lossless sizes image by image against PNG (lower is better)", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def load_sets(folder: str | Path, names: Sequence[str] | None = None, limit: int | None = None) -> dict[str, list[np.ndarray]]:
    """The images of each set in ``folder`` (built by prepkit.bench.evalsets), in SETS order.

    ``limit`` keeps that many images per set, evenly spaced over the manifest's order.
    """
    return load_named_sets(folder, names, limit)[0]


def load_named_sets(folder: str | Path, names: Sequence[str] | None = None,
                    limit: int | None = None) -> tuple[dict[str, list[np.ndarray]], dict[str, list[str]]]:
    """load_sets' images and, per set, their names (file names without the folder, the number
    and the suffix), in the same order."""
    found = load_manifest(folder)
    wanted = [name for name in SETS if name in found and (not names or name in names)]
    wanted += [name for name in found if name not in SETS and (not names or name in names)]
    if names:
        unknown = sorted(set(names) - set(found))
        if unknown:
            raise ValueError(f"Expected set names from {sorted(found)}. Got {unknown}.")
    chosen = {name: _spread(found[name], limit) for name in wanted}
    return ({name: [pixels for _, pixels in items] for name, items in chosen.items()},
            {name: [Path(entry.file).stem.split("-", 1)[-1] for entry, _ in items] for name, items in chosen.items()})


def _spread(items: list[Any], limit: int | None) -> list[Any]:
    """At most ``limit`` items evenly spaced over the list (every source of a set, not the first)."""
    if limit is None or limit >= len(items):
        return items
    return [items[int(i)] for i in np.linspace(0, len(items) - 1, limit).round()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m prepkit.bench.lossless_eval",
                                     description="Lossless formats compared on the evaluation sets.")
    parser.add_argument("sets_dir", help="a folder written by `python -m prepkit.bench.evalsets build`")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="decode thread counts")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds (a figure is the median)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed passes per decoder first")
    parser.add_argument("--sets", nargs="+", help="only these sets")
    parser.add_argument("--limit", type=int, help="at most this many images per set, evenly spaced")
    parser.add_argument("--json", help="write the rows and the machine as JSON here")
    parser.add_argument("--markdown", help="write the tables as markdown here")
    parser.add_argument("--plot", help="write a chart of every image's size against PNG's here (PNG; matplotlib)")
    args = parser.parse_args(argv)
    if args.repeat < 1 or any(t < 1 for t in args.threads):
        parser.error("--repeat and --threads must be at least 1")
    sets, names = load_named_sets(args.sets_dir, args.sets, args.limit)
    rows = evaluate(sets, threads=args.threads, repeat=args.repeat, warmup=args.warmup,
                    progress=lambda text: print(f"  {text}", file=sys.stderr, flush=True))
    machine = describe_machine(with_gpu=False)
    command = "python -m prepkit.bench.lossless_eval " + " ".join(argv if argv is not None else sys.argv[1:])
    text = format_markdown(rows, args.threads, names)
    print(f"{machine_line(machine)}\n{command}\n\n{text}")
    if args.markdown:
        Path(args.markdown).write_text(f"Machine: {machine_line(machine)}\n\nCommand: `{command}`\n\n{text}\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "command": command, "threads": args.threads,
                                               "repeat": args.repeat, "names": names,
                                               "rows": [r.record() for r in rows]},
                                              indent=1) + "\n")
    if args.plot:
        plot_sizes(rows, names, args.plot)
    mismatched = [r for r in rows if r.pixels_equal is False]
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
