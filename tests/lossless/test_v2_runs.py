"""Version 2 runs tiles (docs/LOSSLESS.md A2 modes 3 to 6): the run symbols of the numba
encoder equal the reference's and decode back, with row repeats and implied labels and
without, and so do coded palettes; both encoders pick runs tiles on masks, byte-identical;
mode 3, 4 and 5 streams still decode; the decoders agree on every damaged stream; malformed
runs tiles are refused."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from prepkit import lossless
from prepkit.errors import CodecError
from prepkit.lossless import cpu_v2, hostplan, mask_encoder, runs, small_encoder
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import plan as plan_mod
from prepkit.lossless import reference_v2 as r2

from .images import (
    assert_byte_flips_refused_or_agree,
    general_encode,
    implied_label_symbols,
    mixed_image,
    repeat_symbols,
    runs_tile_stream,
)


def blobs(h: int, w: int, c: int | None, seed: int, n: int = 7) -> np.ndarray:
    """A segmentation-like mask: overlapping discs of n - 1 labels on 0 (colours when c > 1)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    label = np.zeros((h, w), np.int64)
    for k in range(1, n):
        cy, cx, r = rng.integers(0, h), rng.integers(0, w), rng.integers(6, max(7, min(h, w) // 2))
        label[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = k
    colours = rng.integers(0, 256, (n, c or 1))
    image = colours[label].astype(np.uint8)
    return image[:, :, 0] if c is None else image


def _index_planes() -> list[tuple[np.ndarray, int]]:
    """Index planes of every shape class (1 x N, N x 1, partial and full tiles) and palette size."""
    rng = np.random.default_rng(0)
    out = []
    for h, w in [(64, 64), (1, 40), (37, 1), (17, 23), (64, 5), (3, 64), (1, 1)]:
        for n in (1, 2, 5, 40):
            image = blobs(h, w, None, seed=h * 100 + w + n, n=n + 1)
            palette = np.unique(image)
            out.append((np.searchsorted(palette, image), palette.size))
        noise = rng.integers(0, 3, (h, w))  # runs of one pixel, passes and long lengths
        out.append((noise, int(noise.max()) + 1))
    stripes = np.zeros((64, 64), np.int64)
    for y in range(64):  # boundaries that move by more than RUN_REACH: passes and explicit lengths
        stripes[y, (y * 5) % 60 : (y * 5) % 60 + 3] = 1
        stripes[y, 63 - y % 9 :] = 2
    out.append((stripes, 3))
    return out


@pytest.mark.parametrize(("repeats", "same"), [(True, True), (True, False), (False, False)])  # modes 5, 4, 3
def test_run_symbols_decode_back_and_match_the_numba_encoder(repeats: bool, same: bool) -> None:
    for index, n_colours in _index_planes():
        syms, ctxs = r2.runs_symbols(index, n_colours, repeats, same)
        assert syms.size <= 4 * index.size + 2  # within the decoder's symbol scratch
        position = iter(range(syms.size))

        def next_symbol(context: int, syms: np.ndarray = syms, ctxs: np.ndarray = ctxs,
                        position: Iterator[int] = position) -> int:
            i = next(position)
            assert ctxs[i] == context  # the decoder asks for the table the encoder used
            return int(syms[i])

        th, tw = index.shape
        np.testing.assert_array_equal(r2.runs_decode(next_symbol, th, tw, n_colours, repeats, same), index)
        assert next(position, None) is None
        for values, base, stride, labels in _planes_as_read(index):
            words = np.zeros(64, np.uint64)
            equal = np.uint64(runs.plane_rows(values, base, stride, th, tw, words))  # (a Python int past 2**63)
            rows = values[base + stride * np.arange(th)[:, None] + np.arange(tw)]
            assert equal == sum(1 << y for y in range(1, th) if (rows[y] == rows[y - 1]).all())
            assert [int(words[y]) for y in range(th)] == [
                sum(1 << x for x in range(1, tw) if rows[y, x] != rows[y, x - 1]) for y in range(th)]
            assert runs.symbols_floor(words, equal, th, repeats, same) <= syms.size
            got_syms = np.zeros(4 * index.size + 64, np.int64)
            got_ctxs = np.zeros_like(got_syms)
            n = runs.tile_symbols(values, base, stride, labels, th, tw, words, equal, got_syms, got_ctxs,
                                  4 * index.size, repeats, same)
            np.testing.assert_array_equal(got_syms[:n], syms)
            np.testing.assert_array_equal(got_ctxs[:n], ctxs)
            # With a limit the count stops past it at a row's end, the symbols so far unchanged.
            limit = syms.size // 3
            cut = runs.tile_symbols(values, base, stride, labels, th, tw, words, equal, got_syms, got_ctxs, limit,
                                    repeats, same)
            assert cut == syms.size or limit < cut <= limit + 4 * tw
            np.testing.assert_array_equal(got_syms[:cut], syms[:cut])


def _planes_as_read(index: np.ndarray) -> list[tuple[np.ndarray, int, int, np.ndarray]]:
    """An index plane as runs.tile_symbols reads it (values, base, stride, labels): the plane
    itself with identity labels, and grey values (in the indices' order, not consecutive) at an
    offset inside a wider image, labelled by their index."""
    th, tw = index.shape
    grey = np.arange(index.max() + 1) * 3 + 7  # ascending values
    labels = np.zeros(256, np.uint8)
    labels[grey] = np.arange(grey.size)
    image = np.full((th + 3, tw + 5), 255, np.uint8)
    image[2 : 2 + th, 3 : 3 + tw] = grey[index]
    stride = image.shape[1]
    return [(index.astype(np.uint8).reshape(-1), 0, tw, np.arange(256, dtype=np.uint8)),
            (image.reshape(-1), 2 * stride + 3, stride, labels)]


@pytest.mark.parametrize("c", [None, 1, 3, 4])
def test_encoders_make_runs_tiles_of_masks(c: int | None) -> None:
    image = blobs(150, 170, c, seed=3)
    data = lossless.encode(image, version=2)
    assert data == r2.encode(image)
    s = f2.read_stream(np.frombuffer(data, np.uint8))
    # Mode 6, or mode 5 where raw palettes are smaller (runs.choose): one of them for every runs tile.
    written = np.unique(s.mode[np.isin(s.mode, f2.RUNS_MODES)])
    assert written.size == 1 and written[0] in (f2.TILE_RUNS_SAME, f2.TILE_RUNS_PALETTE)
    assert np.isin(s.mode, f2.RUNS_MODES).sum() >= 4
    runs_set = s.table_set[s.mode == written[0], 0].max()
    assert data[7] == runs_set + f2.runs_sets(f2.set_tables(data[5]))  # the runs sets come last
    np.testing.assert_array_equal(lossless.decode(data), image)
    np.testing.assert_array_equal(r2.decode(data), image)
    np.testing.assert_array_equal(lossless.decode(data, roi=(7, 11, 140, 99)), image[7:140, 11:99])
    without = cpu_v2.encode(image, runs_tiles=False)
    assert len(data) < len(without)
    assert without == r2.encode(image, runs_tiles=False)
    assert hostplan.plan_buffers([data]).work.tolist() == plan_mod.build([data]).work.tolist()


def test_runs_first_and_weighed_encoders_agree() -> None:
    """The sure candidates (runs.sure) become runs tiles before any other choice; with
    runs_first=False every candidate is weighed against its coded payload. Both encoders write
    the same bytes either way, and both streams decode."""
    image = blobs(150, 170, 3, seed=8)
    index = np.unique(image.reshape(-1, 3), axis=0, return_inverse=True)[1].reshape(150, 170)
    sure = [i for i, t in enumerate(r2.tiles_of(index, 64)) if np.unique(t).size > 1
            and runs.sure(r2.runs_symbols(np.unique(t, return_inverse=True)[1].reshape(t.shape),
                                          np.unique(t).size)[0].size, t.size, 3)]
    assert len(sure) >= 2
    for first in (True, False):
        data = cpu_v2.encode(image, runs_first=first)
        assert data == r2.encode(image, runs_first=first)
        np.testing.assert_array_equal(lossless.decode(data), image)
        s = f2.read_stream(np.frombuffer(data, np.uint8))
        assert np.isin(s.mode[sure], [f2.TILE_RUNS_SAME, f2.TILE_RUNS_PALETTE]).all()  # (mode 5: raw palettes pay)


def test_sure_tiles_skip_the_coded_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The numba encoder's coded choice (_choose_symbols_all) is told which tiles are sure, and
    those tiles have no coded symbols (a mask with a tile of another kind: one of constant and
    sure tiles only takes the short path, mask_encoder, which has no coded choice; images of
    up to four tiles take small_encoder's, in one compiled call: left out here)."""
    monkeypatch.setattr(small_encoder, "stream", lambda *args: None)
    seen: list[np.ndarray] = []
    kernel = cpu_v2._choose_symbols_all
    monkeypatch.setattr(cpu_v2, "_choose_symbols_all", lambda *a: (seen.append(a[6].copy()), kernel(*a))[1])
    image = blobs(128, 128, None, seed=2)
    image[:64, :64] = np.random.default_rng(2).integers(0, 3, (64, 64)) * 50  # a noise tile
    data = cpu_v2.encode(image)
    assert seen[0].sum() >= 2
    s = f2.read_stream(np.frombuffer(data, np.uint8))
    assert np.isin(s.mode[seen[0]], [f2.TILE_RUNS_SAME, f2.TILE_RUNS_PALETTE]).all()


def test_a_sure_tile_left_out_encodes_again_weighing_every_tile(monkeypatch: pytest.MonkeyPatch) -> None:
    """When no runs set is kept (runs.choose refuses here), the sure tiles, written raw so far,
    send both encoders back to weigh every candidate: the stream of runs_first=False. (The
    general encoder's path: the short ones, mask_encoder and small_encoder, are tested on
    their own.)"""
    monkeypatch.setattr(runs, "choose", lambda *args: None)
    monkeypatch.setattr(mask_encoder, "stream", lambda *args: None)
    monkeypatch.setattr(small_encoder, "stream", lambda *args: None)
    image = blobs(100, 120, None, seed=4)
    data = cpu_v2.encode(image)
    assert data == cpu_v2.encode(image, runs_first=False) == r2.encode(image)
    s = f2.read_stream(np.frombuffer(data, np.uint8))
    assert not (s.mode == f2.TILE_RAW).any()
    np.testing.assert_array_equal(lossless.decode(data), image)


def test_noise_never_becomes_runs_tiles() -> None:
    """Runs of a pixel or two would code smaller as runs than as a palette tile, but decode
    symbol after symbol (runs.MIN_PIXELS_PER_SYMBOL keeps such tiles palette tiles)."""
    rng = np.random.default_rng(1)
    image = rng.integers(0, 12, (128, 128), dtype=np.uint8) * 20
    s = f2.read_stream(np.frombuffer(lossless.encode(image, version=2), np.uint8))
    assert (s.mode == f2.TILE_PALETTE).all()


def _runs_stream(coded: bool = True) -> tuple[bytes, int]:
    """A stream of runs tiles, and its first runs tile: with coded palettes (mode 6), or raw
    ones (mode 5, as encoders before mode 6 wrote)."""
    data = r2.runs_stream(blobs(96, 100, 3, seed=5), tile=32, coded=coded)
    s = f2.read_stream(np.frombuffer(data, np.uint8))
    return data, int(np.flatnonzero(s.mode == (f2.TILE_RUNS_PALETTE if coded else f2.TILE_RUNS_SAME))[0])


def test_every_byte_change_is_refused_or_agrees_with_reference() -> None:
    data, _ = _runs_stream()
    assert_byte_flips_refused_or_agree(data, flips=300, seed=7)
    for repeats, same in ((False, False), (True, False), (True, True)):  # modes 3, 4 and 5, as older encoders wrote
        old = r2.runs_stream(blobs(64, 70, None, seed=9), tile=32, repeats=repeats, same=same, coded=False)
        assert_byte_flips_refused_or_agree(old, flips=150, seed=8)


@pytest.mark.parametrize("c", [None, 3])
@pytest.mark.parametrize("older", [f2.TILE_RUNS, f2.TILE_RUNS_REPEAT, f2.TILE_RUNS_SAME])
def test_streams_of_older_runs_modes_still_decode(c: int | None, older: int) -> None:
    """Mode 3 runs tiles (no row repeats, as every encoder wrote them before mode 4), mode 4
    ones (a label symbol after every boundary, before mode 5) and mode 5 ones (raw palettes,
    before mode 6) decode to the image in every decoder; mode 5 and 6 code the same tiles in
    fewer run symbols than modes 3 and 4."""
    image = blobs(100, 90, c, seed=12)
    repeats = older != f2.TILE_RUNS
    old = r2.runs_stream(image, tile=32, repeats=repeats, same=older == f2.TILE_RUNS_SAME, coded=False)
    new = r2.runs_stream(image, tile=32)
    modes_old = f2.read_stream(np.frombuffer(old, np.uint8)).mode
    modes_new = f2.read_stream(np.frombuffer(new, np.uint8)).mode
    runs_tiles = modes_old == older
    any_runs = np.isin(modes_old, f2.RUNS_MODES)
    assert runs_tiles.sum() >= 4 and (any_runs == runs_tiles).all()  # every runs tile of the older mode
    assert (modes_new[runs_tiles] == f2.TILE_RUNS_PALETTE).all()
    pals = [r2.choose_palette(t.astype(np.int64)) for t in r2.tiles_of(image if c else image[:, :, None], 32)]
    pals = [p for p in pals if p and len(p.palette) > 1]
    n_old = sum(r2.RunsChoice(p.palette, p.index, repeats, older == f2.TILE_RUNS_SAME, coded=False).symbols.size
                for p in pals)
    n_new = sum(r2.RunsChoice(p.palette, p.index).symbols.size - p.palette.size for p in pals)  # run symbols
    if older == f2.TILE_RUNS_SAME:
        assert n_new == n_old  # (the same run symbols; mode 6 adds the palette's)
    else:
        assert n_new < (0.8 if older == f2.TILE_RUNS else 0.85) * n_old
    for data in (old, new):
        np.testing.assert_array_equal(lossless.decode(data), image)
        np.testing.assert_array_equal(r2.decode(data), image)
        np.testing.assert_array_equal(lossless.decode(data, roi=(5, 3, 97, 80)), image[5:97, 3:80])


def test_implied_label_symbols_decode_and_end_or_pass_with_a_label_is_refused() -> None:
    """Mode 5: a boundary symbol alone implies label rank 0, + RUN_OTHER says a rank follows;
    END and PASS take no label, so RUN_OTHER + END or + PASS is refused by every decoder."""
    good, expected = implied_label_symbols()
    data = runs_tile_stream(good, 2, 10, f2.TILE_RUNS_SAME)
    np.testing.assert_array_equal(lossless.decode(data), expected)
    np.testing.assert_array_equal(r2.decode(data), expected)
    for bad_symbol in (f2.RUN_OTHER + f2.RUN_END, f2.RUN_OTHER + f2.RUN_PASS, 2 * f2.RUN_SYMBOLS):
        bad = runs_tile_stream(good[:5] + [(f2.RUN_CTX_NEAR, bad_symbol)] + good[6:], 2, 10, f2.TILE_RUNS_SAME)
        with pytest.raises(CodecError, match="run symbol"):
            r2.decode(bad)
        with pytest.raises(CodecError, match="run symbol, run boundary or label"):
            lossless.decode(bad)


def test_a_tile_of_256_colours_is_coded_without_repeats() -> None:
    """Mode 4 takes at most 255 colours (RUN_REPEAT is then never a label rank): a runs tile
    of 256 colours is a mode 3 tile, and its repeated rows are coded as runs."""
    index = np.repeat(np.arange(256).reshape(4, 64), 16, axis=0)  # 64 x 64, rows repeat 15 times
    palette = np.stack([np.arange(256)] * 3, axis=1)
    choice = r2.RunsChoice(palette, index)
    assert choice.mode == f2.TILE_RUNS
    np.testing.assert_array_equal(choice.symbols, r2.runs_symbols(index, 256, repeats=False)[0])
    assert choice.symbols.size > r2.runs_symbols(index, 256)[0].size
    assert r2.RunsChoice(palette[:255], np.minimum(index, 254)).mode == f2.TILE_RUNS_PALETTE


def test_repeats_decode_and_a_repeat_past_the_last_row_is_refused() -> None:
    good = runs_tile_stream(repeat_symbols(6), 8, 10)
    expected = np.zeros((8, 10), np.uint8)
    np.testing.assert_array_equal(lossless.decode(good), expected)
    np.testing.assert_array_equal(r2.decode(good), expected)
    bad = runs_tile_stream(repeat_symbols(7), 8, 10)  # rows 1 .. 8 of 8
    with pytest.raises(CodecError, match="repeat of 8 rows from row 1"):
        r2.decode(bad)
    with pytest.raises(CodecError, match="run symbol, run boundary or label"):
        lossless.decode(bad)
    first_row = [(f2.RUN_CTX_LABEL, f2.RUN_REPEAT), (f2.RUN_CTX_LENGTH, 0)] + repeat_symbols(6)
    with pytest.raises(CodecError, match="label rank 255"):  # no row above the first
        r2.decode(runs_tile_stream(first_row, 8, 10))
    with pytest.raises(CodecError, match="run symbol, run boundary or label"):
        lossless.decode(runs_tile_stream(first_row, 8, 10))


def _payload(data: bytes, i: int) -> bytearray:
    s = f2.read_stream(np.frombuffer(data, np.uint8))
    return bytearray(data[int(s.offsets[i]) : int(s.offsets[i + 1])])


def _refused_by_both_decoders(data: bytes, reference: str, numba: str) -> None:
    with pytest.raises(CodecError, match=reference):
        r2.decode(data)
    with pytest.raises(CodecError, match=numba):
        lossless.decode(data)


def test_palette_out_of_order_is_refused() -> None:
    data, i = _runs_stream(coded=False)
    payload = _payload(data, i)
    assert payload[2] >= 1  # two colours at least: swap the first two
    first, second = payload[3:6], payload[6:9]
    payload[3:6], payload[6:9] = second, first
    bad = f2.with_payloads(data, {i: bytes(payload)})
    _refused_by_both_decoders(bad, "palette colours not in increasing order", "run symbol, run boundary or label")


def test_rank_past_the_palette_is_refused() -> None:
    """The same tile with a palette of one colour fewer: some label rank now lies past the
    order (its last colour dropped, so the colours still increase)."""
    data, i = _runs_stream(coded=False)
    payload = _payload(data, i)
    n_colours = payload[2] + 1
    payload[2] -= 1
    del payload[3 + 3 * (n_colours - 1) : 3 + 3 * n_colours]
    bad = f2.with_payloads(data, {i: bytes(payload)})
    with pytest.raises(CodecError):
        r2.decode(bad)
    with pytest.raises(CodecError):
        lossless.decode(bad)


def test_bad_runs_headers_are_refused_by_both_validators() -> None:
    data, i = _runs_stream()
    payload = _payload(data, i)
    n_sets = data[7]
    cases = [
        (bytes([f2.TILE_RUNS, n_sets]) + bytes(payload[2:]), "runs tile table set"),
        (bytes(payload[:-1]), "runs tile length"),
        (bytes(payload[:2]), "runs tile length"),
        (bytes([f2.LAST_MODE + 1]) + bytes(payload[1:]), "tile mode"),
        (bytes(payload[:2]) + bytes([255]) + bytes(payload[3:]), "palette size of a runs tile with row repeats"),
    ]
    for bad_payload, message in cases:
        bad = f2.with_payloads(data, {i: bad_payload})
        with pytest.raises(CodecError, match=message):
            f2.read_stream(np.frombuffer(bad, np.uint8))
        with pytest.raises(CodecError):
            hostplan.plan_buffers([bad])


def test_a_repeat_tile_whose_tables_are_not_all_in_the_stream_is_refused() -> None:
    """With four tables per set a mode 4 tile's fifth table is in the next set: a tile that
    names the last set would read a table past the stream's."""
    data = lossless.encode(blobs(96, 100, None, seed=5), tile=32, version=2)
    s = f2.read_stream(np.frombuffer(data, np.uint8))
    repeats = np.isin(s.mode, [f2.TILE_RUNS_SAME, f2.TILE_RUNS_PALETTE])
    assert f2.set_tables(data[5]) == 4 and repeats.any()
    i = int(np.flatnonzero(repeats)[0])
    assert s.table_set[i, 0] == data[7] - 2  # the runs tables: the last two sets
    payload = _payload(data, i)
    payload[1] = data[7] - 1
    bad = f2.with_payloads(data, {i: bytes(payload)})
    with pytest.raises(CodecError, match="table set of a runs tile with row repeats"):
        f2.read_stream(np.frombuffer(bad, np.uint8))
    with pytest.raises(CodecError):
        hostplan.plan_buffers([bad])
    payload[0] = f2.TILE_RUNS  # mode 3 has four tables: the last set is a valid one for it
    f2.read_stream(np.frombuffer(f2.with_payloads(data, {i: bytes(payload)}), np.uint8))


def test_a_runs_set_above_the_old_limit_is_read() -> None:
    """One channel allows 2C + 2 = 4 table sets: the two runs sets (six tables, four per set)
    after two for the other tiles (two textures that take a set each beside a mask)."""
    # 36 tiles: table sets per tile class (table_sets.MIN_TILES)
    image = np.tile(np.concatenate([mixed_image(None), blobs(128, 192, None, seed=11)], axis=1), (3, 1))
    data = lossless.encode(image, version=2)
    assert data[7] == f2.max_sets(1) == 4
    np.testing.assert_array_equal(lossless.decode(data), image)


def test_choose_with_a_context_no_chosen_tile_uses() -> None:
    """Tiles whose runs all line up with the row above never code a length: that context's
    table is empty (all zeros), the others are normalised as usual."""
    tile_pairs = [(f2.RUN_CTX_LABEL, 0)] * 64 + [(f2.RUN_CTX_NEAR, f2.RUN_NEAR + f2.RUN_REACH)] * 120
    tile_pairs += [(f2.RUN_CTX_FAR, f2.RUN_END)] * 8
    cap = 1024
    syms = np.zeros((3, cap), np.uint8)
    ctxs = np.zeros((3, cap), np.uint8)
    for k in range(3):
        ctxs[k, : len(tile_pairs)], syms[k, : len(tile_pairs)] = np.array(tile_pairs).T
    # The third tile has too many symbols: never chosen, its symbols (lengths here) unread.
    ctxs[2, len(tile_pairs) :] = f2.RUN_CTX_LENGTH
    syms[2, len(tile_pairs) :] = 40
    n_symbols = np.array([len(tile_pairs), len(tile_pairs), 5000])
    picked = runs.choose(syms, ctxs, np.arange(3), n_symbols, np.full(3, 8), np.full(3, 400), np.full(3, 4096))
    assert picked is not None
    chosen, freq, coded = picked
    assert chosen.tolist() == [True, True, False] and not coded  # (no palette symbols: nothing to code)
    assert freq.shape == (f2.RUN_CONTEXTS, 256)
    assert not freq[[f2.RUN_CTX_LENGTH, f2.RUN_CTX_ROW]].any()
    assert (freq[[f2.RUN_CTX_NEAR, f2.RUN_CTX_FAR, f2.RUN_CTX_LABEL]].sum(axis=1) == f2.PROB_SCALE).all()


def _dense_choice(syms: np.ndarray, ctxs: np.ndarray, n_symbols: np.ndarray, fixed: np.ndarray,
                  current: np.ndarray, pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """runs.choose's rule spelled out over dense per-tile histograms (how it was first written)."""
    hists = np.zeros((syms.shape[0], f2.RUN_CONTEXTS, 256), np.int64)
    for k in range(syms.shape[0]):
        np.add.at(hists[k], (ctxs[k, : n_symbols[k]], syms[k, : n_symbols[k]]), 1)
    chosen = n_symbols * runs.MIN_PIXELS_PER_SYMBOL <= pixels
    for _ in range(3):
        if not chosen.any():
            return None
        freq = np.stack([f2.normalize(row) for row in hists[chosen].sum(axis=0)])
        cost = f2.cost_table(freq)
        estimate = fixed + (hists * cost).sum(axis=(1, 2)) // 128
        codable = ~((hists > 0) & (freq == 0)).any(axis=(1, 2))
        if _ < 2:
            chosen = codable & (estimate < current) & chosen
    if int((current - estimate)[chosen].sum()) <= len(f2.pack_tables(freq)):
        return None
    return chosen, freq


def test_choose_from_symbols_follows_the_rule_on_random_candidates() -> None:
    """runs.choose works from each candidate's symbol list: the same tiles and tables as the
    rule over dense histograms, including candidates that fail the first or second round and
    candidates too long to be chosen (their symbols never read)."""
    rng = np.random.default_rng(5)
    agreed = 0
    for trial in range(40):
        m = int(rng.integers(1, 12))
        cap = 96
        n_symbols = rng.integers(1, cap, m)
        n_symbols[rng.random(m) < 0.2] = 5000  # too many: never chosen
        syms = rng.integers(0, 12 if trial % 2 else 4, (m, cap)).astype(np.uint8)
        ctxs = rng.integers(0, f2.RUN_CONTEXTS, (m, cap)).astype(np.uint8)
        rows = rng.permutation(m + 3)[:m]  # candidates k at any rows of a larger array
        all_syms = np.full((m + 3, cap), 255, np.uint8)
        all_ctxs = np.full((m + 3, cap), 3, np.uint8)
        all_syms[rows], all_ctxs[rows] = syms, ctxs
        fixed = rng.integers(4, 20, m)
        current = rng.integers(10, 200, m)
        pixels = np.full(m, 4096)
        want = _dense_choice(syms, ctxs, n_symbols, fixed, current, pixels)
        got = runs.choose(all_syms, all_ctxs, rows, n_symbols, fixed, current, pixels)
        assert (got is None) == (want is None)
        if got is not None and want is not None:
            assert got[0].tolist() == want[0].tolist()
            np.testing.assert_array_equal(got[1], want[1])
            agreed += 1
    assert agreed >= 5  # the rule kept a runs set often enough to compare tables


def test_rows_of_64_compare_equal_only_when_every_byte_is() -> None:
    """runs.same_row64 (eight bytes at a time, at any offset) against same_row's byte loop:
    a row that differs from the other in any one byte, by any bit, is not the same."""
    rng = np.random.default_rng(5)
    flat = rng.integers(0, 256, 64 * 3 + 5, dtype=np.uint8)
    row, up = 2 * 64 + 3, 1
    flat[row : row + 64] = flat[up : up + 64]
    assert runs.same_row64(flat, row, up) and runs.same_row(flat, row, up, 64)
    for x in range(64):
        for bit in (0, 7):
            flat[row + x] ^= 1 << bit
            assert not runs.same_row64(flat, row, up)
            assert not runs.same_row(flat, row, up, 64)
            flat[row + x] ^= 1 << bit


@pytest.mark.parametrize(("c", "seed", "counted"), [(None, 0, False), (None, 5, False), (3, 1, False), (4, 2, False),
                                                     (None, 4, True)])
def test_masks_without_coded_symbols_are_estimated_in_closed_form(monkeypatch: pytest.MonkeyPatch, c: int | None,
                                                                  seed: int, counted: bool) -> None:
    """An image of constant tiles and tiles sure to become runs tiles has no coded or palette
    symbols: the encoder's counts and estimates come in closed form, no pass over the tiles
    (most masks: the counts were a tenth of their encode time), and the stream stays the
    reference's. A mask with a tile of another kind is counted as before."""
    calls: list[str] = []
    for name in ("_count_hist", "_estimate_hist", "_count_all", "_estimate_all"):
        kernel = getattr(cpu_v2, name)

        def counting(*args: object, kernel: object = kernel, name: str = name) -> object:
            calls.append(name)
            return kernel(*args)  # type: ignore[operator]

        monkeypatch.setattr(cpu_v2, name, counting)
    image = blobs(200, 260, c, seed=seed, n=4)
    assert general_encode(image) == r2.encode(image)  # (the short path runs the same steps compiled)
    assert bool(calls) == counted


def test_label_rank_and_label_of_rank_follow_label_order() -> None:
    """The reference coders' label_rank and label_of_rank (no list of every index) give
    label_order's answers for every candidate list, left index and value of small palettes,
    and the numba coders' runs._rank and runs._label do too."""
    import itertools

    checked = 0
    for n_colours in range(1, 7):
        values = [runs.NO_LABEL, *range(n_colours)]
        for candidates in itertools.product(values, repeat=3):
            present = [v for v in candidates if v >= 0]
            for left in range(-1, n_colours):
                order = r2.label_order(present, left, n_colours)
                for rank in range(len(order) + 2):
                    expected = order[rank] if rank < len(order) else None
                    assert r2.label_of_rank(present, left, n_colours, rank) == expected
                    numba_label = runs._label(rank, *candidates, left, n_colours)
                    assert (None if numba_label == runs.NO_LABEL else numba_label) == expected
                for value in order:
                    assert r2.label_rank(present, left, value) == order.index(value)
                    assert runs._rank(value, *candidates, left) == order.index(value)
                    checked += 1
    assert checked > 10_000


@pytest.mark.parametrize("c", [1, 3, 4])
def test_palette_symbols_decode_back_and_match_the_numba_encoder(c: int) -> None:
    """Mode 6's palette symbols (A2): each colour's channel differences from the colour
    before, channels 1 and 2 less channel 0's; they decode back to the palette, and the numba
    encoder's equal the reference's."""
    rng = np.random.default_rng(c)
    for n_colours in (1, 2, 7, 255):
        packed = np.sort(rng.choice(1 << (8 * c), n_colours, replace=False)).astype(np.int64)
        palette = (packed[:, None] >> (8 * np.arange(c - 1, -1, -1))) & 255
        syms, ctxs = r2.palette_symbols(palette)
        assert syms.size == n_colours * c and syms.max() <= 255
        np.testing.assert_array_equal(ctxs.reshape(n_colours, c)[0], f2.RUN_CTX_PALETTE + np.minimum(np.arange(c), 2))
        position = iter(range(syms.size))

        def next_symbol(context: int, syms: np.ndarray = syms, ctxs: np.ndarray = ctxs,
                        position: Iterator[int] = position) -> int:
            i = next(position)
            assert ctxs[i] == context
            return int(syms[i])

        np.testing.assert_array_equal(r2.palette_decode(next_symbol, n_colours, c), palette)
        got_syms = np.zeros(n_colours * c, np.uint8)
        got_ctxs = np.zeros(n_colours * c, np.uint8)
        assert cpu_v2._runs_palette_symbols(packed, n_colours, c, got_syms, got_ctxs) == n_colours * c
        np.testing.assert_array_equal(got_syms, syms)
        np.testing.assert_array_equal(got_ctxs, ctxs)
    # Colours along a blend (anti-aliased edges) differ alike in every channel: small symbols.
    blend = np.stack([np.linspace(30, 230, 40), np.linspace(35, 235, 40), np.linspace(50, 240, 40)], 1).astype(int)
    assert r2.palette_symbols(blend)[0].reshape(40, 3)[1:, 1:].max() <= 4


def test_a_coded_palette_out_of_order_is_refused() -> None:
    good = runs_tile_stream(implied_label_symbols()[0], 2, 10, f2.TILE_RUNS_PALETTE, palette=(0, 9))
    np.testing.assert_array_equal(lossless.decode(good), implied_label_symbols()[1])
    np.testing.assert_array_equal(r2.decode(good), implied_label_symbols()[1])
    for palette in ((9, 0), (9, 9)):  # decreasing, equal
        bad = runs_tile_stream(implied_label_symbols()[0], 2, 10, f2.TILE_RUNS_PALETTE, palette=palette)
        _refused_by_both_decoders(bad, "palette colours not in increasing order", "run symbol, run boundary or label")


def test_coded_palettes_make_screenshot_like_runs_tiles_smaller() -> None:
    """Runs tiles of many colours (anti-aliased text on a flat background) stay runs tiles in
    mode 6, their palettes coded: both encoders alike, smaller than with raw palettes."""
    rng = np.random.default_rng(3)
    image = np.full((128, 192, 3), (236, 232, 220), np.uint8)
    for y in range(4, 120, 12):  # rows of 'glyphs': short strokes blended into the background
        for x in range(4, 180, 7):
            a = rng.integers(1, 9) / 8.0
            image[y : y + 7, x : x + 2] = (np.array([236, 232, 220]) * (1 - a) + np.array([40, 44, 60]) * a).astype(
                np.uint8)
    data = lossless.encode(image, version=2)
    assert data == r2.encode(image)
    s = f2.read_stream(np.frombuffer(data, np.uint8))
    assert (s.mode == f2.TILE_RUNS_PALETTE).sum() >= 4
    np.testing.assert_array_equal(lossless.decode(data), image)
    raw = r2.runs_stream(image, tile=64, coded=False)
    coded = r2.runs_stream(image, tile=64)
    assert len(coded) < len(raw)


def test_choose_codes_palettes_only_where_that_is_smaller() -> None:
    """runs.choose weighs coded palettes (mode 6: symbols, and tables for them) against raw
    ones (mode 5: the heads' bytes in the payload): many tiles sharing a few colours code them
    in a fraction of a byte each; a few tiles of unrelated colours would pay more for the
    tables than the bytes they save."""
    pairs = [(f2.RUN_CTX_LABEL, 0)] + [(f2.RUN_CTX_NEAR, f2.RUN_NEAR + f2.RUN_REACH)] * 60 + [(f2.RUN_CTX_FAR, f2.RUN_END)]
    rng = np.random.default_rng(2)
    for n_tiles, shared, want_coded in ((40, True, True), (2, False, False)):
        n_colours, c = 12, 3
        syms = np.zeros((n_tiles, 200), np.uint8)
        ctxs = np.zeros((n_tiles, 200), np.uint8)
        heads = np.full(n_tiles, n_colours * c)
        for k in range(n_tiles):
            packed = np.arange(n_colours) * 0x010101 + 0x202020 if shared else np.sort(
                rng.choice(1 << 24, n_colours, replace=False))
            pal = (packed[:, None] >> np.array([16, 8, 0])) & 255
            psyms, pctxs = r2.palette_symbols(pal)
            syms[k, : heads[k]], ctxs[k, : heads[k]] = psyms, pctxs
            ctxs[k, heads[k] : heads[k] + len(pairs)], syms[k, heads[k] : heads[k] + len(pairs)] = np.array(pairs).T
        n_symbols = heads + len(pairs)
        fixed = np.full(n_tiles, f2.RUNS_HEADER + 4)
        picked = runs.choose(syms, ctxs, np.arange(n_tiles), n_symbols, fixed, np.full(n_tiles, 400),
                             np.full(n_tiles, 4096), heads)
        assert picked is not None
        chosen, freq, coded = picked
        assert chosen.all() and coded == want_coded
        assert freq[f2.RUN_CTX_PALETTE :].any() == want_coded  # raw palettes leave their tables empty
