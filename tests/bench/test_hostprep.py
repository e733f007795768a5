"""python -m prepkit.bench.hostprep on a tiny store: the JSON record and the staged bytes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from prepkit.bench import hostprep
from prepkit.store.reader import Store
from tests.conftest import lossless_store

FIELDS = {"old_us_per_image", "old_cpu_us_per_image", "new_us_per_image", "new_cpu_us_per_image",
          "new_table_us_per_image", "new_table_cpu_us_per_image", "new_gather_us_per_image",
          "new_gather_cpu_us_per_image", "speedup", "speedup_cpu", "staged_bytes_per_image", "gather_gb_s",
          "gather_gb_s_per_thread_cpu", "staged_equals_store", "machine", "images", "batch", "crop", "threads"}


@pytest.fixture(scope="module", params=[1, 2])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lossless_store(tmp_path_factory.mktemp("hostprep"), [(40 + 7 * n, 70 - 5 * n) for n in range(5)], request.param, samples_per_shard=2)


@pytest.mark.parametrize("crop", [None, 8])
def test_main_writes_the_record_and_stages_the_store_bytes(store: Path, tmp_path: Path, crop: int | None) -> None:
    out = tmp_path / "r.json"
    argv = [str(store), "--batch", "4", "--repeat", "1", "--threads", "2", "--json", str(out)]
    result = hostprep.main(argv + ([] if crop is None else ["--crop", str(crop)]))
    record = json.loads(out.read_text())
    assert FIELDS <= set(record) and record == json.loads(json.dumps(result))
    assert record["staged_equals_store"] is True
    assert record["images"] == 8 and record["crop"] == crop  # two batches of 4 over 5 samples
    # Independently: the new path's staged buffer against Store.read_bytes.
    opened = Store(store)
    batch = [4, 0, 3, 1]  # samples of three different shards
    staging = np.zeros(1 << 20, np.uint8)
    regions = None if crop is None else hostprep.crop_regions(opened, batch, crop, 0)
    plan = hostprep.new_host_work(opened, batch, regions, staging, 2)
    stored = [opened.read_bytes(i) for i in batch]
    if crop is None:
        np.testing.assert_array_equal(staging[: plan.src.size], np.concatenate(stored))
        assert record["staged_bytes_per_image"] == pytest.approx(
            sum(opened.read_bytes(i).size for i in [0, 1, 2, 3, 4, 0, 1, 2]) / 8)
    else:
        assert plan.src.size < sum(s.size for s in stored)  # only the tile rows of the regions
    old = hostprep.old_host_work(opened, batch, regions, np.zeros(1 << 20, np.uint8))
    for a, b in zip(plan.work, old.work, strict=True):
        np.testing.assert_array_equal(plan.src[a[0] : a[1]], old.src[b[0] : b[1]])


def test_needs_a_store_or_make_store() -> None:
    with pytest.raises(SystemExit):
        hostprep.main([])
