"""``prepkit verify STORE [--decode]``: check every shard and sample."""

from __future__ import annotations

import click

from prepkit.cli.options import StoreLocation, cli_errors, parsed_storage_options, progress_bar, storage_option


@click.command()
@click.argument("store", type=StoreLocation())
@click.option("--decode", is_flag=True, help="Also decode every sample.")
@click.option("--max-problems", type=click.IntRange(1, None), default=50, show_default=True, help="Problems to print.")
@storage_option
def verify(store: str, decode: bool, max_problems: int, storage_options: tuple[str, ...]) -> None:
    """Check STORE: metadata, every shard index (CRC32C), every sample's CRC32C, and with
    --decode that every sample decodes. Exits 1 and names each bad sample and shard file."""
    from prepkit.store.verify import verify_store

    with cli_errors():
        with progress_bar("verify", unit="sample") as bar:
            report = verify_store(store, decode=decode, progress=bar.update, on_total=lambda n: setattr(bar, "total", n),
                                  storage_options=parsed_storage_options(storage_options))
    checked = f"{report.samples} samples, {report.shard_files} shard files" + (f", {report.decoded} decoded" if decode else "")
    for note in report.notes:
        click.echo(f"note: {note}", err=True)
    if report.ok:
        click.echo(f"ok: {store} ({checked})")
        return
    for problem in report.problems[:max_problems]:
        click.echo(f"bad: {problem}", err=True)
    if len(report.problems) > max_problems:
        click.echo(f"... and {len(report.problems) - max_problems} more", err=True)
    raise click.ClickException(f"{store}: {len(report.problems)} problems found ({checked})")
