"""The one-call paths for whole v2 streams (prepkit.lossless.single): lossless.decode's for one
stream, decode_batch and decode_batch_packed's for many; the batch path's pixels and refusals,
and the cases they leave to the batch path."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from prepkit import lossless
from prepkit.errors import CodecError
from prepkit.lossless import cpu, single


def _batch_path(buffers: list[bytes], out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batch path itself (hostplan's plan, then cpu.decode_plan): what the one-call paths
    must reproduce."""
    plan = lossless._build_plan(buffers, None, "cpu")
    return cpu.decode_plan(plan, out), plan.offsets, plan.shapes


def _images() -> list[np.ndarray]:
    rng = np.random.default_rng(4)
    y, x = np.mgrid[0:37, 0:45]
    smooth = ((y * 3 + x * 2)[:, :, None] + np.arange(3) * 50) % 256
    mask = np.zeros((70, 90), np.uint8)
    mask[10:50, 20:80] = 3
    mask[30:40, 5:60] = 7
    palette = np.array([[0, 0, 0], [200, 30, 40], [20, 180, 60]], np.uint8)[rng.integers(0, 3, (40, 40))]
    return [
        np.clip(smooth + rng.normal(0, 5, smooth.shape), 0, 255).astype(np.uint8),  # coded tiles, 3 channels
        mask,  # 2-D: runs tiles
        palette,
        rng.integers(0, 256, (20, 33, 4), dtype=np.uint8),  # raw tiles, 4 channels
        np.full((64, 64, 3), 17, np.uint8),  # one constant tile
        np.array([[5]], np.uint8),
    ]


@pytest.mark.parametrize("index", range(6))
def test_small_v2_streams_decode_in_one_call_like_the_batch_path(index: int) -> None:
    image = _images()[index]
    for tile in (16, 64):
        data = lossless.encode(image, tile=tile)
        fast = single.decode(data)
        assert fast is not None  # this path took it
        np.testing.assert_array_equal(fast, image)
        batch = lossless.decode_batch([data])[0]
        assert fast.shape == batch.shape == image.shape
        np.testing.assert_array_equal(lossless.decode(bytearray(data)), image)  # writable input too


def test_streams_left_to_the_batch_path() -> None:
    rng = np.random.default_rng(2)
    photo = rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)
    assert single.decode(lossless.encode(photo, version=1)) is None  # version 1
    with pytest.raises(CodecError, match="Expected a contiguous bytes-like object"):
        single.decode(3)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_any_size_on_the_threads_the_batch_path_would_use(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    """The tiles go to numba's threads when the batch path would split them (cpu.use_parallel),
    else stay on the calling thread; the pixels are the same either way."""
    rng = np.random.default_rng(3)
    y, x = np.mgrid[0:16 * 9, 0:16 * 8]
    image = np.clip(((y + 2 * x)[:, :, None] + np.arange(3) * 40) % 256 + rng.normal(0, 3, (16 * 9, 16 * 8, 3)),
                    0, 255).astype(np.uint8)  # 72 tiles of 16
    data = lossless.encode(image, tile=16)
    limit = np.iinfo(np.int64).max if threads == 1 else threads * cpu.MIN_TILES_PER_THREAD - 1
    monkeypatch.setattr(cpu, "serial_tiles", lambda: limit)
    fast = single.decode(data)
    assert fast is not None
    np.testing.assert_array_equal(fast, image)
    done = single.decode_many([data, data[:]])
    assert done is not None
    np.testing.assert_array_equal(done[0], np.concatenate([image.reshape(-1)] * 2))


def test_serial_tiles_follows_numba_threads() -> None:
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        assert cpu.serial_tiles() >= 1 << 40
        if numba.config.NUMBA_NUM_THREADS >= 2:
            numba.set_num_threads(2)
            assert cpu.serial_tiles() == 2 * cpu.MIN_TILES_PER_THREAD - 1
    finally:
        numba.set_num_threads(threads)


def test_damaged_streams_are_refused_like_the_batch_path() -> None:
    """A stream this path refuses goes to the batch path, whose CodecError names the reason;
    one it decodes must be one the batch path decodes to the same pixels."""
    rng = np.random.default_rng(9)
    seeds = [lossless.encode(image, tile=16) for image in _images()]
    decoded = refused = 0
    for _ in range(600):
        data = bytearray(seeds[int(rng.integers(len(seeds)))])
        for _ in range(int(rng.integers(1, 4))):
            data[int(rng.integers(len(data)))] = int(rng.integers(256))
        fast = single.decode(bytes(data))
        try:
            batch = _batch_path([bytes(data)])[0]
        except CodecError as error:
            assert fast is None, "the one-call path decoded a stream the batch path refuses"
            with pytest.raises(CodecError) as raised:
                lossless.decode(bytes(data))
            assert str(raised.value) == str(error)
            refused += 1
            continue
        if fast is not None:
            np.testing.assert_array_equal(fast.reshape(-1), batch)
            decoded += 1
    assert refused > 100 and decoded > 20  # both outcomes seen


@pytest.fixture(params=[1, 2])
def threads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """numba on one thread or two, as far as the paths' choice of kernel goes (cpu.serial_tiles):
    the batches below have enough tiles for two threads."""
    limit = np.iinfo(np.int64).max if request.param == 1 else 2 * cpu.MIN_TILES_PER_THREAD - 1
    monkeypatch.setattr(cpu, "serial_tiles", lambda: limit)
    return int(request.param)


@pytest.mark.usefixtures("threads")
def test_batches_decode_in_one_call_like_the_batch_path() -> None:
    images = _images()
    streams = [lossless.encode(image, tile=tile) for tile in (16, 64) for image in images]
    want_flat, want_offsets, want_shapes = _batch_path(streams)
    done = single.decode_many(streams)
    assert done is not None
    flat, offsets, shapes, _ = done
    np.testing.assert_array_equal(flat, want_flat)
    np.testing.assert_array_equal(offsets, want_offsets)
    np.testing.assert_array_equal(shapes, want_shapes)
    assert offsets.dtype == want_offsets.dtype and shapes.dtype == want_shapes.dtype
    out = np.full(want_flat.size + 100, 77, np.uint8)  # written in place; the bytes past the pixels kept
    flat, offsets, shapes = lossless.decode_batch_packed(streams, out=out)
    assert np.shares_memory(flat, out) and flat.size == want_flat.size
    np.testing.assert_array_equal(out[: want_flat.size], want_flat)
    assert (out[want_flat.size :] == 77).all()
    for decoded, image in zip(lossless.decode_batch(streams), images + images, strict=True):
        assert decoded.shape == image.shape  # 2-D images stay 2-D
        np.testing.assert_array_equal(decoded, image)
    joined = single.decode_many([streams[1]])  # one stream: read in place
    assert joined is not None
    np.testing.assert_array_equal(joined[0], images[1].reshape(-1))


def test_batches_left_to_the_batch_path() -> None:
    images = _images()
    streams = [lossless.encode(image, tile=16) for image in images]
    total = sum(image.size for image in images)
    mixed = streams + [lossless.encode(images[0], version=1)]
    assert single.decode_many(mixed) is None  # version 1 in the batch
    for decoded, image in zip(lossless.decode_batch(mixed), images + images[:1], strict=True):
        np.testing.assert_array_equal(decoded, image)
    assert single.decode_many([]) is None
    for small in (np.zeros(total - 1, np.uint8), np.zeros(0, np.uint8)):
        assert single.decode_many(streams, small) is None
        with pytest.raises(ValueError, match="out"):  # the batch path's error for a short buffer
            lossless.decode_batch_packed(streams, out=small)
    for unusable in (np.zeros(total, np.int32), np.zeros((total, 1), np.uint8), np.zeros(2 * total, np.uint8)[::2]):
        assert single.decode_many(streams, unusable) is None


@pytest.mark.usefixtures("threads")
def test_a_damaged_stream_in_a_batch_is_named_by_the_batch_path() -> None:
    """A batch with one refused stream goes to the batch path, whose CodecError names the image;
    a batch this path decodes must be one the batch path decodes to the same pixels."""
    rng = np.random.default_rng(11)
    seeds = [lossless.encode(image, tile=16) for image in _images()]
    refused = decoded = 0
    for _ in range(300):
        batch = list(seeds)
        k = int(rng.integers(len(batch)))
        data = bytearray(batch[k])
        data[int(rng.integers(len(data)))] = int(rng.integers(256))
        batch[k] = bytes(data)
        done = single.decode_many(batch)
        try:
            want = _batch_path(batch)[0]
        except CodecError as error:
            assert done is None, "the one-call path decoded a batch the batch path refuses"
            assert str(error).startswith(f"image {k}: ")
            with pytest.raises(CodecError, match=f"^image {k}: "):
                lossless.decode_batch_packed(batch)
            refused += 1
            continue
        if done is not None:
            np.testing.assert_array_equal(done[0], want)
            decoded += 1
    assert refused > 50 and decoded > 20  # both outcomes seen
