import click


@click.command()
def inspect() -> None:
    """Turn an image folder or manifest into a inspected Zarr v3 store."""
