"""Plain-numpy encoder and decoder for bitstream version 2: the oracle the kernels are tested against.

Slow and short; every step follows docs/LOSSLESS.md (section "Version 2") the obvious way.
The image-level steps that are not per tile (histograms, table normalisation, lane counts)
are shared with the numba encoder in cpu_v2.py, which must produce the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from prepkit.errors import CodecError
from prepkit.lossless import format as fmt
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import runs, table_sets
from prepkit.lossless.format import prepare
from prepkit.lossless.format_v2 import assemble, cost_table, normalize

# Bits of a zig-zag value as the encoder's cheap cost estimate: bit_length(v).
BIT_LENGTH = np.array([int(v).bit_length() for v in range(256)], np.int64)


def signed_half(v: np.ndarray) -> np.ndarray:
    """floor(s / 2) of a mod-256 value read as int8 s (the lifting steps' shift)."""
    s = v.astype(np.int64) & 255
    return np.where(s >= 128, s - 256, s) >> 1


def colour_forward(x: np.ndarray, mode: int) -> np.ndarray:
    """Reversible colour transform of (..., C) int64 pixels, mod 256 (C >= 3 for modes 1-3)."""
    x = x.astype(np.int64).copy()
    if mode == 1:  # subtract green
        x[..., 0] = (x[..., 0] - x[..., 1]) & 255
        x[..., 2] = (x[..., 2] - x[..., 1]) & 255
    elif mode == 2:  # YCoCg-R lifting: planes become (Y, Cg, Co)
        r, g, b = x[..., 0], x[..., 1], x[..., 2]
        co = (r - b) & 255
        t = (b + signed_half(co)) & 255
        cg = (g - t) & 255
        y = (t + signed_half(cg)) & 255
        x[..., 0], x[..., 1], x[..., 2] = y, cg, co
    elif mode == 3:  # subtract green from red, the mean of red and green from blue
        r, g, b = x[..., 0].copy(), x[..., 1], x[..., 2]
        x[..., 0] = (r - g) & 255
        x[..., 2] = (b - ((r + g) >> 1)) & 255
    return x


def colour_inverse(x: np.ndarray, mode: int) -> np.ndarray:
    """colour_forward undone: (..., C) planes back to pixels, mod 256."""
    x = x.astype(np.int64).copy()
    if mode == 1:
        x[..., 0] = (x[..., 0] + x[..., 1]) & 255
        x[..., 2] = (x[..., 2] + x[..., 1]) & 255
    elif mode == 2:
        y, cg, co = x[..., 0].copy(), x[..., 1].copy(), x[..., 2].copy()
        t = (y - signed_half(cg)) & 255
        g = (cg + t) & 255
        b = (t - signed_half(co)) & 255
        r = (b + co) & 255
        x[..., 0], x[..., 1], x[..., 2] = r, g, b
    elif mode == 3:
        g = x[..., 1]
        r = (x[..., 0] + g) & 255
        x[..., 0] = r
        x[..., 2] = (x[..., 2] + ((r + g) >> 1)) & 255
    return x


def med(left: np.ndarray, up: np.ndarray, upleft: np.ndarray) -> np.ndarray:
    """MED, LOCO-I's median edge detector: min(L, U) when UL >= max(L, U), max(L, U) when
    UL <= min(L, U), else L + U - UL (always within 0..255 for bytes)."""
    lo, hi = np.minimum(left, up), np.maximum(left, up)
    return np.where(upleft >= hi, lo, np.where(upleft <= lo, hi, left + up - upleft))


def predict(plane: np.ndarray, predictor: int) -> np.ndarray:
    """Residuals mod 256 of a (th, tw) plane; neighbours outside the tile are 0."""
    p = np.zeros((plane.shape[0] + 1, plane.shape[1] + 1), np.int64)
    p[1:, 1:] = plane
    left, up, upleft = p[1:, :-1], p[:-1, 1:], p[:-1, :-1]
    if predictor == f2.PRED_MED:
        return (plane - med(left, up, upleft)) & 255
    guess = [0, left, up, left + up - upleft][predictor]
    return (plane - guess) & 255


def unpredict(res: np.ndarray, predictor: int) -> np.ndarray:
    """Inverse of predict: prefix sums along rows (left), columns (up), or both (gradient);
    MED one anti-diagonal (y + x = d) at a time: a pixel's left, upper and upper-left
    neighbours all lie on earlier anti-diagonals."""
    out = res.astype(np.int64)
    if predictor == f2.PRED_MED:
        th, tw = out.shape
        p = np.zeros((th + 1, tw + 1), np.int64)
        for d in range(th + tw - 1):
            y = np.arange(max(0, d - tw + 1), min(th, d + 1))
            x = d - y
            guess = med(p[y + 1, x], p[y, x + 1], p[y, x])
            p[y + 1, x + 1] = (out[y, x] + guess) & 255
        return p[1:, 1:]
    if predictor in (1, 3):
        out = np.cumsum(out, axis=1)
    if predictor in (2, 3):
        out = np.cumsum(out, axis=0)
    return out & 255


def zigzag(r: np.ndarray) -> np.ndarray:
    s = np.where(r >= 128, r - 256, r).astype(np.int64)
    return np.where(s >= 0, 2 * s, -2 * s - 1)


def unzigzag(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.int64)
    return ((z >> 1) ^ -(z & 1)) & 255


# ----------------------------------------------------------------------------- encoder


class TileChoice:
    """The encoder's decisions for one tile, before entropy coding."""

    def __init__(self, colour: int, predictors: list[int], planes: np.ndarray, const: list[bool],
                 cost: int = 0) -> None:
        self.colour = colour
        self.predictors = predictors
        self.planes = planes  # int64 (C, th, tw) colour-transformed pixels
        self.const = const
        self.cost = cost  # sum of the symbols' bit lengths (the choice's cost, A9)

    def header_bytes(self) -> int:
        """Payload bytes before the lane states: mode, info, channel bytes, constants."""
        return 2 + len(self.const) + sum(self.const)

    def symbols(self) -> tuple[np.ndarray, np.ndarray]:
        """(zig-zag residuals, channel of each) of the rANS-coded channels, in coded order."""
        parts = [zigzag(predict(self.planes[k], self.predictors[k])).reshape(-1)
                 for k in range(len(self.const)) if not self.const[k]]
        chans = [np.full(self.planes[k].size, k, np.int64) for k in range(len(self.const)) if not self.const[k]]
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(parts), np.concatenate(chans)


def bit_cost(residuals: np.ndarray) -> int:
    """The encoder's cost of a residual plane: twice the sum of its zig-zag bit lengths over
    the even rows (0, 2, ...). Half the rows choose as well as all of them, for half the work."""
    return 2 * int(BIT_LENGTH[zigzag(residuals[::2])].sum())


def choose(tile: np.ndarray, n_predictors: int = f2.PREDICTORS,
           colours: tuple[int, ...] = f2.ENCODER_COLOURS) -> TileChoice:
    """Colour transform (of `colours`, in increasing order) and per-channel predictor with the
    smallest sum of bit lengths (first minimum on ties: the lower mode number wins)."""
    c = tile.shape[2]
    best: TileChoice | None = None
    best_cost = -1
    for colour in (colours if c >= 3 else (0,)):
        planes = np.moveaxis(colour_forward(tile, colour), 2, 0)
        total = 0
        predictors = []
        for k in range(c):
            costs = [bit_cost(predict(planes[k], p)) for p in range(n_predictors)]
            p = int(np.argmin(costs))
            predictors.append(p)
            total += costs[p]
        if best is None or total < best_cost:
            const = [bool((planes[k] == planes[k].flat[0]).all()) for k in range(c)]
            best, best_cost = TileChoice(colour, predictors, planes, const, total), total
    assert best is not None
    return best


# The encoder tries palette mode on colour tiles with at most MAX_PALETTE colours (all that A2
# allows: screenshots and UI tiles with anti-aliased text hold 65-256, and their index planes
# cost a fraction of three coded planes) and on grey tiles with at most MAX_GREY_PALETTE
# values: a grey tile always has at most 256, and an index plane of more than 64 values
# renames the values without making them cheaper, while it costs a table set of the two
# that C = 1 allows.
MAX_PALETTE = 256
MAX_GREY_PALETTE = 64


def max_palette(c: int) -> int:
    """The most colours the encoder gives a palette candidate of a C-channel tile."""
    return MAX_PALETTE if c > 1 else MAX_GREY_PALETTE


class PaletteChoice:
    """A palette tile (A2 mode 2): colours sorted by value, the index plane and its predictor."""

    def __init__(self, palette: np.ndarray, index: np.ndarray, predictor: int, cost: int) -> None:
        self.palette = palette  # int64 (P, C), rows in increasing order of packed value
        self.index = index  # int64 (th, tw)
        self.predictor = predictor
        self.cost = cost

    def header_bytes(self) -> int:
        return 4 + self.palette.size

    def symbols(self) -> tuple[np.ndarray, np.ndarray]:
        """(zig-zag residuals of the index plane, the index set C for each)."""
        sym = zigzag(predict(self.index, self.predictor)).reshape(-1)
        return sym, np.full(sym.size, self.palette.shape[1], np.int64)


def pack_colours(tile: np.ndarray) -> np.ndarray:
    """Each pixel as one integer, channel 0 most significant (so integer order is the
    lexicographic order of the colours)."""
    packed = np.zeros(tile.shape[:2], np.int64)
    for k in range(tile.shape[2]):
        packed = packed << 8 | tile[..., k].astype(np.int64)
    return packed


def choose_palette(tile: np.ndarray, max_colours: int | None = None,
                   n_predictors: int = f2.PREDICTORS) -> PaletteChoice | None:
    """The palette candidate of a tile with at most max_colours colours (max_palette(C) when
    None; None otherwise): colours sorted by packed value, the index predictor with the
    smallest sum of bit lengths."""
    packed = pack_colours(tile)
    colours = np.unique(packed)
    if colours.size > (max_palette(tile.shape[2]) if max_colours is None else max_colours):
        return None
    c = tile.shape[2]
    palette = (colours[:, None] >> (8 * np.arange(c - 1, -1, -1))) & 255
    index = np.searchsorted(colours, packed)
    costs = [bit_cost(predict(index, p)) for p in range(n_predictors)]
    p = int(np.argmin(costs))
    return PaletteChoice(palette, index, p, costs[p])


def palette_first(choice: TileChoice, pal: PaletteChoice | None) -> bool:
    """The first guess (before tables exist): palette when its bit lengths plus 8 bits per
    palette byte are below the coded choice's bit lengths."""
    return pal is not None and pal.cost + 8 * pal.palette.size < choice.cost


# ----------------------------------------------------------------------------- runs tiles (A2 mode 3)


def run_starts(row: np.ndarray) -> list[int]:
    """Columns x > 0 where a row's index changes: where its runs start (boundaries)."""
    return [int(x) for x in np.flatnonzero(row[1:] != row[:-1]) + 1]


def label_candidates(index: np.ndarray, y: int, a1: int, a0: int) -> list[int]:
    """The candidate indices of a run that starts at column a1 of row y, the run before it
    starting at a0 (A2 mode 3): above at a1 and a1 + 1 (clipped), then the index of the run
    before the one ending at a1; a row's first run (a1 = 0): above at 0."""
    tw = index.shape[1]
    out = []
    if y > 0:
        out.append(int(index[y - 1, a1]))
        if a1 > 0:
            out.append(int(index[y - 1, min(a1 + 1, tw - 1)]))
    if a0 > 0:
        out.append(int(index[y, a0 - 1]))
    return out


def label_order(candidates: list[int], left: int, n_colours: int) -> list[int]:
    """The ranks' order: the candidates, then every index in increasing order, each once,
    without `left` (the index of the run before, -1 for a row's first run). The definition;
    the coders use label_rank and label_of_rank, which give the same answers without
    listing every index (tests compare them)."""
    head = _label_head(candidates, left)
    return head + [v for v in range(n_colours) if v != left and v not in head]


def _label_head(candidates: list[int], left: int) -> list[int]:
    """The head of label_order: the distinct candidates other than `left`."""
    head: list[int] = []
    for v in candidates:
        if v != left and v not in head:
            head.append(v)
    return head


def label_rank(candidates: list[int], left: int, value: int) -> int:
    """label_order(candidates, left, n).index(value) for a value other than `left`: its place
    among the candidates, else after them, less the smaller indices listed earlier or skipped."""
    head = _label_head(candidates, left)
    if value in head:
        return head.index(value)
    return len(head) + value - sum(1 for u in {left, *head} if 0 <= u < value)


def label_of_rank(candidates: list[int], left: int, n_colours: int, rank: int) -> int | None:
    """label_order(candidates, left, n_colours)[rank], None when the rank is past the order."""
    head = _label_head(candidates, left)
    if rank < len(head):
        return head[rank]
    value = rank - len(head)  # the value-th index that is neither a candidate nor left
    for u in sorted(u for u in {left, *head} if 0 <= u < n_colours):
        if u <= value:
            value += 1
    return value if value < n_colours else None


def runs_symbols(index: np.ndarray, n_colours: int, repeats: bool = True, same: bool = True
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(symbols, contexts) of an index plane coded as runs (A2 mode 3; mode 4 with `repeats`,
    mode 5 with `same` too). The encoder's choices (not normative): every row equal to the row
    above starts a repeat of as many rows as equal it; per boundary a1, the next boundary b1 of
    the row above when it is within RUN_REACH, else a pass when b1 lies left of a1, else an
    explicit length."""
    same = same and repeats  # (mode 5 is mode 4's with implied labels)
    th, tw = index.shape
    syms: list[tuple[int, int]] = []  # (context, symbol)
    above: list[int] = []
    y = -1
    while y + 1 < th:
        y += 1
        row = index[y]
        if repeats and y > 0 and (row == index[y - 1]).all():
            n = 0
            while y + n + 1 < th and (index[y + n + 1] == row).all():
                n += 1
            syms += [(f2.RUN_CTX_ROW, f2.RUN_REPEAT), (f2.RUN_CTX_LENGTH, n)]
            y += n  # the boundaries above stay those of the repeated row
            continue
        first = f2.RUN_CTX_ROW if repeats and y > 0 else f2.RUN_CTX_LABEL
        syms.append((first, label_rank(label_candidates(index, y, 0, 0), -1, int(row[0]))))
        a0, j = 0, 0
        for a1 in [*run_starts(row), None]:
            while True:
                while j < len(above) and above[j] <= a0:
                    j += 1
                b1 = above[j] if j < len(above) else None
                ctx = f2.RUN_CTX_FAR if b1 is None else f2.RUN_CTX_NEAR
                run_at = len(syms)
                if a1 is None:
                    syms.append((ctx, f2.RUN_END))
                elif b1 is not None and abs(a1 - b1) <= f2.RUN_REACH:
                    syms.append((ctx, f2.RUN_NEAR + f2.RUN_REACH + a1 - b1))
                elif b1 is not None and b1 < a1:
                    syms.append((ctx, f2.RUN_PASS))
                    j += 1
                    continue
                else:
                    syms.append((ctx, f2.RUN_LENGTH))
                    syms.append((f2.RUN_CTX_LENGTH, a1 - a0 - 1))
                break
            if a1 is None:
                break
            rank = label_rank(label_candidates(index, y, a1, a0), int(row[a1 - 1]), int(row[a1]))
            a0 = a1
            if same and rank == 0:
                continue  # implied by the run symbol
            if same:
                syms[run_at] = (syms[run_at][0], syms[run_at][1] + f2.RUN_OTHER)
            syms.append((f2.RUN_CTX_LABEL, rank))
        above = run_starts(row)
    pairs = np.array(syms, np.int64).reshape(-1, 2)
    return pairs[:, 1].copy(), pairs[:, 0].copy()


def palette_symbols(palette: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(symbols, contexts) of a runs tile's palette (P, C) coded as A2 mode 6 writes it: colour
    by colour, channel by channel, each channel's difference d_k from the colour before (from
    0 for the first); channel 0's d_0 itself (the colours increase, so it never wraps),
    channels 1 and 2 zigzag(d_k - d_0), channel 3 zigzag(d_3) (all mod 256); context
    RUN_CTX_PALETTE + min(k, 2)."""
    pal = palette.astype(np.int64)
    n, c = pal.shape
    d = (pal - np.vstack([np.zeros((1, c), np.int64), pal[:-1]])) & 255
    sym = d.copy()
    for k in range(1, c):
        sym[:, k] = zigzag((d[:, k] - (d[:, 0] if k < 3 else 0)) & 255)
    ctx = np.broadcast_to(f2.RUN_CTX_PALETTE + np.minimum(np.arange(c), 2), (n, c))
    return sym.reshape(-1), ctx.reshape(-1).astype(np.int64)


def palette_decode(next_symbol: Callable[[int], int], n_colours: int, c: int) -> np.ndarray:
    """The palette (P, C) of a mode 6 runs tile from its first P*C symbols (palette_symbols)."""
    pal = np.zeros((n_colours, c), np.int64)
    prev = np.zeros(c, np.int64)
    for q in range(n_colours):
        d0 = 0
        for k in range(c):
            v = next_symbol(f2.RUN_CTX_PALETTE + min(k, 2))
            if k == 0:
                d = d0 = v
            else:
                d = int(unzigzag(np.array(v))) + (d0 if k < 3 else 0)
            pal[q, k] = (prev[k] + d) & 255
        prev = pal[q]
    return pal


class RunsChoice:
    """A runs tile (A2 modes 3 to 6): palette (as PaletteChoice's), index plane, its symbols
    (mode 6: the palette's, then the runs'), and the mode they are for (runs.mode_of; without
    `repeats` mode 3, as encoders before mode 4 wrote; without `same` mode 4 where mode 5 or 6
    would be, as encoders before mode 5 wrote; without `coded` mode 5 where mode 6 would be,
    as encoders before mode 6 wrote)."""

    def __init__(self, palette: np.ndarray, index: np.ndarray, repeats: bool = True, same: bool = True,
                 coded: bool = True) -> None:
        self.palette = palette
        self.index = index
        self.mode = int(runs.mode_of(palette.shape[0])) if repeats else f2.TILE_RUNS
        if self.mode == f2.TILE_RUNS_PALETTE and not same:
            self.mode = f2.TILE_RUNS_REPEAT
        elif self.mode == f2.TILE_RUNS_PALETTE and not coded:
            self.mode = f2.TILE_RUNS_SAME
        same = self.mode in (f2.TILE_RUNS_SAME, f2.TILE_RUNS_PALETTE)
        self.symbols, self.contexts = runs_symbols(index, palette.shape[0], self.mode != f2.TILE_RUNS, same)
        if self.mode == f2.TILE_RUNS_PALETTE:
            psyms, pctxs = palette_symbols(palette)
            self.symbols = np.concatenate([psyms, self.symbols])
            self.contexts = np.concatenate([pctxs, self.contexts])

    @property
    def head_symbols(self) -> int:
        """How many of the symbols are the palette's (runs.palette_head)."""
        return self.palette.size if self.mode == f2.TILE_RUNS_PALETTE else 0

    def head(self, table_set: int) -> bytes:
        """The payload's bytes before the lane state: header, and the palette in modes 3 to 5."""
        head = bytes([self.mode, table_set, self.palette.shape[0] - 1])
        return head if self.mode == f2.TILE_RUNS_PALETTE else head + self.palette.astype(np.uint8).tobytes()

    def fixed_bytes(self) -> int:
        """Payload bytes besides the words: header, palette (modes 3 to 5), the one lane state."""
        return len(self.head(0)) + 4

    def histogram(self) -> np.ndarray:
        counts = np.zeros((f2.RUN_CONTEXTS, 256), np.int64)
        np.add.at(counts, (self.contexts, self.symbols), 1)
        return counts


def runs_decode(next_symbol: Callable[[int], int], th: int, tw: int, n_colours: int,
                repeats: bool = False, same: bool = False) -> np.ndarray:
    """The index plane of a runs tile (mode 4 with `repeats`, mode 5 with `same` too);
    next_symbol(context) decodes the tile's next symbol."""
    index = np.zeros((th, tw), np.int64)
    above: list[int] = []
    y = -1
    while y + 1 < th:
        y += 1
        rank = next_symbol(f2.RUN_CTX_ROW if repeats and y > 0 else f2.RUN_CTX_LABEL)
        if repeats and y > 0 and rank == f2.RUN_REPEAT:
            n = next_symbol(f2.RUN_CTX_LENGTH)
            if y + n >= th:
                raise CodecError(f"runs tile: a repeat of {n + 1} rows from row {y} of {th}")
            index[y : y + n + 1] = index[y - 1]
            y += n  # the boundaries above stay those of the repeated row
            continue
        first = label_of_rank(label_candidates(index, y, 0, 0), -1, n_colours, rank)
        if first is None:
            raise CodecError(f"runs tile: label rank {rank} of {n_colours}")
        label = first
        a0, j = 0, 0
        starts: list[int] = []
        while True:
            while j < len(above) and above[j] <= a0:
                j += 1
            b1 = above[j] if j < len(above) else None
            m = next_symbol(f2.RUN_CTX_FAR if b1 is None else f2.RUN_CTX_NEAR)
            if m == f2.RUN_END:
                index[y, a0:] = label
                break
            explicit = not same or m >= f2.RUN_OTHER  # a label symbol follows the boundary
            if same and m >= f2.RUN_OTHER:
                m -= f2.RUN_OTHER
                if m in (f2.RUN_END, f2.RUN_PASS):
                    raise CodecError(f"runs tile: run symbol {m + f2.RUN_OTHER}")
            if m == f2.RUN_LENGTH:
                a1 = a0 + 1 + next_symbol(f2.RUN_CTX_LENGTH)
            elif b1 is None or m >= f2.RUN_SYMBOLS:
                raise CodecError(f"runs tile: run symbol {m} {'past the reference row' if b1 is None else ''}")
            elif m == f2.RUN_PASS:
                j += 1
                continue
            else:
                a1 = b1 + m - f2.RUN_NEAR - f2.RUN_REACH
            if not a0 < a1 < tw:
                raise CodecError(f"runs tile: run boundary {a1} outside ({a0}, {tw})")
            index[y, a0:a1] = label
            rank = next_symbol(f2.RUN_CTX_LABEL) if explicit else 0
            following = label_of_rank(label_candidates(index, y, a1, a0), label, n_colours, rank)
            if following is None:
                raise CodecError(f"runs tile: label rank {rank} of {n_colours - 1}")
            label = following
            starts.append(a1)
            a0 = a1
        above = starts
    return index


def table_index(symbols: np.ndarray, channel_set: np.ndarray, flags: int, plane: int = 0) -> np.ndarray:
    """Table of each symbol of a tile's sequence: set * set_tables + its context (A3, A4;
    flags: the stream's; plane: th*tw of a coded tile, whose planes take plane bits when the
    flags have FLAG_PLANE_CONTEXT, 0 for a palette tile's one plane)."""
    wide = bool(flags & f2.FLAG_WIDE_CONTEXT)
    bits = plane if flags & f2.FLAG_PLANE_CONTEXT else 0
    return channel_set * f2.set_tables(flags) + f2.contexts(symbols, wide, bits)


def choice_tables(choice: Choice, sets_row: np.ndarray, flags: int) -> np.ndarray:
    """table_index of every symbol of a tile choice (choice.symbols()); sets_row: the set of
    each plane key (one_set_per_plane)."""
    symbols, chans = choice.symbols()
    plane = choice.planes[0].size if isinstance(choice, TileChoice) else 0
    return table_index(symbols, sets_row[chans], flags, plane)


def lanes_log2(estimate_16ths: int, min_log2: int, n_symbols: int) -> int:
    """Lane count from the estimated coded size of a tile of n_symbols symbols: the 4-byte
    final state of each lane stays under ~1/16 of the tile, ~1/4 in a long tile
    (format_v2.lane_bytes; 2^min_log2 lanes at least, 32 at most)."""
    estimate_bytes = estimate_16ths // 128
    per_lane = f2.lane_bytes(n_symbols)
    log2 = min_log2
    while log2 < f2.MAX_LANES_LOG2 and per_lane << log2 < estimate_bytes:
        log2 += 1
    return log2


def rans_encode(symbols: np.ndarray, tables: np.ndarray, freq: np.ndarray, cum: np.ndarray, lanes: int) -> bytes:
    """Interleaved rANS: symbol i in lane i % lanes; returns the final states (u32 each) and
    the 16-bit words in the order the decoder reads them."""
    states = [f2.STATE_LOW] * lanes
    words: list[int] = []
    for i in range(symbols.size - 1, -1, -1):
        t, s = int(tables[i]), int(symbols[i])
        f, c = int(freq[t, s]), int(cum[t, s])
        x = states[i % lanes]
        if x >= f << (32 - f2.PROB_BITS):
            words.append(x & 0xFFFF)
            x >>= 16
        states[i % lanes] = (x // f << f2.PROB_BITS) + x % f + c
    return np.array(states, "<u4").tobytes() + np.array(words[::-1], "<u2").tobytes()


def encode_tile(tile: np.ndarray, choice: TileChoice, freq: np.ndarray, cum: np.ndarray, sets: np.ndarray,
                min_log2: int, flags: int) -> bytes:
    """A coded tile (mode 1), or the raw tile when that is not smaller; sets[k]: plane k's set."""
    c = tile.shape[2]
    symbols, chans = choice.symbols()
    out = bytearray([f2.TILE_CODED, 0])
    body = b""
    for k in range(c):
        if choice.const[k]:
            out.append(f2.CH_CONST)
        else:
            out.append(f2.channel_byte(choice.predictors[k], int(sets[k])))
    out += bytes(int(choice.planes[k].flat[0]) for k in range(c) if choice.const[k])
    log2 = 0
    if symbols.size:
        tables = choice_tables(choice, sets, flags)
        log2 = lanes_log2(int(cost_table(freq)[tables, symbols].sum()), min_log2, symbols.size)
        body = rans_encode(symbols, tables, freq, cum, 1 << log2)
    out[1] = choice.colour | log2 << 4
    coded = bytes(out) + body
    if len(coded) >= 1 + tile.size:  # raw fallback: what bounds max_encoded_size
        return raw_tile(tile)
    return coded


def encode_palette_tile(tile: np.ndarray, pal: PaletteChoice, freq: np.ndarray, cum: np.ndarray,
                        sets: np.ndarray, min_log2: int, flags: int) -> bytes:
    """A palette tile (mode 2), or the raw tile when that is not smaller; sets[C]: the index
    plane's set."""
    symbols, chans = pal.symbols()
    tables = choice_tables(pal, sets, flags)
    log2 = lanes_log2(int(cost_table(freq)[tables, symbols].sum()), min_log2, symbols.size)
    c = tile.shape[2]
    head = bytes([f2.TILE_PALETTE, log2 << 4, pal.palette.shape[0] - 1,
                  f2.channel_byte(pal.predictor, int(sets[c]))])
    coded = head + pal.palette.astype(np.uint8).tobytes() + rans_encode(symbols, tables, freq, cum, 1 << log2)
    if len(coded) >= 1 + tile.size:
        return raw_tile(tile)
    return coded


def raw_tile(tile: np.ndarray) -> bytes:
    """Mode byte 0, then the pixels (th, tw, C) in C order."""
    return bytes([f2.TILE_RAW]) + tile.astype(np.uint8).tobytes()


Choice = TileChoice | PaletteChoice


def estimate(choice: Choice, freq: np.ndarray, sets: np.ndarray, min_log2: int, flags: int) -> int:
    """Estimated coded tile size in bytes: header, constants or palette, states and the
    symbols' costs; sets: the tile's set row (one_set_per_plane)."""
    overhead, cost = estimate_parts(choice, freq, sets, min_log2, flags)
    return overhead + cost // 128


def estimate_parts(choice: Choice, freq: np.ndarray, sets: np.ndarray, min_log2: int, flags: int) -> tuple[int, int]:
    """(bytes besides the symbols: header, constants or palette, lane states; the symbols'
    cost in 1/16 bits)."""
    symbols, chans = choice.symbols()
    overhead, cost = choice.header_bytes(), 0
    if symbols.size:
        tables = choice_tables(choice, sets, flags)
        cost = int(cost_table(freq)[tables, symbols].sum())
        overhead += 4 << lanes_log2(cost, min_log2, symbols.size)
    return overhead, cost


def build_tables(choices: list[Choice], sets: list[np.ndarray], n_sets: int, flags: int) -> np.ndarray:
    """Frequencies (n_sets * set_tables(flags), 256) from every coded symbol of the choices (their set
    rows in sets)."""
    return np.stack([normalize(row) for row in count_symbols(choices, sets, n_sets, flags)])


def count_symbols(choices: list[Choice], sets: list[np.ndarray], n_sets: int, flags: int) -> np.ndarray:
    """Counts (n_sets * set_tables(flags), 256) of (table, symbol) of every coded symbol of the choices."""
    counts = np.zeros((n_sets * f2.set_tables(flags), 256), np.int64)
    for choice, sets_row in zip(choices, sets, strict=True):
        symbols, _ = choice.symbols()
        if symbols.size:
            np.add.at(counts, (choice_tables(choice, sets_row, flags), symbols), 1)
    return counts


def tiles_of(image: np.ndarray, tile: int) -> list[np.ndarray]:
    h, w = image.shape[:2]
    return [image[y : y + tile, x : x + tile] for y in range(0, h, tile) for x in range(0, w, tile)]


def encode(image: np.ndarray, tile: int = 64, fast_decode: bool = False, wide_context: bool | None = None,
           runs_tiles: bool = True, runs_first: bool = True, colours: tuple[int, ...] = f2.ENCODER_COLOURS,
           plane_context: bool | None = None) -> bytes:
    """Encode an HxW or HxWxC uint8 image as a v2 stream (reference implementation);
    fast_decode leaves MED out (format_v2.encoder_predictors); wide_context and
    plane_context (A4) default to format_v2.encoder_wide_context and to plane contexts where
    format_v2.encoder_plane_context tries them and table_sets.plane_contexts_pay keeps them
    (tests and fuzz seeds ask for either kind on any image: True keeps them whatever they
    cost); runs_tiles=False
    writes no runs tiles (A2 mode 3); runs_first=False weighs every runs candidate against its
    coded payload instead of taking the sure ones (runs.sure) first; colours: the colour
    transforms to try (tests ask for those the encoders leave out, for the decoders)."""
    image, flags = prepare(image, tile)
    stream = _encode(image, flags, tile, fast_decode, wide_context, runs_tiles, runs_first, colours,
                     plane_context=plane_context)
    if f2.encoder_tries_one_set(len(tiles_of(image, tile))):
        # Small images: also with one table set for every plane; the smaller stream wins.
        one_set = _encode(image, flags, tile, fast_decode, wide_context, runs_tiles, runs_first, colours, one_set=True,
                          plane_context=plane_context)
        if len(one_set) < len(stream):
            return one_set
    return stream


def _encode(image: np.ndarray, flags: int, tile: int, fast_decode: bool, wide_context: bool | None,
            runs_tiles: bool, runs_first: bool, colours: tuple[int, ...], one_set: bool = False,
            plane_context: bool | None = None) -> bytes:
    """encode() of a prepared image (format.prepare) and its flags; one_set: every plane
    (palette index planes too) codes with table set 0."""
    h, w, c = image.shape
    wide = f2.encoder_wide_context(c) if wide_context is None else wide_context
    tries = f2.encoder_plane_context(c, len(tiles_of(image, tile)), fast_decode)
    header = fmt.Header(h, w, c, tile, f2.encoder_flags(
        flags, wide, tries if plane_context is None else plane_context), f2.VERSION)
    sflags = header.flags  # the stream's: how symbols pick their tables (A3, A4)
    tiles = [t.astype(np.int64) for t in tiles_of(image, tile)]
    n_predictors = f2.encoder_predictors(fast_decode)
    min_log2 = f2.min_lanes_log2(fast_decode)
    # A tile of one colour has no palette candidate: constant planes are always smaller.
    pals = [choose_palette(t, n_predictors=n_predictors) for t in tiles]
    pals = [None if pal is not None and len(pal.palette) == 1 else pal for pal in pals]
    runs_choices = {i: RunsChoice(pal.palette, pal.index) for i, pal in enumerate(pals) if pal is not None} \
        if runs_tiles else {}
    # Runs candidates first: the sure ones (runs.sure) take no part in the coded and palette
    # choices or their tables, and are written raw until with_runs replaces them.
    sure = {i for i, ch in runs_choices.items()
            if runs_first and runs.sure(ch.symbols.size - ch.head_symbols, ch.index.size, c)}
    active = [i for i in range(len(tiles)) if i not in sure]
    coded = [choose(t, n_predictors, colours) for t in tiles]
    choices: list[Choice] = [coded[i] for i in range(len(tiles))]
    n_sets = 1 if one_set else c  # one_set_per_plane clips every plane to set n_sets - 1
    candidates = {i for i in active if palette_first(coded[i], pals[i])}
    if candidates:
        # Palette tiles code their index planes with their own table set C. A first guess
        # gives tables; under them each candidate tile takes the smaller estimate (ties:
        # coded), and the image keeps set C only when a palette tile remains.
        n_sets = 1 if one_set else c + 1
        row = one_set_per_plane(c, n_sets)
        first: list[Choice] = [pals[i] if i in candidates else coded[i] for i in active]  # type: ignore[misc]
        freq = build_tables(first, [row] * len(active), n_sets, sflags)
        for i in active:
            pal = pals[i]
            if pal is not None and estimate(pal, freq, row, min_log2, sflags) < estimate(coded[i], freq, row, min_log2, sflags):
                choices[i] = pal
        if not any(isinstance(choices[i], PaletteChoice) for i in active):
            n_sets = 1 if one_set else c
    sets = [one_set_per_plane(c, n_sets)] * len(tiles)
    freq = build_tables([choices[i] for i in active], [sets[i] for i in active], n_sets, sflags)
    # Tiles whose estimated coded size reaches their raw size leave the tables: noise
    # should not pay for tables no tile uses (one re-count, integer estimates: deterministic).
    keep = [i for i in active if estimate(choices[i], freq, sets[i], min_log2, sflags) < 1 + tiles[i].size]
    if len(keep) < len(choices):
        freq = build_tables([choices[i] for i in keep], [sets[i] for i in keep], n_sets, sflags)
    splits = table_sets.applies(len(tiles), c, fast_decode, f2.set_tables(sflags)) and not one_set
    weighs = sflags & f2.FLAG_PLANE_CONTEXT and plane_context is None  # (True: kept whatever they cost)

    def plane_contexts_pay() -> bool:
        counts = count_symbols([choices[i] for i in keep], [sets[i] for i in keep], n_sets, sflags)
        return table_sets.plane_contexts_pay(counts, freq)

    # Plane contexts are weighed before the table-set proposal too (one set per plane): where
    # they do not pay even there, that saves the proposal with eight tables.
    if weighs and splits and not plane_contexts_pay():
        return _encode(image, flags, tile, fast_decode, wide_context, runs_tiles, runs_first, colours, one_set,
                       plane_context=False)
    if splits:
        sets, n_sets, freq = with_table_sets(choices, keep, sets, n_sets, freq, min_log2, sflags)
    if weighs and not plane_contexts_pay():
        # Every choice again with four tables per set (the tables steer them).
        return _encode(image, flags, tile, fast_decode, wide_context, runs_tiles, runs_first, colours, one_set,
                       plane_context=False)
    cum = np.zeros((freq.shape[0], 257), np.int64)
    cum[:, 1:] = np.cumsum(freq, axis=1)
    kept = set(keep)
    payloads = []
    for i, (t, ch) in enumerate(zip(tiles, choices, strict=True)):
        if i not in kept:
            payloads.append(raw_tile(t))
        elif isinstance(ch, PaletteChoice):
            payloads.append(encode_palette_tile(t, ch, freq, cum, sets[i], min_log2, sflags))
        else:
            payloads.append(encode_tile(t, ch, freq, cum, sets[i], min_log2, sflags))
    if runs_choices:
        payloads, freq = with_runs(runs_choices, payloads, freq, sflags)
        if any(payloads[i][0] not in f2.RUNS_MODES for i in sure):
            # A sure tile that did not become a runs tile: the image again, every candidate
            # weighed against its coded payload.
            return _encode(image, flags, tile, fast_decode, wide_context, runs_tiles, False, colours, one_set, plane_context)
    return smaller_of(assemble(header, freq, payloads), header, tiles)


def with_runs(runs_choices: dict[int, RunsChoice], payloads: list[bytes], freq: np.ndarray, flags: int
              ) -> tuple[list[bytes], np.ndarray]:
    """(payloads, freq) with runs tiles (A2 mode 3, their table set appended; flags: the
    stream's) where
    runs.choose picks them among the candidates {tile: RunsChoice} and the runs payload is
    smaller than the one it replaces."""
    cands = sorted(runs_choices)
    choices = [runs_choices[i] for i in cands]
    cap = max(ch.symbols.size for ch in choices)
    syms = np.zeros((len(choices), cap), np.uint8)
    ctxs = np.zeros((len(choices), cap), np.uint8)
    for k, ch in enumerate(choices):
        syms[k, : ch.symbols.size] = ch.symbols
        ctxs[k, : ch.contexts.size] = ch.contexts
    picked = runs.choose(syms, ctxs, np.arange(len(choices)), np.array([ch.symbols.size for ch in choices], np.int64),
                         np.array([ch.fixed_bytes() for ch in choices], np.int64),
                         np.array([len(payloads[i]) for i in cands], np.int64),
                         np.array([ch.index.size for ch in choices], np.int64),
                         np.array([ch.head_symbols for ch in choices], np.int64))
    if picked is None:
        return payloads, freq
    chosen, runs_freq, coded = picked
    if not coded:  # raw palettes pay more (runs.choose): mode 5 tiles, as encoders before mode 6 wrote
        choices = [RunsChoice(ch.palette, ch.index, coded=False) for ch in choices]
    stride = f2.set_tables(flags)
    s = freq.shape[0] // stride
    all_freq = np.concatenate([freq, runs.table_set(runs_freq, stride)])
    cum = np.zeros((all_freq.shape[0], 257), np.int64)
    cum[:, 1:] = np.cumsum(all_freq, axis=1)
    out = list(payloads)
    for i, ch, take in zip(cands, choices, chosen, strict=True):
        if take:
            body = rans_encode(ch.symbols, s * stride + ch.contexts, all_freq, cum, 1)
            head = ch.head(s)
            if len(head) + len(body) < len(out[i]):
                out[i] = head + body
    if out == payloads:
        return payloads, freq
    return out, all_freq


def runs_stream(image: np.ndarray, tile: int = 64, repeats: bool = True, same: bool = True,
                coded: bool = True) -> bytes:
    """A stream whose every tile of 2 .. max_palette(C) colours is a runs tile, however small
    the image (the encoders keep a runs table set only where it pays): one table set, the
    other tiles constant or raw; mode 3 tiles only when not `repeats` (as encoders before
    mode 4 wrote), mode 4 when not `same` (before mode 5), mode 5 when not `coded` (before
    mode 6). Tests and fuzz seeds of images the
    simulator can decode."""
    image, flags = prepare(image, tile)
    h, w, c = image.shape
    tiles = [t.astype(np.int64) for t in tiles_of(image, tile)]
    header = fmt.Header(h, w, c, tile, f2.encoder_flags(flags, f2.encoder_wide_context(c),
                                                        f2.encoder_plane_context(c, len(tiles))), f2.VERSION)
    pals = [choose_palette(t) for t in tiles]
    choices = {i: RunsChoice(pal.palette, pal.index, repeats, same, coded) for i, pal in enumerate(pals)
               if pal is not None and len(pal.palette) > 1}
    counts = sum((ch.histogram() for ch in choices.values()), np.zeros((f2.RUN_CONTEXTS, 256), np.int64))
    freq = runs.table_set(np.stack([normalize(row) for row in counts]), f2.set_tables(header.flags))
    cum = np.zeros((freq.shape[0], 257), np.int64)
    cum[:, 1:] = np.cumsum(freq, axis=1)
    payloads = []
    for i, t in enumerate(tiles):
        if i in choices:
            ch = choices[i]
            payloads.append(ch.head(0) + rans_encode(ch.symbols, ch.contexts, freq, cum, 1))
        elif (t == t[:1, :1]).all():
            payloads.append(bytes([f2.TILE_CODED, 0] + [f2.CH_CONST] * c + [int(v) for v in t[0, 0]]))
        else:
            payloads.append(raw_tile(t))
    return assemble(header, freq, payloads)


def one_set_per_plane(c: int, n_sets: int) -> np.ndarray:
    """A tile's set row when every plane has its own set: plane k (k < C) in set k, the
    palette index plane (key C) in set C, clipped to the sets there are."""
    return np.minimum(np.arange(c + 1), n_sets - 1)


def plane_histograms(choice: Choice, c: int, flags: int) -> list[tuple[int, np.ndarray]]:
    """(plane key, (set_tables(flags), 256) counts of (context, symbol)) of each rANS-coded
    plane of a choice in coded order; a palette tile's index plane has key C."""
    symbols, chans = choice.symbols()
    contexts = choice_tables(choice, np.zeros(c + 1, np.int64), flags)
    out = []
    for key in range(c + 1):
        mine = chans == key
        if mine.any():
            counts = np.zeros((f2.set_tables(flags), 256), np.int64)
            np.add.at(counts, (contexts[mine], symbols[mine]), 1)
            out.append((key, counts))
    return out


def with_table_sets(choices: list[Choice], keep: list[int], sets: list[np.ndarray], n_sets: int, freq: np.ndarray,
                    min_log2: int, flags: int) -> tuple[list[np.ndarray], int, np.ndarray]:
    """(sets, n_sets, freq) with up to 2C table sets per tile class (table_sets.propose), kept
    only when the stream's measure (table_sets.stream_bytes) shrinks."""
    c = len(sets[0]) - 1
    owners: list[tuple[int, int]] = []  # (tile, plane key) of each item
    items = []
    for i in keep:
        for key, counts in plane_histograms(choices[i], c, flags):
            owners.append((i, key))
            items.append(counts)
    if not items:
        return sets, n_sets, freq
    now = np.array([sets[i][key] for i, key in owners], np.int64)
    proposal, n_proposed = table_sets.propose(np.stack(items), now, n_sets, f2.MAX_SETS_PER_CHANNEL * c)
    if n_proposed == n_sets and (proposal == now).all():
        return sets, n_sets, freq
    proposed = [np.zeros(c + 1, np.int64) for _ in choices]  # planes that are no item name set 0
    for (i, key), s in zip(owners, proposal, strict=True):
        proposed[i][key] = s
    kept_choices = [choices[i] for i in keep]
    proposed_counts = count_symbols(kept_choices, [proposed[i] for i in keep], n_proposed, flags)
    proposed_freq = np.stack([normalize(row) for row in proposed_counts])
    before = table_sets.stream_bytes(sum(estimate_parts(choices[i], freq, sets[i], min_log2, flags)[0] for i in keep),
                                     count_symbols(kept_choices, [sets[i] for i in keep], n_sets, flags), freq)
    after = table_sets.stream_bytes(
        sum(estimate_parts(choices[i], proposed_freq, proposed[i], min_log2, flags)[0] for i in keep), proposed_counts,
        proposed_freq)
    if after < before:
        return proposed, n_proposed, proposed_freq
    return sets, n_sets, freq


def smaller_of(stream: bytes, header: fmt.Header, tiles: list[np.ndarray]) -> bytes:
    """The stream, or every tile raw with empty tables when that is smaller (noise: tables
    that fit it cost more than they save)."""
    n_tables = header.channels * f2.set_tables(header.flags)
    raw_lengths = np.array([1 + t.size for t in tiles], np.int64)
    all_raw = f2.HEADER_SIZE + n_tables + f2.tile_table_size(raw_lengths, header.flags) + int(raw_lengths.sum())
    if len(stream) <= all_raw:
        return stream
    return assemble(header, np.zeros((n_tables, 256), np.int32), [raw_tile(t) for t in tiles])


# ----------------------------------------------------------------------------- decoder


def rans_decode(
    buf: np.ndarray, start: int, end: int, n: int, lanes: int, set_of: np.ndarray, tables: f2.TablesV2,
    lut: np.ndarray, flags: int, plane: int = 0,
) -> np.ndarray:
    """Decode n symbols from buf[start:end] (states then words); set_of[i] is symbol i's set,
    flags: the stream's (contexts, A4), plane: th*tw of a coded tile (plane bits with
    FLAG_PLANE_CONTEXT), 0 for a palette tile."""
    wide = bool(flags & f2.FLAG_WIDE_CONTEXT)
    stride = f2.set_tables(flags)
    plane = plane if flags & f2.FLAG_PLANE_CONTEXT and plane >= f2.PLANE_CONTEXT_MIN_PIXELS else 0
    distances = np.array(f2.WIDE_DISTANCES if wide else (f2.CONTEXT_DISTANCE,))
    context_of = f2.context_of_value(np.arange(256), wide)  # (looked up: a step is often 2 symbols)
    states = buf[start : start + 4 * lanes].view("<u4").astype(np.int64)
    if (states < f2.STATE_LOW).any():
        raise CodecError(f"rANS state below {f2.STATE_LOW}")
    words = buf[start + 4 * lanes : end].view("<u2").astype(np.int64)
    ptr = 0
    out = np.zeros(n, np.int64)
    for step in range(-(-n // lanes)):
        i = np.arange(step * lanes, min(n, step * lanes + lanes))
        x = states[: i.size]
        # Every context symbol is at least 63 back (the plane bit's 64), so with lanes <= 32
        # it was decoded in an earlier step (by any lane): out already holds it.
        back = i[:, None] - distances[None, :]
        u = np.where(back >= 0, out[np.maximum(back, 0)], 0).max(axis=1)
        t = set_of[i] * stride + context_of[u]
        if plane:
            t += f2.PLANE_CONTEXT * ((i >= plane) & (out[np.maximum(i - plane, 0)] > 0))
        slot = x & (f2.PROB_SCALE - 1)
        s = lut[t, slot].astype(np.int64)
        f = tables.freq[t, s].astype(np.int64)
        if (f == 0).any():
            raise CodecError("rANS symbol from an empty frequency table")
        x = f * (x >> f2.PROB_BITS) + slot - tables.cum[t, s]
        need = np.flatnonzero(x < f2.STATE_LOW)
        if ptr + need.size > words.size:
            raise CodecError("rANS word stream ends early")
        x[need] = (x[need] << 16) | words[ptr : ptr + need.size]
        ptr += need.size
        states[: i.size] = x
        out[i] = s
    if ptr != words.size or (states != f2.STATE_LOW).any():
        raise CodecError("rANS stream does not end in the initial states with every word read")
    return out


class OneLane:
    """One rANS lane read a symbol at a time (runs tiles: each symbol's table depends on the
    symbols before it)."""

    def __init__(self, buf: np.ndarray, start: int, end: int, tables: f2.TablesV2, lut: np.ndarray,
                 table_set: int, stride: int) -> None:
        self.x = int(buf[start : start + 4].view("<u4")[0])
        if self.x < f2.STATE_LOW:
            raise CodecError(f"rANS state below {f2.STATE_LOW}")
        self.words = buf[start + 4 : end].view("<u2")
        self.ptr = 0
        self.tables, self.lut, self.first = tables, lut, table_set * stride

    def symbol(self, context: int) -> int:
        t = self.first + context
        slot = self.x & (f2.PROB_SCALE - 1)
        s = int(self.lut[t, slot])
        f = int(self.tables.freq[t, s])
        if f == 0:
            raise CodecError("rANS symbol from an empty frequency table")
        self.x = f * (self.x >> f2.PROB_BITS) + slot - int(self.tables.cum[t, s])
        if self.x < f2.STATE_LOW:
            if self.ptr >= self.words.size:
                raise CodecError("rANS word stream ends early")
            self.x = (self.x << 16) | int(self.words[self.ptr])
            self.ptr += 1
        return s

    def finish(self) -> None:
        if self.ptr != self.words.size or self.x != f2.STATE_LOW:
            raise CodecError("rANS stream does not end in the initial state with every word read")


def decode_tile(buf: np.ndarray, s: f2.StreamV2, i: int, th: int, tw: int, lut: np.ndarray) -> np.ndarray:
    c = s.header.channels
    flags = s.header.flags
    start, end = int(s.offsets[i]), int(s.offsets[i + 1])
    if s.mode[i] == f2.TILE_RAW:
        return buf[start + 1 : end].reshape(th, tw, c).astype(np.int64)
    if s.mode[i] in f2.RUNS_MODES:
        n_colours = int(s.palette_size[i])
        lane = OneLane(buf, int(s.words_start[i]) - 4, end, s.tables, lut, int(s.table_set[i, 0]),
                       f2.set_tables(flags))
        if s.mode[i] == f2.TILE_RUNS_PALETTE:
            palette = palette_decode(lane.symbol, n_colours, c)
        else:
            palette = buf[start + f2.RUNS_HEADER : start + f2.RUNS_HEADER + n_colours * c].reshape(n_colours, c)
        packed = pack_colours(palette[None].astype(np.int64))[0]
        if (np.diff(packed) <= 0).any():
            raise CodecError("runs tile: palette colours not in increasing order")
        index = runs_decode(lane.symbol, th, tw, n_colours, s.mode[i] != f2.TILE_RUNS,
                            s.mode[i] in (f2.TILE_RUNS_SAME, f2.TILE_RUNS_PALETTE))
        lane.finish()
        return palette[index].astype(np.int64)
    if s.mode[i] == f2.TILE_PALETTE:
        n_colours = int(s.palette_size[i])
        palette = buf[start + 4 : start + 4 + n_colours * c].reshape(n_colours, c).astype(np.int64)
        lanes = 1 << int(s.lanes_log2[i])
        set_of = np.full(th * tw, s.table_set[i, 0], np.int64)
        symbols = rans_decode(buf, int(s.words_start[i]) - 4 * lanes, end, th * tw, lanes, set_of, s.tables, lut, flags)
        index = unpredict(unzigzag(symbols.reshape(th, tw)), int(s.predictor[i, 0]))
        if (index >= n_colours).any():
            raise CodecError(f"palette index {int(index.max())} at or above the palette size {n_colours}")
        return palette[index]
    planes = np.zeros((c, th, tw), np.int64)
    rans = [k for k in range(c) if s.ch_mode[i, k] == f2.CH_RANS]
    consts = [k for k in range(c) if s.ch_mode[i, k] == f2.CH_CONST]
    for j, k in enumerate(consts):
        planes[k] = buf[start + 2 + c + j]
    if rans:
        set_of = np.repeat(s.table_set[i, rans], th * tw)
        lanes = 1 << int(s.lanes_log2[i])
        state_at = int(s.words_start[i]) - 4 * lanes
        symbols = rans_decode(buf, state_at, end, set_of.size, lanes, set_of, s.tables, lut, flags, th * tw)
        for j, k in enumerate(rans):
            res = unzigzag(symbols[j * th * tw : (j + 1) * th * tw].reshape(th, tw))
            planes[k] = unpredict(res, int(s.predictor[i, k]))
    return colour_inverse(np.moveaxis(planes, 0, 2), int(s.colour[i]))


def decode(data: bytes, roi: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """Decode a v2 stream (reference implementation); roi = (y0, x0, y1, x1) crops the result."""
    buf = fmt.as_bytes(data)
    s = f2.read_stream(buf)
    header = s.header
    lut = s.tables.lut()
    t = header.tile
    out = np.zeros((header.height, header.width, header.channels), np.uint8)
    th_all, tw_all = fmt.tile_geometry(header)
    for i in range(header.n_tiles):
        ty, tx = divmod(i, header.tiles_x)
        tile = decode_tile(buf, s, i, int(th_all[i]), int(tw_all[i]), lut)
        out[ty * t : ty * t + tile.shape[0], tx * t : tx * t + tile.shape[1]] = tile
    y0, x0, y1, x1 = fmt.normalize_roi(header, roi)
    out = out[y0:y1, x0:x1]
    return out[:, :, 0] if header.is_2d else out
