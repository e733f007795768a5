"""Round trips through `prepkit shard` for each layout, and plain zarr-python access."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

import prepkit
from prepkit.errors import StoreCorruptError, StoreError
from prepkit.ingest.build import build_store
from prepkit.ingest.images import ImageOptions
from prepkit.layouts import JpegLayout, RawLayout
from tests.conftest import store_files


def shard(src: Path, dest: Path, layout=None, workers: int = 1, per_shard: int = 3, **kw):
    return build_store(
        str(src), str(dest), layout=layout or RawLayout(), options=kw.pop("options", ImageOptions()),
        samples_per_shard=per_shard, workers=workers, **kw,
    )


def source_pixels(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(ImageOps.exif_transpose(image).convert("RGB"))


def test_raw_round_trip_is_exact_with_labels(class_folder: Path, tmp_path: Path) -> None:
    summary, _ = shard(class_folder, tmp_path / "s")
    store = prepkit.open_store(tmp_path / "s")
    assert len(store) == 7 == summary.num_samples
    assert store.layout == "raw"
    assert store.class_names == ["ant", "moose", "zebra"]  # sorted, as ImageFolder
    for i in range(len(store)):
        path = class_folder / store.source_path(i)
        sample = store[i]
        np.testing.assert_array_equal(sample["image"], source_pixels(path))
        assert store.class_names[sample["label"]] == path.parent.name
    # Negative indices and range errors behave like a sequence.
    np.testing.assert_array_equal(store[-1]["image"], store[6]["image"])
    with pytest.raises(IndexError):
        store[7]


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def test_jpeg_round_trip_psnr_on_real_photos(sample_photos: Path, tmp_path: Path) -> None:
    shard(sample_photos, tmp_path / "s", layout=JpegLayout(quality=90), per_shard=8)
    store = prepkit.open_store(tmp_path / "s")
    assert store.layout == "jpeg"
    values = [psnr(store[i]["image"], source_pixels(sample_photos / store.source_path(i))) for i in range(len(store))]
    assert len(values) == 18
    assert np.mean(values) >= 35.0, values


def test_same_output_whatever_the_worker_count(class_folder: Path, tmp_path: Path) -> None:
    shard(class_folder, tmp_path / "one", layout=JpegLayout(), workers=1)
    shard(class_folder, tmp_path / "two", layout=JpegLayout(), workers=2)
    one, two = store_files(tmp_path / "one"), store_files(tmp_path / "two")
    assert one.keys() == two.keys()
    for name in one:
        assert one[name] == two[name], name


PLAIN_ZARR = r"""
import sys, json, numpy as np, zarr
assert "prepkit" not in sys.modules
g = zarr.open_group(sys.argv[1], mode="r")
ranges, shapes = g["image/ranges"][:], g["image/shapes"][:]
data = g["image/bytes"]
out = {"attrs": g.attrs["prepkit"]["layout"], "labels": g["labels"][:].tolist(), "crc": g["image/crc32c"][:].tolist()}
images = [data[int(a):int(b)].reshape(tuple(s)) for (a, b), s in zip(ranges, shapes)]
paths = g["paths"][:].tobytes()
out["paths"] = [paths[int(a):int(b)].decode() for a, b in g["path_ranges"][:]]
np.save(sys.argv[2], np.concatenate([im.ravel() for im in images]))
print(json.dumps(out))
"""


def test_plain_zarr_reads_every_array(class_folder: Path, tmp_path: Path) -> None:
    shard(class_folder, tmp_path / "s")
    result = subprocess.run(
        [sys.executable, "-c", PLAIN_ZARR, str(tmp_path / "s"), str(tmp_path / "pixels.npy")],
        capture_output=True, text=True, check=True,
    )
    out = json.loads(result.stdout)
    store = prepkit.open_store(tmp_path / "s")
    assert out["attrs"] == {"name": "raw"}
    assert out["labels"] == store.labels.tolist()
    assert out["paths"] == [store.source_path(i) for i in range(len(store))]
    expected = np.concatenate([store[i]["image"].ravel() for i in range(len(store))])
    np.testing.assert_array_equal(np.load(tmp_path / "pixels.npy"), expected)
    from prepkit.store.format import crc32c

    assert out["crc"] == [crc32c(store.read_bytes(i)) for i in range(len(store))]


def test_flipped_byte_is_caught_by_crc_check(class_folder: Path, tmp_path: Path) -> None:
    shard(class_folder, tmp_path / "s")
    shard_file = tmp_path / "s" / "image" / "bytes" / "c" / "0"
    data = bytearray(shard_file.read_bytes())
    data[10] ^= 0x01
    shard_file.write_bytes(bytes(data))
    store = prepkit.open_store(tmp_path / "s", check_crc=True)
    with pytest.raises(StoreCorruptError, match="sample 0"):
        store[0]
    # Without the check the (damaged) bytes are returned as they are.
    assert prepkit.open_store(tmp_path / "s")[0]["image"].shape == store.shape(0)


def test_damaged_shard_index_is_reported(class_folder: Path, tmp_path: Path) -> None:
    shard(class_folder, tmp_path / "s")
    shard_file = tmp_path / "s" / "image" / "bytes" / "c" / "1"
    data = bytearray(shard_file.read_bytes())
    data[-10] ^= 0xFF
    shard_file.write_bytes(bytes(data))
    store = prepkit.open_store(tmp_path / "s")
    with pytest.raises(StoreCorruptError, match="checksum"):
        store[4]
    shard_file.write_bytes(bytes(data[:100]))
    store = prepkit.open_store(tmp_path / "s")
    with pytest.raises(StoreCorruptError, match="truncated|too short|shorter"):
        store[4]
    shard_file.unlink()
    with pytest.raises(StoreCorruptError, match="missing"):
        prepkit.open_store(tmp_path / "s")[4]


def test_incomplete_store_is_refused(class_folder: Path, tmp_path: Path) -> None:
    shard(class_folder, tmp_path / "s")
    meta = json.loads((tmp_path / "s" / "zarr.json").read_text())
    meta["attributes"]["prepkit"]["complete"] = False
    (tmp_path / "s" / "zarr.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="incomplete"):
        prepkit.open_store(tmp_path / "s")


def test_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        prepkit.open_store(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="no zarr.json"):
        prepkit.open_store(tmp_path / "empty")
