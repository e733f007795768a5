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


def test_block_barrier_counts_running_threads_and_raises_the_first_error() -> None:
    """prepkit.cudasim.tune() replaces the simulator's polling block scheduler by a barrier:
    every thread of a block sees the writes made before a syncthreads, threads that returned
    early do not hold the others at later barriers, syncthreads_count counts, and a
    thread's exception (not the waiting threads' aborts) reaches the launch."""
    import pytest
    from numba.cuda.simulator import kernel

    from prepkit import cudasim

    assert cudasim.tune() and getattr(kernel.BlockManager.run, "prepkit_barrier", False)

    @cuda.jit
    def rounds(out):
        tid = cuda.threadIdx.x
        s = cuda.shared.array(64, np.int32)
        s[tid] = tid
        cuda.syncthreads()
        for step in range(6):  # thread t leaves after t % 6 rounds
            if tid % 6 == step:
                out[tid] = s[(tid + 1) % 64]
                return
            cuda.syncthreads()
            s[tid] += 1
            cuda.syncthreads()

    @cuda.jit
    def count(counts):
        tid = cuda.threadIdx.x
        counts[tid] = cuda.syncthreads_count(tid % 3 == 0)

    for blocks in (1, 3):
        out = cuda.to_device(np.zeros(64, np.int32))
        rounds[blocks, 64](out)
        tid = np.arange(64)
        # thread t reads its neighbour after t % 6 rounds: the neighbour had t % 6 increments
        # when it was still running by then, else its own number of rounds
        neighbour = (tid + 1) % 64
        np.testing.assert_array_equal(out.copy_to_host(), neighbour + np.minimum(tid % 6, neighbour % 6))
        every = cuda.to_device(np.zeros(64, np.int32))
        count[blocks, 64](every)
        np.testing.assert_array_equal(every.copy_to_host(), np.full(64, 22))

    @cuda.jit
    def fails(values):
        tid = cuda.threadIdx.x
        cuda.syncthreads()
        if tid == 5:
            values[100] = 1  # past the end: the simulator raises IndexError
        cuda.syncthreads()
        values[tid] = tid

    with pytest.raises(IndexError, match=r"tid=\[5, 0, 0\]"):
        fails[1, 32](cuda.to_device(np.zeros(32, np.int32)))
