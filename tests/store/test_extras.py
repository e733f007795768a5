"""Extra per-sample fields: manifests -> store -> store[i], Reader batches, zarr-python, verify, convert."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import prepkit
from prepkit.cli import _register, cli
from prepkit.errors import IngestError, StoreCorruptError
from prepkit.ingest.build import build_store, items_digest
from prepkit.ingest.images import ImageOptions
from prepkit.ingest.sources import list_source
from prepkit.layouts import JpegLayout, RawLayout
from prepkit.store.convert import convert_store
from prepkit.store.extras import Declaration, FieldSpec, FieldValueError, infer_schema, normalize, sample_extras
from prepkit.store.verify import verify_store
from prepkit.store.writer import EncodedSample, plan_store, write_all
from tests.conftest import smooth_image, write_image

_register()

COUNT = 7
FIELDS = ["score", "n", "boxes:float32[*,4]", "caption", "blob:bytes", "emb:int16[3]", "tags:array"]


def expected_row(i: int) -> dict[str, Any]:
    """Sample i's extra values: ragged lengths 0..3, a non-ASCII caption, bytes with NULs."""
    return {
        "score": i * 0.25 - 1.0,
        "n": 10**12 + i,
        "boxes": [[i, j, i + j + 0.5, 2 * j] for j in range(i % 4)],
        "caption": "café " * (i % 3) + f"#{i}",
        "blob": bytes([0, i, 255]) * (i % 2),
        "emb": [i, -i, 300],
        "tags": list(range(i % 3)),
    }


def write_dataset(folder: Path, suffix: str = ".jsonl", extra_columns: dict[str, Any] | None = None) -> Path:
    rows = []
    for i in range(COUNT):
        write_image(folder / f"{i}.png", smooth_image(6 + i, 5, seed=i))
        row: dict[str, Any] = {"path": f"{i}.png", "label": i % 3, **expected_row(i), **(extra_columns or {})}
        row["blob"] = base64.b64encode(row["blob"]).decode()  # manifests hold bytes as base64
        rows.append(row)
    manifest = folder / f"m{suffix}"
    if suffix == ".jsonl":
        manifest.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    else:
        header = list(rows[0])
        lines = [",".join(header)]
        for row in rows:
            cells = [json.dumps(row[k]) if isinstance(row[k], list) else str(row[k]) for k in header]
            lines.append(",".join('"' + c.replace('"', '""') + '"' for c in cells))
        manifest.write_text("\n".join(lines) + "\n")
    return manifest


def shard(manifest: Path, dest: Path, fields: list[str] = FIELDS, **kw: Any) -> Path:
    build_store(str(manifest), str(dest), layout=kw.pop("layout", RawLayout()), options=ImageOptions(),
                samples_per_shard=3, workers=1, fields=fields, **kw)
    return dest


def check_sample(sample: dict[str, Any], i: int) -> None:
    want = expected_row(i)
    assert sample["label"] == i % 3
    assert sample["score"] == want["score"] and isinstance(sample["score"], float)
    assert sample["n"] == want["n"] and isinstance(sample["n"], int)
    assert sample["caption"] == want["caption"] and sample["blob"] == want["blob"]
    np.testing.assert_array_equal(sample["boxes"], np.array(want["boxes"], np.float32).reshape(-1, 4))
    assert sample["boxes"].dtype == np.float32
    np.testing.assert_array_equal(sample["emb"], np.array(want["emb"], np.int16))
    assert sample["emb"].dtype == np.int16 and sample["tags"].dtype == np.int64
    np.testing.assert_array_equal(sample["tags"], want["tags"])


@pytest.fixture
def extras_store(tmp_path: Path) -> Path:
    return shard(write_dataset(tmp_path / "src"), tmp_path / "s")


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_manifest_fields_round_trip_through_store(tmp_path: Path, suffix: str) -> None:
    dest = shard(write_dataset(tmp_path / "src", suffix), tmp_path / "s")
    store = prepkit.open_store(dest)
    assert {name: str(spec) for name, spec in store.extra_fields.items()} == {
        "score": "float", "n": "int", "boxes": "float32[*,4]", "caption": "string", "blob": "bytes",
        "emb": "int16[3]", "tags": "int64[*]",
    }
    for i in range(COUNT):
        check_sample(store[i], i)
    assert store.extra(-1, "caption") == expected_row(COUNT - 1)["caption"]
    with pytest.raises(KeyError, match="'nope'"):
        store.extra(0, "nope")


def test_reader_batches_fixed_stacked_ragged_listed_or_padded(extras_store: Path) -> None:
    reader = prepkit.Reader(extras_store, batch_size=4, shuffle=True, seed=1, fields=("image", "label", *[f.split(":")[0] for f in FIELDS]),
                            pad_fields={"boxes": -1})
    seen = []
    for batch in reader:
        rows = [expected_row(i) for i in batch.indices.tolist()]
        seen += batch.indices.tolist()
        np.testing.assert_array_equal(batch.extras["score"], [r["score"] for r in rows])
        assert batch.extras["score"].dtype == np.float64 and batch.extras["emb"].shape == (len(batch), 3)
        np.testing.assert_array_equal(batch.extras["n"], [r["n"] for r in rows])
        assert batch.extras["caption"] == [r["caption"] for r in rows]
        assert batch.extras["blob"] == [r["blob"] for r in rows]
        assert [t.tolist() for t in batch.extras["tags"]] == [r["tags"] for r in rows]
        boxes, lengths = batch.extras["boxes"], batch.lengths["boxes"]
        assert lengths.tolist() == [len(r["boxes"]) for r in rows]
        assert boxes.shape == (len(batch), max(lengths), 4) and boxes.dtype == np.float32
        for box, row, k in zip(boxes, rows, lengths.tolist(), strict=True):
            np.testing.assert_array_equal(box[:k], np.array(row["boxes"], np.float32).reshape(-1, 4))
            assert (box[k:] == -1).all()
        assert "tags" not in batch.lengths
    assert sorted(seen) == list(range(COUNT))


def test_reader_extras_as_torch(extras_store: Path) -> None:
    torch = pytest.importorskip("torch")
    batch = next(iter(prepkit.Reader(extras_store, batch_size=3, shuffle=False, fields=("image", "score", "tags", "caption"),
                                     output="torch")))
    assert isinstance(batch.extras["score"], torch.Tensor) and batch.extras["score"].tolist() == [-1.0, -0.75, -0.5]
    assert [t.tolist() for t in batch.extras["tags"]] == [[], [0], [0, 1]]
    assert batch.extras["caption"] == [expected_row(i)["caption"] for i in range(3)]


def test_reader_refuses_unknown_fields_and_bad_padding(extras_store: Path) -> None:
    with pytest.raises(ValueError, match=r"Got \['nope'\]"):
        prepkit.Reader(extras_store, batch_size=2, fields=("image", "nope"))
    with pytest.raises(ValueError, match="variable-length array field. Got a int16\\[3\\] field"):
        prepkit.Reader(extras_store, batch_size=2, fields=("image", "emb"), pad_fields={"emb": 0})
    with pytest.raises(ValueError, match="pad_fields\\['tags'\\]: Expected integers"):
        prepkit.Reader(extras_store, batch_size=2, fields=("image", "tags"), pad_fields={"tags": 0.5})
    with pytest.raises(ValueError, match="Expected names of extra fields in fields"):
        prepkit.Reader(extras_store, batch_size=2, fields=("image",), pad_fields={"boxes": 0})


PLAIN_ZARR = r"""
import sys, json, numpy as np, zarr
assert "prepkit" not in sys.modules
g = zarr.open_group(sys.argv[1], mode="r")
schema = g.attrs["prepkit"]["extras"]
out = {}
for name, spec in schema.items():
    values = g[f"extras/{name}/values"][...]
    if spec["shape"] and spec["shape"][0] is None:
        ranges = g[f"extras/{name}/ranges"][...]
        items = [values[int(a):int(b)] for a, b in ranges]
        if spec["kind"] == "string":
            items = [v.tobytes().decode("utf-8") for v in items]
        elif spec["kind"] == "bytes":
            items = [v.tobytes().hex() for v in items]
        else:
            items = [v.tolist() for v in items]
    else:
        items = values.tolist()
    out[name] = {"dtype": str(values.dtype), "items": items}
assert "prepkit" not in sys.modules
print(json.dumps(out))
"""


def test_plain_zarr_reads_every_extra_array(extras_store: Path) -> None:
    result = subprocess.run([sys.executable, "-c", PLAIN_ZARR, str(extras_store)], capture_output=True, text=True, check=True)
    out = json.loads(result.stdout)
    rows = [expected_row(i) for i in range(COUNT)]
    assert out["caption"]["items"] == [r["caption"] for r in rows]
    assert out["blob"]["items"] == [r["blob"].hex() for r in rows]
    assert out["boxes"] == {"dtype": "float32", "items": [r["boxes"] for r in rows]}
    assert out["emb"] == {"dtype": "int16", "items": [r["emb"] for r in rows]}
    assert out["n"] == {"dtype": "int64", "items": [r["n"] for r in rows]}
    assert out["score"]["items"] == [r["score"] for r in rows] and out["tags"]["items"] == [r["tags"] for r in rows]


@pytest.mark.parametrize("array", ["extras/caption/values", "extras/boxes/ranges", "extras/emb/values"])
def test_flipped_byte_in_an_extra_array_is_caught(extras_store: Path, array: str) -> None:
    chunk = extras_store / array / "c" / ("0/0" if array.endswith(("ranges", "emb/values")) else "0")
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x10
    chunk.write_bytes(bytes(data))
    report = verify_store(extras_store)
    assert not report.ok and any(array in str(p) for p in report.problems), report.problems
    with pytest.raises(StoreCorruptError, match=array):
        prepkit.open_store(extras_store)


def test_schema_change_in_attributes_is_caught(extras_store: Path) -> None:
    meta_path = extras_store / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["attributes"]["prepkit"]["extras"]["emb"]["dtype"] = "int32"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(StoreCorruptError, match="checksum"):
        prepkit.open_store(extras_store)


def test_convert_keeps_extra_fields(extras_store: Path, tmp_path: Path) -> None:
    convert_store(str(extras_store), str(tmp_path / "j"), layout=JpegLayout(), samples_per_shard=2, workers=1, overwrite=False)
    converted = prepkit.open_store(tmp_path / "j")
    assert converted.layout == "jpeg" and converted.extra_fields == prepkit.open_store(extras_store).extra_fields
    for i in range(COUNT):
        check_sample(converted[i], i)
    assert verify_store(tmp_path / "j").ok


def test_inspect_lists_extra_fields(extras_store: Path) -> None:
    result = CliRunner().invoke(cli, ["inspect", str(extras_store)])
    assert result.exit_code == 0, result.output
    assert "boxes        extra float32[*,4], 0..3 rows" in result.output
    assert "caption      extra string" in result.output and "emb          extra int16[3]" in result.output


def test_cli_field_option_and_no_extras_without_it(tmp_path: Path) -> None:
    manifest = write_dataset(tmp_path / "src", ".csv")
    result = CliRunner().invoke(cli, ["shard", str(manifest), str(tmp_path / "s"), "--layout", "raw", "--workers", "1",
                                      "--field", "caption:string", "--field", "boxes:float32[*,4]"])
    assert result.exit_code == 0, result.output
    store = prepkit.open_store(tmp_path / "s")
    assert list(store.extra_fields) == ["caption", "boxes"]
    assert store[3]["caption"] == expected_row(3)["caption"]
    # Without --field: no extras group, no attribute (stores stay as before), one warning.
    with pytest.warns(UserWarning, match="'score', 'n', 'boxes', 'caption', 'blob', 'emb', 'tags' are not stored") as caught:
        shard(manifest, tmp_path / "plain", fields=[])
    assert len([w for w in caught if "not stored" in str(w.message)]) == 1
    assert not (tmp_path / "plain" / "extras").exists()
    assert "extras" not in json.loads((tmp_path / "plain" / "zarr.json").read_text())["attributes"]["prepkit"]
    assert prepkit.open_store(tmp_path / "plain").extra_fields == {}


def test_declared_fields_leave_only_undeclared_columns_in_the_warning(tmp_path: Path) -> None:
    manifest = write_dataset(tmp_path / "src", extra_columns={"split": "train"})
    with pytest.warns(UserWarning, match=r"column\(s\) 'split' are not stored"):
        shard(manifest, tmp_path / "s")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list_source(manifest, [*FIELDS, "split"])


def bad_manifest(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    for row in rows:
        write_image(tmp_path / row["path"], smooth_image(4, 4))
    manifest = tmp_path / "bad.jsonl"
    manifest.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return manifest


@pytest.mark.parametrize(("values", "declared", "message"), [
    ([1, 2, "x"], "v", r"line 3: column 'v': Expected an integer \(int64\). Got 'x'."),
    ([1.5, 2, None], "v", r"line 3: column 'v': Expected a value. Got none."),
    ([[1, 2], [3]], "v:int64[2]", r"line 2: column 'v': Expected an array of shape int64\[2\]. Got shape \[1\]."),
    ([[[1, 2, 3, 4]], [[1, 2]]], "v:float32[*,4]", r"line 2: column 'v': Expected an array of shape float32\[\*,4\]"),
    ([[1, 2], [1, [2]]], "v", r"line 2: column 'v': Expected a rectangular array of numbers"),
    ([300, 1], "v:int8", r"line 1: column 'v': Expected an integer in \[-128, 127\] \(int8\). Got 300."),
    ([[1.5], [2]], "v:int32[*]", r"line 1: column 'v': Expected integers \(int32\)"),
    (["a", 3], "v:string", r"line 2: column 'v': Expected a string. Got 3."),
    (["%%%", "AA=="], "v:bytes", r"line 1: column 'v': Expected base64 text for bytes"),
    ([True, 1], "v", r"line 1: column 'v': Expected a number, a numeric array, a string or bytes. Got the boolean True."),
])
def test_bad_values_name_the_line_and_column(tmp_path: Path, values: list[Any], declared: str, message: str) -> None:
    manifest = bad_manifest(tmp_path, [{"path": f"{i}.png", **({} if v is None else {"v": v})} for i, v in enumerate(values)])
    with pytest.raises(IngestError, match=message) as caught:
        shard(manifest, tmp_path / "s", fields=[declared])
    assert str(manifest) in str(caught.value)
    assert not (tmp_path / "s").exists()  # refused before anything is written


def test_bad_declarations_and_missing_columns(tmp_path: Path) -> None:
    manifest = bad_manifest(tmp_path, [{"path": "0.png", "v": 1}])
    for declared, message in [("label", "other than the built-in names"), ("v:complex", "Expected a kind among"),
                              ("v:int8[*,*]", "only the first may be"), ("2v", "a letter then")]:
        with pytest.raises(IngestError, match=message):
            list_source(manifest, [declared])
    with pytest.raises(IngestError, match=r"Expected the declared field column\(s\) \['w'\]"):
        list_source(manifest, ["w"])
    with pytest.raises(IngestError, match="Expected each field declared once"):
        list_source(manifest, ["v", "v:int"])
    with pytest.raises(IngestError, match="Expected a manifest for extra fields"):
        list_source(tmp_path, ["v"])


def test_items_digest_covers_extra_values(tmp_path: Path) -> None:
    manifest = bad_manifest(tmp_path, [{"path": "0.png", "v": 1}, {"path": "1.png", "v": 2}])
    first = items_digest(list_source(manifest, ["v"]).items)
    manifest.write_text(manifest.read_text().replace('"v": 2', '"v": 3'))
    assert items_digest(list_source(manifest, ["v"]).items) != first  # a resumed run starts over


def test_writer_takes_extras_from_python_samples(tmp_path: Path) -> None:
    """The writer side the Python API uses: a schema inferred from the first sample, values
    normalised per sample, a sample that disagrees refused naming it."""
    samples = [{"target": np.array([i, i + 1], np.float32), "id": f"s{i}", "w": [i] * 3} for i in range(4)]
    schema = infer_schema(samples[0], {"w": "uint8[3]"})
    assert schema == {"target": FieldSpec("array", "float32", (None,)), "id": FieldSpec("string", "uint8", (None,)),
                      "w": FieldSpec("array", "uint8", (3,))}
    layout = RawLayout()
    image = smooth_image(4, 5)

    def job(i: int) -> EncodedSample:
        return EncodedSample(i, f"{i}", None, {"image": (layout.encode(image), (4, 5, 3))},
                             extras=sample_extras(schema, samples[i], f"sample {i}"))

    plan = plan_store({"image": layout}, {"image": [(4, 5, 3)] * 4}, 3, class_names=None, provenance={}, items_digest="x",
                      extras=schema)
    write_all(tmp_path / "s", plan, job)
    store = prepkit.open_store(tmp_path / "s")
    assert [store[i]["id"] for i in range(4)] == ["s0", "s1", "s2", "s3"]
    np.testing.assert_array_equal(store[2]["target"], [2, 3])
    np.testing.assert_array_equal(store[3]["w"], [3, 3, 3])
    with pytest.raises(IngestError, match=r"sample 9: field 'id': Expected a string. Got 5."):
        sample_extras(schema, {**samples[0], "id": 5}, "sample 9")
    with pytest.raises(IngestError, match=r"sample 9: Expected only the fields of the first sample .* Got also \['x'\]"):
        sample_extras(schema, {**samples[0], "x": 1}, "sample 9")
    with pytest.raises(FieldValueError, match="field 'e' of the first sample: Expected a non-empty first array"):
        infer_schema({"e": []})
    with pytest.raises(FieldValueError, match="Expected an array of shape float32\\[2\\]"):
        normalize(Declaration.parse("v:float32[2]").resolve(None), np.zeros(3))
    with pytest.raises(IngestError, match="3: extra field 'id': Expected a value. Got none."):
        write_all(tmp_path / "t", plan, lambda i: EncodedSample(i, f"{i}", None, job(i).fields,
                                                                 extras=job(i).extras if i < 3 else {"target": job(i).extras["target"]}))
