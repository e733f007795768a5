"""``prepkit shard`` and ``prepkit.write_store``: turn a source into a store.

1. list the source (files; or Python samples, :mod:`prepkit.ingest.samples`) (order fixed before any pixel is read);
2. probe every image header to bound each shard's size (sizes the shard index);
3. encode the samples in worker processes, shard by shard, in source order;
4. write each shard whole, renamed into place; finish the store last.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from prepkit import __version__
from prepkit.errors import IngestError
from prepkit.ingest.images import DEFAULT_MAX_PIXELS, ImageOptions, load_image, load_mask, probe_size
from prepkit.ingest.samples import (
    Keys,
    SampleEncodeJob,
    SampleProbeJob,
    SampleSource,
    Shape,
    Spool,
    check_picklable,
    encode_fields,
    is_indexed,
    spool_folder,
)
from prepkit.ingest.sources import IMAGE_EXTENSIONS, SourceItem, list_source
from prepkit.layouts import Layout, LosslessLayout, RawLayout
from prepkit.parallel import run_ordered
from prepkit.store.extras import Declaration, FieldSpec, FieldValueError, infer_schema
from prepkit.store.publish import write_through_staging
from prepkit.store.storage import is_url
from prepkit.store.writer import EncodedSample, SampleFailure, ShardExecutor, WriteSummary, plan_store, write_all


def mask_layout(fast_decode: bool = False) -> Layout:
    """Masks are stored with the lossless codec when it is available, raw otherwise."""
    try:
        from prepkit import lossless

        if hasattr(lossless, "encode"):
            return LosslessLayout(version=lossless.MASK_VERSION, fast_decode=fast_decode)
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
            mask_path = item.mask_path
            mask = None if mask_path is None else (lambda: load_mask(mask_path, self.options))
            fields = encode_fields(self.layouts, pixels, mask, item.path, mask_path or "")
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
    src: str | os.PathLike[str] | Sequence[str],
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
    keys: Keys | None = None,
    fields: Sequence[str] = (),
) -> tuple[WriteSummary, list[tuple[str, str]]]:
    """Shard ``src`` into a store at ``dest``. Returns the summary and the files that
    were ignored because they are not images.

    ``src`` is an image folder or a manifest, or WebDataset ``.tar`` shards (one path, a
    list, or a brace pattern ``data-{000..009}.tar``), or a Hugging Face dataset folder
    (``save_to_disk``; ``keys`` names its columns). ``dest`` may be an object storage URL
    (``s3://bucket/prefix``): the store is built in a local staging folder and uploaded,
    complete marker last (see :mod:`prepkit.store.publish`). ``executor`` runs the
    per-shard encode elsewhere (:mod:`prepkit.ingest.executors`).
    ``fields`` declares the manifest columns stored as extra per-sample fields
    (``NAME[:KIND]``, :func:`prepkit.ingest.sources.list_source`).
    """
    if is_url(dest):
        return write_through_staging(dest, storage_options, overwrite, lambda local, again: build_store(
            src, local, layout=layout, options=options, samples_per_shard=samples_per_shard, workers=workers,
            on_error=on_error, overwrite=again, progress=progress, on_total=on_total, executor=executor, keys=keys,
            fields=fields,
        ))
    from prepkit.ingest.adapters import open_dataset_source

    keys = replace(keys or Keys(), extras=tuple(text.partition(":")[0] for text in fields))
    source = open_dataset_source(src, keys)
    if source is not None:
        summary = write_dataset(
            source, dest, layout=layout, options=options, samples_per_shard=samples_per_shard, workers=workers,
            on_error=on_error, overwrite=overwrite, progress=progress, on_total=on_total, executor=executor,
            command="shard", fields=fields,
        )
        return summary, source.ignored
    assert isinstance(src, (str, os.PathLike))
    listing = list_source(src, fields)
    items = listing.items
    if not items:
        raise IngestError(_no_images(str(src), listing.ignored))
    bounds = list(run_ordered(ProbeJob(tuple(items), options), range(len(items)), workers, window=workers * 64))
    layouts = _layouts(layout, listing.has_masks)
    summary = _plan_and_write(
        dest, layouts, bounds, ShardJob(items=tuple(items), options=options, layouts=tuple(layouts.items())),
        class_names=listing.class_names, source=os.path.abspath(src), command="shard", options=options,
        digest=items_digest(items), samples_per_shard=samples_per_shard, workers=workers, on_error=on_error,
        overwrite=overwrite, ignored=listing.ignored, progress=progress, on_total=on_total, executor=executor,
        extras=listing.extras, fields=fields,
    )
    return summary, listing.ignored


def _no_images(src: str, ignored: list[tuple[str, str]]) -> str:
    """The error for a source without a single image file (it would make an empty store)."""
    if not ignored:
        return f"source {src!r}: Expected image files ({', '.join(IMAGE_EXTENSIONS)}). Got none: it is empty."
    return (f"source {src!r}: Expected image files ({', '.join(IMAGE_EXTENSIONS)}). Got none among its "
            f"{len(ignored)} other entries (first: {ignored[0][0]!r}, {ignored[0][1]}).")


def _layouts(layout: Layout, has_masks: bool) -> dict[str, Layout]:
    layouts: dict[str, Layout] = {"image": layout}
    if has_masks:
        # masks follow the images' choice of decode speed over size
        layouts["mask"] = mask_layout(bool(getattr(layout, "fast_decode", False)))
    return layouts


def _plan_and_write(
    dest: str | os.PathLike[str],
    layouts: dict[str, Layout],
    bounds: list[Shape | None],
    job: Callable[[int], EncodedSample | SampleFailure],
    *,
    class_names: list[str] | None,
    source: str,
    command: str,
    options: ImageOptions,
    digest: str,
    samples_per_shard: int,
    workers: int,
    on_error: str,
    overwrite: bool,
    ignored: list[tuple[str, str]],
    progress: Callable[[int], None],
    on_total: Callable[[int], None],
    executor: ShardExecutor | None,
    extras: dict[str, Any] | None = None,
    fields: Sequence[str] = (),
) -> WriteSummary:
    """Plan the store from each item's size bound and write it: the one path from probed
    items to a store, for file sources and Python samples alike. ``extras`` is the schema
    of the extra per-sample fields (:mod:`prepkit.store.extras`), ``fields`` their
    declarations as given (recorded in the provenance)."""
    if options.mode == "keep":
        bounds = [None if b is None else (b[0], b[1], 4) for b in bounds]  # channels not known before decoding
    shapes = {name: bounds if name == "image" else [None if b is None else (b[0], b[1], 1) for b in bounds] for name in layouts}
    layout = layouts["image"]
    recorded = dict(asdict(options))
    if fields:  # recorded only when given: provenance of stores without extra fields is unchanged
        recorded["fields"] = list(fields)
    plan = plan_store(
        layouts,
        shapes,
        samples_per_shard,
        class_names=class_names,
        provenance={
            "source": source,
            "command": command,
            "options": {**recorded, "layout": layout.to_dict(), "samples_per_shard": samples_per_shard, "on_error": on_error},
            "prepkit_version": __version__,
        },
        items_digest=digest,
        extras=extras,
    )
    on_total(len(bounds))
    return write_all(
        dest, plan, job, workers=workers, on_error=on_error, overwrite=overwrite, ignored=ignored,
        progress=progress, executor=executor,
    )


def write_dataset(
    source: SampleSource,
    dest: str | os.PathLike[str],
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
    command: str = "write_store",
    spool_dir: str | os.PathLike[str] | None = None,
    fields: Sequence[str] = (),
) -> WriteSummary:
    """Write the samples of ``source`` (an indexed dataset, or a plain iterable read once
    in order into a temporary spool) to the local store ``dest``. ``fields`` declares the
    extra per-sample fields (``NAME[:KIND]``, the keys ``source.keys.extras`` of dict
    samples); their schema is completed from the first sample."""
    samples = source.samples
    with spool_folder(spool_dir) as folder:
        if not is_indexed(samples):
            samples = Spool.write(samples, folder)
        if len(samples) == 0:
            where = source.description or type(source.samples).__name__
            raise IngestError(f"{where}: Expected at least one sample. Got none: it is empty.")
        base: dict[str, Any] = {"dataset": samples, "keys": source.keys, "options": options}
        schema = _extras_schema(SampleProbeJob(**base), fields) if fields else None
        base["schema"] = schema
        probe_job = SampleProbeJob(**base)
        if workers > 1 or executor is not None:
            check_picklable(probe_job, source.description or "samples", workers)
        probes = list(run_ordered(probe_job, range(len(samples)), workers, window=workers * 64))
        layouts = _layouts(layout, any(p.has_mask for p in probes))
        digest = hashlib.sha256(b"".join(p.digest for p in probes)).hexdigest()
        try:
            return _plan_and_write(
                dest, layouts, [p.image for p in probes], SampleEncodeJob(**base, layouts=tuple(layouts.items())),
                class_names=source.class_names, source=source.description, command=command, options=options,
                digest=digest, samples_per_shard=samples_per_shard, workers=workers, on_error=on_error,
                overwrite=overwrite, ignored=source.ignored, progress=progress, on_total=on_total, executor=executor,
                extras=schema, fields=fields,
            )
        finally:
            if isinstance(samples, Spool):
                samples.close()


def _extras_schema(job: SampleProbeJob, fields: Sequence[str]) -> dict[str, FieldSpec]:
    """The extra fields' schema: the declarations, completed from sample 0's values."""
    declared = {text.partition(":")[0]: text.partition(":")[2] for text in fields}
    try:
        return infer_schema(job.parts(0).extras, declared)
    except FieldValueError as error:
        raise IngestError(f"sample 0: {error}") from None


def write_store(
    dest: str | os.PathLike[str],
    samples: Any,
    *,
    layout: str | Layout = "lossless",
    quality: int = 90,
    lossless_version: int = 2,
    lossless_fast_decode: bool = False,
    samples_per_shard: int = 1024,
    workers: int = 1,
    on_error: str = "raise",
    overwrite: bool = False,
    mode: str = "rgb",
    max_side: int | None = None,
    max_pixels: int | None = None,
    alpha: str = "drop",
    background: tuple[int, int, int] = (0, 0, 0),
    class_names: list[str] | None = None,
    image_key: str = "image",
    label_key: str = "label",
    mask_key: str = "mask",
    progress: bool = True,
    spool_dir: str | os.PathLike[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    executor: ShardExecutor | None = None,
    fields: Sequence[str] = (),
) -> WriteSummary:
    """Write ``samples`` to a store at ``dest`` (a folder, or an ``s3://``-style URL).

    ``samples``: a torch ``Dataset``, a Hugging Face ``datasets.Dataset``, the result of
    :func:`prepkit.from_webdataset` / :func:`prepkit.from_hf` / :func:`prepkit.from_torch`,
    any indexed dataset (``__len__`` and ``__getitem__``) or iterable of samples, or a path
    that ``prepkit shard`` takes as SRC. A sample is a dict (``image``, optional ``label``
    and ``mask``; other key names with ``image_key``/``label_key``/``mask_key``), a tuple
    ``(image, label)`` / ``(image, mask)`` / ``(image, label, mask)``, or a bare image; an
    image is encoded bytes, a file path, a PIL image, a uint8 numpy array (H x W x C) or a
    uint8 torch tensor (C x H x W); see :mod:`prepkit.ingest.samples`.

    ``lossless_version`` and ``lossless_fast_decode`` are ``--lossless-version`` and
    ``--lossless-fast-decode`` of ``prepkit shard`` (used when ``layout`` is a name).

    Like ``prepkit shard``: ``workers > 1`` encodes in that many spawned processes (an
    indexed dataset is sent to them pickled, and read by index; a plain iterable is read
    once, in order, into a temporary spool under ``spool_dir``), the store is byte-identical
    whatever ``workers``; killed, the same call resumes after the last complete shard (and
    is a no-op on a store it completed); ``on_error="skip"`` stores every good sample and
    reports each bad one (source index and reason) in the summary's ``failures`` and in
    ``skipped.jsonl``, ``"raise"`` stops at the first with an IngestError naming it.
    ``alpha="drop"`` (default) drops transparency as Pillow's ``convert("RGB")`` and
    torchvision do, ``"composite"`` blends onto ``background``.

    ``fields`` stores other keys of dict samples (Hugging Face: columns) as extra per-sample
    fields, declared as ``prepkit shard --field`` declares manifest columns: ``"caption"``,
    ``"score:float"``, ``"boxes:float32[*,4]"``; what a declaration leaves open is taken from
    the first sample. A sample without one of them, or with a value that does not fit, is a
    bad sample. ``store[i]`` and the Reader's ``fields=`` return them (README, "Extra fields").
    """
    from prepkit.ingest.adapters import as_source
    from prepkit.layouts import make_layout
    from prepkit.store.publish import check_any_destination

    if on_error not in ("raise", "fail", "skip"):
        raise ValueError(f"on_error: Expected 'raise' or 'skip'. Got {on_error!r}.")
    chosen = (make_layout(layout, quality=quality, lossless_version=lossless_version,
                          lossless_fast_decode=lossless_fast_decode) if isinstance(layout, str) else layout)
    options = ImageOptions(mode=mode, max_side=max_side, max_pixels=max_pixels or DEFAULT_MAX_PIXELS, alpha=alpha,
                           background=background)
    try:
        names = tuple(Declaration.parse(text).name for text in fields)
    except FieldValueError as error:
        raise IngestError(f"fields: {error}") from None
    keys = Keys(image=image_key, label=label_key, mask=mask_key, extras=names)
    failing = "skip" if on_error == "skip" else "fail"
    check_any_destination(str(dest), overwrite, storage_options)  # refuse before any sample is read
    from tqdm.auto import tqdm

    with tqdm(desc="write_store", unit="img", disable=None if progress else True, dynamic_ncols=True) as bar:
        common: dict[str, Any] = {
            "layout": chosen, "options": options, "samples_per_shard": samples_per_shard, "workers": workers,
            "on_error": failing, "progress": bar.update, "on_total": lambda n: setattr(bar, "total", n),
            "executor": executor,
        }
        if isinstance(samples, (str, os.PathLike)) or (isinstance(samples, (list, tuple)) and samples and all(isinstance(s, str) for s in samples)):
            summary, _ = build_store(samples, str(dest), overwrite=overwrite, storage_options=storage_options, keys=keys,
                                     fields=fields, **common)
            return summary
        source = as_source(samples, keys)
        if class_names is not None:
            source.class_names = list(class_names)

        def write(local: str, again: bool) -> tuple[WriteSummary, list[tuple[str, str]]]:
            return (write_dataset(source, local, overwrite=again, spool_dir=spool_dir, fields=fields, **common),
                    source.ignored)

        return write_through_staging(str(dest), storage_options, overwrite, write)[0]
