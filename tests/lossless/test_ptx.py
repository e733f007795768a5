"""Compile every lossless CUDA kernel to PTX for sm_90 with the real NVVM compiler.

The simulator accepts code the real compiler rejects (unsupported calls, type errors in
untaken branches), so this runs on machines without a GPU too: NVVM comes from the
nvidia-cuda-nvcc-cu12 wheel. It runs in a subprocess so that importing numba.cuda and
patching it never touches the test process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    from numba import cuda
    import numba.cuda.dispatcher as dispatcher

    # Device functions are compiled for the current device's compute capability; with no
    # GPU there is none, so name the target the kernels are compiled for.
    class Target:
        compute_capability = (9, 0)

    dispatcher.get_current_device = lambda: Target()

    from prepkit.lossless import cuda as lcuda

    for function, signature in lcuda.kernel_signatures():
        ptx, _ = cuda.compile_ptx(function, signature, cc=(9, 0))
        assert ".target sm_90" in ptx and ".entry" in ptx, ptx[:500]
        print("compiled", function.__name__, len(ptx))
    """
)


def test_cuda_kernels_compile_to_ptx() -> None:
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "compiled decode_kernel" in result.stdout
