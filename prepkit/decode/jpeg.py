"""JPEG decoding: nvImageCodec (nvJPEG on the GPU, its CPU backend on the host), or Pillow.

Known nvImageCodec behaviour handled here:
- without a GPU only ``Decoder(device_id=NVIMGCODEC_DEVICE_CPU_ONLY,
  backends=[Backend(BackendKind.CPU_ONLY)])`` works;
- one decoder shared by two threads crashes the process: decoders are thread-local;
- a failed decode returns None (with a printed warning) instead of raising: prepkit turns
  it into a DecodeError naming the sample;
- importing it prints "Failed to load nvjpeg2k/nvtiff" when those optional libraries are
  absent: the import is done with the process's stdout and stderr silenced.
"""

from __future__ import annotations

import io
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from prepkit.errors import DecodeError

_local = threading.local()
_import_lock = threading.Lock()
_NVIMGCODEC: Any = None
_NVIMGCODEC_ERROR: str | None = None


_silence_lock = threading.RLock()


@contextmanager
def _silenced_fds() -> Iterator[None]:
    """Silence C-level writes to stdout/stderr (nvImageCodec's loader messages).

    File descriptors are process-wide: two threads doing this at once would save each
    other's redirection and leave stdout pointing at /dev/null for good, hence the lock.
    """
    with _silence_lock:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = [os.dup(1), os.dup(2)]
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 1)
            os.dup2(null, 2)
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in (*saved, null):
                os.close(fd)


def nvimgcodec_module() -> Any:
    """The nvImageCodec module, or None (with the reason in ``nvimgcodec_error()``)."""
    global _NVIMGCODEC, _NVIMGCODEC_ERROR
    with _import_lock:
        if _NVIMGCODEC is None and _NVIMGCODEC_ERROR is None:
            try:
                with _silenced_fds():
                    from nvidia import nvimgcodec

                _NVIMGCODEC = nvimgcodec
            except Exception as error:  # ImportError, or a broken native library
                _NVIMGCODEC_ERROR = f"nvImageCodec unavailable: {error}"
    return _NVIMGCODEC


def nvimgcodec_error() -> str | None:
    nvimgcodec_module()
    return _NVIMGCODEC_ERROR


def _decoder(device: str) -> Any:
    """This thread's nvImageCodec decoder for ``device`` (never shared between threads)."""
    key = f"decoder_{device}"
    decoder = getattr(_local, key, None)
    if decoder is None:
        nvimgcodec = nvimgcodec_module()
        with _silenced_fds():
            if device == "cpu":
                decoder = nvimgcodec.Decoder(
                    device_id=nvimgcodec.NVIMGCODEC_DEVICE_CPU_ONLY,
                    backends=[nvimgcodec.Backend(nvimgcodec.BackendKind.CPU_ONLY)],
                )
            else:
                decoder = nvimgcodec.Decoder()
        setattr(_local, key, decoder)
    return decoder


def _params(channels: int) -> Any:
    nvimgcodec = nvimgcodec_module()
    spec = nvimgcodec.ColorSpec.SRGB if channels == 3 else nvimgcodec.ColorSpec.GRAY
    return nvimgcodec.DecodeParams(color_spec=spec, apply_exif_orientation=False)


def decode_pillow(data: bytes | memoryview | np.ndarray) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(bytes(data))) as image:
        pixels = np.asarray(image, dtype=np.uint8)
    return pixels[:, :, None] if pixels.ndim == 2 else pixels


def decode_host(datas: Sequence[Any], shapes: np.ndarray, sample_ids: Sequence[int], backend: str = "auto") -> list[np.ndarray]:
    """Decode JPEGs on the host: nvImageCodec's CPU backend when present, else Pillow.

    Every result is checked against its recorded shape; a failure names the sample.
    """
    use_nvimgcodec = backend == "nvimgcodec" or (backend == "auto" and nvimgcodec_module() is not None)
    results: list[np.ndarray] = []
    for data, shape, sample in zip(datas, shapes, sample_ids, strict=True):
        try:
            if use_nvimgcodec:
                image = _decoder("cpu").decode(np.asarray(data), params=_params(int(shape[2])))
                if image is None:
                    raise DecodeError(f"sample {sample}: nvImageCodec could not decode the stored JPEG")
                pixels = np.asarray(image)
            else:
                pixels = decode_pillow(data)
        except DecodeError:
            raise
        except Exception as error:
            raise DecodeError(f"sample {sample}: cannot decode stored JPEG ({error})") from None
        if pixels.shape != tuple(int(v) for v in shape):
            raise DecodeError(f"sample {sample}: stored JPEG: Expected to decode to {tuple(shape)}. Got {pixels.shape}.")
        results.append(pixels)
    return results


def decode_device(datas: Sequence[Any], shapes: np.ndarray, sample_ids: Sequence[int], out_flat: Any, offsets: np.ndarray,
                  stream: Any = 0, keep: list[Any] | None = None) -> None:
    """Decode JPEGs with nvJPEG on the GPU straight into the packed device buffer.

    nvImageCodec decodes on ``stream`` and the copies into ``out_flat`` are queued on it
    too, so they are ordered without a host wait. Its output Images must outlive those
    copies: they are appended to ``keep`` (the caller drops them once the stream has passed
    an event recorded after this call); without ``keep`` the stream is synchronised here."""
    from numba import cuda

    from prepkit.cudart import stream_handle

    nvimgcodec = nvimgcodec_module()
    if nvimgcodec is None:
        raise DecodeError(f"JPEG decoding on the GPU needs nvImageCodec ({nvimgcodec_error()})")
    decoder = _decoder("cuda")
    handle = stream_handle(stream)
    for channels in sorted({int(s[2]) for s in shapes}):
        chosen = [i for i, s in enumerate(shapes) if int(s[2]) == channels]
        images = decoder.decode([np.asarray(datas[i]) for i in chosen], params=_params(channels), cuda_stream=handle)
        if keep is not None:
            keep.extend(images)
        for position, image in zip(chosen, images, strict=True):
            if image is None:
                raise DecodeError(f"sample {sample_ids[position]}: nvImageCodec could not decode the stored JPEG")
            h, w, c = (int(v) for v in shapes[position])
            if tuple(image.shape) != (h, w, c):
                raise DecodeError(f"sample {sample_ids[position]}: stored JPEG: Expected to decode to {(h, w, c)}. Got {tuple(image.shape)}.")
            # The Image was written on ``stream`` and is copied on it: no host sync on import.
            source = cuda.as_cuda_array(image, sync=False).reshape(h * w * c)
            start = int(offsets[position])
            out_flat[start : start + h * w * c].copy_to_device(source, stream=stream)
    if keep is None:
        if handle:
            stream.synchronize()
        else:
            cuda.synchronize()
