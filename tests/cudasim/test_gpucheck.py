"""`make gpu-check`'s harness in its reduced mode under the simulator: every correctness
stage runs through and passes (on a GPU the same stages run at full size)."""

from __future__ import annotations

import json
from pathlib import Path

from prepkit.bench import gpucheck


def test_gpucheck_smoke_stages_pass(tmp_path: Path) -> None:
    stages = "env,identity,fuzz,reader,sanitize"
    assert gpucheck.main(["--smoke", "--stages", stages, "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "gpucheck.json").read_text())
    assert set(results) == set(stages.split(","))
    assert all(stage["ok"] for stage in results.values()), results
    assert results["identity"]["checked"] > 10 and results["identity"]["mismatches"] == []
    assert results["fuzz"]["cases"] == 6 and results["fuzz"]["disagree"] == []
    assert results["reader"]["numpy"] < 1e-4
    summary = (tmp_path / "gpucheck.md").read_text()
    assert "PASS identity" in summary and "PASS reader" in summary


def test_overload_resources_reads_every_compiled_overload() -> None:
    # The shape numba-cuda 0.30 has on a real GPU (where the simulator compiles nothing):
    # overloads keyed by argument-type tuples, the numbers on each compiled kernel.
    class Compiled:
        def __init__(self, registers: int) -> None:
            self.regs_per_thread, self.shared_mem_per_block, self.local_mem_per_thread = registers, 512, 0

    class Dispatcher:
        overloads = {("array(uint8, 1d, C)", "int32"): Compiled(48), ("array(uint16, 1d, C)", "int32"): Compiled(56)}

    found = gpucheck.overload_resources((("decode", Dispatcher()),))
    assert found == {
        "decode('array(uint8, 1d, C)', 'int32')": {"registers": 48, "shared": 512, "local": 0},
        "decode('array(uint16, 1d, C)', 'int32')": {"registers": 56, "shared": 512, "local": 0},
    }
