"""numba CPU kernels for bitstream version 2: the encoder and the decoder, parallel over tiles.

The same steps as reference_v2.py, written for speed and bit-identical to it. Safety:
plan.build ran format_v2.read_stream on every stream, so tile modes, lane counts, channel
bytes and lengths are consistent before a kernel runs; inside a tile the kernel checks the
lane states, bounds every 16-bit word read by the payload end, flags symbols decoded from
an empty table, and requires every state back at 2^16 with every word read.
"""

from __future__ import annotations

import threading

import numba
import numpy as np
from numba import njit, prange

from prepkit.lossless import format as fmt
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import plan as plan_mod

PROB_BITS = f2.PROB_BITS
STATE_LOW = f2.STATE_LOW
MAX_PLANE = max(fmt.TILE_SIZES) ** 2
MAX_VALUES = 4 * MAX_PLANE
MAX_LANES = 1 << f2.MAX_LANES_LOG2
_local = threading.local()


# ----------------------------------------------------------------------------- shared pieces


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _half(v):
    """floor(s / 2) of v (0..255) read as a signed byte."""
    s = np.int32(v)
    if s >= 128:
        s -= 256
    return s >> 1


@njit(nogil=True, cache=True, boundscheck=False)
def _colour_forward(image, y0, x0, th, tw, colour, planes):
    """Colour-transformed planes (c, th*tw) of one tile, int32 0..255."""
    c = image.shape[2]
    plane = th * tw
    for y in range(th):
        for x in range(tw):
            i = y * tw + x
            for k in range(c):
                planes[k, i] = np.int32(image[y0 + y, x0 + x, k])
            if colour == 1:
                g = planes[1, i]
                planes[0, i] = (planes[0, i] - g) & 255
                planes[2, i] = (planes[2, i] - g) & 255
            elif colour == 2:
                r, g, b = planes[0, i], planes[1, i], planes[2, i]
                co = (r - b) & 255
                t = (b + _half(co)) & 255
                cg = (g - t) & 255
                planes[0, i] = (t + _half(cg)) & 255
                planes[1, i] = cg
                planes[2, i] = co
    return plane


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _zigzag(r):
    s = r - 256 if r >= 128 else r
    return (s << 1) if s >= 0 else (-2 * s - 1)


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _residual(p, k, y, x, tw, predictor):
    """Residual (0..255) of plane k at (y, x) under a predictor; 0 outside the tile."""
    v = p[k, y * tw + x]
    left = p[k, y * tw + x - 1] if x > 0 else 0
    up = p[k, (y - 1) * tw + x] if y > 0 else 0
    ul = p[k, (y - 1) * tw + x - 1] if x > 0 and y > 0 else 0
    if predictor == 0:
        g = 0
    elif predictor == 1:
        g = left
    elif predictor == 2:
        g = up
    else:
        g = left + up - ul
    return (v - g) & 255


# ----------------------------------------------------------------------------- encoder


@njit(nogil=True, cache=True, boundscheck=False)
def _bit_length(v):
    n = 0
    while v:
        n += 1
        v >>= 1
    return n


@njit(nogil=True, cache=True, boundscheck=False)
def _choose(image, y0, x0, th, tw, planes, choice_row, const_vals):
    """Colour transform, predictors and constant flags of one tile (as reference_v2.choose).

    choice_row = [colour, pred_0..pred_3, const_0..const_3]; const_vals[k] the plane value.
    """
    c = image.shape[2]
    n_colours = 3 if c >= 3 else 1
    best_cost = -1
    for colour in range(n_colours):
        _colour_forward(image, y0, x0, th, tw, colour, planes)
        total = 0
        preds = np.zeros(4, np.int64)
        for k in range(c):
            best_p = 0
            best_pc = -1
            for p in range(4):
                cost = 0
                for y in range(th):
                    for x in range(tw):
                        cost += _bit_length(_zigzag(_residual(planes, k, y, x, tw, p)))
                if best_pc < 0 or cost < best_pc:
                    best_pc = cost
                    best_p = p
            preds[k] = best_p
            total += best_pc
        if best_cost < 0 or total < best_cost:
            best_cost = total
            choice_row[0] = colour
            for k in range(c):
                choice_row[1 + k] = preds[k]
                first = planes[k, 0]
                same = 1
                for i in range(th * tw):
                    if planes[k, i] != first:
                        same = 0
                        break
                choice_row[5 + k] = same
                const_vals[k] = first


@njit(nogil=True, cache=True, boundscheck=False)
def _symbols(image, y0, x0, th, tw, choice_row, n_sets, planes, symbols, tables):
    """The tile's rANS symbols and their table indices; returns their count."""
    c = image.shape[2]
    _colour_forward(image, y0, x0, th, tw, choice_row[0], planes)
    n = 0
    for k in range(c):
        if choice_row[5 + k]:
            continue
        s = min(k, n_sets - 1)
        for y in range(th):
            for x in range(tw):
                symbols[n] = _zigzag(_residual(planes, k, y, x, tw, choice_row[1 + k]))
                n += 1
        for i in range(n - th * tw, n):
            u = symbols[i - 64] if i >= 64 else 0
            ctx = (1 if u > 0 else 0) + (1 if u > 2 else 0) + (1 if u > 8 else 0)
            tables[i] = s * 4 + ctx
    return n


@njit(nogil=True, cache=True, boundscheck=False)
def _lanes_log2(estimate):
    estimate_bytes = estimate // 128
    log2 = 2
    while log2 < 5 and (64 << log2) < estimate_bytes:
        log2 += 1
    return log2


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _choose_all(image, tile, choices, const_vals, planes):
    h, w = image.shape[0], image.shape[1]
    tiles_x = (w + tile - 1) // tile
    chunks = planes.shape[0]
    for chunk in prange(chunks):
        for i in range(chunk, choices.shape[0], chunks):
            ty = i // tiles_x
            tx = i - ty * tiles_x
            th = min(tile, h - ty * tile)
            tw = min(tile, w - tx * tile)
            _choose(image, ty * tile, tx * tile, th, tw, planes[chunk], choices[i], const_vals[i])


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _count_all(image, tile, choices, keep, n_sets, counts, planes, symbols, tables):
    """Histograms per (table, symbol), one per chunk (summed by the caller)."""
    h, w = image.shape[0], image.shape[1]
    tiles_x = (w + tile - 1) // tile
    chunks = planes.shape[0]
    for chunk in prange(chunks):
        for i in range(chunk, choices.shape[0], chunks):
            if not keep[i]:
                continue
            ty = i // tiles_x
            tx = i - ty * tiles_x
            th = min(tile, h - ty * tile)
            tw = min(tile, w - tx * tile)
            n = _symbols(image, ty * tile, tx * tile, th, tw, choices[i], n_sets,
                         planes[chunk], symbols[chunk], tables[chunk])
            for j in range(n):
                counts[chunk, tables[chunk, j], symbols[chunk, j]] += 1


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _estimate_all(image, tile, choices, n_sets, cost, sizes, planes, symbols, tables):
    """Estimated coded size in bytes of every tile (reference_v2.estimate)."""
    h, w = image.shape[0], image.shape[1]
    c = image.shape[2]
    tiles_x = (w + tile - 1) // tile
    chunks = planes.shape[0]
    for chunk in prange(chunks):
        for i in range(chunk, choices.shape[0], chunks):
            ty = i // tiles_x
            tx = i - ty * tiles_x
            th = min(tile, h - ty * tile)
            tw = min(tile, w - tx * tile)
            n = _symbols(image, ty * tile, tx * tile, th, tw, choices[i], n_sets,
                         planes[chunk], symbols[chunk], tables[chunk])
            size = 2 + c
            for k in range(c):
                size += choices[i, 5 + k]
            if n:
                total = 0
                for j in range(n):
                    total += cost[tables[chunk, j], symbols[chunk, j]]
                size += (4 << _lanes_log2(total)) + total // 128
            sizes[i] = size


@njit(nogil=True, cache=True, boundscheck=False)
def _encode_tile(image, y0, x0, th, tw, choice, const_vals, n_sets, freq, cum, cost, out, base,
                 planes, symbols, tables, words):
    """Write one tile's payload at out[base:]; return its length (raw when not smaller)."""
    c = image.shape[2]
    raw_len = 1 + th * tw * c
    n = _symbols(image, y0, x0, th, tw, choice, n_sets, planes, symbols, tables)
    pos = base + 2
    for k in range(c):
        if choice[5 + k]:
            out[pos] = 0
        else:
            out[pos] = 1 | (choice[1 + k] << 2) | (min(k, n_sets - 1) << 4)
        pos += 1
    for k in range(c):
        if choice[5 + k]:
            out[pos] = const_vals[k]
            pos += 1
    log2 = 0
    if n:
        total = 0
        for j in range(n):
            total += cost[tables[j], symbols[j]]
        log2 = _lanes_log2(total)
        lanes = 1 << log2
        states = np.empty(MAX_LANES, np.int64)
        for j in range(lanes):
            states[j] = STATE_LOW
        n_words = 0
        for i in range(n - 1, -1, -1):
            t = tables[i]
            s = symbols[i]
            f = np.int64(freq[t, s])
            j = i & (lanes - 1)
            x = states[j]
            if x >= (f << (32 - PROB_BITS)):
                words[n_words] = x & 0xFFFF
                n_words += 1
                x >>= 16
            states[j] = ((x // f) << PROB_BITS) + x % f + cum[t, s]
        if pos + 4 * lanes + 2 * n_words - base >= raw_len:
            return _raw_tile(image, y0, x0, th, tw, out, base)
        for j in range(lanes):
            x = states[j]
            for b in range(4):
                out[pos] = (x >> (8 * b)) & 255
                pos += 1
        for w in range(n_words - 1, -1, -1):
            out[pos] = words[w] & 255
            out[pos + 1] = words[w] >> 8
            pos += 2
    if pos - base >= raw_len:
        return _raw_tile(image, y0, x0, th, tw, out, base)
    out[base] = f2.TILE_CODED
    out[base + 1] = choice[0] | (log2 << 4)
    return pos - base


@njit(nogil=True, cache=True, boundscheck=False)
def _raw_tile(image, y0, x0, th, tw, out, base):
    c = image.shape[2]
    out[base] = f2.TILE_RAW
    pos = base + 1
    for y in range(th):
        for x in range(tw):
            for k in range(c):
                out[pos] = image[y0 + y, x0 + x, k]
                pos += 1
    return pos - base


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _encode_all(image, tile, choices, const_vals, keep, n_sets, freq, cum, cost, out, starts, lengths,
                planes, symbols, tables, words):
    h, w = image.shape[0], image.shape[1]
    tiles_x = (w + tile - 1) // tile
    chunks = planes.shape[0]
    for chunk in prange(chunks):
        for i in range(chunk, choices.shape[0], chunks):
            ty = i // tiles_x
            tx = i - ty * tiles_x
            th = min(tile, h - ty * tile)
            tw = min(tile, w - tx * tile)
            if keep[i]:
                lengths[i] = _encode_tile(image, ty * tile, tx * tile, th, tw, choices[i], const_vals[i],
                                          n_sets, freq, cum, cost, out, starts[i], planes[chunk],
                                          symbols[chunk], tables[chunk], words[chunk])
            else:
                lengths[i] = _raw_tile(image, ty * tile, tx * tile, th, tw, out, starts[i])


def _encode_scratch(chunks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rows = getattr(_local, "encode_v2", None)
    if rows is None or rows[0].shape[0] < chunks:
        rows = (
            np.zeros((chunks, 4, MAX_PLANE), np.int32),
            np.zeros((chunks, MAX_VALUES), np.int64),
            np.zeros((chunks, MAX_VALUES), np.int64),
            np.zeros((chunks, MAX_VALUES), np.int64),
        )
        _local.encode_v2 = rows
    return tuple(r[:chunks] for r in rows)  # type: ignore[return-value]


def encode(image: np.ndarray, tile: int = 64) -> bytes:
    """Encode an HxW or HxWxC uint8 image as a v2 stream, byte-identical to reference_v2."""
    from prepkit.lossless import cpu

    image, flags = fmt.prepare(image, tile)
    flags &= f2.FLAG_2D
    h, w, c = image.shape
    header = fmt.Header(h, w, c, tile, flags, f2.VERSION)
    n = header.n_tiles
    chunks = numba.get_num_threads() if cpu.use_parallel(n) else 1
    planes, symbols, tables, words = _encode_scratch(chunks)
    choices = np.zeros((n, 9), np.int64)
    const_vals = np.zeros((n, 4), np.int64)
    _choose_all(image, tile, choices, const_vals, planes)
    n_sets = c
    keep = np.ones(n, np.bool_)
    freq = _tables(image, tile, choices, keep, n_sets, planes, symbols, tables)
    sizes = np.zeros(n, np.int64)
    _estimate_all(image, tile, choices, n_sets, f2.cost_table(freq), sizes, planes, symbols, tables)
    th, tw = fmt.tile_geometry(header)
    raw_len = 1 + th * tw * c
    keep = sizes < raw_len
    if not keep.all():
        freq = _tables(image, tile, choices, keep, n_sets, planes, symbols, tables)
    cum = np.zeros((freq.shape[0], 257), np.int64)
    cum[:, 1:] = np.cumsum(freq, axis=1)
    # A coded tile is written only while smaller than raw: raw_len bounds every payload.
    # (the tile header is written first: tiny tiles get room for it too)
    starts = np.concatenate([[0], np.cumsum(np.maximum(raw_len, 3 + 2 * c))]).astype(np.int64)
    scratch = np.empty(int(starts[-1]), np.uint8)
    lengths = np.zeros(n, np.int64)
    _encode_all(image, tile, choices, const_vals, keep, n_sets, freq.astype(np.int64), cum,
                f2.cost_table(freq), scratch, starts, lengths, planes, symbols, tables, words)
    payloads = [scratch[starts[i] : starts[i] + lengths[i]].tobytes() for i in range(n)]
    stream = f2.assemble(header, freq, payloads)
    n_tables = c * f2.CONTEXTS
    all_raw = f2.HEADER_SIZE + n_tables + header.table_size + int(raw_len.sum())
    if len(stream) <= all_raw:
        return stream
    keep[:] = False
    _encode_all(image, tile, choices, const_vals, keep, n_sets, freq.astype(np.int64), cum,
                f2.cost_table(freq), scratch, starts, lengths, planes, symbols, tables, words)
    payloads = [scratch[starts[i] : starts[i] + lengths[i]].tobytes() for i in range(n)]
    return f2.assemble(header, np.zeros((n_tables, 256), np.int32), payloads)


def _tables(image: np.ndarray, tile: int, choices: np.ndarray, keep: np.ndarray, n_sets: int,
            planes: np.ndarray, symbols: np.ndarray, tables: np.ndarray) -> np.ndarray:
    counts = np.zeros((planes.shape[0], n_sets * f2.CONTEXTS, 256), np.int64)
    _count_all(image, tile, choices, keep, n_sets, counts, planes, symbols, tables)
    return np.stack([f2.normalize(row) for row in counts.sum(axis=0)])


# ----------------------------------------------------------------------------- decoder

# Context of a symbol from the symbol 64 positions earlier: (u > 0) + (u > 2) + (u > 8).
CONTEXT_OF = np.array([(u > 0) + (u > 2) + (u > 8) for u in range(256)], np.int64)


def decode_table(plan: plan_mod.Plan) -> np.ndarray:
    """uint32 (n_tables, 4096): slot -> symbol | (f - 1) << 8 | (slot - cum) << 20, one load
    per decoded symbol (empty tables: all 0, flagged through plan.empty)."""
    if plan.dec is not None:
        return plan.dec[: plan.freq.shape[0] * f2.PROB_SCALE].reshape(-1, f2.PROB_SCALE)
    lut = plan.lut.astype(np.int64)
    f = np.take_along_axis(plan.freq.astype(np.int64), lut, axis=1)
    cum = np.take_along_axis(plan.cum.astype(np.int64), lut, axis=1)
    bias = np.arange(f2.PROB_SCALE, dtype=np.int64)[None, :] - cum
    packed = lut | (np.maximum(f - 1, 0) << 8) | (np.where(f > 0, bias, 0) << 20)
    return packed.astype(np.uint32)


@njit(nogil=True, cache=True, boundscheck=False)
def _rans(src, pos, end, start, c, plane, base, lanes, dec, empty, ctx_of, symbols, states):
    """Decode the tile's n_rans * plane symbols into symbols[]; return an error code.

    Branch-free renormalisation: every step loads the next word (clamped inside the tile's
    payload, which has at least 2 + C bytes) and keeps it only when the state needs it.
    """
    mask = lanes - 1
    bad = np.int64(0)
    over = np.int64(0)
    i = 0
    last = end - 2
    for k in range(c):
        chb = np.int64(src[start + 2 + k])
        if chb == 0:
            continue
        tset = base + (chb >> 4) * 4
        for _ in range(plane):
            u = symbols[i - 64] if i >= 64 else 0
            t = tset + ctx_of[u]
            bad |= empty[t]
            j = i & mask
            x = states[j]
            e = np.int64(dec[t, x & 4095])
            x = ((e >> 8) & 4095) * (x >> PROB_BITS) + (x >> PROB_BITS) + (e >> 20)
            need = np.int64(x < STATE_LOW)
            at = min(pos, last)
            word = np.int64(src[at]) | (np.int64(src[at + 1]) << 8)
            over |= need & np.int64(pos > last)
            x = ((x << (16 * need)) | (word * need))
            pos += 2 * need
            states[j] = x
            symbols[i] = e & 255
            i += 1
    if over:
        return plan_mod.ERR_WORDS
    if bad:
        return plan_mod.ERR_TABLE
    if pos != end:
        return plan_mod.ERR_WORDS
    for j in range(lanes):
        if states[j] != STATE_LOW:
            return plan_mod.ERR_STATE
    return 0


@njit(nogil=True, cache=True, boundscheck=False)
def _decode_item(src, item, out, dec, empty, ctx_of, symbols, planes):
    """Decode one v2 work item (plan.py columns) into the flat output; return an error code."""
    start, end = item[0], item[1]
    th, tw, c = item[2], item[3], item[4]
    out_base, out_h, out_w, oy, ox = item[6], item[7], item[8], item[9], item[10]
    base = item[12]
    plane = th * tw
    ya, yb = max(0, -oy), min(th, out_h - oy)
    xa, xb = max(0, -ox), min(tw, out_w - ox)
    if src[start] == f2.TILE_RAW:
        for y in range(ya, yb):
            s0 = start + 1 + (y * tw + xa) * c
            d0 = out_base + ((oy + y) * out_w + ox + xa) * c
            line = out[d0 : d0 + (xb - xa) * c]
            raw = src[s0 : s0 + (xb - xa) * c]
            for j in range((xb - xa) * c):
                line[j] = raw[j]
        return 0
    info = np.int64(src[start + 1])
    colour = info & 15
    lanes = np.int64(1) << (info >> 4)
    pos = start + 2 + c
    n_rans = 0
    for k in range(c):
        if src[start + 2 + k] == 0:
            v = src[pos]
            pos += 1
            row = planes[k, :plane]
            for q in range(plane):
                row[q] = v
        else:
            n_rans += 1
    if n_rans:
        states = np.empty(MAX_LANES, np.int64)
        for j in range(lanes):
            value = np.int64(src[pos]) | (np.int64(src[pos + 1]) << 8) | (np.int64(src[pos + 2]) << 16) | (
                np.int64(src[pos + 3]) << 24)
            if value < STATE_LOW:
                return plan_mod.ERR_STATE
            states[j] = value
            pos += 4
        err = _rans(src, pos, end, start, c, plane, base, lanes, dec, empty, ctx_of, symbols, states)
        if err:
            return err
        # Residuals -> planes: undo zig-zag, then the predictor's prefix sums (uint8 wraps mod 256).
        i = 0
        for k in range(c):
            chb = np.int64(src[start + 2 + k])
            if chb == 0:
                continue
            p = (chb >> 2) & 3
            row = planes[k, :plane]
            zs = symbols[i : i + plane]
            for q in range(plane):
                z = zs[q]
                row[q] = (z >> 1) ^ -(z & 1)
            i += plane
            if p == 1 or p == 3:
                for y in range(th):
                    line = row[y * tw : y * tw + tw]
                    run = np.uint8(0)
                    for x in range(tw):
                        run += line[x]
                        line[x] = run
            if p == 2 or p == 3:
                for y in range(1, th):
                    cur = row[y * tw : y * tw + tw]
                    above = row[(y - 1) * tw : y * tw]
                    for x in range(tw):
                        cur[x] += above[x]
    # Inverse colour transform and the interleaved copy of the requested region.
    width = xb - xa
    for y in range(ya, yb):
        d = out_base + ((oy + y) * out_w + ox + xa) * c
        line = out[d : d + width * c]
        q0 = y * tw + xa
        p0 = planes[0, q0 : q0 + width]
        if c == 1:
            for x in range(width):
                line[x] = p0[x]
            continue
        p1 = planes[1, q0 : q0 + width]
        p2 = planes[2, q0 : q0 + width]
        p3 = planes[3, q0 : q0 + width]
        if colour == 0:
            for x in range(width):
                line[c * x] = p0[x]
                line[c * x + 1] = p1[x]
                line[c * x + 2] = p2[x]
        elif colour == 1:
            for x in range(width):
                g = p1[x]
                line[c * x] = p0[x] + g
                line[c * x + 1] = g
                line[c * x + 2] = p2[x] + g
        else:
            for x in range(width):
                cg = p1[x]
                co = p2[x]
                t = np.uint8(p0[x] - np.uint8(np.int8(cg) >> 1))
                g = np.uint8(cg + t)
                b = np.uint8(t - np.uint8(np.int8(co) >> 1))
                line[c * x] = b + co
                line[c * x + 1] = g
                line[c * x + 2] = b
        if c == 4:
            for x in range(width):
                line[4 * x + 3] = p3[x]
    return 0


@njit(parallel=True, nogil=True, cache=True, boundscheck=False)
def _decode_items(src, work, items, out, errors, dec, empty, ctx_of, symbols, planes):
    chunks = symbols.shape[0]
    for chunk in prange(chunks):
        for j in range(chunk, items.shape[0], chunks):
            i = items[j]
            errors[i] = _decode_item(src, work[i], out, dec, empty, ctx_of, symbols[chunk], planes[chunk])


@njit(nogil=True, cache=True, boundscheck=False)
def _decode_items_serial(src, work, items, out, errors, dec, empty, ctx_of, symbols, planes):
    for j in range(items.shape[0]):
        i = items[j]
        errors[i] = _decode_item(src, work[i], out, dec, empty, ctx_of, symbols[0], planes[0])


def _decode_scratch(chunks: int) -> tuple[np.ndarray, np.ndarray]:
    rows = getattr(_local, "decode_v2", None)
    if rows is None or rows[0].shape[0] < chunks:
        rows = (np.zeros((chunks, MAX_VALUES), np.int64), np.zeros((chunks, 4, MAX_PLANE), np.uint8))
        _local.decode_v2 = rows
    return rows[0][:chunks], rows[1][:chunks]


def decode_items(plan: plan_mod.Plan, items: np.ndarray, out: np.ndarray, errors: np.ndarray) -> None:
    """Decode the v2 work items `items` (indices into plan.work) into out; codes into errors."""
    from prepkit.lossless import cpu

    if items.size == 0:
        return
    dec = decode_table(plan)
    empty = plan.empty.astype(np.int64)
    if cpu.use_parallel(items.size):
        symbols, planes = _decode_scratch(numba.get_num_threads())
        _decode_items(plan.src, plan.work, items, out, errors, dec, empty, CONTEXT_OF, symbols, planes)
    else:
        symbols, planes = _decode_scratch(1)
        _decode_items_serial(plan.src, plan.work, items, out, errors, dec, empty, CONTEXT_OF, symbols, planes)
