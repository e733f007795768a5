"""The v2 CUDA decode kernel compiles to PTX for sm_90 with the real NVVM compiler, and ptxas
(from the nvidia-cuda-nvcc-cu12 wheel) assembles it without spills. No GPU needed; runs in a
subprocess so that patching numba.cuda never touches the test process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import os, tempfile
    from prepkit.bench import ptxas_report as rep

    ptx = rep.compile_ptx()["v2 decode_kernel"]
    assert ".target sm_90" in ptx and ".entry" in ptx, ptx[:500]
    ptxas = rep.find_tool("ptxas")
    if ptxas is None:
        print("no ptxas")
    else:
        folder = tempfile.mkdtemp()
        path = os.path.join(folder, "v2.ptx")
        with open(path, "w") as handle:
            handle.write(ptx)
        r = rep.ptxas_resources(ptxas, path, os.path.join(folder, "v2.cubin"))
        print("resources", r["registers"], r["spill_stores"], r["spill_loads"], r["stack"])
    """
)


def test_v2_kernel_compiles_without_spills() -> None:
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, "-c", SCRIPT]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    line = [ln for ln in result.stdout.splitlines() if ln.startswith("resources")]
    assert line, result.stdout  # ptxas ships with numba-cuda[cu12] (the test extra)
    registers, spill_stores, spill_loads, stack = (int(v) for v in line[0].split()[1:])
    assert spill_stores == 0 and spill_loads == 0 and stack == 0, line[0]
    assert 0 < registers <= 64, line[0]  # 64: 32 warps per SM at most; the kernel used 40
