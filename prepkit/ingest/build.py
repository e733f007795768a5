"""``prepkit shard``: turn a folder or manifest into a store.

1. list the source (order fixed before any pixel is read);
2. probe every image header to bound each shard's size (sizes the shard index);
3. encode the samples in worker processes, shard by shard, in source order;
4. write each shard whole, renamed into place; finish the store last.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from prepkit import __version__
from prepkit.errors import IngestError, PrepkitError
from prepkit.ingest.images import ImageOptions, load_image, load_mask, probe_size
from prepkit.ingest.sources import SourceItem, list_source
from prepkit.layouts import Layout, LosslessLayout, RawLayout
from prepkit.parallel import run_ordered
from prepkit.store.publish import write_through_staging
from prepkit.store.storage import is_url
from prepkit.store.writer import EncodedSample, SampleFailure, ShardExecutor, WriteSummary, plan_store, write_all


def mask_layout() -> Layout:
    """Masks are stored with the lossless codec when it is available, raw otherwise."""
    try:
        from prepkit import lossless

        if hasattr(lossless, "encode"):
            return LosslessLayout(version=lossless.MASK_VERSION)
    except ImportError:
        pass
    return RawLayout()


@dataclass(frozen=True)
class ShardJob:
    """Encodes source item ``i``: picklable, sent once to each worker."""

    items: tuple[SourceItem, ...]
    options: ImageOptions
    layouts: tuple[tuple[str, Layout], ...]

    def __call__(self, index: int) -> EncodedSample | SampleFailure:
        item = self.items[index]
        try:
            pixels = load_image(item.path, self.options)
            fields: dict[str, tuple[bytes, tuple[int, int, int]]] = {}
            for name, layout in self.layouts:
                if name == "image":
                    data = pixels
                else:
                    if item.mask_path is None:
                        raise IngestError(f"{item.path}: no mask given for this sample")
                    data = load_mask(item.mask_path, self.options)
                    if data.shape[:2] != pixels.shape[:2]:
                        raise IngestError(
                            f"{item.mask_path}: mask is {data.shape[1]}x{data.shape[0]}, its image "
                            f"{item.path} is {pixels.shape[1]}x{pixels.shape[0]}"
                        )
                height, width = int(data.shape[0]), int(data.shape[1])
                channels = int(data.shape[2]) if data.ndim == 3 else 1
                try:
                    fields[name] = (layout.encode(data), (height, width, channels))
                except (PrepkitError, ValueError) as error:  # e.g. a size the layout cannot store
                    raise IngestError(f"{item.path}: cannot be stored as {layout.name}: {error}") from None
            return EncodedSample(item=index, relpath=item.relpath or item.path, label=item.label, fields=fields,
                                 extras=item.extras)
        except IngestError as error:
            return SampleFailure(item=index, path=item.path, reason=_reason(error, item.path))


def _reason(error: Exception, path: str) -> str:
    text = str(error)
    prefix = f"{path}: "
    return text[len(prefix):] if text.startswith(prefix) else text


@dataclass(frozen=True)
class ProbeJob:
    items: tuple[SourceItem, ...]
    options: ImageOptions

    def __call__(self, index: int) -> tuple[int, int, int] | None:
        return probe_size(self.items[index].path, self.options)


def items_digest(items: list[SourceItem]) -> str:
    """Digest of the ordered items: paths, labels, masks and extra field values (a resumed
    run whose manifest changed must start over)."""
    digest = hashlib.sha256()
    for item in items:
        digest.update(os.fsencode(item.path) + b"\0" + str(item.label).encode() + b"\0" + os.fsencode(item.mask_path or "") + b"\n")
        for name, value in item.extras.items():  # none for most sources: their digest is unchanged
            digest.update(f"{name}:{value.dtype.str}:{value.shape}:".encode() + value.tobytes() + b"\n")
    return digest.hexdigest()


def build_store(
    src: str,
    dest: str,
    *,
    layout: Layout,
    options: ImageOptions,
    samples_per_shard: int,
    workers: int,
    on_error: str = "fail",
    overwrite: bool = False,
    progress: Callable[[int], None] = lambda n: None,
    on_total: Callable[[int], None] = lambda n: None,
    executor: ShardExecutor | None = None,
    storage_options: dict[str, Any] | None = None,
    fields: Sequence[str] = (),
) -> tuple[WriteSummary, list[tuple[str, str]]]:
    """Shard ``src`` into a store at ``dest``. Returns the summary and the files that
    were ignored because they are not images.

    ``dest`` may be an object storage URL (``s3://bucket/prefix``): the store is built in a
    local staging folder and uploaded, complete marker last (see :mod:`prepkit.store.publish`).
    ``executor`` runs the per-shard encode elsewhere (:mod:`prepkit.ingest.executors`).
    ``fields`` declares the manifest columns stored as extra per-sample fields
    (``NAME[:KIND]``, :func:`prepkit.ingest.sources.list_source`).
    """
    if is_url(dest):
        return write_through_staging(dest, storage_options, overwrite, lambda local, again: build_store(
            src, local, layout=layout, options=options, samples_per_shard=samples_per_shard, workers=workers,
            on_error=on_error, overwrite=again, progress=progress, on_total=on_total, executor=executor, fields=fields,
        ))
    listing = list_source(src, fields)
    items = listing.items
    layouts: dict[str, Layout] = {"image": layout}
    if listing.has_masks:
        layouts["mask"] = mask_layout()
    bounds = list(run_ordered(ProbeJob(tuple(items), options), range(len(items)), workers, window=workers * 64))
    if options.mode == "keep":
        bounds = [None if b is None else (b[0], b[1], 4) for b in bounds]  # channels not known before decoding
    shapes = {name: bounds if name == "image" else [None if b is None else (b[0], b[1], 1) for b in bounds] for name in layouts}
    recorded = dict(asdict(options))
    if fields:  # recorded only when given: provenance of stores without extra fields is unchanged
        recorded["fields"] = list(fields)
    plan = plan_store(
        layouts,
        shapes,
        samples_per_shard,
        class_names=listing.class_names,
        provenance={
            "source": os.path.abspath(src),
            "command": "shard",
            "options": {**recorded, "layout": layout.to_dict(), "samples_per_shard": samples_per_shard, "on_error": on_error},
            "prepkit_version": __version__,
        },
        items_digest=items_digest(items),
        extras=listing.extras,
    )
    on_total(len(items))
    job = ShardJob(items=tuple(items), options=options, layouts=tuple(layouts.items()))
    summary = write_all(
        dest, plan, job, workers=workers, on_error=on_error, overwrite=overwrite, ignored=listing.ignored,
        progress=progress, executor=executor,
    )
    return summary, listing.ignored
