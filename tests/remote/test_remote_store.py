"""Stores in object storage, against a real SeaweedFS server on loopback (no mocks)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import prepkit
from prepkit.cli import _register, cli
from prepkit.errors import StoreCorruptError, StoreError
from prepkit.ingest.build import build_store
from prepkit.ingest.images import ImageOptions
from prepkit.layouts import LosslessLayout, RawLayout
from prepkit.seaweedfs import SeaweedServer
from prepkit.store.convert import convert_store
from prepkit.store.publish import UPLOAD_MARKER
from prepkit.store.storage import ObjectRoot, parse_storage_options
from prepkit.store.verify import verify_store
from tests.conftest import smooth_image, store_files, write_image

_register()


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "dataset"
    for number in range(11):
        write_image(root / f"class{number % 3}" / f"{number:03d}.png", smooth_image(9 + number % 4, 7 + number % 3, seed=number))
    return root


def shard(src: Path, dest: str, options: dict[str, object] | None = None, layout: object = None) -> None:
    build_store(str(src), dest, layout=layout or RawLayout(), options=ImageOptions(), samples_per_shard=4, workers=1,
                storage_options=options)  # type: ignore[arg-type]


def test_shard_to_s3_matches_the_local_store_object_for_object(
    dataset: Path, tmp_path: Path, seaweed: SeaweedServer, s3_url: str
) -> None:
    local = tmp_path / "local"
    shard(dataset, str(local))
    shard(dataset, s3_url, seaweed.storage_options())
    root = ObjectRoot(s3_url, seaweed.storage_options())
    objects = root.listing()
    expected = {key: data for key, data in store_files(local).items()}
    # The provenance records the destination-independent source, so even zarr.json is equal.
    assert sorted(objects) == sorted(expected)
    for key, data in expected.items():
        assert root.get(key) == data, key
    assert UPLOAD_MARKER not in objects
    with prepkit.open_store(local) as mine, prepkit.open_store(s3_url, storage_options=seaweed.storage_options()) as theirs:
        assert len(theirs) == len(mine) == 11
        assert np.array_equal(theirs.labels, mine.labels)
        for index in range(len(mine)):
            assert np.array_equal(theirs.read_bytes(index), mine.read_bytes(index))
            assert np.array_equal(theirs[index]["image"], mine[index]["image"])
            assert theirs.source_path(index) == mine.source_path(index)


def test_a_second_shard_to_the_same_prefix_is_refused_and_overwrite_replaces_it(
    dataset: Path, seaweed: SeaweedServer, s3_url: str
) -> None:
    shard(dataset, s3_url, seaweed.storage_options())
    runner = CliRunner()
    options = [f"--storage-option={k}={v}" for k, v in seaweed.storage_options().items()]
    result = runner.invoke(cli, ["shard", str(dataset), s3_url, "--layout", "raw", "--workers", "1", *options])
    assert result.exit_code == 1 and "already holds a complete store" in result.output
    result = runner.invoke(cli, ["shard", str(dataset), s3_url, "--layout", "raw", "--workers", "1",
                                  "--samples-per-shard", "5", "--overwrite", *options])
    assert result.exit_code == 0, result.output
    with prepkit.open_store(s3_url, storage_options=seaweed.storage_options()) as store:
        assert store.attributes.samples_per_shard == 5 and store.num_shards == 3
    keys = ObjectRoot(s3_url, seaweed.storage_options()).listing()
    assert "image/bytes/c/2" in keys and "image/bytes/c/3" not in keys  # the old fourth shard is gone


def test_an_interrupted_upload_is_invisible_to_readers_and_resumes(
    dataset: Path, tmp_path: Path, seaweed: SeaweedServer, s3_url: str
) -> None:
    shard(dataset, s3_url, seaweed.storage_options())
    root = ObjectRoot(s3_url, seaweed.storage_options())
    complete = root.get("zarr.json")
    # What a run killed mid-upload leaves: the upload marker, some objects, no root zarr.json.
    root.put(UPLOAD_MARKER, b'{"digest": "from-a-killed-run"}')
    root.delete(["zarr.json", "image/bytes/c/1"])
    with pytest.raises(StoreError, match="no zarr.json"):
        prepkit.open_store(s3_url, storage_options=seaweed.storage_options())
    shard(dataset, s3_url, seaweed.storage_options())
    assert root.get("zarr.json") == complete and UPLOAD_MARKER not in root.listing()
    with prepkit.open_store(s3_url, storage_options=seaweed.storage_options()) as store:
        assert len(store) == 11 and store[5]["image"].shape[2] == 3


def test_inspect_and_verify_work_on_the_remote_store(dataset: Path, seaweed: SeaweedServer, s3_url: str) -> None:
    shard(dataset, s3_url, seaweed.storage_options(), layout=LosslessLayout())
    options = [f"--storage-option={k}={v}" for k, v in seaweed.storage_options().items()]
    runner = CliRunner()
    result = runner.invoke(cli, ["inspect", s3_url, "--json", *options])
    assert result.exit_code == 0, result.output
    assert '"samples": 11' in result.output and '"shard_files": 3' in result.output and s3_url in result.output
    result = runner.invoke(cli, ["verify", s3_url, "--decode", *options])
    assert result.exit_code == 0, result.output
    assert "11 samples, 3 shard files, 11 decoded" in result.output


def test_zarr_python_reads_every_array_of_the_remote_store(
    dataset: Path, tmp_path: Path, seaweed: SeaweedServer, s3_url: str
) -> None:
    import zarr
    from obstore.store import S3Store
    from zarr.storage import ObjectStore

    local = tmp_path / "local"
    shard(dataset, str(local))
    shard(dataset, s3_url, seaweed.storage_options())
    bucket, _, prefix = s3_url.removeprefix("s3://").partition("/")
    client = S3Store(bucket, prefix=prefix, endpoint=seaweed.endpoint, access_key_id="prepkit-test-key",
                     secret_access_key="prepkit-test-secret", region="us-east-1", virtual_hosted_style_request=False,
                     client_options={"allow_http": True})
    remote = zarr.open_group(ObjectStore(client, read_only=True), mode="r")
    mine = zarr.open_group(local, mode="r")
    assert remote.attrs["prepkit"]["complete"] is True
    for name in ("labels", "paths", "path_ranges", "image/ranges", "image/shapes", "image/crc32c", "image/bytes"):
        assert np.array_equal(remote[name][...], mine[name][...]), name


def test_convert_reads_and_writes_object_storage(dataset: Path, seaweed: SeaweedServer, s3_url: str, tmp_path: Path) -> None:
    shard(dataset, s3_url, seaweed.storage_options())
    target = s3_url + "-lossless"
    convert_store(s3_url, target, layout=LosslessLayout(), samples_per_shard=None, workers=1, overwrite=False,
                  storage_options=seaweed.storage_options())
    with prepkit.open_store(s3_url, storage_options=seaweed.storage_options()) as raw, \
            prepkit.open_store(target, storage_options=seaweed.storage_options()) as packed:
        assert packed.layout == "lossless"
        for index in range(len(raw)):
            assert np.array_equal(packed[index]["image"], raw[index]["image"])


def test_the_reader_yields_the_same_batches_remotely(dataset: Path, tmp_path: Path, seaweed: SeaweedServer, s3_url: str) -> None:
    local = tmp_path / "local"
    shard(dataset, str(local))
    shard(dataset, s3_url, seaweed.storage_options())
    remote = prepkit.open_store(s3_url, storage_options=seaweed.storage_options())
    for mine, theirs in zip(prepkit.Reader(local, batch_size=3, seed=1), prepkit.Reader(remote, batch_size=3, seed=1), strict=True):
        assert np.array_equal(mine.indices, theirs.indices)
        assert all(np.array_equal(a, b) for a, b in zip(mine.images, theirs.images, strict=True))


def test_server_stopped_mid_epoch_and_restarted_gives_identical_batches(
    dataset: Path, tmp_path: Path, seaweed: SeaweedServer, s3_url: str
) -> None:
    local = tmp_path / "local"
    shard(dataset, str(local))
    shard(dataset, s3_url, seaweed.storage_options())
    expected = [(b.indices.copy(), [np.array(i) for i in b.images]) for b in prepkit.Reader(local, batch_size=2, seed=4, prefetch=1)]
    reader = prepkit.Reader(prepkit.open_store(s3_url, storage_options=seaweed.storage_options()), batch_size=2, seed=4, prefetch=1)
    got = []
    restarter: threading.Thread | None = None
    try:
        for number, batch in enumerate(reader):
            got.append((batch.indices.copy(), [np.array(i) for i in batch.images]))
            if number == 0:
                # The server goes away with most of the epoch unread, and comes back a moment later:
                # reads in between fail, are retried with backoff, and succeed once it is up.
                seaweed.stop()
                restarter = threading.Thread(target=lambda: (time.sleep(1.0), seaweed.start()))
                restarter.start()
    finally:
        if restarter is not None:
            restarter.join()
        if seaweed.process is None:
            seaweed.start()
    assert len(got) == len(expected) == 6
    for (mine_indices, mine_images), (their_indices, their_images) in zip(expected, got, strict=True):
        assert np.array_equal(mine_indices, their_indices)
        assert all(np.array_equal(a, b) for a, b in zip(mine_images, their_images, strict=True))


def test_a_truncated_shard_object_is_named_in_the_error(dataset: Path, seaweed: SeaweedServer, s3_url: str) -> None:
    shard(dataset, s3_url, seaweed.storage_options())
    root = ObjectRoot(s3_url, seaweed.storage_options())
    whole = root.get("image/bytes/c/1")
    root.put("image/bytes/c/1", whole[: len(whole) // 3])
    with prepkit.open_store(s3_url, storage_options=seaweed.storage_options()) as store:
        store.read_bytes(0)  # shard 0 is intact
        with pytest.raises(StoreCorruptError, match=f"{s3_url}/image/bytes/c/1: .*truncated"):
            store.read_bytes(4)
    report = verify_store(s3_url, storage_options=seaweed.storage_options())
    assert not report.ok
    assert any(p.shard_file == f"{s3_url}/image/bytes/c/1" and "truncated" in p.reason for p in report.problems)


def test_wrong_credentials_give_a_clear_error(dataset: Path, seaweed: SeaweedServer, s3_url: str) -> None:
    shard(dataset, s3_url, seaweed.storage_options())
    wrong = seaweed.storage_options(secret_access_key="not-the-secret")
    with pytest.raises(StoreError, match=f"{s3_url}/zarr.json: access denied .*Expected valid credentials"):
        prepkit.open_store(s3_url, storage_options=wrong)
    options = [f"--storage-option={k}={v}" for k, v in wrong.items()]
    result = CliRunner().invoke(cli, ["shard", str(dataset), s3_url + "-other", "--layout", "raw", *options])
    assert result.exit_code == 1 and "access denied" in result.output


def test_storage_options_from_the_command_line_and_read_only_http() -> None:
    assert parse_storage_options(["endpoint=http://x:1", "ALLOW_HTTP=true"]) == {"endpoint": "http://x:1", "allow_http": "true"}
    with pytest.raises(StoreError, match="Expected --storage-option KEY=VALUE. Got 'endpoint'"):
        parse_storage_options(["endpoint"])
    with pytest.raises(StoreError, match="read-only"):
        ObjectRoot("http://127.0.0.1:9/bucket/store").put("zarr.json", b"{}")


def test_dask_sharding_straight_to_object_storage(dataset: Path, tmp_path: Path, seaweed: SeaweedServer, s3_url: str) -> None:
    from prepkit.ingest.executors import DaskExecutor

    local = tmp_path / "local"
    shard(dataset, str(local))
    build_store(str(dataset), s3_url, layout=RawLayout(), options=ImageOptions(), samples_per_shard=4, workers=1,
                storage_options=seaweed.storage_options(), executor=DaskExecutor(workers=1))
    root = ObjectRoot(s3_url, seaweed.storage_options())
    expected = store_files(local)
    assert sorted(root.listing()) == sorted(expected)
    assert all(root.get(key) == data for key, data in expected.items())


def test_a_resumed_upload_puts_only_what_is_missing(dataset: Path, tmp_path: Path, seaweed: SeaweedServer, s3_url: str) -> None:
    import hashlib
    import json

    from prepkit.store.publish import upload_store

    local = tmp_path / "local"
    shard(dataset, str(local))
    root = ObjectRoot(s3_url, seaweed.storage_options())
    total = len(store_files(local))
    assert upload_store(local, root, overwrite=False) == total
    # Killed after some objects: the marker of this very store, no root zarr.json, a shard missing.
    digest = hashlib.sha256((local / "zarr.json").read_bytes()).hexdigest()
    root.put(UPLOAD_MARKER, json.dumps({"digest": digest}).encode())
    root.delete(["zarr.json", "image/bytes/c/1"])
    assert upload_store(local, root, overwrite=False) == 2  # the shard and zarr.json, nothing else
    assert sorted(root.listing()) == sorted(store_files(local))
    assert root.get("image/bytes/c/1") == (local / "image" / "bytes" / "c" / "1").read_bytes()
