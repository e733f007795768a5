"""bench.reader_host --gpu-reader: the GPU Reader's host side with every kernel a no-op."""

from __future__ import annotations

import numpy as np
import pytest
from numba import config

from prepkit.augment import RandomResizedCrop, ToDtype
from prepkit.bench import reader_host
from prepkit.lossless import cuda_v2


def test_gpu_reader_host_side_is_measured_with_no_op_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    for module, name in reader_host.reader_kernels():  # restored after the test
        monkeypatch.setattr(module, name, getattr(module, name))
    if not config.ENABLE_CUDASIM:  # on a real GPU (make gpu-correct) the no-op kernels are refused
        with pytest.raises(RuntimeError, match="NUMBA_ENABLE_CUDASIM"):
            reader_host.host_only_kernels()
        assert not isinstance(cuda_v2.decode_kernel, reader_host._NoLaunch)
        return
    reader_host.host_only_kernels()
    assert isinstance(cuda_v2.decode_kernel, reader_host._NoLaunch)
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, (20, 30, 3), dtype=np.uint8), rng.integers(0, 256, (17, 12, 3), dtype=np.uint8)]
    plain = reader_host.measure_gpu_reader(images, count=8, batch=4, repeat=1, transforms=[])
    cropped = reader_host.measure_gpu_reader(images, count=8, batch=4, repeat=1,
                                             transforms=[RandomResizedCrop(8), ToDtype("float32", scale=True)])
    assert 0 < plain < 1e6 and 0 < cropped < 1e6
