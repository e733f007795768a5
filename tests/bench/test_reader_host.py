"""bench.reader_host: the Reader's host work per image, measured on a tiny store."""

from __future__ import annotations

import numpy as np

from prepkit.bench import reader_host


def test_measure_reports_host_work_per_image() -> None:
    rng = np.random.default_rng(4)
    images = [rng.integers(0, 256, (40, 70, 3), dtype=np.uint8), rng.integers(0, 256, (33, 20, 3), dtype=np.uint8)]
    result = reader_host.measure(images, count=12, batch=5, threads=2, repeat=2)
    assert set(result) == {"wall_us", "cpu_us", "gather_us"}
    assert 0 < result["gather_us"] < result["wall_us"] < 1e6 and result["cpu_us"] > 0


def test_host_only_kernels_refuses_a_real_gpu_run() -> None:
    import pytest

    with pytest.raises(RuntimeError, match="NUMBA_ENABLE_CUDASIM=1"):
        reader_host.host_only_kernels()  # this process runs without the simulator
