"""Fuzzing harness for everything that reads untrusted bytes: the lossless decoder and the
store reader (metadata, per-sample arrays, shard indexes, shard data); and for the lossless
encoder's paths, which must write the same bytes.

    python -m prepkit.fuzz --seconds 600 [--target lossless|store|corpus|encoders|all] [--seed 0]

Each case mutates a valid input (bit flips, byte overwrites, truncations, extensions,
random numbers in header fields and JSON values) and decodes or reads it. The only
acceptable outcomes are a correct result or a prepkit error; anything else (another
exception type, a crash, a hang) is a finding. The test suite runs this for a few seconds;
the documented long run is in docs/BENCHMARKS.md.

The ``encoders`` target encodes random small images (patchworks of noise, flat, two-colour and
gradient blocks, up to 256 tiles, 1, 3 or 4 channels, tiles of 16-64, some with
fast_decode) with ``lossless.encode``, whose short path (``lossless.small_encoder``) takes most of
them, and with the general encoder (``cpu_v2._encode``), and every 25th with the numpy
reference too: the streams must be equal and decode back to the image. A difference is a
finding.

The ``corpus`` target replays a fixed regression corpus of hostile stores (``hostile_cases``:
flipped bytes in every kind of store file, hostile sizes and counts, wrong dtypes and labels,
FIFOs in place of files, some with every checksum recomputed) through every probe: each must
be refused or reported, with a prepkit error, without hanging. ``all`` runs it first.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from prepkit.errors import PrepkitError


@dataclass
class FuzzReport:
    target: str
    cases: int = 0
    rejected: int = 0  # prepkit errors (the expected outcome for most mutations)
    accepted: int = 0  # decoded without error
    findings: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"{self.target}: {self.cases} cases, {self.rejected} rejected with a prepkit error, "
                f"{self.accepted} read without error, {len(self.findings)} findings")


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random mutation of ``data``."""
    buffer = bytearray(data)
    choice = rng.randrange(6)
    if not buffer or choice == 0:
        return bytes(buffer[: rng.randrange(len(buffer) + 1)])  # truncate
    if choice == 1:
        for _ in range(rng.randint(1, 4)):
            position = rng.randrange(len(buffer))
            buffer[position] ^= 1 << rng.randrange(8)
    elif choice == 2:
        position = rng.randrange(len(buffer))
        width = rng.choice([1, 2, 4, 8])
        value = rng.choice([0, 1, 0xFF, 0x7F, rng.getrandbits(8 * width), (1 << (8 * width)) - 1])
        buffer[position : position + width] = value.to_bytes(width, "little")[: len(buffer) - position]
    elif choice == 3:
        buffer += bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64)))
    elif choice == 4:  # header region: the first 64 bytes hold most fields
        for _ in range(rng.randint(1, 3)):
            position = rng.randrange(min(64, len(buffer)))
            buffer[position] = rng.getrandbits(8)
    else:
        start = rng.randrange(len(buffer))
        stop = min(len(buffer), start + rng.randint(1, 256))
        buffer[start:stop] = bytes(stop - start)
    return bytes(buffer)


def _run_case(report: FuzzReport, action: Callable[[], object]) -> None:
    report.cases += 1
    try:
        action()
        report.accepted += 1
    except PrepkitError:
        report.rejected += 1
    except Exception:
        report.findings.append(traceback.format_exc(limit=6))


def budget(seconds: float | None, cases: int | None) -> Callable[[FuzzReport], bool]:
    """A stop rule: run until ``seconds`` pass or ``cases`` cases ran, whichever is given
    (both: whichever comes first). The test suite uses a case count: the same cases on
    every machine, however fast."""
    if seconds is None and cases is None:
        raise ValueError("Expected seconds or cases. Got neither.")
    deadline = None if seconds is None else time.monotonic() + seconds

    def go_on(report: FuzzReport) -> bool:
        if cases is not None and report.cases >= cases:
            return False
        return deadline is None or time.monotonic() < deadline

    return go_on


def palette_images(rng: np.random.Generator) -> list[np.ndarray]:
    """Few-colour images (RGB, RGBA, a mask with scattered label values) whose v2 streams use
    palette tiles (mode 2), as seeds for the fuzzers."""
    colours = np.array([[10, 200, 30], [250, 250, 250], [0, 0, 0], [90, 17, 160]], np.uint8)
    index = (np.add.outer(np.arange(40) // 5, np.arange(50) // 7) + rng.integers(0, 2, (40, 50))) % 4
    rgb = colours[index]
    rgba = np.dstack([rgb[:20, :20], np.full((20, 20), 255, np.uint8)])
    labels = np.array([0, 17, 200, 33], np.uint8)[index[:30, :30]]
    return [rgb, rgba, labels]


def runs_images(rng: np.random.Generator) -> list[np.ndarray]:
    """Segmentation-like masks (grey and RGB discs on a background, 64 x 48) for runs tiles
    (modes 3 to 6; too small for the encoders to keep a runs table set: reference_v2.runs_stream)."""
    yy, xx = np.mgrid[0:64, 0:48]
    out = []
    for c in (1, 3):
        label = np.zeros((64, 48), np.int64)
        for k in range(1, 6):
            cy, cx, r = rng.integers(0, 64), rng.integers(0, 48), rng.integers(8, 24)
            label[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = k
        image = rng.permutation(256)[: 6 * c].reshape(6, c)[label].astype(np.uint8)
        out.append(image[:, :, 0] if c == 1 else image)
    return out


def lossless_seeds(np_rng: np.random.Generator) -> list[bytes]:
    """The lossless fuzzer's seed streams: v1 and v2, every v2 tile mode (runs tiles in modes
    3 to 6), narrow and plane contexts, u32 tile tables."""
    from prepkit import lossless
    from prepkit.lossless import format_v2, reference_v2

    seeds = []
    for h, w, c in [(1, 1, 1), (7, 5, 3), (40, 70, 3), (65, 64, 4), (33, 17, 1), (128, 96, 3)]:
        y, x = np.mgrid[0:h, 0:w]
        smooth = ((y * 3 + x * 2)[:, :, None] + np.arange(c)[None, None, :] * 40) % 256
        noisy = np.clip(smooth + np_rng.normal(0, 6, size=(h, w, c)), 0, 255)
        for version in (1, 2):
            seeds.append(lossless.encode(noisy.astype(np.uint8), version=version))
        if c > 1 and h > 1:  # colour streams from before 2026-11-27: narrow contexts (A4), still decoded
            seeds.append(reference_v2.encode(noisy.astype(np.uint8), wide_context=False))
        if c > 1 and h * w >= 64:  # plane contexts (A4), which small images' encodes rarely keep
            seeds.append(reference_v2.encode(noisy.astype(np.uint8), plane_context=True))
    # v2's cheap modes: constant tiles, few-lane mask tiles, raw (noise) tiles.
    mask = np.zeros((70, 90), np.uint8)
    mask[10:50, 20:80] = 3
    mask[30:40, 5:60] = 7
    seeds.append(lossless.encode(mask, tile=32))
    seeds.append(lossless.encode(np_rng.integers(0, 256, (20, 40, 3), dtype=np.uint8), tile=16))
    seeds.extend(lossless.encode(image, tile=16) for image in palette_images(np_rng))
    seeds.extend(reference_v2.runs_stream(image, tile=32) for image in runs_images(np_rng))
    # The first v2 streams' u32 tile offsets (FLAG_SHORT_TILE_TABLE clear) are still decoded.
    seeds.extend(format_v2.with_tile_table(stream, short=False) for stream in seeds[-6:])
    # Runs tiles without row repeats (mode 3), as encoders wrote them before mode 4, without
    # implied labels (mode 4), before mode 5, and with raw palettes (mode 5), before mode 6.
    seeds.extend(reference_v2.runs_stream(image, tile=32, repeats=False) for image in runs_images(np_rng))
    seeds.extend(reference_v2.runs_stream(image, tile=32, same=False) for image in runs_images(np_rng))
    seeds.extend(reference_v2.runs_stream(image, tile=32, coded=False) for image in runs_images(np_rng))
    return seeds


def fuzz_lossless(seconds: float | None = None, seed: int = 0, cases: int | None = None) -> FuzzReport:
    """Mutated lossless streams through decode, ROI decode and the batch decoder."""
    from prepkit import lossless

    rng = random.Random(seed)
    seeds = lossless_seeds(np.random.default_rng(seed))
    report = FuzzReport("lossless")
    go_on = budget(seconds, cases)
    while go_on(report):
        data = mutate(rng.choice(seeds), rng)
        kind = rng.randrange(4)
        if kind == 0:
            _run_case(report, partial(lossless.decode, data))
        elif kind == 3:
            _run_case(report, partial(_agree_with_reference, data))
        elif kind == 1:
            def decode_region(data: bytes = data) -> object:
                header = lossless.read_header(data)  # a damaged header is rejected here
                y0, y1 = sorted(rng.sample(range(header.height + 1), 2)) if header.height > 1 else (0, 1)
                x0, x1 = sorted(rng.sample(range(header.width + 1), 2)) if header.width > 1 else (0, 1)
                return lossless.decode(data, roi=(y0, x0, y1, x1))

            _run_case(report, decode_region)
        else:
            _run_case(report, partial(lossless.decode_batch, [rng.choice(seeds), data]))
    return report


def patchwork(rng: np.random.Generator) -> tuple[np.ndarray, int, bool]:
    """(image, tile, fast_decode): a random image made of noise, flat, two-colour and gradient
    blocks (the encoders' coded, constant, palette, runs and raw cases), 1, 3 or 4 channels
    (HxW or HxWx1 for one); half of them up to 2 x 2 tiles (the one-set trial), a quarter up
    to table_sets.MIN_TILES - 1 tiles (plane contexts), a quarter of table_sets.MIN_TILES to
    small_encoder.MAX_TILES tiles of 16 (table sets per tile class; the kernels on numba's
    threads where cpu.use_parallel says so)."""
    from prepkit.lossless import small_encoder, table_sets

    tile = int(rng.choice([16, 32, 64]))
    kind = int(rng.integers(0, 4))
    if kind < 2:
        rows, cols = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    elif kind == 2:
        rows = int(rng.integers(1, 6))
        cols = int(rng.integers(1, (table_sets.MIN_TILES - 1) // rows + 1))
    else:
        tile = 16
        rows = int(rng.integers(2, 17))
        least = -(-table_sets.MIN_TILES // rows)
        cols = int(rng.integers(least, small_encoder.MAX_TILES // rows + 1))
    h = int(rng.integers((rows - 1) * tile + 1, rows * tile + 1))
    w = int(rng.integers((cols - 1) * tile + 1, cols * tile + 1))
    c = int(rng.choice([1, 3, 4]))
    image = np.zeros((h, w, c), np.int64)
    for _ in range(int(rng.integers(1, 4 + 2 * rows * cols))):
        y0, x0 = int(rng.integers(0, h)), int(rng.integers(0, w))
        y1, x1 = min(h, y0 + int(rng.integers(1, tile + 1))), min(w, x0 + int(rng.integers(1, tile + 1)))
        shape = (y1 - y0, x1 - x0, c)
        kind = int(rng.integers(0, 4))
        if kind == 0:
            image[y0:y1, x0:x1] = rng.integers(0, int(rng.integers(2, 257)), shape)
        elif kind == 1:
            image[y0:y1, x0:x1] = rng.integers(0, 256, c)
        elif kind == 2:
            image[y0:y1, x0:x1] = rng.integers(0, 256, (2, c))[rng.integers(0, 2, shape[:2])]
        else:
            ramp = np.arange(shape[1])[None, :, None] * int(rng.integers(0, 4)) + np.arange(shape[0])[:, None, None]
            image[y0:y1, x0:x1] = ramp % 256
    out = image.astype(np.uint8)
    if c == 1 and rng.integers(0, 2):
        out = out[:, :, 0]
    return out, tile, bool(rng.integers(0, 5) == 0)


def _encoders_agree(image: np.ndarray, tile: int, fast_decode: bool, with_reference: bool) -> object:
    """lossless.encode (the short path where it applies) against the general encoder, and the
    reference when asked: the same bytes, decoding back to the image."""
    from prepkit import lossless
    from prepkit.lossless import cpu_v2, reference_v2
    from prepkit.lossless import format as fmt

    data = lossless.encode(image, tile=tile, fast_decode=fast_decode)
    prepared, flags = fmt.prepare(image, tile)
    general = cpu_v2._encode(prepared, flags, tile, fast_decode, True, True, try_one_set=True)
    if data != general:
        raise AssertionError(f"the short path and the general encoder differ on a {image.shape} image, tile {tile}")
    if with_reference and data != reference_v2.encode(image, tile=tile, fast_decode=fast_decode):
        raise AssertionError(f"the encoders and the reference differ on a {image.shape} image, tile {tile}")
    if not np.array_equal(np.asarray(lossless.decode(data)).reshape(image.shape), image):
        raise AssertionError(f"a {image.shape} image, tile {tile}, did not decode back")
    return data


def fuzz_encoders(seconds: float | None = None, seed: int = 0, cases: int | None = None) -> FuzzReport:
    """Random small images through both lossless encoder paths (and every 25th through the
    reference): every disagreement is a finding."""
    rng = np.random.default_rng(seed)
    report = FuzzReport("encoders")
    go_on = budget(seconds, cases)
    while go_on(report):
        image, tile, fast_decode = patchwork(rng)
        _run_case(report, partial(_encoders_agree, image, tile, fast_decode, report.cases % 25 == 0))
    return report


def _agree_with_reference(data: bytes) -> object:
    """Decode with the numba kernels and the numpy reference of the stream's version: both
    must reject (CodecError) or both return the same pixels; a disagreement is a finding."""
    from prepkit import lossless
    from prepkit.errors import CodecError
    from prepkit.lossless import reference, reference_v2

    header = lossless.read_header(data)  # damaged headers are rejected here, by both
    oracle = reference_v2.decode if header.version == 2 else reference.decode
    outcomes: list[np.ndarray | None] = []
    for decoder in (lossless.decode, oracle):
        try:
            outcomes.append(decoder(data))
        except CodecError:
            outcomes.append(None)
    kernel, expected = outcomes
    if kernel is None and expected is None:
        raise CodecError("rejected by both decoders")
    if kernel is None or expected is None or not np.array_equal(kernel, expected):
        raise AssertionError(f"kernel and reference disagree on a version {header.version} stream")
    return kernel


def _make_store(folder: Path) -> Path:
    from prepkit.layouts import Layout, LosslessLayout, RawLayout
    from prepkit.store.writer import EncodedSample, plan_store, write_all

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, size=(5 + i, 6 + 2 * i, 3), dtype=np.uint8) for i in range(6)]
    masks = [(image[:, :, :1] % 5).astype(np.uint8) for image in images]
    layouts: dict[str, Layout] = {"image": RawLayout(), "mask": LosslessLayout(tile=16)}
    pixels = {"image": images, "mask": masks}
    shapes = {name: [(p.shape[0], p.shape[1], p.shape[2]) for p in pixels[name]] for name in layouts}
    plan = plan_store(layouts, shapes, 2, class_names=["a", "b"], provenance={"command": "fuzz"}, items_digest="fuzz")

    def job(i: int) -> EncodedSample:
        fields = {name: (layout.encode(pixels[name][i]), shapes[name][i]) for name, layout in layouts.items()}
        return EncodedSample(i, f"{i}.png", i % 2, fields)

    dest = folder / "seed-store"
    write_all(dest, plan, job, overwrite=True)
    return dest


def _mutate_json(text: bytes, rng: random.Random) -> bytes:
    try:
        document = json.loads(text)
    except ValueError:
        return mutate(text, rng)
    paths: list[tuple[object, object]] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                paths.append((node, key))
                walk(value)
        elif isinstance(node, list):
            for index, value in enumerate(node):
                paths.append((node, index))
                walk(value)

    walk(document)
    if not paths:
        return mutate(text, rng)
    parent, key = rng.choice(paths)
    replacement: object = rng.choice([None, -1, 0, 1, 2**63, 2**64 + 5, "x", [], {}, 3.5, True, [1, 2, 3]])
    if isinstance(parent, dict) and rng.random() < 0.2:
        del parent[key]
    else:
        parent[key] = replacement  # type: ignore[index]
    return json.dumps(document).encode()


def _read_everything(path: Path) -> None:
    from prepkit.store.reader import open_store
    from prepkit.store.verify import verify_store

    with open_store(path, check_crc=True) as store:
        for index in range(len(store)):
            store[index]
            store.source_path(index)
    report = verify_store(path, decode=True)
    if report.ok is None:  # pragma: no cover - keeps the report alive for the harness
        raise AssertionError


def fuzz_store(seconds: float | None = None, seed: int = 0, cases: int | None = None) -> FuzzReport:
    """Mutated store files (metadata, per-sample arrays, shard files) opened and read."""
    rng = random.Random(seed)
    report = FuzzReport("store")
    with tempfile.TemporaryDirectory() as folder:
        seed_store = _make_store(Path(folder))
        files = sorted(p for p in seed_store.rglob("*") if p.is_file() and p.name != ".prepkit.lock")
        work = Path(folder) / "case"
        go_on = budget(seconds, cases)
        while go_on(report):
            if work.exists():
                shutil.rmtree(work)
            shutil.copytree(seed_store, work)
            for _ in range(rng.randint(1, 2)):
                target = work / rng.choice(files).relative_to(seed_store)
                data = target.read_bytes()
                target.write_bytes(_mutate_json(data, rng) if target.name == "zarr.json" else mutate(data, rng))
            _run_case(report, lambda: _read_everything(work))
    return report


# -- the hostile-store corpus (issue 15) -----------------------------------------------
# Named tampered stores replayed on every run: each must be refused or reported by every
# probe (open and read, verify --decode, inspect, the Reader), with a prepkit error, never
# another exception or a hang. "Resealed" cases recompute every checksum after tampering,
# as a hostile or buggy writer would: they exercise the value checks behind the checksums.


def _reseal(root: Path, arrays: bool = True) -> None:
    """Recompute the checksums of a tampered store so that only its value checks can catch it."""
    import zarr

    from prepkit.store.checksums import array_crc32c, attributes_crc32c, file_checksums

    meta = json.loads((root / "zarr.json").read_text())
    values = meta["attributes"]["prepkit"]
    fields = list(values["fields"])
    values["checksums"]["files"] = file_checksums(root, fields)
    if arrays:
        group = zarr.open_group(root, mode="r")
        for key in values["checksums"]["arrays"]:
            array: Any = group[key]
            values["checksums"]["arrays"][key] = array_crc32c(np.asarray(array[...]))
    values["attributes_crc32c"] = attributes_crc32c(values)
    (root / "zarr.json").write_text(json.dumps(meta))


def _flip(relative: str) -> Callable[[Path], None]:
    def tamper(root: Path) -> None:
        path = root / relative
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x10
        path.write_bytes(bytes(data))
    return tamper


def _edit_json(relative: str, edit: Callable[[dict[str, Any]], None], reseal: bool = False,
               unchecked: bool = False) -> Callable[[Path], None]:
    def tamper(root: Path) -> None:
        path = root / relative
        document = json.loads(path.read_text())
        edit(document)
        path.write_text(json.dumps(document))
        if unchecked:
            _drop_checksums(root)
        elif reseal:
            _reseal(root, arrays=False)
    return tamper


def _drop_checksums(root: Path) -> None:
    """Make the store look like one written before checksums existed."""
    meta = json.loads((root / "zarr.json").read_text())
    for key in ("checksums", "generation", "attributes_crc32c", "plan_sha256"):
        meta["attributes"]["prepkit"].pop(key, None)
    (root / "zarr.json").write_text(json.dumps(meta))


def _attributes(edit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    return lambda document: edit(document["attributes"]["prepkit"])


def _rewrite_array(name: str, values: np.ndarray) -> Callable[[Path], None]:
    def tamper(root: Path) -> None:
        import zarr

        group = zarr.open_group(root, mode="r+")
        array = group.create_array(name, shape=values.shape, dtype=values.dtype, chunks=values.shape or (1,),
                                   compressors=None, filters=None, fill_value=0, overwrite=True)
        array[...] = values
        _reseal(root)
    return tamper


def _fifo(relative: str) -> Callable[[Path], None]:
    def tamper(root: Path) -> None:
        import os

        (root / relative).unlink()
        os.mkfifo(root / relative)
    return tamper


def _set(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    def edit(values: dict[str, Any]) -> None:
        values[key] = value
    return edit


def hostile_cases() -> dict[str, Callable[[Path], None]]:
    """The regression corpus: case name -> tampering of a copy of the seed store."""
    labels = np.array([0, 1, 0, 1, 0, 1], dtype=np.int64)
    shape_edit = _attributes(lambda v: None)
    cases: dict[str, Callable[[Path], None]] = {
        f"flip {name}": _flip(name)
        for name in ("labels/c/0", "paths/c/0", "path_ranges/c/0/0", "image/ranges/c/0/0", "image/shapes/c/0/0",
                     "image/crc32c/c/0", "mask/shapes/c/0/0", "mask/ranges/c/0/0", "image/bytes/c/1",
                     "mask/bytes/c/2", "paths/zarr.json", "image/shapes/zarr.json", "zarr.json")
    }
    cases |= {
        "labels float64 (resealed)": _rewrite_array("labels", labels.astype(np.float64)),
        "label 99 with 2 class names (resealed)": _rewrite_array("labels", np.array([0, 1, 0, 99, 0, 1])),
        "label -5 (resealed)": _rewrite_array("labels", np.array([0, 1, -5, 1, 0, 1])),
        "path range outside paths (resealed)": _rewrite_array(
            "path_ranges", np.array([[0, 5], [5, 10], [10, 15], [15, 20], [20, 25], [25, 10**6]], dtype=np.uint64)),
        "image shape not matching raw size (resealed)": _rewrite_array(
            "image/shapes", np.array([[5, 6, 3], [6, 8, 3], [7, 10, 3], [8, 12, 3], [9, 14, 3], [11, 15, 3]], dtype=np.uint32)),
        "mask shape not matching stream (resealed)": _rewrite_array(
            "mask/shapes", np.array([[5, 6, 1], [6, 8, 1], [7, 10, 1], [8, 12, 1], [9, 14, 1], [11, 15, 1]], dtype=np.uint32)),
        "paths shape 2**33": _edit_json("paths/zarr.json", _set("shape", [2**33])),
        "paths shape 2**33 (resealed)": _edit_json("paths/zarr.json", _set("shape", [2**33]), reseal=True),
        "paths shape 2**33 (no checksums)": _edit_json("paths/zarr.json", _set("shape", [2**33]), unchecked=True),
        "num_shards 10**9": _edit_json("zarr.json", _attributes(_set("num_shards", 10**9))),
        "num_shards 10**9 (resealed)": _edit_json("zarr.json", _attributes(_set("num_shards", 10**9)), reseal=True),
        "num_shards 10**9 (no checksums)": _edit_json("zarr.json", _attributes(_set("num_shards", 10**9)), unchecked=True),
        "num_samples 2**40 (no checksums)": _edit_json("zarr.json", _attributes(_set("num_samples", 2**40)), unchecked=True),
        "chunk 2**40 (resealed)": _edit_json(
            "zarr.json", _attributes(lambda v: v["fields"]["image"].update(chunk=2**40, capacity=2**41)), reseal=True),
        "one class name (resealed)": _edit_json("zarr.json", _attributes(_set("class_names", ["a"])), reseal=True),
        "provenance edited": _edit_json("zarr.json", _attributes(_set("provenance", {"command": "other"}))),
        "unknown key in zarr.json": _edit_json("zarr.json", _set("atributes", {})),
        "checksums removed, labels flipped": _edit_json("zarr.json", shape_edit, unchecked=True),
        "shard file is a FIFO": _fifo("image/bytes/c/1"),
        "labels chunk is a FIFO": _fifo("labels/c/0"),
        "zarr.json is a FIFO": _fifo("zarr.json"),
        "mask zarr.json is a FIFO": _fifo("mask/ranges/zarr.json"),
    }
    return cases


# Cases a reader cannot tell from a good store: an old store (no checksums) whose damage
# lies only in values that are still plausible.
UNDETECTABLE = {"checksums removed, labels flipped"}


def _probe_all(path: Path) -> list[str]:
    """Run every probe on the store at ``path``; return the problems (an empty list: fine)."""
    from prepkit.reader.reader import Reader
    from prepkit.store.describe import describe
    from prepkit.store.reader import open_store
    from prepkit.store.verify import verify_store

    findings = []

    def guarded(name: str, action: Callable[[], object]) -> None:
        try:
            action()
        except PrepkitError:
            pass
        except Exception:
            findings.append(f"{name}: {traceback.format_exc(limit=4)}")

    def inspect() -> None:
        with open_store(path) as store:
            describe(store)

    def read() -> None:
        _read_everything_plain(path)

    def reader() -> None:
        for _ in Reader(path, batch_size=2, shuffle=False, fields=("image", "label", "mask")):
            pass

    guarded("open and read", read)
    guarded("inspect", inspect)
    guarded("reader", reader)
    try:
        if verify_store(path, decode=True).ok:
            findings.append("verify --decode says ok")
    except Exception:
        findings.append(f"verify: {traceback.format_exc(limit=4)}")
    return findings


def _read_everything_plain(path: Path) -> None:
    from prepkit.store.reader import open_store

    with open_store(path, check_crc=True) as store:
        for index in range(len(store)):
            store[index]
            store.source_path(index)


def replay_corpus(timeout: float = 60.0) -> FuzzReport:
    """Every hostile case through every probe; a probe still running after ``timeout``
    seconds (blocked on a FIFO, looping on a hostile count) is a finding."""
    import threading

    report = FuzzReport("corpus")
    with tempfile.TemporaryDirectory() as folder:
        seed_store = _make_store(Path(folder))
        for number, (name, tamper) in enumerate(hostile_cases().items()):
            work = Path(folder) / f"case-{number}"
            shutil.copytree(seed_store, work)
            tamper(work)
            findings: list[str] = []
            thread = threading.Thread(target=lambda work=work, findings=findings: findings.extend(_probe_all(work)), daemon=True)
            thread.start()
            thread.join(timeout)
            report.cases += 1
            if thread.is_alive():
                report.findings.append(f"{name}: a probe did not finish in {timeout:.0f} s (blocked?)")
            elif name in UNDETECTABLE:
                report.accepted += 1
            elif findings:
                report.findings += [f"{name}: {finding}" for finding in findings]
            else:
                report.rejected += 1
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="time per target")
    parser.add_argument("--target", choices=["lossless", "store", "corpus", "encoders", "all"], default="all")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    targets = ["corpus", "lossless", "store", "encoders"] if args.target == "all" else [args.target]
    runs = {"lossless": fuzz_lossless, "store": fuzz_store, "encoders": fuzz_encoders}
    failed = False
    for target in targets:
        if target == "corpus":
            report = replay_corpus()
        else:
            report = runs[target](args.seconds, args.seed)
        print(report.line())
        for finding in report.findings[:5]:
            print(finding)
        failed |= bool(report.findings)
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
