"""Options and helpers shared by several commands."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def default_workers() -> int:
    from prepkit.parallel import available_cores

    return available_cores()


def layout_option(required: bool = True) -> Callable[[F], F]:
    return click.option(
        "--layout",
        type=click.Choice(["raw", "jpeg", "lossless"]),
        required=required,
        help="How images are stored: raw pixels, JPEG, or prepkit's lossless codec.",
    )


def write_options(function: F) -> F:
    """Options of every command that writes a store."""
    decorators = [
        click.option("--quality", type=click.IntRange(1, 100), default=90, show_default=True, help="JPEG quality (layout jpeg)."),
        click.option(
            "--lossless-version", type=click.IntRange(1, 2), default=2, show_default=True,
            help="Bitstream of the lossless layout's images: 2 is smaller on every kind of image, 1 decodes "
            "photographs about 2.5x faster on the CPU (docs/LOSSLESS.md). Masks always use 2.",
        ),
        click.option(
            "--lossless-fast-decode", is_flag=True,
            help="Bitstream 2 without its MED predictor and table sets per tile class, for images and masks: "
            "10% larger on photographs, decodes 1.2-1.4x faster on the CPU (docs/BENCHMARKS.md).",
        ),
        click.option(
            "--samples-per-shard", type=click.IntRange(1, 1 << 24), default=1024, show_default=True,
            help="Samples per shard file.",
        ),
        click.option(
            "--workers", type=click.IntRange(1, 512), default=default_workers, show_default="all cores",
            help="Encoding processes (started with spawn), each running numba on an equal share of the cores. "
            "Output is identical whatever the count.",
        ),
        click.option("--overwrite", is_flag=True, help="Replace DEST if it already holds something."),
    ]
    for decorator in reversed(decorators):
        function = decorator(function)
    return function


class Interrupted(click.ClickException):
    """Ctrl-C: one line, and the shell's exit code for SIGINT (128 + 2)."""

    exit_code = 130
def storage_option(function: F) -> F:
    """``--storage-option KEY=VALUE`` (repeatable): object storage settings for URL stores."""
    return click.option(
        "--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
        help="Object storage setting for s3:// gs:// az:// stores (obstore keys: endpoint, access_key_id, "
        "secret_access_key, region, allow_http, ...); AWS_* variables are read too. Repeatable.",
    )(function)


def parsed_storage_options(pairs: tuple[str, ...]) -> dict[str, str]:
    from prepkit.store.storage import parse_storage_options

    return parse_storage_options(pairs)


class StoreLocation(click.ParamType):
    """A store: an existing local folder, or an object storage URL (checked when opened)."""

    name = "store"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from prepkit.store.storage import is_url

        text = str(value)
        if is_url(text):
            return text
        return str(click.Path(exists=True, file_okay=False).convert(value, param, ctx))


@contextmanager
def cli_errors(dest: str | None = None) -> Iterator[None]:
    """Turn prepkit errors into one-line click errors (exit 1, no traceback)."""
    from prepkit.errors import PrepkitError

    try:
        yield
    except PrepkitError as error:
        raise click.ClickException(str(error)) from None
    except OSError as error:
        where = f" ({error.filename})" if error.filename else ""
        raise click.ClickException(f"{error.strerror or error}{where}") from None
    except KeyboardInterrupt:
        hint = f"; run the same command again to resume {dest}" if dest else ""
        raise Interrupted(f"interrupted{hint}") from None


def progress_bar(description: str, unit: str = "img") -> Any:
    """A tqdm bar on a terminal, silent when output is not a terminal."""
    from tqdm.auto import tqdm

    return tqdm(desc=description, unit=unit, disable=None, dynamic_ncols=True, smoothing=0.1)
