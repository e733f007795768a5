"""``prepkit warmup [--parts decode,encode,reader,augment] [--jobs N]``: compile the CPU kernels once."""

from __future__ import annotations

import os

import click

from prepkit.cli.options import progress_bar


@click.command()
@click.option("--parts", default="decode,encode,reader,augment", show_default=True,
              help="Comma-separated parts: decode (lossless decoders), encode (lossless encoders), "
                   "reader (the Reader's augmentation kernels), augment (the colour stage, RandomErasing, "
                   "16-bit outputs, the channel ops, masks, CutMix and MixUp).")
@click.option("--jobs", type=click.IntRange(1, None), default=None, help="Processes at once  [default: one per part]")
def warmup(parts: str, jobs: int | None) -> None:
    """Compile prepkit's numba CPU kernels into numba's disk cache.

    On a fresh install the first lossless decode compiles for minutes, in every process that
    starts before the cache is filled. Run this once per install (a container build, or before a
    job's ranks start); later processes load the kernels in seconds. Exits 1 naming each part
    that failed."""
    from prepkit.warmup import warm

    names = [name.strip() for name in parts.split(",") if name.strip()]
    cache = os.environ.get("NUMBA_CACHE_DIR") or "__pycache__ beside prepkit's modules"
    click.echo(f"compiling {', '.join(names) or '(no parts)'} into numba's cache ({cache})")
    try:
        with progress_bar("warmup", unit="part") as bar:
            bar.total = len(names)
            results = warm(names, jobs, on_done=lambda result: bar.update(1))
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--parts") from None
    failed = []
    for result in results:
        click.echo(f"{result.name}: {result.seconds:.1f} s" + (f", failed: {result.error}" if result.error else ""))
        if result.error:
            failed.append(result.name)
    if failed:
        raise click.ClickException(f"warm-up failed for {', '.join(failed)} (errors above)")
