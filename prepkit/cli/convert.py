"""``prepkit convert SRC_STORE DEST_STORE --layout ...``: transcode a store."""

from __future__ import annotations

import click

from prepkit.cli.options import (
    StoreLocation,
    cli_errors,
    layout_option,
    parsed_storage_options,
    progress_bar,
    storage_option,
    write_options,
)


@click.command()
@click.argument("src_store", type=StoreLocation())
@click.argument("dest_store")
@layout_option()
@write_options
@storage_option
def convert(src_store: str, dest_store: str, layout: str, quality: int, lossless_version: int,
            lossless_fast_decode: bool, samples_per_shard: int | None,
            workers: int, overwrite: bool, storage_options: tuple[str, ...]) -> None:
    """Transcode the store SRC_STORE into DEST_STORE with another image layout.

    Labels, class names, source paths and masks are kept; samples are re-sharded with
    --samples-per-shard (default: the source store's).
    """
    from prepkit.layouts import make_layout
    from prepkit.store.convert import convert_store
    from prepkit.store.publish import check_any_destination

    ctx = click.get_current_context()
    if ctx.get_parameter_source("samples_per_shard") == click.core.ParameterSource.DEFAULT:
        samples_per_shard = None
    with cli_errors(dest_store):
        options = parsed_storage_options(storage_options)
        check_any_destination(dest_store, overwrite, options)
        with progress_bar("convert") as bar:
            summary = convert_store(
                src_store, dest_store, layout=make_layout(layout, quality=quality, lossless_version=lossless_version,
                                                          lossless_fast_decode=lossless_fast_decode),
                samples_per_shard=samples_per_shard, workers=workers, overwrite=overwrite, storage_options=options,
                progress=bar.update, on_total=lambda n: setattr(bar, "total", n),
            )
    if summary.already_complete:
        click.echo(f"{dest_store} already holds this store, complete ({summary.num_samples} samples): nothing to do")
    else:
        click.echo(f"wrote {summary.num_samples} samples ({layout}) to {dest_store}")
