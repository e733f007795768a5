"""The v2 encoder in one compiled call: images of up to MAX_TILES (256) tiles.

Thumbnails, patches, crops and photographs up to about a megapixel (CIFAR's 32 x 32 images,
Tiny ImageNet's 64 x 64, STL-10's 96 x 96, 224 x 224 crops, ImageNet's 500 x 375 photographs:
1 to 256 tiles of 64). The general encoder (cpu_v2._encode) spent much of such an image's time
in Python between its compiled steps: about 360 calls per image, longer than Pillow's whole
PNG encode of a 32 x 32 image (docs/BENCHMARKS.md "Small images: one thread, one compiled call
(stop 58)"). This path runs the same steps in one compiled call: the tile analysis
(cpu_v2._palettes_all, cpu_v2._choose_symbols_all, the palette candidates' index symbols),
then the stream with a table set per plane, with the general encoder's decisions (the palette
first guess, tables counted from the tiles' histograms, a coded payload only where its
estimate is below the raw tile, eight tables per set where plane contexts are tried and pay,
else the choices again with four, table sets per tile class from table_sets.MIN_TILES tiles
(table_sets._propose_compiled), the runs payloads where runs.choose keeps them, every tile raw
where that is smaller); up to four tiles also the stream with one set for every plane, and
the smaller of the two (format_v2.encoder_tries_one_set). A one-channel image goes to
mask_encoder's path first, as in the general encoder. The tiles' kernels run on numba's
threads where cpu.use_parallel says so, as the general encoder's do. Where the general
encoder would encode again (a tile sure to become a runs tile that does not) it returns None
and the general encoder writes the image: the bytes are always the general encoder's, which
tests check against it and against reference_v2."""

from __future__ import annotations

import numba
import numpy as np
from numba import njit

from prepkit.jitcache import guard_disk_cache
from prepkit.lossless import cpu_v2, frequencies, mask_encoder, runs, table_sets
from prepkit.lossless import format as fmt
from prepkit.lossless import format_v2 as f2
from prepkit.parallel import numba_threads

# runs.table_set's rows with four and with eight tables per set (tshift 2 and 3)
RUNS_TABLES_4 = f2.runs_sets(4) << 2
RUNS_TABLES_8 = f2.runs_sets(8) << 3
MAGIC = np.frombuffer(fmt.MAGIC, np.uint8).copy()

# What _all_tiles and _finish report.
DONE = 0
NOT_HERE = 1  # a sure runs tile that does not become one (the general encoder encodes again)
FOLD = 2  # (_finish) plane contexts do not pay: the stream again with four tables per set


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
def _assemble(h, w, c, tile, flags, freq, n_sets, body, starts, lengths, runs_body, runs_starts, runs_lengths):
    """format_v2.assemble (cpu_v2._assemble): header, the packed tables freq, the short tile
    table, then every tile's payload: its runs payload where runs_lengths[i] > 0, else
    body[starts[i]:][:lengths[i]]."""
    n = lengths.size
    final = np.where(runs_lengths > 0, runs_lengths, lengths)
    tables = np.empty(freq.shape[0] * frequencies.MAX_TABLE_BYTES, np.uint8)
    z = frequencies.pack_into(freq, tables)
    big = 0
    for i in range(n):
        big += final[i] >= f2.SHORT_ONE_BYTE
    out = np.empty(f2.HEADER_SIZE + z + n + big + final.sum(), np.uint8)
    _header(out, h, w, c, tile, flags, n_sets, z)
    pos = f2.HEADER_SIZE
    out[pos : pos + z] = tables[:z]
    pos = mask_encoder._tile_table(final, out, pos + z)
    for i in range(n):
        if runs_lengths[i] > 0:
            out[pos : pos + final[i]] = runs_body[runs_starts[i] : runs_starts[i] + final[i]]
        else:
            out[pos : pos + final[i]] = body[starts[i] : starts[i] + final[i]]
        pos += final[i]
    return out


@njit(nogil=True, cache=True, boundscheck=False)
def _sets(n, c, n_sets):
    """cpu_v2.default_sets: plane k in set k, index planes in set C, clipped to n_sets - 1."""
    sets = np.empty((n, 5), np.int64)
    for i in range(n):
        for k in range(4):
            sets[i, k] = min(k, n_sets - 1)
        sets[i, cpu_v2.PALETTE_SET] = min(c, n_sets - 1)
    return sets


@njit(nogil=True, cache=True, boundscheck=False)
def _counts(c, choices, keep, pick, sets, n_sets, hist, phist, sym_count, tshift):
    """_Counted.counts: (n_sets << tshift, 256) int64 counts of the kept tiles' picked choices."""
    counts = np.zeros((1, n_sets << tshift, 256), np.int32)
    cpu_v2._count_hist(c, choices, keep, pick, sets, hist, phist, sym_count, counts, tshift)
    return counts[0].astype(np.int64)


@njit(nogil=True, cache=True, boundscheck=False)
def _normalized(counts):
    freq = np.empty(counts.shape, np.int64)
    frequencies.normalize_rows_into(counts, freq)
    return freq


@njit(nogil=True, cache=True, boundscheck=False)
def _cost_table(freq):
    """frequencies.cost_table: int64 1/16 bits of each (table, symbol)."""
    cost = np.empty(freq.shape, np.int64)
    for t in range(freq.shape[0]):
        for v in range(256):
            cost[t, v] = frequencies.COST_OF_FREQ[freq[t, v]]
    return cost


@njit(nogil=True, cache=True, boundscheck=False)
def _estimates(image, tile, choices, pick, sets, min_log2, freq, hist, phist, sym_count, tshift):
    """_Counted.estimates of every tile under freq: (payload bytes, the symbols' summed costs)."""
    h, w, c = image.shape
    n = choices.shape[0]
    cost = _cost_table(freq).astype(np.int32)  # (_Counted.estimates' cast)
    sizes = np.zeros(n, np.int64)
    totals = np.zeros(n, np.int64)
    cpu_v2._estimate_hist(h, w, tile, c, choices, pick, sets, min_log2, cost, sizes, totals, hist, phist, sym_count,
                          tshift)
    return sizes, totals


@njit(nogil=True, cache=True, boundscheck=False)
def _coder(freq):
    coder = np.empty((freq.shape[0], 256, 2), np.int64)
    cpu_v2._fill_coder(freq, coder)
    return coder


@njit(nogil=True, cache=True, boundscheck=False)
def _overhead(sizes, totals, keep):
    """The kept tiles' bytes besides their symbols, from the estimates."""
    out = np.int64(0)
    for i in range(sizes.size):
        if keep[i]:
            out += sizes[i] - totals[i] // 128
    return out


@njit(nogil=True, cache=True, boundscheck=False)
def _with_table_sets(image, tile, choices, keep, pick, sets, n_sets, freq, sizes, totals, counts, min_log2, hist,
                     phist, sym_count, tshift):
    """cpu_v2._with_table_sets: (sets, n_sets, freq, totals, counts) with the proposed table
    sets per tile class where the stream's measure is smaller, else those given."""
    c = image.shape[2]
    n = choices.shape[0]
    planes = np.zeros((n, 5), np.bool_)
    m = 0
    for i in range(n):
        for k in range(c):
            planes[i, k] = keep[i] and not pick[i] and choices[i, 5 + k] == 0
            m += planes[i, k]
        planes[i, cpu_v2.PALETTE_SET] = keep[i] and pick[i]
        m += planes[i, cpu_v2.PALETTE_SET]
    if m < 2:
        return sets, n_sets, freq, totals, counts
    tile_of = np.empty(m, np.int64)
    plane_of = np.empty(m, np.int64)
    now = np.empty(m, np.int64)
    e = 0
    for i in range(n):  # np.nonzero's order: tiles, then planes
        for k in range(5):
            if planes[i, k]:
                tile_of[e], plane_of[e], now[e] = i, k, sets[i, k]
                e += 1
    starts, columns, entries = table_sets._entries(hist, phist, tile_of, plane_of, np.int64(1) << tshift,
                                                   np.int64(cpu_v2.PALETTE_SET))
    # (propose_compiled's sample: np.linspace(0, m - 1, m) is 0 .. m - 1 while m <= SAMPLE, as
    # applies() makes sure)
    proposal, n_proposed, changed = table_sets._propose_compiled(
        starts, columns, entries, np.int64(256) << tshift, now, n_sets,
        np.int64(f2.MAX_SETS_PER_CHANNEL * c), np.arange(m))
    if not changed:
        return sets, n_sets, freq, totals, counts
    proposed = np.zeros_like(sets)
    for e in range(m):
        proposed[tile_of[e], plane_of[e]] = proposal[e]
    proposed_counts = _counts(c, choices, keep, pick, proposed, n_proposed, hist, phist, sym_count, tshift)
    proposed_freq = _normalized(proposed_counts)
    proposed_sizes, proposed_totals = _estimates(image, tile, choices, pick, proposed, min_log2, proposed_freq, hist,
                                                 phist, sym_count, tshift)
    before = table_sets.stream_bytes_compiled(_overhead(sizes, totals, keep), counts, freq)
    after = table_sets.stream_bytes_compiled(_overhead(proposed_sizes, proposed_totals, keep), proposed_counts,
                                             proposed_freq)
    if after < before:
        return proposed, n_proposed, proposed_freq, proposed_totals, proposed_counts
    return sets, n_sets, freq, totals, counts


@njit(nogil=True, cache=True, boundscheck=False)
def _folded(hist, c):
    """_Counted.folded's histograms: each plane's eight rows added in pairs (plane bit 0 and 1)."""
    n = hist.shape[0]
    out = np.empty((n, c << 2, 256), np.uint16)
    for i in range(n):
        for k in range(c):
            for ctx in range(f2.CONTEXTS):
                for v in range(256):
                    out[i, (k << 2) + ctx, v] = hist[i, (k << 3) + ctx, v] + hist[i, (k << 3) + f2.CONTEXTS + ctx, v]
    return out


@njit(nogil=True, cache=True, boundscheck=False)
def _finish(image, tile, flags, one_set, splits, tshift, min_log2, choices, const_vals, colours, sure, first, pal_sizes,
            runs_counts, kept_syms, kept_ctxs, sym_start, sym_count, syms, hist, phist, psym_start, psyms, tables, words):
    """(status, stream, n_sets): cpu_v2._encode's finish(one_set) with 1 << tshift tables per
    set, and its table sets besides the runs tables (cpu_v2's one_set_alike reads them).
    splits: table sets per tile class are tried (table_sets.applies). sure: the tiles sure to become runs tiles
    (runs.sure); first: the palette candidates that are the first guess; pal_sizes: the
    palette candidates' sizes before the sure tiles' were cleared (0: none), their run symbols
    in kept_syms and kept_ctxs. NOT_HERE where the general encoder would encode again (a sure
    tile whose runs payload did not pay); FOLD where eight tables per set do not pay
    (table_sets.plane_contexts_pay): the caller finishes again with the histograms folded."""
    h, w, c = image.shape
    n = choices.shape[0]
    none = np.empty(0, np.uint8)
    raw_len = np.empty(n, np.int64)
    pixels = np.empty(n, np.int64)
    for i in range(n):
        _, _, th, tw = cpu_v2._tile_box(np.int64(i), tile, h, w)
        pixels[i] = th * tw
        raw_len[i] = 1 + th * tw * c
    keep = ~sure
    pick = np.zeros(n, np.bool_)
    has_palette = choices[:, cpu_v2.COL_PAL_SIZE] > 0
    n_sets = np.int64(1) if one_set else np.int64(c)
    if first.any():
        # A first guess with the index planes in set C: each candidate takes the palette
        # payload where its estimate is the smaller; set C stays only if one does.
        n_sets = np.int64(1) if one_set else np.int64(c + 1)
        sets = _sets(n, c, n_sets)
        guess = _normalized(_counts(c, choices, keep, first, sets, n_sets, hist, phist, sym_count, tshift))
        coded_size, _ = _estimates(image, tile, choices, pick, sets, min_log2, guess, hist, phist, sym_count, tshift)
        palette_size, _ = _estimates(image, tile, choices, has_palette, sets, min_log2, guess, hist, phist, sym_count,
                                     tshift)
        pick = has_palette & (palette_size < coded_size)
        if not pick.any():
            n_sets = np.int64(1) if one_set else np.int64(c)
    sets = _sets(n, c, n_sets)
    counts = _counts(c, choices, keep, pick, sets, n_sets, hist, phist, sym_count, tshift)
    freq = _normalized(counts)
    sizes, totals = _estimates(image, tile, choices, pick, sets, min_log2, freq, hist, phist, sym_count, tshift)
    keep = (sizes < raw_len) & ~sure
    if not keep.all():
        counts = _counts(c, choices, keep, pick, sets, n_sets, hist, phist, sym_count, tshift)
        freq = _normalized(counts)
        sizes, totals = _estimates(image, tile, choices, pick, sets, min_log2, freq, hist, phist, sym_count, tshift)
    splits = splits and not one_set
    # Plane contexts weighed before the table-set proposal too, and after it (as cpu_v2).
    if tshift == 3 and splits and not table_sets.plane_contexts_pay_compiled(counts, freq):
        return FOLD, none, n_sets
    if splits:
        sets, n_sets, freq, totals, counts = _with_table_sets(image, tile, choices, keep, pick, sets, n_sets, freq,
                                                              sizes, totals, counts, min_log2, hist, phist, sym_count,
                                                              tshift)
    if tshift == 3 and not table_sets.plane_contexts_pay_compiled(counts, freq):
        return FOLD, none, n_sets
    starts = np.zeros(n + 1, np.int64)
    for i in range(n):
        n_coded = 0
        if not sure[i]:
            n_coded = c
            for k in range(c):
                n_coded -= choices[i, 5 + k]
        room = 3 + 2 * c if keep[i] and not pick[i] and n_coded == 0 else max(raw_len[i], 3 + 2 * c)
        starts[i + 1] = starts[i] + (0 if sure[i] else room)
    body = np.empty(starts[n], np.uint8)
    lengths = np.zeros(n, np.int64)
    cpu_v2._encode_all(image, tile, choices, const_vals, colours, keep, pick, sets, min_log2, _coder(freq),
                       _cost_table(freq), totals, body, starts, lengths, sym_start, sym_count, syms, psym_start, psyms,
                       tables, words, sure, tshift)
    runs_lengths = np.zeros(n, np.int64)
    runs_starts = np.zeros(n, np.int64)
    runs_body = np.empty(0, np.uint8)
    n_cands = 0
    for i in range(n):
        n_cands += pal_sizes[i] > 0
    if n_cands:
        # cpu_v2._with_runs: runs payloads where runs.choose keeps a candidate and its payload
        # is shorter than the one above (a sure tile's: the raw one); the runs tables after
        # the others.
        cands = np.flatnonzero(pal_sizes > 0)
        current = np.empty(n_cands, np.int64)
        fixed = np.empty(n_cands, np.int64)
        heads = np.empty(n_cands, np.int64)
        for q in range(n_cands):
            i = cands[q]
            current[q] = raw_len[i] if sure[i] else lengths[i]
            fixed[q] = runs.fixed_bytes(pal_sizes[i], c)
            heads[q] = runs.palette_head(pal_sizes[i], c)
        runs_freq = np.zeros((f2.RUN_CONTEXTS, 256), np.int64)
        chosen, coded = runs._choose(kept_syms, kept_ctxs, cands, runs_counts[cands], heads, fixed, current,
                                     pixels[cands], runs_freq)
        if chosen.any():
            n_tables = n_sets << tshift
            all_freq = np.zeros((n_tables + (RUNS_TABLES_8 if tshift == 3 else RUNS_TABLES_4), 256), np.int64)
            all_freq[:n_tables] = freq
            all_freq[n_tables : n_tables + f2.RUN_CONTEXTS] = runs_freq
            coder = _coder(all_freq)
            room = np.int64(0)
            for q in range(n_cands):
                if chosen[q]:
                    room += min(current[q], fixed[q] + 2 * runs_counts[cands[q]])
            runs_body = np.empty(room, np.uint8)
            words_runs = np.empty(cpu_v2.KEPT_CAP, np.int64)
            at = np.int64(0)
            for q in range(n_cands):
                if chosen[q]:
                    i = cands[q]
                    runs_starts[i] = at
                    runs_lengths[i] = cpu_v2._runs_payload(np.int64(c), pal_sizes[i], colours[i], kept_syms[i],
                                                           kept_ctxs[i], runs_counts[i], n_sets, tshift, coder,
                                                           words_runs, runs_body, at, current[q], coded)
                    at += min(current[q], fixed[q] + 2 * runs_counts[i])
            if runs_lengths.any():
                freq = all_freq
        for i in range(n):
            if sure[i] and runs_lengths[i] == 0:
                return NOT_HERE, none, n_sets
    stream = _assemble(h, w, c, tile, flags, freq, freq.shape[0] >> tshift, body, starts, lengths, runs_body,
                       runs_starts, runs_lengths)
    # Never larger than the stream of every tile raw (cpu_v2._encode's all_raw): C sets of
    # empty tables, one byte each.
    all_raw = f2.HEADER_SIZE + (c << tshift)
    for i in range(n):
        all_raw += 1 + (raw_len[i] >= f2.SHORT_ONE_BYTE) + raw_len[i]
    if stream.size <= all_raw:
        return DONE, stream, n_sets
    raw_starts = np.zeros(n + 1, np.int64)
    for i in range(n):
        raw_starts[i + 1] = raw_starts[i] + raw_len[i]
    raw = np.empty(raw_starts[n], np.uint8)
    for i in range(n):
        y0, x0, th, tw = cpu_v2._tile_box(np.int64(i), tile, h, w)
        lengths[i] = cpu_v2._raw_tile(image, y0, x0, th, tw, raw, raw_starts[i])
    return DONE, _assemble(h, w, c, tile, flags, np.zeros((c << tshift, 256), np.int64), np.int64(c), raw, raw_starts,
                           lengths, runs_body, runs_starts, np.zeros(n, np.int64)), n_sets


@njit(nogil=True, cache=True, boundscheck=False)
def _all_tiles(image, tile, flags, n_predictors, min_log2, splits, planes, tables, words):
    """(status, stream) of a prepared image of at most MAX_TILES tiles: DONE and the general
    encoder's stream, or NOT_HERE (and an empty array) where the general encoder
    must write it. flags: the header's, with FLAG_PLANE_CONTEXT where plane contexts are tried
    (format_v2.encoder_plane_context); splits: table_sets.applies; planes, tables, words: one
    chunk of cpu_v2._encode_scratch."""
    h, w, c = image.shape
    n = ((h + tile - 1) // tile) * ((w + tile - 1) // tile)
    choices = np.zeros((n, cpu_v2.N_CHOICE), np.int64)
    const_vals = np.zeros((n, 4), np.int64)
    colours = np.empty((n, cpu_v2.MAX_PALETTE), np.int64)
    constant = np.zeros(n, np.bool_)
    runs_counts = np.zeros(n, np.int64)
    kept_syms = np.empty((n, cpu_v2.KEPT_CAP), np.uint8)
    kept_ctxs = np.empty((n, cpu_v2.KEPT_CAP), np.uint8)
    cpu_v2._palettes_all(image, tile, choices, colours, constant, planes, n_predictors, runs_counts, kept_syms,
                         kept_ctxs, np.bool_(True))
    pal_sizes = choices[:, cpu_v2.COL_PAL_SIZE].copy()
    if c == 1:
        # mask_encoder.stream first, as cpu_v2._encode: constant tiles and sure runs tiles only
        runs_freq = np.zeros((f2.RUN_CONTEXTS, 256), np.int64)
        sizes = np.zeros(2, np.int64)
        status, data = mask_encoder._stream(image, tile, choices[:, cpu_v2.COL_PAL_SIZE], colours, constant,
                                            runs_counts, kept_syms, kept_ctxs, runs_freq, sizes)
        if status == mask_encoder.FLAT and data.size <= sizes[1]:
            n_sets = 1
            if (pal_sizes > 0).any():
                n_sets = mask_encoder.RUNS_SET + mask_encoder.RUNS_TABLES // mask_encoder.TABLES_PER_SET
            _header(data, h, w, c, tile, flags, np.int64(n_sets), sizes[0])
            return DONE, data
    sure = np.zeros(n, np.bool_)
    sym_start = np.zeros(n + 1, np.int64)
    for i in range(n):
        _, _, th, tw = cpu_v2._tile_box(np.int64(i), tile, h, w)
        sym_start[i + 1] = sym_start[i] + th * tw * c
        if pal_sizes[i] > 0:
            sure[i] = runs.sure(runs_counts[i] - runs.palette_head(pal_sizes[i], c), np.int64(th * tw), np.int64(c))
            if sure[i]:
                choices[i, cpu_v2.COL_PAL_SIZE] = 0
    tshift = np.int64(3) if flags & f2.FLAG_PLANE_CONTEXT else np.int64(2)
    sym_count = np.zeros(n, np.int64)
    syms = np.empty(sym_start[n], np.uint8)
    hist = np.empty((n, c << tshift, 256), np.uint16)
    cpu_v2._choose_symbols_all(image, tile, choices, const_vals, planes, constant, sure, n_predictors, sym_start,
                               sym_count, syms, hist, tshift)
    first = np.zeros(n, np.bool_)
    for i in range(n):
        n_colours = choices[i, cpu_v2.COL_PAL_SIZE]
        first[i] = n_colours > 0 and choices[i, cpu_v2.COL_PAL_COST] + 8 * n_colours * c < choices[i, cpu_v2.COL_COST]
    psym_start = np.zeros(n + 1, np.int64)
    if first.any():
        for i in range(n):
            _, _, th, tw = cpu_v2._tile_box(np.int64(i), tile, h, w)
            psym_start[i + 1] = psym_start[i] + (th * tw if choices[i, cpu_v2.COL_PAL_SIZE] > 0 else 0)
    psyms = np.empty(psym_start[n], np.uint8)
    phist = np.empty((n if first.any() else 0, 4, 256), np.uint16)
    if first.any():
        cpu_v2._palette_symbols_all(image, tile, choices, colours, psym_start, psyms, planes, phist)
    status, stream, n_sets = _finish(image, tile, flags, np.bool_(False), splits, tshift, min_log2, choices, const_vals,
                                     colours, sure, first, pal_sizes, runs_counts, kept_syms, kept_ctxs, sym_start,
                                     sym_count, syms, hist, phist, psym_start, psyms, tables, words)
    if status == FOLD:
        # Every choice again with four tables per set, from the same histograms folded (as
        # cpu_v2's finish with counted.folded()); the header without the flag.
        flags = flags & ~f2.FLAG_PLANE_CONTEXT
        status, stream, n_sets = _finish(image, tile, flags, np.bool_(False), splits, np.int64(2), min_log2, choices,
                                         const_vals, colours, sure, first, pal_sizes, runs_counts, kept_syms, kept_ctxs,
                                         sym_start, sym_count, syms, _folded(hist, c), phist, psym_start, psyms, tables,
                                         words)
    if status != DONE or n > f2.ONE_SET_MAX_TILES or (c == 1 and not first.any() and n_sets == 1):
        # (format_v2.encoder_tries_one_set; one set is the stream written: cpu_v2's one_set_alike)
        return status, stream
    status, other, _ = _finish(image, tile, flags, np.bool_(True), splits, tshift, min_log2, choices, const_vals, colours, sure,
                               first, pal_sizes, runs_counts, kept_syms, kept_ctxs, sym_start, sym_count, syms, hist,
                               phist, psym_start, psyms, tables, words)
    if status != DONE:
        return status, other
    return DONE, other if other.size < stream.size else stream


# The most tiles stream() takes: every item of the table-set proposal (a tile's coded planes,
# or its index plane) is then in the proposal's sample, as _with_table_sets assumes.
MAX_TILES = table_sets.SAMPLE // 4


def applies(height: int, width: int, tile: int) -> bool:
    """Whether stream() takes an image of this size: at most MAX_TILES tiles."""
    return fmt.Header(height, width, 1, tile, 0).n_tiles <= MAX_TILES


def stream(image: np.ndarray, flags: int, tile: int, fast_decode: bool) -> bytes | None:
    """The v2 stream cpu_v2._encode writes for a prepared image (fmt.prepare) of at most
    MAX_TILES tiles, with runs tiles on and first (its defaults), or None where it must write
    the image itself. flags: the stream header's (format_v2.encoder_flags, with
    FLAG_PLANE_CONTEXT where format_v2.encoder_plane_context tries them). The tiles' kernels
    run on numba's threads where cpu.use_parallel says so, else on the calling thread alone."""
    from prepkit.lossless import cpu

    h, w, c = image.shape
    if not applies(h, w, tile):
        return None
    n = fmt.Header(h, w, c, tile, 0).n_tiles
    splits = table_sets.applies(n, c, fast_decode, f2.set_tables(flags))
    parallel = cpu.use_parallel(n)
    # Asking for numba's threads (or setting them) starts its threading layer, which the
    # parallel kernels compiled into _all_tiles need: a cached caller of a parallel kernel
    # does not start it when it loads (the first call of a fresh process crashed when it had
    # been compiled against cached kernels). Too few tiles for the pool: one thread (each
    # parallel region would wake the others for a few microseconds of work).
    chunks = numba.get_num_threads() if parallel else 1
    scratch = cpu_v2._encode_scratch(chunks)
    with numba_threads(chunks):
        status, data = _all_tiles(image, np.int64(tile), np.int64(flags), np.int64(f2.encoder_predictors(fast_decode)),
                                  np.int64(f2.min_lanes_log2(fast_decode)), np.bool_(splits), scratch.planes,
                                  scratch.tables, scratch.words)
    return data.tobytes() if status == DONE else None


# Last, once every cached function above exists: the modules whose functions and constants
# are compiled into these kernels.
guard_disk_cache(globals(), (cpu_v2, f2, fmt, frequencies, mask_encoder, runs, table_sets))
