"""The CUDA half of the Reader's option matrix (CPU half: tests/reader/test_matrix.py):
every pair of masks x crop_decode x transfer_index values, per layout, on device="cuda" gives the CPU reference.

Under the simulator the output is numpy (numba device arrays): torch, CuPy and DLPack
exports need real device memory. JPEG needs nvImageCodec on a GPU, so raw and lossless."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.reader.matrix import assert_same, build_stores, read

PAIRWISE = [(False, False, 0), (False, True, 2), (True, False, 2), (True, True, 0)]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_stores(tmp_path_factory.mktemp("matrix_cuda"), ("raw", "lossless"))


@pytest.mark.parametrize("layout", ["raw", "lossless"])
def test_cuda_combinations_equal_the_cpu_reference(stores: dict[str, Path], layout: str) -> None:
    # Every pair of values of the three options (masks, crop_decode, transfer_index) in four
    # runs, an orthogonal array: the simulator takes seconds per run, and the CPU half runs
    # the whole product.
    wants = {}
    for masks, crop_decode, transfer_index in PAIRWISE:
        fields = ("image", "label", "mask") if masks else ("image", "label")
        if masks not in wants:
            wants[masks] = read(stores[layout], fields=fields, crop_decode=False)
        # A budget of a few hundred bytes: micro-batches of one or two samples on both streams.
        got = read(stores[layout], fields=fields, device="cuda", crop_decode=crop_decode,
                   transfer_index=transfer_index, gpu_memory_budget=900)
        assert_same(got, wants[masks], atol=1e-5)


def test_pairwise_runs_cover_every_pair() -> None:
    for a, b in itertools.combinations(range(3), 2):
        pairs = {(run[a], run[b]) for run in PAIRWISE}
        assert len(pairs) == 4
