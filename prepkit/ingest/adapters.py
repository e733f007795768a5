"""Adapters from the places users keep data to :class:`~prepkit.ingest.samples.SampleSource`.

- :func:`from_torch`: a torch map-style ``Dataset`` (read by index; ``classes`` kept as
  class names, as torchvision's ImageFolder has them);
- :func:`from_hf`: a Hugging Face ``datasets.Dataset``; ``Image`` columns are read
  undecoded (the encoded bytes), so they are decoded as the same files would be;
  ``ClassLabel`` names become class names;
- :func:`from_webdataset`: WebDataset ``.tar`` shards, read with :mod:`tarfile` (no
  ``webdataset`` package): members grouped by key (the name up to its first dot), the image
  from ``.jpg``/``.jpeg``/``.png``/``.webp`` (or another image extension), the label from
  ``.cls``, the mask from ``.mask.png``-style members (``mask.*`` or ``seg.*``).
"""

from __future__ import annotations

import os
import re
import tarfile
from collections.abc import Sequence
from typing import Any

from prepkit.errors import IngestError
from prepkit.ingest.samples import Keys, SampleSource, is_indexed
from prepkit.ingest.sources import IMAGE_EXTENSIONS

# Image members of a WebDataset sample, in the order one is chosen when a sample has several.
_PREFERRED = ("jpg", "jpeg", "png", "webp")
WDS_IMAGE_EXTENSIONS = _PREFERRED + tuple(e.lstrip(".") for e in IMAGE_EXTENSIONS if e.lstrip(".") not in _PREFERRED)
_MASK_PREFIXES = ("mask.", "seg.")


def _is_hf_dataset(value: Any) -> bool:
    return type(value).__module__.split(".")[0] == "datasets" and type(value).__name__ == "Dataset"


def _is_torch_dataset(value: Any) -> bool:
    return any(cls.__module__.startswith("torch.utils.data") and cls.__name__ == "Dataset" for cls in type(value).__mro__)


def as_source(samples: Any, keys: Keys) -> SampleSource:
    """Whatever :func:`prepkit.write_store` was given, as a SampleSource."""
    if isinstance(samples, SampleSource):
        return samples
    if isinstance(samples, (str, bytes)) or not hasattr(samples, "__iter__") and not is_indexed(samples):
        raise IngestError(f"samples: Expected a dataset, an iterable of samples or a source path. Got {type(samples).__name__}.")
    if type(samples).__name__ in ("DatasetDict", "IterableDatasetDict"):
        raise IngestError(f"samples: Expected one split of the Hugging Face DatasetDict. Got the splits {sorted(samples)}.")
    if _is_hf_dataset(samples):
        return from_hf(samples, image_key=keys.image, label_key=keys.label, mask_key=keys.mask, extra_keys=keys.extras)
    if _is_torch_dataset(samples) and is_indexed(samples):
        source = from_torch(samples)
        source.keys = keys
        return source
    return SampleSource(samples, description=f"python:{type(samples).__name__}", keys=keys)


def from_torch(dataset: Any) -> SampleSource:
    """A torch map-style ``Dataset`` returning ``(image, label)`` (or dicts): read by index.
    Its ``classes`` attribute (a list of names, as ImageFolder's) becomes the class names."""
    classes = getattr(dataset, "classes", None)
    names = [str(c) for c in classes] if isinstance(classes, (list, tuple)) and all(isinstance(c, str) for c in classes) else None
    return SampleSource(dataset, class_names=names or None, description=f"torch:{type(dataset).__module__}.{type(dataset).__name__}")


class HFRows:
    """Rows of a Hugging Face dataset as sample dicts (picklable: arrow tables pickle by
    reference to their files)."""

    def __init__(self, dataset: Any, keys: Keys) -> None:
        self.dataset = dataset
        self.keys = keys

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        row = self.dataset[int(index)]
        label = row.get(self.keys.label)
        if isinstance(label, int) and label < 0:  # ClassLabel's "no label" (-1)
            row[self.keys.label] = None
        return row


def from_hf(dataset: Any, *, image_key: str = "image", label_key: str = "label", mask_key: str = "mask",
            extra_keys: Sequence[str] = ()) -> SampleSource:
    """A Hugging Face ``datasets.Dataset``: columns ``image_key`` (required), ``label_key``
    and ``mask_key`` (used when present), and ``extra_keys`` (stored as extra fields when
    :func:`prepkit.write_store` is given ``fields``). Other columns are not read."""
    import datasets

    columns = list(dataset.column_names)
    if image_key not in columns:
        raise IngestError(f"Hugging Face dataset: Expected an image column {image_key!r}. Got columns {columns}.")
    missing = [c for c in extra_keys if c not in columns]
    if missing:
        raise IngestError(f"Hugging Face dataset: Expected the field columns {list(extra_keys)}. Got columns {columns}.")
    wanted = [c for c in (image_key, label_key, mask_key) if c in columns] + [c for c in extra_keys if c not in (image_key, label_key, mask_key)]
    dataset = dataset.select_columns(wanted)
    for column in (image_key, mask_key):
        if column in wanted and isinstance(dataset.features[column], datasets.Image):
            dataset = dataset.cast_column(column, datasets.Image(decode=False))
    keys = Keys(image=image_key, label=label_key, mask=mask_key, extras=tuple(extra_keys))
    label = dataset.features.get(label_key)
    names = list(label.names) if isinstance(label, datasets.ClassLabel) else None
    info = getattr(dataset, "info", None)
    name = getattr(info, "dataset_name", None) or getattr(dataset, "_fingerprint", "")
    return SampleSource(
        HFRows(dataset, keys), class_names=names, description=f"hf:{name}", keys=keys,
    )


def expand_braces(pattern: str) -> list[str]:
    """``data-{000..002}.tar`` -> ``data-000.tar``, ``data-001.tar``, ``data-002.tar``;
    ``{a,b}`` lists alternatives; several groups multiply (as WebDataset's shard URLs)."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, body, tail = pattern[: match.start()], match.group(1), pattern[match.end():]
    span = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if span:
        first, last = span.group(1), span.group(2)
        width = len(first) if first.startswith("0") else 0
        step = 1 if int(last) >= int(first) else -1
        options = [str(n).zfill(width) for n in range(int(first), int(last) + step, step)]
    else:
        options = body.split(",")
    return [path for option in options for path in expand_braces(head + option + tail)]


class TarSamples:
    """WebDataset shards indexed once (member offsets), then read by index: each worker
    opens the tar files itself, so the object pickles small."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = [os.fspath(p) for p in paths]
        # Per sample: (tar index, key, {extension: (offset, size)}).
        self.entries: list[tuple[int, str, dict[str, tuple[int, int]]]] = []
        self.ignored: list[tuple[str, str]] = []
        self._handles: dict[int, Any] = {}
        for number, path in enumerate(self.paths):
            self._index(number, path)

    def _index(self, number: int, path: str) -> None:
        groups: dict[str, dict[str, tuple[int, int]]] = {}
        try:
            with tarfile.open(path, "r:") as archive:
                for member in archive:
                    if not member.isfile():
                        continue
                    folder, _, base = member.name.rpartition("/")
                    stem, dot, extension = base.partition(".")
                    if not dot:
                        self.ignored.append((f"{path}:{member.name}", "no extension (WebDataset members are KEY.EXT)"))
                        continue
                    key = f"{folder}/{stem}" if folder else stem
                    groups.setdefault(key, {})[extension.lower()] = (member.offset_data, member.size)
        except FileNotFoundError:
            raise IngestError(f"source {path!r} does not exist") from None
        except tarfile.ReadError as error:
            raise IngestError(f"{path}: Expected an uncompressed tar file (WebDataset shard). Got {error}.") from None
        for key, members in groups.items():
            if any(ext in members for ext in WDS_IMAGE_EXTENSIONS):
                self.entries.append((number, key, members))
            else:
                self.ignored.append((f"{path}:{key}", f"no image member ({', '.join('.' + e for e in _PREFERRED)}, ...)"))

    def __len__(self) -> int:
        return len(self.entries)

    def _read(self, number: int, span: tuple[int, int]) -> bytes:
        handle = self._handles.get(number)
        if handle is None:
            handle = self._handles[number] = open(self.paths[number], "rb")
        handle.seek(span[0])
        return bytes(handle.read(span[1]))

    def __getitem__(self, index: int) -> dict[str, Any]:
        number, key, members = self.entries[index]
        image_ext = next(ext for ext in WDS_IMAGE_EXTENSIONS if ext in members)
        sample: dict[str, Any] = {"__key__": key, "image": self._read(number, members[image_ext])}
        mask_ext = next((ext for ext in members if ext.startswith(_MASK_PREFIXES) and ext.partition(".")[2] in WDS_IMAGE_EXTENSIONS), None)
        if mask_ext is not None:
            sample["mask"] = self._read(number, members[mask_ext])
        if "cls" in members:
            text = self._read(number, members["cls"]).decode("utf-8", "replace").strip()
            if not text.isdigit():
                raise IngestError(f"sample {index} ({key}): Expected an integer class index in {key}.cls. Got {text!r}.")
            sample["label"] = int(text)
        return sample

    def __getstate__(self) -> dict[str, Any]:
        return {"paths": self.paths, "entries": self.entries, "ignored": self.ignored}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._handles = {}


def from_webdataset(shards: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> SampleSource:
    """WebDataset tar shards: one path, a list, or a brace pattern (``data-{000..009}.tar``)."""
    if isinstance(shards, (str, os.PathLike)):
        paths = expand_braces(os.fspath(shards))
    else:
        paths = [p for shard in shards for p in expand_braces(os.fspath(shard))]
    if not paths:
        raise IngestError("WebDataset: Expected at least one tar shard. Got none.")
    tars = TarSamples(paths)
    where = paths[0] if len(paths) == 1 else f"{paths[0]} ... {paths[-1]} ({len(paths)} shards)"
    if not len(tars):
        raise IngestError(f"source {where!r}: Expected WebDataset samples with an image member "
                          f"({', '.join('.' + e for e in _PREFERRED)}, ...). Got none ({len(tars.ignored)} other entries).")
    return SampleSource(tars, description="webdataset:" + ",".join(os.path.abspath(p) for p in paths), ignored=list(tars.ignored))


def _hf_folder_kind(path: str) -> str | None:
    if os.path.isfile(os.path.join(path, "dataset_dict.json")):
        return "dict"
    if os.path.isfile(os.path.join(path, "state.json")) and os.path.isfile(os.path.join(path, "dataset_info.json")):
        return "dataset"
    return None


def open_dataset_source(src: str | os.PathLike[str] | Sequence[str], keys: Keys) -> SampleSource | None:
    """A SampleSource for a ``prepkit shard`` SRC that is tar shards or a Hugging Face
    dataset folder; None for an image folder or manifest (listed as files)."""
    sources = [os.fspath(src)] if isinstance(src, (str, os.PathLike)) else [os.fspath(s) for s in src]
    expanded = [p for s in sources for p in (expand_braces(s) if not os.path.exists(s) else [s])]
    if len(expanded) == 1 and os.path.isdir(expanded[0]):
        kind = _hf_folder_kind(expanded[0])
        if kind is None:
            return None
        import datasets

        if kind == "dict":
            loaded = datasets.load_from_disk(expanded[0])
            raise IngestError(f"source {expanded[0]!r}: Expected one split of a Hugging Face DatasetDict. Got the "
                              f"splits {sorted(loaded)}: pass {os.path.join(expanded[0], sorted(loaded)[0])}.")
        dataset = datasets.load_from_disk(expanded[0])
        if len(dataset) == 0:
            raise IngestError(f"source {expanded[0]!r}: Expected at least one row. Got an empty Hugging Face dataset.")
        source = from_hf(dataset, image_key=keys.image, label_key=keys.label, mask_key=keys.mask, extra_keys=keys.extras)
        source.description = "hf:" + os.path.abspath(expanded[0])
        return source
    if len(expanded) == 1 and not expanded[0].lower().endswith(".tar"):
        return None
    bad = [p for p in expanded if not p.lower().endswith(".tar")]
    if bad:
        raise IngestError(f"source {bad[0]!r}: Expected .tar shards (several sources must all be WebDataset tars). Got {bad[0]!r}.")
    return from_webdataset(expanded)

