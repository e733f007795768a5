"""The Reader's GPU loop under the simulator: reusable buffers that settle, error codes reduced
on the device and raised at hand-over naming the sample, chunked launches."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import prepkit
from prepkit.augment import RandomResizedCrop, ToDtype
from prepkit.decode.engine import decode_samples
from prepkit.errors import DecodeError
from prepkit.ingest.build import build_store
from prepkit.ingest.images import ImageOptions
from prepkit.layouts import LosslessLayout
from prepkit.lossless import cuda as lossless_cuda
from prepkit.store.reader import Store
from tests.conftest import smooth_image, write_image

OPS = [RandomResizedCrop(6), ToDtype("float32", scale=True)]
COUNT = 5


def _build(root: Path, version: int) -> Path:
    rows = []
    for number in range(COUNT):
        write_image(root / f"{number}.png", smooth_image(9 + number, 10, seed=number))
        rows.append({"path": f"{number}.png", "label": number})
    (root / "m.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    dest = root / "store"
    build_store(str(root / "m.jsonl"), str(dest), layout=LosslessLayout(tile=16, version=version),
                options=ImageOptions(), samples_per_shard=COUNT, workers=1)
    return dest


@pytest.fixture(scope="module", params=[1, 2])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp(f"loop{request.param}"), request.param)


def _corrupt(path: Path, index: int) -> None:
    """Break sample ``index``'s tile payload in its shard file (headers and tables stay valid,
    so only the kernel can see it)."""
    opened = Store(path)
    data = bytes(opened.read_bytes(index))
    files = [f for f in (path / "image").rglob("*") if f.is_file() and data in f.read_bytes()]
    assert len(files) == 1, "the sample's bytes are in exactly one shard file"
    raw = bytearray(files[0].read_bytes())
    at = raw.index(data) + len(data) - 1
    raw[at] = 0 if raw[at] != 0 else 0xFF  # the last byte of the last tile's payload
    files[0].write_bytes(bytes(raw))


def test_buffers_settle_and_tokens_are_reused(store: Path) -> None:
    reader = prepkit.Reader(store, batch_size=2, seed=3, transforms=OPS, device="cuda", gpu_memory_budget=2000)
    first = [b.images.copy_to_host() for b in reader]
    stager = reader._stager
    allocations = [slot.buffers.allocations for slot in stager._slots]
    reader.set_epoch(0)
    again = [b.images.copy_to_host() for b in reader]
    # The second pass over the same batches allocates no buffer; tokens are reused: at most
    # one per batch in flight (queued, being produced, being handed over) ever exists.
    assert [slot.buffers.allocations for slot in stager._slots] == allocations
    assert 1 <= len(stager._tokens) <= reader.prefetch + 2
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    cpu = [b.images for b in prepkit.Reader(store, batch_size=2, seed=3, transforms=OPS)]
    for on_gpu, on_cpu in zip(first, cpu, strict=True):
        np.testing.assert_allclose(on_gpu, on_cpu, atol=1e-5)


def test_corrupt_sample_raises_at_hand_over_and_skip_drops_it(tmp_path: Path) -> None:
    path = _build(tmp_path, 1)
    _corrupt(path, 3)
    with pytest.raises(DecodeError, match=r"sample 3 \(image\): corrupt tile payload"):
        list(prepkit.Reader(path, batch_size=2, shuffle=False, transforms=OPS, device="cuda", gpu_memory_budget=2000))
    with pytest.warns(RuntimeWarning, match="skipping sample 3"):
        seen = [int(i) for b in prepkit.Reader(path, batch_size=2, shuffle=False, transforms=OPS, device="cuda",
                                               on_error="skip") for i in b.indices]
    assert seen == [0, 1, 2, 4]


def test_launches_are_chunked_below_the_grid_limit(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened = Store(store)
    indices = list(range(COUNT))
    cpu = decode_samples(opened, indices, device="cpu")
    monkeypatch.setattr(lossless_cuda, "MAX_GRID_X", 1)  # one tile per launch
    gpu = decode_samples(opened, indices, device="cuda")
    np.testing.assert_array_equal(gpu.flat.copy_to_host()[: cpu.flat.size], cpu.flat)
    assert lossless_cuda.chunks(5, 2) == [(0, 2), (2, 4), (4, 5)]
