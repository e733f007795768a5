"""`prepkit shard`, `convert` and `inspect` through click's CliRunner."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

import prepkit
from prepkit.cli import _register, cli
from prepkit.errors import StoreError
from tests.conftest import smooth_image, store_files, write_bomb_png, write_image

_register()


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_shard_inspect_convert(class_folder: Path, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    result = run("shard", class_folder, raw, "--layout", "raw", "--samples-per-shard", "3", "--workers", "1")
    assert result.exit_code == 0, result.output
    assert "wrote 7 samples" in result.output

    result = run("inspect", raw)
    assert result.exit_code == 0, result.output
    assert "layout raw" in result.output and "7 in 3 shards" in result.output and "ant (2)" in result.output

    info = json.loads(run("inspect", raw, "--json").output)
    assert info["samples"] == 7 and info["shards"] == 3 and info["classes"] == ["ant", "moose", "zebra"]
    assert info["fields"]["image"]["size_vs_raw"] == 1.0
    assert info["fields"]["image"]["shard_files"] == 3

    jpeg = tmp_path / "jpeg"
    result = run("convert", raw, jpeg, "--layout", "jpeg", "--quality", "95", "--samples-per-shard", "4", "--workers", "1")
    assert result.exit_code == 0, result.output
    source, converted = prepkit.open_store(raw), prepkit.open_store(jpeg)
    assert converted.layout == "jpeg" and converted.num_shards == 2
    assert converted.labels.tolist() == source.labels.tolist()
    assert converted.class_names == source.class_names
    assert [converted.source_path(i) for i in range(7)] == [source.source_path(i) for i in range(7)]
    for i in range(7):
        error = np.abs(converted[i]["image"].astype(int) - source[i]["image"].astype(int)).mean()
        assert error < 4, error
    back = tmp_path / "back"
    assert run("convert", jpeg, back, "--layout", "raw", "--workers", "1").exit_code == 0
    np.testing.assert_array_equal(prepkit.open_store(back)[3]["image"], converted[3]["image"])
    assert prepkit.open_store(back).attributes.samples_per_shard == 4  # kept from the source


def test_manifest_with_masks_and_max_side(tmp_path: Path) -> None:
    rows = []
    for number in range(3):
        write_image(tmp_path / f"im{number}.png", smooth_image(40, 60, seed=number))
        mask = (np.arange(2400).reshape(40, 60, 1) // (7 + number) % 5).astype(np.uint8)
        write_image(tmp_path / f"mask{number}.png", mask)
        rows.append({"path": f"im{number}.png", "label": "abc"[number], "mask": f"mask{number}.png"})
    (tmp_path / "m.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    result = run("shard", tmp_path / "m.jsonl", tmp_path / "s", "--layout", "raw", "--max-side", "30", "--workers", "1")
    assert result.exit_code == 0, result.output
    store = prepkit.open_store(tmp_path / "s")
    assert store.fields == ("image", "mask")
    sample = store[2]
    assert sample["image"].shape == (20, 30, 3) and sample["mask"].shape == (20, 30, 1)
    assert set(np.unique(sample["mask"])) <= set(range(5))  # nearest-neighbour: no new values
    assert sample["label"] == 2 and store.class_names == ["a", "b", "c"]


def make_bad_dataset(root: Path) -> dict[str, str]:
    """Good images plus one of each kind of bad file; returns bad name -> expected reason."""
    for number in range(4):
        write_image(root / "good" / f"g{number}.png", smooth_image(9, 11, seed=number))
    bad = root / "good"
    (bad / "empty.png").write_bytes(b"")
    (bad / "text.jpg").write_text("just text\n")
    truncated = write_image(bad / "trunc.png", smooth_image(64, 64))
    truncated.write_bytes(truncated.read_bytes()[:300])
    write_bomb_png(bad / "bomb.png")
    return {"empty.png": "empty", "text.jpg": "not a recognized", "trunc.png": "cannot decode", "bomb.png": "decompression bomb"}


def test_on_error_skip_keeps_every_good_sample(tmp_path: Path) -> None:
    expected = make_bad_dataset(tmp_path / "src")
    result = run("shard", tmp_path / "src", tmp_path / "s", "--layout", "jpeg", "--on-error", "skip", "--workers", "1", "--samples-per-shard", "2")
    assert result.exit_code == 0, result.output
    store = prepkit.open_store(tmp_path / "s")
    assert sorted(Path(store.source_path(i)).name for i in range(len(store))) == [f"g{n}.png" for n in range(4)]
    report = [json.loads(line) for line in (tmp_path / "s" / "skipped.jsonl").read_text().splitlines()]
    reasons = {Path(r["path"]).name: r["reason"] for r in report}
    assert reasons.keys() == expected.keys()
    for name, reason in expected.items():
        assert reason in reasons[name], (name, reasons[name])
        assert name in result.output  # also printed


def test_on_error_fail_exits_with_one_line_and_no_complete_store(tmp_path: Path) -> None:
    make_bad_dataset(tmp_path / "src")
    result = run("shard", tmp_path / "src", tmp_path / "s", "--layout", "raw", "--workers", "1")
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(lines) == 1 and "bomb.png" in lines[0] and "decompression bomb" in lines[0]
    with pytest.raises(StoreError, match="incomplete"):
        prepkit.open_store(tmp_path / "s")


def test_argument_errors_are_clear(class_folder: Path, tmp_path: Path) -> None:
    result = run("shard", tmp_path / "missing", tmp_path / "s", "--layout", "raw")
    assert result.exit_code == 2 and "does not exist" in result.output
    result = run("shard", class_folder, tmp_path / "s", "--layout", "png")
    assert result.exit_code == 2 and "'png' is not one of" in result.output
    result = run("shard", class_folder, tmp_path / "s", "--layout", "jpeg", "--quality", "101")
    assert result.exit_code == 2 and "--quality" in result.output
    result = run("shard", class_folder, tmp_path / "s", "--layout", "raw", "--samples-per-shard", "0")
    assert result.exit_code == 2

    assert run("shard", class_folder, tmp_path / "s", "--layout", "raw", "--workers", "1").exit_code == 0
    result = run("shard", class_folder, tmp_path / "s", "--layout", "raw", "--workers", "1")
    assert result.exit_code == 0, result.output  # the same command again: a no-op success
    assert "already holds this store, complete (7 samples" in result.output and "nothing to do" in result.output
    result = run("shard", class_folder, tmp_path / "s", "--layout", "jpeg", "--workers", "1")
    assert result.exit_code == 1 and "already holds a complete store made from other" in result.output
    assert "--overwrite" in result.output
    result = run("shard", class_folder, tmp_path / "s", "--layout", "jpeg", "--workers", "1", "--overwrite")
    assert result.exit_code == 0 and prepkit.open_store(tmp_path / "s").layout == "jpeg"

    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("precious")
    result = run("shard", class_folder, other, "--layout", "raw")
    assert result.exit_code == 1 and "not empty" in result.output and (other / "keep.txt").exists()

    result = run("inspect", class_folder)
    assert result.exit_code == 1 and "not a Zarr v3 store" in result.output


def test_interrupted_shard_resumes_to_identical_store(class_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prepkit.store import writer as writer_module

    run("shard", class_folder, tmp_path / "full", "--layout", "jpeg", "--samples-per-shard", "2", "--workers", "1")
    original = writer_module.StoreWriter.write_shard
    calls = {"n": 0}

    def dying_write_shard(self, shard, results):  # type: ignore[no-untyped-def]
        if calls["n"] == 2:
            raise KeyboardInterrupt
        calls["n"] += 1
        return original(self, shard, results)

    monkeypatch.setattr(writer_module.StoreWriter, "write_shard", dying_write_shard)
    result = run("shard", class_folder, tmp_path / "s", "--layout", "jpeg", "--samples-per-shard", "2", "--workers", "1")
    assert result.exit_code == 130 and "interrupted" in result.output and "resume" in result.output
    monkeypatch.setattr(writer_module.StoreWriter, "write_shard", original)
    result = run("shard", class_folder, tmp_path / "s", "--layout", "jpeg", "--samples-per-shard", "2", "--workers", "1")
    assert result.exit_code == 0 and "2 resumed" in result.output
    assert store_files(tmp_path / "s") == store_files(tmp_path / "full")


def test_non_utf8_file_name_is_stored(tmp_path: Path) -> None:
    root = tmp_path / "src"
    root.mkdir()
    name = os.fsdecode(b"caf\xe9.png")  # latin-1 bytes: not valid UTF-8
    write_image(root / name, smooth_image(5, 6))
    result = run("shard", root, tmp_path / "s", "--layout", "raw", "--workers", "1")
    assert result.exit_code == 0, result.output
    store = prepkit.open_store(tmp_path / "s")
    assert os.fsencode(store.source_path(0)) == b"caf\xe9.png"
