"""The encoder's short path for one-channel images of constant and runs tiles (mask_encoder):
it writes the reference's bytes where it applies, including tiles too small for a constant
payload, and hands every other image to the general encoder, whose stream is then the
reference's as well."""

from __future__ import annotations

import numpy as np
import pytest

from prepkit import lossless
from prepkit.lossless import cpu_v2, mask_encoder, small_encoder
from prepkit.lossless import format_v2 as f2
from prepkit.lossless import reference_v2 as r2

from .test_v2_runs import blobs


@pytest.fixture
def short_paths(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each encode since took the short path (its stream was not None). Images of up
    to small_encoder.MAX_TILES tiles take small_encoder's path, which runs mask_encoder's
    kernel itself: here they go through the general encoder, whose step this is."""
    monkeypatch.setattr(small_encoder, "stream", lambda *args: None)
    taken: list[bool] = []
    stream = mask_encoder.stream

    def spy(*args: object) -> bytes | None:
        data = stream(*args)  # type: ignore[arg-type]
        taken.append(data is not None)
        return data

    monkeypatch.setattr(mask_encoder, "stream", spy)
    return taken


def _modes(data: bytes) -> np.ndarray:
    return f2.read_stream(np.frombuffer(data, np.uint8)).mode


@pytest.mark.parametrize(("h", "w", "seed"), [(200, 260, 0), (150, 170, 3), (65, 130, 1), (131, 66, 2), (70, 200, 6)])
def test_masks_of_constant_and_runs_tiles_take_the_short_path(short_paths: list[bool], h: int, w: int,
                                                              seed: int) -> None:
    """Partial tiles at the right and bottom edges (65 x 130: a row of 1-pixel-high tiles)
    too; every stream is the reference's and decodes."""
    image = blobs(h, w, None, seed=seed, n=4)
    data = lossless.encode(image)
    assert short_paths == [True]
    assert data == r2.encode(image)
    modes = _modes(data)
    runs_mode = f2.TILE_RUNS_PALETTE if (modes == f2.TILE_RUNS_PALETTE).any() else f2.TILE_RUNS_SAME  # (runs.choose)
    assert (modes == runs_mode).any()
    assert np.isin(modes, [f2.TILE_CODED, runs_mode, f2.TILE_RAW]).all()
    np.testing.assert_array_equal(lossless.decode(data), image)


def test_tiles_too_small_for_a_constant_payload_are_raw(short_paths: list[bool]) -> None:
    """A constant tile of 3 pixels or fewer is written raw (its 4-byte payload is not smaller):
    a 130 x 129 image ends in a tile of 2 x 1 pixels."""
    image = np.zeros((130, 129), np.uint8)
    image[20:90, 10:100] = 7
    image[128:, 128:] = 9  # the corner tile: one value, 2 pixels
    data = lossless.encode(image)
    assert short_paths == [True]
    assert data == r2.encode(image)
    modes = _modes(data)
    assert modes[-1] == f2.TILE_RAW and (modes == f2.TILE_CODED).sum() >= 4
    np.testing.assert_array_equal(lossless.decode(data), image)


def test_an_image_of_constant_tiles_has_no_runs_tables(short_paths: list[bool]) -> None:
    image = np.full((100, 200), 42, np.uint8)
    image[64:, :64] = 3
    data = lossless.encode(image)
    assert short_paths == [True]
    assert data == r2.encode(image)
    assert data[7] == 1  # one table set: the coded planes', all empty
    np.testing.assert_array_equal(lossless.decode(data), image)


@pytest.mark.parametrize("kind", ["noise tile", "many values", "runs that do not pay"])
def test_other_images_go_to_the_general_encoder(short_paths: list[bool], kind: str) -> None:
    """A tile of short runs (not sure to become a runs tile), a tile of more values than a grey
    palette holds, and an image whose one runs tile saves less than its tables cost: the short
    path declines (None), and the general encoder writes the reference's stream."""
    rng = np.random.default_rng(5)
    if kind == "noise tile":
        image = blobs(128, 128, None, seed=1, n=4)
        image[:64, :64] = rng.integers(0, 3, (64, 64)) * 50
    elif kind == "many values":
        image = blobs(128, 128, None, seed=1, n=4)
        image[64:, 64:] = np.add.outer(np.arange(64), np.arange(64)).astype(np.uint8)
    else:
        image = np.zeros((2, 16), np.uint8)  # a runs tile of 13 bytes saves less than its tables
        image[:, 1:] = 1
    data = lossless.encode(image)
    assert short_paths == [False]
    assert data == r2.encode(image)
    if kind == "runs that do not pay":
        assert (_modes(data) == f2.TILE_CODED).all()
    np.testing.assert_array_equal(lossless.decode(data), image)


def test_the_short_path_is_one_channel_and_runs_first_only(short_paths: list[bool]) -> None:
    """Colour masks, streams without runs tiles and the weighed encoder (runs_first=False)
    take the general encoder."""
    colour = blobs(150, 170, 3, seed=3)
    grey = blobs(150, 170, None, seed=3)
    assert cpu_v2.encode(colour) == r2.encode(colour)
    assert cpu_v2.encode(grey, runs_tiles=False) == r2.encode(grey, runs_tiles=False)
    assert cpu_v2.encode(grey, runs_first=False) == r2.encode(grey, runs_first=False)
    assert short_paths == []
    assert cpu_v2.encode(grey) == r2.encode(grey)
    assert short_paths == [True]
