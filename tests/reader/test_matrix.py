"""The Reader over its options on the CPU: layout x output x crop_decode x masks give the
reference batches (numpy output, whole-image decoding); transfer_index is refused on the CPU.
The CUDA half runs under the simulator (tests/cudasim/test_reader_matrix.py)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import prepkit
from prepkit.errors import PipelineError
from tests.reader.matrix import OPS, assert_same, build_stores, read


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_stores(tmp_path_factory.mktemp("matrix"), ("raw", "jpeg", "lossless"))


@pytest.mark.parametrize("layout", ["raw", "jpeg", "lossless"])
def test_cpu_combinations_equal_the_reference(stores: dict[str, Path], layout: str) -> None:
    for masks in (False, True):
        fields = ("image", "label", "mask") if masks else ("image", "label")
        want = read(stores[layout], fields=fields, crop_decode=False)
        assert all((m is not None) == masks for _, _, m, _ in want)
        for output, crop_decode in itertools.product(("numpy", "torch", "dlpack"), (False, True)):
            got = read(stores[layout], fields=fields, output=output, crop_decode=crop_decode, prefetch=1)
            assert_same(got, want, atol=0.0)  # the same host kernels: bit-identical


def test_transfer_index_is_refused_on_the_cpu(stores: dict[str, Path]) -> None:
    with pytest.raises(PipelineError, match="transfer_index applies to device='cuda' only"):
        prepkit.Reader(stores["raw"], batch_size=2, transforms=OPS, transfer_index=2)
