"""Write a store: whole shards only, each renamed into place, the store marked complete last.

The writer is crash-safe and resumable. While it runs, ``DEST/.prepkit/`` holds the plan
(``plan.json``: everything that decides the bytes written) and one metadata file per
finished shard. A shard file is written under a temporary name and renamed into place,
then its metadata file is renamed into place: a shard counts as done only when both
exist. Killed at any moment, the same command run again finds the plan unchanged, skips
the done shards and writes the rest; the result is byte-identical to an uninterrupted
run. Only at the end are the per-sample arrays written and the group attribute
``complete`` set to true; readers refuse a store without it.

A second writer to the same destination is refused: ``DEST/.prepkit.lock`` is held with
``flock`` for the whole run.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from prepkit.errors import IngestError, PrepkitError, StoreError
from prepkit.layouts import Layout
from prepkit.parallel import run_ordered
from prepkit.store import extras as extra_fields
from prepkit.store.checksums import array_crc32c, file_checksums, generation_id
from prepkit.store.format import (
    ATTRIBUTE_KEY,
    FORMAT_VERSION,
    SMALL_ARRAY_CHUNK,
    Attributes,
    ShardGeometry,
    crc32c,
    encode_shard,
    fsync_directory,
    shard_path,
)

STAGING = ".prepkit"
LOCK_NAME = ".prepkit.lock"


@dataclass
class EncodedSample:
    """One sample ready to store: its stored bytes and decoded shape per field."""

    item: int  # index of the source item
    relpath: str
    label: int | None
    fields: dict[str, tuple[bytes, tuple[int, int, int]]]
    # Extra fields: name -> the value normalised by ``prepkit.store.extras.normalize``
    # (one entry per field of the plan's ``extras`` schema).
    extras: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class SampleFailure:
    """A source item that could not be stored, with the reason."""

    item: int
    path: str
    reason: str


@dataclass
class StorePlan:
    """Everything that decides the bytes of the store (a resumed run must match it)."""

    num_items: int
    samples_per_shard: int
    fields: dict[str, dict[str, Any]]  # field -> {"layout": {...}, "capacity": int, "chunk": int}
    class_names: list[str] | None
    provenance: dict[str, Any]
    items_digest: str  # digest of the ordered source list (and of the extra field values)
    extras: dict[str, dict[str, Any]] = field(default_factory=dict)  # extra field -> FieldSpec.to_dict()

    @property
    def num_shards(self) -> int:
        return -(-self.num_items // self.samples_per_shard) if self.num_items else 0

    def geometry(self, name: str) -> ShardGeometry:
        spec = self.fields[name]
        return ShardGeometry(capacity=int(spec["capacity"]), chunk=int(spec["chunk"]))

    def shard_items(self, shard: int) -> range:
        start = shard * self.samples_per_shard
        return range(start, min(start + self.samples_per_shard, self.num_items))

    def extra_specs(self) -> dict[str, extra_fields.FieldSpec]:
        return {name: extra_fields.FieldSpec.from_dict(spec, f"extra field {name!r}") for name, spec in self.extras.items()}

    def to_dict(self) -> dict[str, Any]:
        values = {
            "format_version": FORMAT_VERSION,
            "num_items": self.num_items,
            "samples_per_shard": self.samples_per_shard,
            "fields": self.fields,
            "class_names": self.class_names,
            "provenance": self.provenance,
            "items_digest": self.items_digest,
        }
        if self.extras:  # absent without extra fields: plans (and plan digests) stay as before
            values["extras"] = self.extras
        return values


Shape = tuple[int, int, int]


def plan_store(
    layouts: Mapping[str, Layout],
    shapes: Mapping[str, Sequence[Shape | None]],
    samples_per_shard: int,
    *,
    class_names: list[str] | None,
    provenance: dict[str, Any],
    items_digest: str,
    extras: Mapping[str, extra_fields.FieldSpec] | None = None,
) -> StorePlan:
    """The one way to make a StorePlan: shard capacities from per-item size bounds.

    ``shapes[field][i]`` is the (height, width, channels) of item ``i`` in that field, or
    an upper bound of it, or None for an item that cannot be stored (it will be reported
    as a bad sample). Each field's shard capacity is the largest sum of its layout's
    ``max_stored_size`` over the items of one shard.

    ``extras`` is the schema of the extra per-sample fields (``prepkit.store.extras``): every
    EncodedSample then carries one normalised value per field. ``items_digest`` must cover
    those values, so that a resumed run with other values starts over.
    """
    for name in extras or {}:
        extra_fields.check_name(name)
    counts = {len(per_item) for per_item in shapes.values()}
    if len(counts) != 1 or set(shapes) != set(layouts):
        raise StoreError(f"Expected one shape list per field of {sorted(layouts)}. Got {sorted(shapes)} with lengths {sorted(counts)}.")
    num_items = counts.pop()
    fields: dict[str, dict[str, Any]] = {}
    for name, layout in layouts.items():
        largest = 0
        for start in range(0, num_items, samples_per_shard):
            total = 0
            for shape in shapes[name][start : start + samples_per_shard]:
                if shape is not None:
                    total += _stored_size_bound(layout, shape)
            largest = max(largest, total)
        geometry = ShardGeometry.for_largest_shard(largest)
        fields[name] = {"layout": layout.to_dict(), "capacity": geometry.capacity, "chunk": geometry.chunk}
    return StorePlan(
        num_items=num_items,
        samples_per_shard=samples_per_shard,
        fields=fields,
        class_names=class_names,
        provenance=provenance,
        items_digest=items_digest,
        extras={name: spec.to_dict() for name, spec in (extras or {}).items()},
    )


def _stored_size_bound(layout: Layout, shape: Shape) -> int:
    """The layout's bound, or 0 for a shape it cannot store (the item will fail to encode)."""
    try:
        return layout.max_stored_size(*shape)
    except (PrepkitError, ValueError):
        return 0


@dataclass
class WriteSummary:
    num_samples: int
    num_shards_written: int
    num_shards_resumed: int
    failures: list[SampleFailure] = field(default_factory=list)
    already_complete: bool = False  # the store was complete with the same plan: nothing written


def _write_atomic(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + ".tmp")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError:
        _discard(temporary)
        raise


def _discard(temporary: Path) -> None:
    """Remove a temporary file after a failed write (a full disk must not keep it)."""
    try:
        temporary.unlink()
    except OSError:
        pass


def write_error(dest: Path, error: OSError, file: Path | str | None = None) -> StoreError:
    """A write failure (disk full, permissions, ...) as an error naming DEST and the file."""
    name = file if file is not None else (error.filename or "a store file")
    reason = error.strerror or str(error)
    return StoreError(f"cannot write the store at DEST {str(dest)!r}: writing {str(name)!r} failed: {reason}")


def plan_digest(plan: StorePlan) -> str:
    """The digest a complete store records of the plan it was made from (``plan_sha256``)."""
    return hashlib.sha256(json.dumps(plan.to_dict(), sort_keys=True).encode()).hexdigest()


def _recorded_plan_digest(dest: Path) -> str | None:
    try:
        meta = json.loads((dest / "zarr.json").read_text())
        value = meta["attributes"][ATTRIBUTE_KEY].get("plan_sha256")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _is_prepkit_destination(dest: Path) -> bool:
    """True if ``dest`` holds a prepkit store (finished or not), so replacing it is safe."""
    return (dest / STAGING).is_dir() or (dest / "zarr.json").is_file() or (dest / LOCK_NAME).exists()


def _marked_complete(dest: Path) -> bool:
    try:
        meta = json.loads((dest / "zarr.json").read_text())
        return bool(meta["attributes"][ATTRIBUTE_KEY]["complete"])
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _remove_leftovers(dest: Path) -> None:
    """Delete what a killed run leaves behind: temporary files (ours: ``*.tmp``,
    ``*.tmp.npz``; zarr-python's: ``*.partial``) and, once complete, the staging folder."""
    for folder, _, names in os.walk(dest):
        for name in names:
            if name.endswith((".tmp", ".tmp.npz", ".partial")):
                os.unlink(os.path.join(folder, name))
    if _marked_complete(dest) and (dest / STAGING).is_dir():
        shutil.rmtree(dest / STAGING)


def _clean_finished(dest: Path) -> None:
    """A writer killed after marking the store complete left its staging folder: remove it,
    unless a writer holds the lock right now."""
    with open(dest / LOCK_NAME, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        try:
            _remove_leftovers(dest)
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def check_destination(dest: str | os.PathLike[str], overwrite: bool) -> None:
    """Refuse early (before any work) a destination that must not be written."""
    path = Path(dest)
    if path.exists() and not path.is_dir():
        raise StoreError(f"destination {str(path)!r} exists and is not a folder")
    if overwrite or not path.is_dir() or not any(c.name != LOCK_NAME for c in path.iterdir()):
        return
    if not _is_prepkit_destination(path):
        raise StoreError(f"destination {str(path)!r} exists and is not empty (use --overwrite to replace it)")
    if (path / STAGING).is_dir() and _marked_complete(path):
        _clean_finished(path)
    if not _marked_complete(path) and not (path / STAGING).is_dir():
        raise StoreError(f"destination {str(path)!r} holds a damaged store (use --overwrite to replace it)")
    # A complete store: the writer compares its plan and finishes at once if they match.


class ShardSink(Protocol):
    """Takes each shard file away as soon as it is committed (an upload to object storage:
    :class:`prepkit.store.publish.StreamingUpload`), so the local folder never holds the store.

    ``start(writer)`` runs once the writer knows its resumed shards and returns those of them
    whose files are gone locally and were not taken away safely (the writer writes them
    again); ``shard_written(writer, shard)`` runs after each shard's commit; ``settle()``
    before the per-sample arrays are written (every shard taken away, or an error).
    """

    def start(self, writer: StoreWriter) -> set[int]: ...

    def shard_written(self, writer: StoreWriter, shard: int) -> None: ...

    def settle(self) -> None: ...


# (folder, sink): a writer of exactly that folder hands its shards to the sink. A context
# variable rather than an argument: the writer sits under several builders (images, datasets,
# convert) that need not know about object storage.
SHARD_SINK: ContextVar[tuple[Path, ShardSink] | None] = ContextVar("prepkit_shard_sink", default=None)


class StoreWriter:
    """Writes one store shard by shard; use as a context manager (or call ``write_all``)."""

    def __init__(self, dest: str | os.PathLike[str], plan: StorePlan, *, overwrite: bool) -> None:
        self.dest = Path(dest)
        self.plan = plan
        self.overwrite = overwrite
        self.resumed_shards: set[int] = set()
        self.already_complete = False
        self._lock_handle: Any = None
        bound = SHARD_SINK.get()
        self.sink = bound[1] if bound is not None and bound[0].resolve() == self.dest.resolve() else None

    # -- set-up -----------------------------------------------------------------------
    def __enter__(self) -> StoreWriter:
        try:
            self._prepare()
            if self.sink is not None and not self.already_complete:
                for shard in self.sink.start(self):
                    # Committed, but its files are lost: write it again.
                    (self.dest / STAGING / f"shard-{shard}.npz").unlink()
                    self.resumed_shards.discard(shard)
        except (OSError, StoreError) as error:
            self.close()
            if isinstance(error, StoreError):
                raise
            raise write_error(self.dest, error) from None
        return self

    def shard_keys(self, shard: int) -> list[str]:
        """The keys (paths relative to the store) of shard ``shard``'s files, one per field."""
        return [shard_path(self.dest, name, shard).relative_to(self.dest).as_posix() for name in self.plan.fields]

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._lock_handle is not None:
            fcntl.flock(self._lock_handle, fcntl.LOCK_UN)
            self._lock_handle.close()
            self._lock_handle = None

    def _acquire_lock(self) -> None:
        self.dest.mkdir(parents=True, exist_ok=True)
        handle = open(self.dest / LOCK_NAME, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise StoreError(f"{self.dest}: another prepkit process is writing this store (lock held)") from None
        self._lock_handle = handle

    def _clear_destination(self) -> None:
        for child in self.dest.iterdir():
            if child.name == LOCK_NAME:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()

    def _prepare(self) -> None:
        dest = self.dest
        if dest.exists() and not dest.is_dir():
            raise StoreError(f"destination {str(dest)!r} exists and is not a folder")
        existing = dest.is_dir() and any(child.name != LOCK_NAME for child in dest.iterdir())
        if existing and not self.overwrite and not _is_prepkit_destination(dest):
            raise StoreError(f"destination {str(dest)!r} exists and is not empty (use --overwrite to replace it)")
        self._acquire_lock()
        staging = dest / STAGING
        plan_path = staging / "plan.json"
        wanted = json.dumps(self.plan.to_dict(), sort_keys=True, indent=1)
        if existing and not self.overwrite:
            if _marked_complete(dest):
                # Complete already (perhaps killed during the final clean-up): the same
                # command run again is a no-op success; other inputs or options are refused.
                if _recorded_plan_digest(dest) == plan_digest(self.plan):
                    _remove_leftovers(dest)
                    self.already_complete = True
                    self.resumed_shards = set(range(self.plan.num_shards))
                    return
                self.close()
                raise StoreError(
                    f"destination {str(dest)!r} already holds a complete store made from other inputs or options "
                    "(use --overwrite to replace it)"
                )
            if plan_path.is_file() and plan_path.read_text() == wanted:
                _remove_leftovers(dest)
                self.resumed_shards = self._done_shards()
                return
            # An unfinished store made from other inputs or options: its shards cannot be
            # reused, and it was never complete, so nothing of value is lost.
        if dest.exists():
            self._clear_destination()
        # The staging folder comes first: a run killed from here on is recognised as unfinished.
        staging.mkdir(parents=True)
        fsync_directory(dest)
        self._create_arrays()
        _write_atomic(plan_path, wanted.encode())
        fsync_directory(staging)

    def _done_shards(self) -> set[int]:
        done = set()
        staging = self.dest / STAGING
        for shard in range(self.plan.num_shards):
            if (staging / f"shard-{shard}.npz").is_file():
                done.add(shard)
        return done

    def _create_arrays(self) -> None:
        import zarr

        # mode "a": mode "w" would delete the staging folder and the lock file.
        root = zarr.open_group(self.dest, mode="a", attributes={ATTRIBUTE_KEY: self._attributes(0, complete=False).to_dict()})
        for name in self.plan.fields:
            geometry = self.plan.geometry(name)
            group = root.create_group(name)
            group.create_array(
                "bytes",
                shape=(self.plan.num_shards * geometry.capacity,),
                shards=(geometry.capacity,),
                chunks=(geometry.chunk,),
                dtype="uint8",
                fill_value=0,
                compressors=None,
                filters=None,
            )
            (self.dest / name / "bytes" / "c").mkdir(parents=True, exist_ok=True)

    def _attributes(self, num_samples: int, *, complete: bool) -> Attributes:
        return Attributes(
            format_version=FORMAT_VERSION,
            layout=self.plan.fields["image"]["layout"],
            num_samples=num_samples,
            samples_per_shard=self.plan.samples_per_shard,
            num_shards=self.plan.num_shards,
            fields=self.plan.fields,
            class_names=self.plan.class_names,
            provenance=self.plan.provenance,
            complete=complete,
            extras=self.plan.extras or None,
        )

    # -- shards -----------------------------------------------------------------------
    def write_shard(self, shard: int, results: list[EncodedSample | SampleFailure]) -> None:
        """Write shard ``shard`` from the results of its source items, in item order."""
        try:
            self._write_shard(shard, results)
        except OSError as error:
            raise write_error(self.dest, error) from None
        if self.sink is not None:
            self.sink.shard_written(self, shard)

    def _write_shard(self, shard: int, results: list[EncodedSample | SampleFailure]) -> None:
        samples = [r for r in results if isinstance(r, EncodedSample)]
        failures = [r for r in results if isinstance(r, SampleFailure)]
        meta: dict[str, np.ndarray] = {
            "items": np.array([s.item for s in samples], dtype=np.int64),
            "labels": np.array([-1 if s.label is None else s.label for s in samples], dtype=np.int64),
        }
        paths = [os.fsencode(s.relpath) for s in samples]
        meta["paths"] = np.frombuffer(b"".join(paths), dtype=np.uint8)
        meta["path_lengths"] = np.array([len(p) for p in paths], dtype=np.int64)
        for name in self.plan.fields:
            geometry = self.plan.geometry(name)
            base = shard * geometry.capacity
            parts, ranges, shapes, crcs = [], [], [], []
            position = 0
            for sample in samples:
                data, shape = sample.fields[name]
                parts.append(data)
                ranges.append((base + position, base + position + len(data)))
                shapes.append(shape)
                crcs.append(crc32c(data))
                position += len(data)
            payload = b"".join(parts)
            if len(payload) > geometry.capacity:
                raise StoreError(
                    f"shard {shard} of field {name!r} needs {len(payload)} bytes, more than the "
                    f"planned capacity {geometry.capacity} (a layout bound was wrong)"
                )
            if payload:
                _write_atomic(shard_path(self.dest, name, shard), encode_shard(payload, geometry))
            meta[f"{name}_ranges"] = np.array(ranges, dtype=np.uint64).reshape(-1, 2)
            meta[f"{name}_shapes"] = np.array(shapes, dtype=np.uint32).reshape(-1, 3)
            meta[f"{name}_crc32c"] = np.array(crcs, dtype=np.uint32)
        self._pack_extras(samples, meta)
        meta["failures"] = np.frombuffer(
            json.dumps([[f.item, f.path, f.reason] for f in failures]).encode(), dtype=np.uint8
        )
        staging = self.dest / STAGING
        temporary = staging / f"shard-{shard}.tmp.npz"
        try:
            with open(temporary, "wb") as handle:
                np.savez(handle, allow_pickle=False, **meta)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, staging / f"shard-{shard}.npz")
        except OSError as error:
            _discard(temporary)
            raise write_error(self.dest, error, temporary) from None

    def _pack_extras(self, samples: list[EncodedSample], meta: dict[str, np.ndarray]) -> None:
        """Each extra field's values of one shard into ``meta`` (checked against the schema)."""
        for name, spec in self.plan.extra_specs().items():
            values = []
            for sample in samples:
                if name not in sample.extras:
                    raise IngestError(f"{sample.relpath}: extra field {name!r}: Expected a value. Got none.")
                value = sample.extras[name]
                if value.dtype != np.dtype(spec.dtype) or (value.shape[1:] if spec.ragged else value.shape) != spec.trailing:
                    raise IngestError(
                        f"{sample.relpath}: extra field {name!r}: Expected {spec} values. Got {value.dtype} {list(value.shape)}."
                    )
                values.append(value)
            for key, array in extra_fields.pack(spec, values).items():
                meta[f"extra.{name}.{key}"] = array

    # -- completion -------------------------------------------------------------------
    def finalize(self, ignored: Sequence[tuple[str, str]] = ()) -> WriteSummary:
        """Write the per-sample arrays, mark the store complete, remove the staging area.

        ``ignored`` lists (path, reason) of files seen in the source but not ingested
        (not images); they join the failures in ``skipped.jsonl``.
        """
        if self.already_complete:
            return self._existing_summary()
        if self.sink is not None:
            self.sink.settle()
        try:
            return self._finalize(ignored)
        except OSError as error:
            raise write_error(self.dest, error) from None

    def _existing_summary(self) -> WriteSummary:
        """The summary of a store that was complete before this run (nothing written)."""
        meta = json.loads((self.dest / "zarr.json").read_text())
        failures = []
        report = self.dest / "skipped.jsonl"
        if report.is_file():
            for line in report.read_text().splitlines():
                entry = json.loads(line)
                if entry.get("item") is not None:
                    failures.append(SampleFailure(int(entry["item"]), str(entry["path"]), str(entry["reason"])))
        return WriteSummary(
            num_samples=int(meta["attributes"][ATTRIBUTE_KEY]["num_samples"]), num_shards_written=0,
            num_shards_resumed=self.plan.num_shards, failures=failures, already_complete=True,
        )

    def _finalize(self, ignored: Sequence[tuple[str, str]]) -> WriteSummary:
        import zarr

        staging = self.dest / STAGING
        collected: dict[str, list[np.ndarray]] = {}
        failures: list[SampleFailure] = []
        for shard in range(self.plan.num_shards):
            with np.load(staging / f"shard-{shard}.npz") as meta:
                for key in meta.files:
                    if key != "failures":
                        collected.setdefault(key, []).append(meta[key])
                failures += [SampleFailure(int(i), p, r) for i, p, r in json.loads(meta["failures"].tobytes() or b"[]")]

        def joined(key: str, dtype: Any, width: int | None = None) -> np.ndarray:
            parts = collected.get(key, [])
            if parts:
                return np.concatenate(parts).astype(dtype)
            return np.zeros((0,) if width is None else (0, width), dtype=dtype)

        labels = joined("labels", np.int64)
        num_samples = int(labels.shape[0])
        path_lengths = joined("path_lengths", np.int64)
        path_stops = np.cumsum(path_lengths, dtype=np.uint64)
        path_ranges = np.stack([path_stops - path_lengths.astype(np.uint64), path_stops], axis=1) if num_samples else np.zeros((0, 2), np.uint64)

        root = zarr.open_group(self.dest, mode="r+")
        arrays = {
            "labels": labels,
            "paths": joined("paths", np.uint8),
            "path_ranges": path_ranges.astype(np.uint64),
        }
        for name in self.plan.fields:
            arrays[f"{name}/ranges"] = joined(f"{name}_ranges", np.uint64, 2)
            arrays[f"{name}/shapes"] = joined(f"{name}_shapes", np.uint32, 3)
            arrays[f"{name}/crc32c"] = joined(f"{name}_crc32c", np.uint32)
        extra_specs = self.plan.extra_specs()
        if extra_specs:
            extras_group = root.require_group(extra_fields.GROUP)
            for name, spec in extra_specs.items():
                extras_group.require_group(name)
                values = joined(f"extra.{name}.values", spec.dtype)
                arrays[f"{extra_fields.GROUP}/{name}/values"] = values.reshape(-1, *spec.trailing)
                if spec.ragged:
                    arrays[f"{extra_fields.GROUP}/{name}/ranges"] = extra_fields.ranges_from_lengths(joined(f"extra.{name}.lengths", np.int64))
        for key, values in arrays.items():
            group, _, array_name = key.rpartition("/")
            _write_small(root[group] if group else root, array_name, values)
        if failures or ignored:
            report = self.dest / "skipped.jsonl"
            lines = [json.dumps({"item": f.item, "path": f.path, "reason": f.reason}) for f in failures]
            lines += [json.dumps({"item": None, "path": path, "reason": reason}) for path, reason in ignored]
            _write_atomic(report, ("\n".join(lines) + "\n").encode())
        # Last: the attribute that says the store is complete.
        attributes = self._attributes(num_samples, complete=True)
        attributes.checksums = {
            "arrays": {key: array_crc32c(values) for key, values in arrays.items()},
            "files": file_checksums(self.dest, list(self.plan.fields), extra_fields.metadata_files(extra_specs)),
        }
        attributes.generation = generation_id(attributes.checksums, self.plan.to_dict())
        attributes.plan_sha256 = plan_digest(self.plan)
        root.attrs[ATTRIBUTE_KEY] = attributes.to_dict()
        shutil.rmtree(staging)
        fsync_directory(self.dest)
        return WriteSummary(
            num_samples=num_samples,
            num_shards_written=self.plan.num_shards - len(self.resumed_shards),
            num_shards_resumed=len(self.resumed_shards),
            failures=failures,
        )


SampleJob = Callable[[int], "EncodedSample | SampleFailure"]


class ShardExecutor(Protocol):
    """Encodes whole shards elsewhere (a Dask cluster: :mod:`prepkit.ingest.executors`).

    ``map_shards(job, [(shard, items), ...])`` yields ``(shard, results)`` in the order
    given, ``results`` holding ``job(i)`` for the shard's items in order.
    """

    def map_shards(
        self, job: SampleJob, shards: list[tuple[int, list[int]]]
    ) -> Iterator[tuple[int, list[EncodedSample | SampleFailure]]]: ...


def write_all(
    dest: str | os.PathLike[str],
    plan: StorePlan,
    job: SampleJob,
    *,
    workers: int = 1,
    on_error: str = "fail",
    overwrite: bool = False,
    ignored: Sequence[tuple[str, str]] = (),
    progress: Callable[[int], None] = lambda n: None,
    executor: ShardExecutor | None = None,
) -> WriteSummary:
    """Write a whole store: ``job(i)`` encodes item ``i``; shards not done yet are encoded
    (in ``workers`` spawn processes when > 1; ``job`` must then be picklable) and written
    in order, and the store is finalized. A run killed at any moment resumes here.

    ``on_error="fail"`` stops at the first SampleFailure with an IngestError naming it;
    ``"skip"`` stores every good sample and reports the rest in ``skipped.jsonl``.
    ``executor`` encodes whole shards elsewhere (e.g. a Dask cluster); this process still
    writes every shard, in order, and commits.
    """
    with StoreWriter(dest, plan, overwrite=overwrite) as writer:
        todo = [shard for shard in range(plan.num_shards) if shard not in writer.resumed_shards]
        for shard in writer.resumed_shards:
            progress(len(plan.shard_items(shard)))
        if executor is not None:
            for shard, encoded in executor.map_shards(job, [(shard, list(plan.shard_items(shard))) for shard in todo]):
                failure = next((r for r in encoded if isinstance(r, SampleFailure)), None)
                if failure is not None and on_error == "fail":
                    raise IngestError(f"{failure.path}: {failure.reason}")
                writer.write_shard(shard, encoded)
                progress(len(encoded))
            return writer.finalize(list(ignored))
        indices = (index for shard in todo for index in plan.shard_items(shard))
        results = run_ordered(job, indices, workers)
        try:
            for shard in todo:
                batch: list[EncodedSample | SampleFailure] = []
                for _ in plan.shard_items(shard):
                    result = next(results)
                    if isinstance(result, SampleFailure) and on_error == "fail":
                        raise IngestError(f"{result.path}: {result.reason}")
                    batch.append(result)
                    progress(1)
                writer.write_shard(shard, batch)
        finally:
            results.close()  # stops the workers at once on an error or an interrupt
        return writer.finalize(list(ignored))


def _write_small(group: Any, name: str, values: np.ndarray) -> None:
    """A per-sample array: uncompressed, chunked along samples, written in one go."""
    chunks = (min(SMALL_ARRAY_CHUNK, max(1, values.shape[0])), *values.shape[1:])
    array = group.create_array(
        name, shape=values.shape, dtype=values.dtype, chunks=chunks, compressors=None, filters=None,
        fill_value=0, overwrite=True,
    )
    if values.size:
        array[...] = values
