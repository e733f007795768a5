"""Keep numba's on-disk cache honest about the modules a cached kernel inlines.

numba keys a cached function on the file that defines it (its modification time and
size) and nothing else: a kernel in ``augment/cpu.py`` that inlines functions from
``augment/sampling.py`` keeps running its stale machine code after ``sampling.py`` is
edited. :func:`guard_disk_cache` records a digest of those dependencies beside each
cache entry and drops the entries whose digest no longer matches, so the next call
compiles afresh.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any


def dependency_digest(modules: Iterable[ModuleType], extra: str = "") -> str:
    """SHA-256 over the source files of ``modules``, in order, and ``extra``."""
    digest = hashlib.sha256()
    for module in modules:
        digest.update(Path(str(module.__file__)).read_bytes())
    digest.update(extra.encode())
    return digest.hexdigest()


def cache_entry(dispatcher: Any) -> tuple[Path, str] | None:
    """(cache folder, file-name prefix) of a ``cache=True`` dispatcher, or None."""
    cache = getattr(dispatcher, "_cache", None)
    folder = getattr(cache, "_cache_path", None)
    prefix = getattr(getattr(cache, "_impl", None), "filename_base", None)
    if folder is None or prefix is None:  # not cached, or a numba without these attributes
        return None
    return Path(folder), str(prefix)


def drop_if_stale(folder: Path, prefix: str, digest: str) -> bool:
    """Delete the cache files of ``prefix`` in ``folder`` unless their recorded digest is
    ``digest``; record it. Returns True when entries were dropped."""
    stamp = folder / f"{prefix}.deps"
    try:
        if stamp.is_file() and stamp.read_text() == digest:
            return False
        stale = [*folder.glob(f"{prefix}.nbi"), *folder.glob(f"{prefix}.*.nbc")]
        for path in stale:
            path.unlink(missing_ok=True)
        folder.mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest)
        return bool(stale)
    except OSError:  # a read-only install: numba then caches elsewhere or not at all
        return False


# Set on a dispatcher by the first guard_disk_cache that sees it.
_GUARDED = "_prepkit_cache_guarded"


def guard_disk_cache(namespace: dict[str, Any], dependencies: Iterable[ModuleType], extra: str = "") -> None:
    """Drop the stale cache entries of every cached numba function in ``namespace``;
    ``extra`` names a build choice the dependencies' sources do not show (a CPU switch).

    A function is guarded once, by the first module that does it: the one that compiles it,
    since a module importing it imports that one first. A second guard with its own digest
    had dropped the entries the first had just recorded, so every process that imported
    both modules (``augment.colour`` imports ``augment.cpu``'s ``_emit_row``) found them
    gone and compiled them again."""
    digest = dependency_digest(dependencies, extra)
    for value in list(namespace.values()):
        entry = cache_entry(value)
        if entry is None or getattr(value, _GUARDED, False):
            continue
        drop_if_stale(*entry, digest)
        setattr(value, _GUARDED, True)
