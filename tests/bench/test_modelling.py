"""prepkit.bench.modelling: each estimate finds the redundancy it models in an image made to
have it, and only counts what the encoder really coded."""

from collections.abc import Callable

import numpy as np
import pytest

from prepkit.bench import modelling
from prepkit.lossless import reference_v2 as r2


def dithered_ramp(height: int = 64, width: int = 128) -> np.ndarray:
    """A rendered-looking image: a slow ramp per channel with a one-level checkerboard dither,
    the pattern the above-left and above-right predictors predict exactly."""
    y, x = np.mgrid[:height, :width]
    ramps = np.stack([x // 9 + y // 13, x // 5 + y // 3, 2 * y // 7 + x // 11], axis=-1) + np.array([40, 90, 150])
    dither = np.stack([(x + y) % 2, (x + y + 1) % 2, 2 * ((x + y) % 2)], axis=-1)
    return (ramps + dither).astype(np.uint8)


def correlated_noise(height: int = 64, width: int = 128) -> np.ndarray:
    """Blue moves twice as far as green from pixel to pixel: after subtract-green, plane 2's
    residuals are plane 1's, which the cross-colour step removes and no colour transform does."""
    rng = np.random.default_rng(5)
    g = 100 + np.cumsum(rng.integers(-2, 3, (height, width)), axis=1) % 40
    r = rng.integers(0, 4, (height, width)) + 60
    return np.stack([r, g, 2 * g], axis=-1).astype(np.uint8)


def test_negated_is_the_zigzag_code_of_the_negated_residual() -> None:
    codes = np.arange(256)
    back = modelling.negated(modelling.negated(codes))
    np.testing.assert_array_equal(back, codes)
    residuals = r2.unzigzag(codes)
    np.testing.assert_array_equal(modelling.signed(r2.unzigzag(modelling.negated(codes))),
                                  modelling.signed(-residuals))
    assert modelling.negated(np.array([0, 255])).tolist() == [0, 255]


def test_coded_tiles_rebuild_the_streams_symbols() -> None:
    """The tiles it collects cost exactly what the stream's own tables say of their symbols:
    the refine estimate starts from the encoder's real choices."""
    stream = modelling.coded_tiles(dithered_ramp())
    assert len(stream.tiles) == 2
    for tile in stream.tiles:
        symbols = tile.symbols()
        assert tile.pixels.shape == (64, 64, 3) and len(symbols) == 3
        assert modelling.tile_cost(stream, symbols, tile.sets) > 0


def test_predictors_find_the_checkerboard_dither() -> None:
    stream = modelling.coded_tiles(dithered_ramp())
    ratio = modelling.predictors(stream)["six more predictors"]
    assert ratio < 0.8


def test_signs_find_residual_signs_that_follow_the_row_above() -> None:
    """Under the checkerboard every residual's sign is the opposite of its upper neighbour's:
    the sign context and the learned flip both see it, where A4's context cannot."""
    ratios = modelling.signs(modelling.coded_tiles(dithered_ramp()))
    assert ratios["sign of the residual above as a context (3x the tables)"] < 0.5
    assert ratios["negate by a learned table of 27 sign patterns (+4 bytes)"] < 0.8


def test_xcolour_finds_residuals_that_follow_another_plane() -> None:
    stream = modelling.coded_tiles(correlated_noise())
    assert modelling.xcolour(stream)["cross-colour on the residuals (+3 bytes a tile)"] < 0.9
    # a grey image has no second plane to predict from
    assert modelling.xcolour(modelling.coded_tiles(correlated_noise()[..., 1])) == {}


def test_refine_never_counts_a_loss_and_more_options_save_at_least_as_much() -> None:
    stream = modelling.coded_tiles(correlated_noise())
    saved = modelling.refine(stream)
    assert 0 <= saved["same colour transform"] <= saved["every colour transform"] < 0.5
    assert saved["context-free cost"] >= 0


@pytest.mark.parametrize("make", [dithered_ramp, correlated_noise])
def test_estimate_weights_every_variant_over_the_images(make: Callable[[], np.ndarray]) -> None:
    images = [make(), make()[:, ::-1].copy()]
    rows = list(modelling.estimate(images, modelling.IDEAS))
    ideas = {idea for idea, _, _ in rows}
    assert ideas == set(modelling.IDEAS)
    one = {(idea, name): v for idea, name, v in modelling.estimate(images[:1], modelling.IDEAS)}
    two = {(idea, name): v for idea, name, v in modelling.estimate(images[1:], modelling.IDEAS)}
    for idea, name, value in rows:  # a weighted mean lies between the images' own values
        low, high = sorted((one[idea, name], two[idea, name]))
        assert low - 1e-12 <= value <= high + 1e-12, (idea, name)


def test_planes_never_take_a_runs_tiles_set() -> None:
    """A stream with runs tiles appends their tables as whole sets: a coded plane of
    mostly zero residuals could look cheap under them, so plane_costs prices them out."""
    image = dithered_ramp(128, 128)
    image[:, :64] = np.where((np.arange(64) // 9 % 2 == 0)[None, :, None], 30, 200)  # runs tiles on the left
    stream = modelling.coded_tiles(image)
    assert stream.runs_sets.any() and not stream.runs_sets.all()
    tile = stream.tiles[0]
    costs = modelling.plane_costs(stream, np.zeros(0, np.int64), tile.symbols()[0])
    assert (costs[stream.runs_sets] > costs[~stream.runs_sets].max()).all()
