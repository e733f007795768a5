"""Whole v2 streams decoded on the CPU in one compiled call: the fast path of
``lossless.decode``, ``decode_batch`` and ``decode_batch_packed``.

The batch path (``hostplan.plan_buffers`` then ``cpu.decode_plan``) makes a dozen numba and
numpy calls per batch. For one small image those calls cost more than the decoding: a 32x32
photograph crop took about 60 us where libspng takes 20. For a batch of the 12 evaluation
masks they took 0.21-0.25 ms against 2 ms of decoding, and 1.0-1.2 ms when the process had
been asleep (its code and data fetched from memory again). Here the same steps, with the same
validation (``hostplan._read_headers``, ``_layout``, ``_validate_fill``) and the same kernels
(``cpu_v2._decode_strided`` on the calling thread, ``cpu_v2._decode_items`` on numba's threads,
chosen as ``cpu.use_parallel`` chooses), run in one call: on the stream's own bytes for one
stream, on the streams copied back to back into the thread's reused buffer for several.

Only whole v2 streams are handled. Anything else (version 1, a region, a refused stream, an
``out`` the batch path would refuse) returns None and the caller takes the batch path, which
decodes it or raises the CodecError that names the image and the reason.

Measured (docs/BENCHMARKS.md "Decoder kernels without reference counts (stop 38)", "A batch
of whole streams in one compiled call (stop 41)"): one numba thread, evaluation masks one per
call 62-263 us here against 120-368 us on the batch path, a 2560x2560 wallpaper 28.8-29.5 ms
against 31.0-31.5; the 12 masks as one batch 2.09-2.14 ms against 2.28-2.32.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np
from numba import njit

from prepkit.jitcache import guard_disk_cache
from prepkit.lossless import cpu, cpu_v2, frequencies, hostplan, med_simd, memops, prefix_simd, rans_avx2, runs
from prepkit.lossless import format as fmt
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import plan as plan_mod

NOT_HERE = -1  # the stream is not one this path decodes (not v2)
OUT_TOO_SMALL = -2  # the caller's output buffer is smaller than the batch's pixels
_NO_OUT = np.empty(0, np.uint8)  # the out of a call that makes its own buffer (new_out)


@njit(nogil=True, cache=True)
def _validate(src, starts, stops):
    """(code, info, lay, work, freq, cum, n_out) of the streams src[starts[r]:stops[r]], which
    lie back to back from byte 0: code 0 when every one is a whole v2 stream that validates,
    NOT_HERE when one is not v2, else the first refusal code (the batch path then names the
    stream and the reason)."""
    n = starts.size
    rows = np.arange(n)
    info = np.zeros((n, hostplan.N_INFO), np.int64)
    lay = np.empty((n, 7), np.int64)
    work = np.empty((0, plan_mod.N_COLS), np.int64)
    freq = np.empty((0, 256), np.int32)
    cum = np.empty((0, 257), np.int32)
    hostplan._read_headers(src, starts, stops, rows, info)
    for r in range(n):
        if info[r, hostplan.I_ERR] != 0:
            return info[r, hostplan.I_ERR], info, lay, work, freq, cum, 0
        if info[r, hostplan.I_VERSION] != f2.VERSION:
            return NOT_HERE, info, lay, work, freq, cum, 0
    regions = np.zeros((n, 4), np.int64)
    regions[:, 2] = info[:, hostplan.I_H]
    regions[:, 3] = info[:, hostplan.I_W]
    totals = np.empty(5, np.int64)
    hostplan._layout(info, regions, np.bool_(False), starts, stops, lay, totals)
    n_items, n_segs, n_tables, n_out = totals[0], totals[1], totals[2], totals[3]
    work = np.empty((n_items, plan_mod.N_COLS), np.int64)
    owner = np.empty(n_items, np.int64)
    segs = np.empty((n_segs, 4), np.int64)
    freq = np.empty((n_tables, 256), np.int32)
    cum = np.empty((n_tables, 257), np.int32)
    packed = np.empty(1, np.uint32)  # (no packed tables: the decoder expands them itself)
    errors = np.zeros(n, np.int64)
    staged = np.zeros(n, np.int64)
    hostplan._validate_fill(src, starts, stops, rows, info, regions, np.bool_(False), lay, work, owner, segs, freq, cum,
                            packed, np.bool_(False), errors, staged)
    for r in range(n):
        if errors[r] != 0:
            return errors[r], info, lay, work, freq, cum, n_out
    return 0, info, lay, work, freq, cum, n_out


@njit(nogil=True, cache=True, inline="always")
def _decode_into(src, work, freq, cum, out, serial_tiles, windows, window_empty, symbols, planes, ctx_of):
    """Decode every validated work item into out; the first tile's error code, or 0. On numba's
    threads (the scratch holds one chunk per thread) when there are more tiles than
    serial_tiles (cpu.serial_tiles(): cpu.use_parallel's rule), else on the calling thread. The
    work items point into the streams as staged back to back from byte 0: src itself."""
    n_tables = freq.shape[0]
    empty = np.zeros(n_tables, np.int64)
    for t in range(n_tables):
        empty[t] = cum[t, 256] == 0
    n_tables_at = np.zeros(n_tables + 1, np.int64)
    cpu_v2._table_counts(work, n_tables, n_tables_at)
    n_items = work.shape[0]
    items = np.arange(n_items)
    codes = np.zeros(n_items, np.int64)
    if n_items > serial_tiles:
        cpu_v2._decode_items(src, work, items, out, codes, freq, cum, empty, n_tables_at, windows, window_empty,
                             ctx_of, symbols, planes, np.bool_(True))
    else:
        cpu_v2._decode_strided(src, work, items, np.int64(0), np.int64(1), out, codes, freq, cum, empty, n_tables_at,
                               windows[0], window_empty[0], ctx_of, symbols[0], symbols[1], planes[0], np.bool_(True))
    for k in range(n_items):
        if codes[k] != 0:
            return codes[k]
    return 0


@njit(nogil=True, cache=True)
def _decode_many(src, starts, stops, serial_tiles, out, new_out, windows, window_empty, symbols, planes, ctx_of):
    """(code, pixels, offsets, shapes, header flags) of streams back to back in src, decoded
    into out (into a new buffer when new_out; OUT_TOO_SMALL when out is too small)."""
    n = starts.size
    code, info, lay, work, freq, cum, n_out = _validate(src, starts, stops)
    offsets = lay[:, hostplan.L_OUT].copy()
    shapes = np.empty((n, 3), np.int32)
    for r in range(n):
        shapes[r, 0] = lay[r, hostplan.L_OH]
        shapes[r, 1] = lay[r, hostplan.L_OW]
        shapes[r, 2] = info[r, hostplan.I_C]
    flags = info[:, hostplan.I_FLAGS].copy()
    if code != 0:
        return code, out, offsets, shapes, flags
    if new_out:
        out = np.empty(n_out, np.uint8)
    elif out.size < n_out:
        return OUT_TOO_SMALL, out, offsets, shapes, flags
    code = _decode_into(src, work, freq, cum, out, serial_tiles, windows, window_empty, symbols, planes, ctx_of)
    return code, out[:n_out], offsets, shapes, flags


@njit(nogil=True, cache=True)
def _decode_one(src, serial_tiles, windows, window_empty, symbols, planes, ctx_of):
    """(code, pixels, height, width, channels, header flags) of one stream: _decode_many of
    the whole of src into a new buffer (the pixels are undefined unless code is 0)."""
    code, out, _, shapes, flags = _decode_many(src, np.zeros(1, np.int64), np.full(1, src.size, np.int64),
                                               serial_tiles, np.empty(0, np.uint8), np.bool_(True), windows, window_empty,
                                               symbols, planes, ctx_of)
    return code, out, shapes[0, 0], shapes[0, 1], shapes[0, 2], flags[0]


def _scratch() -> tuple[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """cpu.serial_tiles() and this thread's decoder scratch for numba's threads."""
    return cpu.serial_tiles(), cpu_v2._decode_scratch(numba.get_num_threads())


def decode(data: object) -> np.ndarray | None:
    """The pixels of one whole v2 stream (HxW or HxWxC, as lossless.decode returns them), or
    None when the batch path must decode it: not v2, or refused (that path raises the
    CodecError). Raises CodecError when data is not bytes-like."""
    array = fmt.as_bytes(data).view()
    array.flags.writeable = False  # one specialization: the kernels see read-only input
    serial_tiles, (symbols, planes, windows, window_empty) = _scratch()
    code, out, h, w, c, flags = _decode_one(array, serial_tiles, windows, window_empty, symbols, planes,
                                            cpu_v2.CONTEXT_OF)
    if code != 0:
        return None
    return out.reshape((h, w) if flags & fmt.FLAG_2D else (h, w, c))


def decode_many(buffers: Sequence[object], out: object | None = None, workspace: hostplan.Workspace | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(flat, offsets, shapes, header flags) of whole v2 streams decoded in one compiled call,
    as ``lossless.decode_batch_packed`` returns them (flat is out[:total] when out is given),
    or None when the batch path must decode them: not every one v2, refused (that path raises
    the CodecError naming the image), or an ``out`` it would refuse. Several streams are
    copied back to back into ``workspace``'s reused buffer first (one source array for one
    call; the batch path copies them too)."""
    if not buffers or (out is not None and not (isinstance(out, np.ndarray) and out.dtype == np.uint8 and
                                                 out.ndim == 1 and out.flags.c_contiguous and out.flags.writeable)):
        return None
    arrays = [fmt.as_bytes(b) for b in buffers]
    sizes = np.array([a.size for a in arrays], np.int64)
    stops = np.cumsum(sizes)
    starts = stops - sizes
    if len(arrays) == 1:
        src = arrays[0].view()
    else:
        src = np.empty(int(stops[-1]), np.uint8) if workspace is None else workspace.take("joined", (int(stops[-1]),), np.uint8)
        np.concatenate(arrays, out=src)
    src.flags.writeable = False  # one specialization: the kernels see read-only input
    serial_tiles, (symbols, planes, windows, window_empty) = _scratch()
    code, flat, offsets, shapes, flags = _decode_many(src, starts, stops, serial_tiles, _NO_OUT if out is None else out,
                                                      out is None, windows, window_empty, symbols, planes,
                                                      cpu_v2.CONTEXT_OF)
    if code != 0:
        return None
    return flat, offsets, shapes, flags


# Last, once every cached function above exists: the modules compiled into these kernels are
# part of their cache key.
guard_disk_cache(globals(), (fmt, f2, plan_mod, frequencies, hostplan, cpu_v2, med_simd, memops, prefix_simd,
                              rans_avx2, runs),
                 extra=rans_avx2.BUILD)
