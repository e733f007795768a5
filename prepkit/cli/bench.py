"""``prepkit bench-decode [INPUT ...]``: compare decoders on your own images and machine."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from prepkit.cli.options import cli_errors, default_workers


def bundled_sample_folder() -> Path | None:
    """The repository's sample photos, when prepkit runs from a checkout."""
    folder = Path(__file__).resolve().parents[2] / "samples" / "photos"
    return folder if folder.is_dir() else None


def load_inputs(inputs: tuple[str, ...], limit: int | None) -> tuple[list, list[str]]:  # (list[np.ndarray], names)
    """Images from folders, manifests or stores, as H x W x C uint8 arrays, and their names
    (a file's path below its input, or a store's name and sample index)."""
    from prepkit.errors import PrepkitError
    from prepkit.ingest.images import ImageOptions, load_image
    from prepkit.ingest.sources import list_source
    from prepkit.store.reader import open_store

    images: list = []
    names: list[str] = []
    for source in inputs:
        path = Path(source)
        if (path / "zarr.json").is_file():
            store = open_store(path)
            for index in range(len(store)):
                images.append(store[index]["image"])
                names.append(f"{path.name}[{index}]")
                if limit and len(images) >= limit:
                    return images, names
            continue
        for item in list_source(path).items:
            try:
                images.append(load_image(item.path, ImageOptions()))
                names.append(os.path.relpath(item.path, path) if path.is_dir() else str(item.path))
            except PrepkitError as error:
                click.echo(f"skipping {item.path}: {error}", err=True)
            if limit and len(images) >= limit:
                return images, names
    return images, names


@click.command("bench-decode")
@click.argument("inputs", nargs=-1, type=click.Path(exists=True))
@click.option("--threads", type=click.IntRange(1, 1024), default=default_workers, show_default="all cores", help="CPU decoding threads.")
@click.option("--device", type=click.Choice(["cpu", "cuda", "all"]), default="all", show_default=True)
@click.option("--repeat", type=click.IntRange(1, 1000), default=5, show_default=True, help="Timed passes (the median is reported).")
@click.option("--warmup", type=click.IntRange(0, 100), default=1, show_default=True, help="Untimed passes first.")
@click.option("--limit", type=click.IntRange(1, None), default=None, help="At most this many images.")
@click.option("--quality", type=click.IntRange(1, 100), default=90, show_default=True, help="JPEG quality.")
@click.option("--no-reader", is_flag=True, help="Leave out the end-to-end Reader measurement.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write one record per measurement to FILE.")
@click.option("--quick", is_flag=True, help="GPU benchmark in its reduced mode (tiny passes; runs under the CUDA simulator).")
@click.option("--pass-bytes", type=click.IntRange(1, None), default=None,
              help="GPU benchmark: compressed bytes per pass [default: 1 GiB; --quick: a few MB].")
@click.option("--streams", type=click.IntRange(1, 16), default=None, help="GPU benchmark: CUDA streams [default: 3].")
@click.option("--no-rs", is_flag=True, help="GPU benchmark: leave out the R/S training-step protocol.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None, help="Write a bar chart (PNG) to FILE; needs matplotlib.")
def bench_decode(inputs: tuple[str, ...], threads: int, device: str, repeat: int, warmup: int, limit: int | None,
                 quality: int, no_reader: bool, json_path: str | None, quick: bool, pass_bytes: int | None,
                 streams: int | None, no_rs: bool, plot_path: str | None) -> None:
    """Decode the same images in every format side by side: PNG, JPEG, WebP lossless,
    QOI, raw and prepkit lossless, on the CPU and the GPU, and the Reader end to end.

    INPUT is a folder of images, a manifest or a prepkit store (default: the bundled
    sample photos). Each figure is the median of --repeat passes after --warmup. Sizes are
    given against PNG's (Pillow's encoder) in total and for the worst image by name: a
    total is carried by the largest images.

    With --device cuda or all, the GPU benchmark follows (prepkit.bench.gpu,
    docs/BENCHMARKS.md): the compressed images repeated to a pass (1 GiB by default) in
    pinned memory, decoded on several streams; the public API, the pipelined decoder, the
    kernel alone, the measured H2D bound, the Reader, nvJPEG and HTJ2K (nvImageCodec) and
    PNG on every core, as x PNG and % of the PCIe bound; then the R/S training-step protocol.
    """
    from prepkit.bench.decode import format_table, plot, run_benchmark
    from prepkit.bench.machine import machine_line

    with cli_errors():
        if not inputs:
            folder = bundled_sample_folder()
            if folder is None:
                raise click.UsageError("no INPUT given and no bundled sample photos found; name a folder or store")
            inputs = (str(folder),)
        images, names = load_inputs(inputs, limit)
        if not images:
            raise click.UsageError(f"no images found in {', '.join(inputs)}")
        if plot_path:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                raise click.UsageError("--plot needs matplotlib: pip install 'prepkit[plot]'") from None
        devices = ["cpu", "cuda"] if device == "all" else [device]
        click.echo(f"bench-decode: {len(images)} images from {', '.join(inputs)}; {threads} threads; "
                   f"median of {repeat} after {warmup} warm-up", err=True)
        results, machine = run_benchmark(
            images, threads=threads, devices=devices, repeat=repeat, warmup=warmup, quality=quality,
            with_reader=not no_reader, progress=lambda text: click.echo(f"  {text}", err=True), names=names,
        )
        gpu_result = None
        if "cuda" in devices:
            from prepkit.bench import gpu

            config = gpu.GpuBenchConfig.quick() if quick else gpu.GpuBenchConfig(repeat=repeat, warmup=warmup)
            config.quality, config.png_workers, config.reader = quality, threads, not no_reader
            config.rs = config.rs and not no_rs
            if pass_bytes is not None:
                config.pass_bytes = pass_bytes
            if streams is not None:
                config.streams = streams
            gpu_result = gpu.run_gpu_benchmark(images, config, progress=lambda text: click.echo(f"  gpu: {text}", err=True))
    click.echo(f"machine: {machine_line(machine)}")
    click.echo(format_table(results))
    if gpu_result is not None:
        click.echo("\nGPU benchmark (x PNG: over png-cpu; % PCIe: input bytes/s over the measured H2D bound)")
        click.echo(gpu.format_table(gpu_result))
    if json_path:
        records = [{"record": "machine", **machine}] + [{"record": "result", **r.record()} for r in results]
        if gpu_result is not None:
            records.append({"record": "gpu", **gpu_result.record()})
        Path(json_path).write_text(json.dumps(records, indent=1, default=str))
        click.echo(f"wrote {json_path}")
    if plot_path:
        plot(results, machine, plot_path)
        click.echo(f"wrote {plot_path}")
