"""Settings for runs under numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1): the test suite's
tests/cudasim and `python -m prepkit.fuzz_cuda` call `tune()` first.

The simulator runs each thread of a block as a Python thread while the launching thread polls
them in a loop. Two things follow:

- with Python's default 5 ms switch interval every barrier waits for that loop's time slices: a
  0.1 ms interval decoded a one-tile stream 13x faster (15.4 s -> 1.16 s on the dev VM) and
  took the simulator suite from 881 s to 226 s;
- the simulator's `cuda.shared.array` looks an allocation up and creates it without a lock, so
  two threads that reach it together can get different arrays and read each other's
  uninitialised memory (seen as out-of-bounds reads in the v1 kernel under the fuzz harness
  once threads switched often). `tune()` puts a lock around it.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import numpy as np

SWITCH_INTERVAL_S = 1e-4


def tune() -> bool:
    """Apply both settings when the simulator is on; return whether it is."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        return False
    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support

    shared = kernelapi.FakeCUDAShared
    if not getattr(shared.array, "prepkit_locked", False):
        dynamic = shared.array
        lock = threading.Lock()

        def array(self: Any, shape: Any, dtype: Any, alignment: Any = None) -> Any:
            """The simulator's static shared array of the calling line (its key, as the
            original's), created once under a lock; dynamic arrays (shape 0) as before."""
            if shape == 0 or alignment is not None:
                return dynamic(self, shape, dtype, alignment)
            if isinstance(dtype, types.Type):
                dtype = numpy_support.as_dtype(dtype)
            caller = sys._getframe(1)
            key = (caller.f_code.co_filename, caller.f_lineno)
            with lock:
                found = self._allocations.get(key)
                if found is None:
                    found = self._allocations[key] = np.empty(shape, dtype)
            return found

        array.prepkit_locked = True  # type: ignore[attr-defined]
        shared.array = array
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    return True
