"""The Reader's option matrix, shared by the CPU half (tests/reader/test_matrix.py) and the
CUDA half under the simulator (tests/cudasim/test_reader_matrix.py): one small store per
layout with masks, and the reference every combination must reproduce."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

import prepkit
from prepkit.augment import Normalize, RandomHorizontalFlip, RandomResizedCrop, ToDtype
from prepkit.ingest.build import build_store
from prepkit.ingest.images import ImageOptions
from prepkit.interop import DLPackArray
from prepkit.layouts import JpegLayout, LosslessLayout, RawLayout
from tests.conftest import smooth_image, write_image

OPS = [RandomResizedCrop(5), RandomHorizontalFlip(), ToDtype("float32", scale=True), Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))]
LAYOUTS = {"raw": RawLayout(), "jpeg": JpegLayout(quality=95), "lossless": LosslessLayout(tile=16)}
COUNT, BATCH = 4, 2


def build_stores(root: Path, layouts: tuple[str, ...]) -> dict[str, Path]:
    """One store per layout of COUNT small images with masks (samples of different sizes)."""
    rows = []
    for number in range(COUNT):
        h = 9 + number
        write_image(root / f"{number}.png", smooth_image(h, 11, seed=number))
        write_image(root / f"m{number}.png", (np.arange(h * 11).reshape(h, 11, 1) % 5).astype(np.uint8))
        rows.append({"path": f"{number}.png", "label": number, "mask": f"m{number}.png"})
    (root / "m.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    made = {}
    for name in layouts:
        build_store(str(root / "m.jsonl"), str(root / name), layout=LAYOUTS[name], options=ImageOptions(),
                    samples_per_shard=2, workers=1)
        made[name] = root / name
    return made


def host(array: Any) -> np.ndarray:
    """Any output array (numpy, numba device, torch, DLPack export) as numpy."""
    if hasattr(array, "copy_to_host"):
        return array.copy_to_host()
    if isinstance(array, DLPackArray):
        assert array.__dlpack_device__()[1] == 0  # the simulator's (and the CPU's) only device
        return host(array.array)
    if hasattr(array, "detach"):
        return array.detach().cpu().numpy()
    return np.asarray(array)


def read(store: Path, **options: Any) -> list[tuple[list[int], np.ndarray, np.ndarray | None, np.ndarray]]:
    """(indices, images, masks, labels) of one epoch, as numpy."""
    reader = prepkit.Reader(store, batch_size=BATCH, seed=7, transforms=OPS, **options)
    out = []
    for batch in reader:
        masks = None if batch.masks is None else host(batch.masks)
        out.append((batch.indices.tolist(), host(batch.images), masks, host(batch.labels)))
    return out


def assert_same(got: list[Any], want: list[Any], atol: float) -> None:
    assert [g[0] for g in got] == [w[0] for w in want]
    for (_, images, masks, labels), (_, want_images, want_masks, want_labels) in zip(got, want, strict=True):
        np.testing.assert_allclose(images, want_images, atol=atol)
        assert (masks is None) == (want_masks is None)
        if masks is not None:
            np.testing.assert_array_equal(masks, want_masks)
        np.testing.assert_array_equal(labels, want_labels)
