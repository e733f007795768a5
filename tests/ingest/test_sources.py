"""Listing folders and manifests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prepkit.errors import IngestError
from prepkit.ingest.sources import list_source
from tests.conftest import smooth_image, write_image


def test_image_folder_labels_follow_sorted_class_names(class_folder: Path) -> None:
    listing = list_source(class_folder)
    assert listing.class_names == ["ant", "moose", "zebra"]
    assert [Path(item.path).parent.name for item in listing.items] == ["ant"] * 2 + ["moose"] * 2 + ["zebra"] * 3
    assert [item.label for item in listing.items] == [0, 0, 1, 1, 2, 2, 2]
    assert all(not Path(item.relpath).is_absolute() for item in listing.items)


def test_flat_folder_has_no_labels_and_reports_non_images(tmp_path: Path) -> None:
    for name in ("b.png", "a.jpg"):
        write_image(tmp_path / name, smooth_image(4, 4))
    (tmp_path / "README.txt").write_text("not an image")
    listing = list_source(tmp_path)
    assert [Path(i.path).name for i in listing.items] == ["a.jpg", "b.png"]
    assert listing.class_names is None and all(i.label is None for i in listing.items)
    assert [Path(p).name for p, _ in listing.ignored] == ["README.txt"]


def test_directory_symlink_loop_terminates(class_folder: Path) -> None:
    (class_folder / "ant" / "again").symlink_to(class_folder / "ant")
    listing = list_source(class_folder)
    assert len(listing.items) == 7
    assert any("symlink loop" in reason for _, reason in listing.ignored)


def test_csv_manifest_with_class_names(tmp_path: Path) -> None:
    for name in ("x.png", "y.png", "z.png"):
        write_image(tmp_path / "img" / name, smooth_image(4, 4))
    (tmp_path / "m.csv").write_text("path,label\nimg/x.png,dog\nimg/y.png,cat\nimg/z.png,dog\n")
    listing = list_source(tmp_path / "m.csv")
    assert listing.class_names == ["cat", "dog"]
    assert [i.label for i in listing.items] == [1, 0, 1]
    assert listing.items[0].path == str(tmp_path / "img" / "x.png")


def test_jsonl_manifest_with_integer_labels_and_masks(tmp_path: Path) -> None:
    rows = [{"path": "a.png", "label": 3, "mask": "a_mask.png"}, {"path": "b.png", "label": 7, "mask": "b_mask.png"}]
    (tmp_path / "m.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    listing = list_source(tmp_path / "m.jsonl")
    assert listing.class_names is None and [i.label for i in listing.items] == [3, 7]
    assert listing.has_masks and listing.items[1].mask_path == str(tmp_path / "b_mask.png")


def test_bad_manifests(tmp_path: Path) -> None:
    (tmp_path / "no_path.csv").write_text("file,label\na.png,1\n")
    with pytest.raises(IngestError, match="'path' column"):
        list_source(tmp_path / "no_path.csv")
    (tmp_path / "bad.jsonl").write_text('{"path": "a.png"}\n{oops\n')
    with pytest.raises(IngestError, match="line 2"):
        list_source(tmp_path / "bad.jsonl")
    (tmp_path / "list.txt").write_text("a.png\n")
    with pytest.raises(IngestError, match="neither a folder nor a manifest"):
        list_source(tmp_path / "list.txt")


def test_negative_integer_label_is_refused(tmp_path: Path) -> None:
    (tmp_path / "m.csv").write_text("path,label\na.png,1\nb.png,-1\n")
    with pytest.raises(IngestError, match=r"line 3: Expected an integer label in \[0, .*\]. Got -1"):
        list_source(tmp_path / "m.csv")


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"path": "a.png", "label": 1}, {"path": "b.png", "label": 2**70}], r"line 2: Expected an integer label in \[0"),
        ([{"path": "a.png", "label": 1}, {"path": "b.png", "label": "cat"}], r"line 2: Expected an integer label like"),
        ([{"path": "a.png", "label": "cat"}, {"path": "b.png", "label": 3}], r"line 2: Expected a class-name label"),
        ([{"path": "a.png", "label": True}], r"line 1: Expected an integer or a class-name string. Got true"),
        ([{"path": "a.png", "label": [1]}], r"line 1: .*Got \[1\]"),
        ([{"path": "a.png", "label": 1.5}], r"line 1: .*Got 1.5"),
        ([{"path": "a.png", "label": 1}, {"path": "b.png", "label": "x"}, {"path": "c.png", "label": -5}],
         r"2 bad label\(s\):\n  line 2: .*\n  line 3: .*Got -5"),
    ],
)
def test_manifest_label_rule_reports_every_bad_line(tmp_path: Path, rows: list[dict[str, object]], message: str) -> None:
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(IngestError, match=message):
        list_source(manifest)


def test_manifest_duplicate_paths_are_warned(tmp_path: Path) -> None:
    (tmp_path / "m.csv").write_text("path,label\na.png,1\nb.png,2\n./a.png,3\n")
    with pytest.warns(UserWarning, match=r"'a.png' is listed 2 times \(lines 2, 4\)"):
        listing = list_source(tmp_path / "m.csv")
    assert [i.label for i in listing.items] == [1, 2, 3]
