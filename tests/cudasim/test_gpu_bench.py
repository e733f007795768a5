"""The GPU benchmark (prepkit.bench.gpu) in its reduced mode under the simulator, through
both of its entry points: gpucheck's bench stage and ``bench-decode --device cuda --quick``.
The figures mean nothing here; the rows, the checks and the derived columns are asserted."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from prepkit.bench import gpu, gpucheck
from prepkit.cli import _register, cli

_register()
MEASURED = ("png-cpu", "public-api", "pipelined", "kernel-only", "h2d-bound", "reader")
ROW_KEYS = {"name", "description", "device", "timing", "images", "bytes_per_image", "seconds", "images_per_s",
            "input_gb_per_s", "x_png", "pct_pcie", "check", "skipped", "profile"}


def check_document(document: dict) -> dict[str, dict]:
    """The schema and the derived columns of one result document; its rows by name."""
    assert document["schema"] == "prepkit.gpu-bench" and document["schema_version"] == gpu.SCHEMA_VERSION
    assert document["simulator"] is gpu.simulator()  # also run on a real GPU (make gpu-correct)
    assert {"config", "machine", "h2d_gb_per_s", "reader_vs_pipelined", "rs", "rows"} <= document.keys()
    rows = {row["name"]: row for row in document["rows"]}
    assert list(rows) == [name for name in gpu.ROW_NAMES if name in rows] and set(rows) == set(gpu.ROW_NAMES)
    assert all(set(row) == ROW_KEYS for row in rows.values())
    png, h2d = rows["png-cpu"], rows["h2d-bound"]
    for name in MEASURED:
        row = rows[name]
        assert row["skipped"] is None and row["images"] > 0 and row["seconds"] > 0, row
        # Derived from the measured seconds and bytes, not written in.
        assert row["images_per_s"] == pytest.approx(row["images"] / row["seconds"])
        assert row["input_gb_per_s"] == pytest.approx(row["images_per_s"] * row["bytes_per_image"] / 1e9)
        assert row["x_png"] == pytest.approx(row["images_per_s"] / png["images_per_s"])
        assert row["pct_pcie"] == pytest.approx(100 * row["input_gb_per_s"] / h2d["input_gb_per_s"])
    assert document["h2d_gb_per_s"] == pytest.approx(h2d["input_gb_per_s"])
    assert document["reader_vs_pipelined"] == pytest.approx(rows["reader"]["images_per_s"] / rows["pipelined"]["images_per_s"])
    for name in ("public-api", "pipelined", "kernel-only"):  # every decode wrote the original pixels
        assert rows[name]["check"].startswith("pixels equal"), rows[name]
    # The pipelined decoder moves the same bytes as the H2D bound; the kernel alone reads only the streams.
    assert rows["pipelined"]["bytes_per_image"] == rows["h2d-bound"]["bytes_per_image"] > rows["kernel-only"]["bytes_per_image"]
    # nvImageCodec's rows: skipped with a reason under the simulator (no nvImageCodec there);
    # on a GPU either skipped with a reason or measured, with derived columns like the others.
    for name in ("nvjpeg", "nvjpeg-hw", "htj2k-nvimgcodec"):
        row = rows[name]
        if gpu.simulator() or row["skipped"]:
            assert row["skipped"], f"{name} must say why it is skipped"
        else:
            assert row["images"] > 0 and row["seconds"] > 0, row
            assert row["images_per_s"] == pytest.approx(row["images"] / row["seconds"])
    return rows


def test_gpucheck_bench_stage(tmp_path: Path) -> None:
    assert gpucheck.main(["--smoke", "--stages", "bench", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "gpucheck.json").read_text())
    assert results["bench"]["ok"], results["bench"]
    document = results["bench"]["tiny"]
    check_document(document)
    config = document["config"]
    assert config["streams"] == gpu.GpuBenchConfig.quick().streams and config["chunks"] >= 2 and config["images_per_pass"] >= 2
    assert config["compressed_bytes_per_pass"] >= config["pass_bytes"]
    rs = document["rs"]
    assert rs["reader_steps_per_s"] > 0 and rs["synthetic_steps_per_s"] > 0
    assert rs["ratio"] == pytest.approx(rs["reader_steps_per_s"] / rs["synthetic_steps_per_s"])
    # Stack samples of the Reader's threads: its prefetch thread and the loop (MainThread).
    profiles = [document["rows"][[r["name"] for r in document["rows"]].index("reader")]["profile"], rs["profile"]]
    for profile in profiles:
        assert "prepkit-reader" in profile and set(profile) <= {"MainThread"} | {n for n in profile if n.startswith("prepkit-")}
        reader_thread = profile["prepkit-reader"]
        assert 0 < sum(row["samples"] for row in reader_thread["top"]) <= reader_thread["samples"]
    table = (tmp_path / "gpu-bench.txt").read_text()
    assert "stack samples of one more reader pass:" in table and "stack samples of the R/S reader steps:" in table
    for name in gpu.ROW_NAMES:
        assert name in table
    assert f"R/S ({rs['model']}, batch" in table
    if gpu.simulator():  # a tiny model, and no nvImageCodec rows
        assert rs["model"].startswith("tiny conv net") and "skipped: numba CUDA simulator" in table
    assert "tiny pipelined:" in (tmp_path / "gpucheck.md").read_text()


def test_bench_decode_device_cuda_quick(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    folder = tmp_path / "images"
    folder.mkdir()
    for number, shape in enumerate([(9, 12, 3), (6, 7, 3)]):
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(folder / f"{number}.png")
    result = CliRunner().invoke(cli, ["bench-decode", str(folder), "--device", "cuda", "--quick", "--no-rs",
                                      "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    # (the whole output on failure: a row that failed says why in it)
    assert "GPU benchmark" in result.output and "h2d-bound" in result.output and "x PNG" in result.output, result.output
    records = json.loads((tmp_path / "r.json").read_text())
    documents = [r for r in records if r["record"] == "gpu"]
    assert len(documents) == 1
    check_document(documents[0])
    assert documents[0]["rs"] == {"skipped": "not asked for"}
