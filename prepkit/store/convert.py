"""``prepkit convert``: transcode a store to another layout, keeping labels and metadata."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prepkit import __version__
from prepkit.errors import PrepkitError
from prepkit.layouts import Layout, LosslessLayout
from prepkit.store.publish import write_through_staging
from prepkit.store.reader import Store
from prepkit.store.storage import is_url
from prepkit.store.writer import EncodedSample, SampleFailure, WriteSummary, plan_store, write_all


@dataclass
class ConvertJob:
    """Re-encodes sample ``i`` of the source store (reopened once in each worker)."""

    source: str
    layouts: dict[str, Layout]
    storage_options: dict[str, Any] | None = None
    _store: Store | None = field(default=None, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {"source": self.source, "layouts": self.layouts, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.source, self.layouts, self._store = state["source"], state["layouts"], None
        self.storage_options = state.get("storage_options")

    def __call__(self, index: int) -> EncodedSample | SampleFailure:
        if self._store is None:
            self._store = Store(self.source, storage_options=self.storage_options)
        store = self._store
        try:
            fields = {}
            for name, layout in self.layouts.items():
                shape = store.shape(index, name)
                if store.field_arrays[name].layout == layout:
                    fields[name] = (store.read_bytes(index, name).tobytes(), shape)
                else:
                    fields[name] = (layout.encode(store.decode(index, name)), shape)
            extras = {name: np.array(column.raw(index)) for name, column in store.extra_columns.items()}
            return EncodedSample(item=index, relpath=store.source_path(index), label=store.label(index), fields=fields,
                                 extras=extras)
        except (PrepkitError, ValueError) as error:  # ValueError: a size the new layout cannot store
            return SampleFailure(item=index, path=f"{self.source}[{index}]", reason=str(error))


def convert_store(
    source: str,
    dest: str,
    *,
    layout: Layout,
    samples_per_shard: int | None,
    workers: int,
    overwrite: bool,
    progress: Callable[[int], None] = lambda n: None,
    on_total: Callable[[int], None] = lambda n: None,
    storage_options: dict[str, Any] | None = None,
) -> WriteSummary:
    """Write ``source``'s samples to a new store at ``dest`` with the image layout ``layout``.

    Either may be an object storage URL; ``storage_options`` apply to both.
    """
    if is_url(dest):
        return write_through_staging(dest, storage_options, overwrite, lambda local, again: convert_store(
            source, local, layout=layout, samples_per_shard=samples_per_shard, workers=workers, overwrite=again,
            progress=progress, on_total=on_total, storage_options=storage_options,
        ))
    with Store(source, storage_options=storage_options) as store:
        per_shard = samples_per_shard or store.attributes.samples_per_shard
        layouts: dict[str, Layout] = {"image": layout}
        for name, arrays in store.field_arrays.items():
            if name != "image":
                layouts[name] = _upgraded(arrays.layout, layout)
        shapes = {
            name: [(int(h), int(w), int(c)) for h, w, c in store.field_arrays[name].shapes] for name in layouts
        }
        digest = hashlib.sha256(store.field_arrays["image"].crc32c.tobytes() + store.labels.tobytes())
        for name, column in store.extra_columns.items():  # extra fields are carried across unchanged
            digest.update(name.encode() + column.values.tobytes() + (b"" if column.ranges is None else column.ranges.tobytes()))
        plan = plan_store(
            layouts,
            shapes,
            per_shard,
            class_names=store.class_names,
            provenance={
                "source": str(store.path.resolve()),
                "command": "convert",
                "options": {"layout": layout.to_dict(), "samples_per_shard": per_shard},
                "prepkit_version": __version__,
                "parent": store.attributes.provenance,
            },
            items_digest=digest.hexdigest(),
            extras=store.extra_fields,
        )
    on_total(plan.num_items)
    job = ConvertJob(source=source, layouts=layouts, storage_options=storage_options)
    return write_all(dest, plan, job, workers=workers, overwrite=overwrite, progress=progress)


def _upgraded(layout: Layout, image_layout: Layout) -> Layout:
    """Masks: a lossless layout moves to the bitstream version masks are written with, and
    to the new image layout's fast_decode when that one is lossless."""
    from prepkit.lossless import MASK_VERSION

    if not isinstance(layout, LosslessLayout):
        return layout
    fast = image_layout.fast_decode if isinstance(image_layout, LosslessLayout) else layout.fast_decode
    if layout.version != MASK_VERSION or layout.fast_decode != fast:
        return LosslessLayout(tile=layout.tile, version=MASK_VERSION, fast_decode=fast)
    return layout
