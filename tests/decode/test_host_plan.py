"""The host work of the lossless path (engine.lossless_host_plan, which the CPU and the GPU
paths share) on a real store: the plan the kernels get equals plan.build's, and a damaged
sample is refused with the message of the Python planner (headers, then plan.build)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from prepkit.decode.engine import _shapes, decode_samples, lossless_host_plan
from prepkit.errors import CodecError, DecodeError
from prepkit.lossless import plan as plan_mod
from prepkit.lossless.format import read_header
from prepkit.store.format import shard_path
from prepkit.store.reader import Store
from tests.conftest import lossless_store


@pytest.fixture(scope="module", params=[1, 2])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lossless_store(tmp_path_factory.mktemp("hostplan"), [(30 + 9 * n, 50 - 3 * n) for n in range(6)], request.param, samples_per_shard=4)


@pytest.mark.parametrize("with_rois", [False, True])
def test_plan_equals_plan_build_across_shards(store: Path, with_rois: bool) -> None:
    opened = Store(store)
    indices = [5, 0, 2, 4, 1]  # two shards, out of order
    shapes = _shapes(opened, indices, "image")
    rois = None
    if with_rois:
        rois = np.array([[1, 2, max(2, s[0] - 3), max(3, s[1] - 1)] for s in shapes], np.int64)
    staging = np.zeros(1 << 20, np.uint8)
    new = lossless_host_plan(opened, indices, "image", shapes, rois, staging, threads=2)
    buffers = [opened.read_bytes(i) for i in indices]
    old = plan_mod.build(buffers, None if rois is None else [tuple(int(v) for v in r) for r in rois])  # type: ignore[misc]
    np.testing.assert_array_equal(new.work[:, 2:], old.work[:, 2:])
    for a, b in zip(new.work, old.work, strict=True):
        np.testing.assert_array_equal(new.src[a[0] : a[1]], old.src[b[0] : b[1]])
    np.testing.assert_array_equal(new.offsets, old.offsets)
    np.testing.assert_array_equal(new.shapes, old.shapes)
    assert np.shares_memory(new.src, staging)
    if rois is None:
        np.testing.assert_array_equal(new.src, np.concatenate(buffers))


def _damaged(store: Path, tmp_path: Path, at: int, value: int) -> Path:
    """A copy of the store with byte ``at`` of sample 5's stored bytes set to ``value``."""
    copy = tmp_path / "damaged"
    shutil.copytree(store, copy)
    opened = Store(copy)
    arrays = opened.field_arrays["image"]
    start = int(arrays.ranges[5, 0])
    shard = start // arrays.geometry.capacity
    handle = opened._shard(arrays, shard)
    offset = handle.base + start - shard * arrays.geometry.capacity + at
    opened.close()
    path = shard_path(copy, "image", shard)
    data = bytearray(path.read_bytes())
    data[offset] = value
    path.write_bytes(bytes(data))
    return copy


@pytest.mark.parametrize("at,value", [(0, ord("X")), (6, 2), (17, 1), (20, 255), (24, 255), (27, 7)])
def test_damaged_sample_refused_like_the_cpu_path(store: Path, tmp_path: Path, at: int, value: int) -> None:
    opened = Store(store)
    size = opened.read_bytes(5).size
    copy = _damaged(store, tmp_path, at % size, value)
    damaged = Store(copy)
    indices = [0, 5, 3]
    with pytest.raises(DecodeError) as cpu:
        decode_samples(damaged, indices, device="cpu")
    shapes = _shapes(damaged, indices, "image")
    expected = _reference_refusal(damaged, indices)
    if expected is None:  # found by the decode kernels, not by validation
        assert "corrupt tile payload" in str(cpu.value)
        lossless_host_plan(damaged, indices, "image", shapes, None)
        return
    with pytest.raises(DecodeError) as host:
        lossless_host_plan(damaged, indices, "image", shapes, None)
    assert str(host.value) == str(cpu.value) == expected
    assert "sample 5" in str(cpu.value) or "image 1:" in str(cpu.value)  # names the damaged sample


def _reference_refusal(store: Store, indices: list[int], field: str = "image") -> str | None:
    """What the Python planner says of a batch (each header against its recorded shape, then
    plan.build), as the host plan must: None when it accepts the batch."""
    buffers = [store.read_bytes(i, field) for i in indices]
    for index, data, shape in zip(indices, buffers, _shapes(store, indices, field), strict=True):
        try:
            header = read_header(data)
        except CodecError as error:
            return f"{store.path}: sample {index} ({field}): {error}"
        if (header.height, header.width, header.channels) != tuple(int(v) for v in shape):
            return (f"{store.path}: sample {index} ({field}): Expected a stored image of the recorded shape "
                    f"{tuple(int(v) for v in shape)}. Got {(header.height, header.width, header.channels)}.")
    try:
        plan_mod.build(buffers, None)
    except CodecError as error:
        return f"{store.path}: {error}"
    return None
