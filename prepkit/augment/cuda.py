"""Fused augmentation on the GPU: one numba CUDA kernel launch per batch.

The twin of :mod:`prepkit.augment.cpu`, built from the same scalar math in
:mod:`prepkit.augment.sampling`. The grid is 3-D over (output x, output y, image):
every thread computes one output pixel for all channels straight from the packed uint8
source, so a batch of images of different sizes is one launch and no intermediate
image is written. Imported lazily by the pipeline (needs numba-cuda).

Only the small per-sample parameter arrays are copied host -> device on each call;
the pixels must already be on the device.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import config, cuda

from prepkit.augment import bits, channels, colour_math, erasing, sampling, warp_math
from prepkit.augment.cpu import KIND_FLOAT16, KIND_FLOAT32, KIND_UINT8, Plan
from prepkit.augment.params import Params
from prepkit.errors import PipelineError

_device = cuda.jit(device=True)
filter_width = _device(sampling.filter_width)
window_start = _device(sampling.window_start)
window_stop = _device(sampling.window_stop)
tap_weight = _device(sampling.tap_weight)
axis_scale = _device(sampling.axis_scale)
nearest_index = _device(sampling.nearest_index)
finish_value = _device(sampling.finish_value)
saturate_uint8 = _device(sampling.saturate_uint8)
float16_from_bits = _device(bits.float16_from_bits)
bfloat16_from_bits = _device(bits.bfloat16_from_bits)
# The simulator runs kernels as Python, where an LLVM intrinsic cannot run.
float32_bits = _device(bits.float32_bits_python) if config.ENABLE_CUDASIM else bits.float32_bits


@cuda.jit(device=True)
def _store(out, index, value, kind):
    """Write one output value in the pipeline's dtype: float32, saturated uint8, or the bits
    of float16 / bfloat16 (stored in uint16)."""
    if kind == KIND_FLOAT32:
        out[index] = value
    elif kind == KIND_UINT8:
        out[index] = saturate_uint8(value)
    else:
        u = float32_bits(np.float32(value))
        out[index] = float16_from_bits(u) if kind == KIND_FLOAT16 else bfloat16_from_bits(u)


#: Threads per block along (x, y); images go along the grid's z.
BLOCK = (16, 8, 1)


@cuda.jit(device=True)
def _out_index(base, c, y, x, channels, h, w, nchw):
    if nchw:
        return base + (c * h + y) * w + x
    return base + (y * w + x) * channels + c


@cuda.jit
def augment_kernel(
    flat, offsets, shapes, region, resized, offset, flip, out_size,
    antialias, round_u8, ch_scale, ch_bias, kind, nchw, out, out_offsets,
):  # fmt: skip
    """One thread per output pixel: crop, resample, flip, value ops, cast, layout."""
    x, y, i = cuda.grid(3)
    if i >= shapes.shape[0]:
        return
    h = out_size[i, 0]
    w = out_size[i, 1]
    if y >= h or x >= w:
        return
    width = shapes[i, 1]
    channels = shapes[i, 2]
    sy = axis_scale(region[i, 2], resized[i, 0])
    sx = axis_scale(region[i, 3], resized[i, 1])
    fy = filter_width(sy, antialias)
    fx = filter_width(sx, antialias)
    ry = offset[i, 0] + y
    rx = offset[i, 1] + (w - 1 - x if flip[i] else x)
    y_lo = window_start(ry, sy, fy)
    y_hi = window_stop(ry, sy, fy, region[i, 2])
    x_lo = window_start(rx, sx, fx)
    x_hi = window_stop(rx, sx, fx, region[i, 3])
    y_total = np.float32(0.0)
    for j in range(y_lo, y_hi):
        y_total += tap_weight(j, ry, sy, fy)
    x_total = np.float32(0.0)
    for k in range(x_lo, x_hi):
        x_total += tap_weight(k, rx, sx, fx)
    # Same float32 arithmetic, in the same order, as the CPU kernel: a vertical pass
    # with normalised weights, then a horizontal one. Channels (1, 3 or 4) are
    # accumulated side by side so each weight is computed once, not once per channel.
    acc0 = acc1 = acc2 = acc3 = np.float32(0.0)
    base = offsets[i] + (region[i, 0] * width + region[i, 1]) * channels
    row_stride = width * channels
    for k in range(x_lo, x_hi):
        wx = np.float32(tap_weight(k, rx, sx, fx) / x_total)
        col0 = col1 = col2 = col3 = np.float32(0.0)
        for j in range(y_lo, y_hi):
            wy = np.float32(tap_weight(j, ry, sy, fy) / y_total)
            q = base + j * row_stride + k * channels
            col0 += wy * np.float32(flat[q])
            if channels >= 3:
                col1 += wy * np.float32(flat[q + 1])
                col2 += wy * np.float32(flat[q + 2])
            if channels == 4:
                col3 += wy * np.float32(flat[q + 3])
        acc0 += wx * col0
        acc1 += wx * col1
        acc2 += wx * col2
        acc3 += wx * col3
    for c in range(channels):
        acc = acc0 if c == 0 else (acc1 if c == 1 else (acc2 if c == 2 else acc3))
        value = finish_value(acc, round_u8, ch_scale[c], ch_bias[c])
        index = _out_index(out_offsets[i], c, y, x, channels, h, w, nchw)
        _store(out, index, value, kind)


@cuda.jit
def mask_kernel(
    flat, offsets, shapes, region, resized, offset, flip, out_size, exact, nchw, out, out_offsets
):
    """Nearest-neighbour twin of :func:`augment_kernel` for masks (uint8 in and out)."""
    x, y, i = cuda.grid(3)
    if i >= shapes.shape[0]:
        return
    h = out_size[i, 0]
    w = out_size[i, 1]
    if y >= h or x >= w:
        return
    channels = shapes[i, 2]
    sy = nearest_index(offset[i, 0] + y, region[i, 2], resized[i, 0], exact)
    sx = nearest_index(offset[i, 1] + (w - 1 - x if flip[i] else x), region[i, 3], resized[i, 1], exact)
    src = offsets[i] + ((region[i, 0] + sy) * shapes[i, 1] + region[i, 1] + sx) * channels
    for c in range(channels):
        out[_out_index(out_offsets[i], c, y, x, channels, h, w, nchw)] = flat[src + c]


normal_at = _device(erasing.normal_at)


@cuda.jit
def erase_kernel(erase, keys, random, fill, ch_scale, ch_bias, kind, nchw, channels, h, w, out):
    """One thread per pixel of each sample's RandomErasing box: the fill, value ops, cast."""
    x, y, i = cuda.grid(3)
    if i >= erase.shape[0] or y >= erase[i, 2] or x >= erase[i, 3]:
        return
    eh = erase[i, 2]
    ew = erase[i, 3]
    base = i * channels * h * w
    for c in range(channels):
        if random:
            raw = np.float32(normal_at(keys[i], (c * eh + y) * ew + x))
        else:
            raw = fill[c]
        value = raw * ch_scale[c] + ch_bias[c]
        index = _out_index(base, c, erase[i, 0] + y, erase[i, 1] + x, channels, h, w, nchw)
        _store(out, index, value, kind)


def _is_device(array: Any) -> bool:
    if config.ENABLE_CUDASIM:  # the simulator's arrays have no __cuda_array_interface__
        return hasattr(array, "copy_to_host")
    return bool(cuda.is_cuda_array(array))


def _as_device(name: str, array: Any) -> Any:
    """A numba view of any device array (torch, CuPy, numba), or a PipelineError."""
    if not _is_device(array):
        raise PipelineError(f"{name}: Expected a device array (__cuda_array_interface__). Got {type(array).__name__}.")
    return array if config.ENABLE_CUDASIM else cuda.as_cuda_array(array)


def _upload(buffers: Any, name: str, array: np.ndarray, stream: Any) -> Any:
    """A small host array on the device: through the caller's reusable buffers when given."""
    array = np.ascontiguousarray(array)
    if buffers is not None:
        return buffers.to_device(name, array, stream)
    return cuda.to_device(array, stream=stream)


def _device_inputs(flat: Any, offsets: Any, stream: Any, buffers: Any = None) -> tuple[Any, Any]:
    # Pixels are never copied behind the caller's back: they must already be on the device.
    flat = _as_device("flat", flat)
    if flat.dtype != np.uint8 or flat.ndim != 1:
        raise PipelineError(f"flat: Expected a 1-D uint8 device buffer. Got {flat.dtype} with shape {flat.shape}.")
    if _is_device(offsets):
        offsets = _as_device("offsets", offsets)
    else:
        offsets = _upload(buffers, "aug_offsets", np.asarray(offsets, dtype=np.int64), stream)
    if offsets.dtype != np.int64:
        raise PipelineError(f"offsets: Expected int64. Got {offsets.dtype}.")
    return flat, offsets


def _device_params(shapes: np.ndarray, params: Params, out_offsets: np.ndarray, stream: Any,
                   buffers: Any = None) -> tuple[Any, ...]:
    # A few bytes per sample: these are the only host -> device copies a call makes.
    arrays = (shapes, params.region, params.resized, params.offset, params.flip.astype(np.uint8), params.out_size,
              out_offsets)  # fmt: skip
    names = ("shapes", "region", "resized", "offset", "flip", "out_size", "out_offsets")
    return tuple(_upload(buffers, f"aug_{name}", a, stream) for name, a in zip(names, arrays, strict=True))


def _device_output(
    out: Any, shape: tuple[int, ...], storage: Any, accepted: tuple[Any, ...], stream: Any
) -> tuple[Any, Any]:
    if out is None:
        target = cuda.device_array(int(np.prod(shape)), dtype=storage, stream=stream)
        return target.reshape(shape), target
    array = _as_device("out", out)
    if tuple(array.shape) != shape or array.dtype not in [np.dtype(d) for d in accepted] or not array.is_c_contiguous():
        raise PipelineError(
            f"out: Expected a C-contiguous device array of shape {shape} and dtype "
            f"{'/'.join(np.dtype(d).name for d in accepted)}. Got {array.dtype} {tuple(array.shape)}."
        )
    return out, array.reshape(int(np.prod(shape))).view(storage)


#: Most images of one launch: images are on grid z (or y), whose limit is 65,535 blocks.
#: Larger batches are launched in chunks (tests lower this to check the chunking).
MAX_GRID_IMAGES = 65535


def image_chunks(count: int) -> list[tuple[int, int]]:
    """(start, stop) ranges of at most MAX_GRID_IMAGES images covering ``count`` images."""
    step = max(1, MAX_GRID_IMAGES)
    return [(start, min(start + step, count)) for start in range(0, count, step)]


def _grid(params: Params, count: int | None = None) -> tuple[int, int, int]:
    h, w = params.out_size.max(axis=0)
    return (-(-int(w) // BLOCK[0]), -(-int(h) // BLOCK[1]), len(params) if count is None else count)


def _check_sources(flat: Any, offsets: Any, shapes: np.ndarray, params: Params) -> None:
    """The host-side bounds check the kernels rely on (they do not check, a GPU would read
    out of bounds): every region non-empty inside its image (prepkit.decode.rois), every
    image inside ``flat``. Raises PipelineError naming the image."""
    from prepkit.decode.rois import check_rois
    from prepkit.errors import DecodeError

    n = shapes.shape[0]
    if len(params) != n:
        raise PipelineError(f"params: Expected one entry per image ({n}). Got {len(params)}.")
    region = params.region.astype(np.int64)
    rois = np.column_stack([region[:, 0], region[:, 1], region[:, 0] + region[:, 2], region[:, 1] + region[:, 3]])
    try:
        if n:
            check_rois(rois, shapes, list(range(n)))  # "sample i": the i-th image of the call
    except DecodeError as error:
        raise PipelineError(f"params.region: {error}") from None
    host_offsets = offsets.copy_to_host() if hasattr(offsets, "copy_to_host") else np.asarray(offsets)
    ends = host_offsets.astype(np.int64) + shapes.astype(np.int64).prod(axis=1)
    if n and (host_offsets.min() < 0 or ends.max() > flat.shape[0]):
        image = int(np.flatnonzero((host_offsets < 0) | (ends > flat.shape[0]))[0])
        raise PipelineError(f"offsets: image {image}: Expected images inside flat ({flat.shape[0]} bytes). "
                            f"Got one from {int(host_offsets[image])} to {int(ends[image])}.")


def augment(
    flat: Any, offsets: Any, shapes: np.ndarray, params: Params, plan: Plan, shape: tuple[int, ...],
    dtype: str, out: Any, out_offsets: np.ndarray, stream: Any = 0, erase: tuple[Any, ...] | None = None,
    stage: tuple[Plan, Plan, bool] | None = None, buffers: Any = None,
) -> Any:  # fmt: skip
    """Launch :func:`augment_kernel` once for the batch on ``stream``; returns the output.

    ``erase`` (RandomErasing's (random, fill, scale, bias)) adds a second launch over the
    boxes in ``params.erase``, on the same stream. ``stage`` (the pipeline's colour plans
    and whether the stage sees uint8 data) makes the first launch write float32 scratch and
    adds :func:`colour_kernel` (one block per image) to finish the output.
    """
    storage = {"float32": np.float32, "float16": np.uint16, "bfloat16": np.uint16, "uint8": np.uint8}[dtype]
    accepted = {"float16": (np.float16, np.uint16), "bfloat16": (np.uint16, np.int16)}.get(dtype, (storage,))
    result, target = _device_output(out, shape, storage, accepted, stream)
    if out is None and dtype == "float16":
        result = target.view(np.float16).reshape(shape)
    _check_sources(flat, offsets, shapes, params)
    flat, offsets = _device_inputs(flat, offsets, stream, buffers)
    device_params = _device_params(shapes, params, out_offsets, stream, buffers)
    first, first_out = plan, target
    if stage is not None:
        first = stage[0]
        first_out = cuda.device_array(int(np.prod(shape)), dtype=np.float32, stream=stream)
    scale, bias = _upload(buffers, "aug_scale", first.scale, stream), _upload(buffers, "aug_bias", first.bias, stream)
    for start, stop in image_chunks(len(params)):  # images on grid z: chunks within its limit
        d_shapes, region, resized, offset, flip, out_size, d_out_offsets = (a[start:stop] for a in device_params)
        augment_kernel[_grid(params, stop - start), BLOCK, stream](
            flat, offsets[start:stop], d_shapes, region, resized, offset, flip, out_size,
            first.antialias, first.round_u8, scale, bias, first.kind, first.nchw, first_out, d_out_offsets,
        )  # fmt: skip
    if stage is not None and len(params):
        _colour(first_out, params, stage[1], stage[2], shape, target, stream)
    if erase is not None and len(params) and int(params.erase[:, 2].max()) > 0:
        random, fill, scale, bias = erase
        nchw = plan.nchw
        n_channels, h, w = (shape[1], shape[2], shape[3]) if nchw else (shape[3], shape[1], shape[2])
        to_device = lambda a: cuda.to_device(np.ascontiguousarray(a), stream=stream)  # noqa: E731
        boxes, keys = to_device(params.erase.astype(np.int32)), to_device(params.erase_key.astype(np.uint64))
        fill_d, scale_d, bias_d = to_device(fill), to_device(scale), to_device(bias)
        per_image = n_channels * h * w
        for start, stop in image_chunks(len(params)):  # the kernel's image i writes target[i * per_image:]
            grid = (-(-int(params.erase[:, 3].max()) // BLOCK[0]), -(-int(params.erase[:, 2].max()) // BLOCK[1]), stop - start)
            erase_kernel[grid, BLOCK, stream](
                boxes[start:stop], keys[start:stop], random, fill_d, scale_d, bias_d, plan.kind, nchw, n_channels, h, w,
                target[start * per_image : stop * per_image],
            )  # fmt: skip
    return result


def mask(
    flat: Any, offsets: Any, shapes: np.ndarray, params: Params, exact: bool, nchw: bool,
    shape: tuple[int, ...], out: Any, out_offsets: np.ndarray, stream: Any = 0, buffers: Any = None,
) -> Any:  # fmt: skip
    """Launch :func:`mask_kernel` on ``stream`` (chunks of images), then :func:`mask_warp_kernel`
    when auto-augment drew geometric steps; returns the uint8 output."""
    result, target = _device_output(out, shape, np.uint8, (np.uint8,), stream)
    _check_sources(flat, offsets, shapes, params)
    flat, offsets = _device_inputs(flat, offsets, stream, buffers)
    device_params = _device_params(shapes, params, out_offsets, stream, buffers)
    for start, stop in image_chunks(len(params)):  # images on grid z: chunks within its limit
        d_shapes, region, resized, offset, flip, out_size, d_out_offsets = (a[start:stop] for a in device_params)
        mask_kernel[_grid(params, stop - start), BLOCK, stream](
            flat, offsets[start:stop], d_shapes, region, resized, offset, flip, out_size, exact, nchw, target, d_out_offsets
        )
    if len(params) and bool((params.colour_op >= warp_math.AFFINE_NEAREST).any()):
        # One block per image on grid x (limit 2**31 - 1): no chunking needed.
        n_channels, h, w = (shape[1], shape[2], shape[3]) if nchw else (shape[3], shape[1], shape[2])
        spare = cuda.device_array(target.shape[0], dtype=np.uint8, stream=stream)
        mask_warp_kernel[len(params), COLOUR_THREADS, stream](
            target, spare, cuda.to_device(np.ascontiguousarray(params.colour_op, np.int32), stream=stream),
            cuda.to_device(params.warp_rows(), stream=stream), n_channels, h, w, nchw,
        )  # fmt: skip
    return result


luma = _device(channels.luma)


@cuda.jit
def channels_kernel(flat, offsets, shapes, mode, out_channels, out, out_offsets):
    """One thread per pixel: the twin of :func:`prepkit.augment.channels._convert_kernel`."""
    p, i = cuda.grid(2)
    if i >= shapes.shape[0] or p >= shapes[i, 0] * shapes[i, 1]:
        return
    src_c = shapes[i, 2]
    q = offsets[i] + p * src_c
    r = np.int32(flat[q])
    g = np.int32(flat[q + 1]) if src_c >= 3 else r
    b = np.int32(flat[q + 2]) if src_c >= 3 else r
    for c in range(out_channels):
        if mode == 0 or src_c == 1:
            v = r if c == 0 else (g if c == 1 else b)
        else:
            v = luma(r, g, b)
        out[out_offsets[i] + p * out_channels + c] = v


def convert_channels(
    flat: Any, offsets: Any, shapes: np.ndarray, step: channels.ChannelStep, stream: Any = 0
) -> tuple[Any, Any, np.ndarray]:
    """One channel op over a packed device batch: (device flat, device offsets, host shapes)."""
    flat, offsets = _device_inputs(flat, offsets, stream)
    out_offsets, out_shapes, total = channels.output_layout(shapes, step.channels)
    out = cuda.device_array(max(total, 1), dtype=np.uint8, stream=stream)
    d_out_offsets = cuda.to_device(out_offsets, stream=stream)
    pixels = int((shapes[:, 0].astype(np.int64) * shapes[:, 1]).max()) if len(shapes) else 0
    if pixels:
        d_shapes = cuda.to_device(np.ascontiguousarray(shapes, dtype=np.int32), stream=stream)
        for start, stop in image_chunks(len(shapes)):  # images on grid y: chunks within its limit
            channels_kernel[(-(-pixels // 128), stop - start), (128, 1), stream](
                flat, offsets[start:stop], d_shapes[start:stop], step.mode, step.channels, out, d_out_offsets[start:stop],
            )  # fmt: skip
    return out, d_out_offsets, out_shapes


@cuda.jit
def mixup_kernel(source, lam, first, out):
    """out[i] = lam * source[i] + (1 - lam) * source[i - 1] over (image, element); images
    from ``first`` (launches in chunks of images)."""
    k, i = cuda.grid(2)
    i += first
    n = source.shape[0]
    if i >= n or k >= source.shape[1]:
        return
    prev = (i + n - 1) % n
    out[i, k] = source[i, k] * lam + source[prev, k] * (np.float32(1.0) - lam)


@cuda.jit
def cutmix_kernel(source, box, nchw, channels, height, width, first, out):
    """Inside the box, out[i] takes source[i - 1]'s pixel; elements outside are left alone
    (images from ``first``)."""
    k, i = cuda.grid(2)
    i += first
    n = source.shape[0]
    if i >= n or k >= source.shape[1]:
        return
    if nchw:
        x = k % width
        y = (k // width) % height
    else:
        x = (k // channels) % width
        y = k // (channels * width)
    if box[0] <= x < box[2] and box[1] <= y < box[3]:
        out[i, k] = source[(i + n - 1) % n, k]


def mix_batch(images: Any, lam: float, box: tuple[int, int, int, int] | None, layout: str, stream: Any = 0) -> Any:
    """MixUp (``box`` None) or CutMix of a device batch, in place, on ``stream``.

    One device-to-device copy of the batch (image i reads image i - 1, which another thread
    rewrites) and one launch. MixUp needs float32 (numba has no 16-bit float arithmetic
    here); CutMix copies elements, so any dtype whose elements are 1, 2 or 4 bytes works.
    """
    array = _as_device("images", images)
    shape = tuple(int(v) for v in array.shape)
    if not array.is_c_contiguous():
        raise PipelineError(f"images: Expected a C-contiguous device batch. Got strides {array.strides}.")
    if box is None and array.dtype != np.float32:
        raise PipelineError(f"MixUp on the GPU: Expected float32 images. Got {array.dtype}.")
    flat = array.reshape(shape[0], int(np.prod(shape[1:])))
    if box is not None and array.dtype.itemsize == 2:
        flat = flat.view(np.uint16)
    source = cuda.device_array(flat.shape, dtype=flat.dtype, stream=stream)
    source.copy_to_device(flat, stream=stream)
    nchw = layout == "NCHW"
    channels, height, width = (shape[1], shape[2], shape[3]) if nchw else (shape[3], shape[1], shape[2])
    d_box = None if box is None else cuda.to_device(np.asarray(box, np.int64), stream=stream)
    for start, stop in image_chunks(shape[0]):  # images on grid y: chunks within its limit
        grid = (-(-flat.shape[1] // 256), stop - start)
        if d_box is None:
            mixup_kernel[grid, (256, 1), stream](source, np.float32(lam), start, flat)
        else:
            cutmix_kernel[grid, (256, 1), stream](source, d_box, nchw, channels, height, width, start, flat)
    return images


colour_apply_pixel = _device(colour_math.apply_pixel)
colour_contrast_value = _device(colour_math.contrast_value)
colour_sharpen = _device(colour_math.sharpen)
colour_autocontrast_stats = _device(colour_math.autocontrast_stats)
colour_equalize_lut = _device(colour_math.equalize_lut)
colour_quantize = _device(colour_math.quantize)
warp_is_warp = _device(warp_math.is_warp)
warp_pixel = _device(warp_math.warp_pixel)
warp_nearest_source = _device(warp_math.nearest_source)
_SMALL_GRID_PIXELS = warp_math.SMALL_GRID_PIXELS

_STATS = colour_math.STATS  # a global int is a compile-time constant, as shared.array needs

#: Threads per block of :func:`colour_kernel` (one block per image); fewer in the simulator,
#: which runs each thread as a Python thread.
COLOUR_THREADS = 32 if config.ENABLE_CUDASIM else 128


@cuda.jit
def colour_kernel(src, spare, codes, args, warp, is_u8, channels, h, w, ch_scale, ch_bias, kind, nchw, out):
    """One block per image: every step of the colour stage in order over the float32 NHWC
    scratch ``src`` (statistics reduced in shared memory between steps), then value ops,
    cast and layout into ``out``. The twin of ``colour._colour_kernel``."""
    i = cuda.blockIdx.x
    t = cuda.threadIdx.x
    nt = cuda.blockDim.x
    pixels = h * w
    base = i * pixels * channels
    bound = np.float32(255.0) if is_u8 else np.float32(1.0)
    stats = cuda.shared.array(_STATS, np.float32)
    hist = cuda.shared.array(768, np.int32)
    total = cuda.shared.array(1, np.float64)
    extremes = cuda.shared.array(6, np.float32)  # low[3], high[3]
    for k in range(codes.shape[1]):
        code = codes[i, k]
        arg = args[i, k]
        # code is the same for the whole block, so every thread reaches the same barriers.
        if code == colour_math.IDENTITY:
            continue
        if warp_is_warp(code):
            for p in range(t, pixels * channels, nt):
                spare[base + p] = src[base + p]
            cuda.syncthreads()
            small = pixels < _SMALL_GRID_PIXELS
            for p in range(t, pixels, nt):
                v0, v1, v2 = warp_pixel(spare, base, channels, h, w, p % w, p // w, code, warp, i, k, small, is_u8)
                src[base + p * channels] = v0
                if channels == 3:
                    src[base + p * channels + 1] = v1
                    src[base + p * channels + 2] = v2
            cuda.syncthreads()
            continue
        if code == colour_math.SHARPNESS:
            if h > 2 and w > 2:
                for p in range(t, pixels * channels, nt):
                    spare[base + p] = src[base + p]
                cuda.syncthreads()
                for p in range(t, pixels, nt):
                    y = p // w
                    x = p % w
                    if 0 < y < h - 1 and 0 < x < w - 1:
                        for c in range(channels):
                            q = base + p * channels + c
                            around = np.float32(0.0)
                            for dy in range(-1, 2):
                                for dx in range(-1, 2):
                                    if dy != 0 or dx != 0:
                                        around += spare[q + (dy * w + dx) * channels]
                            src[q] = colour_sharpen(spare[q], around, arg, bound, is_u8)
                cuda.syncthreads()
            continue
        for j in range(t, 768, nt):
            hist[j] = 0
        if t == 0:
            total[0] = 0.0
            for c in range(3):
                extremes[c] = src[base + c % channels]
                extremes[3 + c] = src[base + c % channels]
        cuda.syncthreads()
        partial = 0.0
        for p in range(t, pixels, nt):
            q = base + p * channels
            v0 = src[q]
            v1 = src[q + 1] if channels == 3 else v0
            v2 = src[q + 2] if channels == 3 else v0
            if code == colour_math.CONTRAST:
                partial += colour_contrast_value(v0, v1, v2, channels, is_u8)
            elif code == colour_math.AUTOCONTRAST:
                for c in range(channels):
                    v = v0 if c == 0 else (v1 if c == 1 else v2)
                    cuda.atomic.min(extremes, c, v)
                    cuda.atomic.max(extremes, 3 + c, v)
            elif code == colour_math.EQUALIZE:
                for c in range(channels):
                    v = v0 if c == 0 else (v1 if c == 1 else v2)
                    cuda.atomic.add(hist, c * 256 + colour_quantize(v, is_u8), 1)
        if code == colour_math.CONTRAST:
            cuda.atomic.add(total, 0, partial)
        cuda.syncthreads()
        if t == 0 and code == colour_math.CONTRAST:
            stats[colour_math.STAT_MEAN] = np.float32(total[0]) / np.float32(pixels)
        if t < channels and code == colour_math.AUTOCONTRAST:
            low, inv = colour_autocontrast_stats(extremes[t], extremes[3 + t], is_u8)
            stats[colour_math.STAT_LOW + t] = low
            stats[colour_math.STAT_INV + t] = inv
        if t < channels and code == colour_math.EQUALIZE:
            colour_equalize_lut(hist, t * 256, stats, colour_math.STAT_LUT + t * 256, pixels, is_u8)
        cuda.syncthreads()
        for p in range(t, pixels, nt):
            q = base + p * channels
            if channels == 3:
                v0, v1, v2 = colour_apply_pixel(code, arg, bound, is_u8, 3, src[q], src[q + 1], src[q + 2], stats)
                src[q] = v0
                src[q + 1] = v1
                src[q + 2] = v2
            else:
                v0, v1, v2 = colour_apply_pixel(code, arg, bound, is_u8, 1, src[q], src[q], src[q], stats)
                src[q] = v0
        cuda.syncthreads()
    for p in range(t, pixels, nt):
        y = p // w
        x = p % w
        for c in range(channels):
            value = finish_value(src[base + p * channels + c], False, ch_scale[c], ch_bias[c])
            index = _out_index(base, c, y, x, channels, h, w, nchw)
            _store(out, index, value, kind)


def _colour(scratch: Any, params: Params, after: Plan, is_u8: bool, shape: tuple[int, ...], target: Any, stream: Any) -> None:
    """Launch :func:`colour_kernel` over the scratch the fused kernel wrote."""
    n_channels, h, w = (shape[1], shape[2], shape[3]) if after.nchw else (shape[3], shape[1], shape[2])
    to_device = lambda a: cuda.to_device(np.ascontiguousarray(a), stream=stream)  # noqa: E731
    spare = cuda.device_array(scratch.shape[0], dtype=np.float32, stream=stream)
    colour_kernel[len(params), COLOUR_THREADS, stream](
        scratch, spare, to_device(params.colour_op.astype(np.int32)), to_device(params.colour_arg.astype(np.float64)),
        to_device(params.warp_rows()),
        is_u8, n_channels, h, w, to_device(after.scale), to_device(after.bias), after.kind, after.nchw, target,
    )  # fmt: skip


@cuda.jit
def mask_warp_kernel(out, spare, codes, warp, channels, h, w, nchw):
    """One block per mask: its geometric steps in order, nearest, 0 where uncovered (the
    twin of ``colour._mask_warp_kernel``); ``out`` is uint8 in the output layout."""
    i = cuda.blockIdx.x
    t = cuda.threadIdx.x
    nt = cuda.blockDim.x
    pixels = h * w
    size = pixels * channels
    base = i * size
    small = pixels < _SMALL_GRID_PIXELS
    for k in range(codes.shape[1]):
        code = codes[i, k]
        if not warp_is_warp(code):  # the same for the whole block: every thread meets the barriers
            continue
        for p in range(t, size, nt):
            spare[base + p] = out[base + p]
        cuda.syncthreads()
        for p in range(t, pixels, nt):
            q = warp_nearest_source(code, p % w, p // w, h, w, warp, i, k, small)
            for c in range(channels):
                value = np.uint8(0)
                if q >= 0:
                    value = spare[_out_index(base, c, q // w, q % w, channels, h, w, nchw)]
                out[_out_index(base, c, p // w, p % w, channels, h, w, nchw)] = value
        cuda.syncthreads()
