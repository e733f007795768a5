"""Write a store to object storage shard by shard, with bounded local disk.

The local writer stays the one crash-safe, resumable writer; it builds the store in a local
staging folder, and :class:`StreamingUpload` takes each shard file away as soon as it is
committed: uploaded whole (multipart above 8 MiB), recorded, then deleted locally, with at
most ``pending`` shards waiting for their upload. The staging folder therefore holds the
small per-shard metadata and a few shard files, never the store. Object storage only ever
receives whole objects, in an order that makes the remote store safe to read at any moment:

1. any old root ``zarr.json`` (the complete marker) is removed, then ``.prepkit-upload.json``
   (the digest of the store's plan) written, so an unfinished remote store is never mistaken
   for a complete one and its objects are known to be ours;
2. each shard object goes up as soon as its shard is written; the key and size of every
   uploaded object is appended to ``<staging>.uploaded.jsonl`` next to the staging folder;
3. at the end the per-sample arrays and metadata are put, objects left over from an older
   store deleted, and the root ``zarr.json``, which carries ``complete: true``, goes last;
   then the upload marker is deleted.

Killed at any moment, the same command resumes: the local writer skips its committed
shards, and a committed shard whose file is gone counts as uploaded only if the record says
so and the bucket holds an object of the recorded size; otherwise it is written again.

The staging folder is ``$PREPKIT_STAGING_DIR`` (default ``~/.cache/prepkit/staging``)
``/<hash of the URL>``. :func:`upload_store` uploads a store already complete on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from prepkit.errors import StoreError
from prepkit.store.format import ATTRIBUTE_KEY
from prepkit.store.storage import ObjectRoot, is_url, iter_local_files

if TYPE_CHECKING:
    from prepkit.store.writer import StoreWriter

UPLOAD_MARKER = ".prepkit-upload.json"
SKIP_NAMES = (".prepkit.lock",)
T = TypeVar("T")


def staging_dir(url: str) -> Path:
    """The local folder where the store for ``url`` is built before upload."""
    base = os.environ.get("PREPKIT_STAGING_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "prepkit", "staging")
    return Path(base) / hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:24]


def _remote_complete(root: ObjectRoot) -> bool:
    if not root.exists("zarr.json"):
        return False
    try:
        meta = json.loads(root.get("zarr.json"))
        return bool(meta["attributes"][ATTRIBUTE_KEY]["complete"])
    except (ValueError, KeyError, TypeError):
        return False


def check_remote_destination(root: ObjectRoot, overwrite: bool) -> None:
    """Refuse early a remote destination that must not be written (like a local one)."""
    if root.read_only:
        raise StoreError(f"{root.url}: http(s) stores are read-only. Expected s3://, gs:// or az:// to write.")
    if overwrite:
        return
    existing = root.listing()
    if not existing:
        return
    if _remote_complete(root):
        raise StoreError(f"destination {root.url!r} already holds a complete store (use --overwrite to replace it)")
    if UPLOAD_MARKER not in existing:
        raise StoreError(f"destination {root.url!r} holds objects that are not a prepkit store (use --overwrite to replace it)")


def check_any_destination(dest: str, overwrite: bool, storage_options: dict[str, Any] | None) -> None:
    """:func:`~prepkit.store.writer.check_destination` for folders and URLs alike."""
    if is_url(dest):
        check_remote_destination(ObjectRoot(dest, storage_options), overwrite)
    else:
        from prepkit.store.writer import check_destination

        check_destination(dest, overwrite)


def upload_store(local: Path, root: ObjectRoot, *, overwrite: bool, concurrency: int = 8) -> int:
    """Upload the complete local store ``local`` to ``root``; returns the objects put."""
    files = {key: path for key, path in iter_local_files(local) if path.name not in SKIP_NAMES}
    if "zarr.json" not in files:
        raise StoreError(f"{local}: no zarr.json: not a store to upload")
    digest = hashlib.sha256(files["zarr.json"].read_bytes()).hexdigest()
    existing = root.listing()
    resumable = not overwrite and existing.get(UPLOAD_MARKER) is not None and _marker(root) == digest
    if not resumable:
        # Start clean: the marker first, so these objects are known to be ours.
        root.delete(sorted(k for k in existing if k == "zarr.json"))
        root.put(UPLOAD_MARKER, json.dumps({"digest": digest}).encode())
        root.delete(sorted(k for k in existing if k not in (UPLOAD_MARKER, "zarr.json")))
        existing = {}
    todo = [key for key, path in files.items() if key != "zarr.json" and existing.get(key) != path.stat().st_size]
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda key: root.put(key, files[key]), todo))
    stale = sorted(k for k in existing if k not in files and k != UPLOAD_MARKER)
    root.delete(stale)
    root.put("zarr.json", files["zarr.json"])  # last: the complete marker
    root.delete([UPLOAD_MARKER])
    return len(todo) + 1


def _marker(root: ObjectRoot) -> str | None:
    try:
        return str(json.loads(root.get(UPLOAD_MARKER))["digest"])
    except (StoreError, ValueError, KeyError, TypeError):
        return None


class StreamingUpload:
    """A :class:`~prepkit.store.writer.ShardSink` that uploads each committed shard to ``root``
    and deletes its local files; :meth:`finish` puts the rest, the complete marker last."""

    def __init__(self, root: ObjectRoot, staging: Path, *, overwrite: bool, pending: int = 2, concurrency: int = 8) -> None:
        self.root, self.staging, self.overwrite = root, staging, overwrite
        self.records = staging.with_name(staging.name + ".uploaded.jsonl")
        self.pending = max(1, pending)
        self._pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="prepkit-upload")
        self._queue: deque[Future[None]] = deque()
        self._lock = threading.Lock()
        self.uploaded: dict[str, int | None] = {}  # key -> size (None: the shard has no file for that field)
        self.puts: list[str] = []  # every key put by this run, in order (for reports and tests)

    # -- records ----------------------------------------------------------------------
    def _read_records(self) -> tuple[str | None, dict[str, int | None]]:
        try:
            lines = self.records.read_text().splitlines()
        except FileNotFoundError:
            return None, {}
        plan: str | None = None
        found: dict[str, int | None] = {}
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                break  # a line cut short by a kill: the upload it records is redone
            if "plan" in entry:
                plan = str(entry["plan"])
            else:
                found[str(entry["key"])] = None if entry["size"] is None else int(entry["size"])
        return plan, found

    def _record(self, entries: dict[str, int | None]) -> None:
        with self._lock, open(self.records, "a") as handle:
            handle.write("".join(json.dumps({"key": k, "size": v}) + "\n" for k, v in entries.items()))
            handle.flush()
            os.fsync(handle.fileno())

    def _verified(self, plan: str) -> dict[str, int | None]:
        """The recorded uploads of ``plan`` that the bucket still holds at their recorded size."""
        recorded_plan, recorded = self._read_records()
        if recorded_plan != plan or _marker(self.root) != plan:
            return {}
        existing = self.root.listing()
        return {key: size for key, size in recorded.items() if size is None or existing.get(key) == size}

    # -- the ShardSink protocol ---------------------------------------------------------
    def start(self, writer: StoreWriter) -> set[int]:
        from prepkit.store.writer import plan_digest

        plan = plan_digest(writer.plan)
        recorded_plan, _ = self._read_records()
        if self.overwrite or _marker(self.root) != plan or recorded_plan != plan:
            self._start_clean(plan)
        else:
            self.uploaded = self._verified(plan)
        self.overwrite = False  # from here on the objects in the bucket are this write's own
        redo = set()
        for shard in sorted(writer.resumed_shards):
            keys = writer.shard_keys(shard)
            if any((writer.dest / key).is_file() for key in keys):
                self.shard_written(writer, shard)  # committed but not uploaded yet
            elif not all(key in self.uploaded for key in keys):
                redo.add(shard)
        return redo

    def _start_clean(self, plan: str) -> None:
        existing = self.root.listing()
        # The complete marker goes first, then ours: from here on the objects are known to be ours.
        self.root.delete(sorted(k for k in existing if k == "zarr.json"))
        self.root.put(UPLOAD_MARKER, json.dumps({"digest": plan}).encode())
        self.records.parent.mkdir(parents=True, exist_ok=True)
        self.records.write_text(json.dumps({"plan": plan}) + "\n")
        self.uploaded = {}

    def shard_written(self, writer: StoreWriter, shard: int) -> None:
        files = {key: writer.dest / key for key in writer.shard_keys(shard)}
        self._queue.append(self._pool.submit(self._upload_shard, files))
        while len(self._queue) > self.pending:  # bounded local disk: wait for the oldest upload
            self._queue.popleft().result()

    def _upload_shard(self, files: dict[str, Path]) -> None:
        sizes: dict[str, int | None] = {}
        for key, path in files.items():
            if path.is_file():
                self.root.put(key, path)
                with self._lock:
                    self.puts.append(key)
                sizes[key] = path.stat().st_size
            else:
                sizes[key] = None  # no sample of this shard has bytes in this field
        self._record(sizes)  # recorded before the local copy goes: a kill in between re-uploads it
        with self._lock:
            self.uploaded.update(sizes)
        for path in files.values():
            path.unlink(missing_ok=True)

    def settle(self) -> None:
        while self._queue:
            self._queue.popleft().result()

    # -- the end ------------------------------------------------------------------------
    def finish(self, local: Path) -> None:
        """Upload what the complete local store ``local`` still holds, check the shards already
        uploaded, delete leftovers of an older store, then put the root ``zarr.json`` last."""
        self.settle()
        self._pool.shutdown()
        files = {key: path for key, path in iter_local_files(local) if path.name not in SKIP_NAMES}
        if "zarr.json" not in files:
            raise StoreError(f"{local}: no zarr.json: not a store to upload")
        todo = [key for key in files if key != "zarr.json"]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda key: self.root.put(key, files[key]), todo))
        self.puts += todo
        existing = self.root.listing()
        lost = sorted(k for k, size in self.uploaded.items() if size is not None and existing.get(k) != size)
        if lost:
            raise StoreError(f"{self.root.url}: Expected the uploaded shard objects to stay. Got {lost[:3]} missing or resized.")
        stale = sorted(k for k in existing if k not in files and k not in self.uploaded and k != UPLOAD_MARKER)
        self.root.delete(stale)
        self.root.put("zarr.json", files["zarr.json"])  # last: the complete marker
        self.puts.append("zarr.json")
        self.root.delete([UPLOAD_MARKER])
        self.records.unlink(missing_ok=True)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def write_through_staging(
    dest: str, storage_options: dict[str, Any] | None, overwrite: bool, build: Callable[[str, bool], T],
    *, pending: int = 2,
) -> T:
    """Run ``build(local_dest, overwrite)``; for a URL ``dest``, each shard is uploaded as soon
    as it is written (at most ``pending`` waiting) and the rest once the build is done.

    For a local ``dest`` this is just ``build(dest, overwrite)``.
    """
    from prepkit.store.writer import SHARD_SINK, _recorded_plan_digest

    if not is_url(dest):
        return build(dest, overwrite)
    root = ObjectRoot(dest, storage_options)
    check_remote_destination(root, overwrite)
    staging = staging_dir(dest)
    staging.parent.mkdir(parents=True, exist_ok=True)
    upload = StreamingUpload(root, staging, overwrite=overwrite, pending=pending)
    try:
        if (staging / "zarr.json").is_file() and not (staging / ".prepkit").is_dir():
            # Built before; the upload was cut short. Finish it if every shard uploaded is still
            # in the bucket (the build then finds its store complete), or else build again.
            plan = _recorded_plan_digest(staging)
            _, recorded = upload._read_records()
            verified = upload._verified(plan) if plan is not None and not overwrite else {}
            if verified and verified == recorded:
                upload.uploaded = verified
            else:
                shutil.rmtree(staging)
        token = SHARD_SINK.set((staging, upload))
        try:
            result = build(str(staging), False)
        finally:
            SHARD_SINK.reset(token)
        upload.finish(staging)
    finally:
        upload.close()
    shutil.rmtree(staging, ignore_errors=True)
    return result
