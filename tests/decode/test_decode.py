"""The decode engine on the CPU: every layout gives the store's own pixels; JPEG specifics."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import prepkit
from prepkit.decode import decode_samples
from prepkit.decode import jpeg as jpeg_module
from prepkit.errors import DecodeError
from prepkit.ingest.build import build_store
from prepkit.ingest.images import ImageOptions
from prepkit.layouts import JpegLayout, LosslessLayout, RawLayout


@pytest.mark.parametrize("layout", [RawLayout(), JpegLayout(quality=92), LosslessLayout()])
@pytest.mark.parametrize("threads", [1, 3])
def test_batch_decode_equals_sample_decode(class_folder: Path, tmp_path: Path, layout, threads: int) -> None:  # type: ignore[no-untyped-def]
    build_store(str(class_folder), str(tmp_path / "s"), layout=layout, options=ImageOptions(), samples_per_shard=3, workers=1)
    store = prepkit.open_store(tmp_path / "s")
    indices = [6, 0, 3, 3, 5]
    scratch = np.empty(1, dtype=np.uint8)  # too small: must be ignored, not overrun
    for out in (None, scratch, np.empty(1 << 16, dtype=np.uint8)):
        packed = decode_samples(store, indices, threads=threads, out=out)
        for position, index in enumerate(indices):
            np.testing.assert_array_equal(packed.image(position), store[index]["image"])


def test_nvimgcodec_and_pillow_agree_and_failures_name_the_sample(class_folder: Path, tmp_path: Path) -> None:
    if jpeg_module.nvimgcodec_module() is None:
        pytest.skip(f"nvImageCodec not installed: {jpeg_module.nvimgcodec_error()}")
    build_store(str(class_folder), str(tmp_path / "s"), layout=JpegLayout(), options=ImageOptions(), samples_per_shard=4, workers=1)
    store = prepkit.open_store(tmp_path / "s")
    datas = [store.read_bytes(i) for i in range(len(store))]
    shapes = store.field_arrays["image"].shapes
    nv = jpeg_module.decode_host(datas, shapes, list(range(len(store))), backend="nvimgcodec")
    pil = jpeg_module.decode_host(datas, shapes, list(range(len(store))), backend="pillow")
    for a, b in zip(nv, pil, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(DecodeError, match="sample 2"):
        jpeg_module.decode_host([datas[0], b"\xff\xd8 not a jpeg"], shapes[:2], [0, 2], backend="nvimgcodec")


def test_silencing_from_many_threads_restores_stdout() -> None:
    """Regression: threads silencing fds 1 and 2 at once once left stdout on /dev/null."""
    before = os.fstat(1).st_ino, os.fstat(2).st_ino
    barrier = threading.Barrier(8)

    def enter() -> None:
        barrier.wait()
        with jpeg_module._silenced_fds():
            time.sleep(0.01)

    threads = [threading.Thread(target=enter) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (os.fstat(1).st_ino, os.fstat(2).st_ino) == before
