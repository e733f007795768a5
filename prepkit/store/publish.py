"""Write a store to object storage: build it in a local staging folder, then upload it.

The local writer stays the one crash-safe, resumable writer; object storage only ever
receives whole objects. The order makes a remote store safe to read at any moment:

1. ``.prepkit-upload.json`` (the digest of the store's root metadata) is written first and
   any old root ``zarr.json`` removed, so an unfinished remote store is never mistaken for
   a complete one;
2. every other object is put whole (multipart above 8 MiB), several at once; an object
   already there with the same size under the same upload digest is skipped, so a killed
   upload resumes where it stopped;
3. the root ``zarr.json``, which carries ``complete: true``, goes last, then the upload
   marker is deleted.

The staging folder is ``$PREPKIT_STAGING_DIR`` (default ``~/.cache/prepkit/staging``)
``/<hash of the URL>``: running the same command again resumes the local build too.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from prepkit.errors import StoreError
from prepkit.store.format import ATTRIBUTE_KEY
from prepkit.store.storage import ObjectRoot, is_url, iter_local_files

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


def write_through_staging(
    dest: str, storage_options: dict[str, Any] | None, overwrite: bool, build: Callable[[str, bool], T]
) -> T:
    """Run ``build(local_dest, overwrite)`` and, for a URL ``dest``, upload its result.

    For a local ``dest`` this is just ``build(dest, overwrite)``.
    """
    if not is_url(dest):
        return build(dest, overwrite)
    root = ObjectRoot(dest, storage_options)
    check_remote_destination(root, overwrite)
    staging = staging_dir(dest)
    if (staging / "zarr.json").is_file() and not (staging / ".prepkit").is_dir():
        shutil.rmtree(staging)  # a finished build whose upload was cut short: rebuild it (cheap next to a wrong store)
    staging.parent.mkdir(parents=True, exist_ok=True)
    result = build(str(staging), False)
    upload_store(staging, root, overwrite=overwrite)
    shutil.rmtree(staging, ignore_errors=True)
    return result
