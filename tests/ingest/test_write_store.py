"""`prepkit.write_store` from Python samples, and `prepkit shard` over WebDataset tars and
Hugging Face dataset folders: the same samples read back the same, whatever the source."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

import prepkit
from prepkit.cli import _register, cli
from prepkit.errors import IngestError
from tests.conftest import smooth_image, store_files

_register()

SIZES = [(5, 7), (9, 4), (6, 6), (3, 8), (7, 5)]
IMAGES = [smooth_image(h, w, seed=n) for n, (h, w) in enumerate(SIZES)]
LABELS = [2, 0, 1, 0, 2]
NAMES = ["ant", "bee", "cat"]


def png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


class TensorDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """A torch map-style dataset returning (uint8 C x H x W tensor, tensor label)."""

    classes = NAMES

    def __len__(self) -> int:
        return len(IMAGES)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.from_numpy(IMAGES[index]).permute(2, 0, 1).contiguous(), torch.tensor(LABELS[index])


class Unpicklable(TensorDataset):
    def __init__(self) -> None:
        self.hook = lambda x: x


def write_tar(path: Path, masks: bool = False) -> Path:
    with tarfile.open(path, "w") as archive:
        for number, (pixels, label) in enumerate(zip(IMAGES, LABELS, strict=True)):
            members = {f"s{number:03d}.png": png(pixels), f"s{number:03d}.cls": f"{label}\n".encode()}
            if masks:
                members[f"s{number:03d}.mask.png"] = png((pixels[:, :, 0] // 64).astype(np.uint8))
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return path


def hf_dataset() -> Any:
    import datasets

    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=NAMES)})
    return datasets.Dataset.from_dict(
        {"image": [Image.fromarray(p) for p in IMAGES], "label": LABELS}, features=features
    )


def read_back(path: Path) -> tuple[list[np.ndarray], list[int | None]]:
    store = prepkit.open_store(path)
    samples = [store[i] for i in range(len(store))]
    return [s["image"] for s in samples], [s["label"] for s in samples]


def assert_same_samples(path: Path) -> None:
    images, labels = read_back(path)
    assert labels == LABELS
    assert len(images) == len(IMAGES)
    for stored, original in zip(images, IMAGES, strict=True):
        np.testing.assert_array_equal(stored, original)


def test_every_source_gives_the_same_samples(tmp_path: Path) -> None:
    sources: dict[str, Any] = {
        "list": list(zip(IMAGES, LABELS, strict=True)),
        "torch": TensorDataset(),
        "hf": hf_dataset(),
        "webdataset": prepkit.from_webdataset(write_tar(tmp_path / "data.tar")),
        "generator": ({"image": png(p), "label": label} for p, label in zip(IMAGES, LABELS, strict=True)),
        "pil": [(Image.fromarray(p), label) for p, label in zip(IMAGES, LABELS, strict=True)],
    }
    for name, samples in sources.items():
        summary = prepkit.write_store(tmp_path / name, samples, layout="lossless", samples_per_shard=2, progress=False)
        assert summary.num_samples == len(IMAGES) and not summary.failures, name
        assert_same_samples(tmp_path / name)
    for name in ("torch", "hf"):  # class names from ImageFolder-style `classes` and from ClassLabel
        assert prepkit.open_store(tmp_path / name).class_names == NAMES, name
    attributes = json.loads((tmp_path / "hf" / "zarr.json").read_text())["attributes"]["prepkit"]
    assert attributes["provenance"]["command"] == "write_store"
    assert attributes["provenance"]["options"]["alpha"] == "drop"


def test_shard_cli_takes_tars_and_hf_folders(tmp_path: Path) -> None:
    for number in range(2):  # two shards of the same samples: a brace pattern, and a list
        write_tar(tmp_path / f"part-{number:02d}.tar")
    runner = CliRunner()
    result = runner.invoke(cli, ["shard", str(tmp_path / "part-{00..01}.tar"), str(tmp_path / "braces"), "--layout", "raw", "--workers", "1"])
    assert result.exit_code == 0, result.output
    images, labels = read_back(tmp_path / "braces")
    assert labels == LABELS * 2 and all((a == b).all() for a, b in zip(images, IMAGES * 2, strict=True))
    result = runner.invoke(cli, ["shard", str(tmp_path / "part-00.tar"), str(tmp_path / "part-01.tar"), str(tmp_path / "list"),
                                 "--layout", "raw", "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert store_files(tmp_path / "list").keys() == store_files(tmp_path / "braces").keys()

    hf_dataset().save_to_disk(str(tmp_path / "hf"))
    result = runner.invoke(cli, ["shard", str(tmp_path / "hf"), str(tmp_path / "from_hf"), "--layout", "lossless", "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert_same_samples(tmp_path / "from_hf")
    assert prepkit.open_store(tmp_path / "from_hf").class_names == NAMES


def test_webdataset_masks_are_stored(tmp_path: Path) -> None:
    prepkit.write_store(tmp_path / "seg", prepkit.from_webdataset(write_tar(tmp_path / "seg.tar", masks=True)),
                        layout="raw", progress=False)
    store = prepkit.open_store(tmp_path / "seg")
    sample = store[1]
    np.testing.assert_array_equal(sample["mask"][:, :, 0], IMAGES[1][:, :, 0] // 64)


def test_store_is_byte_identical_whatever_the_workers(tmp_path: Path) -> None:
    made = {}
    for workers in (1, 2):
        prepkit.write_store(tmp_path / f"torch{workers}", TensorDataset(), layout="jpeg", samples_per_shard=2,
                            workers=workers, progress=False)
        made[f"torch{workers}"] = store_files(tmp_path / f"torch{workers}")
        samples = iter([(p, label) for p, label in zip(IMAGES, LABELS, strict=True)])
        prepkit.write_store(tmp_path / f"iter{workers}", samples, layout="jpeg", samples_per_shard=2,
                            workers=workers, progress=False)
        made[f"iter{workers}"] = store_files(tmp_path / f"iter{workers}")
    assert made["torch1"] == made["torch2"]
    assert made["iter1"] == made["iter2"]


def test_bad_samples_are_reported_by_index_and_reason(tmp_path: Path) -> None:
    samples = [
        (IMAGES[0], 1),
        (b"not an image", 0),
        (IMAGES[1].astype(np.float32), 0),
        {"image": IMAGES[2], "label": -3},
        {"picture": IMAGES[3]},
        (IMAGES[4], 2),
    ]
    summary = prepkit.write_store(tmp_path / "skip", samples, layout="raw", on_error="skip", progress=False)
    reasons = {f.item: f.reason for f in summary.failures}
    assert sorted(reasons) == [1, 2, 3, 4]
    assert "not a recognized image format" in reasons[1]
    assert "uint8" in reasons[2] and "float32" in reasons[2]
    assert "Got -3" in reasons[3]
    assert "'image' key" in reasons[4] and "picture" in reasons[4]
    images, labels = read_back(tmp_path / "skip")
    assert labels == [1, 2]
    np.testing.assert_array_equal(images[1], IMAGES[4])
    report = [json.loads(line) for line in (tmp_path / "skip" / "skipped.jsonl").read_text().splitlines()]
    assert [entry["item"] for entry in report] == [1, 2, 3, 4]

    with pytest.raises(IngestError, match="sample 1: not a recognized image format"):
        prepkit.write_store(tmp_path / "raise", samples, layout="raw", progress=False)
    with pytest.raises(prepkit.errors.StoreError):
        prepkit.open_store(tmp_path / "raise")


def test_unpicklable_dataset_is_refused_with_workers(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="Expected a picklable dataset to encode with workers=2"):
        prepkit.write_store(tmp_path / "x", Unpicklable(), layout="raw", workers=2, progress=False)
    prepkit.write_store(tmp_path / "one", Unpicklable(), layout="raw", workers=1, progress=False)
    assert_same_samples(tmp_path / "one")


class InterruptOnce(TensorDataset):
    """Raises KeyboardInterrupt the first time sample 3 is encoded (its second read:
    the first is the probe), as Ctrl-C in the middle of a run would."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker
        self.reads = 0

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if index == 3:
            self.reads += 1
            if self.reads == 2 and not self.marker.exists():
                self.marker.touch()
                raise KeyboardInterrupt
        return super().__getitem__(index)


def test_interrupted_write_resumes_to_an_identical_store(tmp_path: Path) -> None:
    (tmp_path / "never").touch()  # the same dataset class (recorded as the source), never interrupted
    prepkit.write_store(tmp_path / "clean", InterruptOnce(tmp_path / "never"), layout="raw", samples_per_shard=2, progress=False)
    with pytest.raises(KeyboardInterrupt):
        prepkit.write_store(tmp_path / "resumed", InterruptOnce(tmp_path / "marker"), layout="raw", samples_per_shard=2,
                            progress=False)
    summary = prepkit.write_store(tmp_path / "resumed", InterruptOnce(tmp_path / "marker"), layout="raw",
                                  samples_per_shard=2, progress=False)
    assert summary.num_shards_resumed == 1 and summary.num_shards_written == 2
    assert store_files(tmp_path / "clean") == store_files(tmp_path / "resumed")
    assert_same_samples(tmp_path / "resumed")


def test_empty_sources_are_errors_naming_them(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="Expected at least one sample. Got none"):
        prepkit.write_store(tmp_path / "a", [], layout="raw", progress=False)
    with pytest.raises(IngestError, match="Expected at least one sample. Got none"):
        prepkit.write_store(tmp_path / "b", iter([]), layout="raw", progress=False)
    with tarfile.open(tmp_path / "empty.tar", "w"):
        pass
    with pytest.raises(IngestError, match="empty.tar.*Expected WebDataset samples"):
        prepkit.from_webdataset(tmp_path / "empty.tar")

    runner = CliRunner()
    (tmp_path / "nothing").mkdir()
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "readme.txt").write_text("no images here")
    for folder in ("nothing", "texts", "empty.tar"):
        result = runner.invoke(cli, ["shard", str(tmp_path / folder), str(tmp_path / f"out-{folder}"), "--layout", "raw"])
        assert result.exit_code == 1, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and str(tmp_path / folder) in lines[0] and "Traceback" not in result.output, result.output
        assert not (tmp_path / f"out-{folder}" / "zarr.json").exists()


def test_alpha_option_on_the_command_line_and_in_provenance(tmp_path: Path) -> None:
    rgba = np.dstack([IMAGES[0], np.zeros(IMAGES[0].shape[:2], np.uint8)])  # fully transparent
    Image.fromarray(rgba, "RGBA").save((tmp_path / "src").mkdir() or tmp_path / "src" / "a.png")
    runner = CliRunner()
    for name, extra, expected in (
        ("dropped", [], IMAGES[0]),
        ("white", ["--alpha", "composite", "--background", "255,255,255"], np.full_like(IMAGES[0], 255)),
    ):
        result = runner.invoke(cli, ["shard", str(tmp_path / "src"), str(tmp_path / name), "--layout", "raw", "--workers", "1", *extra])
        assert result.exit_code == 0, result.output
        np.testing.assert_array_equal(prepkit.open_store(tmp_path / name)[0]["image"], expected)
    options = json.loads((tmp_path / "white" / "zarr.json").read_text())["attributes"]["prepkit"]["provenance"]["options"]
    assert options["alpha"] == "composite" and options["background"] == [255, 255, 255]
    result = runner.invoke(cli, ["shard", str(tmp_path / "src"), str(tmp_path / "bad"), "--layout", "raw", "--background", "300"])
    assert result.exit_code == 2 and "background" in result.output


CAPTIONS = ["an ant", "a bee", "", "a cat", "ant again"]
BOXES = [np.arange(4 * n, dtype=np.float32).reshape(n, 4) for n in (2, 0, 1, 3, 1)]


def test_extra_fields_from_dict_samples_and_hf_columns(tmp_path: Path) -> None:
    import datasets

    rows = [{"image": p, "label": label, "caption": c, "boxes": b, "score": 0.5 * n}
            for n, (p, label, c, b) in enumerate(zip(IMAGES, LABELS, CAPTIONS, BOXES, strict=True))]
    fields = ("caption", "boxes:float32[*,4]", "score:float")
    prepkit.write_store(tmp_path / "list", rows, samples_per_shard=2, fields=fields, progress=False)
    hf = datasets.Dataset.from_dict({"image": [Image.fromarray(p) for p in IMAGES], "label": LABELS,
                                     "caption": CAPTIONS, "boxes": [b.tolist() for b in BOXES],
                                     "score": [0.5 * n for n in range(len(IMAGES))], "unused": list(range(5))})
    prepkit.write_store(tmp_path / "hf", hf, samples_per_shard=2, fields=fields, progress=False)
    for name in ("list", "hf"):
        store = prepkit.open_store(tmp_path / name)
        assert sorted(store.extra_fields) == ["boxes", "caption", "score"], name
        for i in range(len(IMAGES)):
            sample = store[i]
            assert sample["caption"] == CAPTIONS[i], name
            assert sample["score"] == 0.5 * i, name
            assert sample["boxes"].dtype == np.float32 and sample["boxes"].shape == BOXES[i].shape, name
            np.testing.assert_array_equal(sample["boxes"], BOXES[i])
            np.testing.assert_array_equal(sample["image"], IMAGES[i])


def test_extra_field_errors_name_the_sample(tmp_path: Path) -> None:
    rows: list[Any] = [{"image": p, "label": 0, "score": 1.0} for p in IMAGES]
    rows[2] = {"image": IMAGES[2], "label": 0}  # no score
    rows[3] = {"image": IMAGES[3], "label": 0, "score": "high"}  # not a number
    summary = prepkit.write_store(tmp_path / "skip", rows, fields=("score:float",), on_error="skip", progress=False)
    assert [f.item for f in summary.failures] == [2, 3]
    reasons = {f.item: f.reason for f in summary.failures}
    assert "score" in reasons[2] and "score" in reasons[3]
    assert len(prepkit.open_store(tmp_path / "skip")) == 3
    with pytest.raises(IngestError, match="sample 0"):  # the first sample decides the schema
        prepkit.write_store(tmp_path / "tuple", list(zip(IMAGES, LABELS, strict=True)), fields=("score",), progress=False)
