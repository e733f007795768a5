"""CUDA plumbing shared by the GPU paths: which device, streams, reusable buffers.

- ``parse_device`` / ``cuda_index``: ``"cuda:1"`` names GPU 1; plain ``"cuda"`` follows
  ``torch.cuda.current_device()`` when torch is imported, else ``LOCAL_RANK``, else 0.
- ``activate(index)``: make that device's (primary) context current in *this* thread. numba
  attaches device 0 to a thread that has no context yet, so a background thread that
  decodes for GPU 1 must call it before any CUDA call.
- ``make_stream()``: a non-blocking stream (it never serialises with the legacy default
  stream, where torch's default stream and most training code run) at the device's lowest
  priority (CUDA's "least" priority from ``cuCtxGetStreamPriorityRange``; on current GPUs
  that is the default priority: no stream can be ordered below the model's).
- ``StreamBuffers``: grow-only device and pinned buffers owned by one stream slot, so
  the decode loop allocates nothing once warm (every cuMemAlloc/cuMemFree can
  synchronise the whole device).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

#: Growth factor of StreamBuffers (a little headroom so that batches of varying size settle).
GROWTH = 1.25


def parse_device(device: str) -> tuple[str, int | None]:
    """("cpu", None), ("cuda", None) or ("cuda", N) from "cpu", "cuda" or "cuda:N"."""
    if device in ("cpu", "cuda"):
        return device, None
    if isinstance(device, str) and device.startswith("cuda:") and device[5:].isdigit():
        return "cuda", int(device[5:])
    raise ValueError(f"Expected device to be 'cpu', 'cuda' or 'cuda:N'. Got {device!r}.")


def cuda_index(index: int | None, environ: Any = None, torch_module: Any = None) -> int:
    """The CUDA device a "cuda" reader uses: ``index`` when given, else torch's current
    device when torch is already imported (as DDP code sets it), else ``LOCAL_RANK``, else 0.

    ``environ`` and ``torch_module`` default to os.environ and the imported torch (tests
    pass fakes)."""
    if index is not None:
        return int(index)
    torch = sys.modules.get("torch") if torch_module is None else torch_module
    if torch is not None:
        try:
            if torch.cuda.is_available():
                return int(torch.cuda.current_device())
        except Exception:  # a torch without CUDA, or one that cannot reach the driver
            pass
    environ = os.environ if environ is None else environ
    rank = environ.get("LOCAL_RANK")
    if rank is not None and str(rank).isdigit():
        return int(rank)
    return 0


def activate(index: int) -> None:
    """Make device ``index`` current in the calling thread, for numba (and torch when imported)."""
    from numba import cuda

    cuda.select_device(index)
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                torch.cuda.set_device(index)
        except Exception:
            pass


def simulated() -> bool:
    """Whether numba runs CUDA code in its simulator (decided when numba is first imported)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def make_stream(driver_module: Any = None, context: Any = None) -> Any:
    """A numba stream created non-blocking at the lowest priority (see module docstring).

    Under the simulator (no driver) an ordinary simulator stream. ``driver_module`` and
    ``context`` default to numba's driver module and current context (tests pass fakes)."""
    from numba import cuda

    if driver_module is None and simulated():
        return cuda.stream()
    if driver_module is None:
        from numba.cuda.cudadrv import driver as numba_driver

        driver_module = numba_driver
    context = cuda.current_context() if context is None else context
    least, _greatest = driver_module.driver.cuCtxGetStreamPriorityRange()
    flags = int(driver_module.binding.CUstream_flags.CU_STREAM_NON_BLOCKING.value)
    handle = driver_module.driver.cuStreamCreateWithPriority(flags, int(least))
    # Owned like numba's own streams: destroyed through the context's deallocation queue.
    return driver_module.Stream(handle, finalizer=driver_module._stream_finalizer(context.deallocations, handle))


def pointer_device(pointer: int) -> int:
    """The ordinal of the GPU that holds device memory at ``pointer`` (asked of the driver;
    the current device when the driver cannot tell, 0 under the simulator)."""
    if simulated() or pointer == 0:
        return 0
    from numba import cuda
    from numba.cuda.cudadrv import driver as drv

    try:
        attribute = drv.binding.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        return int(drv.driver.cuPointerGetAttribute(attribute, pointer))
    except Exception:  # memory the driver does not know (e.g. a foreign allocator's host memory)
        return int(cuda.get_current_device().id)


def stream_handle(stream: Any) -> int:
    """The CUstream handle of a numba stream as an int (0: the legacy default stream)."""
    if stream is None or (isinstance(stream, int) and stream == 0):
        return 0
    handle = stream.handle
    try:
        return int(handle)  # cuda-bindings CUstream
    except TypeError:
        return int(handle.value or 0)  # ctypes c_void_p


def new_event() -> Any:
    """An event without timing (cheaper to record; prepkit only waits on its events)."""
    from numba import cuda

    return cuda.event() if simulated() else cuda.event(timing=False)  # the simulator's takes no argument


class StreamBuffers:
    """Named grow-only buffers of one stream slot: device arrays and pinned host arrays.

    A buffer is only ever replaced by a larger one; callers use views of its first
    elements. Work queued on the slot's stream keeps using the old buffer until it is
    collected, which is safe because numba frees device memory only after the stream work
    that was queued before the free (deferred deallocation) and the owner waits on the
    slot's event before it rewrites a pinned buffer."""

    def __init__(self) -> None:
        self._device: dict[str, Any] = {}
        self._pinned: dict[str, np.ndarray] = {}
        self.allocations = 0  # how many buffers were (re)allocated: tests check it settles
        # Objects that queued stream work still reads (nvImageCodec's decoded Images): the
        # owner clears the list once the slot's event has passed that work.
        self.keep: list[Any] = []

    def device(self, name: str, size: int, dtype: Any) -> Any:
        """A device array of ``size`` elements of ``dtype`` (a view of the slot's buffer)."""
        from numba import cuda

        have = self._device.get(name)
        if have is None or have.size < size or have.dtype != np.dtype(dtype):
            have = self._device[name] = cuda.device_array(max(int(size * GROWTH), 16), dtype=dtype)
            self.allocations += 1
        return have[:size]

    def pinned(self, name: str, size: int, dtype: Any) -> np.ndarray:
        """A page-locked host array of ``size`` elements of ``dtype``."""
        from numba import cuda

        have = self._pinned.get(name)
        if have is None or have.size < size or have.dtype != np.dtype(dtype):
            have = self._pinned[name] = cuda.pinned_array(max(int(size * GROWTH), 16), dtype=dtype)
            self.allocations += 1
        return have[:size]

    def to_device(self, name: str, array: np.ndarray, stream: Any) -> Any:
        """``array`` copied to the slot's device buffer ``name`` through its pinned twin,
        asynchronously on ``stream`` (the host array may change as soon as this returns)."""
        array = np.ascontiguousarray(array)
        flat = array.reshape(-1)
        host = self.pinned(name, flat.size, array.dtype)
        host[:] = flat
        target = self.device(name, flat.size, array.dtype)
        if flat.size:
            target.copy_to_device(host, stream=stream)
        return target.reshape(array.shape) if array.ndim != 1 else target
