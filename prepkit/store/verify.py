"""``prepkit verify``: check a store end to end and name every bad shard and sample.

Checks, in order: the group metadata and per-sample arrays (their checksums, dtypes, value
ranges and consistency, see ``prepkit.store.checksums``); every shard file (present, its
Zarr shard index intact: CRC32C, entries inside the file); every sample's stored bytes
against its CRC32C; with ``decode=True`` every sample decodes to its recorded shape.
Nothing here raises on a damaged store: every finding becomes a :class:`Problem`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prepkit.errors import PrepkitError
from prepkit.store.format import crc32c, shard_path
from prepkit.store.reader import Store


@dataclass(frozen=True)
class Problem:
    """One finding: ``sample`` is None for store- or shard-level problems."""

    reason: str
    sample: int | None = None
    field: str | None = None
    shard_file: str | None = None

    def __str__(self) -> str:
        where = []
        if self.sample is not None:
            where.append(f"sample {self.sample}" + (f" ({self.field})" if self.field else ""))
        if self.shard_file:
            where.append(self.shard_file)
        return (", ".join(where) + ": " if where else "") + self.reason


@dataclass
class VerifyReport:
    samples: int = 0
    shard_files: int = 0
    decoded: int = 0
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # not problems: e.g. a store without checksums

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_store(path: str | Path, *, decode: bool = False, progress: Callable[[int], None] = lambda n: None,
                 on_total: Callable[[int], None] = lambda n: None,
                 storage_options: dict[str, Any] | None = None) -> VerifyReport:
    """Check the store at ``path`` (a folder or an object storage URL); see the module docstring."""
    report = VerifyReport()
    try:
        store = Store(path, storage_options=storage_options)
    except PrepkitError as error:
        report.problems.append(Problem(str(error)))
        return report
    with store:
        if store.attributes.checksums is None:
            report.notes.append(
                "arrays unchecked: this store was written before prepkit recorded checksums of its labels, "
                "paths, ranges, shapes and metadata (only sample bytes and shard indexes are checked)"
            )
        report.samples = len(store)
        on_total(len(store) * len(store.fields))
        for name, arrays in store.field_arrays.items():
            shard_of = (arrays.ranges[:, 0] // np.uint64(arrays.geometry.capacity)).astype(np.int64)
            broken_shards: set[int] = set()
            stops = arrays.ranges[:, 1].astype(np.int64)
            for shard in np.unique(shard_of).tolist():
                file = shard_path(store.path, name, shard)
                try:
                    handle = store._shard(arrays, shard)
                    report.shard_files += 1
                    # prepkit pads a shard's last chunk with zeros: anything else there is damage.
                    end = int(stops[shard_of == shard].max()) - shard * arrays.geometry.capacity
                    if handle.contiguous and handle.physical(handle.base + end, handle.base + handle.used_bytes).any():
                        report.problems.append(Problem("non-zero bytes in the padding after the last sample", field=name, shard_file=str(file)))
                except PrepkitError as error:
                    broken_shards.add(shard)
                    report.problems.append(Problem(_strip(str(error), store), field=name, shard_file=str(file)))
            for index in range(len(store)):
                shard = int(shard_of[index])
                sample_file = str(shard_path(store.path, name, shard))
                if shard in broken_shards:
                    report.problems.append(Problem("in a damaged or missing shard file", index, name, sample_file))
                    progress(1)
                    continue
                try:
                    data = store.read_bytes(index, name)
                    if crc32c(data) != int(arrays.crc32c[index]):
                        report.problems.append(Problem("CRC32C mismatch: stored bytes are damaged", index, name, sample_file))
                    elif decode:
                        store.decode(index, name)
                        report.decoded += 1
                except PrepkitError as error:
                    report.problems.append(Problem(_strip(str(error), store), index, name, sample_file))
                progress(1)
    return report


def _strip(message: str, store: Store) -> str:
    prefix = f"{store.path}: "
    return message[len(prefix):] if message.startswith(prefix) else message
