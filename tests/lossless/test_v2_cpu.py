"""Version 2, numba CPU kernels: byte-identical encoding, pixel-identical decoding, batches
mixing v1 and v2, ROIs, and corrupt streams refused."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prepkit import lossless
from prepkit.errors import CodecError
from prepkit.lossless import cpu_v2, mask_encoder, small_encoder, table_sets
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import reference_v2 as r2

from .images import assert_byte_flips_refused_or_agree, images, make_image

TILES = st.sampled_from([16, 32, 64])


@settings(max_examples=40, deadline=None)
@given(image=images(max_side=90), tile=TILES)
def test_numba_matches_reference(image: np.ndarray, tile: int) -> None:
    data = lossless.encode(image, tile, version=2)
    assert data == r2.encode(image, tile)  # byte-identical twins
    out = lossless.decode(data)
    assert out.shape == image.shape and out.dtype == np.uint8
    np.testing.assert_array_equal(out, image)


@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("fast_decode", [False, True])
def test_one_colour_tiles_match_reference(channels: int, fast_decode: bool) -> None:
    """The numba encoder chooses one-colour tiles in closed form (cpu_v2._constant_costs):
    byte-identical to the reference's search over every colour transform and predictor, for
    colours where each transform and predictor wins (0, grey, saturated), on whole and
    partial tiles and next to tiles of several colours."""
    rng = np.random.default_rng(11)
    values = [(0, 0, 0, 0), (255, 255, 255, 255), (128, 128, 128, 1), (200, 30, 90, 255), (1, 2, 3, 4),
              (17, 200, 17, 0), (255, 0, 255, 128)]
    image = np.zeros((100, 110, channels), np.uint8)
    for n, (y, x) in enumerate((y, x) for y in range(0, 100, 32) for x in range(0, 110, 32)):
        image[y : y + 32, x : x + 32] = values[n % len(values)][:channels]
    image[33, 5] ^= 1  # one tile of two colours
    image[70:76, 40:60] = rng.integers(0, 256, (6, 20, channels))  # and noisy tiles
    for tile in (16, 32):
        stream = lossless.encode(image, tile, version=2, fast_decode=fast_decode)
        assert stream == r2.encode(image, tile, fast_decode=fast_decode)
        s = f2.read_stream(np.frombuffer(stream, np.uint8))
        one_colour = (s.mode == f2.TILE_CODED) & (s.ch_mode[:, :channels] == f2.CH_CONST).all(axis=1)
        assert one_colour.sum() > 10 and set(s.colour[one_colour].tolist()) == (set(f2.ENCODER_COLOURS) if channels > 1 else {0})
        np.testing.assert_array_equal(lossless.decode(stream), image)


@pytest.mark.parametrize("colour", range(f2.COLOURS))
@pytest.mark.parametrize("channels", [3, 4])
def test_every_colour_transform_decodes(colour: int, channels: int) -> None:
    """Streams whose coded tiles all use one colour transform, those the encoders leave out
    (format_v2.ENCODER_COLOURS) included: the numba decoder gives back the image, whole and
    cropped, as the reference decoder does."""
    image = make_image("smooth", 40, 37, channels, seed=colour)
    stream = r2.encode(image, 16, colours=(colour,))
    s = f2.read_stream(np.frombuffer(stream, np.uint8))
    coded = s.mode == f2.TILE_CODED
    assert coded.sum() > 4 and set(s.colour[coded].tolist()) == {colour}
    np.testing.assert_array_equal(lossless.decode(stream), image)
    np.testing.assert_array_equal(r2.decode(stream), image)
    np.testing.assert_array_equal(lossless.decode(stream, roi=(5, 3, 30, 20)), image[5:30, 3:20])


def _predictors_used(stream: bytes) -> set[int]:
    s = f2.read_stream(np.frombuffer(stream, np.uint8))
    return set(s.predictor[s.ch_mode == f2.CH_RANS].tolist())


@pytest.mark.parametrize("kind", ["smooth", "gradient", "noise"])
@pytest.mark.parametrize("channels", [1, 3])
def test_fast_decode_leaves_med_out(kind: str, channels: int) -> None:
    """fast_decode: byte-identical to the reference's fast choice, no MED plane, exact pixels;
    the default picks MED on the same photograph-like image where it is smaller."""
    from skimage import data as skdata

    photo = skdata.astronaut()[:96, :130]
    image = photo if channels == 3 else photo[:, :, 1]
    default = lossless.encode(image, version=2)
    fast = lossless.encode(image, version=2, fast_decode=True)
    assert f2.PRED_MED in _predictors_used(default) and f2.PRED_MED not in _predictors_used(fast)
    assert len(default) < len(fast)
    other = make_image(kind, 70, 90, channels, seed=3)
    for img in (image, other):
        stream = lossless.encode(img, 32, version=2, fast_decode=True)
        assert stream == r2.encode(img, 32, fast_decode=True)
        assert f2.PRED_MED not in _predictors_used(stream)
        np.testing.assert_array_equal(lossless.decode(stream), img)


@settings(max_examples=30, deadline=None)
@given(image=images(max_side=130), tile=TILES, data=st.data())
def test_roi_equals_slice(image: np.ndarray, tile: int, data: st.DataObject) -> None:
    h, w = image.shape[:2]
    y0 = data.draw(st.integers(0, h - 1))
    y1 = data.draw(st.integers(y0 + 1, h))
    x0 = data.draw(st.integers(0, w - 1))
    x1 = data.draw(st.integers(x0 + 1, w))
    stream = lossless.encode(image, tile, version=2)
    np.testing.assert_array_equal(lossless.decode(stream, roi=(y0, x0, y1, x1)), image[y0:y1, x0:x1])


@pytest.mark.parametrize("shape", [(1, 1), (1, 1, 3), (1, 300, 4), (300, 1), (129, 65, 3), (64, 64, 1), (65, 63)])
@pytest.mark.parametrize("kind", ["noise", "constant", "smooth", "gradient"])
def test_shapes_and_kinds(shape: tuple[int, ...], kind: str) -> None:
    c = shape[2] if len(shape) == 3 else None
    image = make_image(kind, shape[0], shape[1], c, seed=1)
    data = lossless.encode(image, version=2)
    assert data[4] == 2 and data == r2.encode(image)
    np.testing.assert_array_equal(lossless.decode(data), image)
    channels = 1 if c is None else c
    assert len(data) <= lossless.max_encoded_size(shape[0], shape[1], channels, version=2)


def test_header_and_version_choice() -> None:
    header = lossless.read_header(lossless.encode(np.zeros((5, 7), np.uint8), tile=32, version=2))
    assert header.version == 2 and header.is_2d and header.shape == (5, 7)
    assert lossless.read_header(lossless.encode(np.zeros((5, 7), np.uint8))).version == lossless.DEFAULT_VERSION == 2
    with pytest.raises(ValueError, match="version"):
        lossless.encode(np.zeros((5, 7), np.uint8), version=3)
    with pytest.raises(ValueError, match="version"):
        lossless.max_encoded_size(5, 7, 1, version=0)


def test_unknown_version_is_named() -> None:
    data = bytearray(lossless.encode(np.zeros((5, 7), np.uint8), version=2))
    data[4] = 9
    with pytest.raises(CodecError, match="version: Expected 1 or 2. Got 9"):
        lossless.decode(bytes(data))


def test_batch_mixes_versions_and_matches_single_decodes() -> None:
    imgs = [make_image(k, 40 + 7 * i, 33 + 5 * i, c, seed=i)
            for i, (k, c) in enumerate([("smooth", 3), ("noise", None), ("gradient", 4), ("constant", 1)])]
    streams = [lossless.encode(im, 16, version=1 + i % 2) for i, im in enumerate(imgs)]
    assert [s[4] for s in streams] == [1, 2, 1, 2]
    for got, image in zip(lossless.decode_batch(streams), imgs, strict=True):
        np.testing.assert_array_equal(got, image)
    rois = [(1, 2, 20, 30), None, (0, 0, 5, 5), (3, 3, 4, 4)]
    flat, offsets, shapes = lossless.decode_batch_packed(streams, rois=rois, out=np.zeros(100000, np.uint8))
    for i, image in enumerate(imgs):
        h, w, c = shapes[i]
        region = image if rois[i] is None else image[rois[i][0] : rois[i][2], rois[i][1] : rois[i][3]]
        np.testing.assert_array_equal(flat[offsets[i] : offsets[i] + h * w * c].reshape(region.shape), region)


def _coded_stream() -> tuple[bytes, f2.StreamV2]:
    image = make_image("smooth", 64, 64, 3, seed=7)
    image = (image + np.random.default_rng(1).integers(0, 30, image.shape)).astype(np.uint8)
    data = lossless.encode(image, version=2)
    stream = f2.read_stream(np.frombuffer(data, np.uint8))
    assert stream.mode[0] == f2.TILE_CODED and stream.lanes_log2[0] == 5
    return data, stream


def test_kernel_checks_states_and_words() -> None:
    data, s = _coded_stream()
    words = int(s.words_start[0])
    states = words - 4 * 32
    bad = bytearray(data)
    bad[states : states + 4] = (5).to_bytes(4, "little")  # a lane state below 2^16
    with pytest.raises(CodecError, match="rANS lane state"):
        lossless.decode(bytes(bad))
    bad = bytearray(data)
    bad[states + 4 * 31 : states + 4 * 32] = (1 << 20).to_bytes(4, "little")
    with pytest.raises(CodecError, match="image 0: corrupt tile payload"):
        lossless.decode(bytes(bad))


def test_every_byte_change_is_refused_or_agrees_with_reference() -> None:
    data, _ = _coded_stream()
    assert_byte_flips_refused_or_agree(data)


def test_two_lane_tiles_decode_and_refuse_like_the_reference() -> None:
    """Tiny tiles code with 2 lanes, which the CPU decoder runs in a loop of its own
    (cpu_v2._rans_two_lanes): exact pixels, byte flips refused or equal to the reference's,
    and a payload cut short refused."""
    mask = np.zeros((64, 64), np.uint8)
    mask[10:50, 20:44] = 3
    mask[30:40, 5:60] = 1  # few boundaries: small coded tiles
    colours = np.array([[0, 0, 0], [200, 30, 40], [0, 0, 0], [20, 180, 60]], np.uint8)[mask]  # palette tiles
    for image, mode in ((colours, f2.TILE_PALETTE), (mask, f2.TILE_CODED)):
        stream = cpu_v2.encode(image, 32, runs_tiles=False)  # (with runs tiles, these would be runs tiles)
        s = f2.read_stream(np.frombuffer(stream, np.uint8))
        assert ((s.mode == mode) & (s.lanes_log2 == 1)).sum() >= 2
        np.testing.assert_array_equal(lossless.decode(stream), image)
        assert_byte_flips_refused_or_agree(stream, flips=150, seed=3)
    data = stream
    coded = s.mode != f2.TILE_RAW
    i = int(np.flatnonzero(coded & (s.lanes_log2 == 1))[0])
    short = f2.with_payloads(data, {i: data[int(s.offsets[i]) : int(s.offsets[i + 1]) - 2]})  # its last word
    f2.read_stream(np.frombuffer(bytes(short), np.uint8))  # still well formed: only the words are short
    with pytest.raises(CodecError, match="ends early"):
        lossless.decode(bytes(short))


def test_truncated_streams_are_refused() -> None:
    data, _ = _coded_stream()
    for cut in (0, 3, 23, 30, len(data) // 2, len(data) - 1):
        with pytest.raises(CodecError):
            lossless.decode(data[:cut])


def _one_tile_stream(freq_of_stream: np.ndarray | None = None) -> tuple[bytes, np.ndarray]:
    """A 64x64 one-channel tile coded with 32 lanes and predictor 0: row 0 is all 9 (symbol
    18, so row 1 is coded with context 3), the rest values 0..3 (contexts 0..2). With
    freq_of_stream, the payload coded under the right tables is stored with those instead."""
    plane = np.random.default_rng(4).integers(0, 4, (64, 64))
    plane[0] = 9
    choice = r2.TileChoice(0, [0], plane[None].astype(np.int64), [False])
    freq = r2.build_tables([choice], [r2.one_set_per_plane(1, 1)], 1, flags=f2.FLAG_WIDE_CONTEXT)
    cum = np.zeros((freq.shape[0], 257), np.int64)
    cum[:, 1:] = np.cumsum(freq, axis=1)
    payload = r2.encode_tile(plane[:, :, None], choice, freq, cum, r2.one_set_per_plane(1, 1), f2.MAX_LANES_LOG2,
                             flags=f2.FLAG_WIDE_CONTEXT)
    assert payload[0] == f2.TILE_CODED and payload[1] >> 4 == f2.MAX_LANES_LOG2
    header = r2.fmt.Header(64, 64, 1, 64, f2.FLAG_WIDE_CONTEXT, f2.VERSION)
    stored = freq if freq_of_stream is None else freq_of_stream(freq)
    return r2.assemble(header, stored, [payload]), plane.astype(np.uint8)


def test_whole_rounds_refuse_a_symbol_from_an_empty_table() -> None:
    """The 32-lane loop checks empty tables after a plane, not per symbol: a stream whose
    context-3 table is stored empty decodes row 0 and must then be refused, like the reference."""
    data, plane = _one_tile_stream()
    np.testing.assert_array_equal(lossless.decode(data)[:, :, 0], plane)

    def without_context_3(freq: np.ndarray) -> np.ndarray:
        freq = freq.copy()
        freq[3] = 0
        return freq

    bad, _ = _one_tile_stream(without_context_3)
    with pytest.raises(CodecError, match="empty frequency table"):
        r2.decode(bad)
    with pytest.raises(CodecError, match="image 0: corrupt tile payload \\(a rANS symbol from an empty frequency table"):
        lossless.decode(bad)


def _with_garbage_in_empty_tables(data: bytes, seed: int) -> object:
    """One stream decoded with random words in every slot of the decoder's table windows
    beforehand: the expansion of the image's tables overwrites the slots of its stored
    tables and leaves its empty tables' slots as they were (they may hold anything)."""
    from prepkit.lossless import cpu

    plan = lossless._build_plan([data], None)
    windows = cpu_v2._decode_scratch(numba.get_num_threads())[2]
    windows[...] = np.random.default_rng(seed).integers(0, 2**32, windows.shape, dtype=np.uint32)
    return cpu.decode_plan(plan)


def test_empty_tables_slots_are_never_trusted() -> None:
    """Decoders read an empty table's slots only to refuse the tile: whatever they hold, a
    stream that draws from one is refused as with zeros, and streams that do not (a 32x32
    image of raw tiles carries 12 empty tables) decode exactly."""
    data, _ = _one_tile_stream()

    def without_context_3(freq: np.ndarray) -> np.ndarray:
        freq = freq.copy()
        freq[3] = 0
        return freq

    bad, _ = _one_tile_stream(without_context_3)
    small = make_image("noise", 32, 32, 3, seed=5)
    small_stream = lossless.encode(small)
    assert f2.read_stream(np.frombuffer(small_stream, np.uint8)).tables.freq.sum() == 0  # raw tiles, empty tables
    for seed in range(4):
        with pytest.raises(CodecError, match="empty frequency table"):
            _with_garbage_in_empty_tables(bad, seed)
        np.testing.assert_array_equal(_with_garbage_in_empty_tables(small_stream, seed).reshape(small.shape), small)
        np.testing.assert_array_equal(_with_garbage_in_empty_tables(data, seed), lossless.decode(data).reshape(-1))


def test_whole_rounds_refuse_a_payload_cut_short() -> None:
    """The 32-lane loop reads its words through a clamped u16 view and counts them after
    the rounds: a payload one word short is refused, never read past."""
    data, _ = _one_tile_stream()
    s = f2.read_stream(np.frombuffer(data, np.uint8))
    for cut in (2, 4, int(s.offsets[1] - s.words_start[0])):  # one word, two, all of them
        short = f2.with_payloads(data, {0: data[int(s.offsets[0]) : len(data) - cut]})
        f2.read_stream(np.frombuffer(bytes(short), np.uint8))  # well formed: only the words are short
        with pytest.raises(CodecError):
            r2.decode(bytes(short))
        with pytest.raises(CodecError, match="ends early"):
            lossless.decode(bytes(short))


@pytest.mark.parametrize("tile", [16, 64])
def test_histogram_and_symbol_pass_encoders_agree(tile: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The encoder counts and estimates from per-tile histograms, or, where those would take
    more memory than the symbols' slots (small tiles of huge images), by passes over the symbols:
    both give the reference's bytes. A zero budget forces the passes for 16-pixel tiles. (The
    general encoder: small_encoder's path, which counts from histograms, is left out.)"""
    monkeypatch.setattr(small_encoder, "stream", lambda *args: None)
    smooth = make_image("smooth", 70, 90, 3, seed=2)
    labels = np.zeros((70, 90), np.uint8)
    labels[10:50, 20:70] = 2
    labels[30:60, 5:40] = 5
    flat = np.array([[0, 0, 0], [9, 9, 9], [200, 30, 40], [1, 2, 3], [0, 0, 0], [20, 180, 60]], np.uint8)[labels]
    used: list[str] = []
    for name in ("_count_all", "_count_hist"):
        kernel = getattr(cpu_v2, name)
        monkeypatch.setattr(cpu_v2, name, lambda *args, _k=kernel, _n=name: (used.append(_n), _k(*args))[1])
    for image in (smooth, flat, labels):
        expected = r2.encode(image, tile)
        # (flat and labels may have no coded symbols at all, constant and runs tiles only:
        # then their counts come in closed form and neither kernel runs)
        closed_form_allowed = image is not smooth
        used.clear()
        assert lossless.encode(image, tile, version=2) == expected
        assert set(used) == {"_count_hist"} or (closed_form_allowed and not used)
        with monkeypatch.context() as budget:
            budget.setattr(cpu_v2, "HISTOGRAM_BUDGET", 0)
            budget.setattr(table_sets, "ITEMS_BUDGET", 0)  # table sets need the histograms
            used.clear()
            assert lossless.encode(image, tile, version=2) == expected
            # (64-pixel tiles keep their histograms: they take at most twice the memory of the
            # symbols' slots, a tile's pixels each; a 16-pixel tile's would take 16 times)
            assert set(used) == ({"_count_hist"} if tile == 64 else {"_count_all"}) or (closed_form_allowed and not used)


@pytest.mark.parametrize(("c", "n_values"), [(1, n) for n in (1, 2, 63, 64, 65, 200)]
                         + [(3, n) for n in (1, 2, 64, 65, 200, 256, 257, 1000)])
def test_tile_colours_are_the_sorted_distinct_colours_up_to_the_palette_limit(c: int, n_values: int) -> None:
    """The palette candidate's colour list (grey tiles: a presence table, with the rows equal
    to the row above and a value -> index map; colour tiles: a hash set, indices renumbered
    from order of appearance) is np.unique of the packed colours, or 0 past
    reference_v2.max_palette(C) (64 values for grey tiles, 256 colours otherwise); indices map
    back, and _index_plane rebuilds the same plane."""
    rng = np.random.default_rng(n_values)
    values = rng.choice(256 if c == 1 else 1 << 24, n_values, replace=False)
    packed = values[rng.integers(0, n_values, (64, 64))]
    packed.flat[:n_values] = values  # every value present
    image = np.stack([(packed >> (8 * (c - 1 - k))) & 255 for k in range(c)], axis=2).astype(np.uint8)
    colours = np.zeros(cpu_v2.MAX_PALETTE, np.int64)
    padded = np.full((65, 65), -1, np.int32)
    hashed = cpu_v2._hash_scratch()
    if c == 1:  # one pass over the rows, no index plane (_grey_rows)
        scratch = cpu_v2._runs_scratch()
        n, equal = cpu_v2._grey_rows(image, 0, 0, 64, 64, colours, scratch)
        assert equal == sum(1 << y for y in range(1, 64) if (packed[y] == packed[y - 1]).all())
        if n:
            np.testing.assert_array_equal(scratch[3][colours[:n]], np.arange(n))  # value -> index
    else:
        n = cpu_v2._tile_palette(image, 0, 0, 64, 64, colours, padded, hashed)
    if n_values > r2.max_palette(c):
        assert n == 0
        return
    np.testing.assert_array_equal(colours[:n], np.unique(values))
    if c == 1:
        cpu_v2._index_plane(image, 0, 0, 64, 64, colours, n, padded, hashed)
    np.testing.assert_array_equal(colours[padded[1:, 1:]], packed)
    assert (padded[0] == 0).all() and (padded[:, 0] == 0).all()
    again = np.full((65, 65), -1, np.int32)  # the later symbol pass rebuilds it from the colours
    cpu_v2._index_plane(image, 0, 0, 64, 64, colours, n, again, hashed)
    np.testing.assert_array_equal(again, padded)


@pytest.mark.parametrize("c", [1, 3, 4])
def test_colour_forward_writes_the_reference_planes_inside_a_zero_border(c: int) -> None:
    """_colour_forward's planes of a partial tile at an offset are reference_v2's colour
    transform of its pixels (alpha untouched), for every transform the encoder tries, with row
    0 and column 0 left at 0 and nothing written past the tile."""
    rng = np.random.default_rng(c)
    image = rng.integers(0, 256, (50, 70, c), dtype=np.uint8)
    for colour in f2.ENCODER_COLOURS if c >= 3 else (0,):
        planes = np.full((4, 65, 65), -7, np.int32)
        planes[:, 0, :] = 0
        planes[:, :, 0] = 0
        cpu_v2._colour_forward(image, 9, 21, 37, 45, colour, planes)
        expected = r2.colour_forward(image[9:46, 21:66], colour)
        for k in range(c):
            np.testing.assert_array_equal(planes[k, 1:38, 1:46], expected[..., k], err_msg=f"colour {colour} plane {k}")
            assert (planes[k, 0] == 0).all() and (planes[k, :, 0] == 0).all()
            assert (planes[k, 38:, 1:] == -7).all() and (planes[k, 1:, 46:] == -7).all()


def test_zigzag_codes_and_bits_by_arithmetic_equal_the_tables() -> None:
    """_predictor_costs and _residual_symbols compute zig-zag bit lengths and codes by
    arithmetic, not through the ZIGZAG_BITS and ZIGZAG tables: every residual they can meet
    (v - L - U + UL spans -510..510; only the low byte counts) gives the tables' values, and
    whole planes give reference_v2's costs and symbols under every predictor."""
    for r in range(-520, 521):
        top = np.int32((((r & 255) ^ 128) - 128) * (1 << 24))  # the low byte at the top, as _predictor_costs shifts it
        assert cpu_v2._exponent_of_top(top) - cpu_v2.EXPONENT_BIAS == cpu_v2.ZIGZAG_BITS[r & 255], r
        assert cpu_v2._zigzag_of(np.int32(r)) == cpu_v2.ZIGZAG[r & 255], r
    rng = np.random.default_rng(9)
    padded = np.zeros((65, 65), np.int32)
    for kind in ("noise", "steps", "flat"):
        plane = {"noise": rng.integers(0, 256, (64, 64)), "steps": np.repeat(rng.integers(0, 256, (64, 8)), 8, axis=1),
                 "flat": np.full((64, 64), 37)}[kind]
        padded[1:, 1:] = plane
        costs = np.zeros(f2.PREDICTORS, np.int64)
        cpu_v2._predictor_costs(padded, 64, 64, costs)
        expected = [r2.bit_cost(r2.predict(plane.astype(np.int64), p)) for p in range(f2.PREDICTORS)]
        assert costs.tolist() == expected, kind
        for p in range(f2.PREDICTORS):
            symbols = np.zeros(64 * 64 + 5, np.uint8)
            assert cpu_v2._residual_symbols(padded, 64, 64, p, symbols, 5) == 5 + 64 * 64
            np.testing.assert_array_equal(symbols[5:], r2.zigzag(r2.predict(plane.astype(np.int64), p)).ravel())


def _narrow_and_wide(image: np.ndarray, tile: int, runs_tiles: bool = True) -> tuple[bytes, bytes]:
    """The reference's streams of `image` with narrow contexts (the first v2 streams) and
    with wide ones."""
    return (r2.encode(image, tile, wide_context=False, runs_tiles=runs_tiles),
            r2.encode(image, tile, wide_context=True, runs_tiles=runs_tiles))


@pytest.mark.parametrize("kind", ["smooth", "gradient", "labels", "noise"])
@pytest.mark.parametrize("channels", [None, 3])
def test_streams_with_narrow_contexts_still_decode(kind: str, channels: int | None) -> None:
    """Streams without FLAG_WIDE_CONTEXT (contexts from the symbol 64 earlier alone, A4)
    decode exactly in every decoder, as do streams with it, on lane counts from 2 (small
    tiles, masks) to 32 and on palette tiles; the two streams differ. The numba encoder
    writes the kind format_v2.encoder_wide_context names (wide, for every channel count)."""
    rng = np.random.default_rng(7)
    if kind == "labels":  # a mask: a few regions with ragged borders (palette and 2-lane tiles)
        yy, xx = np.mgrid[0:150, 0:170]
        image = ((yy // 37 + xx // 53 + (rng.random((150, 170)) < 0.02)) % 5 * 40).astype(np.uint8)
        if channels:
            image = np.stack([image, 255 - image, image // 2], axis=2)
    else:  # (colour images smaller: the reference encoder weighs every colour transform per tile)
        image = make_image(kind, 150, 170, channels, seed=3) if channels is None else make_image(kind, 86, 102, 3, seed=3)
    lanes: set[int] = set()
    runs_tiles = kind != "labels"  # (as runs tiles, the labels' tiles would have no contexts)
    for tile in (16, 64):
        old, new = _narrow_and_wide(image, tile, runs_tiles)
        assert old[5] & f2.FLAG_WIDE_CONTEXT == 0 and new[5] & f2.FLAG_WIDE_CONTEXT
        if kind != "noise":  # (noise is all raw tiles: no contexts, the same payloads)
            assert old[24:] != new[24:]
        for stream in (old, new):
            np.testing.assert_array_equal(r2.decode(stream), image)
            np.testing.assert_array_equal(lossless.decode(stream), image)
        assert cpu_v2.encode(image, tile, runs_tiles=runs_tiles) == (new if f2.encoder_wide_context(channels or 1)
                                                                     else old)
        assert f2.encoder_wide_context(channels or 1)
        lanes |= {int(v) for v in f2.read_stream(np.frombuffer(old, np.uint8)).lanes_log2}
    if kind in ("smooth", "labels"):  # 2 lanes (the two-lane loop) and 8 or more (the vector steps)
        assert 1 in lanes and (kind == "labels" or max(lanes) >= 3)


def test_batches_mix_narrow_and_wide_streams() -> None:
    """The context kind is per stream (plan.WIDE): one batch decodes both kinds."""
    a = make_image("smooth", 90, 100, 3, seed=8)
    b = make_image("smooth", 70, 64, 3, seed=9)
    old_a, new_a = _narrow_and_wide(a, 64)
    old_b, new_b = _narrow_and_wide(b, 32)
    for got, want in zip(lossless.decode_batch([old_a, new_b, new_a, old_b]), [a, b, a, b], strict=True):
        np.testing.assert_array_equal(got, want)


def test_encoder_wide_contexts_by_comparisons_equal_the_reference() -> None:
    """cpu_v2._wide_contexts (comparisons in a vector loop) against format_v2's contexts, on
    symbols around every bound (0, 2, 6) and large ones, from position 128 to the end; with
    plane bits (back = a plane of 1000 symbols) from the second plane on."""
    rng = np.random.default_rng(34)
    src = rng.choice(np.array([0, 0, 0, 1, 2, 3, 6, 7, 8, 200, 255], np.uint8), size=3000)
    out = np.full(src.size, 99, np.uint8)
    for back in (0, 1000):
        want = f2.contexts(src, True, back)
        for start, stop in ((128, 3000), (128, 129), (1000, 2048), (2999, 3000)):
            if start < back:
                continue
            cpu_v2._wide_contexts(src, np.uint64(start), np.uint64(stop), out, np.uint64(back))
            assert out[: stop - start].tolist() == want[start:stop].tolist()
    assert (f2.contexts(src, True, 1000)[1000:] >= f2.PLANE_CONTEXT).any()


def test_wide_context_values_follow_the_text() -> None:
    """format_v2.context_values against A4 written out by hand for a few positions."""
    s = np.arange(300) % 7 * 3  # symbols 0, 3, ..., 18, 0, ...
    u = f2.context_values(s, wide=True)
    assert u[0] == 0 and u[62] == 0
    assert u[63] == s[0] and u[64] == max(s[1], s[0]) and u[65] == max(s[2], s[1], s[0])
    for i in (100, 128, 200, 299):
        expect = max(s[i - 63], s[i - 64], s[i - 65]) if i < 128 else max(s[i - 63], s[i - 64], s[i - 65], s[i - 128])
        assert u[i] == expect
    assert (f2.context_values(s, wide=False)[64:] == s[:-64]).all()
    assert f2.context_of_value(np.array([0, 1, 2, 3, 6, 7, 8, 9]), True).tolist() == [0, 1, 1, 2, 2, 3, 3, 3]
    assert f2.context_of_value(np.array([0, 1, 2, 3, 6, 7, 8, 9]), False).tolist() == [0, 1, 1, 2, 2, 2, 2, 3]


def test_encodes_in_a_row_and_on_two_threads_match_fresh_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """The encoder's largest arrays come from per-thread buffers kept between encodes
    (cpu_v2._reused; here every array, however small): images of other sizes and kinds encoded
    in between, or on another thread at the same time, never change a stream."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(cpu_v2, "REUSE_MIN_BYTES", 0)

    rng = np.random.default_rng(3)
    photo = make_image("smooth", 130, 140, 3, seed=1)
    mask = (np.add.outer(np.arange(150), np.arange(130)) // 37 % 5).astype(np.uint8)
    noise = rng.integers(0, 256, (70, 90, 4), np.uint8)
    small = mask[:40, :50].copy()
    half = photo.copy()
    half[:, :64] = 9  # constant tiles where the photograph's tiles had symbols
    images = [photo, half, mask, noise, small, mask[:128, :128].copy(), photo[:64, :64].copy()]
    want = [r2.encode(image) for image in images]
    for _ in range(2):
        assert [cpu_v2.encode(image) for image in images] == want
        assert [cpu_v2.encode(image) for image in reversed(images)] == want[::-1]
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(cpu_v2.encode, images * 3))
    assert got == want * 3


def test_one_channel_small_images_finish_once_where_one_set_is_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """Images of at most ONE_SET_MAX_TILES tiles are finished twice (per-plane sets, one set)
    and the smaller kept, except where the two are the same stream: one channel, no palette
    first guess, one table set. Either way the bytes are the reference's. (The general
    encoder's path: the short ones, mask_encoder and small_encoder, are tested on their own.)"""
    monkeypatch.setattr(mask_encoder, "stream", lambda *args: None)
    monkeypatch.setattr(small_encoder, "stream", lambda *args: None)
    calls: list[int] = []
    kernel = cpu_v2._encode_all
    monkeypatch.setattr(cpu_v2, "_encode_all", lambda *a: (calls.append(1), kernel(*a))[1])
    flat = np.zeros((64, 64), np.uint8)
    mask = (np.add.outer(np.arange(64), np.arange(64)) // 23).astype(np.uint8)
    colour = make_image("smooth", 40, 48, 3, seed=2)
    for image, finishes in [(flat, 1), (mask, 1), (colour, 2)]:
        calls.clear()
        assert cpu_v2.encode(image) == r2.encode(image)
        assert len(calls) == finishes


@pytest.mark.parametrize("c", [1, 3, 4])
def test_rows_through_the_scratch_row_write_exactly_the_region(c: int) -> None:
    """cpu_v2._interleave and _fill_pixel (colour rows built in a scratch row, then copied
    out) against numpy: every window of a tile, the bytes around it untouched, and nothing
    of the scratch row's earlier contents written."""
    rng = np.random.default_rng(10 + c)
    th, tw = 7, 9
    planes = rng.integers(0, 256, (4, th * tw), dtype=np.uint8)
    tile = np.stack([planes[k].reshape(th, tw) for k in range(c)], axis=-1)
    for ya, yb, xa, xb in [(0, th, 0, tw), (2, 5, 3, 4), (1, 2, 0, 9), (0, 7, 8, 9), (3, 6, 1, 8)]:
        out_h, out_w, oy, ox = 12, 15, 2, 4  # the tile sits at (2, 4) of a 12 x 15 output
        for fill in (False, True):
            out = rng.integers(0, 256, out_h * out_w * c + 8, dtype=np.uint8)
            want = out.copy()
            view = want[: out_h * out_w * c].reshape(out_h, out_w, c)
            view[oy + ya : oy + yb, ox + xa : ox + xb] = tile[0, 0] if fill else tile[ya:yb, xa:xb]
            line = rng.integers(0, 256, cpu_v2.LINE_BYTES, dtype=np.uint8)
            if fill:
                cpu_v2._fill_pixel(planes, c, out, 0, out_w, oy, ox, ya, yb, xa, xb, line)
            else:
                cpu_v2._interleave(planes, c, tw, out, 0, out_w, oy, ox, ya, yb, xa, xb, line)
            np.testing.assert_array_equal(out, want)


def test_every_tile_raw_after_a_constant_tile_keeps_every_tile(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream whose tables cost more than its coded tiles save is written with every tile
    raw. A constant tile had room for its constant payload only (3 + 2C bytes): its raw
    payload ran into the next tile's, which then overwrote its end (the image decoded wrong),
    or past the buffer when it was the last tile (heap corruption). Noise with a constant
    64 x 1 strip (tile 1 of 2 x 2): the general encoder's stream is the reference's, every
    tile raw, and decodes exactly."""
    monkeypatch.setattr(small_encoder, "stream", lambda *args: None)  # the general encoder
    rng = np.random.default_rng(0)
    for _ in range(200):
        image = rng.integers(0, int(rng.integers(150, 256)), (65, 65, 3)).astype(np.uint8)
        image[:64, 64:] = 7
        image[64:, :] = rng.integers(0, 256, (1, 65, 3))
        data = cpu_v2.encode(image)
        if (f2.read_stream(np.frombuffer(data, np.uint8)).mode == f2.TILE_RAW).all():
            break
    else:
        pytest.fail("no image of these came out with every tile raw")
    assert data == r2.encode(image)
    np.testing.assert_array_equal(lossless.decode(data), image)
