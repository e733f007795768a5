"""Host side of the GPU decode path without per-sample Python: numba-validated plans and a
threaded gather straight from the shard memory maps into the staging buffer.

``plan.build`` validates stream by stream in Python (about 130 us per 2048x1024 image) and
the engine then copies the compressed bytes twice (``np.concatenate``, then into pinned
memory). Here, per batch:

1. ``_read_headers`` (numba) parses every header straight from the memory maps;
2. numpy, over the whole batch, checks them against the recorded shapes and sizes the tables;
3. ``_validate_fill`` (numba) validates every tile table (and, for version 2, the frequency
   tables and tile headers) exactly as ``format.read_tile_table`` / ``format_v2.read_stream``
   do, and fills the kernels' work table, the v2 frequency tables and the packed v2 decode
   table the CUDA kernel reads (``cuda_v2.decode_table``);
4. ``gather`` copies the stored bytes (only the tile rows a region touches when regions are
   given) into one destination buffer with several threads (numba copies release the GIL).

A sample numba refuses gets an error code; the refusal is then reported by running the
Python validation on that one sample, so the messages are the existing ones word for word.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from prepkit.errors import CodecError, DecodeError, StoreCorruptError
from prepkit.jitcache import guard_disk_cache
from prepkit.lossless import format as fmt
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import frequencies
from prepkit.lossless import plan as plan_mod
from prepkit.parallel import thread_pool

# Columns of the per-sample header information _read_headers fills.
I_ERR, I_VERSION, I_FLAGS, I_C, I_H, I_W, I_T, I_SETS, I_ZSIZE = range(9)
N_INFO = 9

# Error codes (0 = fine). Below ERR_TABLE: the header is refused (fmt.read_header raises).
ERR_HEADER = 1
ERR_TABLE = 2  # the tile table, the v2 frequency tables or a v2 tile header is refused

ERROR_TEXT = {ERR_HEADER: "invalid header", ERR_TABLE: "invalid tile table or tile header"}


SEPARATE_BYTES = 1 << 16  # plan_buffers reads buffers of this average size or more in place
MIN_SAMPLES_PER_THREAD = 4  # build_plan's validation: fewer samples per thread cost more than they save


_set_tables = njit(inline="always")(f2.set_tables)  # tables per set of a v2 stream with these flags


@njit(nogil=True, cache=True)
def _u16(src, at):
    return np.int64(src[at]) | (np.int64(src[at + 1]) << 8)


@njit(nogil=True, cache=True)
def _u32(src, at):
    return _u16(src, at) | (_u16(src, at + 2) << 16)


@njit(nogil=True, cache=True)
def _shape_ok(h, w, c, t):
    """format.check_shape."""
    if t != 16 and t != 32 and t != 64:
        return False
    if c != 1 and c != 3 and c != 4:
        return False
    if not (1 <= h <= fmt.MAX_SIDE and 1 <= w <= fmt.MAX_SIDE):
        return False
    return h * w <= fmt.MAX_PIXELS


@njit(nogil=True, cache=True)
def _read_headers(src, starts, stops, rows, info):
    """Parse and check the header of every sample in ``rows`` (format.read_header and
    format_v2.read_header, same refusals); info[row] gets the fields or an error code."""
    for r in rows:
        s = starts[r]
        size = stops[r] - s
        info[r, I_ERR] = ERR_HEADER
        if size < fmt.HEADER_SIZE:
            continue
        if src[s] != 80 or src[s + 1] != 75 or src[s + 2] != 76 or src[s + 3] != 76:  # b"PKLL"
            continue
        version = np.int64(src[s + 4])
        flags = np.int64(src[s + 5])
        c = np.int64(src[s + 6])
        w = _u32(src, s + 8)
        h = _u32(src, s + 12)
        t = _u16(src, s + 16)
        n_sets = np.int64(0)
        z = 0
        if version == 1:
            if flags & ~fmt.KNOWN_FLAGS or src[s + 7] != 0 or _u16(src, s + 18) != 0:
                continue
            if not _shape_ok(h, w, c, t):
                continue
            if (flags & fmt.FLAG_2D and c != 1) or (flags & fmt.FLAG_COLOUR and c < 3):
                continue
        elif version == 2:
            if size < f2.HEADER_SIZE:
                continue
            n_sets = np.int64(src[s + 7])
            z = _u32(src, s + 20)
            if flags & ~f2.KNOWN_FLAGS or _u16(src, s + 18) != 0:
                continue
            if not _shape_ok(h, w, c, t):
                continue
            if flags & f2.FLAG_2D and c != 1:
                continue
            if not 1 <= n_sets <= f2.MAX_SETS_PER_CHANNEL * c + 2:  # f2.max_sets
                continue
            if z > (f2.MAX_SETS_PER_CHANNEL * c + 2) * _set_tables(flags) * (1 + 32 + 2 * 256):  # f2.max_tables_size
                continue
        else:
            continue
        info[r, I_ERR] = 0
        info[r, I_VERSION] = version
        info[r, I_FLAGS] = flags
        info[r, I_C] = c
        info[r, I_H] = h
        info[r, I_W] = w
        info[r, I_T] = t
        info[r, I_SETS] = n_sets
        info[r, I_ZSIZE] = z


@njit(nogil=True, cache=True)
def _parse_tables(src, pos, end, n_tables, freq, cum, dec, row, pack):
    """format_v2.parse_tables on src[pos:end] (the same values and refusals), writing tables
    row .. row + n_tables - 1 of freq/cum and, with ``pack``, their packed decode table into
    dec (the GPU path builds it on the device from freq/cum instead: cuda_v2.expand_tables)."""
    length = end - pos
    data = src[pos:end]
    p = np.int64(0)
    present = np.empty(256, np.int64)
    stored = np.zeros(n_tables, np.uint8)  # 1 for a table with symbols (the others' cum is all 0)
    for t in range(n_tables):  # the caller's buffers are reused: clear what this table owns
        freq[row + t, :] = 0
    for t in range(n_tables):
        if p >= length:
            return False
        kind = data[p]
        p += 1
        if kind == f2.TABLE_EMPTY:
            continue
        stored[t] = 1
        n = np.int64(0)
        if kind == f2.TABLE_LIST:
            if p >= length or p + 1 + np.int64(data[p]) + 1 > length:
                return False
            n = np.int64(data[p]) + 1
            for j in range(n):
                present[j] = data[p + 1 + j]
                if j > 0 and present[j] <= present[j - 1]:
                    return False
            p += 1 + n
        elif kind == f2.TABLE_BITMAP:
            if p + 32 > length:
                return False
            for v in range(256):  # branch-free: write every symbol, keep the present ones
                present[n] = v
                n += (data[p + (v >> 3)] >> (v & 7)) & 1
            p += 32
        else:
            return False
        if n == 0:
            return False
        # The varints one after another (parse_tables reads them vectorised, to the same values
        # and refusals): a byte >= 0x80 starts a 2-byte value whose second byte is < 32.
        total = np.int64(0)
        for k in range(n):
            if p >= length:
                return False
            first = np.int64(data[p])
            value = (first & 127) + 1
            if first >= 0x80:
                if p + 1 >= length or data[p + 1] >= 32:
                    return False
                value += np.int64(data[p + 1]) << 7
                p += 2
            else:
                p += 1
            freq[row + t, present[k]] = value
            total += value
        if total != f2.PROB_SCALE:
            return False
    if p != length:
        return False
    for t in range(n_tables):
        if not stored[t]:
            # An empty table: cum all 0, and its decode slots left as they were (flagged
            # through plan.empty; a decoder refuses a tile that draws a symbol from it, whatever
            # the slots hold): zeroing its 16 KiB cost more than decoding a small image (a 32x32
            # stream of raw tiles carries 12 empty tables; docs/BENCHMARKS.md "Small images").
            cum[row + t, :] = 0
            continue
        run = np.int64(0)
        for v in range(256):
            cum[row + t, v] = run
            run += np.int64(freq[row + t, v])
        cum[row + t, 256] = run
        if pack:
            frequencies.expand_into(freq[row + t], cum[row + t],
                                    dec[(row + t) * f2.PROB_SCALE : (row + t + 1) * f2.PROB_SCALE])
    return True


@njit(nogil=True, cache=True)
def _tile_table(src, s, size, at, n, offsets):
    """Read the n + 1 u32 tile offsets at stream offset ``at`` (relative); check the table's
    room, the first and the last offset (format.read_tile_table / format_v2.read_tile_table)."""
    if size < at + 4 * (n + 1):
        return False
    for i in range(n + 1):
        offsets[i] = _u32(src, s + at + 4 * i)
    return offsets[0] == at + 4 * (n + 1) and offsets[n] == size


@njit(nogil=True, cache=True)
def _short_tile_table(src, s, size, at, n, offsets):
    """format_v2.read_tile_table of a short table (FLAG_SHORT_TILE_TABLE): n length bytes at
    ``at``, then the second byte of each length of 128 or more; the same refusals."""
    if size < at + n:
        return False
    start = at + n
    for i in range(n):
        start += src[s + at + i] >> 7
    if size < start:
        return False
    offsets[0] = start
    second = s + at + n
    for i in range(n):
        length = np.int64(src[s + at + i])
        if length >= f2.SHORT_ONE_BYTE:
            high = np.int64(src[second])
            second += 1
            if high == 0:
                return False
            length = (length & 127) | high << 7
        offsets[i + 1] = offsets[i] + length
    return offsets[n] == size


@njit(nogil=True, cache=True)
def _check_v1(h, w, c, t, tiles_x, n, offsets):
    """Every v1 tile length within format.payload_bounds of its pixel count."""
    assert fmt.BLOCK == 16
    i = 0
    for ty in range(n // tiles_x):  # rows and columns: no division per tile
        th = min(t, h - t * ty)
        for tx in range(tiles_x):
            tw = min(t, w - t * tx)
            blocks = (th * tw * c + fmt.BLOCK - 1) >> 4  # fmt.BLOCK == 16
            a_len = (blocks + 1) >> 1
            length = offsets[i + 1] - offsets[i]
            if length < a_len + 2 * blocks or length > a_len + fmt.MAX_BLOCK_BYTES * blocks + 1:
                return False
            i += 1
    return True


@njit(nogil=True, cache=True)
def _bad_channel(chb, n_sets):
    """A channel byte format_v2.read_stream refuses: not 0 and not rANS, an unknown predictor
    (bit 1 names 4 + bits 2-3), or a table set at or above S."""
    if chb & 1 == 0:
        return chb != f2.CH_CONST
    return (chb >> 4) >= n_sets or ((chb >> 2) & 3) + ((chb >> 1) & 1) * 4 >= f2.PREDICTORS


@njit(nogil=True, cache=True)
def _check_v2(src, s, size, h, w, c, t, tiles_x, n, n_sets, g, offsets):
    """The per-tile checks of format_v2.read_stream (modes, lane counts, channel bytes, lengths;
    g: the tables per set)."""
    # Every length first, as read_stream does: with the first and last offsets checked, that
    # puts every tile inside the stream before any tile byte is read (offsets that climb past
    # the end and come back down would otherwise send the reads below outside the buffer).
    for i in range(n):
        if offsets[i + 1] - offsets[i] < 1:
            return False
    for i in range(n):
        length = offsets[i + 1] - offsets[i]
        first = s + offsets[i]
        mode = src[first]
        if mode > f2.LAST_MODE:
            return False
        th = min(t, h - t * (i // tiles_x))
        tw = min(t, w - t * (i % tiles_x))
        if mode == f2.TILE_RAW:
            if length != 1 + th * tw * c:
                return False
            continue
        if mode >= f2.TILE_RUNS:
            # byte 1: the table set; byte 2: P - 1; then the palette (modes 3 to 5), one lane
            # state, words
            if length < f2.RUNS_HEADER or np.int64(src[first + 1]) >= n_sets:
                return False
            if mode != f2.TILE_RUNS and (np.int64(src[first + 2]) + 1 > f2.REPEAT_MAX_COLOURS
                                                or np.int64(src[first + 1]) * g + f2.RUN_CONTEXTS > n_sets * g):
                return False
            raw_palette = (np.int64(src[first + 2]) + 1) * c if mode != f2.TILE_RUNS_PALETTE else 0
            words = length - (f2.RUNS_HEADER + raw_palette + 4)
            if words < 0 or words % 2 != 0:
                return False
            continue
        if mode == f2.TILE_PALETTE:
            # byte 1: lanes (low bits 0); byte 2: P - 1; byte 3: the index plane's rANS channel byte
            if length < 4:
                return False
            info = np.int64(src[first + 1])
            chb = np.int64(src[first + 3])
            lanes_log2 = info >> 4
            if info & 15 or lanes_log2 > f2.MAX_LANES_LOG2 or chb & 1 != f2.CH_RANS or _bad_channel(chb, n_sets):
                return False
            words = length - (4 + (np.int64(src[first + 2]) + 1) * c + (4 << lanes_log2))
            if words < 0 or words % 2 != 0:
                return False
            continue
        if length < 2 + c:
            return False
        info = np.int64(src[first + 1])
        colour = info & 15
        lanes_log2 = info >> 4
        if colour >= (f2.COLOURS if c >= 3 else 1) or lanes_log2 > f2.MAX_LANES_LOG2:
            return False
        n_const = 0
        any_rans = False
        for k in range(c):
            chb = np.int64(src[first + 2 + k])
            ch_mode = chb & 1
            if _bad_channel(chb, n_sets):
                return False
            if ch_mode == f2.CH_CONST:
                n_const += 1
            else:
                any_rans = True
        fixed = 2 + c + n_const + ((4 << lanes_log2) if any_rans else 0)
        if any_rans:
            words = length - fixed
            if words < 0 or words % 2 != 0:
                return False
        elif length != fixed:
            return False
    return True


@njit(nogil=True, cache=True)
def _validate_fill(src, starts, stops, rows, info, rois, crop, lay, work, owner, segs, freq, cum, dec, pack, errors,
                   staged):
    """Validate the tables of every sample in ``rows`` and fill its work items and copy
    segments (lay: the bases _layout computed). A sample's staged bytes are its whole stream
    (at lay[r, L_DST], final offsets), or with ``crop`` the tile rows of its region back to
    back, at offsets relative to the sample's place (``_rebase`` adds it once all sizes are
    known). segs[k] = (offset in src, offset in the staging buffer, length, owner)."""
    most = 0
    for r in rows:  # one scratch table for the largest tile table of the group
        t = info[r, I_T]
        most = max(most, ((info[r, I_H] + t - 1) // t) * ((info[r, I_W] + t - 1) // t))
    offsets = np.empty(most + 1, np.int64)
    for r in rows:
        s = starts[r]
        size = stops[r] - s
        version = info[r, I_VERSION]
        c, h, w, t = info[r, I_C], info[r, I_H], info[r, I_W], info[r, I_T]
        tiles_x = (w + t - 1) // t
        n = ((h + t - 1) // t) * tiles_x
        errors[r] = ERR_TABLE
        if version == 1:
            at = fmt.HEADER_SIZE
            if not _tile_table(src, s, size, at, n, offsets):
                continue
            if not _check_v1(h, w, c, t, tiles_x, n, offsets):
                continue
        else:
            at = f2.HEADER_SIZE + info[r, I_ZSIZE]
            if size < at:
                continue
            n_tables = info[r, I_SETS] * _set_tables(info[r, I_FLAGS])
            if not _parse_tables(src, s + f2.HEADER_SIZE, s + at, n_tables, freq, cum, dec, lay[r, L_TABLE], pack):
                continue
            if info[r, I_FLAGS] & f2.FLAG_SHORT_TILE_TABLE:
                table_ok = _short_tile_table(src, s, size, at, n, offsets)
            else:
                table_ok = _tile_table(src, s, size, at, n, offsets)
            if not table_ok or not _check_v2(
                src, s, size, h, w, c, t, tiles_x, n, info[r, I_SETS], _set_tables(info[r, I_FLAGS]), offsets
            ):
                continue
        errors[r] = 0
        y0, x0, y1, x1 = rois[r, 0], rois[r, 1], rois[r, 2], rois[r, 3]
        ty0, ty1, tx0, tx1 = y0 // t, (y1 - 1) // t, x0 // t, (x1 - 1) // t
        colour = 1 if (version == 1 and info[r, I_FLAGS] & fmt.FLAG_COLOUR) else 0
        wide = 1 if (version == 2 and info[r, I_FLAGS] & f2.FLAG_WIDE_CONTEXT) else 0
        plane_context = 1 if (version == 2 and info[r, I_FLAGS] & f2.FLAG_PLANE_CONTEXT) else 0
        k = lay[r, L_ITEM]
        placed = 0
        dst_base = lay[r, L_DST]
        if not crop:
            g = lay[r, L_SEG]
            segs[g, 0] = s
            segs[g, 1] = dst_base
            segs[g, 2] = size
            segs[g, 3] = r
            placed = size
        for ty in range(ty0, ty1 + 1):
            row_first = ty * tiles_x + tx0
            row_start = offsets[row_first]
            if crop:  # the tiles of one row of the region are contiguous in the stream
                g = lay[r, L_SEG] + ty - ty0
                segs[g, 0] = s + row_start
                segs[g, 1] = placed
                segs[g, 2] = offsets[ty * tiles_x + tx1 + 1] - row_start
                segs[g, 3] = r
            for tx in range(tx0, tx1 + 1):
                i = ty * tiles_x + tx
                base = placed + offsets[i] - row_start if crop else dst_base + offsets[i]
                work[k, plan_mod.SRC_START] = base
                work[k, plan_mod.SRC_END] = base + offsets[i + 1] - offsets[i]
                work[k, plan_mod.TH] = min(t, h - t * ty)
                work[k, plan_mod.TW] = min(t, w - t * tx)
                work[k, plan_mod.CH] = c
                work[k, plan_mod.COLOUR] = colour
                work[k, plan_mod.OUT_BASE] = lay[r, L_OUT]
                work[k, plan_mod.OUT_H] = y1 - y0
                work[k, plan_mod.OUT_W] = x1 - x0
                work[k, plan_mod.OY] = ty * t - y0
                work[k, plan_mod.OX] = tx * t - x0
                work[k, plan_mod.VERSION] = version
                work[k, plan_mod.TABLE_BASE] = lay[r, L_TABLE] if version == 2 else 0
                work[k, plan_mod.WIDE] = wide
                work[k, plan_mod.PLANE] = plane_context
                owner[k] = r
                k += 1
            if crop:
                placed += offsets[ty * tiles_x + tx1 + 1] - row_start
        staged[r] = placed


# Columns of _layout's per-sample bases; totals has the sums of L_ITEM .. L_DST's sizes.
L_ITEM, L_SEG, L_TABLE, L_OUT, L_DST, L_OH, L_OW = range(7)


@njit(nogil=True, cache=True)
def _layout(info, regions, crop, starts, stops, lay, totals):
    """Per sample: where its work items, copy segments, v2 tables, output and (whole
    streams only) staged bytes start, as exclusive prefix sums over the batch."""
    totals[:] = 0
    for r in range(info.shape[0]):
        t = info[r, I_T]
        y0, x0, y1, x1 = regions[r, 0], regions[r, 1], regions[r, 2], regions[r, 3]
        rows_touched = (y1 - 1) // t - y0 // t + 1
        sizes = (rows_touched * ((x1 - 1) // t - x0 // t + 1), rows_touched if crop else 1,
                 info[r, I_SETS] * _set_tables(info[r, I_FLAGS]) if info[r, I_VERSION] == f2.VERSION else 0,
                 (y1 - y0) * (x1 - x0) * info[r, I_C], 0 if crop else stops[r] - starts[r])
        for col in range(5):
            lay[r, col] = totals[col]
            totals[col] += sizes[col]
        lay[r, L_OH] = y1 - y0
        lay[r, L_OW] = x1 - x0


@njit(nogil=True, cache=True)
def _rebase(work, owner, segs, staged):
    """Crop mode: make the work items' and segments' staging offsets absolute; return the
    staged total."""
    dst_base = np.empty(staged.size, np.int64)
    total = 0
    for r in range(staged.size):
        dst_base[r] = total
        total += staged[r]
    for k in range(work.shape[0]):
        b = dst_base[owner[k]]
        work[k, plan_mod.SRC_START] += b
        work[k, plan_mod.SRC_END] += b
    for g in range(segs.shape[0]):
        segs[g, 1] += dst_base[segs[g, 3]]
    return total


@njit(nogil=True, cache=True, boundscheck=False)
def _copy(src, dst, seg_src, seg_dst, seg_cum, lo, hi):
    """Copy bytes [lo, hi) of the concatenation of the segments: segment g is
    src[seg_src[g] : seg_src[g] + len] -> dst[seg_dst[g] : ...], len = seg_cum[g + 1] - seg_cum[g]."""
    g = np.searchsorted(seg_cum, lo, side="right") - 1
    while lo < hi:
        end = min(hi, seg_cum[g + 1])
        skip = lo - seg_cum[g]
        n = end - lo
        a = seg_src[g] + skip
        b = seg_dst[g] + skip
        into = dst[b : b + n]
        out_of = src[a : a + n]
        for j in range(n):  # not a slice assignment: numba's checks overlap and runs at half speed
            into[j] = out_of[j]
        lo = end
        g += 1




def default_threads() -> int:
    """Gather threads when none are asked for: every core up to 4, then half the cores up to 8,
    of this process's share of the machine (its cores divided by LOCAL_WORLD_SIZE, the
    processes torchrun starts per node). On the 16 cores of the H200 machine, 8 threads gathered
    2048x1024 mosaics at 28.4 GB/s against 19.2 with 4 (docs/BENCHMARKS.md, "Second GPU run")."""
    try:
        local_processes = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        local_processes = 1
    cores = max(1, (os.cpu_count() or 1) // local_processes)
    return max(1, min(8, max(min(4, cores), cores // 2)))


def gather(sources: Sequence[tuple[np.ndarray, np.ndarray | None]], seg_src: np.ndarray, seg_dst: np.ndarray,
           seg_len: np.ndarray, dst: np.ndarray, threads: int = 1) -> None:
    """Copy segments into ``dst`` with ``threads`` threads, split by bytes.

    ``sources``: (source array, indices of the segments read from it, None for all); seg_src
    and seg_dst are absolute offsets in the source array and in ``dst``.
    """
    if seg_len.size == 1 and len(sources) == 1:  # one whole sample (lossless.decode): a plain slice copy
        start, at, length = int(seg_src[0]), int(seg_dst[0]), int(seg_len[0])
        dst[at : at + length] = sources[0][0][start : start + length]
        return
    jobs = []
    for array, ids in sources:
        src_at, dst_at, lengths = (seg_src, seg_dst, seg_len) if ids is None else (seg_src[ids], seg_dst[ids], seg_len[ids])
        src_at, dst_at = np.ascontiguousarray(src_at), np.ascontiguousarray(dst_at)
        cum = np.zeros(lengths.size + 1, np.int64)
        np.cumsum(lengths, out=cum[1:])
        total = int(cum[-1])
        parts = max(1, min(threads, total >> 16))  # below 64 KiB a thread costs more than it saves
        cuts = [total * p // parts for p in range(parts + 1)]
        jobs += [(array, src_at, dst_at, cum, cuts[p], cuts[p + 1]) for p in range(parts)]
    if len(jobs) == 1 or threads == 1:
        for job in jobs:
            _copy(job[0], dst, *job[1:])
        return
    futures = [thread_pool("gather", threads).submit(_copy, array, dst, *rest) for array, *rest in jobs]
    for future in futures:
        future.result()


_ITEMSIZE = {np.uint8: 1, np.int32: 4, np.uint32: 4, np.int64: 8}  # the dtypes build_plan takes: no np.dtype() per call


class Workspace:
    """Grow-only host buffers for the plan tables, reused from batch to batch (one per thread)."""

    def __init__(self) -> None:
        self._buffers: dict[str, np.ndarray] = {}

    def take(self, name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A C-contiguous array of ``shape`` over the buffer ``name`` (contents undefined)."""
        need = math.prod(shape) * (_ITEMSIZE.get(dtype) or np.dtype(dtype).itemsize)
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < need:
            buffer = self._buffers[name] = np.empty(max(need, 2 * (0 if buffer is None else buffer.size)), np.uint8)
        return buffer[:need].view(dtype).reshape(shape)


@dataclass
class Sources:
    """Where a batch's stored bytes lie: per sample its source array and byte range in it."""

    arrays: list[np.ndarray]  # memory maps of the shards (or one gathered buffer)
    groups: list[np.ndarray]  # per array: the batch positions whose bytes lie in it
    starts: np.ndarray  # int64 (n,): first byte of each sample in its array
    stops: np.ndarray  # int64 (n,)
    which: np.ndarray  # int64 (n,): index into arrays

    def __post_init__(self) -> None:
        # Read-only views, like single.py's: numba compiles the kernels once for read-only
        # input, not again for the writable arrays (joined buffers, bytearrays) that also come here.
        views = []
        for array in self.arrays:
            view = array.view()
            view.flags.writeable = False
            views.append(view)
        self.arrays = views


def split_by(which: np.ndarray, count: int) -> list[np.ndarray]:
    """For k in range(count), the positions i (ascending) with which[i] == k: one sort, where
    a comparison per array would cost count x len(which)."""
    order = np.argsort(which, kind="stable")
    bounds = np.searchsorted(which[order], np.arange(count + 1))
    return [order[bounds[k] : bounds[k + 1]] for k in range(count)]


def store_sources(store: Any, indices: np.ndarray, field: str) -> Sources:
    """The shard memory maps holding ``indices`` and each sample's byte range in them.

    Local stores whose shards hold their chunks back to back (what prepkit writes) are read
    in place; anything else (remote stores, CRC checking, empty samples, other chunk
    layouts) is first gathered with Store.read_bytes into one buffer.
    """
    from prepkit.decode.engine import gather_bytes

    arrays_meta = store.field_arrays[field]
    count = len(store)
    positions = np.where(indices < 0, indices + count, indices)
    if positions.size and (positions.min() < 0 or positions.max() >= count):
        bad = int(np.flatnonzero((positions < 0) | (positions >= count))[0])
        raise IndexError(f"sample index {int(indices[bad])} out of range for a store of {count} samples")
    ranges = arrays_meta.ranges[positions].astype(np.int64)
    starts, stops = ranges[:, 0], ranges[:, 1]
    capacity = arrays_meta.geometry.capacity
    shard = starts // capacity
    handles = []
    fast = store.remote is None and not store.check_crc and bool((stops > starts).all())
    unique = np.unique(shard) if fast else np.zeros(0, np.int64)
    for number in unique.tolist():
        handle = store._shard(arrays_meta, number)
        if not handle.contiguous:
            fast = False
            break
        handles.append(handle)
    if not fast:
        buffer, offsets, lengths = gather_bytes(store, positions, field)
        return Sources([buffer], [np.arange(positions.size)], offsets, offsets + lengths, np.zeros(positions.size, np.int64))
    which = np.searchsorted(unique, shard)
    local_start = starts - shard * capacity
    local_stop = stops - shard * capacity
    used = np.array([h.used_bytes for h in handles], np.int64)[which]
    beyond = np.flatnonzero(local_stop > used)
    if beyond.size:
        i = int(beyond[0])
        raise StoreCorruptError(f"{handles[int(which[i])].path}: sample bytes [{int(local_start[i])}, "
                                f"{int(local_stop[i])}) lie beyond the stored chunks")
    base = np.array([h.base for h in handles], np.int64)[which]
    groups = [np.arange(positions.size)] if len(handles) == 1 else split_by(which, len(handles))
    return Sources([h.array for h in handles], groups, base + local_start, base + local_stop, which)


def _refusal(sample_bytes: np.ndarray, code: int) -> CodecError:
    """The existing Python validation's error for a sample numba refused."""
    try:
        plan_mod.validate_stream(sample_bytes)
    except CodecError as error:
        return error
    return CodecError(f"{ERROR_TEXT.get(code, f'error code {code}')} (the Python validation accepts it: a bug)")


def read_headers(sources: Sources) -> np.ndarray:
    """int64 (n, N_INFO): every sample's header fields, or an error code in column I_ERR."""
    info = np.zeros((sources.starts.size, N_INFO), np.int64)
    for array, rows in zip(sources.arrays, sources.groups, strict=True):
        _read_headers(array, sources.starts, sources.stops, rows, info)
    return info


def sample_bytes(sources: Sources, position: int) -> np.ndarray:
    """The stored bytes of batch position ``position`` (a view)."""
    array = sources.arrays[int(sources.which[position])]
    return array[int(sources.starts[position]) : int(sources.stops[position])]


def header_error(sources: Sources, info: np.ndarray, position: int) -> CodecError:
    """The CodecError fmt.read_header raises for a header numba refused."""
    try:
        fmt.read_header(sample_bytes(sources, position))
    except CodecError as error:
        return error
    return CodecError(f"{ERROR_TEXT[ERR_HEADER]} (the Python validation accepts it: a bug)")


def build_plan(sources: Sources, info: np.ndarray, rois: np.ndarray | None, staging: np.ndarray | None = None,
               threads: int = 1, timings: dict[str, float] | None = None,
               workspace: Workspace | None = None, pack_tables: bool = True) -> plan_mod.Plan:
    """Validate the tables of every sample (headers already checked: info[:, I_ERR] == 0),
    build the work table and gather the bytes the plan reads into ``staging`` (used when large
    enough, else a fresh buffer). With ``rois`` (int64 (n, 4), checked) only the tile rows each
    region touches are copied. Raises CodecError("image {position}: ...") like plan.build.
    ``timings["gather"]`` and ``["gather_cpu"]`` (when given) grow by the wall and CPU (all
    threads) seconds spent copying. With a ``workspace`` the plan's tables are views of its
    reused buffers (valid until its next use): fresh memory costs a page fault per 4 KiB.
    Without ``pack_tables`` the plan carries no packed v2 decode tables (``plan.dec`` None):
    the decoders expand them from freq/cum (CUDA on the device, the CPU one image at a time
    as it decodes), 16 KiB per table less to write and copy."""
    n = info.shape[0]
    crop = rois is not None
    c = info[:, I_C]
    # Per-call numpy glue is kept small: a single small image (a mask) plans in tens of
    # microseconds, where helpers such as column_stack or array_split cost several each.
    if rois is None:
        regions = np.zeros((n, 4), np.int64)
        regions[:, 2] = info[:, I_H]
        regions[:, 3] = info[:, I_W]
    else:
        regions = np.ascontiguousarray(rois, np.int64)
    lay = np.empty((n, 7), np.int64)
    totals = np.empty(5, np.int64)
    _layout(info, regions, crop, sources.starts, sources.stops, lay, totals)
    total_items, total_segs, total_tables, total_out, total_src = totals.tolist()
    space = workspace if workspace is not None else Workspace()
    work = space.take("work", (total_items, plan_mod.N_COLS), np.int64)
    owner = space.take("owner", (total_items,), np.int64)
    segs = space.take("segs", (total_segs, 4), np.int64)
    freq = space.take("freq", (total_tables, 256), np.int32)
    cum = space.take("cum", (total_tables, 257), np.int32)
    dec = space.take("dec", (max(total_tables * f2.PROB_SCALE if pack_tables else 0, 1),), np.uint32)
    if total_tables == 0:
        dec[0] = 0  # what cuda_v2.decode_table gives for no tables
    errors = np.zeros(n, np.int64)
    staged = np.zeros(n, np.int64)
    # Each sample fills its own rows of the tables (_layout placed them), so groups of samples
    # are validated on several threads (numba releases the GIL).
    jobs = []
    for array, rows in zip(sources.arrays, sources.groups, strict=True):
        parts = max(1, min(threads, rows.size // MIN_SAMPLES_PER_THREAD))
        jobs += [(array, rows)] if parts == 1 else [(array, part) for part in np.array_split(rows, parts)]

    def fill(some: list[tuple[np.ndarray, np.ndarray]]) -> None:
        for array, rows in some:
            _validate_fill(array, sources.starts, sources.stops, rows, info, regions, crop, lay, work, owner, segs,
                           freq, cum, dec, pack_tables, errors, staged)

    if threads == 1 or len(jobs) == 1:
        fill(jobs)
    else:
        shares = [jobs[k::threads] for k in range(min(threads, len(jobs)))]
        for future in [thread_pool("plan", threads).submit(fill, share) for share in shares]:
            future.result()
    if errors.any():
        i = int(np.flatnonzero(errors)[0])
        raise CodecError(f"image {i}: {_refusal(sample_bytes(sources, i), int(errors[i]))}")
    if crop:
        total_src = _rebase(work, owner, segs, staged)
    dst = staging[:total_src] if staging is not None and staging.size >= total_src else np.empty(total_src, np.uint8)
    if len(sources.arrays) == 1:
        groups: list[tuple[np.ndarray, np.ndarray | None]] = [(sources.arrays[0], None)]
    else:
        by_array = split_by(sources.which[segs[:, 3]], len(sources.arrays))
        groups = list(zip(sources.arrays, by_array, strict=True))
    # process_time took 7 us per call on the dev VM: read only when asked for.
    started, cpu = (time.perf_counter(), time.process_time()) if timings is not None else (0.0, 0.0)
    gather(groups, segs[:, 0], segs[:, 1], segs[:, 2], dst, threads)
    if timings is not None:
        timings["gather"] = timings.get("gather", 0.0) + time.perf_counter() - started
        timings["gather_cpu"] = timings.get("gather_cpu", 0.0) + time.process_time() - cpu
    src = dst.view()
    src.flags.writeable = False  # one numba specialization: kernels see read-only input
    shapes = np.empty((n, 3), np.int32)
    shapes[:, 0] = lay[:, L_OH]
    shapes[:, 1] = lay[:, L_OW]
    shapes[:, 2] = c
    flat2d = (info[:, I_FLAGS] & fmt.FLAG_2D) != 0
    out_shapes: list[tuple[int, ...]] = [
        (a, b) if d else (a, b, k) for (a, b, k), d in zip(shapes.tolist(), flat2d.tolist(), strict=True)
    ]
    empty = (cum[:, 256] == 0).astype(np.int32)
    versions = frozenset(info[:, I_VERSION].tolist()) if total_items else frozenset()
    return plan_mod.Plan(src, work, owner, lay[:, L_OUT].copy(), shapes, out_shapes, total_out, freq, cum,
                         np.zeros((0, f2.PROB_SCALE), np.uint8), empty, dec=dec if pack_tables else None,
                         known_versions=versions)


def plan_buffers(buffers: Sequence[object], rois: Sequence[plan_mod.Roi | None] | None = None,
                 staging: np.ndarray | None = None, threads: int = 1, workspace: Workspace | None = None,
                 pack_tables: bool = True) -> plan_mod.Plan:
    """plan.build's contract (same plan, same refusals) on in-memory streams: for tests and
    callers without a store. A single buffer, or buffers of SEPARATE_BYTES or more on
    average, are read in place; smaller ones are joined first (one source array: validating
    each on its own would cost a numba call per buffer). The plan gathers the bytes it reads
    into ``staging`` (see build_plan).

    With a ``workspace`` the joined bytes, the plan's tables and (without ``staging``) the
    gathered bytes live in its reused buffers, valid until its next use: fresh memory costs a
    page fault per 4 KiB, which for large batches took longer than the copies themselves.
    ``pack_tables=False``: no packed v2 decode tables (the decoders expand them)."""
    arrays = [fmt.as_bytes(b) for b in buffers]
    lengths = np.array([a.size for a in arrays], np.int64)
    starts = np.zeros(len(arrays), np.int64)
    if len(arrays) > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    total = int(lengths.sum())
    if len(arrays) == 1 or (len(arrays) > 1 and total >= len(arrays) * SEPARATE_BYTES):
        # Large buffers are read in place: joining them would copy every byte once more.
        positions = np.arange(len(arrays))
        sources = Sources(arrays, [positions[i : i + 1] for i in range(len(arrays))], np.zeros(len(arrays), np.int64),
                          lengths, positions)
    else:
        if workspace is None:
            joined = np.concatenate(arrays) if arrays else np.zeros(0, np.uint8)
        else:
            joined = workspace.take("joined", (total,), np.uint8)
            if arrays:
                np.concatenate(arrays, out=joined)
        sources = Sources([joined], [np.arange(len(arrays))], starts, starts + lengths, np.zeros(len(arrays), np.int64))
    if workspace is not None and staging is None:  # the plan reads at most every byte of every buffer
        staging = workspace.take("staged", (total,), np.uint8)
    info = read_headers(sources)
    if info[:, I_ERR].any():
        i = int(np.flatnonzero(info[:, I_ERR])[0])
        raise CodecError(f"image {i}: {header_error(sources, info, i)}")
    regions = None
    if rois is not None:
        if len(rois) != len(arrays):
            raise ValueError(f"rois must have one entry per buffer: {len(arrays)} buffers, {len(rois)} rois")
        regions = np.zeros((len(arrays), 4), np.int64)
        for i, roi in enumerate(rois):  # per-sample Python here only: this entry is not the hot path
            header = fmt.Header(int(info[i, I_H]), int(info[i, I_W]), int(info[i, I_C]), int(info[i, I_T]),
                                int(info[i, I_FLAGS]), int(info[i, I_VERSION]))
            regions[i] = fmt.normalize_roi(header, roi)
    return build_plan(sources, info, regions, staging, threads, None, workspace, pack_tables)


def store_plan(store: Any, indices: Sequence[int] | np.ndarray, field: str, shapes: np.ndarray,
               rois: np.ndarray | None, staging: np.ndarray | None = None, threads: int | None = None,
               timings: dict[str, float] | None = None, workspace: Workspace | None = None,
               pack_tables: bool = True) -> plan_mod.Plan:
    """The GPU path's host work for a batch of a lossless store: headers checked against the
    recorded ``shapes`` (DecodeError naming the sample), ``rois`` checked (check_rois), tables
    validated, work table built and the stored bytes gathered into ``staging`` (see build_plan
    for ``workspace``)."""
    from prepkit.decode.rois import check_rois

    positions = np.asarray(indices, np.int64).reshape(-1)
    sources = store_sources(store, positions, field)
    info = read_headers(sources)
    recorded = shapes.astype(np.int64).reshape(-1, 3)
    found = info[:, [I_H, I_W, I_C]]
    bad = np.flatnonzero((info[:, I_ERR] != 0) | (found != recorded).any(axis=1))
    if bad.size:
        i = int(bad[0])
        where = f"{store.path}: sample {int(np.asarray(indices).reshape(-1)[i])} ({field})"
        if info[i, I_ERR]:
            raise DecodeError(f"{where}: {header_error(sources, info, i)}")
        raise DecodeError(f"{where}: Expected a stored image of the recorded shape {tuple(recorded[i].tolist())}. "
                          f"Got {tuple(found[i].tolist())}.")
    regions = None if rois is None else check_rois(rois, shapes, [int(v) for v in np.asarray(indices).reshape(-1)])
    return build_plan(sources, info, regions, staging, threads or default_threads(), timings, workspace, pack_tables)


# Last, once every cached function above exists: the helpers compiled into them from other
# modules are part of their cache key.
guard_disk_cache(globals(), (fmt, f2, plan_mod, frequencies))
