"""The v2 encoder's short path for images of one tile.

Thumbnails and patches (CIFAR's 32 x 32 images, Tiny ImageNet's 64 x 64, small crops of
scans) are one tile. The general encoder (cpu_v2._encode) spends most of such an image's time
in Python between its compiled steps: about 360 calls per image, 0.4-0.5 ms, several times
the compiled work and twice Pillow's whole PNG encode of a 32 x 32 image (docs/BENCHMARKS.md
"Small images in one compiled call (stop 58)"). This path runs the same steps in one
compiled call: the tile analysis (cpu_v2._palettes_all, cpu_v2._choose_symbols_all), the
stream with a table set per plane and the one with one set for every plane (as
format_v2.encoder_tries_one_set has the encoders try for small images), each with the general
encoder's decisions (its tables counted from the tile's histograms, a coded payload only
where its estimate is below the raw tile, every tile raw where that is smaller), and the
smaller of the two. Where the general encoder would weigh more (a palette or runs candidate,
or a constant one-channel tile, which mask_encoder writes) it returns None and the general
encoder writes the image: the bytes are always the general encoder's, which tests check
against it and against reference_v2."""

from __future__ import annotations

import numpy as np
from numba import njit

from prepkit.jitcache import guard_disk_cache
from prepkit.lossless import cpu_v2, frequencies
from prepkit.lossless import format as fmt
from prepkit.lossless import format_v2 as f2
from prepkit.parallel import numba_threads

TSHIFT = 2  # four tables per set: no plane contexts for small images (format_v2.encoder_plane_context)
MAGIC = np.frombuffer(fmt.MAGIC, np.uint8).copy()

# What _one_tile reports.
DONE = 0
NOT_HERE = 1  # more than one tile, a palette or runs candidate, or a constant one-channel tile


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _put_u32(out, pos, value):
    for k in range(4):
        out[pos + k] = (value >> (8 * k)) & 255


@njit(nogil=True, cache=True, boundscheck=False)
def _assemble(h, w, c, tile, flags, freq, n_sets, body, length):
    """format_v2.assemble of one tile: header, the packed tables freq, the short tile table
    and the payload body[:length]."""
    tables = np.empty(freq.shape[0] * frequencies.MAX_TABLE_BYTES, np.uint8)
    z = frequencies.pack_into(freq, tables)
    big = length >= f2.SHORT_ONE_BYTE
    out = np.empty(f2.HEADER_SIZE + z + 1 + big + length, np.uint8)
    out[:4] = MAGIC
    out[4] = f2.VERSION
    out[5] = flags
    out[6] = c
    out[7] = n_sets
    _put_u32(out, 8, w)
    _put_u32(out, 12, h)
    out[16] = tile & 255
    out[17] = tile >> 8
    out[18] = 0
    out[19] = 0
    _put_u32(out, 20, z)
    pos = f2.HEADER_SIZE
    out[pos : pos + z] = tables[:z]
    pos += z
    if big:
        out[pos] = 0x80 | (length & 127)
        out[pos + 1] = length >> 7
        pos += 2
    else:
        out[pos] = length
        pos += 1
    out[pos : pos + length] = body[:length]
    return out


@njit(nogil=True, cache=True, boundscheck=False)
def _finish(image, tile, flags, n_sets, min_log2, choices, const_vals, colours, sym_start, sym_count, syms, hist,
            phist, psym_start, psyms, tables, words):
    """cpu_v2._encode's finish() for one tile without palette or runs candidates: the stream
    with n_sets table sets (C: one per plane; 1: every plane in set 0)."""
    h, w, c = image.shape
    _, _, th, tw = cpu_v2._tile_box(np.int64(0), tile, h, w)
    raw_len = 1 + th * tw * c
    keep = np.ones(1, np.bool_)
    pick = np.zeros(1, np.bool_)
    sure = np.zeros(1, np.bool_)
    sets = np.empty((1, 5), np.int64)  # cpu_v2.default_sets
    for k in range(4):
        sets[0, k] = min(k, n_sets - 1)
    sets[0, cpu_v2.PALETTE_SET] = min(c, n_sets - 1)
    n_tables = n_sets << TSHIFT
    counts32 = np.zeros((1, n_tables, 256), np.int32)
    cpu_v2._count_hist(c, choices, keep, pick, sets, hist, phist, sym_count, counts32, np.int64(TSHIFT))
    counts = counts32[0].astype(np.int64)
    freq = np.empty((n_tables, 256), np.int64)
    frequencies.normalize_rows_into(counts, freq)
    cost = np.empty((n_tables, 256), np.int64)  # frequencies.cost_table
    cost32 = np.empty((n_tables, 256), np.int32)
    for t in range(n_tables):
        for v in range(256):
            cost[t, v] = frequencies.COST_OF_FREQ[freq[t, v]]
            cost32[t, v] = cost[t, v]
    sizes = np.zeros(1, np.int64)
    totals = np.zeros(1, np.int64)
    cpu_v2._estimate_hist(h, w, tile, c, choices, pick, sets, min_log2, cost32, sizes, totals, hist, phist, sym_count,
                          np.int64(TSHIFT))
    keep[0] = sizes[0] < raw_len
    if not keep[0]:
        # No tables: the general encoder counts the kept tiles again (none). The estimates it
        # makes again are for the kept tiles' lane counts: this tile is written raw.
        freq[:] = 0
        for t in range(n_tables):
            for v in range(256):
                cost[t, v] = frequencies.COST_OF_FREQ[0]
    coder = np.empty((n_tables, 256, 2), np.int64)
    cpu_v2._fill_coder(freq, coder)
    n_coded = c
    for k in range(c):
        n_coded -= choices[0, 5 + k]
    room = 3 + 2 * c if keep[0] and n_coded == 0 else max(raw_len, 3 + 2 * c)
    starts = np.zeros(2, np.int64)
    starts[1] = room
    body = np.empty(room, np.uint8)
    lengths = np.zeros(1, np.int64)
    cpu_v2._encode_all(image, tile, choices, const_vals, colours, keep, pick, sets, min_log2, coder, cost, totals, body,
                       starts, lengths, sym_start, sym_count, syms, psym_start, psyms, tables, words, sure,
                       np.int64(TSHIFT))
    stream = _assemble(h, w, c, tile, flags, freq, n_sets, body, lengths[0])
    # Never larger than the stream of the raw tile (cpu_v2._encode's all_raw): C sets of
    # empty tables, one byte each.
    all_raw = f2.HEADER_SIZE + (c << TSHIFT) + 1 + (raw_len >= f2.SHORT_ONE_BYTE) + raw_len
    if stream.size <= all_raw:
        return stream
    length = cpu_v2._raw_tile(image, np.int64(0), np.int64(0), th, tw, body, np.int64(0))
    return _assemble(h, w, c, tile, flags, np.zeros((c << TSHIFT, 256), np.int64), np.int64(c), body, length)


@njit(nogil=True, cache=True, boundscheck=False)
def _one_tile(image, tile, flags, n_predictors, min_log2, planes, tables, words):
    """(status, stream) of a prepared image of one tile: DONE and the general encoder's
    stream, or NOT_HERE (and an empty array) where the general encoder must write it.
    planes, tables, words: one chunk of cpu_v2._encode_scratch."""
    h, w, c = image.shape
    none = np.empty(0, np.uint8)
    if h > tile or w > tile:
        return NOT_HERE, none
    n = 1
    choices = np.zeros((n, cpu_v2.N_CHOICE), np.int64)
    const_vals = np.zeros((n, 4), np.int64)
    colours = np.empty((n, cpu_v2.MAX_PALETTE), np.int64)
    constant = np.zeros(n, np.bool_)
    runs_counts = np.zeros(n, np.int64)
    kept_syms = np.empty((n, cpu_v2.RUNS_CAP), np.uint8)
    kept_ctxs = np.empty((n, cpu_v2.RUNS_CAP), np.uint8)
    cpu_v2._palettes_all(image, tile, choices, colours, constant, planes, n_predictors, runs_counts, kept_syms,
                         kept_ctxs, np.bool_(True))
    if choices[0, cpu_v2.COL_PAL_SIZE] > 0 or (c == 1 and constant[0]):
        return NOT_HERE, none
    sym_start = np.zeros(n + 1, np.int64)
    sym_start[1] = h * w * c
    sym_count = np.zeros(n, np.int64)
    syms = np.empty(h * w * c, np.uint8)
    hist = np.empty((n, c << TSHIFT, 256), np.uint16)
    sure = np.zeros(n, np.bool_)
    cpu_v2._choose_symbols_all(image, tile, choices, const_vals, planes, constant, sure, n_predictors, sym_start,
                               sym_count, syms, hist, np.int64(TSHIFT))
    phist = np.empty((0, 4, 256), np.uint16)
    psym_start = np.zeros(n + 1, np.int64)
    psyms = np.empty(0, np.uint8)
    stream = _finish(image, tile, flags, np.int64(c), min_log2, choices, const_vals, colours, sym_start, sym_count,
                     syms, hist, phist, psym_start, psyms, tables, words)
    if c == 1:  # one set is what it wrote (cpu_v2._encode's one_set_alike)
        return DONE, stream
    other = _finish(image, tile, flags, np.int64(1), min_log2, choices, const_vals, colours, sym_start, sym_count,
                    syms, hist, phist, psym_start, psyms, tables, words)
    return DONE, other if other.size < stream.size else stream


def stream(image: np.ndarray, flags: int, tile: int, fast_decode: bool) -> bytes | None:
    """The v2 stream cpu_v2._encode writes for a prepared image (fmt.prepare) of one tile,
    with runs tiles on and first (its defaults), or None where it must write the image
    itself. flags: the stream header's (format_v2.encoder_flags)."""
    scratch = cpu_v2._encode_scratch(1)
    # One thread: the kernels' parallel loops have one tile. And setting it starts numba's
    # threading layer, which the parallel kernels compiled into _one_tile need: a cached
    # caller of a parallel kernel does not start it when it loads (the first call of a fresh
    # process crashed when _one_tile had been compiled against cached kernels).
    with numba_threads(1):
        status, data = _one_tile(image, np.int64(tile), np.int64(flags), np.int64(f2.encoder_predictors(fast_decode)),
                                 np.int64(f2.min_lanes_log2(fast_decode)), scratch.planes, scratch.tables,
                                 scratch.words)
    return data.tobytes() if status == DONE else None


# Last, once every cached function above exists: the modules whose functions and constants
# are compiled into these kernels.
guard_disk_cache(globals(), (cpu_v2, f2, fmt, frequencies))
