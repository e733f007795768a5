"""``prepkit inspect STORE``: describe a store."""

from __future__ import annotations

import json

import click

from prepkit.cli.options import cli_errors


@click.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object instead of text.")
def inspect(store: str, as_json: bool) -> None:
    """Describe STORE: layout, sample count, shapes, shards, sizes, classes."""
    from prepkit.store.describe import describe, format_description
    from prepkit.store.reader import open_store

    with cli_errors():
        with open_store(store) as opened:
            info = describe(opened)
    click.echo(json.dumps(info, indent=2) if as_json else format_description(info))
