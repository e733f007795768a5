"""Fuzzing harness for everything that reads untrusted bytes: the lossless decoder and the
store reader (metadata, per-sample arrays, shard indexes, shard data).

    python -m prepkit.fuzz --seconds 600 [--target lossless|store|all] [--seed 0]

Each case mutates a valid input (bit flips, byte overwrites, truncations, extensions,
random numbers in header fields and JSON values) and decodes or reads it. The only
acceptable outcomes are a correct result or a prepkit error; anything else (another
exception type, a crash, a hang) is a finding. The test suite runs this for a few seconds;
the documented long run is in docs/BENCHMARKS.md.
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
from pathlib import Path

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


def fuzz_lossless(seconds: float, seed: int = 0) -> FuzzReport:
    """Mutated lossless streams through decode, ROI decode and the batch decoder."""
    from prepkit import lossless

    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    seeds = []
    for h, w, c in [(1, 1, 1), (7, 5, 3), (40, 70, 3), (65, 64, 4), (33, 17, 1), (128, 96, 3)]:
        y, x = np.mgrid[0:h, 0:w]
        smooth = ((y * 3 + x * 2)[:, :, None] + np.arange(c)[None, None, :] * 40) % 256
        noisy = np.clip(smooth + np_rng.normal(0, 6, size=(h, w, c)), 0, 255)
        for version in (1, 2):
            seeds.append(lossless.encode(noisy.astype(np.uint8), version=version))
    # v2's cheap modes: constant tiles, few-lane mask tiles, raw (noise) tiles.
    mask = np.zeros((70, 90), np.uint8)
    mask[10:50, 20:80] = 3
    mask[30:40, 5:60] = 7
    seeds.append(lossless.encode(mask, tile=32))
    seeds.append(lossless.encode(np_rng.integers(0, 256, (20, 40, 3), dtype=np.uint8), tile=16))
    report = FuzzReport("lossless")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        data = mutate(rng.choice(seeds), rng)
        kind = rng.randrange(4)
        if kind == 0:
            _run_case(report, lambda data=data: lossless.decode(data))
        elif kind == 3:
            _run_case(report, lambda data=data: _agree_with_reference(data))
        elif kind == 1:
            def decode_region(data: bytes = data) -> object:
                header = lossless.read_header(data)  # a damaged header is rejected here
                y0, y1 = sorted(rng.sample(range(header.height + 1), 2)) if header.height > 1 else (0, 1)
                x0, x1 = sorted(rng.sample(range(header.width + 1), 2)) if header.width > 1 else (0, 1)
                return lossless.decode(data, roi=(y0, x0, y1, x1))

            _run_case(report, decode_region)
        else:
            _run_case(report, lambda data=data: lossless.decode_batch([rng.choice(seeds), data]))
    return report


def _agree_with_reference(data: bytes) -> object:
    """Decode with the numba kernels and the numpy reference of the stream's version: both
    must reject (CodecError) or both return the same pixels; a disagreement is a finding."""
    from prepkit import lossless
    from prepkit.errors import CodecError
    from prepkit.lossless import reference, reference_v2

    header = lossless.read_header(data)  # damaged headers are rejected here, by both
    oracle = reference_v2.decode if header.version == 2 else reference.decode
    outcomes = []
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
    from prepkit.layouts import LosslessLayout, RawLayout
    from prepkit.store.format import ShardGeometry
    from prepkit.store.writer import EncodedSample, StorePlan, StoreWriter

    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, size=(5 + i, 6 + 2 * i, 3), dtype=np.uint8) for i in range(6)]
    masks = [(image[:, :, :1] % 5).astype(np.uint8) for image in images]
    layouts = {"image": RawLayout(), "mask": LosslessLayout(tile=16)}
    fields = {}
    for name, layout in layouts.items():
        geometry = ShardGeometry.for_largest_shard(sum(layout.max_stored_size(*im.shape) for im in images))
        fields[name] = {"layout": layout.to_dict(), "capacity": geometry.capacity, "chunk": geometry.chunk}
    plan = StorePlan(num_items=6, samples_per_shard=2, fields=fields, class_names=["a", "b"],
                     provenance={"command": "fuzz"}, items_digest="fuzz")
    dest = folder / "seed-store"
    with StoreWriter(dest, plan, layouts, overwrite=True) as writer:
        for shard in range(plan.num_shards):
            writer.write_shard(shard, [
                EncodedSample(i, f"{i}.png", i % 2, {
                    "image": (layouts["image"].encode(images[i]), images[i].shape),
                    "mask": (layouts["mask"].encode(masks[i]), masks[i].shape),
                }) for i in plan.shard_items(shard)
            ])
        writer.finalize()
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
    replacement = rng.choice([None, -1, 0, 1, 2**63, 2**64 + 5, "x", [], {}, 3.5, True, [1, 2, 3]])
    if isinstance(parent, dict) and rng.random() < 0.2:
        del parent[key]  # type: ignore[arg-type]
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


def fuzz_store(seconds: float, seed: int = 0) -> FuzzReport:
    """Mutated store files (metadata, per-sample arrays, shard files) opened and read."""
    rng = random.Random(seed)
    report = FuzzReport("store")
    with tempfile.TemporaryDirectory() as folder:
        seed_store = _make_store(Path(folder))
        files = sorted(p for p in seed_store.rglob("*") if p.is_file() and p.name != ".prepkit.lock")
        work = Path(folder) / "case"
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if work.exists():
                shutil.rmtree(work)
            shutil.copytree(seed_store, work)
            for _ in range(rng.randint(1, 2)):
                target = work / rng.choice(files).relative_to(seed_store)
                data = target.read_bytes()
                target.write_bytes(_mutate_json(data, rng) if target.name == "zarr.json" else mutate(data, rng))
            _run_case(report, lambda: _read_everything(work))
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="time per target")
    parser.add_argument("--target", choices=["lossless", "store", "all"], default="all")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    targets = ["lossless", "store"] if args.target == "all" else [args.target]
    failed = False
    for target in targets:
        report = (fuzz_lossless if target == "lossless" else fuzz_store)(args.seconds, args.seed)
        print(report.line())
        for finding in report.findings[:5]:
            print(finding)
        failed |= bool(report.findings)
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
