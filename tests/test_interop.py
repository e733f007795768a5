"""DLPack export: torch.from_dlpack takes prepkit arrays without a copy, and releases them."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from prepkit.interop import DLPackArray, live_exports

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.int64, np.uint16])
def test_torch_takes_the_memory_without_copy(dtype: type) -> None:
    array = np.arange(24, dtype=dtype).reshape(2, 3, 4)
    before = live_exports()
    tensor = torch.from_dlpack(DLPackArray(array))
    assert tuple(tensor.shape) == (2, 3, 4) and tensor.data_ptr() == array.ctypes.data
    array[1, 2, 3] = 7
    assert int(tensor[1, 2, 3]) == 7  # same memory
    assert live_exports() == before + 1
    del tensor
    gc.collect()
    assert live_exports() == before  # the consumer released it, the deleter ran


def test_strided_view_and_unconsumed_capsule() -> None:
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    view = base[::2, 1::3]
    tensor = torch.from_dlpack(DLPackArray(view))
    np.testing.assert_array_equal(tensor.numpy(), view)
    before = live_exports()
    capsule = DLPackArray(base).__dlpack__()
    assert live_exports() == before + 1
    del capsule
    gc.collect()
    assert live_exports() == before
    assert DLPackArray(base).__dlpack_device__() == (1, 0)


def test_rejects_what_dlpack_cannot_hold() -> None:
    with pytest.raises(TypeError, match="dtype"):
        DLPackArray(np.array(["a"]))
    with pytest.raises(TypeError, match="Expected an array"):
        DLPackArray([1, 2, 3])
