"""Read a store: random access to samples straight from the shard files.

The per-sample arrays (ranges, shapes, labels, checksums) are small and read once with
zarr-python when the store is opened. Sample bytes are not: a zarr-python call costs
1 to 3 ms per random read, so the reader memory-maps each shard file, reads its Zarr
shard index once (checking its CRC32C) and slices the sample's bytes out directly.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prepkit.errors import CodecError, DecodeError, StoreCorruptError, StoreError
from prepkit.layouts import Layout, layout_from_dict
from prepkit.store.checksums import check_arrays, check_files, check_store_files, open_regular
from prepkit.store.extras import GROUP as EXTRAS_GROUP
from prepkit.store.extras import ExtraColumn, FieldSpec
from prepkit.store.format import (
    EMPTY_CHUNK,
    Attributes,
    ShardGeometry,
    crc32c,
    decode_shard_index,
    parse_group_attributes,
    read_group_attributes,
    shard_path,
)
from prepkit.store.storage import ObjectPath, ObjectRoot, is_url

PATH_BYTES_PER_SAMPLE = 4096  # PATH_MAX on Linux: the longest source path a store can record


def _count_lines(path: Path, where: str) -> int:
    """Lines of a text file in the store, 0 if it does not exist (read in blocks)."""
    try:
        fd = open_regular(path, where)
    except FileNotFoundError:
        return 0
    lines = 0
    with os.fdopen(fd, "rb") as handle:
        while block := handle.read(1 << 20):
            lines += block.count(b"\n")
    return lines


def check_labels(labels: np.ndarray, class_names: list[str] | None, where: str) -> None:
    """Labels are -1 (none) or a class index; with class names, an index into them."""
    if not labels.size:
        return
    low, high = int(labels.min()), int(labels.max())
    if low < -1:
        raise StoreCorruptError(f"{where}: Expected labels >= -1 (-1: no label). Got {low}.")
    if class_names is not None and high >= len(class_names):
        raise StoreCorruptError(
            f"{where}: Expected labels below {len(class_names)} (the number of class names). Got {high}."
        )


class _ShardFile:
    """One memory-mapped shard file and its parsed index."""

    def __init__(self, path: Path, geometry: ShardGeometry, where: str) -> None:
        try:
            # O_NONBLOCK and a regular-file check first: a FIFO in place of a shard file
            # must be refused, not waited on.
            with os.fdopen(open_regular(path, where), "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < geometry.index_nbytes:
                    raise StoreCorruptError(
                        f"{where}: shard file {path} is {size} bytes, shorter than its index "
                        f"({geometry.index_nbytes} bytes): truncated"
                    )
                self.map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise StoreCorruptError(f"{where}: shard file {path} is missing") from None
        except OSError as error:
            raise StoreError(f"{where}: cannot open shard file {path}: {error}") from None
        self.path = path
        self.chunk = geometry.chunk
        tail = self.map[size - geometry.index_nbytes :]
        self.index = decode_shard_index(tail, geometry, size, f"{where}: {path}")
        self.array = np.frombuffer(self.map, dtype=np.uint8)
        offsets = self.index[:, 0]
        present = offsets != EMPTY_CHUNK
        used = int(np.argmin(present)) if not present.all() else len(present)
        # prepkit (and zarr-python) lay a shard's chunks out back to back in order: then a
        # sample's bytes are one slice. Anything else is read chunk by chunk.
        expected = offsets[0] + np.arange(used, dtype=np.uint64) * self.chunk if used else offsets[:0]
        self.contiguous = bool(np.all(offsets[:used] == expected)) and not present[used:].any()
        self.base = int(offsets[0]) if used else 0
        self.used_bytes = used * self.chunk

    def read(self, start: int, stop: int) -> np.ndarray:
        """Bytes [start, stop) of this shard's logical range, as a read-only view or copy."""
        if self.contiguous:
            if stop > self.used_bytes:
                raise StoreCorruptError(f"{self.path}: sample bytes [{start}, {stop}) lie beyond the stored chunks")
            return self.array[self.base + start : self.base + stop]
        if stop - start > self.array.size:
            # A sample's bytes lie in the file: a range larger than the file must not decide
            # an allocation.
            raise StoreCorruptError(
                f"{self.path}: Expected sample bytes [{start}, {stop}) to fit in the {self.array.size}-byte shard file. "
                f"Got {stop - start} bytes."
            )
        out = np.empty(stop - start, dtype=np.uint8)
        position = start
        while position < stop:
            chunk, within = divmod(position, self.chunk)
            take = min(self.chunk - within, stop - position)
            offset = int(self.index[chunk, 0])
            if offset == EMPTY_CHUNK:
                out[position - start : position - start + take] = 0
            else:
                out[position - start : position - start + take] = self.array[offset + within : offset + within + take]
            position += take
        return out

    def physical(self, start: int, stop: int) -> np.ndarray:
        """Bytes [start, stop) of the shard file itself."""
        return self.array[start:stop]

    def close(self) -> None:
        self.array = None  # type: ignore[assignment]
        try:
            self.map.close()
        except BufferError:
            pass  # a caller still holds a view; the map closes when it is released


class _RemoteShardFile:
    """One shard object in object storage: its index read once, sample bytes by ranged GETs.

    The same interface as :class:`_ShardFile`; a truncated object fails here with its URL.
    """

    def __init__(self, root: ObjectRoot, key: str, geometry: ShardGeometry, where: str, fetcher: Any = None) -> None:
        self.root, self.key, self.fetcher = root, key, fetcher
        self.path = root.path(key)
        self.chunk = geometry.chunk
        try:
            size = root.size(key)
        except StoreError as error:
            if "does not exist" in str(error):
                raise StoreCorruptError(f"{where}: shard file {self.path} is missing") from None
            raise
        if size < geometry.index_nbytes:
            raise StoreCorruptError(
                f"{where}: shard file {self.path} is {size} bytes, shorter than its index "
                f"({geometry.index_nbytes} bytes): truncated"
            )
        self.size = size
        tail = root.get_range(key, size - geometry.index_nbytes, size)
        self.index = decode_shard_index(tail, geometry, size, f"{where}: {self.path}")
        offsets = self.index[:, 0]
        present = offsets != EMPTY_CHUNK
        used = int(np.argmin(present)) if not present.all() else len(present)
        expected = offsets[0] + np.arange(used, dtype=np.uint64) * self.chunk if used else offsets[:0]
        self.contiguous = bool(np.all(offsets[:used] == expected)) and not present[used:].any()
        self.base = int(offsets[0]) if used else 0
        self.used_bytes = used * self.chunk

    def physical(self, start: int, stop: int) -> np.ndarray:
        """Bytes [start, stop) of the shard object itself (one ranged GET, or cached blocks)."""
        stop = min(stop, self.size)
        if self.fetcher is not None and stop > start:
            return np.frombuffer(self.fetcher.read(self.key, start, stop), dtype=np.uint8)
        return np.frombuffer(self.root.get_range(self.key, start, stop), dtype=np.uint8)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Bytes [start, stop) of this shard's logical range."""
        if self.contiguous:
            if stop > self.used_bytes:
                raise StoreCorruptError(f"{self.path}: sample bytes [{start}, {stop}) lie beyond the stored chunks")
            return self.physical(self.base + start, self.base + stop)
        out = np.zeros(stop - start, dtype=np.uint8)
        position = start
        while position < stop:
            chunk, within = divmod(position, self.chunk)
            take = min(self.chunk - within, stop - position)
            offset = int(self.index[chunk, 0])
            if offset != EMPTY_CHUNK:
                out[position - start : position - start + take] = self.physical(offset + within, offset + within + take)
            position += take
        return out

    def close(self) -> None:
        pass


@dataclass
class FieldArrays:
    """The per-sample arrays of one field ("image" or "mask")."""

    name: str
    layout: Layout
    geometry: ShardGeometry
    ranges: np.ndarray  # (N, 2) uint64
    shapes: np.ndarray  # (N, 3) uint32
    crc32c: np.ndarray  # (N,) uint32


class Store:
    """A prepkit store opened for reading. ``store[i]`` is a decoded sample.

    Thread-safe for reading; open many in as many processes as you like.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, check_crc: bool = False, storage_options: dict[str, Any] | None = None
    ) -> None:
        self.storage_options = dict(storage_options or {})
        self.remote: ObjectRoot | None = None
        self.path: Path | ObjectPath
        if is_url(path):
            self.remote = ObjectRoot(str(path), self.storage_options)
            self.path = self.remote.path()
            try:
                text = self.remote.get("zarr.json")
            except StoreError as error:
                if "does not exist" in str(error):
                    raise StoreError(f"{self.path}: not a Zarr v3 store (no zarr.json)") from None
                raise
            self.attributes: Attributes = parse_group_attributes(text, str(self.path))
        else:
            self.path = Path(path)
            self.attributes = read_group_attributes(self.path)
        if not self.attributes.complete:
            raise StoreError(
                f"{self.path}: store is incomplete (still being written, or its writer was "
                "interrupted; run the same prepkit command again to finish it)"
            )
        self.check_crc = check_crc
        self.fetcher: Any = None  # a prepkit.reader.remote.BlockFetcher once a cache is attached
        self.cache_settings: dict[str, Any] | None = None  # attach_cache's arguments, once called
        self._shards: dict[tuple[str, int], _ShardFile | _RemoteShardFile] = {}
        self._lock = threading.Lock()
        self._bound_sizes()
        self._load_arrays()
        self._check_values()

    def _bound_sizes(self) -> None:
        """Check every size the metadata states against what is on disk, before any of them
        decides an allocation or a loop; refuse non-regular files (a FIFO would block).

        Remote stores have no FIFOs, and their array contents are checked against the
        recorded checksums once loaded (``_check_values``)."""
        if not isinstance(self.path, Path):
            return
        where = str(self.path)
        check_store_files(self.path, where, skip_shards=True)
        checksums = self.attributes.checksums
        if checksums is not None:
            # Every array's zarr.json is checked byte for byte before zarr-python parses it.
            check_files(self.path, where, checksums["files"])
        attributes = self.attributes
        # Each stored sample has at least one byte in an image shard file.
        shard_folder = self.path / "image" / "bytes" / "c"
        on_disk = 0
        try:
            with os.scandir(shard_folder) as entries:
                for entry in entries:
                    on_disk += entry.stat().st_size
        except OSError:
            pass
        if attributes.num_samples > on_disk:
            raise StoreCorruptError(
                f"{where}: Expected num_samples at most {on_disk} (the bytes of the image shard files). "
                f"Got {attributes.num_samples}."
            )
        # A shard with no file held only skipped items: each is a line of skipped.jsonl.
        skipped = _count_lines(self.path / "skipped.jsonl", where)
        if attributes.num_shards > attributes.num_samples + skipped:
            raise StoreCorruptError(
                f"{where}: Expected num_shards at most {attributes.num_samples + skipped} "
                f"(stored samples plus skipped items). Got {attributes.num_shards}."
            )

    def _check_values(self) -> None:
        """Checksums (stores that have them) and value ranges of the per-sample arrays."""
        where = str(self.path)
        checksums = self.attributes.checksums
        if checksums is not None:
            arrays = {"labels": self.labels, "paths": self._paths, "path_ranges": self._path_ranges}
            for name, field in self.field_arrays.items():
                arrays.update({f"{name}/ranges": field.ranges, f"{name}/shapes": field.shapes, f"{name}/crc32c": field.crc32c})
            for name, column in self.extra_columns.items():
                arrays[f"{EXTRAS_GROUP}/{name}/values"] = column.values
                if column.ranges is not None:
                    arrays[f"{EXTRAS_GROUP}/{name}/ranges"] = column.ranges
            check_arrays(where, checksums["arrays"], arrays)
        elif self.extra_columns:
            raise StoreCorruptError(f"{where}: Expected checksums in a store with extra fields. Got none.")
        for column in self.extra_columns.values():
            column.check(self.attributes.num_samples, where)
        check_labels(self.labels, self.attributes.class_names, where)

    def _load_arrays(self) -> None:
        import zarr

        where = str(self.path)
        count = self.attributes.num_samples

        def load(group: Any, name: str, shape: tuple[int, ...] | None, dtype: Any) -> np.ndarray:
            # Check the shape before reading: a damaged zarr.json must not make us allocate
            # whatever size it claims.
            array = group[name]
            if array.dtype != np.dtype(dtype):
                raise StoreCorruptError(f"{where}: Expected array {name!r} of dtype {np.dtype(dtype)}. Got {array.dtype}.")
            if shape is None and len(array.shape) == 1 and array.shape[0] > PATH_BYTES_PER_SAMPLE * max(1, count):
                raise StoreCorruptError(
                    f"{where}: Expected array {name!r} of at most {PATH_BYTES_PER_SAMPLE} bytes per sample. "
                    f"Got shape {tuple(array.shape)} for {count} samples."
                )
            if shape is not None and tuple(array.shape) != shape:
                raise StoreCorruptError(f"{where}: array {name!r}: Expected shape {shape}. Got {tuple(array.shape)}.")
            if shape is None and (len(array.shape) != 1 or array.shape[0] > (1 << 34)):
                raise StoreCorruptError(f"{where}: array {name!r} has an implausible shape {tuple(array.shape)}")
            return np.asarray(array[...], dtype=dtype)

        try:
            location = self.remote.zarr_store() if self.remote is not None else self.path
            root = zarr.open_group(location, mode="r")
            self.labels: np.ndarray = load(root, "labels", (count,), np.int64)
            self._paths = load(root, "paths", None, np.uint8)
            self._path_ranges = load(root, "path_ranges", (count, 2), np.uint64)
            self.field_arrays: dict[str, FieldArrays] = {}
            for name, spec in self.attributes.fields.items():
                group = root[name]
                self.field_arrays[name] = FieldArrays(
                    name=name,
                    layout=layout_from_dict(spec["layout"]),
                    geometry=ShardGeometry(capacity=int(spec["capacity"]), chunk=int(spec["chunk"])),
                    ranges=load(group, "ranges", (count, 2), np.uint64),
                    shapes=load(group, "shapes", (count, 3), np.uint32),
                    crc32c=load(group, "crc32c", (count,), np.uint32),
                )
            self.extra_columns: dict[str, ExtraColumn] = {}
            for name, values in (self.attributes.extras or {}).items():
                extra_spec = FieldSpec.from_dict(values, f"{where}: extra field {name!r}")
                extra_group: Any = root[f"{EXTRAS_GROUP}/{name}"]
                if extra_spec.ragged:
                    ranges = load(extra_group, "ranges", (count, 2), np.uint64)
                    # Rows are bounded by the checksummed metadata (a store with extras has
                    # checksums) and, as paths are, by a generous per-sample budget.
                    array = extra_group["values"]
                    rows = int(array.shape[0]) if len(array.shape) else -1
                    if len(array.shape) != len(extra_spec.shape) or rows * max(1, int(np.prod(extra_spec.trailing))) > (1 << 20) * max(1, count):
                        raise StoreCorruptError(f"{where}: extra field {name!r}: implausible values shape {tuple(array.shape)}")
                    column = ExtraColumn(name, extra_spec, load(extra_group, "values", tuple(array.shape), extra_spec.dtype), ranges)
                else:
                    column = ExtraColumn(name, extra_spec, load(extra_group, "values", (count, *extra_spec.trailing), extra_spec.dtype), None)
                self.extra_columns[name] = column
        except StoreError:
            raise
        except Exception as error:  # zarr raises many types for missing or broken metadata
            raise StoreError(f"{where}: cannot read the store's per-sample arrays ({type(error).__name__}: {error})") from None
        if self._path_ranges.size and (np.any(self._path_ranges[:, 1] < self._path_ranges[:, 0]) or self._path_ranges.max() > self._paths.size):
            raise StoreCorruptError(f"{where}: path ranges point outside the paths array")
        arrays = [self.labels, self._path_ranges] + [a for f in self.field_arrays.values() for a in (f.ranges, f.shapes, f.crc32c)]
        if any(a.shape[0] != count for a in arrays):
            raise StoreCorruptError(f"{where}: per-sample arrays do not all have {count} entries")
        if "image" not in self.field_arrays:
            raise StoreCorruptError(f"{where}: store has no image field")
        for field in self.field_arrays.values():
            geometry = field.geometry
            starts, stops = field.ranges[:, 0], field.ranges[:, 1]
            shard_of_start = starts // np.uint64(geometry.capacity)
            if np.any(stops < starts) or np.any(stops - shard_of_start * np.uint64(geometry.capacity) > np.uint64(geometry.capacity)):
                raise StoreCorruptError(f"{where}: {field.name} byte ranges are inconsistent")
            if np.any(shard_of_start >= np.uint64(max(1, self.attributes.num_shards))):
                raise StoreCorruptError(f"{where}: {field.name} byte ranges point past the last shard")
            shapes = field.shapes.astype(np.int64)
            pixels = shapes[:, 0] * shapes[:, 1] * shapes[:, 2]
            if shapes.size and (not np.isin(shapes[:, 2], (1, 3, 4)).all() or pixels.max() > 1 << 32):
                raise StoreCorruptError(f"{where}: {field.name} shapes: Expected channels 1, 3 or 4. Got implausible shapes.")
            if field.layout.name == "raw" and not np.array_equal((stops - starts).astype(np.int64), pixels):
                raise StoreCorruptError(f"{where}: {field.name} raw byte ranges do not match the recorded shapes")
        self._image = self.field_arrays["image"]

    # -- description ------------------------------------------------------------------
    @property
    def layout(self) -> str:
        """Name of the image layout: "raw", "jpeg" or "lossless"."""
        return self._image.layout.name

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.field_arrays)

    @property
    def extra_fields(self) -> dict[str, FieldSpec]:
        """The schema of the store's extra per-sample fields (``prepkit.store.extras``)."""
        return {name: column.spec for name, column in self.extra_columns.items()}

    def extra(self, index: int, name: str) -> Any:
        """Sample ``index``'s extra field ``name``: int, float, str, bytes or a numpy array."""
        column = self.extra_columns.get(name)
        if column is None:
            raise KeyError(f"{self.path}: Expected an extra field among {sorted(self.extra_columns)}. Got {name!r}.")
        return column.get(self._index(index))

    @property
    def class_names(self) -> list[str] | None:
        return self.attributes.class_names

    @property
    def num_shards(self) -> int:
        return self.attributes.num_shards

    def __len__(self) -> int:
        return self.attributes.num_samples

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r}, layout={self.layout!r}, samples={len(self)}, fields={self.fields})"

    def _index(self, index: int) -> int:
        count = self.attributes.num_samples
        position = int(index)
        if position < 0:
            position += count
        if not 0 <= position < count:
            raise IndexError(f"sample index {index} out of range for a store of {count} samples")
        return position

    def shape(self, index: int, field: str = "image") -> tuple[int, int, int]:
        h, w, c = self.field_arrays[field].shapes[self._index(index)]
        return int(h), int(w), int(c)

    def label(self, index: int) -> int | None:
        value = int(self.labels[self._index(index)])
        return None if value < 0 else value

    def source_path(self, index: int) -> str:
        start, stop = self._path_ranges[self._index(index)]
        return os.fsdecode(self._paths[int(start) : int(stop)].tobytes())

    def shard_of(self, index: int, field: str = "image") -> int:
        start = int(self.field_arrays[field].ranges[self._index(index), 0])
        return start // self.field_arrays[field].geometry.capacity

    # -- bytes and samples ------------------------------------------------------------
    def _shard(self, field: FieldArrays, shard: int) -> _ShardFile | _RemoteShardFile:
        key = (field.name, shard)
        handle = self._shards.get(key)
        if handle is None:
            with self._lock:
                handle = self._shards.get(key)
                if handle is None:
                    if self.remote is not None:
                        name = f"{field.name}/bytes/c/{shard}"
                        handle = _RemoteShardFile(self.remote, name, field.geometry, str(self.path), self.fetcher)
                    else:
                        assert isinstance(self.path, Path)
                        self._check_generation()
                        handle = _ShardFile(shard_path(self.path, field.name, shard), field.geometry, str(self.path))
                    self._shards[key] = handle
        return handle

    def _check_generation(self) -> None:
        """Refuse to mix stores: the store on disk must still be the one this handle opened
        (``prepkit shard --overwrite`` may have replaced it). Checked at each shard open."""
        assert isinstance(self.path, Path)
        try:
            current = read_group_attributes(self.path)
        except StoreError as error:
            raise StoreError(f"{self.path}: the store changed since it was opened ({error}); open it again") from None
        if current.to_dict() != self.attributes.to_dict():
            raise StoreError(
                f"{self.path}: the store was replaced since it was opened. "
                f"Expected generation {self.attributes.generation}. Got {current.generation}. Open it again."
            )

    def read_bytes(self, index: int, field: str = "image") -> np.ndarray:
        """The stored bytes of sample ``index`` (a read-only view into the shard file)."""
        arrays = self.field_arrays[field]
        position = self._index(index)
        start, stop = arrays.ranges[position].tolist()
        capacity = arrays.geometry.capacity
        shard = start // capacity
        if stop == start:
            data = np.zeros(0, dtype=np.uint8)
        else:
            data = self._shard(arrays, shard).read(start - shard * capacity, stop - shard * capacity)
        if self.check_crc and crc32c(data) != int(arrays.crc32c[position]):
            raise StoreCorruptError(
                f"{self.path}: sample {position} ({field}) fails its CRC32C check "
                f"(shard file {shard_path(self.path, field, shard)})"
            )
        return data

    def decode(self, index: int, field: str = "image") -> np.ndarray:
        """Sample ``index``'s ``field`` decoded to an H x W x C uint8 array."""
        arrays = self.field_arrays[field]
        position = self._index(index)
        data = self.read_bytes(position, field)
        shape = tuple(arrays.shapes[position].tolist())
        try:
            image = arrays.layout.decode(data, shape)
        except CodecError as error:
            raise DecodeError(f"{self.path}: sample {position} ({field}): {error}") from None
        if tuple(image.shape) != shape:
            raise DecodeError(
                f"{self.path}: sample {position} ({field}): Expected a decoded image of the recorded shape "
                f"{shape}. Got {tuple(image.shape)}."
            )
        return image

    def __getitem__(self, index: int) -> dict[str, Any]:
        position = self._index(index)
        sample: dict[str, Any] = {name: self.decode(position, name) for name in self.field_arrays}
        label = int(self.labels[position])
        sample["label"] = None if label < 0 else label
        for name, column in self.extra_columns.items():
            sample[name] = column.get(position)
        return sample

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for index in range(len(self)):
            yield self[index]

    def attach_cache(
        self, cache_dir: str | os.PathLike[str], cache_limit: int, *, block_size: int = 8 << 20,
        policy: str = "next-use", ahead: int = 8,
    ) -> None:
        """Read this remote store in blocks through an on-disk cache, ahead of a Reader's order.

        ``cache_dir`` may be shared by the processes of a node; ``cache_limit`` bounds it in
        bytes; ``policy`` "next-use" evicts along the Reader's known schedule ("lru" for
        comparison). See :mod:`prepkit.reader.remote`.
        """
        from prepkit.reader.remote import BlockFetcher
        from prepkit.store.cache import BlockCache

        if self.remote is None:
            raise StoreError(f"{self.path}: Expected a store in object storage for a cache. Got a local store.")
        self.close()
        if self.fetcher is not None:
            self.fetcher.close()
        self.fetcher = BlockFetcher(self, BlockCache(cache_dir, cache_limit, policy), block_size=block_size, ahead=ahead)
        # Kept for pickling: a worker process that receives this store reads through the same cache.
        self.cache_settings = {
            "cache_dir": os.fspath(cache_dir), "cache_limit": int(cache_limit), "block_size": int(block_size),
            "policy": policy, "ahead": int(ahead),
        }

    def close(self) -> None:
        with self._lock:
            for handle in self._shards.values():
                handle.close()
            self._shards.clear()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        # Picklable for DataLoader and spawn workers: they reopen the shard files themselves
        # and, for a remote store with a cache, attach the same (node-shared) cache.
        return {"path": str(self.path), "check_crc": self.check_crc, "storage_options": self.storage_options,
                "cache": None if self.cache_settings is None else dict(self.cache_settings)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["path"], check_crc=state["check_crc"], storage_options=state.get("storage_options")
        )
        cache = state.get("cache")
        if cache:
            options = {key: value for key, value in cache.items() if key not in ("cache_dir", "cache_limit")}
            self.attach_cache(cache["cache_dir"], cache["cache_limit"], **options)


def open_store(
    path: str | os.PathLike[str], *, check_crc: bool = False, storage_options: dict[str, Any] | None = None,
    cache_dir: str | os.PathLike[str] | None = None, cache_limit: int | None = None, cache_policy: str = "next-use",
    block_size: int = 8 << 20,
) -> Store:
    """Open the prepkit store at ``path`` for reading.

    ``store[i]`` returns ``{"image": HxWxC uint8, "label": int | None}`` (plus ``"mask"``
    when the store has masks, and each extra field by name: int, float, str, bytes or a
    numpy array; ``store.extra_fields`` is their schema). With ``check_crc=True`` every read is checked against the
    sample's CRC32C.

    ``path`` may be a URL (``s3://bucket/prefix``, ``gs://``, ``az://``, ``http(s)://``):
    credentials and endpoint come from the environment (``AWS_*``) and ``storage_options``
    (obstore keys such as ``endpoint``, ``access_key_id``, ``secret_access_key``, ``region``).
    With ``cache_dir`` (and ``cache_limit`` in bytes, default 10 GiB) a remote store is read in
    ``block_size`` blocks through a per-node on-disk cache, prefetched along a Reader's order.
    """
    store = Store(path, check_crc=check_crc, storage_options=storage_options)
    if cache_dir is not None:
        store.attach_cache(cache_dir, cache_limit or (10 << 30), block_size=block_size, policy=cache_policy)
    return store
