"""``prepkit convert``: transcode a store to another layout, keeping labels and metadata."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prepkit import __version__
from prepkit.errors import PrepkitError
from prepkit.ingest.build import write_in_shards
from prepkit.layouts import Layout, LosslessLayout
from prepkit.store.format import ShardGeometry
from prepkit.store.reader import Store
from prepkit.store.writer import EncodedSample, SampleFailure, StorePlan, StoreWriter, WriteSummary


@dataclass
class ConvertJob:
    """Re-encodes sample ``i`` of the source store (reopened once in each worker)."""

    source: str
    layouts: dict[str, Layout]
    _store: Store | None = field(default=None, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {"source": self.source, "layouts": self.layouts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.source, self.layouts, self._store = state["source"], state["layouts"], None

    def __call__(self, index: int) -> EncodedSample | SampleFailure:
        if self._store is None:
            self._store = Store(self.source)
        store = self._store
        try:
            fields = {}
            for name, layout in self.layouts.items():
                shape = store.shape(index, name)
                if store.field_arrays[name].layout == layout:
                    fields[name] = (store.read_bytes(index, name).tobytes(), shape)
                else:
                    fields[name] = (layout.encode(store.decode(index, name)), shape)
            return EncodedSample(item=index, relpath=store.source_path(index), label=store.label(index), fields=fields)
        except PrepkitError as error:
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
) -> WriteSummary:
    """Write ``source``'s samples to a new store at ``dest`` with the image layout ``layout``."""
    with Store(source) as store:
        per_shard = samples_per_shard or store.attributes.samples_per_shard
        layouts: dict[str, Layout] = {"image": layout}
        for name, arrays in store.field_arrays.items():
            if name != "image":
                layouts[name] = _upgraded(arrays.layout)
        fields = {}
        for name, chosen in layouts.items():
            shapes = store.field_arrays[name].shapes
            largest = 0
            for start in range(0, len(store), per_shard):
                largest = max(largest, sum(chosen.max_stored_size(int(h), int(w), int(c)) for h, w, c in shapes[start : start + per_shard]))
            geometry = ShardGeometry.for_largest_shard(largest)
            fields[name] = {"layout": chosen.to_dict(), "capacity": geometry.capacity, "chunk": geometry.chunk}
        digest = hashlib.sha256(store.field_arrays["image"].crc32c.tobytes() + store.labels.tobytes()).hexdigest()
        plan = StorePlan(
            num_items=len(store),
            samples_per_shard=per_shard,
            fields=fields,
            class_names=store.class_names,
            provenance={
                "source": str(store.path.resolve()),
                "command": "convert",
                "options": {"layout": layout.to_dict(), "samples_per_shard": per_shard},
                "prepkit_version": __version__,
                "parent": store.attributes.provenance,
            },
            items_digest=digest,
        )
    on_total(plan.num_items)
    job = ConvertJob(source=source, layouts=layouts)
    with StoreWriter(dest, plan, layouts, overwrite=overwrite) as writer:
        write_in_shards(writer, job, workers, "fail", progress)
        return writer.finalize()


def _upgraded(layout: Layout) -> Layout:
    """Masks and other kept fields: a lossless layout moves to the current bitstream version."""
    from prepkit.lossless import DEFAULT_VERSION

    if isinstance(layout, LosslessLayout) and layout.version != DEFAULT_VERSION:
        return LosslessLayout(tile=layout.tile, version=DEFAULT_VERSION)
    return layout
