"""Zero-copy hand-over of arrays to other frameworks through DLPack.

numba device arrays expose ``__cuda_array_interface__`` (CuPy, torch.as_tensor and numba
take them as they are) but not DLPack, which JAX and ``torch.from_dlpack`` need.
:class:`DLPackArray` wraps any array that has ``__cuda_array_interface__`` (GPU) or
``__array_interface__`` (host) and exports it as a DLPack capsule, without copying:

    images = prepkit.interop.DLPackArray(batch.images)
    torch.from_dlpack(images)          # or jax.dlpack.from_dlpack(images), cupy.from_dlpack(images)

The wrapper keeps the wrapped array alive until the consumer releases the capsule.
Data handed over by ``prepkit.Reader`` is already complete (the reader waited for its
event), so the ``stream`` argument of ``__dlpack__`` needs no further ordering.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from prepkit.cudart import pointer_device

CPU, CUDA = 1, 2  # DLDeviceType: kDLCPU, kDLCUDA
_CODES = {"i": 0, "u": 1, "f": 2}  # DLDataTypeCode: kDLInt, kDLUInt, kDLFloat


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _ManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_ManagedTensor))
_ManagedTensor._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]

# What each live capsule needs kept alive (the array, the shape and strides buffers, the
# struct itself), by the address of its managed tensor; dropped by the deleter.
_alive: dict[int, tuple[Any, ...]] = {}
_alive_lock = threading.Lock()


@_Deleter
def _delete(managed: Any) -> None:
    with _alive_lock:
        _alive.pop(ctypes.addressof(managed.contents), None)


_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CapsuleDestructor]
# The destructor gets the dying capsule as a raw address: look at it through functions that
# take raw pointers, never by making a Python reference to an object being destroyed.
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_NAME = b"dltensor"


@_CapsuleDestructor
def _capsule_destructor(capsule_address: int) -> None:
    # A capsule never consumed still owns its tensor ("used_dltensor" means a consumer took it).
    if _capsule_is_valid(capsule_address, _NAME):
        managed = ctypes.cast(_capsule_pointer(capsule_address, _NAME), ctypes.POINTER(_ManagedTensor))
        managed.contents.deleter(managed)


def _interface(array: Any) -> tuple[dict[str, Any], int]:
    if hasattr(array, "__cuda_array_interface__"):
        return array.__cuda_array_interface__, CUDA
    if hasattr(array, "__array_interface__"):
        return array.__array_interface__, CPU
    raise TypeError(f"Expected an array with __cuda_array_interface__ or __array_interface__. Got {type(array).__name__}.")


class DLPackArray:
    """A zero-copy DLPack view of a host or device array (see module docstring)."""

    def __init__(self, array: Any, device_id: int | None = None) -> None:
        self.array = array
        interface, self.device_type = _interface(array)
        if device_id is None:  # the GPU that holds the memory (0 for host arrays)
            device_id = 0 if self.device_type == CPU else pointer_device(int(interface["data"][0]))
        self.device_id = int(device_id)
        dtype = np.dtype(interface["typestr"])
        if dtype.kind not in _CODES:
            raise TypeError(f"Expected an integer or float array for DLPack export. Got dtype {dtype}.")
        self.dtype = dtype
        self.shape = tuple(int(v) for v in interface["shape"])
        strides = interface.get("strides")
        if strides is None:  # C-contiguous
            strides, step = [], dtype.itemsize
            for size in reversed(self.shape):
                strides.insert(0, step)
                step *= max(size, 1)
        if any(stride % dtype.itemsize for stride in strides):
            raise TypeError("DLPack needs strides that are whole elements")
        self.strides = tuple(int(stride) // dtype.itemsize for stride in strides)
        self.pointer = int(interface["data"][0])

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return self.array.__cuda_array_interface__

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device_type, self.device_id

    def __dlpack__(self, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None) -> Any:
        ndim = len(self.shape)
        shape = (ctypes.c_int64 * max(ndim, 1))(*self.shape)
        strides = (ctypes.c_int64 * max(ndim, 1))(*self.strides)
        managed = _ManagedTensor()
        managed.dl_tensor.data = self.pointer
        managed.dl_tensor.device = _Device(self.device_type, self.device_id)
        managed.dl_tensor.ndim = ndim
        managed.dl_tensor.dtype = _DataType(_CODES[self.dtype.kind], self.dtype.itemsize * 8, 1)
        managed.dl_tensor.shape = shape
        managed.dl_tensor.strides = strides
        managed.dl_tensor.byte_offset = 0
        managed.deleter = _delete
        address = ctypes.addressof(managed)
        with _alive_lock:
            _alive[address] = (self.array, shape, strides, managed)
        return _capsule_new(address, _NAME, _capsule_destructor)


def live_exports() -> int:
    """How many exported capsules are still held by a consumer (for tests)."""
    with _alive_lock:
        return len(_alive)
