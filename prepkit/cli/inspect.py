"""``prepkit inspect STORE``: describe a store."""

from __future__ import annotations

import json

import click

from prepkit.cli.options import StoreLocation, cli_errors, parsed_storage_options, storage_option


@click.command()
@click.argument("store", type=StoreLocation())
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object instead of text.")
@storage_option
def inspect(store: str, as_json: bool, storage_options: tuple[str, ...]) -> None:
    """Describe STORE (a folder or s3://bucket/prefix): layout, sample count, shapes, shards, sizes, classes."""
    from prepkit.store.describe import describe, format_description
    from prepkit.store.reader import open_store

    with cli_errors():
        with open_store(store, storage_options=parsed_storage_options(storage_options)) as opened:
            info = describe(opened)
    click.echo(json.dumps(info, indent=2) if as_json else format_description(info))
