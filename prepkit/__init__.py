"""prepkit: prepare image datasets as sharded Zarr v3 stores and feed them to GPUs.

Public API::

    import prepkit
    store = prepkit.open_store("data/train")      # random access, decoded samples
    sample = store[0]                              # {"image": HxWxC uint8, "label": int | None}
    prepkit.write_store("data/train", samples, layout="lossless")  # samples: datasets, lists, tars
    prepkit.lossless.encode(image) / decode(data)  # the GPU-decodable lossless codec
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Submodules and names loaded on first use, so `import prepkit` stays fast and does not
# pull in numba or zarr before they are needed.
_LAZY = {
    "open_store": ("prepkit.store.reader", "open_store"),
    "Store": ("prepkit.store.reader", "Store"),
    "Reader": ("prepkit.reader", "Reader"),
    "Batch": ("prepkit.reader", "Batch"),
    "write_store": ("prepkit.ingest.build", "write_store"),
    "from_torch": ("prepkit.ingest.adapters", "from_torch"),
    "from_hf": ("prepkit.ingest.adapters", "from_hf"),
    "from_webdataset": ("prepkit.ingest.adapters", "from_webdataset"),
    "lossless": ("prepkit.lossless", None),
    "ops": ("prepkit.augment", None),
    "errors": ("prepkit.errors", None),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'prepkit' has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value
