"""`prepkit verify`: a flipped byte anywhere in a shard file is caught and named."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from click.testing import CliRunner

from prepkit.cli import _register, cli
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
