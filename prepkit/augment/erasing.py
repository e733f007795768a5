"""RandomErasing's fill, written over the fused kernel's output (CPU here, CUDA in cuda.py).

The fused kernel writes every pixel; this pass then overwrites each sample's box (drawn on
the host, :func:`prepkit.augment.params.random_erasing_boxes`) with the fill. The fill is
the value torchvision writes at the op's position, carried through the value ops that come
after it (``fill * scale + bias`` per channel) and cast like every other output pixel, so
only the box's pixels are touched.

``value="random"`` needs one standard normal per erased element (torchvision's
``normal_()`` over a (C, h, w) tensor). They come from :func:`normal_at`: a counter-based
draw from the sample's key and the element's position in that (C, h, w) box, Box-Muller
on two splitmix64 outputs, so the CPU, the GPU and the numpy oracle agree.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from prepkit.augment import bits, cpu, sampling
from prepkit.augment.cpu import _emit_row
from prepkit.jitcache import guard_disk_cache

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_ONE, _TWO = np.uint64(1), np.uint64(2)


def normal_at(key: np.uint64, counter: int) -> float:
    """A standard normal for element ``counter`` of a sample with ``key``: Box-Muller on
    two splitmix64 outputs (written out, so numba CPU and CUDA both compile it alone)."""
    c = np.uint64(counter)
    a = key + (_TWO * c + _ONE) * _GOLDEN
    a = (a ^ (a >> _S30)) * _M1
    a = (a ^ (a >> _S27)) * _M2
    a = a ^ (a >> _S31)
    b = key + (_TWO * c + _TWO) * _GOLDEN
    b = (b ^ (b >> _S30)) * _M1
    b = (b ^ (b >> _S27)) * _M2
    b = b ^ (b >> _S31)
    u1 = (np.float64(a >> _S11) + 1.0) * (1.0 / 9007199254740992.0)  # (0, 1]
    u2 = np.float64(b >> _S11) * (1.0 / 9007199254740992.0)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


_normal_at = njit(inline="always")(normal_at)


@njit(parallel=True, nogil=True, cache=True)
def _erase_kernel(erase, keys, random, fill, scale, bias, kind, nchw, channels, h, w, out):
    n = erase.shape[0]
    for i in prange(n):
        top, left, eh, ew = erase[i, 0], erase[i, 1], erase[i, 2], erase[i, 3]
        if eh == 0 or ew == 0:
            continue
        row = np.empty(ew, np.float32)
        base = i * channels * h * w
        step = 1 if nchw else channels
        for c in range(channels):
            for y in range(eh):
                for x in range(ew):
                    if random:
                        row[x] = np.float32(_normal_at(keys[i], (c * eh + y) * ew + x))
                    else:
                        row[x] = fill[c]
                if nchw:
                    first = base + (c * h + top + y) * w + left
                else:
                    first = base + ((top + y) * w + left) * channels + c
                _emit_row(row, False, False, scale[c], bias[c], kind, out, first, step)


def erase_cpu(
    target: np.ndarray, erase: np.ndarray, keys: np.ndarray, random: bool, fill: np.ndarray,
    scale: np.ndarray, bias: np.ndarray, kind: int, nchw: bool, shape: tuple[int, ...],
) -> None:  # fmt: skip
    """Overwrite each sample's box in the 1-D output ``target`` of batch ``shape``."""
    channels, h, w = (shape[1], shape[2], shape[3]) if nchw else (shape[3], shape[1], shape[2])
    _erase_kernel(
        np.ascontiguousarray(erase, np.int32), np.ascontiguousarray(keys, np.uint64), random,
        fill.astype(np.float32), scale, bias, kind, nchw, channels, h, w, target,
    )  # fmt: skip


def reference_normals(key: int, channels: int, h: int, w: int) -> np.ndarray:
    """float64[channels, h, w]: the same normals as :func:`normal_at`, vectorised in numpy."""
    counter = np.arange(channels * h * w, dtype=np.uint64)
    with np.errstate(over="ignore"):
        k = np.uint64(key)

        def mix(z: np.ndarray) -> np.ndarray:
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            return z ^ (z >> np.uint64(31))

        golden = np.uint64(0x9E3779B97F4A7C15)
        a = mix(k + (np.uint64(2) * counter + np.uint64(1)) * golden)
        b = mix(k + (np.uint64(2) * counter + np.uint64(2)) * golden)
    u1 = ((a >> np.uint64(11)).astype(np.float64) + 1.0) / 2.0**53
    u2 = (b >> np.uint64(11)).astype(np.float64) / 2.0**53
    return (np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)).reshape(channels, h, w)


# The kernel inlines augment.cpu's _emit_row (and what it inlines): see prepkit.jitcache.
guard_disk_cache(globals(), (cpu, sampling, bits))
