"""The DataLoader adapter, with spawned workers."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from prepkit.ingest.build import build_store  # noqa: E402
from prepkit.ingest.images import ImageOptions  # noqa: E402
from prepkit.layouts import RawLayout  # noqa: E402
from prepkit.reader.torch import StoreDataset  # noqa: E402
from tests.conftest import smooth_image, write_image  # noqa: E402


def test_dataloader_workers_cover_the_epoch_once(tmp_path: Path) -> None:
    for number in range(11):
        write_image(tmp_path / "src" / f"c{number % 2}" / f"{number}.png", smooth_image(6, 5, seed=number))
    build_store(str(tmp_path / "src"), str(tmp_path / "s"), layout=RawLayout(), options=ImageOptions(), samples_per_shard=4, workers=1)
    dataset = StoreDataset(tmp_path / "s", batch_size=3, seed=2)
    assert len(dataset) == 4
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    seen_labels = []
    count = 0
    for images, labels in loader:
        assert images.dtype == torch.uint8 and images.shape[1:] == (6, 5, 3)
        seen_labels += labels.tolist()
        count += images.shape[0]
    assert count == 11 and sorted(seen_labels) == [0] * 6 + [1] * 5
