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
