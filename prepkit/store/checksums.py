"""Checksums over everything in a store that is not sample bytes, and the store generation id.

Sample bytes carry their own CRC32C (``<field>/crc32c``) and shard indexes theirs. The rest
of a store (labels, paths, ranges, shapes, the CRC arrays themselves, every array's
``zarr.json``, ``skipped.jsonl`` and the group attributes) is covered here:

- ``checksums["arrays"]``: CRC32C of each per-sample array's values (C order, little endian,
  the stored dtype), keyed by the array's path in the group ("labels", "image/ranges", ...);
- ``checksums["files"]``: CRC32C of the bytes of every metadata file other than the root
  ``zarr.json`` ("labels/zarr.json", "image/bytes/zarr.json", "skipped.jsonl", ...);
- ``attributes_crc32c``: CRC32C of the canonical JSON of the ``prepkit`` attributes
  without this key (sorted keys, no spaces);
- ``generation``: a digest of the checksums and the store's plan. Two stores with equal
  generation hold the same bytes, so a reader that sees the generation change under an open
  handle knows the store was replaced.

Stores written before these keys existed still open; ``verify`` says their arrays are
unchecked.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np

from prepkit.errors import StoreCorruptError, StoreError
from prepkit.store.format import crc32c

# Metadata files are a few KiB; refuse to read anything much larger.
MAX_METADATA_BYTES = 1 << 20
# Files of a store covered by checksums["files"] when present (plus every array's zarr.json).
EXTRA_FILES = ("skipped.jsonl",)


def array_crc32c(values: np.ndarray) -> int:
    """CRC32C of an array's values: C order, little endian, as stored."""
    data = np.ascontiguousarray(values)
    if data.dtype.byteorder == ">":
        data = data.astype(data.dtype.newbyteorder("<"))
    return crc32c(data.tobytes())


def canonical_attributes(values: dict[str, Any]) -> bytes:
    """The bytes ``attributes_crc32c`` covers: the attributes minus that key, canonical JSON."""
    body = {key: value for key, value in values.items() if key != "attributes_crc32c"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def attributes_crc32c(values: dict[str, Any]) -> int:
    return crc32c(canonical_attributes(values))


def generation_id(checksums: dict[str, Any], plan: dict[str, Any]) -> str:
    """A digest of the store's content: equal for byte-identical stores, else different."""
    text = json.dumps({"checksums": checksums, "plan": plan}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def open_regular(path: Path, where: str, limit: int | None = None) -> int:
    """Open ``path`` read-only without blocking and return the descriptor.

    A FIFO, device or socket in place of a store file is refused (opening a FIFO for
    reading would block until a writer appears, so O_NONBLOCK, then fstat). With ``limit``,
    a larger file is refused too.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as error:
        raise StoreError(f"{where}: cannot open {path}: {error}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise StoreCorruptError(f"{where}: Expected {path} to be a regular file. Got {_kind(info.st_mode)}.")
    if limit is not None and info.st_size > limit:
        os.close(fd)
        raise StoreCorruptError(
            f"{where}: Expected {path} to be at most {limit} bytes. Got {info.st_size} bytes."
        )
    return fd


def read_regular(path: Path, where: str, limit: int = MAX_METADATA_BYTES) -> bytes:
    """The bytes of a small store file (metadata), refusing non-regular and oversized files."""
    fd = open_regular(path, where, limit)
    try:
        with os.fdopen(fd, "rb", closefd=True) as handle:
            return handle.read(limit + 1)
    except OSError as error:
        raise StoreError(f"{where}: cannot read {path}: {error}") from None


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "a special file"


def check_store_files(root: Path, where: str, *, skip_shards: bool = False) -> None:
    """Refuse a store holding a non-regular file anywhere except its lock file.

    Zarr-python opens files with a plain blocking ``open``; a FIFO must never reach it.
    Walks the store's folders (shard folders included: a listing, no file contents).
    """
    for folder, folders, names in os.walk(root):
        # Shard folders ("<field>/bytes/c") can hold many files; the reader opens those
        # itself with open_regular.
        folders[:] = [f for f in folders if f != ".prepkit" and not (skip_shards and f == "c" and folder.endswith("bytes"))]
        for name in names:
            if name == ".prepkit.lock":
                continue
            path = Path(folder) / name
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode):
                try:
                    mode = os.stat(path).st_mode
                except OSError:
                    continue  # a dangling link reads as a missing file later
            if not stat.S_ISREG(mode):
                raise StoreCorruptError(f"{where}: Expected {path} to be a regular file. Got {_kind(mode)}.")


def metadata_files(root: Path, field_names: list[str], extra_files: list[str] | None = None) -> list[str]:
    """Paths (relative to ``root``) of the metadata files ``checksums["files"]`` covers;
    ``extra_files``: those of the extra fields (``prepkit.store.extras.metadata_files``)."""
    names = ["labels/zarr.json", "paths/zarr.json", "path_ranges/zarr.json"]
    for field in field_names:
        names += [f"{field}/zarr.json"] + [f"{field}/{a}/zarr.json" for a in ("bytes", "ranges", "shapes", "crc32c")]
    names += extra_files or []
    names += [name for name in EXTRA_FILES if (root / name).is_file()]
    return names


def file_checksums(root: Path, field_names: list[str], extra_files: list[str] | None = None) -> dict[str, int]:
    """CRC32C of each metadata file (computed by the writer once everything is written)."""
    return {name: crc32c(read_regular(root / name, str(root))) for name in metadata_files(root, field_names, extra_files)}


def check_attributes(values: dict[str, Any], where: str) -> None:
    """Check ``attributes_crc32c`` when the store has one (older stores do not)."""
    if "attributes_crc32c" not in values:
        return
    recorded = values["attributes_crc32c"]
    actual = attributes_crc32c(values)
    if recorded != actual:
        raise StoreCorruptError(
            f"{where}: the prepkit attributes in zarr.json fail their checksum. "
            f"Expected CRC32C {recorded!r}. Got {actual}."
        )


def check_files(root: Path, where: str, recorded: dict[str, Any]) -> None:
    """Check every metadata file against its recorded CRC32C, before any of them is parsed
    by zarr-python (a damaged shape must not decide an allocation)."""
    for name, expected in recorded.items():
        if not isinstance(name, str) or ".." in Path(name).parts or Path(name).is_absolute():
            raise StoreCorruptError(f"{where}: Expected checksummed file names inside the store. Got {name!r}.")
        try:
            data = read_regular(root / name, where)
        except FileNotFoundError:
            raise StoreCorruptError(f"{where}: {name} is missing") from None
        actual = crc32c(data)
        if actual != expected:
            raise StoreCorruptError(f"{where}: {name} fails its checksum. Expected CRC32C {expected!r}. Got {actual}.")


def check_arrays(where: str, recorded: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Check each loaded per-sample array against its recorded CRC32C."""
    for name, values in arrays.items():
        if name not in recorded:
            raise StoreCorruptError(f"{where}: Expected a checksum for array {name!r}. Got none.")
        actual = array_crc32c(values)
        if actual != recorded[name]:
            raise StoreCorruptError(
                f"{where}: array {name!r} fails its checksum (damaged values). "
                f"Expected CRC32C {recorded[name]!r}. Got {actual}."
            )
