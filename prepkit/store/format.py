"""Store format v1: names, attributes, shard geometry and the Zarr shard file layout.

``docs/FORMAT.md`` describes the same thing for people; keep the two in step.

A store is one Zarr v3 group::

    zarr.json                      group; attributes["prepkit"] (see ``Attributes``)
    labels/                        int64 (N,)    class index, -1 = no label
    paths/                         uint8 (P,)    source paths, UTF-8 / file-system bytes
    path_ranges/                   uint64 (N, 2) [start, stop) of each path in ``paths``
    <field>/                       one group per sample field: "image", and "mask" if any
        bytes/                     uint8, the stored samples back to back, sharded
        ranges/                    uint64 (N, 2) [start, stop) of each sample in ``bytes``
        shapes/                    uint32 (N, 3) H, W, C of the decoded sample
        crc32c/                    uint32 (N,)   CRC32C of each sample's stored bytes

``bytes`` is split into shards of ``capacity`` bytes: shard ``j`` holds the samples of
source items ``[j * samples_per_shard, (j + 1) * samples_per_shard)`` packed from byte
``j * capacity`` on. Its Zarr shard file (``bytes/c/<j>``) holds inner chunks of
``chunk`` bytes back to back, then the shard index: one little-endian (offset, nbytes)
uint64 pair per inner chunk (2**64-1 twice for an absent chunk), then the CRC32C of the
index. Unused capacity is absent chunks: it costs index entries, not disk space.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import crc32c as _crc32c
import numpy as np

from prepkit.errors import StoreCorruptError, StoreError


class _Joinable(Protocol):
    def __truediv__(self, part: str, /) -> Any: ...


PathT = TypeVar("PathT", bound=_Joinable)  # a Path, or a storage.ObjectPath for remote stores

FORMAT_VERSION = 1
ATTRIBUTE_KEY = "prepkit"
FIELDS = ("image", "mask")
EMPTY_CHUNK = 2**64 - 1
MIN_CHUNK = 1 << 16  # 64 KiB
MAX_CHUNK = 1 << 26  # 64 MiB
MAX_INDEX_ENTRIES = 8192  # 128 KiB of shard index at most
SMALL_ARRAY_CHUNK = 1 << 16  # samples per chunk of the per-sample arrays
GROUP_KEYS = {"zarr_format", "node_type", "attributes", "consolidated_metadata"}


def crc32c(data: bytes | memoryview | np.ndarray) -> int:  # numpy arrays expose the buffer protocol
    """CRC32C (Castagnoli) of ``data``, as Zarr's crc32c codec computes it."""
    return int(_crc32c.crc32c(data.data if isinstance(data, np.ndarray) else data))


@dataclass(frozen=True)
class ShardGeometry:
    """How a field's flat ``bytes`` array is cut into shards and inner chunks."""

    capacity: int  # logical bytes per shard (a multiple of ``chunk``)
    chunk: int  # bytes per inner chunk

    @property
    def chunks_per_shard(self) -> int:
        return self.capacity // self.chunk

    @property
    def index_nbytes(self) -> int:
        return 16 * self.chunks_per_shard + 4

    @staticmethod
    def for_largest_shard(max_shard_bytes: int) -> ShardGeometry:
        """The smallest power-of-two inner chunk (at least 64 KiB) that keeps the shard
        index at most ``MAX_INDEX_ENTRIES`` entries for a shard of ``max_shard_bytes``."""
        needed = max(1, max_shard_bytes)
        chunk = MIN_CHUNK
        while -(-needed // chunk) > MAX_INDEX_ENTRIES and chunk < MAX_CHUNK:
            chunk *= 2
        capacity = max(1, -(-needed // chunk)) * chunk
        return ShardGeometry(capacity=capacity, chunk=chunk)


def encode_shard(payload: bytes | memoryview, geometry: ShardGeometry) -> bytes:
    """A Zarr v3 shard file (sharding_indexed, index at the end, crc32c) holding
    ``payload`` from the shard's first byte on; the rest of the shard is absent."""
    size = len(payload)
    if size > geometry.capacity:
        raise StoreError(f"shard payload of {size} bytes exceeds the shard capacity {geometry.capacity}")
    used = -(-size // geometry.chunk)
    index = np.full((geometry.chunks_per_shard, 2), EMPTY_CHUNK, dtype="<u8")
    index[:used, 0] = np.arange(used, dtype=np.uint64) * geometry.chunk
    index[:used, 1] = geometry.chunk
    index_bytes = index.tobytes()
    padding = bytes(used * geometry.chunk - size)
    return b"".join([bytes(payload), padding, index_bytes, crc32c(index_bytes).to_bytes(4, "little")])


def decode_shard_index(tail: bytes, geometry: ShardGeometry, file_size: int, where: str) -> np.ndarray:
    """Parse and check a shard index read from the end of a shard file.

    Returns an (chunks_per_shard, 2) uint64 array of (offset, nbytes). Raises
    StoreCorruptError naming ``where`` if the checksum fails or an entry points outside
    the file.
    """
    if len(tail) != geometry.index_nbytes:
        raise StoreCorruptError(
            f"{where}: shard file is {file_size} bytes, too short for its "
            f"{geometry.index_nbytes}-byte index"
        )
    body, stored = tail[:-4], int.from_bytes(tail[-4:], "little")
    if crc32c(body) != stored:
        raise StoreCorruptError(f"{where}: shard index checksum mismatch (file damaged or truncated)")
    index = np.frombuffer(body, dtype="<u8").reshape(-1, 2)
    present = index[:, 0] != EMPTY_CHUNK
    data_end = file_size - geometry.index_nbytes
    offsets, sizes = index[present, 0], index[present, 1]
    if np.any(sizes != geometry.chunk) or np.any(offsets > data_end) or np.any(offsets + sizes > data_end):
        raise StoreCorruptError(f"{where}: shard index points outside the shard's data")
    return index


@dataclass
class Attributes:
    """The ``prepkit`` entry of the group attributes."""

    format_version: int
    layout: dict[str, Any]
    num_samples: int
    samples_per_shard: int
    num_shards: int
    fields: dict[str, dict[str, Any]]  # field -> {"layout": {...}, "capacity": .., "chunk": ..}
    class_names: list[str] | None
    provenance: dict[str, Any]
    complete: bool
    # Integrity (prepkit.store.checksums); absent in stores written before they existed.
    checksums: dict[str, Any] | None = None
    generation: str | None = None
    plan_sha256: str | None = None  # digest of the writer's plan: a rerun with the same plan is a no-op
    # Extra per-sample fields (prepkit.store.extras): name -> {"kind", "dtype", "shape"}; absent
    # in stores without any, so those stay byte-identical to what earlier versions wrote.
    extras: dict[str, dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        values = {
            "format_version": self.format_version,
            "layout": self.layout,
            "num_samples": self.num_samples,
            "samples_per_shard": self.samples_per_shard,
            "num_shards": self.num_shards,
            "fields": self.fields,
            "class_names": self.class_names,
            "provenance": self.provenance,
            "complete": self.complete,
        }
        if self.extras:
            values["extras"] = self.extras
        if self.checksums is not None:
            values["checksums"] = self.checksums
        if self.generation is not None:
            values["generation"] = self.generation
        if self.plan_sha256 is not None:
            values["plan_sha256"] = self.plan_sha256
        if self.checksums is not None or self.generation is not None:
            from prepkit.store.checksums import attributes_crc32c

            values["attributes_crc32c"] = attributes_crc32c(values)
        return values

    @staticmethod
    def from_dict(values: dict[str, Any], where: str) -> Attributes:
        """Parse and check the attribute values: every type and range a reader relies on."""
        def fail(what: str) -> StoreError:
            return StoreError(f"{where}: malformed prepkit attributes: {what}")

        def integer(name: str, low: int, container: dict[str, Any] | None = None) -> int:
            value = (values if container is None else container).get(name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low or value >= 2**62:
                raise fail(f"Expected {name!r} to be an integer >= {low}. Got {value!r}.")
            return value

        if not isinstance(values, dict):
            raise fail(f"Expected an object. Got {type(values).__name__}.")
        version = values.get("format_version")
        if version != FORMAT_VERSION:
            raise StoreError(f"{where}: store format version {version!r}, this prepkit reads version {FORMAT_VERSION}")
        num_samples = integer("num_samples", 0)
        samples_per_shard = integer("samples_per_shard", 1)
        num_shards = integer("num_shards", 0)
        fields = values.get("fields")
        if not isinstance(fields, dict) or "image" not in fields:
            raise fail(f"Expected 'fields' to be an object with an 'image' entry. Got {fields!r}.")
        for name, spec in fields.items():
            if not isinstance(spec, dict) or not isinstance(spec.get("layout"), dict):
                raise fail(f"field {name!r}: Expected an object with a 'layout' object. Got {spec!r}.")
            capacity, chunk = integer("capacity", 1, spec), integer("chunk", 1, spec)
            if chunk > MAX_CHUNK:
                raise fail(f"field {name!r}: Expected chunk at most {MAX_CHUNK} bytes. Got {chunk}")
            if capacity % chunk or capacity // chunk > MAX_INDEX_ENTRIES * 64:
                raise fail(f"field {name!r}: capacity {capacity} is not a reasonable multiple of chunk {chunk}")
        class_names = values.get("class_names")
        if class_names is not None and (not isinstance(class_names, list) or not all(isinstance(c, str) for c in class_names)):
            raise fail(f"Expected 'class_names' to be null or a list of strings. Got {class_names!r}.")
        layout = values.get("layout")
        provenance = values.get("provenance", {})
        complete = values.get("complete", False)
        if not isinstance(layout, dict) or not isinstance(provenance, dict) or not isinstance(complete, bool):
            raise fail("Expected 'layout' and 'provenance' objects and a boolean 'complete'. Got other types.")
        checksums = values.get("checksums")
        if checksums is not None and not _valid_checksums(checksums):
            raise fail(f"Expected 'checksums' to hold 'arrays' and 'files' objects of integers. Got {checksums!r}.")
        generation = values.get("generation")
        if generation is not None and not isinstance(generation, str):
            raise fail(f"Expected 'generation' to be a string. Got {generation!r}.")
        plan_sha256 = values.get("plan_sha256")
        if plan_sha256 is not None and not isinstance(plan_sha256, str):
            raise fail(f"Expected 'plan_sha256' to be a string. Got {plan_sha256!r}.")
        extras = values.get("extras")
        if extras is not None:
            from prepkit.store.extras import FieldSpec, FieldValueError, check_name

            if not isinstance(extras, dict):
                raise fail(f"Expected 'extras' to be an object of field schemas. Got {extras!r}.")
            for name, spec in extras.items():
                try:
                    check_name(name)
                except FieldValueError as error:
                    raise fail(f"extra field {name!r}: {error}") from None
                FieldSpec.from_dict(spec, f"{where}: malformed prepkit attributes: extra field {name!r}")
        return Attributes(
            extras=None if extras is None else {str(k): dict(v) for k, v in extras.items()},
            checksums=checksums, generation=generation, plan_sha256=plan_sha256,
            format_version=version, layout=dict(layout), num_samples=num_samples, samples_per_shard=samples_per_shard,
            num_shards=num_shards, fields={str(k): dict(v) for k, v in fields.items()}, class_names=class_names,
            provenance=dict(provenance), complete=complete,
        )


def _valid_checksums(checksums: Any) -> bool:
    if not isinstance(checksums, dict) or set(checksums) != {"arrays", "files"}:
        return False
    return all(
        isinstance(group, dict)
        and all(isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in group.items())
        for group in checksums.values()
    )


def read_group_attributes(root: Path) -> Attributes:
    """Read and check ``zarr.json`` of a store's root group."""
    from prepkit.store.checksums import read_regular

    meta_path = root / "zarr.json"
    if not root.exists():
        raise StoreError(f"store {str(root)!r} does not exist")
    try:
        text = read_regular(meta_path, str(root))
    except FileNotFoundError:
        raise StoreError(f"{root}: not a Zarr v3 store (no zarr.json)") from None
    except (OSError, UnicodeDecodeError) as error:
        raise StoreError(f"{meta_path}: cannot read group metadata ({error})") from None
    return parse_group_attributes(text, str(root))


def parse_group_attributes(text: str | bytes, root: str) -> Attributes:
    """Check the text of a store's root ``zarr.json`` and return its prepkit attributes."""
    from prepkit.store.checksums import check_attributes

    meta_path = f"{root}/zarr.json"
    try:
        meta = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise StoreError(f"{meta_path}: cannot read group metadata ({error})") from None
    if not isinstance(meta, dict) or meta.get("zarr_format") != 3 or meta.get("node_type") != "group":
        raise StoreError(f"{meta_path}: Expected a Zarr v3 group. Got something else.")
    attributes = meta.get("attributes", {})
    values = attributes.get(ATTRIBUTE_KEY) if isinstance(attributes, dict) else None
    if not isinstance(values, dict):
        raise StoreError(f"{root}: a Zarr group, but not a prepkit store (no '{ATTRIBUTE_KEY}' attribute)")
    if "attributes_crc32c" in values:
        # Stores with checksums: nothing in zarr.json may differ from what the writer wrote
        # (a damaged key name would otherwise be ignored silently).
        unknown = sorted(set(meta) - GROUP_KEYS) + sorted(f"attributes.{k}" for k in set(attributes) - {ATTRIBUTE_KEY})
        if unknown:
            raise StoreCorruptError(f"{meta_path}: Expected only the keys a prepkit store writes. Got {unknown}.")
    check_attributes(values, root)
    return Attributes.from_dict(values, root)


def shard_path(root: PathT, field: str, shard: int) -> PathT:
    """The file holding shard ``shard`` of ``field``'s bytes array."""
    return root / field / "bytes" / "c" / str(shard)


def fsync_directory(directory: Path) -> None:
    """Make a rename inside ``directory`` durable."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
