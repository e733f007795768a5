"""Settings for runs under numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1): the test suite's
tests/cudasim and `python -m prepkit.fuzz_cuda` call `tune()` first.

The simulator runs each thread of a block as a Python thread while the launching thread polls
them in a loop. Two things follow:

- the polling loop holds the GIL whenever the block's threads could run, and every barrier
  waits for its time slices. A 0.1 ms switch interval was the first remedy (a one-tile stream
  decoded 13x faster, 15.4 s -> 1.16 s on the dev VM; the simulator suite 881 s -> 226 s, when
  it was smaller). `tune()` now replaces the loop by a barrier the threads wait on
  (`_block_barrier`; the launching thread waits for them) and keeps Python's 5 ms interval:
  the simulator suite's tests took 582 s with the loop, 406 s with the barrier at 0.1 ms and
  357 s at 5 ms (sums of durations; 2026-11-29, dev VM, the two barrier runs side by side);
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

SWITCH_INTERVAL_S = 5e-3  # (Python's default: set again in case a caller changed it)


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
    _block_barrier()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    return True


class _Block:
    """The barrier of one simulated thread block: `wait` (a thread's syncthreads) returns once
    every thread of the block still running waits; a thread that returns stops counting, as
    it did in the simulator's polling loop. When a thread fails, waiting threads raise."""

    def __init__(self, threads: int) -> None:
        self.condition = threading.Condition()
        self.running = threads
        self.waiting = 0
        self.generation = 0
        self.failed: Any = None  # the first thread that raised

    def wait(self) -> None:
        with self.condition:
            if self.failed is not None:
                raise RuntimeError("abort flag set on syncthreads call")
            generation = self.generation
            self.waiting += 1
            if self.waiting == self.running:
                self._release()
            while generation == self.generation and self.failed is None:
                self.condition.wait()
            if self.failed is not None:
                raise RuntimeError("abort flag set on syncthreads clear")

    def leave(self, thread: Any) -> None:
        with self.condition:
            self.running -= 1
            if thread.exception is not None and self.failed is None:
                self.failed = thread
                self.condition.notify_all()
            elif self.waiting and self.waiting == self.running:
                self._release()
            elif not self.running:
                self.condition.notify_all()

    def done(self) -> Any:
        """Wait until every thread has returned or one has raised; return that one (None when
        none did). The others, aborted at their next barrier, are not waited for: the
        simulator's loop did not either."""
        with self.condition:
            while self.running and self.failed is None:
                self.condition.wait()
            return self.failed

    def _release(self) -> None:
        self.waiting = 0
        self.generation += 1
        self.condition.notify_all()


def _block_barrier() -> None:
    """Replace the simulator's block scheduler, which polls every thread of a block in a loop
    that holds the GIL between barriers, by a barrier the threads wait on: the launching
    thread only waits for them to finish. The same semantics (a block's threads run
    concurrently, a barrier counts the threads still running, the first exception is
    raised), in less time."""
    from numba.cuda.simulator import kernel

    thread_class, manager_class = kernel.BlockThread, kernel.BlockManager
    if getattr(manager_class.run, "prepkit_barrier", False):
        return
    thread_run = thread_class.run

    def run_thread(self: Any) -> None:
        try:
            thread_run(self)  # (stores an exception in self.exception)
        finally:
            self.prepkit_block.leave(self)

    def syncthreads(self: Any) -> None:
        self.prepkit_block.wait()

    def run_block(self: Any, grid_point: Any, *args: Any) -> None:
        def target() -> None:
            self._f(*args)

        threads = [thread_class(target, self, grid_point, point, self._debug) for point in np.ndindex(*self._block_dim)]
        block = _Block(len(threads))
        for thread in threads:
            thread.prepkit_block = block
        for thread in threads:
            thread.start()
        first = block.done()
        if first is not None:
            raise first.exception[0].with_traceback(first.exception[1])

    run_block.prepkit_barrier = True  # type: ignore[attr-defined]
    thread_class.run = run_thread
    thread_class.syncthreads = syncthreads
    manager_class.run = run_block
