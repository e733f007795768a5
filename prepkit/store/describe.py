"""A summary of a store: what ``prepkit inspect`` prints."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from prepkit.store.format import shard_path
from prepkit.store.reader import Store


def _stats(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {"min": 0, "median": 0, "max": 0}
    return {"min": int(values.min()), "median": float(np.median(values)), "max": int(values.max())}


def _shard_file_sizes(folder: Path, num_shards: int) -> list[int]:
    """Sizes of the shard files present (a listing, not range(num_shards): a count read from
    metadata must not decide how long this loops)."""
    if not folder.is_dir():
        return []
    with os.scandir(folder) as entries:
        return [e.stat().st_size for e in entries if e.name.isdigit() and int(e.name) < num_shards and e.is_file()]


def describe(store: Store) -> dict[str, Any]:
    """Layout, counts, shapes, shard files and sizes of ``store`` as a JSON-ready dict."""
    disk = 0
    objects: dict[str, int] | None = None
    if store.remote is not None:  # object storage: one listing gives every size
        objects = store.remote.listing()
        disk = sum(objects.values())
    else:
        for folder, _, files in os.walk(str(store.path)):
            for name in files:
                try:
                    disk += os.path.getsize(os.path.join(folder, name))
                except OSError:
                    pass
    fields = {}
    for name, arrays in store.field_arrays.items():
        shapes = arrays.shapes.astype(np.int64)
        stored = int((arrays.ranges[:, 1] - arrays.ranges[:, 0]).sum()) if len(store) else 0
        raw = int(np.prod(shapes, axis=1).sum()) if len(store) else 0
        if objects is not None:
            prefix = f"{name}/bytes/c/"
            shard_sizes = [size for key, size in objects.items() if key.startswith(prefix) and key[len(prefix):].isdigit()]
        else:
            shard_sizes = _shard_file_sizes(shard_path(Path(str(store.path)), name, 0).parent, store.num_shards)
        sizes = np.array(shard_sizes, dtype=np.int64)
        fields[name] = {
            "layout": arrays.layout.to_dict(),
            "height": _stats(shapes[:, 0]),
            "width": _stats(shapes[:, 1]),
            "channels": sorted({int(c) for c in shapes[:, 2]}),
            "fixed_shape": list(map(int, shapes[0])) if len(store) and bool((shapes == shapes[0]).all()) else None,
            "stored_bytes": stored,
            "raw_bytes": raw,
            "size_vs_raw": round(stored / raw, 4) if raw else None,
            "shard_files": len(shard_sizes),
            "shard_bytes": {"total": int(sizes.sum()), **_stats(sizes)},
            "inner_chunk_bytes": arrays.geometry.chunk,
        }
    extras = {}
    for name, column in store.extra_columns.items():
        entry: dict[str, Any] = {"type": str(column.spec), "kind": column.spec.kind, "stored_bytes": int(column.values.nbytes)}
        if column.ranges is not None:  # rows (arrays) or bytes (strings, bytes) per sample
            entry["length"] = _stats(column.lengths(np.arange(len(store))))
        extras[name] = entry
    labels = store.labels
    labelled = labels[labels >= 0]
    return {
        "path": str(store.path),
        "format_version": store.attributes.format_version,
        "layout": store.layout,
        "samples": len(store),
        "shards": store.num_shards,
        "samples_per_shard": store.attributes.samples_per_shard,
        "bytes_on_disk": disk,
        "fields": fields,
        "extras": extras,
        "labelled_samples": int(labelled.size),
        "classes": store.class_names,
        "samples_per_class": np.bincount(labelled).tolist() if labelled.size else [],
        "provenance": store.attributes.provenance,
    }


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def format_description(info: dict[str, Any]) -> str:
    """Human-readable text of :func:`describe`'s dict."""
    lines = [
        f"store        {info['path']}",
        f"format       prepkit v{info['format_version']}, layout {info['layout']}",
        f"samples      {info['samples']} in {info['shards']} shards of up to {info['samples_per_shard']}",
        f"on disk      {_size(info['bytes_on_disk'])}",
    ]
    for name, field in info["fields"].items():
        h, w = field["height"], field["width"]
        shape = (
            "x".join(map(str, field["fixed_shape"]))
            if field["fixed_shape"]
            else f"H {h['min']}..{h['max']} (median {h['median']:g}), W {w['min']}..{w['max']} (median {w['median']:g})"
        )
        ratio = f"{field['size_vs_raw']:.3f}x raw" if field["size_vs_raw"] is not None else "n/a"
        shard = field["shard_bytes"]
        lines += [
            f"{name:<12} {field['layout']['name']} {shape}, channels {field['channels']}",
            f"{'':<12} {_size(field['stored_bytes'])} stored, {_size(field['raw_bytes'])} as raw pixels ({ratio})",
            f"{'':<12} {field['shard_files']} shard files, {_size(shard['total'])} "
            f"(each {_size(shard['min'])}..{_size(shard['max'])})",
        ]
    for name, extra in info.get("extras", {}).items():
        length = extra.get("length")
        unit = "rows" if extra["kind"] == "array" else "bytes"
        spread = f", {length['min']}..{length['max']} {unit} (median {length['median']:g})" if length else ""
        lines.append(f"{name:<12} extra {extra['type']}{spread}, {_size(extra['stored_bytes'])}")
    classes = info["classes"]
    if classes:
        shown = ", ".join(f"{n} ({c})" for n, c in zip(classes[:8], info["samples_per_class"][:8], strict=True))
        more = f", ... {len(classes) - 8} more" if len(classes) > 8 else ""
        lines.append(f"classes      {len(classes)}: {shown}{more}")
    else:
        lines.append(f"labels       {info['labelled_samples']} labelled samples" if info["labelled_samples"] else "labels       none")
    return "\n".join(lines)
