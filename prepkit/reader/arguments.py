"""Validation of the Reader's arguments: one function, one message per argument in the form
"Expected X. Got Y.", before any work starts."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

MAX_SEED = 2**63 - 1


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _integer(name: str, value: object, low: int, high: int | None = None, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not _is_int(value):
        what = "None or an integer" if optional else "an integer"
        raise TypeError(f"Reader: Expected {name} to be {what}. Got {value!r} ({type(value).__name__}).")
    number = int(value)  # type: ignore[call-overload]
    if number < low or (high is not None and number > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"Reader: Expected {name} {bound}. Got {number}.")


def _choice(name: str, value: object, options: Sequence[str]) -> None:
    if value not in options:
        raise ValueError(f"Reader: Expected {name} to be one of {tuple(options)}. Got {value!r}.")


def _flag(name: str, value: object) -> None:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"Reader: Expected {name} to be True or False. Got {value!r}.")


def check_reader_arguments(
    *, batch_size: object, seed: object, rank: object, world_size: object, shuffle: object, drop_last: object,
    device: object, output: object, outputs: Sequence[str], on_error: object, fields: object,
    shards_in_use: object, gpu_memory_budget: object, prefetch: object, threads: object,
    transfer_index: object, mask_mode: object, crop_decode: object, storage_options: object = None,
    cache_dir: object = None, cache_limit: object = None, cache_policy: object = "next-use",
) -> None:
    """Check every Reader argument's type and range; raise TypeError or ValueError naming it."""
    _integer("batch_size", batch_size, 1)
    _integer("seed", seed, 0, MAX_SEED)
    _integer("world_size", world_size, 1)
    _integer("rank", rank, 0)
    if int(rank) >= int(world_size):  # type: ignore[call-overload]
        raise ValueError(f"Reader: Expected rank in [0, {world_size - 1}] (world_size {world_size}). Got {rank}.")  # type: ignore[operator]
    for name, value in (("shuffle", shuffle), ("drop_last", drop_last), ("crop_decode", crop_decode)):
        _flag(name, value)
    if not isinstance(device, str) or not (device in ("cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit())):
        raise ValueError(f"Reader: Expected device to be 'cpu', 'cuda' or 'cuda:N'. Got {device!r}.")
    _choice("output", output, outputs)
    _choice("on_error", on_error, ("raise", "skip"))
    _choice("mask_mode", mask_mode, ("nearest", "nearest-exact"))
    if isinstance(fields, str) or not isinstance(fields, Sequence):
        raise TypeError(f"Reader: Expected fields to be a sequence of field names. Got {fields!r}.")
    if "image" not in fields or not all(isinstance(f, str) for f in fields) or len(set(fields)) != len(fields):
        raise ValueError(
            f"Reader: Expected fields to include 'image', plus 'label', 'mask' or the store's extra fields, each once. "
            f"Got {tuple(fields)}."
        )
    _integer("shards_in_use", shards_in_use, 1, optional=True)
    _integer("gpu_memory_budget", gpu_memory_budget, 1, optional=True)
    _integer("prefetch", prefetch, 0)
    _integer("threads", threads, 1, optional=True)
    _integer("transfer_index", transfer_index, 0, optional=True)
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise TypeError(f"Reader: Expected storage_options to be None or a dict. Got {storage_options!r}.")
    if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
        raise TypeError(f"Reader: Expected cache_dir to be None or a folder path. Got {cache_dir!r}.")
    _integer("cache_limit", cache_limit, 1, optional=True)
    _choice("cache_policy", cache_policy, ("next-use", "lru"))
    if cache_dir is None and (cache_limit is not None or cache_policy != "next-use"):
        raise ValueError(f"Reader: Expected cache_dir with cache_limit or cache_policy. Got cache_dir=None, "
                         f"cache_limit={cache_limit!r}, cache_policy={cache_policy!r}.")
