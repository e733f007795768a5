"""Masks get the image's geometry with nearest-neighbour sampling, pixel-aligned."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prepkit.augment import CenterCrop, Pipeline, RandomHorizontalFlip, RandomResizedCrop, Resize, ToDtype, reference

from .helpers import pack, random_images


def _channel(images: list[np.ndarray], c: int) -> list[np.ndarray]:
    return [np.ascontiguousarray(im[:, :, c : c + 1]) for im in images]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40)), min_size=1, max_size=4),
    st.integers(1, 20), st.integers(1, 20), st.sampled_from(["nearest", "nearest-exact"]),
    st.sampled_from(["NCHW", "NHWC"]), st.integers(0, 99),
)  # fmt: skip
def test_mask_kernel_matches_reference(sizes, oh, ow, mode, layout, seed) -> None:
    masks = random_images(seed, sizes, 1)
    flat, offsets, shapes = pack(masks)
    pipe = Pipeline([RandomHorizontalFlip(), RandomResizedCrop((oh, ow)), ToDtype("float32", scale=True)], layout=layout)
    params = pipe.params(shapes, np.arange(len(sizes)), seed=seed)
    got = pipe.apply_mask(flat, offsets, shapes, params, mode=mode)
    want = np.stack(reference.mask(flat, offsets, shapes, params, exact=mode == "nearest-exact", layout=layout))
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, want)


def test_mask_from_the_image_matches_the_image_without_resampling() -> None:
    # Crops and flips copy pixels, so a mask cut from the image must equal the image.
    images = random_images(1, [(20, 31), (25, 25), (40, 12)], 3)
    flat, offsets, shapes = pack(images)
    pipe = Pipeline([RandomHorizontalFlip(), CenterCrop((11, 9)), RandomHorizontalFlip()])
    params = pipe.params(shapes, [7, 8, 9], seed=3)
    image_out = pipe(flat, offsets, shapes, params)
    for c in range(3):
        mflat, moffsets, mshapes = pack(_channel(images, c))
        mask_out = pipe.apply_mask(mflat, moffsets, mshapes, params)
        np.testing.assert_array_equal(mask_out[:, 0], image_out[:, c])


def test_label_mask_stays_aligned_with_the_resized_image() -> None:
    # An image of flat 8x8 blocks of random labels, used as its own mask, goes through
    # crop + 3x upscale + flip. Params.box says where each output pixel comes from:
    # the mask must carry the label of that source pixel, and wherever the bilinear
    # taps (within one source pixel) stay inside one block, the image must equal it.
    rs = np.random.default_rng(2)
    labels = rs.permutation(256)[:30].astype(np.uint8).reshape(5, 6)
    image = np.kron(labels, np.ones((8, 8), np.uint8))[:, :, None]
    flat, offsets, shapes = pack([image])
    pipe = Pipeline([CenterCrop((30, 41)), Resize((90, 123)), RandomHorizontalFlip(1.0)])
    params = pipe.params(shapes, [0])
    image_out = pipe(flat, offsets, shapes, params)[0, 0]
    y0, x0, bh, bw = params.box[0]
    h, w = params.out_size[0]
    ys, xs = np.arange(h)[:, None], (w - 1 - np.arange(w))[None, :]  # flipped columns
    for mode, shift in (("nearest-exact", 0.5), ("nearest", 0.0)):
        mask_out = pipe.apply_mask(flat, offsets, shapes, params, mode=mode)[0, 0]
        src_y = y0 + (ys + shift) * bh / h
        src_x = x0 + (xs + shift) * bw / w
        np.testing.assert_array_equal(mask_out, labels[(src_y // 8).astype(int), (src_x // 8).astype(int)])
    centre_y, centre_x = y0 + (ys + 0.5) * bh / h, x0 + (xs + 0.5) * bw / w
    inside = ((centre_y - 1) // 8 == (centre_y + 1) // 8) & ((centre_x - 1) // 8 == (centre_x + 1) // 8)
    mask_exact = pipe.apply_mask(flat, offsets, shapes, params, mode="nearest-exact")[0, 0]
    assert inside.mean() > 0.5
    np.testing.assert_array_equal(image_out[inside], mask_exact[inside])


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_mask_matches_torch_nearest(mode) -> None:
    torch = pytest.importorskip("torch")
    mask = random_images(4, [(23, 37)], 1)[0]
    flat, offsets, shapes = pack([mask])
    for size in [(5, 9), (46, 74), (23, 37), (31, 13)]:
        pipe = Pipeline([Resize(size)])
        got = pipe.apply_mask(flat, offsets, shapes, pipe.params(shapes, [0]), mode=mode)[0, 0]
        x = torch.from_numpy(mask).permute(2, 0, 1)[None]
        want = torch.nn.functional.interpolate(x, size=size, mode=mode)[0, 0].numpy()
        np.testing.assert_array_equal(got, want)
