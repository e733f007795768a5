"""The CUDA decoder under numba's simulator: bit-identical to the CPU decoder on tiny images."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from prepkit import lossless
from prepkit.errors import CodecError
from prepkit.lossless import cuda as lcuda
from prepkit.lossless import format as fmt


def encode_v1(image: np.ndarray, tile: int = 64) -> bytes:
    """The v1 kernel's tests write v1 streams (v2 has its own module, cuda_v2)."""
    return lossless.encode(image, tile, version=1)


@pytest.fixture(autouse=True)
def few_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    # The simulator runs each CUDA thread as a Python thread: keep blocks small.
    monkeypatch.setattr(lcuda, "THREADS", 16)


def _images() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:40, 0:33]
    smooth = ((yy * 3 + xx * 5) % 256).astype(np.uint8)
    return [
        rng.integers(0, 256, (8, 8, 3), dtype=np.uint8),
        np.stack([smooth, smooth[::-1], smooth[:, ::-1]], 2),
        rng.integers(0, 256, (17, 19, 4), dtype=np.uint8),
        (smooth[:20, :21] + rng.integers(0, 3, (20, 21))).astype(np.uint8),
        np.full((1, 1, 1), 200, np.uint8),
    ]


def test_cuda_decode_matches_cpu() -> None:
    images = _images()
    streams = [encode_v1(img, tile=16) for img in images]
    got = lossless.decode_batch(streams, device="cuda")
    for arr, img in zip(got, images, strict=True):
        # A device array (the simulator's stand-in has neither __cuda_array_interface__
        # nor cuda.is_cuda_array; on a GPU the real DeviceNDArray has both).
        assert cuda.is_cuda_array(arr) if hasattr(cuda, "is_cuda_array") else hasattr(arr, "copy_to_host")
        np.testing.assert_array_equal(arr.copy_to_host(), lossless.decode_batch([encode_v1(img, 16)])[0])
        np.testing.assert_array_equal(arr.copy_to_host(), img)


def test_cuda_roi_and_packed() -> None:
    images = _images()[:4]
    streams = [encode_v1(img, tile=16) for img in images]
    rois = [(1, 2, 7, 8), (5, 3, 39, 30), None, (16, 0, 20, 21)]
    flat, offsets, shapes = lossless.decode_batch_packed(streams, "cuda", rois)
    cpu_flat, cpu_offsets, cpu_shapes = lossless.decode_batch_packed(streams, "cpu", rois)
    np.testing.assert_array_equal(flat.copy_to_host(), cpu_flat)
    np.testing.assert_array_equal(offsets.copy_to_host(), cpu_offsets)
    np.testing.assert_array_equal(shapes.copy_to_host(), cpu_shapes)


def test_cuda_rejects_corrupt_payload() -> None:
    image = _images()[0]
    stream = bytearray(encode_v1(image, tile=16))
    stream[-1] = 0  # the unary section must end in a byte holding its last terminator
    with pytest.raises(CodecError):
        lossless.decode_batch([bytes(stream)], device="cuda")
    stream = bytearray(encode_v1(image, tile=16))
    stream[fmt.HEADER_SIZE + 8] = 0xFF  # first tile's Rice parameters: 15 is impossible
    with pytest.raises(CodecError):
        lossless.decode_batch([bytes(stream)], device="cuda")


def test_cuda_and_cpu_agree_on_mutated_payloads() -> None:
    # Random byte changes inside the payload: both decoders must reject the stream, or both
    # must return the same pixels (the format has no checksum, see docs/LOSSLESS.md).
    rng = np.random.default_rng(21)
    image = _images()[0]  # 8x8x3: one tile, so the simulator stays quick
    stream = encode_v1(image, tile=16)
    start = fmt.HEADER_SIZE + lossless.read_header(stream).table_size
    for _ in range(5):
        buf = bytearray(stream)
        for _ in range(2):
            buf[int(rng.integers(start, len(buf)))] = int(rng.integers(256))
        outcomes = []
        for device in ("cpu", "cuda"):
            try:
                out = lossless.decode_batch([bytes(buf)], device=device)[0]
                outcomes.append(out if device == "cpu" else out.copy_to_host())
            except CodecError:
                outcomes.append(None)
        if outcomes[0] is None or outcomes[1] is None:
            assert outcomes[0] is None and outcomes[1] is None
        else:
            np.testing.assert_array_equal(outcomes[0], outcomes[1])


def test_cuda_packed_into_reused_device_buffer() -> None:
    image = _images()[0]
    buffer = cuda.device_array(1000, np.uint8)
    flat, offsets, shapes = lossless.decode_batch_packed([encode_v1(image, 16)], "cuda", out=buffer)
    np.testing.assert_array_equal(flat.copy_to_host().reshape(image.shape), image)
    np.testing.assert_array_equal(buffer.copy_to_host()[: image.size], image.reshape(-1))


def test_cuda_routes_v2_batches_and_matches_cpu() -> None:
    images = [_images()[1][:20, :21], _images()[3]]
    streams = [lossless.encode(images[0], tile=16), encode_v1(images[1], tile=16)]  # mixed versions
    got = lossless.decode_batch(streams, "cuda", rois=[(2, 3, 18, 19), None])
    np.testing.assert_array_equal(got[0].copy_to_host(), images[0][2:18, 3:19])
    np.testing.assert_array_equal(got[1].copy_to_host(), images[1])
