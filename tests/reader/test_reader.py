"""prepkit.Reader on the CPU: epochs, ranks, resume, errors, shutdown, torch output."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import prepkit
from prepkit.errors import DecodeError
from prepkit.ingest.build import build_store
from prepkit.ingest.images import ImageOptions
from prepkit.layouts import JpegLayout, RawLayout
from tests.conftest import smooth_image, write_image


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    for number in range(23):
        write_image(root / f"class{number % 3}" / f"{number:03d}.png", smooth_image(12, 10, seed=number))
    build_store(str(root), str(tmp_path / "s"), layout=RawLayout(), options=ImageOptions(), samples_per_shard=5, workers=1)
    return tmp_path / "s"


def all_indices(reader: prepkit.Reader) -> list[int]:
    return [i for batch in reader for i in batch.indices.tolist()]


def test_epoch_covers_every_sample_once_and_batches_are_correct(store_path: Path) -> None:
    reader = prepkit.Reader(store_path, batch_size=4, seed=3)
    store = prepkit.open_store(store_path)
    assert len(reader) == 6
    batches = list(reader)
    assert [len(b) for b in batches] == [4, 4, 4, 4, 4, 3]
    assert sorted(i for b in batches for i in b.indices.tolist()) == list(range(23))
    for batch in batches:
        assert batch.images.shape == (len(batch), 12, 10, 3)  # same size: stacked NHWC
        for image, label, index in zip(batch.images, batch.labels, batch.indices, strict=True):
            np.testing.assert_array_equal(image, store[index]["image"])
            assert label == store.label(index)


def test_same_seed_same_order_and_set_epoch_changes_it(store_path: Path) -> None:
    first = all_indices(prepkit.Reader(store_path, batch_size=5, seed=1))
    assert first == all_indices(prepkit.Reader(store_path, batch_size=5, seed=1))
    reader = prepkit.Reader(store_path, batch_size=5, seed=1)
    reader.set_epoch(1)
    assert all_indices(reader) != first


def test_ranks_partition_with_equal_batch_counts(store_path: Path) -> None:
    readers = [prepkit.Reader(store_path, batch_size=3, world_size=4, rank=r, seed=0) for r in range(4)]
    counts = [len(list(r)) for r in readers]
    assert len(set(counts)) == 1 and counts[0] == len(readers[0])
    covered = [i for r in readers for i in all_indices(r)]
    assert set(covered) == set(range(23)) and len(covered) == 24  # one padded sample


def test_resume_mid_epoch_yields_exactly_the_remaining_batches(store_path: Path) -> None:
    reference = [b.indices.tolist() for b in prepkit.Reader(store_path, batch_size=4, seed=5)]
    reader = prepkit.Reader(store_path, batch_size=4, seed=5)
    taken = []
    for batch in reader:
        taken.append(batch.indices.tolist())
        if len(taken) == 2:
            break
    state = reader.state_dict()
    assert state["next_batch"] == 2
    resumed = prepkit.Reader(store_path, batch_size=4, seed=5)
    resumed.load_state_dict(state)
    assert taken + [b.indices.tolist() for b in resumed] == reference
    with pytest.raises(ValueError, match="batch_size"):
        prepkit.Reader(store_path, batch_size=3, seed=5).load_state_dict(state)


def test_background_error_reaches_consumer_and_skip_mode_drops_the_sample(store_path: Path) -> None:
    # Corrupt one raw sample's recorded size so that it cannot decode.
    store = prepkit.open_store(store_path)
    store.field_arrays["image"].ranges[7, 1] -= 1
    with pytest.raises(DecodeError, match="sample 7"):
        list(prepkit.Reader(store, batch_size=4, shuffle=False))
    with pytest.warns(RuntimeWarning, match="skipping sample 7"):
        seen = all_indices(prepkit.Reader(store, batch_size=4, shuffle=False, on_error="skip"))
    assert seen == [i for i in range(23) if i != 7]


def test_breaking_out_stops_the_background_thread(store_path: Path) -> None:
    before = threading.active_count()
    reader = prepkit.Reader(store_path, batch_size=2, prefetch=1)
    for _ in reader:
        break
    reader.close()
    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == before
    for _ in prepkit.Reader(store_path, batch_size=2, prefetch=1):
        pass
    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == before


def test_torch_output_shares_memory(store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    converted: list[np.ndarray] = []
    from_numpy = torch.from_numpy

    def spy(array: np.ndarray) -> object:
        converted.append(array)
        return from_numpy(array)

    monkeypatch.setattr(torch, "from_numpy", spy)
    batch = next(iter(prepkit.Reader(store_path, batch_size=4, output="torch", shuffle=False, prefetch=0)))
    # Zero copy: the tensor's storage is the numpy batch the reader assembled.
    sources = [a for a in converted if a.ndim == 4]
    assert len(sources) == 1 and batch.images.data_ptr() == sources[0].ctypes.data
    assert np.shares_memory(batch.images.numpy(), sources[0])
    assert isinstance(batch.images, torch.Tensor) and batch.images.dtype == torch.uint8
    assert batch.labels.dtype == torch.int64 and batch.labels.tolist() == [0, 0, 0, 0]
    images, labels = batch  # unpacks like a DataLoader batch
    assert images.shape == (4, 12, 10, 3) and labels.shape == (4,)


def test_variable_sizes_come_as_a_list(tmp_path: Path) -> None:
    for number, (h, w) in enumerate([(5, 6), (7, 3), (4, 4)]):
        write_image(tmp_path / "src" / f"{number}.jpg", smooth_image(h, w, seed=number))
    build_store(str(tmp_path / "src"), str(tmp_path / "s"), layout=JpegLayout(), options=ImageOptions(), samples_per_shard=2, workers=1)
    batch = next(iter(prepkit.Reader(tmp_path / "s", batch_size=3, shuffle=False)))
    assert [image.shape for image in batch.images] == [(5, 6, 3), (7, 3, 3), (4, 4, 3)]
    assert list(batch.labels) == [-1, -1, -1]


def test_epoch_finished_and_iterating_again(store_path: Path) -> None:
    reader = prepkit.Reader(store_path, batch_size=10, seed=2)
    first = all_indices(reader)
    assert reader.epoch_finished and reader.state_dict()["next_batch"] == len(reader)
    assert all_indices(reader) == first  # a finished epoch iterated again starts over, like a DataLoader
    reader.set_epoch(1)
    assert not reader.epoch_finished


def test_transformed_batches_match_a_plain_decode_and_augment(tmp_path: Path) -> None:
    """Crop-aware lossless decoding and the reused decode buffer change nothing in the output."""
    from prepkit.augment import Normalize, Pipeline, RandomHorizontalFlip, RandomResizedCrop, ToDtype
    from prepkit.layouts import LosslessLayout

    for number in range(9):
        write_image(tmp_path / "src" / f"{number}.png", smooth_image(40 + 7 * number, 90 - 5 * number, seed=number))
    build_store(str(tmp_path / "src"), str(tmp_path / "s"), layout=LosslessLayout(tile=16), options=ImageOptions(), samples_per_shard=4, workers=1)
    ops = [RandomResizedCrop(16), RandomHorizontalFlip(), ToDtype("float32", scale=True), Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))]
    store = prepkit.open_store(tmp_path / "s")
    pipeline = Pipeline(ops)
    reader = prepkit.Reader(store, batch_size=4, seed=9, transforms=ops)
    for epoch in range(2):
        reader.set_epoch(epoch)
        for batch in reader:
            images = [store[int(i)]["image"] for i in batch.indices]
            flat = np.concatenate([image.ravel() for image in images])
            shapes = np.array([image.shape for image in images], dtype=np.int32)
            offsets = np.concatenate([[0], np.cumsum([image.size for image in images])[:-1]]).astype(np.int64)
            params = pipeline.params(shapes, batch.indices, seed=9, epoch=epoch)
            np.testing.assert_array_equal(batch.images, pipeline(flat, offsets, shapes, params))



@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"world_size": 0}, ValueError, r"Expected world_size >= 1. Got 0."),
        ({"rank": 2, "world_size": 2}, ValueError, r"Expected rank in \[0, 1\] \(world_size 2\). Got 2."),
        ({"shards_in_use": 0}, ValueError, r"Expected shards_in_use >= 1. Got 0."),
        ({"seed": -1}, ValueError, r"Expected seed in \[0, "),
        ({"batch_size": 1.5}, TypeError, r"Expected batch_size to be an integer. Got 1.5"),
        ({"batch_size": "4"}, TypeError, r"Expected batch_size to be an integer. Got '4'"),
        ({"batch_size": True}, TypeError, r"Expected batch_size to be an integer. Got True"),
        ({"prefetch": -1}, ValueError, r"Expected prefetch >= 0. Got -1."),
        ({"threads": -1}, ValueError, r"Expected threads >= 1. Got -1."),
        ({"threads": 0}, ValueError, r"Expected threads >= 1. Got 0."),
        ({"shuffle": "yes"}, TypeError, r"Expected shuffle to be True or False. Got 'yes'."),
        ({"device": "tpu"}, ValueError, r"Expected device to be 'cpu', 'cuda' or 'cuda:N'. Got 'tpu'."),
        ({"device": "cuda:1x"}, ValueError, r"Expected device to be 'cpu', 'cuda' or 'cuda:N'. Got 'cuda:1x'."),
        ({"mask_mode": "linear"}, ValueError, r"Expected mask_mode to be one of"),
        ({"fields": "image"}, TypeError, r"Expected fields to be a sequence"),
    ],
)
def test_reader_arguments_get_one_clear_message_each(store_path: Path, arguments: dict[str, object],
                                                       error: type[Exception], message: str) -> None:
    options: dict[str, object] = {"batch_size": 4, **arguments}
    with pytest.raises(error, match=message):
        prepkit.Reader(store_path, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("roi", [[[0.0, 0.0, np.inf, 4.0]], [[0.5, 0.0, 4.0, 4.0]], [[0, 0, 99, 4]], [[3, 0, 3, 4]]])
def test_bad_rois_are_refused_naming_the_sample(tmp_path: Path, roi: list[list[float]]) -> None:
    from prepkit.decode.engine import decode_samples, decoded_nbytes
    from prepkit.layouts import LosslessLayout

    write_image(tmp_path / "src" / "a.png", smooth_image(20, 24, seed=1))
    build_store(str(tmp_path / "src"), str(tmp_path / "s"), layout=LosslessLayout(tile=16), options=ImageOptions(),
                samples_per_shard=4, workers=1)
    store = prepkit.open_store(tmp_path / "s")
    with pytest.raises(DecodeError, match="sample 0"):
        decoded_nbytes(store, [0], rois=np.array(roi))
    with pytest.raises(DecodeError, match="sample 0"):
        decode_samples(store, [0], rois=np.array(roi))


def test_stored_image_not_matching_its_shape_is_named_and_skipped_on_the_crop_path(tmp_path: Path) -> None:
    from prepkit.augment import CenterCrop
    from prepkit.layouts import LosslessLayout

    for number in range(6):
        write_image(tmp_path / "src" / f"{number}.png", smooth_image(24, 20, seed=number))
    build_store(str(tmp_path / "src"), str(tmp_path / "s"), layout=LosslessLayout(tile=16), options=ImageOptions(),
                samples_per_shard=4, workers=1)
    store = prepkit.open_store(tmp_path / "s")
    store.field_arrays["image"].shapes[2] = (20, 16, 3)  # the stored image is 24 x 20
    with pytest.raises(DecodeError, match=r"sample 2 \(image\): Expected a stored image of the recorded shape"):
        list(prepkit.Reader(store, batch_size=3, shuffle=False, transforms=[CenterCrop(8)]))
    with pytest.warns(RuntimeWarning, match="skipping sample 2"):
        seen = all_indices(prepkit.Reader(store, batch_size=3, shuffle=False, transforms=[CenterCrop(8)], on_error="skip"))
    assert seen == [0, 1, 3, 4, 5]


def test_a_store_replaced_under_an_open_handle_is_detected(tmp_path: Path) -> None:
    from prepkit.errors import StoreError

    for number in range(6):
        write_image(tmp_path / "src" / f"c{number % 2}" / f"{number}.png", smooth_image(12, 10, seed=number))
    dest = tmp_path / "s"
    build_store(str(tmp_path / "src"), str(dest), layout=RawLayout(), options=ImageOptions(), samples_per_shard=2, workers=1)
    store = prepkit.open_store(dest)
    store[0]  # shard 0 open
    build_store(str(tmp_path / "src"), str(dest), layout=JpegLayout(), options=ImageOptions(), samples_per_shard=2,
                workers=1, overwrite=True)
    with pytest.raises(StoreError, match="the store was replaced since it was opened"):
        store[5]  # shard 2: a new shard file of the new store
def test_mixed_channel_store_trains_with_rgb_first(tmp_path: Path) -> None:
    from prepkit.augment import RGB, RandomResizedCrop, ToDtype
    from prepkit.errors import PipelineError

    root = tmp_path / "src"
    for number in range(6):
        channels = (1, 3, 4)[number % 3]
        write_image(root / "a" / f"{number}.png", smooth_image(9, 8, channels=channels, seed=number))
    build_store(str(root), str(tmp_path / "s"), layout=RawLayout(), options=ImageOptions(mode="keep"), samples_per_shard=6, workers=1)
    store = prepkit.open_store(tmp_path / "s")
    assert sorted({store[i]["image"].shape[2] for i in range(6)}) == [1, 3, 4]
    with pytest.raises(PipelineError, match="mixed channels"):
        list(prepkit.Reader(store, batch_size=6, transforms=[RandomResizedCrop(4)]))
    reader = prepkit.Reader(store, batch_size=6, transforms=[RGB(), RandomResizedCrop(4), ToDtype("float32", scale=True)])
    (batch,) = list(reader)
    assert batch.images.shape == (6, 3, 4, 4) and batch.images.dtype == np.float32


def test_reader_passes_labels_through_mixup_and_cutmix(store_path: Path) -> None:
    from prepkit.augment import CutMix, MixUp, RandomResizedCrop, ToDtype

    ops = [RandomResizedCrop(6), ToDtype("float32", scale=True)]
    plain = list(prepkit.Reader(store_path, batch_size=5, seed=2, transforms=ops))
    mixed = list(prepkit.Reader(store_path, batch_size=5, seed=2, transforms=[*ops, MixUp(0.5, num_classes=3)]))
    for before, after in zip(plain, mixed, strict=True):
        np.testing.assert_array_equal(before.indices, after.indices)
        assert after.labels.shape == (len(after), 3) and after.labels.dtype == np.float32
        want, want_labels = MixUp(0.5, num_classes=3)(before.images, before.labels, seed=2, number=before.number)
        np.testing.assert_allclose(after.images, want, atol=1e-6)
        np.testing.assert_allclose(after.labels, want_labels)
    reader = prepkit.Reader(store_path, batch_size=4, transforms=[*ops, CutMix(num_classes=3)], layout="NHWC",
                            output="torch")  # fmt: skip
    batch = next(iter(reader))
    assert tuple(batch.images.shape) == (4, 6, 6, 3) and tuple(batch.labels.shape) == (4, 3)
    np.testing.assert_allclose(batch.labels.numpy().sum(axis=1), 1.0, atol=1e-6)


def test_ranks_of_a_node_decode_and_mix_on_their_share_of_its_cores(store_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a launcher (torchrun's LOCAL_WORLD_SIZE), a rank's numba loops run on its share
    of the cores: the batches produced in the background thread, the MixUp in the caller's
    thread, and a batch made in the caller's thread (as StoreDataset does), whose own lower
    setting stays; each thread's setting is back after. A count the caller gives stays."""
    import numba

    from prepkit.augment import MixUp, ToDtype
    from prepkit.augment import batch as batch_ops
    from prepkit.parallel import rank_threads

    monkeypatch.setattr("prepkit.parallel.local_processes", lambda: 4 * (os.cpu_count() or 1))
    monkeypatch.setattr("prepkit.parallel._pinned", lambda: False)
    reader = prepkit.Reader(store_path, batch_size=4, transforms=[ToDtype("float32", scale=True), MixUp(num_classes=3)])
    assert reader.threads == rank_threads() == 1
    produced: list[int] = []
    mixed: list[int] = []
    produce, mixup = reader.executor.produce, batch_ops._mixup_cpu

    def spying_produce(*args: object) -> object:
        produced.append(numba.get_num_threads())
        return produce(*args)

    def spying_mixup(*args: object) -> object:
        mixed.append(numba.get_num_threads())
        return mixup(*args)

    monkeypatch.setattr(reader.executor, "produce", spying_produce)
    monkeypatch.setattr(batch_ops, "_mixup_cpu", spying_mixup)
    before = numba.get_num_threads()
    assert sorted(all_indices(reader)) == list(range(23))
    assert produced and set(produced) == {1}
    assert mixed and set(mixed) == {1}
    assert numba.get_num_threads() == before
    produced.clear()
    lower = prepkit.Reader(store_path, batch_size=4, threads=2)
    monkeypatch.setattr(lower.executor, "produce", spying_produce)
    numba.set_num_threads(1)
    try:
        lower._make_batch(lower.plan(0), 0)
        assert produced == [1] and numba.get_num_threads() == 1
    finally:
        numba.set_num_threads(before)
    assert lower.threads == 2
