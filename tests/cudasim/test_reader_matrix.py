"""The CUDA half of the Reader's option matrix (CPU half: tests/reader/test_matrix.py):
layout x crop_decode x transfer_index x masks on device="cuda" give the CPU reference.

Under the simulator the output is numpy (numba device arrays): torch, CuPy and DLPack
exports need real device memory. JPEG needs nvImageCodec on a GPU, so raw and lossless."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.reader.matrix import assert_same, build_stores, read


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_stores(tmp_path_factory.mktemp("matrix_cuda"), ("raw", "lossless"))


@pytest.mark.parametrize("layout", ["raw", "lossless"])
def test_cuda_combinations_equal_the_cpu_reference(stores: dict[str, Path], layout: str) -> None:
    for masks in (False, True):
        fields = ("image", "label", "mask") if masks else ("image", "label")
        want = read(stores[layout], fields=fields, crop_decode=False)
        for crop_decode, transfer_index in itertools.product((False, True), (0, 2)):
            # A budget of a few hundred bytes: micro-batches of one or two samples on both streams.
            got = read(stores[layout], fields=fields, device="cuda", crop_decode=crop_decode,
                       transfer_index=transfer_index, gpu_memory_budget=900)
            assert_same(got, want, atol=1e-5)
