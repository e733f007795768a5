"""What more modelling would buy the lossless codec: entropy estimates of ideas, measured on the
encoder's own choices, before anyone builds them into four decoders.

``python -m prepkit.bench.modelling SETS_DIR [--sets rendered photos] [--limit 12]
[--ideas refine signs xcolour predictors]``

Each image is encoded by ``prepkit.lossless``; its coded tiles (mode 1, every plane
rANS-coded, full tiles) are read back with ``format_v2.read_stream`` and their planes rebuilt
from the image with the stream's colour transform, predictors and table sets. Then:

- ``refine``: each tile's predictors (and table sets) chosen again by their cost under the
  stream's own tables, contexts included, plane by plane, where the encoders choose by the
  zig-zag bit lengths (docs/LOSSLESS.md A9). Also with every colour transform tried, and with
  a context-free cost per (set, symbol) in place of the bit lengths. Most of it comes from
  the table sets. No table is counted again after the new choices, as an encoder would (which
  moves the figure either way; docs/BENCHMARKS.md has a trial that does). Reported as the
  share of the stream saved.
- ``signs``: residual signs. A4's context is the largest of four earlier symbols, which says
  how large the residual around is but not its sign. Three variants: the symbol negated where
  the residual above is negative; negated by a table of 27 bits per image, learned from the
  signs (zero, negative, positive) of the residuals above-left, above and above-right; and the
  sign of the residual above as a context factor (three times the tables).
- ``xcolour``: WebP's cross-colour transform moved to the residuals: plane 1's residual less
  ``a * r0 >> 3`` and plane 2's less ``(b * r0 + c * r1) >> 3``, a, b, c per tile from a least
  squares fit, rounded (three coefficient bytes per tile are counted).
- ``predictors``: six more predictors for a plane to choose from (above-left, above-right,
  their mean, two to the left, a diagonal gradient and the mean of four), picked per plane by
  the sum of log2(1 + |r|).

``signs``, ``xcolour`` and ``predictors`` compare static conditional entropies: per image, one
histogram per (table set, plane bit, context) and the symbols' -log2 p under it, for the
encoder's symbols and for the idea's, so both sides are measured alike (the tables' own bytes
and the lane states are left out). Slow (numpy per tile): minutes per set.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from prepkit import lossless
from prepkit.bench.lossless_eval import load_sets
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import reference_v2 as r2

IDEAS = ("refine", "signs", "xcolour", "predictors")
COEFFICIENT_SHIFT = 3  # cross-colour coefficients in 1/8
COEFFICIENT_LIMIT = 16


@dataclass
class CodedTile:
    """One coded tile of a stream, as the encoder chose it."""

    pixels: np.ndarray  # int64 (th, tw, C)
    colour: int
    predictors: list[int]
    sets: list[int]

    def planes(self, colour: int | None = None) -> np.ndarray:
        """int64 (th, tw, C): the tile's colour-transformed planes (the stream's transform by default)."""
        k = self.colour if colour is None else colour
        return r2.colour_forward(self.pixels, k) if self.pixels.shape[2] >= 3 else self.pixels

    def symbols(self) -> list[np.ndarray]:
        """The zig-zag residual symbols of each plane as the stream codes them, flattened."""
        q = self.planes()
        return [r2.zigzag(r2.predict(q[..., k], self.predictors[k])).ravel() for k in range(q.shape[2])]


@dataclass
class Stream:
    """An encoded image and the context model of its stream."""

    size: int
    tiles: list[CodedTile]
    freq: np.ndarray  # int64 (tables, 256): the stream's frequencies
    cost: np.ndarray  # int64 (tables, 256): 1/16 bits (format_v2.cost_table)
    set_tables: int
    n_sets: int
    wide: bool
    plane_bits: bool
    runs_sets: np.ndarray  # bool (n_sets,): the sets that hold runs tiles' tables (no plane may take them)


def coded_tiles(image: np.ndarray) -> Stream:
    """Encode `image` and collect its full-size coded tiles whose planes are all rANS-coded."""
    if image.ndim == 2:
        image = image[..., None]
    data = lossless.encode(image)
    s = f2.read_stream(np.frombuffer(data, np.uint8))
    t = s.header.tile
    per_row = -(-image.shape[1] // t)
    c = image.shape[2]
    tiles = []
    for i in np.flatnonzero(s.mode == f2.TILE_CODED):
        if (s.ch_mode[i, :c] == f2.CH_CONST).any():
            continue
        y0, x0 = (i // per_row) * t, (i % per_row) * t
        pixels = image[y0 : y0 + t, x0 : x0 + t].astype(np.int64)
        if pixels.shape[:2] != (t, t):
            continue
        tiles.append(CodedTile(pixels, int(s.colour[i]), [int(p) for p in s.predictor[i, :c]],
                               [int(v) for v in s.table_set[i, :c]]))
    flags = s.header.flags
    g = f2.set_tables(flags)
    freq = s.tables.freq.astype(np.int64)
    n_sets = s.tables.n_tables // g
    runs_sets = np.zeros(n_sets, np.bool_)
    for i in np.flatnonzero(np.isin(s.mode, f2.RUNS_MODES)):
        first = int(s.table_set[i, 0])  # its contexts' tables run on into the next set with four a set
        runs_sets[first : first + f2.runs_sets(g)] = True
    return Stream(len(data), tiles, freq, f2.cost_table(freq).astype(np.int64), g, n_sets,
                  bool(flags & f2.FLAG_WIDE_CONTEXT), bool(flags & f2.FLAG_PLANE_CONTEXT), runs_sets)


# ----------------------------------------------------------------------------- refine


def plane_costs(stream: Stream, before: np.ndarray, symbols: np.ndarray) -> np.ndarray:
    """Cost in 1/16 bits of one plane's symbols under each table set, after the tile's
    earlier planes' symbols `before` (their context values and plane bits reach into it);
    a runs set costs more than any real choice."""
    plane = symbols.size
    sequence = np.concatenate([before, symbols])
    ctx = f2.contexts(sequence, stream.wide, plane if stream.plane_bits else 0)[before.size :]
    rows = np.arange(stream.n_sets)[:, None] * stream.set_tables + ctx[None, :]
    costs = stream.cost[rows, symbols[None, :]].sum(axis=1)
    return np.where(stream.runs_sets, np.iinfo(np.int64).max // 4, costs)


def tile_cost(stream: Stream, planes: list[np.ndarray], sets: Sequence[int]) -> int:
    """Cost in 1/16 bits of a tile's planes in their table sets."""
    before = np.zeros(0, np.int64)
    total = 0
    for symbols, s in zip(planes, sets, strict=True):
        total += int(plane_costs(stream, before, symbols)[s])
        before = np.concatenate([before, symbols])
    return total


def cheapest(stream: Stream, tile: CodedTile, colour: int, merged: np.ndarray | None = None) -> tuple[int, list[np.ndarray]]:
    """(cost, symbols) of the tile under `colour` with each plane's predictor and set picked
    greedily in plane order by the cost under the stream's tables, or by the context-free
    cost `merged` (set, symbol) when given (then costed for real afterwards)."""
    n_predictors = f2.PREDICTORS
    before = np.zeros(0, np.int64)
    total = 0
    chosen = []
    q = tile.planes(colour)
    for k in range(q.shape[2]):
        options = []
        for p in range(n_predictors):
            symbols = r2.zigzag(r2.predict(q[..., k], p)).ravel()
            if merged is not None:
                options.append((int(merged[tile.sets[k], symbols].sum()), p, symbols))
            else:
                options.append((int(plane_costs(stream, before, symbols).min()), p, symbols))
        cost, _, symbols = min(options, key=lambda o: (o[0], o[1]))
        if merged is not None:
            cost = int(plane_costs(stream, before, symbols).min())
        total += cost
        chosen.append(symbols)
        before = np.concatenate([before, symbols])
    return total, chosen


def refine(stream: Stream) -> dict[str, float]:
    """Bytes saved by choosing predictors (and sets) by the stream's own costs: with the
    stream's colour transform, with every transform the encoders try, and by a context-free
    cost per (set, symbol); each as a share of the stream. Never worse than the encoder's
    choice: a tile keeps it where the new one is not cheaper."""
    counts = stream.freq.reshape(stream.n_sets, stream.set_tables, 256).sum(axis=1).astype(np.float64)
    merged = np.round(-16 * np.log2(np.maximum(counts, 0.5) / np.maximum(counts.sum(axis=1, keepdims=True), 1)))
    saved = {"same colour transform": 0, "every colour transform": 0, "context-free cost": 0}
    for tile in stream.tiles:
        current = tile_cost(stream, tile.symbols(), tile.sets)
        colours = f2.ENCODER_COLOURS if tile.pixels.shape[2] >= 3 else (0,)
        by_colour = {k: cheapest(stream, tile, k)[0] for k in colours}  # the stream's transform among them
        same = by_colour[tile.colour]
        every = min(by_colour.values())
        free = min(cheapest(stream, tile, k, merged)[0] for k in colours)
        saved["same colour transform"] += max(0, current - same)
        saved["every colour transform"] += max(0, current - every)
        saved["context-free cost"] += max(0, current - free)
    return {name: value / 128 / stream.size for name, value in saved.items()}


# ----------------------------------------------------------------------------- entropies


@dataclass
class Histograms:
    """Symbol counts per key; entropy() is the static conditional entropy in bytes."""

    counts: dict[int, np.ndarray] = field(default_factory=dict)

    def add(self, keys: np.ndarray, symbols: np.ndarray) -> None:
        for key in np.unique(keys):
            row = self.counts.setdefault(int(key), np.zeros(256, np.int64))
            row += np.bincount(symbols[keys == key], minlength=256)

    def entropy(self) -> float:
        total = 0.0
        for row in self.counts.values():
            h = row[row > 0]
            total -= float((h * np.log2(h / h.sum())).sum())
        return total / 8


def model_keys(stream: Stream, tile: CodedTile, sequence: np.ndarray) -> np.ndarray:
    """Key of every symbol of a tile's sequence: (table set, plane bit, A4 context)."""
    plane = tile.pixels.shape[0] * tile.pixels.shape[1]
    ctx = f2.contexts(sequence, stream.wide, plane if stream.plane_bits else 0)
    return np.repeat(np.asarray(tile.sets), plane) * f2.MAX_SET_TABLES + ctx


def back(sequence: np.ndarray, distance: int) -> np.ndarray:
    """The symbol `distance` earlier in the sequence (0 before its start)."""
    out = np.zeros_like(sequence)
    if distance < sequence.size:
        out[distance:] = sequence[:-distance]
    return out


def sign_class(symbols: np.ndarray) -> np.ndarray:
    """0 for a zero residual, 1 for a negative one (odd zig-zag code), 2 for a positive one."""
    return np.where(symbols == 0, 0, np.where(symbols & 1, 1, 2))


def negated(symbols: np.ndarray) -> np.ndarray:
    """The zig-zag code of the negated residual (-(-128) is -128: 255 stays 255)."""
    r = r2.unzigzag(symbols)
    return r2.zigzag(((-r + 128) & 255) - 128)


def signs(stream: Stream) -> dict[str, float]:
    """Entropy of the symbols with sign modelling, over the encoder's (ratios: below 1 saves)."""
    sequences, keys, patterns = [], [], []
    for tile in stream.tiles:
        sequence = np.concatenate(tile.symbols())
        sequences.append(sequence)
        keys.append(model_keys(stream, tile, sequence))
        patterns.append(sign_class(back(sequence, 64)) * 9 + sign_class(back(sequence, 65)) * 3
                        + sign_class(back(sequence, 63)))
    symbols, key, pattern = (np.concatenate(x) for x in (sequences, keys, patterns))
    flipped = negated(symbols)

    def entropy(k: np.ndarray, s: np.ndarray) -> float:
        h = Histograms()
        h.add(k, s)
        return h.entropy()

    base = entropy(key, symbols)
    if base <= 0:
        return {}
    above_negative = pattern // 9 == 1
    nonzero = symbols > 0
    negatives = np.bincount(pattern[nonzero], weights=(symbols[nonzero] & 1), minlength=27)
    learned = (2 * negatives > np.bincount(pattern[nonzero], minlength=27))[pattern]
    return {
        "negate where the residual above is negative": entropy(key, np.where(above_negative, flipped, symbols)) / base,
        "negate by a learned table of 27 sign patterns (+4 bytes)":
            (entropy(key, np.where(learned, flipped, symbols)) + 4) / base,
        "sign of the residual above as a context (3x the tables)": entropy(key * 3 + pattern // 9, symbols) / base,
    }


def fit_coefficients(target: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """Integer coefficients (in 1/8) predicting `target` from the columns of `basis`: the least
    squares fit rounded, or floored per coefficient, or zero, whichever leaves the smallest
    sum of log2(1 + |r|)."""
    fit, *_ = np.linalg.lstsq(basis.astype(np.float64), target.astype(np.float64), rcond=None)
    scaled = fit * (1 << COEFFICIENT_SHIFT)
    floor = np.clip(np.floor(scaled), -COEFFICIENT_LIMIT, COEFFICIENT_LIMIT).astype(np.int64)
    candidates = [np.zeros(basis.shape[1], np.int64),
                  np.clip(np.round(scaled), -COEFFICIENT_LIMIT, COEFFICIENT_LIMIT).astype(np.int64)]
    candidates += [floor + np.array(step) for step in itertools.product((0, 1), repeat=basis.shape[1])]
    return min(candidates, key=lambda a: float(np.log2(1 + np.abs(signed(target - ((basis @ a) >> COEFFICIENT_SHIFT)))).sum()))


def signed(r: np.ndarray) -> np.ndarray:
    """A residual mod 256 as -128..127."""
    return ((r + 128) & 255) - 128


def xcolour(stream: Stream) -> dict[str, float]:
    """Entropy with WebP's cross-colour transform on the residuals (three coefficient bytes per
    tile), over the encoder's."""
    base, new = Histograms(), Histograms()
    tiles = 0
    for tile in stream.tiles:
        if tile.pixels.shape[2] < 3:
            continue
        q = tile.planes()
        r = [signed(r2.predict(q[..., k], tile.predictors[k])).ravel() for k in range(3)]
        sequence = np.concatenate([r2.zigzag(x) for x in r])
        base.add(model_keys(stream, tile, sequence), sequence)
        b1 = r[0][:, None]
        r1 = signed(r[1] - ((b1 @ fit_coefficients(r[1], b1)) >> COEFFICIENT_SHIFT))
        b2 = np.stack([r[0], r[1]], axis=1)
        r2_ = signed(r[2] - ((b2 @ fit_coefficients(r[2], b2)) >> COEFFICIENT_SHIFT))
        sequence = np.concatenate([r2.zigzag(r[0]), r2.zigzag(r1), r2.zigzag(r2_)])
        new.add(model_keys(stream, tile, sequence), sequence)
        tiles += 1
    if not tiles or base.entropy() <= 0:
        return {}
    return {"cross-colour on the residuals (+3 bytes a tile)": (new.entropy() + 3 * tiles) / base.entropy()}


def extra_predictions(q: np.ndarray) -> list[np.ndarray]:
    """Six more predictions of a (th, tw) plane (neighbours outside the tile 0): above-left,
    above-right, their mean, two to the left, the diagonal gradient UL + LL - ULL, the mean
    of UL, UR, LL and UU."""
    th, tw = q.shape
    p = np.zeros((th + 2, tw + 4), np.int64)
    p[2:, 2 : 2 + tw] = q

    def at(dy: int, dx: int) -> np.ndarray:
        return p[2 + dy : 2 + dy + th, 2 + dx : 2 + dx + tw]

    ul, ur, ll, uu = at(-1, -1), at(-1, 1), at(0, -2), at(-2, 0)
    return [ul, ur, (ul + ur) >> 1, ll, ul + ll - at(-1, -2), (ul + ur + ll + uu + 2) >> 2]


def predictors(stream: Stream) -> dict[str, float]:
    """Entropy with six more predictors per plane (picked by the sum of log2(1 + |r|) where it
    beats the encoder's own), over the encoder's."""
    base, new = Histograms(), Histograms()
    for tile in stream.tiles:
        q = tile.planes()
        mine, chosen = [], []
        for k in range(q.shape[2]):
            own = signed(r2.predict(q[..., k], tile.predictors[k]))
            options = [own] + [signed(q[..., k] - guess) for guess in extra_predictions(q[..., k])]
            best = min(options, key=lambda r: float(np.log2(1 + np.abs(r)).sum()))
            mine.append(r2.zigzag(own).ravel())
            chosen.append(r2.zigzag(best).ravel())
        for h, planes in ((base, mine), (new, chosen)):
            sequence = np.concatenate(planes)
            h.add(model_keys(stream, tile, sequence), sequence)
    if base.entropy() <= 0:
        return {}
    return {"six more predictors": new.entropy() / base.entropy()}


ESTIMATES = {"refine": refine, "signs": signs, "xcolour": xcolour, "predictors": predictors}


def estimate(images: Sequence[np.ndarray], ideas: Sequence[str]) -> Iterator[tuple[str, str, float]]:
    """(idea, variant, value over the images), each image weighted by its stream's bytes:
    refine's shares of the stream saved, the other ideas' entropy ratios."""
    totals: dict[tuple[str, str], float] = {}
    weights: dict[tuple[str, str], float] = {}
    for image in images:
        stream = coded_tiles(image)
        if not stream.tiles:
            continue
        for idea in ideas:
            for name, value in ESTIMATES[idea](stream).items():
                totals[idea, name] = totals.get((idea, name), 0.0) + value * stream.size
                weights[idea, name] = weights.get((idea, name), 0.0) + stream.size
    for (idea, name), total in totals.items():
        yield idea, name, total / weights[idea, name]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m prepkit.bench.modelling", description=__doc__.split("\n\n")[0])
    parser.add_argument("sets_dir", help="a folder written by `python -m prepkit.bench.evalsets build`")
    parser.add_argument("--sets", nargs="+", help="only these sets")
    parser.add_argument("--limit", type=int, help="at most this many images per set, evenly spaced")
    parser.add_argument("--ideas", nargs="+", choices=IDEAS, default=list(IDEAS))
    args = parser.parse_args(argv)
    print("| set | idea | variant | estimate |")
    print("|---|---|---|---|")
    for name, images in load_sets(args.sets_dir, args.sets, args.limit).items():
        for idea, variant, value in estimate(images, args.ideas):
            shown = f"{value * 100:.2f}% of the stream saved" if idea == "refine" else f"{value:.4f}x the entropy"
            print(f"| {name} | {idea} | {variant} | {shown} |", flush=True)


if __name__ == "__main__":
    main()
