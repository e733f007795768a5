"""Tests here run CUDA kernels under numba's simulator.

The simulator must be switched on before numba is first imported, so these tests run in
their own pytest process: ``NUMBA_ENABLE_CUDASIM=1 pytest tests/cudasim`` (``make test``
does this). Running them without the variable fails loudly instead of silently testing
nothing.
"""

import os

if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    raise RuntimeError("tests/cudasim must run with NUMBA_ENABLE_CUDASIM=1 (see Makefile)")

from prepkit import cudasim

# A barrier in place of the simulator's polling loop (faster) and a lock around its
# shared-array allocation (prepkit/cudasim.py).
cudasim.tune()
