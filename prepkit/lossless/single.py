"""One whole v2 stream decoded on the CPU in one compiled call: ``lossless.decode``'s fast path.

The batch path (``hostplan.plan_buffers`` then ``cpu.decode_plan``) makes a dozen numba and
numpy calls per batch. For one small image those calls cost more than the decoding: a 32x32
photograph crop took about 60 us where libspng takes 20. Here the same steps, with the same
validation (``hostplan._read_headers``, ``_layout``, ``_validate_fill``) and the same kernel
(``cpu_v2._decode_strided``), run in one call on the stream's own bytes (no copy).

Only the common case is handled: a whole v2 stream that the batch path would decode on one
thread (at most MAX_TILES tiles; any number when numba has one thread, or fewer than
``cpu.MIN_TILES_PER_THREAD`` per thread). Anything else (version 1, a region, a refused
stream, an image the batch path splits over threads) returns None and the caller takes the
batch path, which decodes it or raises the CodecError that names the reason.

Why any size on one thread: the batch path plans in Python (about 35 us per call) and stages
a copy of the bytes, and one image per call decoded faster here at every size measured. One
numba thread: evaluation masks 62-263 us here against 120-368 us on the batch path, a
2560x2560 wallpaper 28.8-29.5 ms against 31.0-31.5 (docs/BENCHMARKS.md "Decoder kernels
without reference counts (stop 38)").
"""

from __future__ import annotations

import numpy as np
from numba import njit

from prepkit.jitcache import guard_disk_cache
from prepkit.lossless import cpu, cpu_v2, frequencies, hostplan, med_simd, memops, prefix_simd, rans_avx2, runs
from prepkit.lossless import format as fmt
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import plan as plan_mod

# Images of more tiles than this may go to the batch path, which decodes them on several
# threads (cpu.use_parallel); below it, this path takes them without asking numba its threads.
MAX_TILES = 2 * cpu.MIN_TILES_PER_THREAD - 1

NOT_HERE = -1  # the stream is not one this path decodes (not v2)
MANY_TILES = -2  # more tiles than max_tiles


@njit(nogil=True, cache=True)
def _decode_one(src, max_tiles, windows, window_empty, symbols, planes, ctx_of):
    """(code, pixels, height, width, channels, header flags) of one stream: code 0 when
    decoded, NOT_HERE or a refusal code otherwise (then the pixels are undefined)."""
    starts = np.zeros(1, np.int64)
    stops = np.full(1, src.size, np.int64)
    rows = np.zeros(1, np.int64)
    info = np.zeros((1, hostplan.N_INFO), np.int64)
    nothing = np.empty(0, np.uint8)
    hostplan._read_headers(src, starts, stops, rows, info)
    h, w, c, flags = info[0, hostplan.I_H], info[0, hostplan.I_W], info[0, hostplan.I_C], info[0, hostplan.I_FLAGS]
    if info[0, hostplan.I_ERR] != 0:
        return info[0, hostplan.I_ERR], nothing, h, w, c, flags
    if info[0, hostplan.I_VERSION] != f2.VERSION:
        return NOT_HERE, nothing, h, w, c, flags
    regions = np.zeros((1, 4), np.int64)
    regions[0, 2] = h
    regions[0, 3] = w
    lay = np.empty((1, 7), np.int64)
    totals = np.empty(5, np.int64)
    hostplan._layout(info, regions, False, starts, stops, lay, totals)
    n_items, n_segs, n_tables, n_out = totals[0], totals[1], totals[2], totals[3]
    if n_items > max_tiles:
        return MANY_TILES, nothing, h, w, c, flags
    work = np.empty((n_items, plan_mod.N_COLS), np.int64)
    owner = np.empty(n_items, np.int64)
    segs = np.empty((n_segs, 4), np.int64)
    freq = np.empty((n_tables, 256), np.int32)
    cum = np.empty((n_tables, 257), np.int32)
    packed = np.empty(1, np.uint32)  # (no packed tables: the decoder expands them itself)
    errors = np.zeros(1, np.int64)
    staged = np.zeros(1, np.int64)
    hostplan._validate_fill(src, starts, stops, rows, info, regions, False, lay, work, owner, segs, freq, cum, packed,
                            False, errors, staged)
    if errors[0] != 0:
        return errors[0], nothing, h, w, c, flags
    # The work items point into the stream as staged from byte 0: the stream itself.
    empty = np.zeros(n_tables, np.int64)
    for t in range(n_tables):
        empty[t] = cum[t, 256] == 0
    n_tables_at = np.zeros(n_tables + 1, np.int64)
    cpu_v2._table_counts(work, n_tables, n_tables_at)
    out = np.empty(n_out, np.uint8)
    items = np.arange(n_items)
    codes = np.zeros(n_items, np.int64)
    cpu_v2._decode_strided(src, work, items, 0, 1, out, codes, freq, cum, empty, n_tables_at, windows[0],
                           window_empty[0], ctx_of, symbols[0], symbols[1], planes[0], True)
    for k in range(n_items):
        if codes[k] != 0:
            return codes[k], out, h, w, c, flags
    return 0, out, h, w, c, flags


def decode(data: object) -> np.ndarray | None:
    """The pixels of one whole v2 stream (HxW or HxWxC, as lossless.decode returns them), or
    None when the batch path must decode it: not v2, more tiles than it decodes on one thread
    (cpu.serial_tiles), or refused (that path raises the CodecError). Raises CodecError when data
    is not bytes-like."""
    array = fmt.as_bytes(data).view()
    array.flags.writeable = False  # one specialization: the kernels see read-only input
    symbols, planes, windows, window_empty = cpu_v2._decode_scratch(1)
    code, out, h, w, c, flags = _decode_one(array, MAX_TILES, windows, window_empty, symbols, planes,
                                            cpu_v2.CONTEXT_OF)
    if code == MANY_TILES:
        limit = cpu.serial_tiles()
        if limit > MAX_TILES:
            code, out, h, w, c, flags = _decode_one(array, limit, windows, window_empty, symbols, planes,
                                                    cpu_v2.CONTEXT_OF)
    if code != 0:
        return None
    return out.reshape((h, w) if flags & fmt.FLAG_2D else (h, w, c))


# Last, once every cached function above exists: the modules compiled into _decode_one are
# part of its cache key.
guard_disk_cache(globals(), (fmt, f2, plan_mod, frequencies, hostplan, cpu_v2, med_simd, memops, prefix_simd,
                              rans_avx2, runs),
                 extra=f"avx2={rans_avx2.AVAILABLE}")
