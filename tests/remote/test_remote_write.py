"""Writing straight to object storage: each shard uploaded once written, bounded local disk,
the complete marker last, resumable after a failure (real SeaweedFS server, no mocks)."""

from __future__ import annotations

from pathlib import Path

import pytest

import prepkit
from prepkit.errors import StoreError
from prepkit.ingest.build import build_store
from prepkit.ingest.images import ImageOptions
from prepkit.layouts import RawLayout
from prepkit.seaweedfs import SeaweedServer
from prepkit.store.publish import UPLOAD_MARKER, staging_dir
from prepkit.store.storage import ObjectRoot
from tests.conftest import smooth_image, store_files, write_image

SHARDS = 6


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "dataset"
    for number in range(2 * SHARDS):
        write_image(root / f"class{number % 3}" / f"{number:03d}.png", smooth_image(12, 10, seed=number))
    return root


def shard(src: Path, dest: str, options: dict[str, str] | None = None) -> None:
    build_store(str(src), dest, layout=RawLayout(), options=ImageOptions(), samples_per_shard=2, workers=1,
                storage_options=options)


def assert_same_as_local(dataset: Path, tmp_path: Path, url: str, options: dict[str, str]) -> None:
    local = tmp_path / "local"
    shard(dataset, str(local))
    root = ObjectRoot(url, options)
    expected = store_files(local)
    assert sorted(root.listing()) == sorted(expected)
    for key, data in expected.items():
        assert root.get(key) == data, key


def test_shards_go_up_as_they_are_written_and_staging_stays_small(
    dataset: Path, tmp_path: Path, seaweed: SeaweedServer, s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    staging = staging_dir(s3_url)
    real_put = ObjectRoot.put
    seen: list[tuple[str, int, bool]] = []  # (key, shard files in staging, per-sample arrays written yet)

    def watching_put(self: ObjectRoot, key: str, data: bytes | Path) -> None:
        shards = [p for p in (staging / "image" / "bytes" / "c").glob("*") if not p.name.endswith(".tmp")]
        seen.append((key, len(shards), (staging / "labels").exists()))
        real_put(self, key, data)

    monkeypatch.setattr(ObjectRoot, "put", watching_put)
    shard(dataset, s3_url, seaweed.storage_options())
    monkeypatch.undo()
    shard_puts = [entry for entry in seen if entry[0].startswith("image/bytes/c/")]
    assert len(shard_puts) == SHARDS
    # At most the shard being written plus two waiting for their upload are ever on local disk.
    assert max(count for _, count, _ in shard_puts) <= 3 < SHARDS
    # The first shard went up before the build was done (its per-sample arrays come at the end).
    assert shard_puts[0][2] is False
    keys = [key for key, _, _ in seen]
    assert keys[0] == UPLOAD_MARKER and keys[-1] == "zarr.json"
    assert not staging.exists() and not staging.with_name(staging.name + ".uploaded.jsonl").exists()
    assert_same_as_local(dataset, tmp_path, s3_url, seaweed.storage_options())


def test_a_failed_write_resumes_skipping_the_shards_in_the_bucket(
    dataset: Path, tmp_path: Path, seaweed: SeaweedServer, s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = seaweed.storage_options()
    real_put = ObjectRoot.put
    puts: list[str] = []

    def failing_put(self: ObjectRoot, key: str, data: bytes | Path) -> None:
        if key == "image/bytes/c/3":
            raise StoreError(f"{self.url}/{key}: cannot write (the network went away)")
        real_put(self, key, data)
        puts.append(key)

    monkeypatch.setattr(ObjectRoot, "put", failing_put)
    with pytest.raises(StoreError, match="the network went away"):
        shard(dataset, s3_url, options)
    root = ObjectRoot(s3_url, options)
    first_run = {key for key in puts if key.startswith("image/bytes/c/")}
    assert {"image/bytes/c/0", "image/bytes/c/1", "image/bytes/c/2"} <= first_run
    listing = root.listing()
    assert "zarr.json" not in listing and UPLOAD_MARKER in listing  # unfinished: readers refuse it
    with pytest.raises(StoreError, match="no zarr.json"):
        prepkit.open_store(s3_url, storage_options=options)
    # An uploaded shard lost from the bucket meanwhile is found (size check) and written again.
    root.delete(["image/bytes/c/0"])
    puts.clear()

    def counting_put(self: ObjectRoot, key: str, data: bytes | Path) -> None:
        real_put(self, key, data)
        puts.append(key)

    monkeypatch.setattr(ObjectRoot, "put", counting_put)
    shard(dataset, s3_url, options)
    second_run = {key for key in puts if key.startswith("image/bytes/c/")}
    assert "image/bytes/c/3" in second_run and "image/bytes/c/0" in second_run
    assert not (second_run & (first_run - {"image/bytes/c/0"}))  # the rest stayed where they were
    monkeypatch.undo()
    assert_same_as_local(dataset, tmp_path, s3_url, options)
