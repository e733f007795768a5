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


class ThreadsDataset(StoreDataset):
    """A StoreDataset that yields, with each batch's images, the numba threads of the process
    making it and the thread count its Reader was given."""

    def __iter__(self):  # type: ignore[override]
        import numba

        import prepkit.reader.torch as module

        made = []

        class Recording(module.Reader):  # type: ignore[misc,valid-type]
            def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
                super().__init__(*args, **kwargs)
                made.append(self.threads)

        module.Reader, original = Recording, module.Reader
        try:
            for images, _ in super().__iter__():
                yield images, numba.get_num_threads(), made[-1]
        finally:
            module.Reader = original


def _store(tmp_path: Path, count: int) -> Path:
    for number in range(count):
        write_image(tmp_path / "src" / f"c{number % 3}" / f"{number}.png", smooth_image(6, 5, seed=number))
    build_store(str(tmp_path / "src"), str(tmp_path / "s"), layout=RawLayout(), options=ImageOptions(), samples_per_shard=8, workers=1)
    return tmp_path / "s"


def test_persistent_workers_reshuffle_every_epoch_on_their_share_of_the_cores(tmp_path: Path) -> None:
    """With persistent_workers=True the workers keep their copy of the dataset between epochs;
    set_epoch must still reach them: each epoch yields what the dataset yields in this process
    for that epoch, and the epochs differ. Each worker runs numba, and its Reader, on its
    share of the cores."""
    import numba

    from prepkit.parallel import worker_threads

    dataset = ThreadsDataset(_store(tmp_path, 24), batch_size=4, seed=5)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context="spawn",
                                         persistent_workers=True)
    orders = []
    for epoch in range(3):
        dataset.set_epoch(epoch)
        expected = [images.clone() for images, _, _ in dataset]  # this process, the same epoch
        got = list(loader)  # (the loader makes each yielded tuple a list)
        assert len(got) == len(expected) == 6
        assert all(torch.equal(images, e) for (images, _, _), e in zip(got, expected, strict=True)), f"epoch {epoch}"
        share = {(int(threads), int(reader_threads)) for _, threads, reader_threads in got}
        assert share == {(min(worker_threads(2), numba.config.NUMBA_NUM_THREADS), worker_threads(2))}
        orders.append(torch.cat([images for images, _, _ in got]))
    assert not torch.equal(orders[0], orders[1]) and not torch.equal(orders[1], orders[2])


def test_a_thread_count_the_caller_chose_stays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a worker (faked here: worker 0 of 2, in this process) the Reader keeps threads=3."""
    import types

    import numba

    import prepkit.reader.torch as module

    monkeypatch.setattr(module, "get_worker_info", lambda: types.SimpleNamespace(id=0, num_workers=2))
    before = numba.get_num_threads()
    try:
        batches = list(ThreadsDataset(_store(tmp_path, 8), batch_size=2, seed=0, threads=3))
    finally:
        numba.set_num_threads(before)
    assert len(batches) == 2  # batches 0 and 2 of 4: this worker's
    assert {reader_threads for _, _, reader_threads in batches} == {3}
