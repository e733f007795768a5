"""GPU acceptance: correctness on the real device first, then the headline numbers.

``make gpu-check`` runs this on a CUDA machine (after the CUDA tests); it is the one
command a session with a GPU runs and records in docs/BENCHMARKS.md::

    python -m prepkit.bench.gpucheck --out OUT                    # every stage
    python -m prepkit.bench.gpucheck --stages env,identity        # a subset
    NUMBA_ENABLE_CUDASIM=1 python -m prepkit.bench.gpucheck --smoke  # logic check, no GPU

Stages: ``env`` (versions, device, one shared context with torch, which device a fresh
thread gets), ``identity`` (GPU decode == CPU decode == original on photographs and edge
shapes, every tile size, several block sizes, regions, one large batch into a reused
buffer), ``fuzz`` (mutated streams: CPU and GPU both reject or agree), ``reader`` (the
GPU Reader against the CPU Reader), ``sanitize`` (compute-sanitizer memcheck, racecheck
and synccheck on a small decode), ``bench`` (``prepkit.bench.gpu`` on both image sets:
PNG on every core, the public GPU API, the pipelined decoder from pinned memory on several
streams, the kernel alone, the measured H2D bound, the Reader, nvJPEG and HTJ2K; each as
x PNG(all cores) and % of the PCIe bound; the R/S protocol; tables in OUT/gpu-bench.txt).

Every stage records its own failure and the next one runs; ``OUT/gpucheck.json`` is
rewritten after each stage (a run cut off by a time limit still leaves its results) and
``OUT/gpucheck.md`` holds the summary table for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent.parent
SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


@dataclass
class Run:
    """What one gpucheck run has found so far; written to disk after every stage."""

    out: Path
    smoke: bool
    results: dict[str, Any] = field(default_factory=dict)
    summary: list[str] = field(default_factory=list)

    def note(self, line: str) -> None:
        """A summary line (also printed)."""
        self.summary.append(line)
        print(line, flush=True)

    def dump(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "gpucheck.json").write_text(json.dumps(self.results, indent=1, default=str))
        table = ["| check | result |", "| --- | --- |"] + [f"| {line.strip()} |  |" for line in self.summary]
        (self.out / "gpucheck.md").write_text("\n".join(table) + "\n")


def _sync() -> None:
    from numba import cuda

    cuda.synchronize()


def median_seconds(function: Callable[[], object], repeat: int, warmup: int = 1) -> float:
    """Median wall time of ``function`` over ``repeat`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# -- images ---------------------------------------------------------------------------
def image_sets(smoke: bool) -> dict[str, list[np.ndarray]]:
    """"big" (2048x1024 photo mosaics) and "small" (500x375 photos); tiny ones in smoke mode."""
    rng = np.random.default_rng(0)
    if smoke:  # the simulator runs every GPU thread as a Python thread: keep these tiny
        yy, xx = np.mgrid[0:17, 0:20]
        smooth = ((yy * 3 + xx * 5) % 256).astype(np.uint8)
        return {"big": [np.stack([smooth, smooth[::-1], smooth[:, ::-1]], 2)],
                "small": [rng.integers(0, 256, (9, 12, 3), dtype=np.uint8)] * 2}
    from prepkit.bench import photos

    return {"big": photos.cityscapes_like(), "small": photos.imagenet_like()}


def sample_photos() -> list[np.ndarray]:
    """The bundled sample photographs as RGB arrays."""
    from PIL import Image

    images = []
    for path in sorted((REPO / "samples" / "photos").glob("*/*")):
        with Image.open(path) as image:
            images.append(np.asarray(image.convert("RGB")).copy())
    return images


def edge_images(smoke: bool) -> list[np.ndarray]:
    """Partial tiles, 1/3/4 channels, 2-D input, noise (the worst case), constant, ramps."""
    rng = np.random.default_rng(1)
    if smoke:
        return [rng.integers(0, 256, (1, 1, 3), dtype=np.uint8), rng.integers(0, 256, (17, 9, 4), dtype=np.uint8),
                np.full((5, 7, 1), 9, np.uint8), rng.integers(0, 256, (6, 19), dtype=np.uint8)]
    shapes = [(1, 1, 3), (1, 100, 3), (63, 65, 3), (65, 63, 4), (17, 130, 1), (129, 127, 3), (64, 64, 4),
              (300, 257, 3), (1024, 2048, 4), (2048, 31, 1)]
    images: list[np.ndarray] = [rng.integers(0, 256, s, dtype=np.uint8) for s in shapes]
    images.append(np.full((70, 90, 3), 200, np.uint8))
    images.append(rng.integers(0, 256, (45, 77), dtype=np.uint8))
    ramp = (np.arange(96 * 96).reshape(96, 96) % 256).astype(np.uint8)
    images.append(np.stack([ramp, 255 - ramp, ramp.T], 2))
    return images


def content_images(smoke: bool) -> list[np.ndarray]:
    """Images whose tiles take the palette and runs modes (row repeats included): segmentation
    masks, a terminal screenshot and a photograph inside a black disc, as a fundus image."""
    from prepkit.bench import evalsets

    if smoke:  # two 16x16 runs tiles with repeated rows
        mask = np.zeros((16, 32), np.uint8)
        mask[4:12, 3:9] = 7
        mask[:, 20:] = (np.arange(16)[None, :12] // 4 % 3).astype(np.uint8) * 40
        return [mask]
    masks = [evalsets.polygon_mask(width, height, seed) for seed, (width, height) in
             enumerate([(2048, 1024), (640, 480), (513, 257), (1000, 700)])]
    terminal = evalsets.render_terminal(1280, 720)
    photo = sample_photos()[0]
    h, w = photo.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w]
    disc = (yy - h / 2) ** 2 + (xx - w / 2) ** 2 < (0.45 * min(h, w)) ** 2
    fundus = np.where(disc[..., None], photo, 0).astype(np.uint8)
    return masks + [masks[0][..., None], terminal, fundus, fundus[..., 1]]


# -- stages ---------------------------------------------------------------------------
def stage_env(run: Run) -> dict[str, Any]:
    """Versions and device; whether numba and torch share one context, also from a thread."""
    import numba
    from numba import cuda

    info: dict[str, Any] = {"python": sys.version.split()[0], "numba": numba.__version__}
    device = cuda.get_current_device()
    info["device"] = str(getattr(device, "name", device))
    if not SIMULATOR:
        info["compute_capability"] = getattr(device, "compute_capability", None)
        for attribute in ("MULTIPROCESSOR_COUNT", "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", "PCI_BUS_ID"):
            info[attribute.lower()] = getattr(device, attribute, None)
    try:
        import torch
    except ImportError:
        info["torch"] = "not installed"
        return info
    info["torch"] = torch.__version__
    if SIMULATOR or not torch.cuda.is_available():
        return info
    tensor = torch.arange(256, device="cuda", dtype=torch.int32)
    view = cuda.as_cuda_array(tensor)

    @cuda.jit
    def add_one(values: Any) -> None:
        i = cuda.grid(1)
        if i < values.size:
            values[i] += 1

    add_one[1, 256](view)
    cuda.synchronize()
    info["torch_sees_numba_writes"] = bool((tensor.cpu().numpy() == np.arange(1, 257)).all())
    seen: dict[str, Any] = {}

    def fresh_thread() -> None:  # what the Reader's prefetch thread gets
        try:
            seen["device"] = cuda.get_current_device().id
        except Exception as error:  # recorded, not raised: this probes the driver's behaviour
            seen["error"] = repr(error)

    thread = threading.Thread(target=fresh_thread)
    thread.start()
    thread.join()
    info["fresh_thread"] = seen
    run.note(f"env: {info['device']}, torch {torch.__version__}, numba writes seen by torch: {info['torch_sees_numba_writes']}")
    return info


def kernel_resources() -> dict[str, Any]:
    """Registers, shared and local memory of every compiled overload (after the kernels ran)."""
    if SIMULATOR:
        return {}
    from prepkit.augment import cuda as augment_cuda
    from prepkit.lossless import cuda as lossless_cuda
    from prepkit.lossless import cuda_v2

    kernels = (("v2.decode_kernel", cuda_v2.decode_kernel), ("v2.expand_tables_kernel", cuda_v2.expand_tables_kernel),
               ("v1.decode_kernel", lossless_cuda.decode_kernel), ("augment_kernel", augment_cuda.augment_kernel),
               ("mask_kernel", augment_cuda.mask_kernel))
    return overload_resources(kernels)


def overload_resources(kernels: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """``{name(argument types): {registers, shared, local}}`` over each dispatcher's compiled
    overloads. Read from the overload objects: the dispatchers' ``get_*(signature)`` want a
    Signature, and ``overloads`` is keyed by plain argument-type tuples (numba-cuda 0.30)."""
    found: dict[str, Any] = {}
    for name, kernel in kernels:
        for arguments, overload in list(kernel.overloads.items()):
            found[f"{name}{tuple(str(a) for a in arguments)}"[:160]] = {
                "registers": overload.regs_per_thread, "shared": overload.shared_mem_per_block,
                "local": overload.local_mem_per_thread,
            }
    return found


def stage_identity(run: Run) -> dict[str, Any]:
    """GPU == CPU == original, on every kind of image, tile size and block size."""
    from numba import cuda

    from prepkit import lossless
    from prepkit.lossless import cuda as lossless_cuda

    sets = image_sets(run.smoke)
    groups = {"big": sets["big"], "small": sets["small"], "edge": edge_images(run.smoke),
              "content": content_images(run.smoke)}
    if not run.smoke:
        groups["samples"] = sample_photos()
    bad: list[str] = []
    checked = 0
    versions = (1,) if run.smoke else (1, 2)  # the simulator suite covers v2 on its own
    version = versions[-1]  # of the checks below: v2 (the default) on a GPU, v1 under the simulator
    for name, images in groups.items():
        for tile in (16,) if run.smoke else (64,) if name == "big" else (16, 32, 64):
            for version in versions[-1:] if name == "content" else versions:  # v1 has no runs tiles
                streams = [lossless.encode(image, tile=tile, version=version) for image in images]
                on_gpu = lossless.decode_batch(streams, device="cuda")
                on_cpu = lossless.decode_batch(streams, device="cpu")
                for i, (gpu, cpu, image) in enumerate(zip(on_gpu, on_cpu, images, strict=True)):
                    pixels = gpu.copy_to_host()
                    checked += 1
                    if not (np.array_equal(pixels, cpu) and np.array_equal(pixels, image)):
                        bad.append(f"{name}[{i}] tile {tile} v{version} shape {image.shape}")
    saved = lossless_cuda.THREADS
    images = groups["edge"][:6]
    streams = [lossless.encode(image, tile=t, version=version) for t in (16, 64) for image in images]
    try:
        for threads in (16,) if SIMULATOR else (32, 64, 128, 256):
            lossless_cuda.THREADS = threads
            for gpu, image in zip(lossless.decode_batch(streams, device="cuda"), images + images, strict=True):
                checked += 1
                if not np.array_equal(gpu.copy_to_host(), image):
                    bad.append(f"THREADS={threads} shape {image.shape}")
    finally:
        lossless_cuda.THREADS = saved
    rng = np.random.default_rng(5)
    for name in ("big", "small"):
        streams = [lossless.encode(image, version=version) for image in groups[name]]
        rois = []
        for image in groups[name]:
            h, w = image.shape[:2]
            y0, x0 = int(rng.integers(0, h)), int(rng.integers(0, w))
            rois.append((y0, x0, int(rng.integers(y0 + 1, h + 1)), int(rng.integers(x0 + 1, w + 1))))
        gpu_flat, _, _ = lossless.decode_batch_packed(streams, "cuda", rois)
        cpu_flat, _, _ = lossless.decode_batch_packed(streams, "cpu", rois)
        checked += 1
        if not np.array_equal(gpu_flat.copy_to_host(), cpu_flat):
            bad.append(f"{name}: regions differ")
    repeats = 2 if run.smoke else 64
    big = groups["big"]
    streams = [lossless.encode(image, version=version) for image in big]
    many = [streams[i % len(streams)] for i in range(repeats)]
    total = sum(big[i % len(big)].size for i in range(repeats))
    buffer = cuda.device_array(total + 1000, np.uint8)
    flat, offsets, _ = lossless.decode_batch_packed(many, "cuda", out=buffer)
    host, host_offsets = flat.copy_to_host(), offsets.copy_to_host()
    for i in range(repeats):
        image = big[i % len(big)]
        checked += 1
        if not np.array_equal(host[host_offsets[i] : host_offsets[i] + image.size].reshape(image.shape), image):
            bad.append(f"large batch image {i}")
    run.note(f"{'PASS' if not bad else 'FAIL'} identity: {checked} GPU decodes vs CPU and original, {len(bad)} mismatches")
    try:
        kernels: dict[str, Any] = kernel_resources()
    except Exception as error:  # a numba-cuda API change must not hide the identity result
        kernels = {"error": f"{type(error).__name__}: {error}"}
    return {"checked": checked, "mismatches": bad[:50], "kernels": kernels}


def stage_fuzz(run: Run) -> dict[str, Any]:
    """Mutated payloads: the CPU and the GPU decoder must both reject or return equal pixels."""
    from prepkit import lossless
    from prepkit.errors import CodecError
    from prepkit.lossless import format as fmt

    rng = np.random.default_rng(21)
    bases = [rng.integers(0, 256, (24, 40, 3), dtype=np.uint8), (np.arange(64 * 80 * 3).reshape(64, 80, 3) % 251).astype(np.uint8)]
    disagree = []
    cases = 6 if run.smoke else 400
    for case in range(cases):
        base = bases[case % 2][:12, :12] if run.smoke else bases[case % 2]
        stream = lossless.encode(base, tile=int(rng.choice([16, 32, 64])))
        start = fmt.HEADER_SIZE + lossless.read_header(stream).table_size
        mutated = bytearray(stream)
        for _ in range(int(rng.integers(1, 4))):
            mutated[int(rng.integers(start, len(mutated)))] = int(rng.integers(256))
        outcomes: list[np.ndarray | None] = []
        for device in ("cpu", "cuda"):
            try:
                decoded = lossless.decode_batch([bytes(mutated)], device=device)[0]
                outcomes.append(decoded if device == "cpu" else decoded.copy_to_host())
            except CodecError:
                outcomes.append(None)
        cpu, gpu = outcomes
        if (cpu is None) != (gpu is None) or (cpu is not None and gpu is not None and not np.array_equal(cpu, gpu)):
            disagree.append(case)
    run.note(f"{'PASS' if not disagree else 'FAIL'} fuzz: {cases} mutated streams, CPU and GPU disagree on {len(disagree)}")
    return {"cases": cases, "disagree": disagree[:20]}


def stage_reader(run: Run) -> dict[str, Any]:
    """The GPU Reader (each output kind) against the CPU Reader, several micro-batches."""
    import prepkit
    from prepkit.augment import Normalize, RandomHorizontalFlip, RandomResizedCrop, ToDtype
    from prepkit.bench.gpu import MEAN, STD
    from prepkit.bench.reader import build

    ops = [RandomResizedCrop(6 if run.smoke else 224), RandomHorizontalFlip(), ToDtype("float32", scale=True),
           Normalize(MEAN, STD)]
    batch = 4 if run.smoke else 32
    worst: dict[str, float] = {}
    shares: dict[str, float] = {}  # of the values that differ at all
    with tempfile.TemporaryDirectory() as folder:
        store = build(image_sets(run.smoke)["small"], Path(folder), "lossless", 4 if run.smoke else 96, 32)
        on_cpu = list(prepkit.Reader(store, batch_size=batch, seed=3, transforms=ops))
        for output in ["numpy"] + ([] if SIMULATOR else ["torch", "dlpack"]):
            reader = prepkit.Reader(store, batch_size=batch, seed=3, transforms=ops, device="cuda", output=output,
                                    gpu_memory_budget=(1 << 10) if run.smoke else (8 << 20))
            largest, differing, values = 0.0, 0, 0
            for expected, got in zip(on_cpu, reader, strict=True):
                if output == "numpy":
                    pixels = got.images.copy_to_host()
                else:
                    import torch

                    tensor = got.images if output == "torch" else torch.from_dlpack(got.images)
                    pixels = tensor.cpu().numpy()
                difference = np.abs(pixels - expected.images)
                largest = max(largest, float(difference.max()))
                differing += int(np.count_nonzero(difference > 1e-4))
                values += difference.size
            worst[output] = largest
            shares[output] = differing / max(values, 1)
    # RandomResizedCrop rounds to uint8 as torchvision does; the GPU's fused multiply-adds can
    # move a value across a rounding boundary: at most one uint8 level after Normalize, and
    # rarely (a systematic error would move many values).
    level = 1 / (255 * min(STD))
    passed = all(value <= level * (1 + 1e-4) for value in worst.values()) and max(shares.values()) <= 0.01
    largest = max(worst.values())
    run.note(f"{'PASS' if passed else 'FAIL'} reader: GPU vs CPU batches, max abs diff {largest:.4g} "
             f"({largest / level:.3f} uint8 levels), {max(shares.values()):.2e} of values differ ({', '.join(worst)})")
    return {**worst, "uint8_level": level, "differing_share": shares}


def sanitize_child() -> None:
    """A small decode, a corrupt stream and an augment, for compute-sanitizer to watch."""
    from numba import cuda

    from prepkit import lossless
    from prepkit.augment import Pipeline, RandomHorizontalFlip, RandomResizedCrop, ToDtype

    rng = np.random.default_rng(2)
    images = [rng.integers(0, 256, (70, 90, 3), dtype=np.uint8), rng.integers(0, 256, (64, 64, 4), dtype=np.uint8)]
    streams = [lossless.encode(image, tile=tile) for image, tile in zip(images, (64, 32), strict=True)]
    for gpu, image in zip(lossless.decode_batch(streams, device="cuda"), images, strict=True):
        assert np.array_equal(gpu.copy_to_host(), image)
    corrupt = bytearray(streams[0])
    corrupt[-1] ^= 0xFF
    try:
        lossless.decode_batch([bytes(corrupt)], device="cuda")
    except Exception:  # a rejected stream is the expected outcome; the sanitizer watches the kernel
        pass
    flat, offsets, shapes = lossless.decode_batch_packed(streams[:1], "cuda")
    pipeline = Pipeline([RandomResizedCrop(32), RandomHorizontalFlip(), ToDtype("float32", scale=True)])
    host_shapes = shapes.copy_to_host()
    pipeline(flat, offsets, host_shapes, pipeline.params(host_shapes, np.array([0]), seed=1), device="cuda").copy_to_host()
    cuda.synchronize()


def profile_child(smoke: bool) -> None:
    """One v2 decode of the 2048x1024 mosaics (after a warm-up), for ``ncu`` to profile:
    ``ncu --set basic -k regex:decode_kernel -s 1 -c 1 python -m prepkit.bench.gpucheck --child profile``."""
    from prepkit import lossless

    images = image_sets(smoke)["big"]
    streams = [lossless.encode(image, version=2) for image in images]
    for _ in range(2):  # the first launch compiles; -s 1 skips it
        flat = lossless.decode_batch_packed(streams, "cuda")[0]
    _sync()
    expected = np.concatenate([image.reshape(-1) for image in images])
    assert np.array_equal(flat.copy_to_host()[: expected.size], expected)


def stage_sanitize(run: Run, timeout: int) -> dict[str, Any]:
    """compute-sanitizer's memcheck, racecheck and synccheck over ``sanitize_child``."""
    if SIMULATOR:
        return {"skipped": "simulator"}
    results: dict[str, Any] = {}
    run.out.mkdir(parents=True, exist_ok=True)  # the logs are written before the first dump
    for tool in ("memcheck", "racecheck", "synccheck"):
        command = ["compute-sanitizer", "--tool", tool, "--error-exitcode", "9", sys.executable, "-m",
                   "prepkit.bench.gpucheck", "--child", "sanitize"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            return {"skipped": "compute-sanitizer not found"}
        except subprocess.TimeoutExpired:
            results[tool] = {"rc": "timeout"}
            continue
        (run.out / f"sanitizer-{tool}.log").write_text((done.stdout + done.stderr)[-200_000:])
        lines = [line for line in (done.stdout + done.stderr).splitlines() if "SUMMARY" in line][:4]
        results[tool] = {"rc": done.returncode, "summary": lines}
    passed = all(entry.get("rc") == 0 for entry in results.values())
    run.note(f"{'PASS' if passed else 'CHECK'} sanitizer: " + ", ".join(f"{k} rc={v.get('rc')}" for k, v in results.items()))
    return results


# -- benchmarks -----------------------------------------------------------------------
def stage_bench(run: Run) -> dict[str, Any]:
    """prepkit.bench.gpu on both image sets (its reduced mode with --smoke); the tables go to
    OUT/gpu-bench.txt and the summary."""
    from prepkit.bench import gpu

    config = gpu.GpuBenchConfig.quick() if run.smoke else gpu.GpuBenchConfig()
    results: dict[str, Any] = {}
    tables = []
    for name, images in gpu.benchmark_images(run.smoke).items():
        result = gpu.run_gpu_benchmark(images, config, progress=lambda text: print(f"  {text}", flush=True))
        results[name] = result.record()
        tables.append(f"== {name}\n{gpu.format_table(result)}")
        for row in result.rows:
            if row.skipped:
                run.note(f"{name} {row.name}: skipped ({row.skipped})")
            elif row.images_per_s is not None:
                shares = "".join(f", {text}" for text in (
                    None if row.x_png is None else f"{row.x_png:.1f}x PNG({config.png_workers or 'all'} cores)",
                    None if row.pct_pcie is None else f"{row.pct_pcie:.0f}% of PCIe") if text)
                run.note(f"{name} {row.name}: {row.images_per_s:,.0f} img/s{shares}" + (f" [{row.check}]" if row.check else ""))
        if result.rs.get("ratio") is not None:
            run.note(f"{name} R/S: {result.rs['ratio']:.2f} ({result.rs['model']})")
        run.out.mkdir(parents=True, exist_ok=True)
        (run.out / "gpu-bench.txt").write_text("\n\n".join(tables) + "\n")
        run.results["bench"] = results  # a run cut off later still leaves this set
        run.dump()
    return results


STAGES = ("env", "identity", "fuzz", "reader", "sanitize", "bench")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT", "out/gpucheck"), help="folder for gpucheck.json/.md and logs")
    parser.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {', '.join(STAGES)}")
    parser.add_argument("--smoke", action="store_true", help="tiny inputs (a logic check under the simulator)")
    parser.add_argument("--sanitize-timeout", type=int, default=100)
    parser.add_argument("--child", choices=["sanitize", "profile"], default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "sanitize":
        sanitize_child()
        return 0
    if args.child == "profile":
        profile_child(args.smoke)
        return 0
    stages = args.stages.split(",")
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        parser.error(f"Expected stages among {', '.join(STAGES)}. Got {', '.join(unknown)}.")
    if SIMULATOR:
        from prepkit.lossless import cuda as lossless_cuda

        lossless_cuda.THREADS = 16  # the simulator runs every GPU thread as a Python thread
    run = Run(out=Path(args.out), smoke=args.smoke)
    functions: dict[str, Callable[[], dict[str, Any]]] = {
        "env": lambda: stage_env(run), "identity": lambda: stage_identity(run), "fuzz": lambda: stage_fuzz(run),
        "reader": lambda: stage_reader(run), "sanitize": lambda: stage_sanitize(run, args.sanitize_timeout),
        "bench": lambda: stage_bench(run),
    }
    failed = 0
    for name in stages:
        print(f"\n=== {name}", flush=True)
        started = time.perf_counter()
        try:
            run.results[name] = {"ok": True, **functions[name]()}
        except Exception as error:  # record and go on: one broken stage must not hide the others
            failed += 1
            run.results[name] = {"ok": False, "error": f"{type(error).__name__}: {error}", "trace": traceback.format_exc()[-3000:]}
            run.note(f"FAIL {name}: {type(error).__name__}: {error}")
        run.results[name]["seconds"] = round(time.perf_counter() - started, 1)
        run.dump()
    print("\n===== summary", flush=True)
    for line in run.summary:
        print(line)
    return 1 if failed or any(line.startswith("FAIL") for line in run.summary) else 0


if __name__ == "__main__":
    sys.exit(main())
