import numpy as np
from numba import config, cuda


def test_simulator_is_active() -> None:
    # Guards the rest of this folder: every kernel here must run in the simulator.
    assert config.ENABLE_CUDASIM == 1

    @cuda.jit
    def add_one(values):
        i = cuda.grid(1)
        if i < values.size:
            values[i] += 1

    values = cuda.to_device(np.arange(5, dtype=np.int32))
    add_one[1, 8](values)
    np.testing.assert_array_equal(values.copy_to_host(), np.arange(1, 6))


def test_threads_of_a_block_share_one_shared_array_under_fast_switching() -> None:
    """prepkit.cudasim.tune() locks the simulator's shared-array allocation: without the lock,
    threads switching every microsecond can each create their own array and read another
    thread's slot uninitialised (6 of 40 launches of this kernel went wrong so on the dev VM,
    none with the lock)."""
    import sys

    from prepkit import cudasim

    assert cudasim.tune()

    @cuda.jit
    def neighbours(out):
        cuda.syncthreads()  # every thread started: they reach the allocations together
        a = cuda.shared.array(32, np.int32)
        b = cuda.shared.array(32, np.int32)
        c = cuda.shared.array(32, np.int32)
        tid = cuda.threadIdx.x
        a[tid] = tid * 7
        b[tid] = tid * 3
        c[tid] = tid
        cuda.syncthreads()
        j = (tid + 1) % 32
        out[tid] = a[j] + b[j] + c[j]

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(40):
            out = cuda.to_device(np.zeros(32, np.int32))
            neighbours[1, 32](out)
            np.testing.assert_array_equal(out.copy_to_host(), (np.arange(1, 33) % 32) * 11)
    finally:
        sys.setswitchinterval(before)
