"""The ``prepkit`` command line: one module per command, registered here.

Heavy imports (numba, zarr) happen inside the commands so that ``prepkit --help``
answers at once.
"""

from __future__ import annotations

import click

from prepkit import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="prepkit")
def cli() -> None:
    """Prepare image datasets as sharded Zarr v3 stores and feed them to GPUs."""


def _register() -> None:
    from prepkit.cli import bench, convert, inspect, shard, verify, warmup

    cli.add_command(shard.shard)
    cli.add_command(convert.convert)
    cli.add_command(inspect.inspect)
    cli.add_command(verify.verify)
    cli.add_command(bench.bench_decode)
    cli.add_command(warmup.warmup)


def main() -> None:
    """Console-script entry point."""
    _register()
    cli(prog_name="prepkit")
