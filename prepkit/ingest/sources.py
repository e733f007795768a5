"""Discover the samples of a dataset: an image folder or a manifest file.

A source is turned into an ordered list of :class:`SourceItem` (path, label, optional
mask path) before any pixel is read, so the order, and therefore the store, is the same
whatever the number of workers.

- A folder with class subfolders works like torchvision's ``ImageFolder``: class names in
  sorted order give integer labels 0..K-1, files are taken in sorted order.
- A flat folder (no subfolders) gives unlabelled samples.
- A ``.csv`` (with a header) or ``.jsonl`` manifest lists ``path`` and optionally
  ``label`` (integer or class name) and ``mask`` (path of a segmentation mask). Relative
  paths are relative to the manifest's folder. Other columns become extra per-sample
  fields when declared (``fields``: ``NAME[:KIND]``, see :mod:`prepkit.store.extras`);
  undeclared ones are reported in one warning.
"""

from __future__ import annotations

import base64
import binascii
import csv
import json
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prepkit.errors import IngestError
from prepkit.store.extras import Declaration, FieldSpec, FieldValueError, is_empty, normalize

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
    # Extra fields: name -> value normalised to its stored form (prepkit.store.extras).
    extras: dict[str, np.ndarray] = field(default_factory=dict, compare=False, hash=False)


@dataclass
class SourceListing:
    """Everything a source yields: the items in store order, the class names, and the
    files that were seen but are not images (reported, never silently dropped)."""

    items: list[SourceItem]
    class_names: list[str] | None
    ignored: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    has_masks: bool = False
    extras: dict[str, FieldSpec] = field(default_factory=dict)  # schema of the items' extra fields


def is_image_name(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def list_source(src: str | os.PathLike[str], fields: Sequence[str] = ()) -> SourceListing:
    """List the samples of a folder or manifest, in the order they will be stored.

    ``fields`` declares the manifest columns stored as extra per-sample fields
    (``NAME[:KIND]``, e.g. ``caption:string``, ``boxes:float32[*,4]``); a folder has none.
    """
    path = Path(src)
    if not path.exists():
        raise IngestError(f"source {str(path)!r} does not exist")
    declarations = _declarations(fields)
    if path.is_dir():
        if declarations:
            raise IngestError(f"source {str(path)!r}: Expected a manifest for extra fields (they are its columns). Got a folder.")
        return _list_folder(path)
    if path.suffix.lower() in MANIFEST_EXTENSIONS:
        return _list_manifest(path, declarations)
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


def _manifest_rows(path: Path) -> list[tuple[int, dict[str, object]]]:
    """The manifest's rows, each with the line number it starts on."""
    rows: list[tuple[int, dict[str, object]]] = []
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            if path.suffix.lower() == ".csv":
                reader = csv.DictReader(handle)
                if reader.fieldnames is None or "path" not in reader.fieldnames:
                    raise IngestError(
                        f"manifest {str(path)!r}: Expected a header row with a 'path' column. "
                        f"Got {reader.fieldnames!r}."
                    )
                line = reader.line_num + 1
                for row in reader:
                    rows.append((line, dict(row)))
                    line = reader.line_num + 1
            else:
                for number, text in enumerate(handle, start=1):
                    if not text.strip():
                        continue
                    try:
                        row = json.loads(text)
                    except json.JSONDecodeError as error:
                        raise IngestError(f"manifest {str(path)!r} line {number}: invalid JSON ({error.msg})") from None
                    if not isinstance(row, dict) or "path" not in row:
                        raise IngestError(f"manifest {str(path)!r} line {number}: Expected an object with a 'path' key. Got none.")
                    rows.append((number, row))
    except UnicodeDecodeError as error:
        raise IngestError(f"manifest {str(path)!r} is not UTF-8 text: {error}") from None
    except OSError as error:
        raise IngestError(f"cannot read manifest {str(path)!r}: {error.strerror or error}") from None
    return rows


def _list_manifest(path: Path, declarations: list[Declaration]) -> SourceListing:
    rows = _manifest_rows(path)
    base = path.parent
    labels, class_names = manifest_labels([(line, row.get("label")) for line, row in rows], str(path))
    _warn_duplicates([(line, str(row["path"])) for line, row in rows], str(path))
    schema, extras = manifest_extras(rows, declarations, str(path), csv_text=path.suffix.lower() == ".csv")
    items: list[SourceItem] = []
    has_masks = any(row.get("mask") not in (None, "") for _, row in rows)
    for (_, row), label in zip(rows, labels, strict=True):
        file = str(row["path"])
        full = file if os.path.isabs(file) else str(base / file)
        mask = row.get("mask")
        mask_full = None
        if mask not in (None, ""):
            mask_full = str(mask) if os.path.isabs(str(mask)) else str(base / str(mask))
        items.append(SourceItem(path=full, label=label, mask_path=mask_full, relpath=file, extras=extras[len(items)]))
    return SourceListing(items=items, class_names=class_names, has_masks=has_masks, extras=schema)


# -- extra fields (manifest columns) ----------------------------------------------------------
BUILT_IN_COLUMNS = ("path", "label", "mask")
_INT_TEXT = re.compile(r"^[+-]?[0-9]+$")
_FLOAT_TEXT = re.compile(r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$")


def _declarations(fields: Sequence[str]) -> list[Declaration]:
    if isinstance(fields, str):
        fields = [fields]
    declarations = []
    for text in fields:
        try:
            declarations.append(Declaration.parse(str(text)))
        except FieldValueError as error:
            raise IngestError(str(error)) from None
    names = [d.name for d in declarations]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise IngestError(f"fields: Expected each field declared once. Got {repeated} more than once.")
    return declarations


def _from_text(declaration: Declaration, spec: FieldSpec | None, text: str) -> Any:
    """A CSV cell (always text) as the value it stands for: numbers for int/float fields
    (inferred when undeclared), JSON for arrays, base64 for bytes, the text for strings."""
    kind = spec.kind if spec is not None else declaration.kind
    stripped = text.strip()
    if kind is None:
        kind = "int" if _INT_TEXT.match(stripped) else "float" if _FLOAT_TEXT.match(stripped) else "string"
    if kind == "int" and _INT_TEXT.match(stripped):
        return int(stripped)
    if kind == "float" and (_INT_TEXT.match(stripped) or _FLOAT_TEXT.match(stripped) or stripped.lower() in ("nan", "inf", "-inf")):
        return float(stripped)
    if kind == "array":
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            raise FieldValueError(f"Expected a JSON array such as [1, 2]. Got {text!r}.") from None
    return text  # a string, base64 bytes, or a bad number that normalize names


def _present(value: Any, csv_text: bool, kind: str | None) -> bool:
    """A missing key and JSON null are no value; so is an empty CSV cell, except for strings
    and bytes (there it is the empty string, or the base64 text of no bytes)."""
    return value is not None and not (csv_text and value == "" and kind not in ("string", "bytes"))


def manifest_extras(
    rows: list[tuple[int, dict[str, object]]], declarations: list[Declaration], where: str, *, csv_text: bool,
) -> tuple[dict[str, FieldSpec], list[dict[str, np.ndarray]]]:
    """The schema and each row's normalised values of the declared columns.

    A declaration without a kind (or an ``array`` without dtype) takes the schema of the
    column's first value. Every bad value is reported in one IngestError naming its line
    and column; undeclared columns are named in one warning (they are not stored).
    """
    columns: dict[str, None] = {}
    for _, row in rows:
        columns.update(dict.fromkeys(row))
    declared = {d.name for d in declarations}
    absent = sorted(declared - set(columns))
    if absent and rows:
        raise IngestError(f"manifest {where!r}: Expected the declared field column(s) {absent}. Got columns {list(columns)}.")
    unstored = [c for c in columns if c not in BUILT_IN_COLUMNS and c not in declared]
    if unstored:
        warnings.warn(
            f"manifest {where!r}: column(s) {', '.join(map(repr, unstored))} are not stored; declare them as extra "
            "fields to keep them (prepkit shard --field NAME[:KIND], e.g. --field caption:string)",
            UserWarning, stacklevel=4,
        )
    schema: dict[str, FieldSpec] = {}
    values: list[dict[str, np.ndarray]] = [{} for _ in rows]
    bad: list[str] = []
    for declaration in declarations:
        name = declaration.name
        spec = declaration.spec or _inferred(declaration, rows, csv_text, bad)
        if spec is None:
            continue
        schema[name] = spec
        for number, (line, row) in enumerate(rows):
            raw = row.get(name)
            try:
                if not _present(raw, csv_text, spec.kind):
                    raise FieldValueError("Expected a value. Got none.")
                value = _from_text(declaration, spec, str(raw)) if csv_text else raw
                values[number][name] = normalize(spec, _bytes_from_base64(value) if spec.kind == "bytes" else value)
            except FieldValueError as error:
                bad.append(f"line {line}: column {name!r}: {error}")
    if bad:
        shown = bad[:MAX_BAD_ROWS_SHOWN] + ([f"... and {len(bad) - MAX_BAD_ROWS_SHOWN} more"] if len(bad) > MAX_BAD_ROWS_SHOWN else [])
        raise IngestError(f"manifest {where!r}: {len(bad)} bad field value(s):\n  " + "\n  ".join(shown))
    return {d.name: schema[d.name] for d in declarations if d.name in schema}, values


def _inferred(declaration: Declaration, rows: list[tuple[int, dict[str, object]]], csv_text: bool, bad: list[str]) -> FieldSpec | None:
    """The schema of an undeclared (or partly declared) column, from its first present value
    (an empty array says nothing of its dtype: the first non-empty one decides)."""
    first: tuple[int, Any] | None = None
    for line, row in rows:
        raw = row.get(declaration.name)
        if not _present(raw, csv_text, declaration.kind):
            continue
        try:
            value = _from_text(declaration, None, str(raw)) if csv_text else raw
        except FieldValueError as error:
            bad.append(f"line {line}: column {declaration.name!r}: {error}")
            return None
        if first is None or is_empty(first[1]):
            first = (line, value)
        if not is_empty(value):
            break
    if first is None:
        return None  # every row lacks the value: each is reported as such
    try:
        return declaration.resolve(first[1])
    except FieldValueError as error:
        bad.append(f"line {first[0]}: column {declaration.name!r}: {error}")
        return None


def _bytes_from_base64(value: Any) -> Any:
    """Manifests hold bytes as base64 text (JSON has no bytes)."""
    if not isinstance(value, str):
        return value
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise FieldValueError(f"Expected base64 text for bytes. Got {value[:40]!r}.") from None


# The manifest label rule (README "Manifests" and docs/FORMAT.md): a missing, null or empty
# label means no label. Otherwise every label of a manifest is of one kind:
# - integers: JSON integers or decimal text ("7", "-2" is refused), 0 <= label < 2**63 - 1;
# - class names: JSON strings or CSV text that is not decimal, numbered in sorted name order.
# A label of another JSON type (true, 1.5, [1], {}), an integer out of range, or a label of
# the other kind than the manifest's first label is a bad row; all bad rows are reported.
MAX_LABEL = 2**63 - 2  # -1 means "no label" in a store; int64
MAX_BAD_ROWS_SHOWN = 20


def _label_kind(value: object) -> tuple[str, object]:
    """("int", n), ("name", text) or ("bad", reason) for one present label."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return "bad", f"Expected an integer or a class-name string. Got {json.dumps(value)}"
    if isinstance(value, int):
        return "int", value
    text = value.strip()
    if text.lstrip("+-").isdigit() and text.isascii():
        return "int", int(text)
    return "name", value


def manifest_labels(values: list[tuple[int, object]], where: str) -> tuple[list[int | None], list[str] | None]:
    """Apply the manifest label rule to (line, raw label) pairs.

    Returns the integer label of each row (None: no label) and the class names (None for
    integer labels). Raises one IngestError naming every bad row's line.
    """
    kinds = [(line, None if value in (None, "") else _label_kind(value)) for line, value in values]
    first = next((kind[0] for _, kind in kinds if kind is not None and kind[0] != "bad"), None)
    bad: list[str] = []
    for line, kind in kinds:
        if kind is None:
            continue
        tag, value = kind
        if tag == "bad":
            bad.append(f"line {line}: {value}.")
        elif tag != first:
            wanted = "an integer label" if first == "int" else "a class-name label"
            bad.append(f"line {line}: Expected {wanted} like the manifest's first label (one kind per manifest). "
                       f"Got {value!r}.")
        elif tag == "int" and not 0 <= int(value) <= MAX_LABEL:  # type: ignore[call-overload]
            bad.append(f"line {line}: Expected an integer label in [0, {MAX_LABEL}]. Got {value}.")
    if bad:
        shown = bad[:MAX_BAD_ROWS_SHOWN] + ([f"... and {len(bad) - MAX_BAD_ROWS_SHOWN} more"] if len(bad) > MAX_BAD_ROWS_SHOWN else [])
        raise IngestError(f"manifest {where!r}: {len(bad)} bad label(s):\n  " + "\n  ".join(shown))
    if first != "name":
        return [None if kind is None else int(kind[1]) for _, kind in kinds], None  # type: ignore[call-overload]
    class_names = sorted({str(kind[1]) for _, kind in kinds if kind is not None})
    label_of = {name: index for index, name in enumerate(class_names)}
    return [None if kind is None else label_of[str(kind[1])] for _, kind in kinds], class_names


def _warn_duplicates(paths: list[tuple[int, str]], where: str) -> None:
    """Warn once per path listed more than once (it would be stored twice)."""
    lines: dict[str, list[int]] = {}
    for line, file in paths:
        lines.setdefault(os.path.normpath(file), []).append(line)
    for file, seen in lines.items():
        if len(seen) > 1:
            warnings.warn(
                f"manifest {where!r}: path {file!r} is listed {len(seen)} times (lines "
                f"{', '.join(map(str, seen))}); each row becomes a sample",
                UserWarning, stacklevel=3,
            )
