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
    ColorJitter,
    Grayscale,
    Normalize,
    RandAugment,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToDtype,
    TrivialAugmentWide,
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


# -- colour ops: torchvision v2's functional kernels on CHW tensors (uint8 or float) --------


def _max_value(img: torch.Tensor) -> float:
    return 1.0 if img.is_floating_point() else 255.0


def _blend(img1: torch.Tensor, img2: torch.Tensor, ratio: float) -> torch.Tensor:
    out = img1.mul(ratio).add_(img2, alpha=(1.0 - ratio)).clamp_(0, _max_value(img1))
    return out if img1.is_floating_point() else out.to(img1.dtype)


def _grayscale_float(img: torch.Tensor) -> torch.Tensor:
    r, g, b = img.unbind(dim=-3)
    gray = r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(-3)
    return gray if img.is_floating_point() else gray.floor_()


def adjust_brightness(img: torch.Tensor, factor: float) -> torch.Tensor:
    out = img.mul(factor).clamp_(0, _max_value(img))
    return out if img.is_floating_point() else out.to(img.dtype)


def adjust_saturation(img: torch.Tensor, factor: float) -> torch.Tensor:
    if img.shape[-3] == 1:
        return img
    return _blend(img, _grayscale_float(img), factor)


def adjust_contrast(img: torch.Tensor, factor: float) -> torch.Tensor:
    import torch

    if img.shape[-3] == 3:
        gray = _grayscale_float(img)
    else:
        gray = img if img.is_floating_point() else img.to(torch.float32)
    return _blend(img, torch.mean(gray, dim=(-3, -2, -1), keepdim=True), factor)


def _rgb_to_hsv(image: torch.Tensor) -> torch.Tensor:
    import torch

    r, g, _ = image.unbind(dim=-3)
    minc, maxc = torch.aminmax(image, dim=-3)
    eqc = maxc == minc
    channels_range = maxc - minc
    ones = torch.ones_like(maxc)
    s = channels_range / torch.where(eqc, ones, maxc)
    divisor = torch.where(eqc, ones, channels_range).unsqueeze_(dim=-3)
    rc, gc, bc = ((maxc.unsqueeze(dim=-3) - image) / divisor).unbind(dim=-3)
    neq_r = maxc != r
    eq_g = maxc == g
    hg = rc.add(2.0).sub_(bc).mul_(eq_g & neq_r)
    hr = bc.sub_(gc).mul_(~neq_r)
    hb = gc.add_(4.0).sub_(rc).mul_(neq_r.logical_and_(eq_g.logical_not_()))
    h = hr.add_(hg).add_(hb).mul_(1.0 / 6.0).add_(1.0).fmod_(1.0)
    return torch.stack((h, s, maxc), dim=-3)


def _hsv_to_rgb(img: torch.Tensor) -> torch.Tensor:
    import torch

    h, s, v = img.unbind(dim=-3)
    h6 = h.mul(6)
    i = torch.floor(h6)
    f = h6.sub_(i)
    i = i.to(dtype=torch.int32)
    sxv = s.mul(v)
    p = v.sub(sxv).clamp_(0.0, 1.0)
    q = v.sub(sxv.mul_(f)).clamp_(0.0, 1.0)
    t = sxv.add_(p).clamp_(0.0, 1.0)
    i.remainder_(6)
    vpqt = torch.stack((v, p, q, t), dim=-3)
    select = torch.tensor([[0, 2, 1, 1, 3, 0], [3, 0, 0, 2, 1, 1], [1, 1, 3, 0, 0, 2]], dtype=torch.long)
    index = select[:, i.long()]  # (3, H, W)
    return vpqt.gather(-3, index)


def adjust_hue(img: torch.Tensor, hue: float) -> torch.Tensor:
    if img.shape[-3] == 1:
        return img
    dtype = img.dtype
    x = _to_dtype(img, "float32", True)
    hsv = _rgb_to_hsv(x)
    h, s, v = hsv.unbind(dim=-3)
    h.add_(hue).remainder_(1.0)
    out = _hsv_to_rgb(hsv)
    return out if dtype != torch_uint8() else _to_dtype(out, "uint8", True)


def torch_uint8():
    import torch

    return torch.uint8


def adjust_sharpness(img: torch.Tensor, factor: float) -> torch.Tensor:
    import torch

    c, h, w = img.shape[-3:]
    if h <= 2 or w <= 2:
        return img
    fp = img.is_floating_point()
    a, b = 1.0 / 13.0, 5.0 / 13.0
    kernel = torch.tensor([[a, a, a], [a, b, a], [a, a, a]], dtype=torch.float32).expand(c, 1, 3, 3)
    out = img.to(dtype=torch.float32, copy=True)
    blurred = torch.nn.functional.conv2d(out[None], kernel, groups=c)[0]
    if not fp:
        blurred = blurred.round_()
    view = out[..., 1:-1, 1:-1]
    view.add_(blurred.sub_(view), alpha=(1.0 - factor))
    out = out.clamp_(0, _max_value(img))
    return out if fp else out.to(img.dtype)


def posterize(img: torch.Tensor, bits: int) -> torch.Tensor:
    if img.is_floating_point():
        levels = 1 << bits
        return img.mul(levels).floor_().clamp_(0, levels - 1).mul_(1.0 / levels)
    if bits >= 8:
        return img
    return img & (((1 << bits) - 1) << (8 - bits))


def solarize(img: torch.Tensor, threshold: float) -> torch.Tensor:
    import torch

    inverted = (1.0 - img) if img.is_floating_point() else img.bitwise_xor(255)
    return torch.where(img >= threshold, inverted, img)


def autocontrast(img: torch.Tensor) -> torch.Tensor:
    import torch

    bound = _max_value(img)
    fp = img.is_floating_point()
    x = img if fp else img.to(torch.float32)
    minimum = x.amin(dim=(-2, -1), keepdim=True)
    maximum = x.amax(dim=(-2, -1), keepdim=True)
    eq = maximum == minimum
    inv_scale = maximum.sub_(minimum).mul_(1.0 / bound)
    minimum[eq] = 0.0
    inv_scale[eq] = 1.0
    return x.sub(minimum).div_(inv_scale).clamp_(0, bound).to(img.dtype)


def equalize(img: torch.Tensor) -> torch.Tensor:
    import torch

    dtype = img.dtype
    x = _to_dtype(img, "uint8", True)
    flat = x.flatten(start_dim=-2).to(torch.long)
    hist = flat.new_zeros(x.shape[:-2] + (256,), dtype=torch.int32)
    hist.scatter_add_(dim=-1, index=flat, src=hist.new_ones(1).expand_as(flat))
    cum = hist.cumsum(dim=-1)
    index = cum.argmax(dim=-1)
    non_max = flat.shape[-1] - hist.gather(dim=-1, index=index.unsqueeze_(-1))
    step = non_max.div_(255, rounding_mode="floor")
    valid = step.ne(0).unsqueeze_(-1)
    cum = cum[..., :-1]
    cum.add_(step // 2).div_(step.clamp_(min=1), rounding_mode="floor").clamp_(0, 255)
    lut = torch.cat([cum.new_zeros(x.shape[:-2] + (1,)), cum.to(torch.uint8).to(cum.dtype)], dim=-1)
    out = torch.where(valid, lut.gather(dim=-1, index=flat).view_as(x), x).to(torch.uint8)
    return out if dtype == torch.uint8 else _to_dtype(out, "float32", True)


#: torchvision's auto-augment op names (v2 ``_AUGMENTATION_SPACE``), in its order.
AUTO_OPS = ("Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast",
            "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize")  # fmt: skip
_SIGNED = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast", "Sharpness")


def auto_magnitudes(name: str, bins: int, wide: bool, height: int = 1, width: int = 1) -> torch.Tensor | None:
    """torchvision's _AUGMENTATION_SPACE tables (TrivialAugmentWide if ``wide``, else RandAugment)."""
    import torch

    if name in ("Brightness", "Color", "Contrast", "Sharpness"):
        return torch.linspace(0.0, 0.99 if wide else 0.9, bins)
    if name in ("ShearX", "ShearY"):
        return torch.linspace(0.0, 0.99 if wide else 0.3, bins)
    if name == "TranslateX":
        return torch.linspace(0.0, 32.0 if wide else 150.0 / 331.0 * width, bins)
    if name == "TranslateY":
        return torch.linspace(0.0, 32.0 if wide else 150.0 / 331.0 * height, bins)
    if name == "Rotate":
        return torch.linspace(0.0, 135.0 if wide else 30.0, bins)
    if name == "Posterize":
        return (8 - (torch.arange(bins) / ((bins - 1) / (6 if wide else 4)))).round().int()
    if name == "Solarize":
        return torch.linspace(1.0, 0.0, bins)
    return None


def get_inverse_affine_matrix(center, angle: float, translate, scale: float, shear) -> list[float]:
    """_get_inverse_affine_matrix: the inverse of T * C * RotateScaleShear * C^-1, in Python floats."""
    rot = math.radians(angle)
    sx, sy = math.radians(shear[0]), math.radians(shear[1])
    cx, cy = center
    tx, ty = translate
    cos_sy, tan_sx = math.cos(sy), math.tan(sx)
    rot_minus_sy = rot - sy
    cx_plus_tx, cy_plus_ty = cx + tx, cy + ty
    a = math.cos(rot_minus_sy) / cos_sy
    b = -(a * tan_sx + math.sin(rot))
    c = math.sin(rot_minus_sy) / cos_sy
    d = math.cos(rot) - c * tan_sx
    matrix = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0]
    matrix[2] += cx - matrix[0] * cx_plus_tx - matrix[1] * cy_plus_ty
    matrix[5] += cy - matrix[3] * cx_plus_tx - matrix[4] * cy_plus_ty
    return matrix


def affine_grid(theta: torch.Tensor, w: int, h: int, ow: int, oh: int) -> torch.Tensor:
    """_affine_grid: pixel centres (relative to the centre) times theta, normalised after."""
    import torch

    base_grid = torch.empty(1, oh, ow, 3, dtype=theta.dtype)
    base_grid[..., 0].copy_(torch.linspace((1.0 - ow) * 0.5, (ow - 1.0) * 0.5, steps=ow))
    base_grid[..., 1].copy_(torch.linspace((1.0 - oh) * 0.5, (oh - 1.0) * 0.5, steps=oh).unsqueeze_(-1))
    base_grid[..., 2].fill_(1)
    rescaled_theta = theta.transpose(1, 2).div_(torch.tensor([0.5 * w, 0.5 * h], dtype=theta.dtype))
    return base_grid.view(1, oh * ow, 3).bmm(rescaled_theta).view(1, oh, ow, 2)


def apply_grid_transform(img: torch.Tensor, grid: torch.Tensor, mode: str, fill) -> torch.Tensor:
    """_apply_grid_transform: grid_sample (zeros padding), a ones channel as the fill mask."""
    import torch
    from torch.nn.functional import grid_sample

    shape = img.shape
    img = img.reshape(-1, *shape[-3:])
    fp = img.dtype == grid.dtype
    float_img = img if fp else img.to(grid.dtype)
    if fill is not None:
        mask = torch.ones((img.shape[0], 1, *shape[-2:]), dtype=float_img.dtype)
        float_img = torch.cat((float_img, mask), dim=1)
    float_img = grid_sample(float_img, grid, mode=mode, padding_mode="zeros", align_corners=False)
    if fill is not None:
        float_img, mask = torch.tensor_split(float_img, indices=(-1,), dim=-3)
        mask = mask.expand_as(float_img)
        fill_list = fill if isinstance(fill, (tuple, list)) else [float(fill)]
        fill_img = torch.tensor(fill_list, dtype=float_img.dtype).view(1, -1, 1, 1)
        if mode == "nearest":
            float_img = torch.where(mask < 0.5, fill_img.expand_as(float_img), float_img)
        else:
            float_img = float_img.sub_(fill_img).mul_(mask).add_(fill_img)
    img = float_img.round_().to(img.dtype) if not fp else float_img
    return img.reshape(shape)


def affine(img: torch.Tensor, angle: float, translate, scale: float, shear, interpolation: str, fill, center=None):
    """affine_image on a CHW tensor."""
    import torch

    height, width = img.shape[-2:]
    center_f = [0.0, 0.0]
    if center is not None:
        center_f = [(c - s * 0.5) for c, s in zip(center, [width, height], strict=True)]
    matrix = get_inverse_affine_matrix(center_f, float(angle), [float(t) for t in translate], scale, shear)
    dtype = img.dtype if torch.is_floating_point(img) else torch.float32
    theta = torch.tensor(matrix, dtype=dtype).reshape(1, 2, 3)
    grid = affine_grid(theta, w=width, h=height, ow=width, oh=height)
    return apply_grid_transform(img, grid, interpolation, fill)


def rotate(img: torch.Tensor, angle: float, interpolation: str, fill) -> torch.Tensor:
    """rotate_image (expand=False, centre): rot90 fast paths, else the affine grid with -angle."""
    import torch

    angle = angle % 360
    if angle == 0:
        return img.clone()
    if angle == 180:
        return torch.rot90(img, k=2, dims=(-2, -1))
    if img.shape[-1] == img.shape[-2]:
        if angle == 90:
            return torch.rot90(img, k=1, dims=(-2, -1))
        if angle == 270:
            return torch.rot90(img, k=3, dims=(-2, -1))
    height, width = img.shape[-2:]
    matrix = get_inverse_affine_matrix([0.0, 0.0], -angle, [0.0, 0.0], 1.0, [0.0, 0.0])
    dtype = img.dtype if torch.is_floating_point(img) else torch.float32
    theta = torch.tensor(matrix, dtype=dtype).reshape(1, 2, 3)
    grid = affine_grid(theta, w=width, h=height, ow=width, oh=height)
    return apply_grid_transform(img, grid, interpolation, fill)


def auto_apply(img: torch.Tensor, name: str, magnitude: float, interpolation: str = "nearest", fill=None) -> torch.Tensor:
    """_apply_image_or_video_transform."""
    if name == "ShearX":
        shear = [math.degrees(math.atan(magnitude)), 0.0]
        return affine(img, 0.0, [0, 0], 1.0, shear, interpolation, fill, center=[0, 0])
    if name == "ShearY":
        shear = [0.0, math.degrees(math.atan(magnitude))]
        return affine(img, 0.0, [0, 0], 1.0, shear, interpolation, fill, center=[0, 0])
    if name == "TranslateX":
        return affine(img, 0.0, [int(magnitude), 0], 1.0, [0.0, 0.0], interpolation, fill)
    if name == "TranslateY":
        return affine(img, 0.0, [0, int(magnitude)], 1.0, [0.0, 0.0], interpolation, fill)
    if name == "Rotate":
        return rotate(img, magnitude, interpolation, fill)
    if name == "Brightness":
        return adjust_brightness(img, 1.0 + magnitude)
    if name == "Color":
        return adjust_saturation(img, 1.0 + magnitude)
    if name == "Contrast":
        return adjust_contrast(img, 1.0 + magnitude)
    if name == "Sharpness":
        return adjust_sharpness(img, 1.0 + magnitude)
    if name == "Posterize":
        return posterize(img, int(magnitude))
    if name == "Solarize":
        return solarize(img, _max_value(img) * magnitude)
    if name == "AutoContrast":
        return autocontrast(img)
    if name == "Equalize":
        return equalize(img)
    return img


def _auto_pick(img: torch.Tensor, op, u_op: float, chosen_bin: int, u_sign: float, wide: bool) -> torch.Tensor:
    name = AUTO_OPS[int(u_op * len(AUTO_OPS))]
    height, width = img.shape[-2:]
    table = auto_magnitudes(name, op.num_magnitude_bins, wide, height, width)
    magnitude = 0.0
    if table is not None:
        magnitude = float(table[chosen_bin])
        if name in _SIGNED and u_sign <= 0.5:
            magnitude *= -1
    return auto_apply(img, name, magnitude, op.interpolation, None if op.fill is None else list(op.fill))


def colour_op(op, img: torch.Tensor, u: np.ndarray) -> torch.Tensor:
    """ColorJitter / TrivialAugmentWide / RandAugment's forward, torch.rand replaced by ``u``."""
    if isinstance(op, ColorJitter):
        order = np.argsort(u[:4], kind="stable")  # torch.randperm(4)
        ranges = (op.brightness, op.contrast, op.saturation, op.hue)
        fns = (adjust_brightness, adjust_contrast, adjust_saturation, adjust_hue)
        for j in order:
            if ranges[j] is not None:
                img = fns[j](img, float(ranges[j][0] + u[4 + j] * (ranges[j][1] - ranges[j][0])))
        return img
    if isinstance(op, TrivialAugmentWide):
        bins = op.num_magnitude_bins
        return _auto_pick(img, op, u[0], int(u[1] * bins), u[2], wide=True)
    assert isinstance(op, RandAugment)
    for k in range(op.num_ops):
        img = _auto_pick(img, op, u[2 * k], op.magnitude, u[2 * k + 1], wide=False)
    return img


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
        elif isinstance(op, (ColorJitter, TrivialAugmentWide, RandAugment)):
            draws = 2 * op.num_ops if isinstance(op, RandAugment) else op.draws
            img = colour_op(op, img, rng.uniform(seed, epoch, [index], position, draws)[0])
        elif isinstance(op, Normalize):
            c = img.shape[0]
            mean = torch.tensor(np.broadcast_to(op.mean, (c,)), dtype=img.dtype)[:, None, None]
            std = torch.tensor(np.broadcast_to(op.std, (c,)), dtype=img.dtype)[:, None, None]
            img = (img - mean) / std
    return img
