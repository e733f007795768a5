"""prepkit.cudart without a GPU: device names, which GPU "cuda" means, how streams are
created (through a fake driver), the producer thread's start hook, DLPack device ids."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from prepkit.cudart import cuda_index, make_stream, parse_device
from prepkit.interop import DLPackArray
from prepkit.reader.arguments import check_reader_arguments
from prepkit.reader.prefetch import Prefetcher


def test_parse_device() -> None:
    assert parse_device("cpu") == ("cpu", None)
    assert parse_device("cuda") == ("cuda", None)
    assert parse_device("cuda:3") == ("cuda", 3)
    for bad in ("gpu", "cuda:", "cuda:x", "cuda:-1", "CUDA"):
        with pytest.raises(ValueError, match="Expected device to be 'cpu', 'cuda' or 'cuda:N'"):
            parse_device(bad)


def _torch(available: bool, current: int) -> Any:
    return SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: available, current_device=lambda: current))


def test_cuda_index_follows_torch_then_local_rank_then_zero() -> None:
    assert cuda_index(2, {"LOCAL_RANK": "5"}, _torch(True, 1)) == 2  # "cuda:2" wins
    assert cuda_index(None, {"LOCAL_RANK": "5"}, _torch(True, 1)) == 1  # torch's current device
    assert cuda_index(None, {"LOCAL_RANK": "5"}, _torch(False, 1)) == 5  # no CUDA torch: the local rank
    assert cuda_index(None, {}, _torch(False, 1)) == 0
    assert cuda_index(None, {"LOCAL_RANK": "x"}, _torch(False, 0)) == 0


def test_reader_arguments_accept_cuda_n() -> None:
    base: dict[str, Any] = dict(batch_size=2, seed=0, rank=0, world_size=1, shuffle=True, drop_last=False,
                                output="numpy", outputs=("numpy",), on_error="raise", fields=("image",),
                                shards_in_use=None, gpu_memory_budget=None, prefetch=2, threads=None,
                                transfer_index=None, mask_mode="nearest", crop_decode=False)
    for device in ("cpu", "cuda", "cuda:0", "cuda:7"):
        check_reader_arguments(device=device, **base)
    with pytest.raises(ValueError, match="Reader: Expected device to be 'cpu', 'cuda' or 'cuda:N'. Got 'cuda:a'"):
        check_reader_arguments(device="cuda:a", **base)


def test_streams_are_non_blocking_at_the_least_priority() -> None:
    calls: list[tuple[str, Any]] = []

    class Driver:
        def cuCtxGetStreamPriorityRange(self) -> tuple[int, int]:
            return 0, -5  # (least, greatest) as CUDA reports them

        def cuStreamCreateWithPriority(self, flags: int, priority: int) -> str:
            calls.append(("create", (flags, priority)))
            return "handle"

    fake = SimpleNamespace(
        driver=Driver(),
        binding=SimpleNamespace(CUstream_flags=SimpleNamespace(CU_STREAM_NON_BLOCKING=SimpleNamespace(value=1))),
        Stream=lambda handle, finalizer: ("stream", handle, finalizer),
        _stream_finalizer=lambda deallocations, handle: ("finalizer", deallocations, handle),
    )
    stream = make_stream(fake, SimpleNamespace(deallocations="queue"))
    assert calls == [("create", (1, 0))]  # CU_STREAM_NON_BLOCKING, the least priority (not -5)
    assert stream == ("stream", "handle", ("finalizer", "queue", "handle"))
    # The names used exist in the installed numba-cuda (importing the driver needs no GPU).
    from numba.cuda.cudadrv import driver

    assert int(driver.binding.CUstream_flags.CU_STREAM_NON_BLOCKING.value) == 1
    assert callable(driver._stream_finalizer) and driver.Stream is not None


def test_prefetcher_runs_its_start_hook_in_its_thread() -> None:
    seen: list[str] = []
    produced = Prefetcher(lambda n: (n, threading.current_thread().name), range(3), depth=1,
                          on_start=lambda: seen.append(threading.current_thread().name))
    assert list(produced) == [(0, "prepkit-reader"), (1, "prepkit-reader"), (2, "prepkit-reader")]
    assert seen == ["prepkit-reader"]


class _DeviceArray:
    def __init__(self) -> None:
        self.__cuda_array_interface__ = {"shape": (2, 3), "typestr": "|u1", "data": (4096, False), "version": 3,
                                         "strides": None}


def test_dlpack_carries_the_given_device_id() -> None:
    assert DLPackArray(_DeviceArray(), device_id=1).__dlpack_device__() == (2, 1)
    assert DLPackArray(np.zeros(3, np.uint8)).__dlpack_device__() == (1, 0)  # host memory: device 0
