"""The encoder's short path for images of up to small_encoder.MAX_TILES tiles on one thread
(small_encoder): it writes the general encoder's bytes (and so the reference's) wherever it
applies, in each of the general encoder's outcomes (a table set per plane, one set for all, or
sets per tile class; plane contexts kept or folded; coded, palette, runs and raw tiles; every
tile raw when the tables cost more than they save), and hands every other image to the
general encoder."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from prepkit import lossless
from prepkit.lossless import cpu_v2, mask_encoder, small_encoder, table_sets
from prepkit.lossless import format as fmt
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import reference_v2 as r2
from prepkit.warmup import _photo  # smooth gradients and noise: coded with predictors

from .images import general_encode, make_image, mixed_tiles, rendered


@pytest.fixture
def short_paths(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each encode since took the short path (its stream was not None)."""
    taken: list[bool] = []
    stream = small_encoder.stream

    def spy(*args: object) -> bytes | None:
        data = stream(*args)  # type: ignore[arg-type]
        taken.append(data is not None)
        return data

    monkeypatch.setattr(small_encoder, "stream", spy)
    return taken


def _coded_sets(data: bytes) -> int:
    """The stream's table sets besides those of its runs tables."""
    modes = f2.read_stream(np.frombuffer(data, np.uint8)).mode
    runs_sets = f2.runs_sets(f2.set_tables(data[5])) if np.isin(modes, f2.RUNS_MODES).any() else 0
    return data[7] - runs_sets


def _sets_and_modes(data: bytes) -> tuple[int, np.ndarray]:
    stream = f2.read_stream(np.frombuffer(data, np.uint8))
    return data[7], stream.mode


@pytest.mark.parametrize(("h", "w", "c", "tile"), [(32, 32, 3, 64), (64, 64, 3, 64), (17, 30, 4, 32),
                                                    (20, 24, 3, 32), (64, 40, 3, 64), (5, 64, 3, 64),
                                                    (40, 40, 1, 64), (50, 33, 0, 64)])
def test_photographs_of_one_tile_take_the_short_path(short_paths: list[bool], h: int, w: int, c: int,
                                                     tile: int) -> None:
    image = _photo(h, w, max(c, 1), seed=h + w)
    if c == 0:  # an H x W image
        image = image[:, :, 0]
    data = lossless.encode(image, tile=tile)
    assert short_paths == [True]
    assert data == general_encode(image, tile) == r2.encode(image, tile=tile)
    assert (_sets_and_modes(data)[1] == f2.TILE_CODED).all()
    np.testing.assert_array_equal(lossless.decode(data), image)


def _outcome(data: bytes, channels: int) -> str:
    n_sets, modes = _sets_and_modes(data)
    if modes[0] == f2.TILE_PALETTE:
        return "palette tile"
    if modes[0] in f2.RUNS_MODES:
        return "runs tile"
    if modes[0] == f2.TILE_RAW:
        # Every tile raw because the tables cost more than they save: C sets of empty tables.
        return "raw stream" if int.from_bytes(data[20:24], "little") == 4 * channels else "raw tile"
    return "coded, one set" if n_sets == 1 else "coded, a set per plane"


def _case(kind: str) -> np.ndarray:
    rng = np.random.default_rng(1)
    colours = rng.integers(0, 256, (4, 3)).astype(np.uint8)
    if kind == "palette tile":  # four colours dithered: no runs, no smooth planes
        return colours[rng.integers(0, 4, (48, 48))]
    if kind == "palette tile of 32 colours":
        return rng.integers(0, 256, (32, 3)).astype(np.uint8)[rng.integers(0, 32, (29, 29))]
    if kind == "runs tile":  # blocks of three colours
        return np.repeat(np.repeat(colours[:3][rng.integers(0, 3, (6, 6))], 8, axis=0), 8, axis=1)
    if kind == "coded, one set":
        return _photo(64, 64, 3, seed=0)
    if kind == "coded, a set per plane":  # planes of unlike statistics
        planes = [rng.integers(0, 256, (64, 64)), np.tile(np.arange(64) * 2, (64, 1)), rng.integers(0, 4, (64, 64)) * 3]
        return np.stack(planes, axis=-1).astype(np.uint8)
    if kind == "raw tile":  # noise: no coded estimate below the raw tile
        return rng.integers(0, 256, (40, 40, 3)).astype(np.uint8)
    # coded below raw, but its tables make the stream larger than that of the raw tile
    return (rng.integers(0, 64, (24, 24, 3)) + 17).astype(np.uint8)


@pytest.mark.parametrize("kind", ["coded, one set", "coded, a set per plane", "raw tile", "raw stream", "palette tile",
                                  "palette tile of 32 colours", "runs tile"])
def test_each_of_the_general_encoders_outcomes(short_paths: list[bool], kind: str) -> None:
    """One table set for every plane or one per plane (the smaller stream), a raw tile where
    the coded estimate is not smaller, the raw tile's stream where the tables cost more than
    they save, a palette tile (the index plane in its own set, or set 0 in the one-set
    stream) and a runs tile (its tables after the others): each the general encoder's and the
    reference's stream."""
    image = _case(kind)
    data = lossless.encode(image)
    assert short_paths == [True]
    assert _outcome(data, 3) == kind.removesuffix(" of 32 colours")
    assert data == general_encode(image, 64) == r2.encode(image)
    np.testing.assert_array_equal(lossless.decode(data), image)


def _random_image(rng: np.random.Generator, k: int, tile: int, most: int = table_sets.MIN_TILES - 1) -> np.ndarray:
    """Up to `most` tiles of noise, narrow noise, a smooth image, random walks or flat blocks."""
    n_tiles = int(rng.integers(1, most + 1))
    rows = int(rng.integers(1, n_tiles + 1))
    cols = max(1, n_tiles // rows)
    h = int(rng.integers((rows - 1) * tile + 1, rows * tile + 1))
    w = int(rng.integers((cols - 1) * tile + 1, cols * tile + 1))
    c = int(rng.choice([1, 3, 4]))
    kind = k % 5
    if kind == 0:
        image = rng.integers(0, 256, (h, w, c))
    elif kind == 1:  # narrow noise (some tiles few colours: palette and runs candidates)
        image = rng.integers(100, 100 + int(rng.integers(2, 80)), (h, w, c)) // int(rng.choice([1, 16]))
    elif kind == 2:
        image = _photo(h, w, c, seed=k).astype(np.int64)
    elif kind == 3:
        image = np.cumsum(rng.integers(-2, 3, (h, w, c)), axis=1) + 128
    else:  # a flat image with blocks of noise or of one colour (constant, runs and coded tiles)
        image = np.zeros((h, w, c), np.int64) + rng.integers(0, 256, c)
        for _ in range(int(rng.integers(1, 8))):
            y, x, side = int(rng.integers(0, h)), int(rng.integers(0, w)), int(rng.integers(1, 40))
            block = image[y : y + side, x : x + side]
            block[...] = rng.integers(0, 256, block.shape) if rng.random() < 0.5 else rng.integers(0, 256, c)
    return np.clip(image, 0, 255).astype(np.uint8)


def test_random_images_of_fewer_than_min_tiles_come_out_as_the_general_encoders() -> None:
    """Random images of 1 to 31 tiles of 16, 32 and 64 (_random_image), one, three and four
    channels, some with fast_decode: every plane-context outcome (not tried, kept, folded)."""
    rng = np.random.default_rng(59)
    taken = 0
    outcomes = set()
    for k in range(150):
        tile = int(rng.choice([16, 32, 64]))
        image = _random_image(rng, k, tile)
        h, w, c = image.shape
        fast = k % 7 == 0
        prepared, flags = fmt.prepare(image, tile)
        tried = f2.encoder_plane_context(c, fmt.Header(h, w, c, tile, 0).n_tiles, fast)
        short = small_encoder.stream(prepared, f2.encoder_flags(flags, True, tried), tile, fast)
        general = general_encode(image, tile, fast)
        assert lossless.encode(image, tile=tile, fast_decode=fast) == general
        if k % 10 == 0:
            assert general == r2.encode(image, tile=tile, fast_decode=fast), (k, image.shape, tile, fast)
        if short is not None:
            taken += 1
            assert short == general, (k, image.shape, tile, fast)
            outcomes.add((tried, bool(short[5] & f2.FLAG_PLANE_CONTEXT)))
            np.testing.assert_array_equal(lossless.decode(short).reshape(image.shape), image)
    assert taken >= 140, taken
    assert outcomes == {(False, False), (True, True), (True, False)}, outcomes


def test_a_constant_colour_image_is_constant_planes() -> None:
    image = np.zeros((20, 30, 3), np.uint8)
    image[...] = (7, 200, 31)
    data = lossless.encode(image, tile=32)
    assert data == general_encode(image, 32) == r2.encode(image, tile=32)
    assert len(data) == f2.HEADER_SIZE + 4 + 1 + 2 + 2 * 3  # one set of empty tables, a constant tile
    np.testing.assert_array_equal(lossless.decode(data), image)


def test_an_encode_without_runs_tiles_goes_to_the_general_encoder(short_paths: list[bool]) -> None:
    image = _photo(40, 40, 3, seed=2)
    data = cpu_v2.encode(image, runs_tiles=False)
    assert data == r2.encode(image, runs_tiles=False)
    assert short_paths == []


def test_the_largest_image_it_takes() -> None:
    """Two rows of MAX_TILES / 2 tiles: the short path's, with table sets per tile class and
    plane contexts tried; one column more is the general encoder's."""
    width = 16 * (small_encoder.MAX_TILES // 2)
    image = _photo(32, width + 1, 3, seed=6)
    assert not small_encoder.applies(32, width + 1, 16)
    prepared, flags = fmt.prepare(image, 16)
    assert small_encoder.stream(prepared, f2.encoder_flags(flags, True, True), 16, False) is None
    image = np.ascontiguousarray(image[:, :width])
    assert small_encoder.applies(32, width, 16) and table_sets.applies(small_encoder.MAX_TILES, 3, False, 8)
    prepared, flags = fmt.prepare(image, 16)
    data = small_encoder.stream(prepared, f2.encoder_flags(flags, True, True), 16, False)
    assert data == general_encode(image, 16) == r2.encode(image, tile=16)
    np.testing.assert_array_equal(lossless.decode(data), image)


@pytest.mark.parametrize("channels", [None, 3])
def test_table_sets_per_tile_class(short_paths: list[bool], channels: int | None) -> None:
    """Two textures of unlike residuals in 36 tiles (mixed_tiles): more sets than planes, as
    the general encoder and the reference write them."""
    image = mixed_tiles(channels)
    c = 1 if channels is None else channels
    data = lossless.encode(image)
    assert short_paths == [True]
    assert data == general_encode(image, 64) == r2.encode(image)
    assert _coded_sets(data) > c, data[7]  # more sets than planes
    np.testing.assert_array_equal(lossless.decode(data), image)


def test_random_images_of_up_to_80_tiles_come_out_as_the_general_encoders() -> None:
    """Random images (_random_image) of 32 to 80 tiles of 16: table sets per tile class tried."""
    rng = np.random.default_rng(60)
    outcomes = set()
    for k in range(12):
        image = _random_image(rng, k, 16, most=80)
        while fmt.Header(*image.shape, 16, 0).n_tiles < table_sets.MIN_TILES:
            image = _random_image(rng, k, 16, most=80)
        h, w, c = image.shape
        prepared, flags = fmt.prepare(image, 16)
        tried = f2.encoder_plane_context(c, fmt.Header(h, w, c, 16, 0).n_tiles)
        short = small_encoder.stream(prepared, f2.encoder_flags(flags, True, tried), 16, False)
        general = general_encode(image, 16)
        assert short == general, (k, image.shape)
        if k % 4 == 0:
            assert general == r2.encode(image, tile=16), (k, image.shape)
        outcomes.add(_coded_sets(general) > c)
        np.testing.assert_array_equal(lossless.decode(general).reshape(image.shape), image)
    assert outcomes == {False, True}, outcomes


@pytest.mark.parametrize("kind", ["kept", "folded"])
def test_plane_contexts_kept_where_they_pay_and_folded_where_not(short_paths: list[bool], kind: str) -> None:
    """12 tiles: plane contexts tried. A rendered image keeps them (eight tables per set); a
    smooth one does not, and its stream is the one written with four tables per set from the
    start."""
    image = rendered(192, 256, 0) if kind == "kept" else make_image("smooth", 256, 192, 3, seed=1)
    data = lossless.encode(image)
    assert short_paths == [True]
    assert bool(data[5] & f2.FLAG_PLANE_CONTEXT) == (kind == "kept")
    assert data == general_encode(image, 64) == r2.encode(image)
    if kind == "folded":
        assert data == r2.encode(image, plane_context=False)
    np.testing.assert_array_equal(lossless.decode(data), image)


@pytest.mark.parametrize("kind", ["mask", "grey levels", "grey photograph"])
def test_one_channel_tiles(short_paths: list[bool], monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """A mask of blocks (mask_encoder's constant and runs tiles, written from the short
    path's own call), a tile of a few grey levels (a palette candidate that the runs choice
    and the palette guess weigh) and a grey photograph: the general encoder's streams."""
    rng = np.random.default_rng(4)
    if kind == "mask":
        image = np.repeat(np.repeat(rng.integers(0, 3, (8, 8)), 8, axis=0), 8, axis=1).astype(np.uint8)
    elif kind == "grey levels":
        image = (rng.integers(0, 6, (40, 40)) * 40).astype(np.uint8)
    else:
        image = _photo(40, 40, 1, seed=1)[:, :, 0]
    masks: list[bool] = []
    monkeypatch.setattr(mask_encoder, "stream", lambda *args: masks.append(True))
    data = lossless.encode(image)
    assert short_paths == [True] and masks == []
    assert data == general_encode(image, 64) == r2.encode(image)
    if kind == "mask":
        assert _sets_and_modes(data)[1][0] in f2.RUNS_MODES
    np.testing.assert_array_equal(lossless.decode(data), image)


def test_the_tiles_run_on_numba_threads_only_where_there_are_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below cpu.use_parallel's tile count the encoder's parallel loops run on one thread (a
    parallel region per kernel woke numba's other threads for a few microseconds of work
    each), in the short path and in the general encoder; larger images keep the thread's own
    setting; and the setting is back after."""
    import numba

    from prepkit.lossless import cpu
    from prepkit.parallel import numba_threads

    threads: list[tuple[str, int]] = []
    for module, name in ((cpu_v2, "_encode"), (small_encoder, "_all_tiles")):
        kernel = getattr(module, name)

        def spy(*args: object, kernel: Any = kernel, name: str = name, **kwargs: object) -> Any:
            threads.append((name, numba.get_num_threads()))
            return kernel(*args, **kwargs)

        monkeypatch.setattr(module, name, spy)
    with numba_threads(numba.config.NUMBA_NUM_THREADS):  # (an earlier test may have set fewer)
        own = numba.get_num_threads()
        small = _photo(128, 192, 3, seed=4)  # six tiles
        large = _photo(64 * 8, 64 * 8, 3, seed=5)  # 64 tiles
        assert not cpu.use_parallel(6)
        assert lossless.encode(small) == r2.encode(small)
        assert cpu_v2.encode(small, runs_tiles=False) == r2.encode(small, runs_tiles=False)  # the general encoder's
        lossless.encode(large)
        cpu_v2.encode(large, runs_tiles=False)
        big = own if cpu.use_parallel(64) else 1
        assert threads == [("_all_tiles", 1), ("_encode", 1), ("_all_tiles", big), ("_encode", big)]
        assert numba.get_num_threads() == own
