"""The v2 encoder's short path for one-channel images of constant tiles and runs tiles only.

Segmentation masks are such images (all 22 evaluation masks since
runs.SURE_PIXELS_PER_SYMBOL_GREY is 5; 17 of them before): every tile is one value or sure to
become a runs tile (runs.sure). For them the general encoder (cpu_v2._encode) makes no coded
or palette symbol, and its choices, counts, estimates and table-set proposal all come out
empty, yet each costs calls from Python: about 350 per image, 0.2-0.5 ms, more than the
compiled work of a small mask. This path writes the same stream from the tile analysis
(cpu_v2._palettes_all) in one compiled call: the runs choice (runs.choose's rounds), the
tables, the tile table, the constant and raw tiles and the runs payloads; Python adds the
header. Where the general encoder would decide otherwise (a tile that is neither, a runs tile
that does not pay, a stream larger than raw) it returns None and the general encoder carries
on from the same analysis: the bytes are always the general encoder's, which tests check
against reference_v2."""

from __future__ import annotations

import numpy as np
from numba import njit

from prepkit.jitcache import guard_disk_cache
from prepkit.lossless import cpu_v2, frequencies, runs
from prepkit.lossless import format as fmt
from prepkit.lossless import format_v2 as f2

# One channel: one table set of four tables for the coded planes (empty here), then the runs
# tables as whole sets of four; a runs tile names the set after the coded one.
TSHIFT = 2  # four tables per set (no plane contexts in one channel)
TABLES_PER_SET = 1 << TSHIFT
RUNS_SET = 1
RUNS_TABLES = f2.runs_sets(TABLES_PER_SET) * TABLES_PER_SET  # runs.table_set's rows
CONSTANT_TILE_BYTES = 4  # mode, colour | lanes, channel byte, the value (cpu_v2._encode_tile)

# What _stream reports.
FLAT = 0
NOT_FLAT = 1  # a tile is neither constant nor sure to become a runs tile
NOT_CHOSEN = 2  # the runs choice left out a tile (or the whole set), or a payload reached raw size


@njit(nogil=True, cache=True, boundscheck=False)
def _tile_table(lengths, out, pos):
    """format_v2.tile_table's short form of these payload lengths at out[pos:]; returns the
    position after it."""
    n = lengths.shape[0]
    big = pos + n
    for i in range(n):
        if lengths[i] < f2.SHORT_ONE_BYTE:
            out[pos + i] = lengths[i]
        else:
            out[pos + i] = 0x80 | (lengths[i] & 127)
            out[big] = (lengths[i] >> 7) & 255
            big += 1
    return big


@njit(nogil=True, cache=True, boundscheck=False)
def _stream(image, tile, pal_sizes, colours, constant, runs_counts, kept_syms, kept_ctxs, runs_freq, sizes):
    """(status, the stream after its fixed header): tables, short tile table and every tile's
    payload as cpu_v2._encode writes them for an image of constant and sure runs tiles; its
    first HEADER_SIZE bytes are left for the header. sizes gets [tables' bytes, bytes of
    the stream with every tile raw (cpu_v2._encode's bound)]; runs_freq the runs tables
    (RUN_CONTEXTS, 256). status FLAT, or why the general encoder must write this image
    (nothing written then)."""
    h, w = image.shape[0], image.shape[1]
    n = pal_sizes.shape[0]
    none = np.empty(0, np.uint8)
    # The candidates, each sure (else the general encoder weighs it against its other payloads).
    n_cands = 0
    for i in range(n):
        if pal_sizes[i] > 0:
            n_cands += 1
    rows = np.empty(n_cands, np.int64)
    n_symbols = np.empty(n_cands, np.int64)
    fixed = np.empty(n_cands, np.int64)
    heads = np.empty(n_cands, np.int64)
    current = np.empty(n_cands, np.int64)
    pixels = np.empty(n_cands, np.int64)
    room = np.int64(0)
    raw_total = np.int64(0)
    k = 0
    for i in range(n):
        _, _, th, tw = cpu_v2._tile_box(i, tile, h, w)
        raw_len = 1 + th * tw
        raw_total += raw_len + (raw_len >= f2.SHORT_ONE_BYTE)  # and its bytes in the tile table
        if pal_sizes[i] > 0:
            heads[k] = runs.palette_head(pal_sizes[i], np.int64(1))
            if not runs.sure(runs_counts[i] - heads[k], th * tw, np.int64(1)):
                return NOT_FLAT, none
            rows[k] = i
            n_symbols[k] = runs_counts[i]
            fixed[k] = runs.fixed_bytes(pal_sizes[i], np.int64(1))
            current[k] = raw_len  # (cpu_v2._encode weighs a sure tile against its raw payload)
            pixels[k] = th * tw
            room += min(raw_len, fixed[k] + 2 * n_symbols[k])  # a symbol emits at most one word
            k += 1
        elif constant[i]:
            room += CONSTANT_TILE_BYTES if CONSTANT_TILE_BYTES < raw_len else raw_len
        else:
            return NOT_FLAT, none
    n_tables = TABLES_PER_SET
    coded = False  # (mode 6 palettes, runs._choose)
    if n_cands:
        chosen, coded = runs._choose(kept_syms, kept_ctxs, rows, n_symbols, heads, fixed, current, pixels, runs_freq)
        if not chosen.all():
            return NOT_CHOSEN, none
        n_tables = RUNS_SET * TABLES_PER_SET + RUNS_TABLES
    all_freq = np.zeros((n_tables, 256), np.int64)
    if n_cands:
        all_freq[RUNS_SET * TABLES_PER_SET : RUNS_SET * TABLES_PER_SET + runs_freq.shape[0]] = runs_freq
    coder = np.empty((n_tables, 256, 2), np.int64)
    cpu_v2._fill_coder(all_freq, coder)
    # The payloads first (the tile table before them needs their lengths), then the stream.
    lengths = np.empty(n, np.int64)
    words = np.empty(cpu_v2.KEPT_CAP, np.int64)
    body = np.empty(room, np.uint8)
    pos = np.int64(0)  # (np.int64 literals throughout: a literal compiles the callees once more)
    for i in range(n):
        y0, x0, th, tw = cpu_v2._tile_box(i, tile, h, w)
        raw_len = 1 + th * tw
        if pal_sizes[i] > 0:
            lengths[i] = cpu_v2._runs_payload(np.int64(1), pal_sizes[i], colours[i], kept_syms[i], kept_ctxs[i],
                                              runs_counts[i], np.int64(RUNS_SET), np.int64(TSHIFT), coder, words, body,
                                              pos, raw_len, coded)
            if lengths[i] == 0:  # (a payload that reaches the raw tile's size)
                return NOT_CHOSEN, none
        elif CONSTANT_TILE_BYTES < raw_len:
            body[pos] = f2.TILE_CODED
            body[pos + 1] = 0  # no colour transform, no lanes
            body[pos + 2] = 0  # a constant plane
            body[pos + 3] = image[y0, x0, 0]
            lengths[i] = CONSTANT_TILE_BYTES
        else:
            lengths[i] = cpu_v2._raw_tile(image, y0, x0, th, tw, body, pos)
        pos += lengths[i]
    out = np.empty(f2.HEADER_SIZE + n_tables * frequencies.MAX_TABLE_BYTES + 2 * n + pos, np.uint8)
    sizes[0] = frequencies.pack_into(all_freq, out[f2.HEADER_SIZE :])
    at = _tile_table(lengths, out, f2.HEADER_SIZE + sizes[0])
    out[at : at + pos] = body[:pos]
    # Every tile raw: the header, the coded planes' tables (empty: one byte each), the tile table.
    sizes[1] = f2.HEADER_SIZE + TABLES_PER_SET + n + raw_total
    return FLAT, out[: at + pos]


def stream(image: np.ndarray, header: fmt.Header, pal_sizes: np.ndarray, colours: np.ndarray,
           constant: np.ndarray, runs_counts: np.ndarray, kept_syms: np.ndarray,
           kept_ctxs: np.ndarray) -> bytes | None:
    """The v2 stream cpu_v2._encode writes for a prepared one-channel image (header: its
    stream header, with the short tile table) from its tile analysis (cpu_v2._palettes_all
    with runs tiles, runs first), or None where the image is not one of constant and sure
    runs tiles only, or where the general encoder would write something else (it then
    carries on from the same analysis)."""
    assert header.flags & f2.FLAG_SHORT_TILE_TABLE, "the encoders write the short tile table"
    runs_freq = np.zeros((f2.RUN_CONTEXTS, 256), np.int64)
    sizes = np.zeros(2, np.int64)
    status, data = _stream(image, header.tile, pal_sizes, colours, constant, runs_counts, kept_syms, kept_ctxs,
                           runs_freq, sizes)
    # As cpu_v2._encode: never larger than every tile raw.
    if status != FLAT or data.size > sizes[1]:
        return None
    n_sets = RUNS_SET + RUNS_TABLES // TABLES_PER_SET if (pal_sizes > 0).any() else 1
    data[: f2.HEADER_SIZE] = np.frombuffer(f2.pack_header(header.height, header.width, 1, header.tile, header.flags,
                                                          n_sets, int(sizes[0])), np.uint8)
    return data.tobytes()


# Last, once every cached function above exists: the modules whose functions and constants
# are compiled into these kernels.
guard_disk_cache(globals(), (cpu_v2, f2, frequencies, runs))
