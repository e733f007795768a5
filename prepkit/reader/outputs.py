"""Output adapters: a produced batch (numpy on the CPU, numba or torch device arrays on the
GPU) becomes what ``output`` asks for - numpy, torch, cupy or dlpack - on the reader's
device, without copying pixels."""

from __future__ import annotations

from typing import Any

import numpy as np

from prepkit.decode.packed import PackedImages
from prepkit.reader.batch import Batch
from prepkit.reader.config import ReaderConfig


def convert(batch: Batch, config: ReaderConfig, dtype: str) -> Batch:
    """``batch`` in ``config.output``'s arrays (``dtype``: the pipeline's output dtype)."""
    adapter = {"numpy": _numpy, "torch": _torch, "dlpack": _dlpack, "cupy": _cupy}[config.output]
    return adapter(batch, config, dtype)


def _numpy(batch: Batch, config: ReaderConfig, dtype: str) -> Batch:
    if config.device == "cpu" and dtype == "float16" and isinstance(batch.images, np.ndarray) and batch.images.dtype == np.uint16:
        batch.images = batch.images.view(np.float16)
    return batch


def _torch(batch: Batch, config: ReaderConfig, dtype: str) -> Batch:
    import torch

    device = config.torch_device
    on_gpu = config.device == "cuda"
    batch.images = to_torch(batch.images, dtype, device)
    batch.masks = None if batch.masks is None else to_torch(batch.masks, "uint8", device)
    labels = torch.from_numpy(np.asarray(batch.labels))
    batch.labels = labels.to(device, non_blocking=True) if on_gpu else labels
    # Numeric extras go where labels go; ragged lists stay lists (of CPU tensors).
    for name, values in batch.extras.items():
        if isinstance(values, np.ndarray):
            tensor = torch.from_numpy(values)
            batch.extras[name] = tensor.to(device, non_blocking=True) if on_gpu else tensor
        else:
            batch.extras[name] = [torch.from_numpy(v) if isinstance(v, np.ndarray) else v for v in values]
    batch.lengths = {name: torch.from_numpy(lengths) for name, lengths in batch.lengths.items()}
    return batch


def _dlpack(batch: Batch, config: ReaderConfig, dtype: str) -> Batch:
    from prepkit import interop

    if config.device == "cuda":

        def export(array: Any) -> Any:
            return interop.DLPackArray(array, device_id=config.device_index)

        batch.images = map_arrays(batch.images, export)
        batch.masks = None if batch.masks is None else map_arrays(batch.masks, export)
    return batch


def _cupy(batch: Batch, config: ReaderConfig, dtype: str) -> Batch:
    import cupy

    with cupy.cuda.Device(config.device_index or 0):  # CuPy arrays of this reader's GPU
        batch.images = map_arrays(batch.images, cupy.asarray)
        batch.masks = None if batch.masks is None else map_arrays(batch.masks, cupy.asarray)
    return batch


def map_arrays(value: Any, function: Any) -> Any:
    """``function`` over one array or each array of a list (images of mixed sizes)."""
    return [function(v) for v in value] if isinstance(value, list) else function(value)


def to_torch(value: Any, dtype: str, device: str = "cuda") -> Any:
    """A torch view of a numpy or device array (16-bit floats viewed from their uint16 storage)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, list):
        return [to_torch(v, dtype, device) for v in value]
    if isinstance(value, np.ndarray):
        tensor = torch.from_numpy(value)
    else:
        tensor = torch.as_tensor(value, device=device)  # __cuda_array_interface__: no copy
    if dtype == "bfloat16" and tensor.dtype in (torch.uint16, torch.int16):
        return tensor.view(torch.bfloat16)
    if dtype == "float16" and tensor.dtype in (torch.uint16, torch.int16):
        return tensor.view(torch.float16)
    return tensor


def device_view(array: Any) -> Any:
    """A numba view of a device output (numba array or torch tensor), writable in place."""
    try:
        import torch

        if isinstance(array, torch.Tensor):
            from numba import cuda

            if array.dtype in (torch.bfloat16, torch.float16):
                array = array.view(torch.int16)
            return cuda.as_cuda_array(array)
    except ImportError:
        pass
    return array


def stack_or_list(packed: PackedImages) -> Any:
    """Images of one shape become one (N, H, W, C) array; mixed sizes stay a list."""
    if len(packed) and (packed.shapes == packed.shapes[0]).all():
        h, w, c = (int(v) for v in packed.shapes[0])
        total = len(packed) * h * w * c
        return packed.flat[:total].reshape((len(packed), h, w, c))
    return packed.to_list()
