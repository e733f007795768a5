"""prepkit.bench.gpu without a GPU: the derived columns and the skipped run (the measured
rows run under the simulator in tests/cudasim/test_gpu_bench.py)."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit.bench import gpu


def test_derived_columns_follow_the_measurements() -> None:
    rows = [gpu.GpuRow("png-cpu", "", "cpu", images=100, bytes_per_image=2e6, seconds=4.0),
            gpu.GpuRow("pipelined", "", "cuda", images=300, bytes_per_image=3e6, seconds=0.1),
            gpu.GpuRow("h2d-bound", "", "cuda", images=300, bytes_per_image=3e6, seconds=0.05),
            gpu.GpuRow("nvjpeg", "", "cuda", skipped="no nvImageCodec")]
    h2d = gpu.derive(rows)
    png, pipelined, bound, skipped = rows
    assert png.images_per_s == 25 and png.x_png == 1
    assert pipelined.images_per_s == pytest.approx(3000) and pipelined.x_png == pytest.approx(120)
    assert h2d == pytest.approx(300 * 3e6 / 0.05 / 1e9) == bound.input_gb_per_s
    assert pipelined.pct_pcie == pytest.approx(50) and bound.pct_pcie == pytest.approx(100)
    assert png.pct_pcie == pytest.approx(100 * 25 * 2e6 / (h2d * 1e9))
    assert skipped.images_per_s is None and skipped.x_png is None and skipped.pct_pcie is None
    result = gpu.GpuBenchResult(rows, {}, {}, h2d)
    table = gpu.format_table(result)
    assert "120.00x" in table and "50%" in table and "skipped: no nvImageCodec" in table


def test_without_a_gpu_every_row_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "unavailable", lambda: "no CUDA GPU available")
    result = gpu.run_gpu_benchmark([np.zeros((4, 4, 3), np.uint8)], gpu.GpuBenchConfig.quick())
    assert [row.name for row in result.rows] == list(gpu.ROW_NAMES)
    assert all(row.skipped == "no CUDA GPU available" for row in result.rows)
    assert result.record()["rs"] == {"skipped": "no CUDA GPU available"}


def test_quick_config_stays_small() -> None:
    config = gpu.GpuBenchConfig.quick()
    assert config.pass_bytes <= 8 << 20 and gpu.GpuBenchConfig().pass_bytes >= 1 << 30
    assert 2 <= gpu.GpuBenchConfig().streams <= 3
