"""Bitstream v1 round trips: numba encoder == numpy reference encoder, and decode(encode(x)) == x.

v1 is no longer the default but stays readable (and writable with version=1).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prepkit import lossless
from prepkit.lossless import reference

from .images import images, make_image

TILES = st.sampled_from([16, 32, 64])


def encode_v1(image: np.ndarray, tile: int = 64) -> bytes:
    return lossless.encode(image, tile, version=1)


def max_size_v1(height: int, width: int, channels: int, tile: int = 64) -> int:
    return lossless.max_encoded_size(height, width, channels, tile, version=1)


@settings(max_examples=60, deadline=None)
@given(image=images(), tile=TILES)
def test_roundtrip_matches_reference(image: np.ndarray, tile: int) -> None:
    data = encode_v1(image, tile)
    assert data == reference.encode(image, tile)  # byte-identical twins
    out = lossless.decode(data)
    assert out.shape == image.shape and out.dtype == np.uint8
    np.testing.assert_array_equal(out, image)
    np.testing.assert_array_equal(reference.decode(data), image)


@settings(max_examples=40, deadline=None)
@given(image=images(max_side=150), tile=TILES, data=st.data())
def test_roi_equals_slice_of_full_decode(image: np.ndarray, tile: int, data: st.DataObject) -> None:
    h, w = image.shape[:2]
    y0 = data.draw(st.integers(0, h - 1))
    y1 = data.draw(st.integers(y0 + 1, h))
    x0 = data.draw(st.integers(0, w - 1))
    x1 = data.draw(st.integers(x0 + 1, w))
    stream = encode_v1(image, tile)
    got = lossless.decode(stream, roi=(y0, x0, y1, x1))
    np.testing.assert_array_equal(got, image[y0:y1, x0:x1])
    np.testing.assert_array_equal(reference.decode(stream, (y0, x0, y1, x1)), image[y0:y1, x0:x1])


@pytest.mark.parametrize("shape", [(1, 1), (1, 1, 3), (1, 300, 4), (300, 1), (129, 65, 3), (64, 64, 1)])
def test_edge_shapes(shape: tuple[int, ...]) -> None:
    c = shape[2] if len(shape) == 3 else None
    image = make_image("smooth", shape[0], shape[1], c, seed=1)
    out = lossless.decode(encode_v1(image))
    assert out.shape == image.shape
    np.testing.assert_array_equal(out, image)


def test_header_records_shape_and_2d() -> None:
    header = lossless.read_header(encode_v1(np.zeros((5, 7), np.uint8), tile=32))
    assert (header.height, header.width, header.channels, header.tile) == (5, 7, 1, 32)
    assert header.is_2d and not header.colour and header.version == 1
    header = lossless.read_header(encode_v1(np.zeros((5, 7, 3), np.uint8)))
    assert not header.is_2d and header.colour and header.shape == (5, 7, 3)


@pytest.mark.parametrize(
    "image, tile",
    [
        (np.zeros((4, 4, 2), np.uint8), 64),
        (np.zeros((4, 4, 3), np.uint16), 64),
        (np.zeros((4,), np.uint8), 64),
        (np.zeros((0, 4, 3), np.uint8), 64),
        (np.zeros((4, 4, 3), np.uint8), 48),
        (np.zeros((70000, 1), np.uint8), 64),
    ],
)
def test_bad_inputs_raise_value_error(image: np.ndarray, tile: int) -> None:
    with pytest.raises(ValueError):
        encode_v1(image, tile)


def test_max_encoded_size_bounds_noise() -> None:
    rng = np.random.default_rng(3)
    for shape in [(1, 1, 1), (17, 33, 3), (64, 64, 4), (100, 130, 3), (65, 200, 1)]:
        for tile in (16, 64):
            # Noise, and the worst pattern for Rice: values that alternate 0 and 128+.
            noise = rng.integers(0, 256, shape, dtype=np.uint8)
            spikes = (rng.integers(0, 2, shape) * 128 + rng.integers(0, 2, shape) * 127).astype(np.uint8)
            bound = max_size_v1(shape[0], shape[1], shape[2], tile)
            for img in (noise, spikes):
                assert len(encode_v1(img, tile)) <= bound


def test_decode_batch_cpu_and_packed() -> None:
    imgs = [make_image("smooth", h, w, c, seed=h) for h, w, c in [(30, 40, 3), (7, 9, 4), (70, 65, 1)]]
    imgs.append(make_image("noise", 20, 21, None, seed=5))
    streams = [encode_v1(i, tile=32) for i in imgs]
    for got, want in zip(lossless.decode_batch(streams), imgs, strict=True):
        np.testing.assert_array_equal(got, want)
    rois = [(1, 2, 20, 30), None, (60, 0, 70, 65), (0, 0, 1, 1)]
    flat, offsets, shapes = lossless.decode_batch_packed(streams, "cpu", rois)
    for i, (img, roi) in enumerate(zip(imgs, rois, strict=True)):
        want = img if roi is None else img[roi[0] : roi[2], roi[1] : roi[3]]
        want = want.reshape(want.shape[0], want.shape[1], -1)
        assert tuple(shapes[i]) == want.shape
        np.testing.assert_array_equal(flat[offsets[i] : offsets[i] + want.size].reshape(want.shape), want)
    assert lossless.decode_batch([]) == []
    with pytest.raises(ValueError):
        lossless.decode_batch(streams, device="tpu")
    with pytest.raises(ValueError):
        lossless.decode(streams[0], roi=(0, 0, 31, 5))


@pytest.mark.parametrize("min_tiles", [1, 10**9])
def test_parallel_and_serial_kernels_agree(monkeypatch: pytest.MonkeyPatch, min_tiles: int) -> None:
    # Small images normally take the serial path; force each path in turn.
    from prepkit.lossless import cpu

    monkeypatch.setattr(cpu, "MIN_TILES_PER_THREAD", min_tiles)
    image = make_image("smooth", 150, 170, 3, seed=11)
    stream = encode_v1(image, tile=16)
    assert stream == reference.encode(image, tile=16)
    np.testing.assert_array_equal(lossless.decode(stream), image)
    np.testing.assert_array_equal(lossless.decode(stream, roi=(3, 40, 149, 77)), image[3:149, 40:77])


def test_decode_batch_packed_into_reused_buffer() -> None:
    imgs = [make_image("smooth", 30, 41, 3, seed=2), make_image("noise", 9, 7, 4, seed=3)]
    streams = [encode_v1(i, tile=16) for i in imgs]
    buffer = np.full(10_000, 7, np.uint8)
    flat, offsets, shapes = lossless.decode_batch_packed(streams, out=buffer)
    assert np.shares_memory(flat, buffer)
    for i, img in enumerate(imgs):
        np.testing.assert_array_equal(flat[offsets[i] : offsets[i] + img.size].reshape(img.shape), img)
    for bad in (np.zeros(10, np.uint8), np.zeros(10_000, np.int16), np.zeros((100, 100), np.uint8)):
        with pytest.raises(ValueError):
            lossless.decode_batch_packed(streams, out=bad)


def test_decode_batch_packed_rejects_read_only_or_strided_out() -> None:
    stream = encode_v1(make_image("smooth", 5, 5, 3, seed=1))
    read_only = np.zeros(100, np.uint8)
    read_only.flags.writeable = False
    for bad in (read_only, np.zeros(200, np.uint8)[::2]):
        with pytest.raises(ValueError):
            lossless.decode_batch_packed([stream], out=bad)


def test_concurrent_calls_from_python_threads() -> None:
    # The kernels release the GIL and keep scratch per Python thread: concurrent encodes
    # and decodes must not see each other's buffers.
    from concurrent.futures import ThreadPoolExecutor

    imgs = [make_image("smooth", 40 + 7 * i, 50 + 5 * i, (1, 3, 4)[i % 3], seed=i) for i in range(8)]
    with ThreadPoolExecutor(4) as pool:
        streams = list(pool.map(lambda im: encode_v1(im, tile=16), imgs))
        outs = list(pool.map(lossless.decode, streams * 3))
    for i, out in enumerate(outs):
        np.testing.assert_array_equal(out, imgs[i % len(imgs)])
    assert streams == [reference.encode(im, tile=16) for im in imgs]
