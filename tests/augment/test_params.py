"""Host-side parameters: torchvision's draws, determinism across batches and devices."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from prepkit.augment import CenterCrop, Pipeline, RandomHorizontalFlip, RandomResizedCrop, Resize, rng

from .torchvision_like import resized_output_size, rrc_get_params

sides = st.integers(1, 600)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(sides, sides), min_size=1, max_size=6),
    st.sampled_from([(0.08, 1.0), (0.5, 0.5), (1.2, 3.0), (0.0, 0.01)]),
    st.sampled_from([(3 / 4, 4 / 3), (1.0, 1.0), (0.1, 10.0), (2.0, 3.0)]),
    st.integers(0, 2**40),
    st.integers(0, 100),
)
def test_random_resized_crop_boxes_match_torchvision_get_params(sizes, scale, ratio, seed, epoch) -> None:
    op = RandomResizedCrop(8, scale=scale, ratio=ratio)
    shapes = np.array([(h, w, 3) for h, w in sizes], np.int32)
    indices = np.arange(len(sizes)) * 7 + 3
    params = Pipeline([op]).params(shapes, indices, seed, epoch)
    u = rng.uniform(seed, epoch, indices, 0, 40).reshape(-1, 10, 4)
    for k, (h, w) in enumerate(sizes):
        i, j, ch, cw = rrc_get_params(h, w, scale, ratio, u[k])
        assert tuple(params.region[k]) == (i, j, ch, cw)
        assert tuple(params.resized[k]) == (8, 8)


def test_fallback_to_centre_crop_happens_and_is_exact() -> None:
    # An area above the image's makes every attempt fail: the fallback decides.
    op = RandomResizedCrop(4, scale=(2.0, 3.0), ratio=(0.5, 2.0))
    shapes = np.array([[10, 100, 1], [100, 10, 1], [30, 40, 1]], np.int32)
    params = Pipeline([op]).params(shapes, [0, 1, 2], seed=1)
    # wide: h = 10, w = round(10 * 2) = 20; tall: w = 10, h = round(10 / 0.5) = 20; else whole
    assert params.region.tolist() == [[0, 40, 10, 20], [40, 0, 20, 10], [0, 0, 30, 40]]


def test_params_do_not_depend_on_batch_composition() -> None:
    pipe = Pipeline([RandomResizedCrop(16), RandomHorizontalFlip(), CenterCrop(12)])
    rs = np.random.default_rng(5)
    shapes = np.column_stack([rs.integers(1, 300, 50), rs.integers(1, 300, 50), np.full(50, 3)]).astype(np.int32)
    indices = rs.permutation(10_000)[:50]
    whole = pipe.params(shapes, indices, seed=42, epoch=7)
    order = rs.permutation(50)
    for part in (order[:1], order[:17], order[17:]):
        sub = pipe.params(shapes[part], indices[part], seed=42, epoch=7)
        for name in ("region", "resized", "offset", "out_size", "flip"):
            np.testing.assert_array_equal(getattr(sub, name), getattr(whole, name)[part])


def test_seed_and_epoch_change_the_draws() -> None:
    pipe = Pipeline([RandomResizedCrop(16), RandomHorizontalFlip()])
    shapes = np.tile(np.array([[300, 400, 3]], np.int32), (64, 1))
    a = pipe.params(shapes, np.arange(64), seed=1, epoch=0)
    for other in (pipe.params(shapes, np.arange(64), seed=2, epoch=0), pipe.params(shapes, np.arange(64), seed=1, epoch=1)):
        assert (a.region != other.region).any(axis=1).mean() > 0.9
        assert (a.flip != other.flip).any()


def test_flip_probability() -> None:
    shapes = np.tile(np.array([[2, 2, 1]], np.int32), (20_000, 1))
    for p in (0.0, 0.3, 1.0):
        flips = Pipeline([RandomHorizontalFlip(p)]).params(shapes, np.arange(20_000), seed=3).flip
        assert abs(flips.mean() - p) < 0.02


def test_uniform_draws_look_uniform() -> None:
    u = rng.uniform(0, 0, np.arange(10_000), 0, 8)
    assert u.min() >= 0.0 and u.max() < 1.0
    counts = np.histogram(u, bins=10, range=(0, 1))[0]
    assert counts.min() > 7_500 and counts.max() < 8_500


@settings(max_examples=100, deadline=None)
@given(sides, sides, st.integers(1, 300))
def test_resize_shorter_side_matches_torchvision(h, w, size) -> None:
    params = Pipeline([Resize(size)]).params(np.array([[h, w, 1]], np.int32), [0])
    assert tuple(params.out_size[0]) == resized_output_size(h, w, size)


@settings(max_examples=100, deadline=None)
@given(sides, sides, st.integers(1, 600), st.integers(1, 600), st.booleans())
def test_center_crop_offset_and_box(h, w, th, tw, flip) -> None:
    th, tw = min(th, h), min(tw, w)
    ops = [RandomHorizontalFlip(1.0 if flip else 0.0), CenterCrop((th, tw))]
    params = Pipeline(ops).params(np.array([[h, w, 1]], np.int32), [0])
    top, left = int(round((h - th) / 2.0)), int(round((w - tw) / 2.0))
    if flip:  # a crop of the mirrored image at `left` is the mirror of a crop at w - left - tw
        left = w - left - tw
    assert tuple(params.region[0]) == (top, left, th, tw)
    np.testing.assert_allclose(params.box[0], [top, left, th, tw])
