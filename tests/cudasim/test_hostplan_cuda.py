"""The CUDA decode of store batches goes through hostplan (pinned staging, crop-aware
gather): under the simulator it gives the CPU path's pixels for v1 and v2 stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numba import cuda

from prepkit.decode.engine import decode_samples
from prepkit.store.reader import Store
from tests.conftest import lossless_store


@pytest.fixture(scope="module", params=[1, 2])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lossless_store(tmp_path_factory.mktemp("hostplan_cuda"), [(17 + n, 19 - n) for n in range(3)], request.param, samples_per_shard=2)


@pytest.mark.parametrize("with_rois", [False, True])
def test_cuda_store_decode_equals_cpu(store: Path, with_rois: bool) -> None:
    opened = Store(store)
    indices = [2, 0, 1]
    rois = np.array([[1, 2, 17, 16], [0, 0, 17, 19], [3, 1, 18, 9]], np.int64) if with_rois else None
    pinned = cuda.pinned_array(1 << 16, dtype=np.uint8)
    gpu = decode_samples(opened, indices, device="cuda", pinned=pinned, rois=rois)
    cpu = decode_samples(opened, indices, device="cpu", rois=rois)
    np.testing.assert_array_equal(gpu.flat.copy_to_host()[: cpu.flat.size], cpu.flat)
    np.testing.assert_array_equal(gpu.offsets, cpu.offsets)
    np.testing.assert_array_equal(gpu.shapes, cpu.shapes)
    # The stored bytes were staged in the pinned buffer (only the crops' tile rows with rois).
    staged = np.concatenate([opened.read_bytes(i) for i in indices])
    if rois is None:
        np.testing.assert_array_equal(pinned[: staged.size], staged)
