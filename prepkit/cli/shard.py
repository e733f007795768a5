import click


@click.command()
def shard() -> None:
    """Turn an image folder or manifest into a sharded Zarr v3 store."""
