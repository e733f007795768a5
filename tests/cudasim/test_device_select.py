"""Device correctness under the simulator (one device): the producer thread selects the
reader's GPU, "cuda:N" reaches every place that names a device, augment launches are cut in
chunks below the grid limit, and user regions are bounds-checked before any kernel."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numba import cuda

import prepkit
from prepkit import interop
from prepkit.augment import Grayscale, Pipeline, RandomErasing, RandomHorizontalFlip, RandomResizedCrop, ToDtype
from prepkit.augment import cuda as augment_cuda
from prepkit.errors import PipelineError
from prepkit.ingest.build import build_store
from prepkit.ingest.images import ImageOptions
from prepkit.layouts import LosslessLayout
from prepkit.reader import gpu as reader_gpu
from prepkit.reader import reader as reader_module
from prepkit.reader.batch import Batch
from tests.conftest import smooth_image, write_image


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("select")
    rows = []
    for number in range(3):
        write_image(root / f"{number}.png", smooth_image(8 + number, 9, seed=number))
        rows.append({"path": f"{number}.png", "label": number})
    (root / "m.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    build_store(str(root / "m.jsonl"), str(root / "store"), layout=LosslessLayout(tile=16), options=ImageOptions(),
                samples_per_shard=3, workers=1)
    return root / "store"


def test_producer_thread_selects_the_readers_device(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, str]] = []
    real = reader_module.activate

    def recording(index: int) -> None:
        calls.append((index, threading.current_thread().name))
        real(index)

    monkeypatch.setattr(reader_module, "activate", recording)
    reader = prepkit.Reader(store, batch_size=2, shuffle=False, transforms=[RandomResizedCrop(4)], device="cuda:0")
    assert (reader.device, reader.device_index) == ("cuda", 0)
    batches = list(reader)
    assert [b.indices.tolist() for b in batches] == [[0, 1], [2]]
    # Once per epoch, in the background thread, before it produced anything.
    assert calls == [(0, "prepkit-reader")]


def test_cuda_n_reaches_stager_outputs_and_dlpack(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: dict[str, Any] = {}

    class FakeStager:
        def __init__(self, store: Any, budget: Any, use_torch: bool, device: int = 0) -> None:
            made["device"] = device

    monkeypatch.setattr(reader_gpu, "GpuStager", FakeStager)
    activated: list[int] = []
    monkeypatch.setattr(reader_module, "activate", activated.append)
    reader = prepkit.Reader(store, batch_size=2, device="cuda:1", output="dlpack")
    assert made == {"device": 1} and reader.device_index == 1 and reader._torch_device == "cuda:1"
    reader._select_device()
    assert activated == [1]

    exported: list[int | None] = []

    class FakeExport:
        def __init__(self, array: Any, device_id: int | None = None) -> None:
            exported.append(device_id)

    monkeypatch.setattr(interop, "DLPackArray", FakeExport)
    batch = Batch(images=np.zeros((1, 2, 2, 3), np.uint8), labels=np.zeros(1), indices=np.zeros(1, np.int64),
                                       masks=None, epoch=0, number=0)
    reader._convert(batch)
    assert exported == [1]
    # "cuda" with LOCAL_RANK and torch not imported: the local rank's GPU (on a real GPU an
    # earlier test has imported a CUDA torch, whose current device would win).
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert prepkit.Reader(store, batch_size=2, device="cuda").device_index == 3
    assert made == {"device": 3}


def _packed(count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(count)
    images = [rng.integers(0, 256, (5 + i % 2, 6, 3), dtype=np.uint8) for i in range(count)]
    shapes = np.array([im.shape for im in images], np.int32)
    offsets = np.concatenate([[0], np.cumsum([im.size for im in images])[:-1]]).astype(np.int64)
    return np.concatenate([im.ravel() for im in images]), offsets, shapes


def test_augment_launches_are_chunked(monkeypatch: pytest.MonkeyPatch) -> None:
    flat, offsets, shapes = _packed(5)
    pipe = Pipeline([Grayscale(3), RandomResizedCrop(3), RandomHorizontalFlip(), ToDtype("float32", scale=True),
                     RandomErasing(1.0, value=0.5)])
    params = pipe.params(shapes, list(range(5)), seed=2, epoch=0)
    whole = pipe(cuda.to_device(flat), offsets, shapes, params, device="cuda").copy_to_host()
    masks = pipe.apply_mask(cuda.to_device(flat[: int(shapes[:, :2].prod(axis=1).sum())]), np.concatenate(
        [[0], np.cumsum(shapes[:, :2].prod(axis=1))[:-1]]).astype(np.int64), np.column_stack([shapes[:, :2], np.ones(5, np.int32)]),
        params, device="cuda").copy_to_host()
    monkeypatch.setattr(augment_cuda, "MAX_GRID_IMAGES", 2)  # 3 launches per kernel
    assert augment_cuda.image_chunks(5) == [(0, 2), (2, 4), (4, 5)]
    chunked = pipe(cuda.to_device(flat), offsets, shapes, params, device="cuda").copy_to_host()
    np.testing.assert_array_equal(chunked, whole)
    chunked_masks = pipe.apply_mask(cuda.to_device(flat[: int(shapes[:, :2].prod(axis=1).sum())]), np.concatenate(
        [[0], np.cumsum(shapes[:, :2].prod(axis=1))[:-1]]).astype(np.int64), np.column_stack([shapes[:, :2], np.ones(5, np.int32)]),
        params, device="cuda").copy_to_host()
    np.testing.assert_array_equal(chunked_masks, masks)
    np.testing.assert_allclose(whole, pipe(flat, offsets, shapes, params, device="cpu"), atol=1e-5)
    batch = cuda.to_device(np.arange(5 * 12, dtype=np.float32).reshape(5, 3, 2, 2))
    want = np.arange(5 * 12, dtype=np.float32).reshape(5, 3, 2, 2)
    want = 0.25 * want + 0.75 * np.roll(want, 1, axis=0)
    np.testing.assert_allclose(augment_cuda.mix_batch(batch, 0.25, None, "NCHW").copy_to_host(), want, rtol=1e-6)


def test_regions_outside_the_image_are_refused_before_any_kernel() -> None:
    flat, offsets, shapes = _packed(3)
    pipe = Pipeline([RandomResizedCrop(3), ToDtype("float32", scale=True)])
    params = pipe.params(shapes, [0, 1, 2], seed=1, epoch=0)
    params.region[1] = (2, 3, 4, 4)  # y0 + h = 6 > 5 rows
    with pytest.raises(PipelineError, match=r"params.region: sample 1: Expected a non-empty ROI"):
        pipe(cuda.to_device(flat), offsets, shapes, params, device="cuda")
    params = pipe.params(shapes, [0, 1, 2], seed=1, epoch=0)
    with pytest.raises(PipelineError, match="offsets: image 2: Expected images inside flat"):
        pipe(cuda.to_device(flat[:-1]), offsets, shapes, params, device="cuda")
