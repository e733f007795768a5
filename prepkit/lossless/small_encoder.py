"""The v2 encoder's short path for images of one tile.

Thumbnails and patches (CIFAR's 32 x 32 images, Tiny ImageNet's 64 x 64, small crops of
scans) are one tile. The general encoder (cpu_v2._encode) spends most of such an image's time
in Python between its compiled steps: about 360 calls per image, 0.4-0.5 ms, several times
the compiled work and twice Pillow's whole PNG encode of a 32 x 32 image (docs/BENCHMARKS.md
"Small images: one thread, one compiled call (stop 58)"). This path runs the same steps in one
compiled call: the tile analysis (cpu_v2._palettes_all, cpu_v2._choose_symbols_all, the
palette candidate's index symbols), then the stream with a table set per plane and the one
with one set for every plane (as format_v2.encoder_tries_one_set has the encoders try for
small images), each with the general encoder's decisions (the palette first guess, tables
counted from the tile's histograms, a coded payload only where its estimate is below the raw
tile, the runs payload where runs.choose keeps it, every tile raw where that is smaller),
and the smaller of the two; a one-channel tile goes to mask_encoder's path first, as in the
general encoder. Where the general encoder would encode again (a tile sure to become a runs
tile that does not) it returns None and the general encoder writes the image: the bytes are always the general encoder's, which tests check against it
and against reference_v2."""

from __future__ import annotations

import numpy as np
from numba import njit

from prepkit.jitcache import guard_disk_cache
from prepkit.lossless import cpu_v2, frequencies, mask_encoder, runs
from prepkit.lossless import format as fmt
from prepkit.lossless import format_v2 as f2
from prepkit.parallel import numba_threads

TSHIFT = 2  # four tables per set: no plane contexts for small images (format_v2.encoder_plane_context)
RUNS_TABLES = f2.runs_sets(1 << TSHIFT) << TSHIFT  # runs.table_set's rows
MAGIC = np.frombuffer(fmt.MAGIC, np.uint8).copy()

# What _one_tile reports.
DONE = 0
NOT_HERE = 1  # more than one tile, or a sure runs tile that does not become one (the general encoder encodes again)


@njit(nogil=True, cache=True, boundscheck=False, inline="always")
def _put_u32(out, pos, value):
    for k in range(4):
        out[pos + k] = (value >> (8 * k)) & 255


@njit(nogil=True, cache=True, boundscheck=False)
def _header(out, h, w, c, tile, flags, n_sets, z):
    """format_v2.pack_header into out[:HEADER_SIZE]."""
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


@njit(nogil=True, cache=True, boundscheck=False)
def _assemble(h, w, c, tile, flags, freq, n_sets, body, length):
    """format_v2.assemble of one tile: header, the packed tables freq, the short tile table
    and the payload body[:length]."""
    tables = np.empty(freq.shape[0] * frequencies.MAX_TABLE_BYTES, np.uint8)
    z = frequencies.pack_into(freq, tables)
    big = length >= f2.SHORT_ONE_BYTE
    out = np.empty(f2.HEADER_SIZE + z + 1 + big + length, np.uint8)
    _header(out, h, w, c, tile, flags, n_sets, z)
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
def _sets(c, n_sets):
    """cpu_v2.default_sets of one tile: plane k in set k, the index plane in set C, clipped."""
    sets = np.empty((1, 5), np.int64)
    for k in range(4):
        sets[0, k] = min(k, n_sets - 1)
    sets[0, cpu_v2.PALETTE_SET] = min(c, n_sets - 1)
    return sets


@njit(nogil=True, cache=True, boundscheck=False)
def _tables(c, choices, keep, pick, sets, n_sets, hist, phist, sym_count):
    """_Counted.tables: the normalised frequency tables of the tile's picked choice when kept
    (all zero otherwise)."""
    n_tables = n_sets << TSHIFT
    counts = np.zeros((1, n_tables, 256), np.int32)
    cpu_v2._count_hist(c, choices, keep, pick, sets, hist, phist, sym_count, counts, np.int64(TSHIFT))
    freq = np.empty((n_tables, 256), np.int64)
    frequencies.normalize_rows_into(counts[0].astype(np.int64), freq)
    return freq


@njit(nogil=True, cache=True, boundscheck=False)
def _estimate(image, tile, choices, pick, sets, min_log2, freq, hist, phist, sym_count):
    """_Counted.estimates of the tile under freq: (payload bytes, its symbols' summed cost)."""
    h, w, c = image.shape
    cost = np.empty(freq.shape, np.int32)
    for t in range(freq.shape[0]):
        for v in range(256):
            cost[t, v] = frequencies.COST_OF_FREQ[freq[t, v]]
    sizes = np.zeros(1, np.int64)
    totals = np.zeros(1, np.int64)
    cpu_v2._estimate_hist(h, w, tile, c, choices, pick, sets, min_log2, cost, sizes, totals, hist, phist, sym_count,
                          np.int64(TSHIFT))
    return sizes[0], totals[0]


@njit(nogil=True, cache=True, boundscheck=False)
def _coder(freq):
    coder = np.empty((freq.shape[0], 256, 2), np.int64)
    cpu_v2._fill_coder(freq, coder)
    return coder


@njit(nogil=True, cache=True, boundscheck=False)
def _finish(image, tile, flags, one_set, min_log2, choices, const_vals, colours, sure_tile, first, pal_size, n_runs,
            kept_syms, kept_ctxs, sym_start, sym_count, syms, hist, phist, psym_start, psyms, tables, words):
    """(status, stream): cpu_v2._encode's finish(one_set) for one tile. sure_tile: the tile is
    sure to become a runs tile (runs.sure); first: its palette candidate is the first guess;
    pal_size: its palette candidate's size before a sure tile's was cleared (0: none), with
    n_runs run symbols in kept_syms[0] and kept_ctxs[0]. NOT_HERE where the general encoder
    would encode again (a sure tile whose runs payload did not pay)."""
    h, w, c = image.shape
    none = np.empty(0, np.uint8)
    _, _, th, tw = cpu_v2._tile_box(np.int64(0), tile, h, w)
    raw_len = 1 + th * tw * c
    keep = np.ones(1, np.bool_)
    keep[0] = not sure_tile
    pick = np.zeros(1, np.bool_)
    sure = np.zeros(1, np.bool_)
    sure[0] = sure_tile
    n_colours = choices[0, cpu_v2.COL_PAL_SIZE]
    n_sets = np.int64(1) if one_set else np.int64(c)
    if first:
        # A first guess with the index plane in set C: the palette payload where its
        # estimate is the smaller; set C stays only then.
        n_sets = np.int64(1) if one_set else np.int64(c + 1)
        sets = _sets(c, n_sets)
        guess = _tables(c, choices, keep, np.ones(1, np.bool_), sets, n_sets, hist, phist, sym_count)
        coded_size, _ = _estimate(image, tile, choices, pick, sets, min_log2, guess, hist, phist, sym_count)
        palette_size, _ = _estimate(image, tile, choices, np.ones(1, np.bool_), sets, min_log2, guess, hist, phist,
                                    sym_count)
        pick[0] = n_colours > 0 and palette_size < coded_size
        if not pick[0]:
            n_sets = np.int64(1) if one_set else np.int64(c)
    sets = _sets(c, n_sets)
    freq = _tables(c, choices, keep, pick, sets, n_sets, hist, phist, sym_count)
    size, total = _estimate(image, tile, choices, pick, sets, min_log2, freq, hist, phist, sym_count)
    keep[0] = size < raw_len and not sure_tile
    if not keep[0]:
        freq[:] = 0  # the tables of no kept tile (this one is written raw, or as a runs tile)
    n_coded = np.int64(0)
    if not sure_tile:
        n_coded = np.int64(c)
        for k in range(c):
            n_coded -= choices[0, 5 + k]
    room = 3 + 2 * c if keep[0] and not pick[0] and n_coded == 0 else max(raw_len, 3 + 2 * c)
    starts = np.zeros(2, np.int64)
    starts[1] = 0 if sure_tile else room
    body = np.empty(room, np.uint8)
    lengths = np.zeros(1, np.int64)
    cost = np.empty(freq.shape, np.int64)  # frequencies.cost_table
    for t in range(freq.shape[0]):
        for v in range(256):
            cost[t, v] = frequencies.COST_OF_FREQ[freq[t, v]]
    totals = np.full(1, total, np.int64)
    cpu_v2._encode_all(image, tile, choices, const_vals, colours, keep, pick, sets, min_log2, _coder(freq), cost, totals,
                       body, starts, lengths, sym_start, sym_count, syms, psym_start, psyms, tables, words, sure,
                       np.int64(TSHIFT))
    payload, length = body, lengths[0]
    if pal_size > 0:
        # cpu_v2._with_runs: the runs payload where runs.choose keeps the tile and it is
        # shorter than the payload above (a sure tile's: the raw one), the runs tables after
        # the others.
        current = np.full(1, raw_len if sure_tile else lengths[0], np.int64)
        fixed = np.full(1, f2.RUNS_HEADER + pal_size * c + 4, np.int64)
        runs_freq = np.zeros((f2.RUN_CONTEXTS, 256), np.int64)
        chosen = runs._choose(kept_syms, kept_ctxs, np.zeros(1, np.int64), np.full(1, n_runs, np.int64), fixed,
                              current, np.full(1, th * tw, np.int64), runs_freq)
        runs_length = np.int64(0)
        if chosen[0]:
            n_tables = n_sets << TSHIFT
            all_freq = np.zeros((n_tables + RUNS_TABLES, 256), np.int64)
            all_freq[:n_tables] = freq
            all_freq[n_tables : n_tables + f2.RUN_CONTEXTS] = runs_freq
            runs_body = np.empty(min(current[0], fixed[0] + 2 * n_runs), np.uint8)
            runs_length = cpu_v2._runs_payload(np.int64(c), pal_size, colours[0], kept_syms[0], kept_ctxs[0], n_runs,
                                               n_sets, np.int64(TSHIFT), _coder(all_freq),
                                               np.empty(cpu_v2.RUNS_CAP, np.int64), runs_body, np.int64(0), current[0])
            if runs_length > 0:
                payload, length, freq = runs_body, runs_length, all_freq
        if sure_tile and runs_length == 0:
            return NOT_HERE, none
    stream = _assemble(h, w, c, tile, flags, freq, freq.shape[0] >> TSHIFT, payload, length)
    # Never larger than the stream of the raw tile (cpu_v2._encode's all_raw): C sets of
    # empty tables, one byte each.
    all_raw = f2.HEADER_SIZE + (c << TSHIFT) + 1 + (raw_len >= f2.SHORT_ONE_BYTE) + raw_len
    if stream.size <= all_raw:
        return DONE, stream
    length = cpu_v2._raw_tile(image, np.int64(0), np.int64(0), th, tw, body, np.int64(0))
    return DONE, _assemble(h, w, c, tile, flags, np.zeros((c << TSHIFT, 256), np.int64), np.int64(c), body, length)


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
    pal_size = choices[0, cpu_v2.COL_PAL_SIZE]
    if c == 1:
        # mask_encoder.stream first, as cpu_v2._encode: a constant tile or a sure runs tile
        runs_freq = np.zeros((f2.RUN_CONTEXTS, 256), np.int64)
        sizes = np.zeros(2, np.int64)
        status, data = mask_encoder._stream(image, tile, choices[:, cpu_v2.COL_PAL_SIZE], colours, constant,
                                            runs_counts, kept_syms, kept_ctxs, runs_freq, sizes)
        if status == mask_encoder.FLAT and data.size <= sizes[1]:
            n_sets = mask_encoder.RUNS_SET + mask_encoder.RUNS_TABLES // mask_encoder.TABLES_PER_SET if pal_size else 1
            _header(data, h, w, c, tile, flags, np.int64(n_sets), sizes[0])
            return DONE, data
    sure = np.zeros(n, np.bool_)
    if pal_size > 0:
        sure[0] = runs.sure(runs_counts[0], np.int64(h * w), np.int64(c))
        if sure[0]:
            choices[0, cpu_v2.COL_PAL_SIZE] = 0
    sym_start = np.zeros(n + 1, np.int64)
    sym_start[1] = h * w * c
    sym_count = np.zeros(n, np.int64)
    syms = np.empty(h * w * c, np.uint8)
    hist = np.empty((n, c << TSHIFT, 256), np.uint16)
    cpu_v2._choose_symbols_all(image, tile, choices, const_vals, planes, constant, sure, n_predictors, sym_start,
                               sym_count, syms, hist, np.int64(TSHIFT))
    n_colours = choices[0, cpu_v2.COL_PAL_SIZE]
    first = n_colours > 0 and choices[0, cpu_v2.COL_PAL_COST] + 8 * n_colours * c < choices[0, cpu_v2.COL_COST]
    psym_start = np.zeros(n + 1, np.int64)
    if first:
        psym_start[1] = h * w
    psyms = np.empty(psym_start[1], np.uint8)
    phist = np.empty((1 if first else 0, 4, 256), np.uint16)
    if first:
        cpu_v2._palette_symbols_all(image, tile, choices, colours, psym_start, psyms, planes, phist)
    status, stream = _finish(image, tile, flags, np.bool_(False), min_log2, choices, const_vals, colours, sure[0], first,
                             pal_size, runs_counts[0], kept_syms, kept_ctxs, sym_start, sym_count, syms, hist, phist,
                             psym_start, psyms, tables, words)
    if status != DONE or (c == 1 and not first):  # one set is the stream written (cpu_v2's one_set_alike)
        return status, stream
    status, other = _finish(image, tile, flags, np.bool_(True), min_log2, choices, const_vals, colours, sure[0], first,
                            pal_size, runs_counts[0], kept_syms, kept_ctxs, sym_start, sym_count, syms, hist, phist,
                            psym_start, psyms, tables, words)
    if status != DONE:
        return status, other
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
guard_disk_cache(globals(), (cpu_v2, f2, fmt, frequencies, mask_encoder, runs))
