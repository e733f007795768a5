"""Compile the CUDA kernels to PTX for sm_90 with explicit signatures, without a GPU.

The CUDA simulator runs kernels as Python and accepts code the real compiler rejects
(float64 vs float32 mix-ups, unsupported calls, Python objects); compiling here
catches that on machines without a GPU.
"""

from __future__ import annotations

import types as pytypes
from unittest import mock

import pytest
from numba import config, types

pytest.importorskip("numba.cuda")
if config.ENABLE_CUDASIM:
    pytest.skip("compile_ptx needs the real CUDA target, not the simulator", allow_module_level=True)

from numba import cuda
from numba.cuda import dispatcher

from prepkit.augment import cuda as kernels

I32_2D = types.int32[:, ::1]
COMMON = (types.uint8[::1], types.int64[::1], I32_2D, I32_2D, I32_2D, I32_2D, types.uint8[::1], I32_2D)


@pytest.fixture(autouse=True)
def _no_device_needed():
    # Device functions ask the current device for its compute capability when they
    # compile; without a GPU, answer (9, 0) to match the kernel's cc.
    fake = pytypes.SimpleNamespace(compute_capability=(9, 0))
    with mock.patch.object(dispatcher, "get_current_device", return_value=fake):
        yield


@pytest.mark.parametrize("out", [types.float32, types.uint16, types.uint8], ids=str)
def test_augment_kernel_compiles_to_ptx(out) -> None:
    signature = COMMON + (
        types.boolean, types.boolean, types.float32[::1], types.float32[::1], types.int64, types.boolean,
        out[::1], types.int64[::1],
    )  # fmt: skip
    ptx, _ = cuda.compile_ptx(kernels.augment_kernel.py_func, signature, cc=(9, 0))
    assert ".visible .entry" in ptx and "sm_90" in ptx


def test_mask_kernel_compiles_to_ptx() -> None:
    signature = COMMON + (types.boolean, types.boolean, types.uint8[::1], types.int64[::1])
    ptx, _ = cuda.compile_ptx(kernels.mask_kernel.py_func, signature, cc=(9, 0))
    assert ".visible .entry" in ptx and "sm_90" in ptx


def test_channels_kernel_compiles_to_ptx() -> None:
    signature = (types.uint8[::1], types.int64[::1], I32_2D, types.int64, types.int64, types.uint8[::1], types.int64[::1])
    ptx, _ = cuda.compile_ptx(kernels.channels_kernel.py_func, signature, cc=(9, 0))
    assert ".visible .entry" in ptx and "sm_90" in ptx


@pytest.mark.parametrize("out", [types.float32, types.uint16, types.uint8], ids=str)
def test_erase_kernel_compiles_to_ptx(out) -> None:
    signature = (
        I32_2D, types.uint64[::1], types.boolean, types.float32[::1], types.float32[::1], types.float32[::1],
        types.int64, types.boolean, types.int64, types.int64, types.int64, out[::1],
    )  # fmt: skip
    ptx, _ = cuda.compile_ptx(kernels.erase_kernel.py_func, signature, cc=(9, 0))
    assert ".visible .entry" in ptx and "sm_90" in ptx


def test_batch_op_kernels_compile_to_ptx() -> None:
    f32 = types.float32[:, ::1]
    ptx, _ = cuda.compile_ptx(kernels.mixup_kernel.py_func, (f32, types.float32, types.int64, f32), cc=(9, 0))
    assert ".visible .entry" in ptx
    for element in (types.uint8, types.uint16, types.float32):
        array = element[:, ::1]
        signature = (array, types.int64[::1], types.boolean, types.int64, types.int64, types.int64, types.int64, array)
        ptx, _ = cuda.compile_ptx(kernels.cutmix_kernel.py_func, signature, cc=(9, 0))
        assert ".visible .entry" in ptx


@pytest.mark.parametrize("out", [types.float32, types.uint16, types.uint8], ids=str)
def test_colour_kernel_compiles_to_ptx(out) -> None:
    f32 = types.float32[::1]
    signature = (
        f32, f32, types.int32[:, ::1], types.float64[:, ::1], types.float32[:, :, ::1], types.boolean, types.int64,
        types.int64, types.int64,
        f32, f32, types.int64, types.boolean, out[::1],
    )  # fmt: skip
    ptx, _ = cuda.compile_ptx(kernels.colour_kernel.py_func, signature, cc=(9, 0))
    assert ".visible .entry" in ptx and "sm_90" in ptx
    assert "bar.sync" in ptx  # the block synchronises between steps


def test_mask_warp_kernel_compiles_to_ptx() -> None:
    u8 = types.uint8[::1]
    signature = (u8, u8, types.int32[:, ::1], types.float32[:, :, ::1], types.int64, types.int64, types.int64,
                 types.boolean)  # fmt: skip
    ptx, _ = cuda.compile_ptx(kernels.mask_warp_kernel.py_func, signature, cc=(9, 0))
    assert ".visible .entry" in ptx and "bar.sync" in ptx
    # The grid's products must round on their own, as torch's: NVVM may only have turned them
    # into fma(a, b, 0) (warp_math.mul32), never fused one into the following add.
    fused = [line for line in ptx.splitlines() if "fma.rn.f32" in line]
    assert fused and all(line.rstrip().endswith("0f00000000;") for line in fused), fused
