"""``prepkit shard SRC DEST``: an image folder or manifest into a store."""

from __future__ import annotations

import os

import click

from prepkit.cli.options import (
    cli_errors,
    layout_option,
    parsed_storage_options,
    progress_bar,
    storage_option,
    write_options,
)


@click.command()
@click.argument("src", nargs=-1, required=True)
@click.argument("dest")
@layout_option()
@write_options
@click.option("--max-side", type=click.IntRange(1, None), default=None, help="Downscale so the longer side is at most N pixels (aspect kept).")
@click.option(
    "--mode", type=click.Choice(["rgb", "keep"]), default="rgb", show_default=True,
    help="rgb: every image becomes RGB uint8; keep: L, RGB and RGBA stay as they are.",
)
@click.option(
    "--on-error", type=click.Choice(["fail", "skip"]), default="fail", show_default=True,
    help="fail: stop at the first bad image; skip: store every good image and report the bad ones.",
)
@click.option(
    "--alpha", type=click.Choice(["drop", "composite"]), default="drop", show_default=True,
    help="Transparency when making RGB: drop it as Pillow's convert('RGB') and torchvision do, or composite onto --background.",
)
@click.option("--background", default="0,0,0", show_default=True, metavar="R,G,B", help="Background for --alpha composite (R,G,B or one gray level).")
@click.option("--image-key", default="image", show_default=True, help="Hugging Face SRC: the image column.")
@click.option("--label-key", default="label", show_default=True, help="Hugging Face SRC: the label column (used when present).")
@click.option("--mask-key", default="mask", show_default=True, help="Hugging Face SRC: the mask column (used when present).")
@click.option("--max-pixels", type=click.IntRange(1, None), default=None, help="Refuse images with more pixels (decompression bombs). Default 2^28.")
@click.option(
    "--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True,
    help="local: a pool of --workers processes here; dask: per-shard tasks on a Dask cluster.",
)
@click.option(
    "--scheduler", default=None, metavar="ADDRESS",
    help="Dask scheduler (tcp://host:8786) for --executor dask; without it a LocalCluster of --workers processes.",
)
@click.option(
    "--field", "fields", multiple=True, metavar="NAME[:KIND]",
    help="Store the manifest column NAME as an extra per-sample field. KIND: int, float, string, bytes (base64 "
    "in the manifest), array, a dtype (float32) or an array type (float32[*,4]: any rows of 4; int64[3]: "
    "exactly 3). Without KIND it is inferred from the first row. Repeatable.",
)
@storage_option
def shard(
    src: tuple[str, ...], dest: str, layout: str, quality: int, lossless_version: int, lossless_fast_decode: bool,
    samples_per_shard: int, workers: int,
    overwrite: bool, max_side: int | None, mode: str, on_error: str, alpha: str, background: str, image_key: str,
    label_key: str, mask_key: str, max_pixels: int | None,
    executor: str, scheduler: str | None, fields: tuple[str, ...], storage_options: tuple[str, ...],
) -> None:
    """Turn an image folder, manifest, WebDataset tars or Hugging Face dataset SRC into a
    sharded Zarr v3 store DEST.

    SRC is a folder of class subfolders (labels in sorted class-name order, as
    torchvision's ImageFolder), a flat folder (no labels), a .csv/.jsonl manifest with
    a 'path' column and optional 'label' and 'mask' columns (relative paths are relative
    to the manifest's folder; other columns are stored as extra per-sample fields when
    declared with --field, an undeclared one gets a warning), WebDataset .tar shards
    (several paths, or a brace pattern such as 'data-{000..009}.tar'), or a Hugging Face
    dataset folder (save_to_disk).

    DEST is a folder or an object storage URL (s3://bucket/prefix, gs://, az://).

    Killed or interrupted, the same command run again resumes from the last complete
    shard.
    """
    from prepkit.ingest.build import build_store
    from prepkit.ingest.executors import make_executor
    from prepkit.ingest.images import DEFAULT_MAX_PIXELS, ImageOptions, parse_background
    from prepkit.ingest.samples import Keys
    from prepkit.layouts import make_layout
    from prepkit.store.publish import check_any_destination

    for path in src:
        if not os.path.exists(path) and "{" not in path:
            raise click.BadParameter(f"Path {path!r} does not exist.", param_hint="SRC")
    with cli_errors(dest):
        if scheduler and executor != "dask":
            raise click.UsageError("--scheduler needs --executor dask")
        try:
            colour = parse_background(background)
            options = ImageOptions(mode=mode, max_side=max_side, max_pixels=max_pixels or DEFAULT_MAX_PIXELS,
                                   alpha=alpha, background=colour)
        except ValueError as error:
            raise click.UsageError(str(error)) from None
        options_for_storage = parsed_storage_options(storage_options)
        check_any_destination(dest, overwrite, options_for_storage)
        runner = make_executor(executor, scheduler, workers)
        chosen = make_layout(layout, quality=quality, lossless_version=lossless_version,
                             lossless_fast_decode=lossless_fast_decode)
        with progress_bar("shard") as bar:
            summary, _ = build_store(
                src[0] if len(src) == 1 else list(src), dest, keys=Keys(image=image_key, label=label_key, mask=mask_key), layout=chosen, options=options, samples_per_shard=samples_per_shard,
                workers=workers, on_error=on_error, overwrite=overwrite, executor=runner,
                storage_options=options_for_storage, fields=fields,
                progress=bar.update, on_total=lambda n: setattr(bar, "total", n),
            )
    resumed = f", {summary.num_shards_resumed} resumed" if summary.num_shards_resumed else ""
    if summary.already_complete:
        click.echo(f"{dest} already holds this store, complete ({summary.num_samples} samples, same inputs and "
                   "options): nothing to do")
    else:
        click.echo(f"wrote {summary.num_samples} samples ({layout}) to {dest}{resumed}")
    if summary.failures:
        click.echo(f"skipped {len(summary.failures)} bad samples (report: {dest}/skipped.jsonl):", err=True)
        for failure in summary.failures[:10]:
            click.echo(f"  {failure.path}: {failure.reason}", err=True)
        if len(summary.failures) > 10:
            click.echo(f"  ... and {len(summary.failures) - 10} more", err=True)
