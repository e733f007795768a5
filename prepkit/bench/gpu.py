"""The GPU decode benchmark: what the project's goal measures, in one run.

``prepkit bench-decode --device cuda`` and ``make gpu-check``'s bench stage both run
``run_gpu_benchmark``; ``python -m prepkit.bench.gpu [--quick] [--json F]`` runs it alone on
the benchmark photographs (``prepkit.bench.photos``).

Rows (docs/BENCHMARKS.md, "GPU benchmark protocol"):

* ``png-cpu``: PNG decoded on every core (a spawn process pool; libspng when pyspng is
  installed, else Pillow), measured in the same run: the baseline of the "x PNG" column.
* ``public-api``: ``prepkit.lossless.decode_batch_packed(..., device="cuda")`` chunk by chunk
  from pageable bytes, as a user calls it (wall time, including its host work).
* ``pipelined``: the compressed batch already in pinned memory (plans built beforehand),
  chunks spread over ``streams`` streams so that the copy of one chunk overlaps the kernel of
  another, no host synchronisation in the loop; timed with CUDA events.
* ``kernel-only``: the same launches with every chunk already resident on the device.
* ``h2d-bound``: the same pinned buffers copied on the same streams with no kernel: the
  measured PCIe bound.
* ``reader``: ``prepkit.Reader(device="cuda")`` end to end over a store of the same images.
* ``nvjpeg`` / ``nvjpeg-hw``: JPEG (Pillow, quality ``quality``) decoded in batches by
  nvImageCodec (default backends; the hardware decoder only), and ``htj2k-nvimgcodec``:
  HTJ2K lossless decoded by nvImageCodec (nvJPEG2000). Skipped rows say why.

Columns: images/s; input GB/s (the bytes a row moves or decodes per second); x PNG =
images/s over png-cpu's images/s; % PCIe = the row's input bytes per second over the
measured H2D bound's bytes per second (for a row whose bytes could all cross PCIe, the
share of the link it would use). Every derived column is computed from the measured rows.

The R/S protocol: the same training step (ResNet-50-sized; ``prepkit.bench.trainstep``)
fed by the Reader (RandomResizedCrop + flip + normalize on the GPU) and by a synthetic batch
already on the GPU; R/S = reader steps/s over synthetic steps/s.

Under numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) everything runs in a reduced
mode with tiny images: it checks the logic; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prepkit.bench.sampler import StackSampler, format_report
from prepkit.parallel import available_cores

READER_THREADS = ("MainThread", "prepkit-")  # the training loop and prepkit's own threads

SCHEMA_VERSION = 2  # 2: rows[].profile and rs.profile (bench.sampler's stack samples)
ROW_NAMES = ("png-cpu", "public-api", "pipelined", "kernel-only", "h2d-bound", "reader", "nvjpeg", "nvjpeg-hw",
             "htj2k-nvimgcodec")
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def simulator() -> bool:
    """Whether numba's CUDA simulator is on (then timings mean nothing)."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def unavailable() -> str | None:
    """Why the benchmark cannot run here (None if it can: a GPU, or the simulator)."""
    try:
        from numba import cuda

        if simulator() or cuda.is_available():
            return None
        return "no CUDA GPU available (numba.cuda.is_available() is False)"
    except Exception as error:  # a broken driver or numba-cuda: reported as the reason
        return f"numba CUDA unavailable: {error}"


@dataclass
class GpuBenchConfig:
    """What one run measures. ``quick()`` is the reduced mode."""

    pass_bytes: int = 1 << 30  # compressed bytes per pass of the lossless rows
    chunk_bytes: int = 64 << 20  # compressed bytes per chunk (one kernel launch)
    streams: int = 3
    repeat: int = 5  # timed passes; a figure is the median
    warmup: int = 1
    png_workers: int = 0  # 0: every core
    quality: int = 90  # JPEG quality of the nvJPEG rows
    version: int | None = None  # lossless bitstream version (None: prepkit's default)
    reader: bool = True
    reader_batch: int = 64
    rs: bool = True
    rs_model: str = "resnet50"
    rs_batch: int = 256
    rs_crop: int = 224
    rs_steps: int = 30
    rs_warmup: int = 5

    @classmethod
    def quick(cls) -> GpuBenchConfig:
        """A few MB per pass on a GPU; a few KB and a tiny model under the simulator."""
        if simulator():
            return cls(pass_bytes=1200, chunk_bytes=500, streams=2, repeat=1, warmup=0, png_workers=2,
                       reader_batch=2, rs_model="tiny", rs_batch=2, rs_crop=8, rs_steps=2, rs_warmup=1)
        return cls(pass_bytes=8 << 20, chunk_bytes=2 << 20, repeat=3, rs_batch=32, rs_steps=5, rs_warmup=2)


@dataclass
class GpuRow:
    """One measurement (or a skipped one, with the reason)."""

    name: str
    description: str
    device: str
    timing: str = ""  # "cuda-events", "wall" or "wall (simulator)"
    images: int = 0
    bytes_per_image: float | None = None  # input bytes per image (moved or decoded)
    seconds: float | None = None  # median pass
    images_per_s: float | None = None
    input_gb_per_s: float | None = None
    x_png: float | None = None
    pct_pcie: float | None = None
    check: str | None = None  # what was verified about the output
    skipped: str | None = None
    profile: dict[str, Any] | None = None  # bench.sampler's report of one extra pass (the reader row)


@dataclass
class GpuBenchResult:
    rows: list[GpuRow]
    config: dict[str, Any]
    machine: dict[str, Any]
    h2d_gb_per_s: float | None = None
    reader_vs_pipelined: float | None = None
    rs: dict[str, Any] = field(default_factory=dict)
    simulator: bool = False

    def record(self) -> dict[str, Any]:
        """The JSON document (schema ``SCHEMA_VERSION``)."""
        return {"schema": "prepkit.gpu-bench", "schema_version": SCHEMA_VERSION, "simulator": self.simulator,
                "config": self.config, "machine": self.machine, "h2d_gb_per_s": self.h2d_gb_per_s,
                "reader_vs_pipelined": self.reader_vs_pipelined, "rs": self.rs,
                "rows": [asdict(row) for row in self.rows]}


def derive(rows: Sequence[GpuRow]) -> float | None:
    """Fill images/s, GB/s, x PNG and % PCIe from the measured seconds; the H2D GB/s."""
    for row in rows:
        if row.seconds and row.images:
            row.images_per_s = row.images / row.seconds
            if row.bytes_per_image is not None:
                row.input_gb_per_s = row.images_per_s * row.bytes_per_image / 1e9
    png = next((r for r in rows if r.name == "png-cpu" and r.images_per_s), None)
    h2d = next((r for r in rows if r.name == "h2d-bound" and r.input_gb_per_s), None)
    for row in rows:
        if row.images_per_s and png is not None and png.images_per_s:
            row.x_png = row.images_per_s / png.images_per_s
        if row.input_gb_per_s is not None and h2d is not None and h2d.input_gb_per_s:
            row.pct_pcie = 100.0 * row.input_gb_per_s / h2d.input_gb_per_s
    return h2d.input_gb_per_s if h2d is not None else None


def format_table(result: GpuBenchResult) -> str:
    """The rows as a fixed-width table, skipped rows with their reason, then the ratios."""
    header = f"{'row':<18}{'device':<7}{'timing':<18}{'images':>8}{'images/s':>12}{'GB/s in':>9}{'x PNG':>9}{'% PCIe':>8}"
    lines = [header, "-" * len(header)]

    def number(value: float | None, text: str) -> str:
        return "-" if value is None else format(value, text)

    for row in result.rows:
        if row.skipped:
            lines.append(f"{row.name:<18}{row.device:<7}skipped: {row.skipped}")
            continue
        lines.append(f"{row.name:<18}{row.device:<7}{row.timing:<18}{row.images:>8}"
                     f"{number(row.images_per_s, ',.1f'):>12}{number(row.input_gb_per_s, '.2f'):>9}"
                     f"{number(row.x_png, '.2f') + 'x':>9}{number(row.pct_pcie, '.0f') + '%':>8}")
    if result.reader_vs_pipelined is not None:
        lines.append(f"reader / pipelined: {result.reader_vs_pipelined:.2f}")
    if result.rs.get("ratio") is not None:
        lines.append(f"R/S ({result.rs['model']}, batch {result.rs['batch']}): {result.rs['ratio']:.2f} "
                     f"(reader {result.rs['reader_steps_per_s']:.2f} steps/s, synthetic "
                     f"{result.rs['synthetic_steps_per_s']:.2f} steps/s)")
    elif result.rs.get("skipped"):
        lines.append(f"R/S skipped: {result.rs['skipped']}")
    for row in result.rows:
        if row.profile:
            lines.append(format_report(row.profile, header=f"of one more {row.name} pass:"))
    if result.rs.get("profile"):
        lines.append(format_report(result.rs["profile"], header="of the R/S reader steps:"))
    if result.simulator:
        lines.append("(numba CUDA simulator: the figures check the logic only)")
    return "\n".join(lines)


# -- PNG on every core ----------------------------------------------------------------
@dataclass
class _PngJob:
    """Decode PNG number ``index % len(pngs)`` in a worker process (sent once per worker)."""

    pngs: list[bytes]
    library: str

    def __call__(self, index: int) -> int:
        data = self.pngs[index % len(self.pngs)]
        if self.library == "libspng":
            import pyspng

            return int(pyspng.load(data).size)
        from PIL import Image

        with Image.open(io.BytesIO(data)) as image:
            return int(np.asarray(image).size)


def _png_bytes(image: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image[:, :, 0] if image.ndim == 3 and image.shape[2] == 1 else image).save(buffer, format="PNG")
    return buffer.getvalue()


def png_row(images: list[np.ndarray], count: int, workers: int, config: GpuBenchConfig) -> GpuRow:
    """PNG decoded on ``workers`` processes, ``count`` images per pass (the set repeated)."""
    from prepkit.parallel import call_job, spawn_pool, stop_pool

    try:
        import pyspng  # noqa: F401

        library = "libspng"
    except ImportError:
        library = "pillow"
    pngs = [_png_bytes(image) for image in images]
    row = GpuRow("png-cpu", f"PNG ({library}) on {workers} processes", "cpu", "wall", images=count,
                 bytes_per_image=sum(len(p) for p in pngs) / len(pngs))
    pool = spawn_pool(workers, _PngJob(pngs, library))
    try:
        # A few images per task: one pipe round trip per image would be timed too.
        per_task = max(1, count // (workers * 4))

        def one_pass() -> None:
            list(pool.map(call_job, range(count), chunksize=per_task))

        list(pool.map(call_job, range(workers)))  # start every worker before timing
        row.seconds = _median(one_pass, config.repeat, config.warmup)
        row.check = f"{library} decodes, {count} per pass"
    finally:
        stop_pool(pool)
    return row


def _median(one_pass: Callable[[], object], repeat: int, warmup: int) -> float:
    for _ in range(warmup):
        one_pass()
    times = []
    for _ in range(max(1, repeat)):
        started = time.perf_counter()
        one_pass()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


# -- the lossless decoder on the GPU ---------------------------------------------------
@dataclass
class Chunk:
    """One kernel launch's input, staged in pinned memory (plan built beforehand)."""

    streams: list[bytes]  # the compressed images (for the public API row)
    expected: np.ndarray  # the decoded bytes it must give (raw images back to back)
    version: int
    src: Any  # pinned uint8: the compressed bytes
    work: Any  # pinned int64 (items, N_COLS)
    tables: Any  # pinned uint32: v2 decode tables (one word for v1)
    empty: Any  # pinned int32: v2 empty-table flags
    shared: int  # dynamic shared memory of the v2 launch
    total: int  # decoded bytes
    errors: Any = None  # device int32 (items,): the kernel's error codes for this chunk

    @property
    def transfer_bytes(self) -> int:
        return int(self.src.nbytes + self.work.nbytes + self.tables.nbytes + self.empty.nbytes)


def build_chunks(images: list[np.ndarray], config: GpuBenchConfig) -> list[Chunk]:
    """The images repeated until ``pass_bytes`` of compressed input, cut into chunks of
    about ``chunk_bytes``, each validated and staged in its own pinned buffers."""
    from numba import cuda

    from prepkit import lossless
    from prepkit.lossless import cuda_v2, hostplan

    version = config.version or lossless.DEFAULT_VERSION
    encoded = [lossless.encode(image, version=version) for image in images]
    chunks: list[Chunk] = []
    position = 0
    in_pass = 0
    while in_pass < config.pass_bytes:
        members: list[int] = []
        size = 0
        while size < config.chunk_bytes and in_pass + size < config.pass_bytes:
            members.append(position % len(images))
            size += len(encoded[position % len(images)])
            position += 1
        streams = [encoded[i] for i in members]
        pinned = cuda.pinned_array(max(size, 1), np.uint8)
        plan = hostplan.plan_buffers(streams, staging=pinned)
        work = cuda.pinned_array(plan.work.shape, np.int64)
        work[:] = plan.work
        if version == 2:
            table = cuda_v2.decode_table(plan)
            tables = cuda.pinned_array(table.shape, np.uint32)
            tables[:] = table
            empty = cuda.pinned_array(max(plan.empty.size, 1), np.int32)
            empty[: plan.empty.size] = plan.empty
            shared = cuda_v2.shared_bytes(plan.work)
        else:
            tables, empty, shared = cuda.pinned_array(1, np.uint32), cuda.pinned_array(1, np.int32), 0
        expected = np.concatenate([images[i].reshape(-1) for i in members])
        chunk = Chunk(streams, expected, version, pinned[: plan.src.size], work, tables, empty, shared, plan.total)
        chunk.errors = cuda.device_array(max(work.shape[0], 1), np.int32)
        chunks.append(chunk)
        in_pass += size
    return chunks


def launch(chunk: Chunk, stream: Any, src: Any, work: Any, tables: Any, empty: Any, out: Any) -> None:
    """The decode kernel of the chunk's bitstream version on ``stream`` (device arguments)."""
    from prepkit.lossless import cuda as cuda_v1
    from prepkit.lossless import cuda_v2

    items = chunk.work.shape[0]
    if chunk.version == 2:
        cuda_v2.decode_kernel[items, cuda_v2.WARP, stream, chunk.shared](src, work, tables, empty, out, chunk.errors)
    else:
        cuda_v1.decode_kernel[items, cuda_v1.THREADS, stream](src, work, out, chunk.errors)


class Slots:
    """Per stream: device buffers large enough for any chunk, allocated once."""

    def __init__(self, chunks: list[Chunk], count: int) -> None:
        from numba import cuda

        from prepkit.cudart import make_stream

        def largest(get: Callable[[Chunk], Any]) -> int:
            return max(int(get(c).shape[0]) for c in chunks)

        # Non-blocking streams (the Reader's): no implicit sync with the legacy default stream.
        self.streams = [make_stream() for _ in range(count)]
        self.buffers = [{
            "src": cuda.device_array(largest(lambda c: c.src), np.uint8),
            "work": cuda.device_array((largest(lambda c: c.work), chunks[0].work.shape[1]), np.int64),
            "tables": cuda.device_array(largest(lambda c: c.tables), np.uint32),
            "empty": cuda.device_array(largest(lambda c: c.empty), np.int32),
            "out": cuda.device_array(max(c.total for c in chunks), np.uint8),
        } for _ in range(count)]


def _copy_in(chunk: Chunk, buffers: dict[str, Any], stream: Any) -> tuple[Any, Any, Any, Any]:
    """Asynchronous copies of the chunk's pinned buffers into a slot's device buffers."""
    views = []
    for name in ("src", "work", "tables", "empty"):
        host = getattr(chunk, name)
        view = buffers[name][: host.shape[0]]
        view.copy_to_device(host, stream=stream)
        views.append(view)
    return views[0], views[1], views[2], views[3]


def timed(streams: list[Any], body: Callable[[], None]) -> float:
    """Seconds ``body`` keeps ``streams`` busy: CUDA events on a real GPU (a start event every
    stream waits on, an end event per stream the first one waits on); wall time under the
    simulator, whose events record no time."""
    from numba import cuda

    if simulator():
        started = time.perf_counter()
        body()
        cuda.synchronize()
        return time.perf_counter() - started
    first = streams[0]
    start, end = cuda.event(timing=True), cuda.event(timing=True)
    start.record(first)
    for stream in streams[1:]:
        start.wait(stream)
    body()
    for stream in streams[1:]:
        done = cuda.event(timing=False)
        done.record(stream)
        done.wait(first)
    end.record(first)
    end.synchronize()
    return float(start.elapsed_time(end)) / 1000.0


def _median_timed(streams: list[Any], body: Callable[[], None], config: GpuBenchConfig) -> float:
    for _ in range(config.warmup):
        timed(streams, body)
    return statistics.median(timed(streams, body) for _ in range(max(1, config.repeat)))


def lossless_rows(chunks: list[Chunk], config: GpuBenchConfig) -> list[GpuRow]:
    """public-api, pipelined, kernel-only and h2d-bound over the same chunks."""
    from numba import cuda

    from prepkit import lossless

    images = sum(len(c.streams) for c in chunks)
    transfer = sum(c.transfer_bytes for c in chunks) / images
    compressed = sum(c.src.nbytes for c in chunks) / images
    events = "wall (simulator)" if simulator() else "cuda-events"
    slots = Slots(chunks, config.streams)
    rows = []

    def pipelined() -> None:
        for k, chunk in enumerate(chunks):
            stream, buffers = slots.streams[k % config.streams], slots.buffers[k % config.streams]
            src, work, tables, empty = _copy_in(chunk, buffers, stream)
            launch(chunk, stream, src, work, tables, empty, buffers["out"])

    row = GpuRow("pipelined", f"pinned chunks on {config.streams} streams, H2D overlapping kernels", "cuda", events,
                 images, transfer)
    row.seconds = _median_timed(slots.streams, pipelined, config)
    row.check = _check_output(chunks, slots)
    rows.append(row)

    def h2d() -> None:
        for k, chunk in enumerate(chunks):
            _copy_in(chunk, slots.buffers[k % config.streams], slots.streams[k % config.streams])

    row = GpuRow("h2d-bound", f"the same pinned buffers copied on the same {config.streams} streams", "cuda", events,
                 images, transfer)
    row.seconds = _median_timed(slots.streams, h2d, config)
    rows.append(row)

    resident: list[tuple[Any, Any, Any, Any]] = [
        (cuda.to_device(c.src), cuda.to_device(c.work), cuda.to_device(c.tables), cuda.to_device(c.empty)) for c in chunks]

    def kernel_only() -> None:
        for k, chunk in enumerate(chunks):
            launch(chunk, slots.streams[k % config.streams], *resident[k], slots.buffers[k % config.streams]["out"])

    row = GpuRow("kernel-only", "every chunk resident on the device", "cuda", events, images, compressed)
    row.seconds = _median_timed(slots.streams, kernel_only, config)
    row.check = _check_output(chunks, slots)
    rows.append(row)
    resident.clear()  # frees the device copies before the next rows

    api_out = cuda.device_array(max(c.total for c in chunks), np.uint8)

    def public_api() -> None:
        for chunk in chunks:
            lossless.decode_batch_packed(chunk.streams, device="cuda", out=api_out)
        cuda.synchronize()

    row = GpuRow("public-api", "prepkit.lossless.decode_batch_packed(device='cuda') per chunk", "cuda", "wall",
                 images, compressed)
    row.seconds = _median(public_api, config.repeat, config.warmup)
    last = chunks[-1]
    row.check = "pixels equal" if np.array_equal(api_out[: last.total].copy_to_host(), last.expected) else "PIXELS DIFFER"
    rows.insert(0, row)
    return rows


def _check_output(chunks: list[Chunk], slots: Slots) -> str:
    """Error codes of every chunk are zero and each slot holds its last chunk's pixels."""
    from numba import cuda

    cuda.synchronize()
    bad = [k for k, c in enumerate(chunks) if c.errors.copy_to_host()[: c.work.shape[0]].any()]
    if bad:
        return f"KERNEL ERRORS in chunks {bad[:5]}"
    count = len(slots.streams)
    for slot in range(min(count, len(chunks))):
        k = slot + ((len(chunks) - 1 - slot) // count) * count  # the last chunk this slot decoded
        if not np.array_equal(slots.buffers[slot]["out"][: chunks[k].total].copy_to_host(), chunks[k].expected):
            return f"PIXELS DIFFER (chunk {k})"
    return "pixels equal, no error codes"


# -- nvImageCodec rows ----------------------------------------------------------------
def _nvimgcodec_rows(images: list[np.ndarray], count: int, config: GpuBenchConfig) -> list[GpuRow]:
    """nvJPEG (default backends and hardware only) and HTJ2K lossless through nvImageCodec."""
    from prepkit.decode import jpeg as jpeg_module

    rows = [GpuRow("nvjpeg", f"JPEG q{config.quality}, nvImageCodec default backends", "cuda"),
            GpuRow("nvjpeg-hw", f"JPEG q{config.quality}, nvImageCodec hardware decoder only", "cuda"),
            GpuRow("htj2k-nvimgcodec", "HTJ2K lossless, nvImageCodec (nvJPEG2000)", "cuda")]
    if simulator():
        for row in rows:
            row.skipped = "numba CUDA simulator: nvImageCodec needs a real GPU"
        return rows
    nvimgcodec = jpeg_module.nvimgcodec_module()
    if nvimgcodec is None:
        for row in rows:
            row.skipped = str(jpeg_module.nvimgcodec_error())
        return rows
    jpegs = [_pillow_bytes(image, "JPEG", quality=config.quality) for image in images]
    for row, backend in ((rows[0], None), (rows[1], "HW_GPU_ONLY")):
        try:
            decoder = nvimgcodec.Decoder() if backend is None else nvimgcodec.Decoder(
                backends=[nvimgcodec.Backend(getattr(nvimgcodec.BackendKind, backend))])
            _decoder_row(row, decoder, jpegs, images, count, config, exact=False)
        except Exception as error:  # a backend this GPU lacks: the row says so
            row.skipped = f"failed: {type(error).__name__}: {error}"
    try:
        _decoder_row(rows[2], nvimgcodec.Decoder(), [_htj2k_bytes(image) for image in images], images, count, config,
                     exact=True)
    except Exception as error:  # no HTJ2K encoder or decoder here: the row says so
        rows[2].skipped = f"failed: {type(error).__name__}: {error}"
    return rows


def _pillow_bytes(image: np.ndarray, fmt: str, **options: Any) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format=fmt, **options)
    return buffer.getvalue()


def _htj2k_bytes(image: np.ndarray) -> bytes:
    """HTJ2K lossless (reversible) bytes: imagecodecs when installed, else nvImageCodec's encoder."""
    try:
        import imagecodecs

        return bytes(imagecodecs.htj2k_encode(image, level=0, reversible=True))
    except ImportError:
        from prepkit.decode import jpeg as jpeg_module

        nv = jpeg_module.nvimgcodec_module()
        params = nv.EncodeParams(quality_type=nv.QualityType.LOSSLESS,
                                 jpeg2k_encode_params=nv.Jpeg2kEncodeParams(ht=True))
        return bytes(nv.Encoder().encode(image, "jpeg2k", params=params))


def _decoder_row(row: GpuRow, decoder: Any, encoded: list[bytes], images: list[np.ndarray], count: int,
                 config: GpuBenchConfig, exact: bool) -> None:
    """Time ``decoder.decode`` over batches of ``count`` images (the set repeated)."""
    from numba import cuda

    arrays = [np.frombuffer(data, np.uint8) for data in encoded]
    batch = 64
    order = [arrays[i % len(arrays)] for i in range(count)]
    first = decoder.decode(arrays[:1])[0]
    if first is None:
        raise RuntimeError("nvImageCodec returned no image")
    pixels = np.asarray(first.cpu())
    if exact:
        row.check = "pixels equal" if np.array_equal(pixels.reshape(images[0].shape), images[0]) else "PIXELS DIFFER"
    else:
        row.check = f"shape {pixels.shape}"

    def one_pass() -> None:
        for start in range(0, count, batch):
            decoder.decode(order[start : start + batch])
        cuda.synchronize()

    row.timing, row.images = "wall", count
    row.bytes_per_image = sum(len(data) for data in encoded) / len(encoded)
    row.seconds = _median(one_pass, config.repeat, config.warmup)


# -- the Reader and the R/S protocol -----------------------------------------------------
def _torch_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() and not simulator() else "cpu"
    except ImportError:
        return "cpu"


def _to_torch(images: Any, device: str) -> Any:
    """A Reader batch's images as a torch tensor on ``device`` (a copy only under the simulator)."""
    import torch

    if isinstance(images, torch.Tensor):
        return images
    return torch.from_numpy(np.ascontiguousarray(images.copy_to_host())).to(device)


def reader_row(store: Path, count: int, bytes_per_image: float, config: GpuBenchConfig) -> GpuRow:
    """prepkit.Reader(device="cuda") over the store, every image decoded, no transforms."""
    from numba import cuda

    import prepkit

    output = "torch" if _torch_device() == "cuda" else "numpy"
    reader = prepkit.Reader(store, batch_size=config.reader_batch, shuffle=False, device="cuda", output=output)
    row = GpuRow("reader", f"prepkit.Reader(device='cuda', output={output!r}), batch {config.reader_batch}", "cuda",
                 "wall", count, bytes_per_image)

    def one_pass() -> None:
        for _ in reader:
            pass
        cuda.synchronize()

    row.seconds = _median(one_pass, config.repeat, config.warmup)
    row.check = f"{count} images per epoch"
    with StackSampler(prefixes=READER_THREADS) as sampler:  # after the timed passes: where its threads wait
        one_pass()
    row.profile = sampler.top()
    return row


def rs_protocol(store: Path, config: GpuBenchConfig) -> dict[str, Any]:
    """The same training step fed by the Reader and by a resident synthetic batch: R/S."""
    try:
        import torch
    except ImportError:
        return {"skipped": "torch not installed"}
    import prepkit
    from prepkit.augment import Normalize, RandomHorizontalFlip, RandomResizedCrop, ToDtype
    from prepkit.bench import trainstep

    device = _torch_device()
    torch.manual_seed(0)
    model, description = trainstep.make_model(config.rs_model, 1000)
    step = trainstep.make_step(model, device)
    batch, crop = config.rs_batch, config.rs_crop
    labels = torch.randint(0, 1000, (batch,), device=device)
    synthetic = torch.randn(batch, 3, crop, crop, device=device)
    ops = [RandomResizedCrop(crop), RandomHorizontalFlip(), ToDtype("float32", scale=True), Normalize(MEAN, STD)]
    reader = prepkit.Reader(store, batch_size=batch, seed=0, transforms=ops, device="cuda", drop_last=True,
                            output="torch" if device == "cuda" else "numpy")
    if len(reader) == 0:
        return {"skipped": f"the store holds fewer than {batch} images (one batch)"}

    def reader_batches() -> Any:
        while True:  # epochs back to back, as a training loop does
            yield from reader

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def steps_per_s(feed: Callable[[], Any]) -> float:
        for _ in range(config.rs_warmup):
            step(feed(), labels)
        sync()
        started = time.perf_counter()
        for _ in range(config.rs_steps):
            step(feed(), labels)
        sync()
        return config.rs_steps / (time.perf_counter() - started)

    synthetic_rate = steps_per_s(lambda: synthetic)
    batches = reader_batches()
    reader_rate = steps_per_s(lambda: _to_torch(next(batches).images, device))
    with StackSampler(prefixes=READER_THREADS) as sampler:  # more steps, untimed: sampling takes the GIL
        for _ in range(config.rs_steps):
            step(_to_torch(next(batches).images, device), labels)
        sync()
    batches.close()
    return {"model": description, "parameters": trainstep.parameter_count(model), "device": device,
            "batch": batch, "crop": crop, "steps": config.rs_steps, "warmup": config.rs_warmup,
            "transforms": "RandomResizedCrop + RandomHorizontalFlip + ToDtype(float32) + Normalize",
            "reader_steps_per_s": reader_rate, "synthetic_steps_per_s": synthetic_rate,
            "ratio": reader_rate / synthetic_rate, "profile": sampler.top()}


# -- the whole run ----------------------------------------------------------------------
def run_gpu_benchmark(images: list[np.ndarray], config: GpuBenchConfig,
                      progress: Callable[[str], None] = lambda text: None) -> GpuBenchResult:
    """Every row on ``images`` (H x W x C uint8, the set repeated to fill a pass).

    Without a GPU (and without the simulator) every row is skipped with the reason.
    """
    from prepkit.bench.machine import describe_machine

    images = [image if image.ndim == 3 else image[:, :, None] for image in images]
    reason = unavailable()
    settings = asdict(config)
    if reason is not None:
        skipped = [GpuRow(name, "", "cuda" if name != "png-cpu" else "cpu", skipped=reason) for name in ROW_NAMES]
        return GpuBenchResult(skipped, settings, describe_machine(with_gpu=False), rs={"skipped": reason})
    on_simulator = simulator()
    rows: list[GpuRow] = []

    def attempt(name: str, make: Callable[[], list[GpuRow]]) -> list[GpuRow]:
        progress(f"measuring {name}")
        try:
            return make()
        except Exception as error:  # one broken row must not hide the others
            return [GpuRow(name, "", "cuda", skipped=f"failed: {type(error).__name__}: {error}")]

    progress("staging the compressed pass in pinned memory")
    chunks = build_chunks(images, config)
    count = sum(len(c.streams) for c in chunks)
    settings.update(images_per_pass=count, chunks=len(chunks),
                    compressed_bytes_per_pass=int(sum(c.src.nbytes for c in chunks)),
                    shapes=sorted({tuple(int(v) for v in image.shape) for image in images})[:8])
    workers = config.png_workers or available_cores()
    rows += attempt("png-cpu", lambda: [png_row(images, count, workers, config)])
    rows += attempt("lossless", lambda: lossless_rows(chunks, config))
    compressed = sum(c.src.nbytes for c in chunks) / count
    chunks.clear()  # frees the pinned staging before the Reader's store is written
    rs: dict[str, Any] = {"skipped": "not asked for"}
    with tempfile.TemporaryDirectory() as folder:
        if config.reader or config.rs:
            from prepkit.bench.reader import build

            progress("writing the Reader's store")
            in_store = max(count, config.rs_batch)  # R/S needs at least one full batch
            store = build(images, Path(folder), "lossless", in_store, 64)
            if config.reader:
                rows += attempt("reader", lambda: [reader_row(store, in_store, compressed, config)])
            if config.rs:
                progress("R/S protocol")
                try:
                    rs = rs_protocol(store, config)
                except Exception as error:  # recorded: the decode rows still stand
                    rs = {"skipped": f"failed: {type(error).__name__}: {error}"}
    rows += attempt("nvimgcodec", lambda: _nvimgcodec_rows(images, count, config))
    rows.sort(key=lambda row: ROW_NAMES.index(row.name) if row.name in ROW_NAMES else len(ROW_NAMES))
    h2d = derive(rows)
    pipelined = next((r for r in rows if r.name == "pipelined" and r.images_per_s), None)
    reader = next((r for r in rows if r.name == "reader" and r.images_per_s), None)
    ratio = reader.images_per_s / pipelined.images_per_s if reader and pipelined and reader.images_per_s and pipelined.images_per_s else None
    settings["png_workers"] = workers
    return GpuBenchResult(rows, settings, describe_machine(with_gpu=not on_simulator), h2d, ratio, rs, on_simulator)


def benchmark_images(quick: bool) -> dict[str, list[np.ndarray]]:
    """The benchmark sets: 2048x1024 mosaics and 500x375 photos; tiny ones in quick mode."""
    if quick:
        # Noise: the simulator decodes it fastest (a smooth 17x20 image costs seconds per pass).
        rng = np.random.default_rng(0)
        return {"tiny": [rng.integers(0, 256, (9, 12, 3), dtype=np.uint8), rng.integers(0, 256, (6, 7, 3), dtype=np.uint8)]}
    from prepkit.bench import photos

    return {"2048x1024": photos.cityscapes_like(), "500x375": photos.imagenet_like()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="reduced mode: tiny images, a few MB (KB on the simulator)")
    parser.add_argument("--pass-bytes", type=int, default=None, help="compressed bytes per pass (default 1 GiB)")
    parser.add_argument("--chunk-bytes", type=int, default=None, help="compressed bytes per launch (default 64 MiB)")
    parser.add_argument("--streams", type=int, default=None, help="CUDA streams (default 3)")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--no-rs", action="store_true", help="leave out the R/S training-step protocol")


def config_from(args: argparse.Namespace) -> GpuBenchConfig:
    config = GpuBenchConfig.quick() if args.quick else GpuBenchConfig()
    for name in ("pass_bytes", "chunk_bytes", "streams", "repeat"):
        if getattr(args, name) is not None:
            setattr(config, name, getattr(args, name))
    if args.no_rs:
        config.rs = False
    return config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.add_argument("--json", default=None, help="write the results (one document per image set) to FILE")
    args = parser.parse_args(argv)
    config = config_from(args)
    documents = {}
    for name, images in benchmark_images(args.quick).items():
        print(f"== {name}", flush=True)
        result = run_gpu_benchmark(images, config, progress=lambda text: print(f"  {text}", file=sys.stderr, flush=True))
        print(format_table(result), flush=True)
        documents[name] = result.record()
    if args.json:
        Path(args.json).write_text(json.dumps(documents, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
