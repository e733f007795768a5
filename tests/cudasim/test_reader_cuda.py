"""The Reader's GPU path under numba's CUDA simulator: pinned staging, streams, micro-batches,
crop-aware lossless decoding, masks and the transfer index give what the CPU path gives."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import prepkit
from prepkit.augment import Normalize, RandomHorizontalFlip, RandomResizedCrop, ToDtype
from prepkit.ingest.build import build_store
from prepkit.ingest.images import ImageOptions
from prepkit.layouts import LosslessLayout, RawLayout
from prepkit.reader.gpu import split_micro_batches
from tests.conftest import smooth_image, write_image

OPS = [RandomResizedCrop(5), RandomHorizontalFlip(), ToDtype("float32", scale=True), Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3))]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sim")
    rows = []
    for number in range(4):
        h = 9 + number
        write_image(root / f"{number}.png", smooth_image(h, 11, seed=number))
        write_image(root / f"m{number}.png", (np.arange(h * 11).reshape(h, 11, 1) % 7).astype(np.uint8))
        rows.append({"path": f"{number}.png", "label": number % 2, "mask": f"m{number}.png"})
    (root / "m.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    made = {}
    for layout in (RawLayout(), LosslessLayout(tile=16)):
        dest = root / layout.name
        build_store(str(root / "m.jsonl"), str(dest), layout=layout, options=ImageOptions(), samples_per_shard=2, workers=1)
        made[layout.name] = dest
    return made


@pytest.mark.parametrize("layout", ["raw", "lossless"])
def test_gpu_batches_equal_cpu_batches(stores: dict[str, Path], layout: str) -> None:
    fields = ("image", "label", "mask")
    cpu = list(prepkit.Reader(stores[layout], batch_size=3, seed=4, transforms=OPS, fields=fields))
    # A budget of a few hundred bytes forces micro-batches of one or two samples.
    gpu = list(prepkit.Reader(stores[layout], batch_size=3, seed=4, transforms=OPS, fields=fields, device="cuda", gpu_memory_budget=900))
    assert [b.indices.tolist() for b in cpu] == [b.indices.tolist() for b in gpu]
    for on_cpu, on_gpu in zip(cpu, gpu, strict=True):
        np.testing.assert_allclose(on_gpu.images.copy_to_host(), on_cpu.images, atol=1e-5)
        np.testing.assert_array_equal(on_gpu.masks.copy_to_host(), on_cpu.masks)
        np.testing.assert_array_equal(on_gpu.labels, on_cpu.labels)


def test_transfer_index_and_untransformed_batches(stores: dict[str, Path]) -> None:
    whole = list(prepkit.Reader(stores["raw"], batch_size=4, seed=1, transforms=OPS, device="cuda"))
    split = list(prepkit.Reader(stores["raw"], batch_size=4, seed=1, transforms=OPS, device="cuda", transfer_index=2))
    np.testing.assert_allclose(split[0].images.copy_to_host(), whole[0].images.copy_to_host(), atol=1e-5)
    plain = next(iter(prepkit.Reader(stores["lossless"], batch_size=4, shuffle=False, device="cuda")))
    store = prepkit.open_store(stores["lossless"])
    for image, index in zip(plain.images, plain.indices, strict=True):  # sizes differ: a list of device views
        np.testing.assert_array_equal(image.copy_to_host(), store[int(index)]["image"])


def test_micro_batch_split_respects_budget() -> None:
    stored = np.array([10, 10, 10, 50, 5, 5])
    decoded = np.array([30, 30, 30, 100, 20, 20])
    ranges = split_micro_batches(stored, decoded, budget=90)
    assert ranges == [range(0, 2), range(2, 3), range(3, 4), range(4, 6)]
    assert [i for r in ranges for i in r] == list(range(6))
