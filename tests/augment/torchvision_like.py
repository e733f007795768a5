"""torchvision.transforms.v2 semantics transcribed op by op, for end-to-end checks.

torchvision itself has no CPU build here, so these functions restate what its v2
kernels do on tensors (its `get_params`, `_compute_resized_output_size`, `center_crop`,
`to_dtype_image`, `normalize_image`, and `resize_image` -> torch interpolate), one op at
a time on a CHW torch tensor. Random numbers come from prepkit's counter-based draws so
the results are comparable sample by sample.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from prepkit.augment import rng
from prepkit.augment.ops import (
    RGB,
    CenterCrop,
    Grayscale,
    Normalize,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToDtype,
)

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that need it, so the get_params and size
# transcriptions work without it.


def rrc_get_params(height: int, width: int, scale, ratio, u: np.ndarray) -> tuple[int, int, int, int]:
    """RandomResizedCrop.get_params with u[k] = the k-th attempt's four uniforms."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for k in range(10):
        target_area = area * (scale[0] + u[k, 0] * (scale[1] - scale[0]))
        aspect_ratio = math.exp(log_ratio[0] + u[k, 1] * (log_ratio[1] - log_ratio[0]))
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            i = int(u[k, 2] * (height - h + 1))
            j = int(u[k, 3] * (width - w + 1))
            return i, j, h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        h = height
        w = int(round(h * max(ratio)))
    else:
        w = width
        h = height
    return (height - h) // 2, (width - w) // 2, h, w


def resized_output_size(height: int, width: int, size) -> tuple[int, int]:
    if isinstance(size, tuple):
        return size
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = size, int(size * long / short)
    new_w, new_h = (new_short, new_long) if width <= height else (new_long, new_short)
    return new_h, new_w


def _resize(img: torch.Tensor, size: tuple[int, int], antialias: bool) -> torch.Tensor:
    import torch

    # torchvision resizes uint8 to uint8 (rounded); floats stay float.
    x = img.to(torch.float32)[None]
    out = torch.nn.functional.interpolate(x, size=size, mode="bilinear", align_corners=False, antialias=antialias)[0]
    if img.dtype == torch.uint8:
        return out.round().clamp(0, 255).to(torch.uint8)
    return out.to(img.dtype)


def _to_dtype(img: torch.Tensor, dtype: str, scale: bool) -> torch.Tensor:
    import torch

    target = getattr(torch, dtype)
    if img.dtype == target:
        return img
    if not scale:
        if img.is_floating_point() and target == torch.uint8:
            return img.clamp(0, 255).to(target)  # prepkit saturates; torch's cast would wrap
        return img.to(target)
    if img.is_floating_point() and target == torch.uint8:
        return img.mul(255 + 1.0 - 1e-3).clamp(0, 255).to(target)
    if not img.is_floating_point():
        return img.to(target).mul_(1.0 / 255)
    return img.to(target)


def erasing_get_params(height: int, width: int, scale, ratio, u: np.ndarray) -> tuple[int, int, int, int] | None:
    """RandomErasing: ``if rand >= p: skip``, then its 10-attempt loop (u[0] = the p draw,
    u[1 + 4k: 5 + 4k] = attempt k's area, log-ratio, top and left uniforms); None = no erase."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for k in range(10):
        a, r, t, left_u = u[1 + 4 * k : 5 + 4 * k]
        erase_area = area * (scale[0] + a * (scale[1] - scale[0]))
        aspect_ratio = math.exp(log_ratio[0] + r * (log_ratio[1] - log_ratio[0]))
        h = int(round(math.sqrt(erase_area * aspect_ratio)))
        w = int(round(math.sqrt(erase_area / aspect_ratio)))
        if not (h < height and w < width):
            continue
        return int(t * (height - h + 1)), int(left_u * (width - w + 1)), h, w
    return None


def rgb_to_grayscale(img: torch.Tensor, num_output_channels: int) -> torch.Tensor:
    """torchvision's _rgb_to_grayscale_image (preserve_dtype=True) on a CHW tensor."""
    if img.shape[0] == 1:
        return img.repeat(num_output_channels, 1, 1)
    r, g, b = img[:3].unbind(0)  # prepkit reads RGBA's colour channels (torchvision refuses 4)
    gray = r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(0).to(img.dtype)
    return gray.expand(num_output_channels, -1, -1).contiguous()


def to_rgb(img: torch.Tensor) -> torch.Tensor:
    """torchvision's grayscale_to_rgb, with alpha dropped as Pillow's convert("RGB")."""
    return img.repeat(3, 1, 1) if img.shape[0] == 1 else img[:3].contiguous()


def apply(ops, image: np.ndarray, index: int, seed: int, epoch: int) -> torch.Tensor:
    """Run ``ops`` on one HWC uint8 image the torchvision way; returns CHW."""
    import torch

    img = torch.from_numpy(image).permute(2, 0, 1).contiguous()
    for position, op in enumerate(ops):
        h, w = img.shape[-2:]
        if isinstance(op, RandomResizedCrop):
            u = rng.uniform(seed, epoch, [index], position, 40)[0].reshape(10, 4)
            i, j, ch, cw = rrc_get_params(h, w, op.scale, op.ratio, u)
            img = _resize(img[:, i : i + ch, j : j + cw], op.size, op.antialias)
        elif isinstance(op, Resize):
            img = _resize(img, resized_output_size(h, w, op.size), op.antialias)
        elif isinstance(op, CenterCrop):
            th, tw = op.size
            top, left = int(round((h - th) / 2.0)), int(round((w - tw) / 2.0))
            img = img[:, top : top + th, left : left + tw]
        elif isinstance(op, RandomHorizontalFlip):
            if rng.uniform(seed, epoch, [index], position, 1)[0, 0] < op.p:
                img = img.flip(-1)
        elif isinstance(op, ToDtype):
            img = _to_dtype(img, op.dtype, op.scale)
        elif isinstance(op, Grayscale):
            img = rgb_to_grayscale(img, op.num_output_channels)
        elif isinstance(op, RGB):
            img = to_rgb(img)
        elif isinstance(op, RandomErasing):
            from prepkit.augment.erasing import reference_normals

            u = rng.uniform(seed, epoch, [index], position, 41)[0]
            box = erasing_get_params(h, w, op.scale, op.ratio, u) if u[0] < op.p else None
            if box is not None:
                i, j, eh, ew = box
                c = img.shape[0]
                if op.value == "random":
                    key = int(rng.keys(seed, epoch, [index], position)[0])
                    v = torch.from_numpy(reference_normals(key, c, eh, ew)).to(torch.float32)
                else:
                    v = torch.tensor(np.broadcast_to(op.value, (c,)).copy(), dtype=torch.float32)[:, None, None]
                img = img.clone()
                if img.dtype == torch.uint8:
                    v = v.clamp(0, 255)  # prepkit saturates where torch's float -> uint8 store would wrap
                img[:, i : i + eh, j : j + ew] = v.to(img.dtype)
        elif isinstance(op, Normalize):
            c = img.shape[0]
            mean = torch.tensor(np.broadcast_to(op.mean, (c,)), dtype=img.dtype)[:, None, None]
            std = torch.tensor(np.broadcast_to(op.std, (c,)), dtype=img.dtype)[:, None, None]
            img = (img - mean) / std
    return img
