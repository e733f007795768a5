import click


@click.command()
def convert() -> None:
    """Turn an image folder or manifest into a converted Zarr v3 store."""
