"""The Reader's options as one object, validated once: types and ranges first (before the
store is opened, prepkit.reader.arguments), then what depends on the store's fields."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prepkit.cudart import cuda_index, parse_device
from prepkit.errors import PipelineError
from prepkit.parallel import rank_threads
from prepkit.reader.arguments import check_reader_arguments
from prepkit.store.extras import check_pad_value

OUTPUTS = ("numpy", "torch", "cupy", "dlpack")


@dataclass
class ReaderConfig:
    """Every Reader option, normalised: ``device`` is "cpu" or "cuda" and ``device_index``
    the GPU ("cuda:N", or for "cuda" torch's current device / LOCAL_RANK / 0)."""

    batch_size: int
    shuffle: bool = True
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    drop_last: bool = False
    device: str = "cpu"
    device_index: int | None = None
    transfer_index: int = 0
    fields: tuple[str, ...] = ("image", "label")
    layout: str = "NCHW"
    output: str = "numpy"
    shards_in_use: int | None = None
    gpu_memory_budget: int | None = None
    prefetch: int = 2
    threads: int = 1
    on_error: str = "raise"
    mask_mode: str = "nearest"
    crop_decode: bool = True
    pad_fields: dict[str, float] = field(default_factory=dict)
    extra_names: tuple[str, ...] = ()

    @classmethod
    def build(cls, *, batch_size: int, shuffle: bool, seed: int, rank: int, world_size: int, drop_last: bool,
              device: str, transfer_index: int | None, fields: Sequence[str], layout: str, output: str,
              shards_in_use: int | None, gpu_memory_budget: int | None, prefetch: int, threads: int | None,
              on_error: str, mask_mode: str, crop_decode: bool, pad_fields: Mapping[str, float] | None,
              storage_options: Mapping[str, Any] | None, cache_dir: str | os.PathLike[str] | None,
              cache_limit: int | None, cache_policy: str) -> ReaderConfig:
        """Check every argument (TypeError/ValueError naming it) and normalise them."""
        check_reader_arguments(
            batch_size=batch_size, seed=seed, rank=rank, world_size=world_size, shuffle=shuffle, drop_last=drop_last,
            device=device, output=output, outputs=OUTPUTS, on_error=on_error, fields=fields,
            shards_in_use=shards_in_use, gpu_memory_budget=gpu_memory_budget, prefetch=prefetch, threads=threads,
            transfer_index=transfer_index, mask_mode=mask_mode, crop_decode=crop_decode,
            storage_options=storage_options, cache_dir=cache_dir, cache_limit=cache_limit, cache_policy=cache_policy,
        )
        kind, index = parse_device(device)
        if transfer_index and kind == "cpu":
            raise PipelineError("transfer_index applies to device='cuda' only")
        return cls(
            batch_size=int(batch_size), shuffle=shuffle, seed=int(seed), rank=int(rank), world_size=int(world_size),
            drop_last=drop_last, device=kind, device_index=cuda_index(index) if kind == "cuda" else None,
            transfer_index=0 if transfer_index is None else int(transfer_index), fields=tuple(fields), layout=layout,
            output=output, shards_in_use=shards_in_use, gpu_memory_budget=gpu_memory_budget, prefetch=prefetch,
            threads=threads or rank_threads(), on_error=on_error, mask_mode=mask_mode, crop_decode=crop_decode,
            pad_fields=dict(pad_fields or {}),
        )

    def check_store(self, store: Any) -> None:
        """The checks that need the store: a mask field, extra fields, pad values."""
        if "mask" in self.fields and "mask" not in store.fields:
            raise ValueError(f"Reader: Expected a store with a mask field (fields asks for 'mask'). Got {store.path} without one.")
        schema = store.extra_fields
        unknown = [f for f in self.fields if f not in ("image", "label", "mask") and f not in schema]
        if unknown:
            raise ValueError(f"Reader: Expected fields among image, label, mask and the store's extra fields "
                             f"{sorted(schema)}. Got {unknown}.")
        self.extra_names = tuple(f for f in self.fields if f in schema)
        for name, value in self.pad_fields.items():
            if name not in self.extra_names:
                raise ValueError(f"Reader: pad_fields: Expected names of extra fields in fields {self.extra_names}. Got {name!r}.")
            check_pad_value(schema[name], name, value)

    @property
    def pixel_fields(self) -> tuple[str, ...]:
        """The decoded fields, in the order they are produced: image, then mask if asked."""
        return ("image", "mask") if "mask" in self.fields else ("image",)

    @property
    def torch_device(self) -> str:
        """Where torch outputs live: "cpu" or "cuda:N"."""
        return "cpu" if self.device_index is None else f"cuda:{self.device_index}"
