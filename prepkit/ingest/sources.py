"""Discover the samples of a dataset: an image folder or a manifest file.

A source is turned into an ordered list of :class:`SourceItem` (path, label, optional
mask path) before any pixel is read, so the order, and therefore the store, is the same
whatever the number of workers.

- A folder with class subfolders works like torchvision's ``ImageFolder``: class names in
  sorted order give integer labels 0..K-1, files are taken in sorted order.
- A flat folder (no subfolders) gives unlabelled samples.
- A ``.csv`` (with a header) or ``.jsonl`` manifest lists ``path`` and optionally
  ``label`` (integer or class name) and ``mask`` (path of a segmentation mask). Relative
  paths are relative to the manifest's folder.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from prepkit.errors import IngestError

# The same extensions torchvision's ImageFolder accepts (plus a few Pillow reads).
IMAGE_EXTENSIONS = (
    ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif", ".pbm",
)
MANIFEST_EXTENSIONS = (".csv", ".jsonl")


@dataclass(frozen=True)
class SourceItem:
    """One sample to ingest: an image file, its label, and optionally its mask file."""

    path: str
    label: int | None = None
    mask_path: str | None = None
    # Path as recorded in the store: relative to the dataset root where possible.
    relpath: str = ""


@dataclass
class SourceListing:
    """Everything a source yields: the items in store order, the class names, and the
    files that were seen but are not images (reported, never silently dropped)."""

    items: list[SourceItem]
    class_names: list[str] | None
    ignored: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    has_masks: bool = False


def is_image_name(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def list_source(src: str | os.PathLike[str]) -> SourceListing:
    """List the samples of a folder or manifest, in the order they will be stored."""
    path = Path(src)
    if not path.exists():
        raise IngestError(f"source {str(path)!r} does not exist")
    if path.is_dir():
        return _list_folder(path)
    if path.suffix.lower() in MANIFEST_EXTENSIONS:
        return _list_manifest(path)
    raise IngestError(
        f"source {str(path)!r} is neither a folder nor a manifest "
        f"(expected a directory, or a file ending in {' or '.join(MANIFEST_EXTENSIONS)})"
    )


def _walk_files(top: str) -> tuple[list[str], list[tuple[str, str]]]:
    """All files below ``top`` in sorted order, following directory symlinks but never
    entering the same directory twice (a symlink loop would otherwise never end)."""
    files: list[str] = []
    problems: list[tuple[str, str]] = []
    seen: set[tuple[int, int]] = set()

    def visit(directory: str) -> None:
        try:
            info = os.stat(directory)
        except OSError as error:
            problems.append((directory, f"cannot open folder: {error.strerror or error}"))
            return
        key = (info.st_dev, info.st_ino)
        if key in seen:
            problems.append((directory, "folder already visited (symlink loop), not entered again"))
            return
        seen.add(key)
        try:
            entries = sorted(os.scandir(directory), key=lambda e: os.fsencode(e.name))
        except OSError as error:
            problems.append((directory, f"cannot list folder: {error.strerror or error}"))
            return
        for entry in entries:
            try:
                is_dir = entry.is_dir()  # follows symlinks; False for a broken or looping link
            except OSError:
                is_dir = False
            if is_dir:
                visit(entry.path)
            else:
                files.append(entry.path)

    visit(top)
    return files, problems


def _split_images(files: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    images, ignored = [], []
    for file in files:
        if is_image_name(file):
            images.append(file)
        else:
            ignored.append((file, "not an image file extension " f"({', '.join(IMAGE_EXTENSIONS)})"))
    return images, ignored


def _relative(path: str, root: Path) -> str:
    try:
        return os.path.relpath(path, root)
    except ValueError:
        return path


def _list_folder(root: Path) -> SourceListing:
    try:
        top_entries = sorted(os.scandir(root), key=lambda e: os.fsencode(e.name))
    except OSError as error:
        raise IngestError(f"cannot list source folder {str(root)!r}: {error}") from error
    class_dirs = []
    for entry in top_entries:
        try:
            if entry.is_dir():
                class_dirs.append(entry)
        except OSError:
            pass
    if not class_dirs:
        files, ignored = _walk_files(str(root))
        images, not_images = _split_images(files)
        flat_items = [SourceItem(path=p, relpath=_relative(p, root)) for p in images]
        return SourceListing(items=flat_items, class_names=None, ignored=ignored + not_images)

    # ImageFolder: top-level files are not part of any class.
    ignored = [
        (entry.path, "file at the top of a class-folder dataset (belongs to no class)")
        for entry in top_entries
        if entry not in class_dirs
    ]
    class_names = [entry.name for entry in class_dirs]
    items: list[SourceItem] = []
    for label, entry in enumerate(class_dirs):
        files, problems = _walk_files(entry.path)
        images, not_images = _split_images(files)
        ignored += problems + not_images
        items += [SourceItem(path=p, label=label, relpath=_relative(p, root)) for p in images]
    return SourceListing(items=items, class_names=class_names, ignored=ignored)


def _manifest_rows(path: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            if path.suffix.lower() == ".csv":
                reader = csv.DictReader(handle)
                if reader.fieldnames is None or "path" not in reader.fieldnames:
                    raise IngestError(
                        f"manifest {str(path)!r}: expected a header row with a 'path' column, "
                        f"found {reader.fieldnames!r}"
                    )
                rows = [dict(row) for row in reader]
            else:
                for number, line in enumerate(handle, start=1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as error:
                        raise IngestError(f"manifest {str(path)!r} line {number}: invalid JSON ({error.msg})") from None
                    if not isinstance(row, dict) or "path" not in row:
                        raise IngestError(f"manifest {str(path)!r} line {number}: Expected an object with a 'path' key. Got none.")
                    rows.append(row)
    except UnicodeDecodeError as error:
        raise IngestError(f"manifest {str(path)!r} is not UTF-8 text: {error}") from None
    except OSError as error:
        raise IngestError(f"cannot read manifest {str(path)!r}: {error.strerror or error}") from None
    return rows


def _list_manifest(path: Path) -> SourceListing:
    rows = _manifest_rows(path)
    base = path.parent
    raw_labels = [row.get("label") for row in rows]
    present = [label for label in raw_labels if label not in (None, "")]
    class_names: list[str] | None = None
    label_of: dict[str, int] = {}
    if present and not all(_is_int(label) for label in present):
        # Class names: integer labels in sorted name order, as ImageFolder numbers folders.
        class_names = sorted({str(label) for label in present})
        label_of = {name: index for index, name in enumerate(class_names)}

    items: list[SourceItem] = []
    has_masks = any(row.get("mask") not in (None, "") for row in rows)
    for row, raw_label in zip(rows, raw_labels, strict=True):
        file = str(row["path"])
        full = file if os.path.isabs(file) else str(base / file)
        label: int | None
        if raw_label in (None, ""):
            label = None
        elif class_names is None:
            label = int(str(raw_label))
            if label < 0:
                raise IngestError(f"manifest {str(path)!r}: row {len(items) + 1}: Expected a label >= 0. Got {label}.")
        else:
            label = label_of[str(raw_label)]
        mask = row.get("mask")
        mask_full = None
        if mask not in (None, ""):
            mask_full = str(mask) if os.path.isabs(str(mask)) else str(base / str(mask))
        items.append(SourceItem(path=full, label=label, mask_path=mask_full, relpath=file))
    return SourceListing(items=items, class_names=class_names, has_masks=has_masks)


def _is_int(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    try:
        int(str(value))
    except ValueError:
        return False
    return True
