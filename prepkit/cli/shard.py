"""``prepkit shard SRC DEST``: an image folder or manifest into a store."""

from __future__ import annotations

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
@click.argument("src", type=click.Path(exists=True))
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
    src: str, dest: str, layout: str, quality: int, lossless_version: int, samples_per_shard: int, workers: int,
    overwrite: bool, max_side: int | None, mode: str, on_error: str, max_pixels: int | None,
    executor: str, scheduler: str | None, fields: tuple[str, ...], storage_options: tuple[str, ...],
) -> None:
    """Turn an image folder or manifest SRC into a sharded Zarr v3 store DEST.

    SRC is a folder of class subfolders (labels in sorted class-name order, as
    torchvision's ImageFolder), a flat folder (no labels), or a .csv/.jsonl manifest with
    a 'path' column and optional 'label' and 'mask' columns; other columns are stored as
    extra per-sample fields when declared with --field (an undeclared one gets a warning).

    DEST is a folder or an object storage URL (s3://bucket/prefix, gs://, az://).

    Killed or interrupted, the same command run again resumes from the last complete
    shard.
    """
    from prepkit.ingest.build import build_store
    from prepkit.ingest.executors import make_executor
    from prepkit.ingest.images import DEFAULT_MAX_PIXELS, ImageOptions
    from prepkit.layouts import make_layout
    from prepkit.store.publish import check_any_destination

    with cli_errors(dest):
        if scheduler and executor != "dask":
            raise click.UsageError("--scheduler needs --executor dask")
        options_for_storage = parsed_storage_options(storage_options)
        check_any_destination(dest, overwrite, options_for_storage)
        runner = make_executor(executor, scheduler, workers)
        chosen = make_layout(layout, quality=quality, lossless_version=lossless_version)
        options = ImageOptions(mode=mode, max_side=max_side, max_pixels=max_pixels or DEFAULT_MAX_PIXELS)
        with progress_bar("shard") as bar:
            summary, _ = build_store(
                src, dest, layout=chosen, options=options, samples_per_shard=samples_per_shard,
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
        click.echo(f"skipped {len(summary.failures)} bad files (report: {dest}/skipped.jsonl):", err=True)
        for failure in summary.failures[:10]:
            click.echo(f"  {failure.path}: {failure.reason}", err=True)
        if len(summary.failures) > 10:
            click.echo(f"  ... and {len(summary.failures) - 10} more", err=True)
