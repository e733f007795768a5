"""numba CUDA kernels: one launch decodes a whole batch, one CUDA block per tile.

The twin of cpu.py's decoder, step for step, with every step spread over the block's
threads:

1. Rice parameters: a block-wide scan of 2k gives where each 16-value block's low bits start.
2. Unary section: each thread counts the one bits in its slice of bytes; a block scan of
   the counts gives each terminator its value index, and a max-scan of the last terminator
   positions gives each thread the terminator before its slice, so every q = gap - 1 is
   known without a serial walk.
3. Values: one thread per value reads its low bits from a 2-byte window.
4. Inverse predictor: a two-level parallel scan along rows (8-element segments, then the
   segment totals), then the same along columns.
5. The part of the tile inside the requested region goes to the flat output.

Imported only when device="cuda" is asked for.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from prepkit.lossless import format as fmt
from prepkit.lossless import plan as plan_mod

THREADS = 256  # threads per CUDA block (a power of two, at most MAX_THREADS)
MAX_THREADS = 256
MAX_VALUES = 4 * 64 * 64  # largest tile: 64 x 64 pixels x 4 channels
MAX_BLOCKS = MAX_VALUES // fmt.BLOCK
SEG = 8  # elements per thread in the two-level scans
MAX_SEGMENTS = MAX_VALUES // SEG


@cuda.jit(device=True)
def _scan_sum(buf, tid, n, value):
    """Block-wide exclusive prefix sum over n threads (Hillis-Steele); returns (exclusive, total)."""
    buf[tid] = value
    cuda.syncthreads()
    offset = 1
    while offset < n:
        other = buf[tid - offset] if tid >= offset else 0
        cuda.syncthreads()
        buf[tid] += other
        cuda.syncthreads()
        offset *= 2
    inclusive = buf[tid]
    total = buf[n - 1]
    cuda.syncthreads()
    return inclusive - value, total


@cuda.jit(device=True)
def _scan_max_exclusive(buf, tid, n, value):
    """Block-wide exclusive running maximum (-1 for thread 0)."""
    buf[tid] = value
    cuda.syncthreads()
    offset = 1
    while offset < n:
        other = buf[tid - offset] if tid >= offset else -1
        cuda.syncthreads()
        buf[tid] = max(buf[tid], other)
        cuda.syncthreads()
        offset *= 2
    result = buf[tid - 1] if tid > 0 else -1
    cuda.syncthreads()
    return result


@cuda.jit(device=True)
def _scan_lines(vals, seg_total, tid, nt, lines, per_plane, plane, line_stride, length, step):
    """Inclusive prefix sum mod 256 along `lines` lines of `length` elements, in place.

    Line l starts at (l // per_plane) * plane + (l % per_plane) * line_stride and its
    elements are `step` apart. Two-level parallel scan: each thread scans a segment of SEG
    elements, then adds the totals of the segments before it on its line.
    """
    n_seg = (length + SEG - 1) // SEG
    units = lines * n_seg
    for u in range(tid, units, nt):
        line = u // n_seg
        seg = u - line * n_seg
        start = (line // per_plane) * plane + (line % per_plane) * line_stride
        run = 0
        for e in range(seg * SEG, min(length, seg * SEG + SEG)):
            run += np.int32(vals[start + e * step])
            vals[start + e * step] = run & 255
        seg_total[u] = run
    cuda.syncthreads()
    for u in range(tid, units, nt):
        line = u // n_seg
        seg = u - line * n_seg
        start = (line // per_plane) * plane + (line % per_plane) * line_stride
        carry = 0
        for s in range(seg):
            carry += seg_total[line * n_seg + s]
        for e in range(seg * SEG, min(length, seg * SEG + SEG)):
            vals[start + e * step] = (np.int32(vals[start + e * step]) + carry) & 255
    cuda.syncthreads()


@cuda.jit
def decode_kernel(src, work, out, errors):
    """Decode work item blockIdx.x (one tile) into out; errors[item] gets a code or 0."""
    item = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    vals = cuda.shared.array(MAX_VALUES, np.uint8)
    ks = cuda.shared.array(MAX_BLOCKS, np.int32)
    block_start = cuda.shared.array(MAX_BLOCKS, np.int32)
    seg_total = cuda.shared.array(MAX_SEGMENTS, np.int32)
    scan = cuda.shared.array(MAX_THREADS, np.int32)
    flag = cuda.shared.array(2, np.int32)

    start = work[item, 0]
    end = work[item, 1]
    th = work[item, 2]
    tw = work[item, 3]
    c = work[item, 4]
    colour = work[item, 5]
    out_base = work[item, 6]
    out_h = work[item, 7]
    out_w = work[item, 8]
    oy = work[item, 9]
    ox = work[item, 10]
    n_vals = ((th * tw * c + fmt.BLOCK - 1) // fmt.BLOCK) * fmt.BLOCK
    n_blocks = n_vals // fmt.BLOCK
    a_len = (n_blocks + 1) // 2
    if tid == 0:
        flag[0] = 0
    cuda.syncthreads()

    # 1. Rice parameters and low-bit block starts (a scan of 2k over chunks of blocks).
    per = (n_blocks + nt - 1) // nt
    local = 0
    for b in range(tid * per, min(n_blocks, tid * per + per)):
        k = (np.int32(src[start + (b >> 1)]) >> ((b & 1) * 4)) & 15
        if k > fmt.MAX_K:
            flag[0] = plan_mod.ERR_K
            k = 0
        ks[b] = k
        local += 2 * k
    before, low_total = _scan_sum(scan, tid, nt, local)
    pos = start + a_len + before
    for b in range(tid * per, min(n_blocks, tid * per + per)):
        block_start[b] = pos
        pos += 2 * ks[b]
    c_start = start + a_len + low_total
    if tid == 0 and flag[0] == 0 and c_start > end:
        flag[0] = plan_mod.ERR_LOW_BITS
    cuda.syncthreads()
    if flag[0] != 0:
        if tid == 0:
            errors[item] = flag[0]
        return

    # 2. Unary section: terminator counts and positions per slice of bytes.
    c_len = end - c_start
    per = (c_len + nt - 1) // nt
    lo = min(c_len, tid * per)
    hi = min(c_len, lo + per)
    count = 0
    last = -1
    for p in range(lo, hi):
        byte = np.int32(src[c_start + p])
        count += cuda.popc(byte)
        if byte != 0:
            last = p * 8 + 7 - (cuda.clz(byte) - 24)
    rank, total = _scan_sum(scan, tid, nt, count)
    prev = _scan_max_exclusive(scan, tid, nt, last)
    if total != n_vals or src[end - 1] == 0:
        if tid == 0:
            errors[item] = plan_mod.ERR_UNARY
        return
    for p in range(lo, hi):
        byte = np.int32(src[c_start + p])
        for bit in range(8):
            if (byte >> bit) & 1:
                here = p * 8 + bit
                q = here - prev - 1
                prev = here
                if q > 255:
                    flag[0] = plan_mod.ERR_VALUE
                vals[rank] = min(q, 255)
                rank += 1
    cuda.syncthreads()

    # 3. Values: high part << k | low bits, then undo the zig-zag.
    for j in range(tid, n_vals, nt):
        b = j >> 4
        k = ks[b]
        bitpos = (j & 15) * k
        at = block_start[b] + (bitpos >> 3)
        # The input has no padding: the byte after the last block may not exist.
        nxt = np.int32(src[at + 1]) if at + 1 < src.shape[0] else 0
        window = np.int32(src[at]) | (nxt << 8)
        v = (np.int32(vals[j]) << k) | ((window >> (bitpos & 7)) & ((1 << k) - 1))
        if v > 255:
            flag[0] = plan_mod.ERR_VALUE
        vals[j] = ((v >> 1) ^ -(v & 1)) & 255
    cuda.syncthreads()
    if flag[0] != 0:
        if tid == 0:
            errors[item] = flag[0]
        return

    # 4. Inverse predictor: scans along rows (lines = c * th), then along columns (c * tw).
    _scan_lines(vals, seg_total, tid, nt, c * th, th, th * tw, tw, tw, 1)
    _scan_lines(vals, seg_total, tid, nt, c * tw, tw, th * tw, 1, th, tw)

    # 5. Colour and interleave into the requested region.
    plane = th * tw
    ya = max(0, -oy)
    yb = min(th, out_h - oy)
    xa = max(0, -ox)
    xb = min(tw, out_w - ox)
    width = xb - xa
    for p in range(tid, (yb - ya) * width, nt):
        y = ya + p // width
        x = xa + p - (p // width) * width
        i = y * tw + x
        dst = out_base + ((oy + y) * out_w + ox + x) * c
        if c == 1:
            out[dst] = vals[i]
        else:
            g = np.int32(vals[plane + i])
            out[dst] = (np.int32(vals[i]) + g * colour) & 255
            out[dst + 1] = g
            out[dst + 2] = (np.int32(vals[2 * plane + i]) + g * colour) & 255
            if c == 4:
                out[dst + 3] = vals[3 * plane + i]
    if tid == 0:
        errors[item] = 0


#: Most blocks of one launch along grid x (CUDA's limit is 2^31 - 1); tests lower it to
#: check that larger batches are launched in chunks.
MAX_GRID_X = 2**31 - 1
#: The "no error" value of the running minimum in an error accumulator.
NO_ERROR = np.iinfo(np.int64).max


def chunks(count: int, limit: int) -> list[tuple[int, int]]:
    """(start, stop) ranges of at most ``limit`` items covering ``count`` items."""
    return [(start, min(start + limit, count)) for start in range(0, count, max(1, limit))]


@cuda.jit
def reset_errors_kernel(result):
    """result = (0 bad tiles, no error): the start of a batch's error accumulator."""
    if cuda.grid(1) == 0:
        result[0] = 0
        result[1] = NO_ERROR


@cuda.jit
def reduce_errors_kernel(errors, image_of_item, base, result):
    """Fold per-tile error codes into result: [0] += bad tiles, [1] = min((base + image) << 8 | code),
    so the host learns the first bad sample of the batch (and why) from 16 bytes."""
    i = cuda.grid(1)
    if i < errors.shape[0]:
        code = errors[i]
        if code != 0:
            cuda.atomic.add(result, 0, 1)
            cuda.atomic.min(result, 1, ((base + image_of_item[i]) << 8) | (code & 255))


def report_errors(codes: Any, image_of_item: np.ndarray, stream: Any, buffers: Any, sink: Any, name: str) -> None:
    """Queue the reduction of a launch's error codes into ``sink`` (an ErrorSink) on ``stream``:
    nothing is read back here."""
    n = codes.shape[0]
    if n == 0:
        return
    images = upload(buffers, name, np.asarray(image_of_item, np.int64), stream)
    for start, stop in chunks(-(-n // THREADS), MAX_GRID_X):
        first, last = start * THREADS, min(stop * THREADS, n)
        reduce_errors_kernel[stop - start, THREADS, stream](codes[first:last], images[first:last], sink.base, sink.result)


def read_errors(plan: plan_mod.Plan, codes: Any, stream: Any) -> None:
    """The synchronous check (no ErrorSink): copy the codes back, wait for the copy, raise."""
    host = codes.copy_to_host(stream=stream)
    if stream != 0:
        stream.synchronize()  # copy_to_host(stream=...) is asynchronous: read only after it is done
    plan_mod.raise_errors(plan, host[: plan.work.shape[0]])


def stage_source(plan: plan_mod.Plan, pinned: np.ndarray | None) -> np.ndarray:
    """The batch's stored bytes, in ``pinned`` when it is large enough (copied there unless
    hostplan already gathered them there)."""
    source = plan.src
    if pinned is not None and pinned.size >= source.size and not plan_mod.staged_in(source, pinned):
        pinned[: source.size] = source
        source = pinned[: source.size]
    return source


def upload(buffers: Any, name: str, array: np.ndarray, stream: Any) -> Any:
    """``array`` on the device: into the slot's reusable buffer when ``buffers`` is given,
    else a fresh device array."""
    if buffers is not None:
        return buffers.to_device(name, array, stream)
    return cuda.to_device(np.ascontiguousarray(array), stream=stream)


def device_scratch(buffers: Any, name: str, size: int, dtype: Any, stream: Any) -> Any:
    """An uninitialised device array (the slot's reusable one when ``buffers`` is given)."""
    if buffers is not None:
        return buffers.device(name, max(size, 1), dtype)
    return cuda.device_array(max(size, 1), dtype, stream=stream)


def decode_plan(
    plan: plan_mod.Plan, stream: Any = 0, out: Any = None, pinned: np.ndarray | None = None,
    buffers: Any = None, errors: Any = None,
) -> tuple[Any, Any, Any]:  # numba device arrays and streams (numba is untyped)
    """Decode a validated plan on the GPU (one kernel launch per MAX_GRID_X tiles).

    Returns (flat device uint8 buffer, offsets device int64[N], shapes device int32[N, 3]);
    the flat buffer is out[:total] when a device array `out` is given. With `pinned`, a
    page-locked host buffer at least as large as the compressed batch, the streams are
    staged there so that their host-to-device copy is asynchronous and at full speed.
    With `buffers` (a prepkit.cudart.StreamBuffers) every device table lives in that slot's
    reusable memory: nothing is allocated once the buffers are large enough, and offsets
    and shapes are not copied (None is returned for them).
    Errors: with `errors` (an ErrorSink) the per-tile codes are reduced on the device into
    it and read by its owner later; without, raises CodecError after copying them back.
    """
    assert 0 < THREADS <= MAX_THREADS, "the block scans hold MAX_THREADS entries"
    if 2 in plan.versions:  # v2 streams (docs/LOSSLESS.md section A) have their own kernel module
        from prepkit.lossless import cuda_v2

        return cuda_v2.decode_plan(plan, stream=stream, out=out, pinned=pinned, buffers=buffers, errors=errors)
    source = stage_source(plan, pinned)
    if buffers is not None:
        src = buffers.device("src", max(source.size, 1), np.uint8)
        if source.size:
            src[: source.size].copy_to_device(source, stream=stream)
    else:
        src = cuda.to_device(source, stream=stream)
    n = plan.work.shape[0]
    work = upload(buffers, "work", plan.work, stream)
    if out is None:
        out = cuda.device_array(max(plan.total, 1), np.uint8, stream=stream)
    else:
        plan_mod.check_out(out, plan.total)
    codes = device_scratch(buffers, "errors", n, np.int32, stream)[:n]
    for start, stop in chunks(n, MAX_GRID_X):
        decode_kernel[stop - start, THREADS, stream](src, work[start:stop], out, codes[start:stop])
    if n and errors is not None:
        report_errors(codes, plan.image_of_item, stream, buffers, errors, "image_of_item")
    elif n:
        read_errors(plan, codes, stream)
    if buffers is not None:
        return out[: plan.total], None, None
    offsets = cuda.to_device(plan.offsets, stream=stream)
    shapes = cuda.to_device(plan.shapes, stream=stream)
    return out[: plan.total], offsets, shapes


def kernel_signatures() -> list[tuple]:
    """(python function, signature) of every CUDA kernel, for compile_ptx checks."""
    from numba import types

    sig = (types.uint8[::1], types.int64[:, ::1], types.uint8[::1], types.int32[::1])
    reduce_sig = (types.int32[::1], types.int64[::1], types.int64, types.int64[::1])
    return [(decode_kernel.py_func, sig), (reset_errors_kernel.py_func, (types.int64[::1],)),
            (reduce_errors_kernel.py_func, reduce_sig)]
