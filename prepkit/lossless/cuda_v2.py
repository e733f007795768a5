"""CUDA decoding of bitstream version 2 (docs/LOSSLESS.md, section A).

cuda.decode_plan routes every batch holding a v2 stream here. Until the v2 kernel lands,
this decodes the batch with the CPU kernels (which also handle v1 items) and uploads the
result, so device="cuda" returns correct device arrays for v2 streams, only without GPU
decoding. The CUDA kernel replaces `decode_plan` below with the same signature.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from prepkit.lossless import plan as plan_mod


def decode_plan(
    plan: plan_mod.Plan, stream: object = 0, out: object | None = None, pinned: np.ndarray | None = None
) -> tuple[object, object, object]:
    """Same contract as cuda.decode_plan: (flat device uint8, offsets, shapes) on the device."""
    from prepkit.lossless import cpu

    del pinned  # the interim path copies decoded pixels, not the compressed batch
    host = cpu.decode_plan(plan)  # raises CodecError for corrupt tiles, before any upload
    target: Any = out
    if target is None:
        target = cuda.device_array(max(plan.total, 1), np.uint8, stream=stream)
    else:
        plan_mod.check_out(target, plan.total)
    if plan.total:
        target[: plan.total].copy_to_device(host, stream=stream)
    offsets = cuda.to_device(plan.offsets, stream=stream)
    shapes = cuda.to_device(plan.shapes, stream=stream)
    return target[: plan.total], offsets, shapes
