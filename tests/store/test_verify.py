"""`prepkit verify`: a flipped byte anywhere in a shard file is caught and named."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from click.testing import CliRunner

from prepkit.cli import _register, cli
from prepkit.errors import StoreCorruptError
from prepkit.ingest.build import build_store
from prepkit.ingest.images import ImageOptions
from prepkit.layouts import JpegLayout, Layout, RawLayout
from prepkit.store.verify import verify_store

_register()


def make_store(class_folder: Path, dest: Path, layout: Layout | None = None) -> Path:
    layout = RawLayout() if layout is None else layout
    build_store(str(class_folder), str(dest), layout=layout, options=ImageOptions(), samples_per_shard=3, workers=1)
    return dest


def test_clean_store_verifies(class_folder: Path, tmp_path: Path) -> None:
    store = make_store(class_folder, tmp_path / "s", JpegLayout())
    result = CliRunner().invoke(cli, ["verify", str(store), "--decode"])
    assert result.exit_code == 0, result.output
    assert "ok:" in result.output and "7 samples, 3 shard files, 7 decoded" in result.output


def test_every_flipped_byte_of_a_shard_file_is_caught(class_folder: Path, tmp_path: Path) -> None:
    clean = make_store(class_folder, tmp_path / "clean")
    shard_file = clean / "image" / "bytes" / "c" / "1"
    size = shard_file.stat().st_size
    rng = random.Random(0)
    positions = sorted(set(rng.sample(range(size), 60)) | {0, size - 1, size - 4, size - 5})
    work = tmp_path / "work"
    for position in positions:
        if work.exists():
            shutil.rmtree(work)
        shutil.copytree(clean, work)
        target = work / "image" / "bytes" / "c" / "1"
        data = bytearray(target.read_bytes())
        data[position] ^= 1 << rng.randrange(8)
        target.write_bytes(bytes(data))
        report = verify_store(work)
        assert not report.ok, f"flip at byte {position} of {size} went unnoticed"
        assert any(p.shard_file and p.shard_file.endswith("c/1") for p in report.problems)


def test_cli_names_bad_samples_and_missing_shards(class_folder: Path, tmp_path: Path) -> None:
    store = make_store(class_folder, tmp_path / "s")
    target = store / "image" / "bytes" / "c" / "0"
    data = bytearray(target.read_bytes())
    data[5] ^= 0xFF  # inside sample 0
    target.write_bytes(bytes(data))
    (store / "image" / "bytes" / "c" / "2").unlink()
    result = CliRunner().invoke(cli, ["verify", str(store)])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert "sample 0 (image)" in result.output and "CRC32C mismatch" in result.output
    assert "c/2 is missing" in result.output and "sample 6 (image)" in result.output
    assert "problems found" in result.output

    truncated = make_store(class_folder, tmp_path / "t")
    shard = truncated / "image" / "bytes" / "c" / "1"
    shard.write_bytes(shard.read_bytes()[:50])
    result = CliRunner().invoke(cli, ["verify", str(truncated)])
    assert result.exit_code == 1 and "truncated" in result.output


def test_verify_on_broken_metadata_is_a_clean_error(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "zarr.json").write_text("{not json")
    result = CliRunner().invoke(cli, ["verify", str(tmp_path / "s")])
    assert result.exit_code == 1 and "cannot read group metadata" in result.output


def _flip(path: Path, position: int, bit: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 1 << bit
    path.write_bytes(bytes(data))


def test_a_flipped_byte_in_every_file_of_the_store_is_caught(class_folder: Path, tmp_path: Path) -> None:
    """Every zarr.json, every chunk of every per-sample array, every shard file: one flip each
    at several positions, and verify --decode must report it (issue 15)."""
    clean = make_store(class_folder, tmp_path / "clean")
    files = sorted(p.relative_to(clean) for p in clean.rglob("*") if p.is_file() and p.name != ".prepkit.lock")
    assert any(str(f).startswith("labels/c") for f in files) and any(str(f).startswith("paths/c") for f in files)
    assert Path("image/crc32c/zarr.json") in files and Path("zarr.json") in files
    rng = random.Random(15)
    work = tmp_path / "work"
    missed = []
    for relative in files:
        size = (clean / relative).stat().st_size
        for position in sorted({0, size - 1, *rng.sample(range(size), min(size, 3))}):
            if work.exists():
                shutil.rmtree(work)
            shutil.copytree(clean, work)
            _flip(work / relative, position, rng.randrange(8))
            if verify_store(work, decode=True).ok:
                missed.append(f"{relative}@{position}")
    assert not missed, f"flips not caught: {missed}"


def test_hostile_labels_are_refused(class_folder: Path, tmp_path: Path) -> None:
    import numpy as np
    import zarr

    from prepkit.store.reader import check_labels

    store = make_store(class_folder, tmp_path / "s")
    # A float64 labels array (every label would read as 0 if cast silently).
    root = zarr.open_group(store, mode="r+")
    root.create_array("labels", shape=(7,), dtype="float64", overwrite=True, fill_value=0)
    report = verify_store(store)
    assert not report.ok and any("labels" in p.reason for p in report.problems), report.problems
    for bad in (np.array([0, 99]), np.array([0, -5])):
        try:
            check_labels(bad, ["a", "b"], "s")
        except StoreCorruptError as error:
            assert "Expected labels" in str(error)
        else:
            raise AssertionError(f"labels {bad} accepted")


def test_old_store_without_checksums_opens_and_verify_says_unchecked(class_folder: Path, tmp_path: Path) -> None:
    import json

    store = make_store(class_folder, tmp_path / "s")
    meta = json.loads((store / "zarr.json").read_text())
    for key in ("checksums", "generation", "attributes_crc32c"):
        del meta["attributes"]["prepkit"][key]
    (store / "zarr.json").write_text(json.dumps(meta))
    report = verify_store(store, decode=True)
    assert report.ok and report.decoded == 7
    assert any("arrays unchecked" in note for note in report.notes)
    result = CliRunner().invoke(cli, ["verify", str(store)])
    assert result.exit_code == 0 and "arrays unchecked" in result.output
