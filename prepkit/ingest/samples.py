"""Samples held in Python (datasets, lists, generators) as items the store writer encodes.

A sample is a dict (``{"image": ..., "label": ..., "mask": ...}``, key names configurable),
a tuple (``(image,)``, ``(image, label)``, ``(image, mask)``, ``(image, label, mask)``: an
integer is the label, an image-like value the mask) or a bare image. An image is:

- encoded bytes (PNG, JPEG, WebP, ...): decoded exactly as a file with those bytes is
  (EXIF orientation applied);
- a file path (``str`` or ``os.PathLike``): read as ``prepkit shard`` reads it;
- pixels already decoded: a PIL image, a uint8 numpy array (H x W, or H x W x C with C in
  1..4, read as L/LA/RGB/RGBA) or a uint8 torch tensor (C x H x W, as torchvision holds
  images); stored as given, no EXIF orientation applied.

An indexed dataset (``__len__`` and ``__getitem__``) is read by index, in worker processes
when ``workers > 1``. A plain iterable is read once, in order, into a :class:`Spool` (a
temporary file of pickled samples) that is then read by index the same way, so both paths
run the same probe and encode jobs and the store is byte-identical whatever the workers.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image

from prepkit.errors import IngestError, PrepkitError
from prepkit.ingest.images import (
    ImageOptions,
    load_image,
    load_image_bytes,
    load_mask,
    load_mask_pixels,
    load_pixels,
    pil_from_array,
    probe_size,
    stored_shape,
)
from prepkit.ingest.sources import MAX_LABEL
from prepkit.layouts import Layout
from prepkit.store.extras import FieldSpec, sample_extras
from prepkit.store.writer import EncodedSample, SampleFailure

Shape = tuple[int, int, int]


@dataclass(frozen=True)
class Keys:
    """The dict keys (Hugging Face: column names) of a sample's image, label and mask."""

    image: str = "image"
    label: str = "label"
    mask: str = "mask"
    extras: tuple[str, ...] = ()  # keys stored as extra per-sample fields (dict samples only)


@dataclass
class SampleSource:
    """Samples and what is known about them: an indexed dataset or a plain iterable, the
    class names (label ``k`` is ``class_names[k]``), a description recorded as the store's
    provenance ``source``, and entries of the source that are not samples (reported in
    ``skipped.jsonl``, as non-image files of a folder are)."""

    samples: Any
    class_names: list[str] | None = None
    description: str = ""
    keys: Keys = field(default_factory=Keys)
    ignored: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Parts:
    """One sample taken apart: image, optional mask, label (None: no label), key."""

    image: Any
    mask: Any = None
    label: int | None = None
    key: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)  # values of Keys.extras, as given


def is_indexed(samples: Any) -> bool:
    return hasattr(samples, "__len__") and hasattr(samples, "__getitem__") and not isinstance(samples, (str, bytes, Mapping))


def _is_tensor(value: Any) -> bool:
    return type(value).__module__.split(".")[0] == "torch" and hasattr(value, "numpy")


def _is_image_like(value: Any) -> bool:
    if isinstance(value, (bytes, bytearray, memoryview, str, os.PathLike, Image.Image)):
        return True
    if isinstance(value, np.ndarray) or _is_tensor(value):
        return value.ndim >= 2
    return isinstance(value, Mapping) and ("bytes" in value or "path" in value)


def _label(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if _is_tensor(value) or isinstance(value, np.ndarray):
        if int(np.prod(value.shape)) != 1:
            raise IngestError(f"{where}: Expected one integer label. Got an array of shape {tuple(value.shape)}.")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise IngestError(f"{where}: Expected an integer label or None. Got {type(value).__name__} {value!r}.")
    if not 0 <= int(value) <= MAX_LABEL:
        raise IngestError(f"{where}: Expected a label in [0, {MAX_LABEL}]. Got {int(value)}.")
    return int(value)


def sample_parts(sample: Any, index: int, keys: Keys) -> Parts:
    """Take a dict, tuple or bare image sample apart (raises IngestError naming it)."""
    where = f"sample {index}"
    if isinstance(sample, Mapping) and keys.image in sample:
        key = sample.get("__key__")
        missing = [name for name in keys.extras if name not in sample]
        if missing:
            raise IngestError(f"{where}: Expected the fields {list(keys.extras)}. Got no {missing}.")
        return Parts(
            image=sample[keys.image], mask=sample.get(keys.mask),
            label=_label(sample.get(keys.label), where), key=None if key is None else str(key),
            extras={name: sample[name] for name in keys.extras},
        )
    if keys.extras:
        raise IngestError(f"{where}: Expected a dict with the keys {[keys.image, *keys.extras]} (extra fields are "
                          f"read from dict samples). Got {type(sample).__name__}.")
    if isinstance(sample, Mapping) and not ("bytes" in sample or "path" in sample):
        raise IngestError(f"{where}: Expected a dict with an {keys.image!r} key. Got keys {sorted(map(str, sample))}.")
    if isinstance(sample, (tuple, list)) and sample:
        parts = Parts(image=sample[0])
        for extra in sample[1:]:
            if extra is None:
                continue
            if _is_image_like(extra) and parts.mask is None:
                parts.mask = extra
            elif not _is_image_like(extra) and parts.label is None:
                parts.label = _label(extra, where)
            else:
                raise IngestError(f"{where}: Expected (image, label), (image, mask) or (image, label, mask). "
                                  f"Got a tuple of {', '.join(type(v).__name__ for v in sample)}.")
        return parts
    return Parts(image=sample)


def _pixels_of(value: Any, where: str) -> Image.Image | np.ndarray:
    """A decoded image value (PIL, array, tensor) as a PIL image or an H x W (x C) array."""
    if _is_tensor(value):
        array = value.detach().cpu().numpy()
        if array.dtype != np.uint8:
            raise IngestError(f"{where}: Expected a uint8 image tensor (C x H x W). Got dtype {value.dtype} "
                              "(store images before ToTensor/Normalize-style transforms).")
        if array.ndim == 3:
            array = np.moveaxis(array, 0, -1)
        return array
    if isinstance(value, (np.ndarray, Image.Image)):
        return value
    raise IngestError(f"{where}: Expected an image as encoded bytes, a file path, a PIL image, or a uint8 array "
                      f"or tensor. Got {type(value).__name__}.")


def _encoded_or_path(value: Any) -> tuple[bytes | None, str | None]:
    """(encoded bytes, file path) of an image value that is either, else (None, None)."""
    if isinstance(value, Mapping):  # Hugging Face's undecoded Image feature: {"bytes", "path"}
        data = value.get("bytes")
        return (bytes(data), None) if data is not None else (None, value.get("path"))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value), None
    if isinstance(value, (str, os.PathLike)):
        return None, os.fspath(value)
    return None, None


def load_sample_image(value: Any, where: str, options: ImageOptions) -> np.ndarray:
    data, path = _encoded_or_path(value)
    if data is not None:
        return load_image_bytes(data, where, options)
    if path is not None:
        return load_image(path, options)
    return load_pixels(_pixels_of(value, where), where, options)


def load_sample_mask(value: Any, where: str, options: ImageOptions) -> np.ndarray:
    data, path = _encoded_or_path(value)
    if data is not None or path is not None:
        return load_mask(path or where, options, data)
    return load_mask_pixels(_pixels_of(value, where), where, options)


def probe_sample_image(value: Any, where: str, options: ImageOptions) -> Shape | None:
    """The (height, width, channels) the image will be stored with, from headers where
    possible; None if it cannot be told (the sample then fails properly when encoded)."""
    try:
        data, path = _encoded_or_path(value)
        if data is not None or path is not None:
            return probe_size(path or where, options, data)
        pixels = _pixels_of(value, where)
        return stored_shape(pil_from_array(pixels, where) if isinstance(pixels, np.ndarray) else pixels, options)
    except IngestError:
        return None


def _digest_value(digest: Any, value: Any) -> None:
    """Feed what decides a value's stored bytes into ``digest`` (for the resume check)."""
    data, path = _encoded_or_path(value)
    if data is not None:
        digest.update(b"B%d:" % len(data) + data)
    elif path is not None:
        digest.update(b"P" + os.fsencode(path) + b"\0")
    elif value is None:
        digest.update(b"N")
    else:
        pixels = _pixels_of(value, "")
        if isinstance(pixels, Image.Image):
            palette = pixels.getpalette() or []
            meta = f"I{pixels.mode}{pixels.size}{palette}{pixels.info.get('transparency')!r}"
            digest.update(meta.encode() + pixels.tobytes())
        else:
            digest.update(f"A{pixels.dtype.str}{pixels.shape}".encode() + np.ascontiguousarray(pixels).tobytes())


def encode_fields(
    layouts: tuple[tuple[str, Layout], ...], pixels: np.ndarray, mask: Callable[[], np.ndarray] | None,
    where: str, mask_where: str,
) -> dict[str, tuple[bytes, Shape]]:
    """Encode a sample's normalized image (and its mask, loaded only if the store has a
    mask field) with each field's layout; raises IngestError naming the sample."""
    fields: dict[str, tuple[bytes, Shape]] = {}
    for name, layout in layouts:
        if name == "image":
            data = pixels
        else:
            if mask is None:
                raise IngestError(f"{where}: no mask given for this sample")
            data = mask()
            if data.shape[:2] != pixels.shape[:2]:
                raise IngestError(
                    f"{mask_where}: mask is {data.shape[1]}x{data.shape[0]}, its image "
                    f"{where} is {pixels.shape[1]}x{pixels.shape[0]}"
                )
        height, width = int(data.shape[0]), int(data.shape[1])
        channels = int(data.shape[2]) if data.ndim == 3 else 1
        try:
            fields[name] = (layout.encode(data), (height, width, channels))
        except (PrepkitError, ValueError) as error:  # e.g. a size the layout cannot store
            raise IngestError(f"{where}: cannot be stored as {layout.name}: {error}") from None
    return fields


@dataclass(frozen=True)
class SampleProbe:
    """What the plan needs from one sample before any is encoded."""

    image: Shape | None  # None: the sample will fail
    has_mask: bool
    digest: bytes


class _Unpicklable:
    """Stands in the spool for a sample that could not be pickled (reported when encoded)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


@dataclass(frozen=True)
class SampleJobBase:
    dataset: Any
    keys: Keys
    options: ImageOptions
    schema: Mapping[str, FieldSpec] | None = None  # extra fields, when the store has some

    def extras(self, parts: Parts, where: str) -> dict[str, np.ndarray]:
        """The sample's extra values in stored form (IngestError naming sample and field)."""
        return sample_extras(self.schema, parts.extras, where) if self.schema else {}

    def parts(self, index: int) -> Parts:
        try:
            sample = self.dataset[index]
        except IngestError:
            raise
        except Exception as error:  # the user's dataset: report it as this sample's failure
            raise IngestError(f"sample {index}: reading it raised {type(error).__name__}: {error}") from None
        if isinstance(sample, _Unpicklable):
            raise IngestError(f"sample {index}: cannot be pickled into the spool ({sample.reason})")
        return sample_parts(sample, index, self.keys)


@dataclass(frozen=True)
class SampleProbeJob(SampleJobBase):
    """Probe sample ``i`` (picklable: runs in workers)."""

    def __call__(self, index: int) -> SampleProbe:
        digest = hashlib.sha256()
        try:
            parts = self.parts(index)
        except IngestError as error:
            digest.update(b"E" + str(error).encode())
            return SampleProbe(None, False, digest.digest())
        where = f"sample {index}"
        try:
            for value in (parts.image, parts.mask):
                _digest_value(digest, value)
        except IngestError as error:
            digest.update(b"E" + str(error).encode())
            return SampleProbe(None, parts.mask is not None, digest.digest())
        digest.update(f"L{parts.label}K{parts.key}".encode())
        try:
            for name, value in self.extras(parts, where).items():
                digest.update(f"X{name}{value.dtype.str}{value.shape}".encode() + value.tobytes())
        except IngestError as error:
            digest.update(b"E" + str(error).encode())
            return SampleProbe(None, parts.mask is not None, digest.digest())
        return SampleProbe(probe_sample_image(parts.image, where, self.options), parts.mask is not None, digest.digest())


@dataclass(frozen=True)
class SampleEncodeJob(SampleJobBase):
    """Encode sample ``i`` into its stored fields (picklable: runs in workers)."""

    layouts: tuple[tuple[str, Layout], ...] = ()

    def __call__(self, index: int) -> EncodedSample | SampleFailure:
        name = f"sample {index}"
        try:
            parts = self.parts(index)
            name = parts.key or name
            where = f"sample {index}" + (f" ({parts.key})" if parts.key else "")
            pixels = load_sample_image(parts.image, where, self.options)
            mask = None if parts.mask is None else (lambda: load_sample_mask(parts.mask, f"{where} mask", self.options))
            fields = encode_fields(self.layouts, pixels, mask, where, f"{where} mask")
            extras = self.extras(parts, where)
        except IngestError as error:
            reason = str(error)
            for prefix in (f"sample {index}: ", f"sample {index} ({name}): "):
                reason = reason.removeprefix(prefix)
            return SampleFailure(item=index, path=name, reason=reason)
        _, path = _encoded_or_path(parts.image)
        return EncodedSample(item=index, relpath=parts.key or path or str(index), label=parts.label, fields=fields,
                             extras=extras)


class Spool:
    """Samples of a plain iterable, pickled one after another into a temporary file and
    read back by index (cheap to pickle: workers open the file themselves)."""

    def __init__(self, path: str, offsets: list[int]) -> None:
        self.path = path
        self.offsets = offsets
        self._handle: Any = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> Any:
        if self._handle is None:
            self._handle = open(self.path, "rb")
        self._handle.seek(self.offsets[index])
        return pickle.loads(self._handle.read(self.offsets[index + 1] - self.offsets[index]))

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "offsets": self.offsets}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["offsets"])  # type: ignore[misc]

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    @classmethod
    def write(cls, samples: Iterable[Any], folder: str, progress: Callable[[int], None] = lambda n: None) -> Spool:
        """Read ``samples`` once, in order, into ``folder/samples.spool``."""
        path = os.path.join(folder, "samples.spool")
        offsets = [0]
        with open(path, "wb") as handle:
            for sample in samples:
                try:
                    data = pickle.dumps(sample, protocol=pickle.HIGHEST_PROTOCOL)
                except Exception as error:
                    data = pickle.dumps(_Unpicklable(f"{type(error).__name__}: {error}"))
                handle.write(data)
                offsets.append(offsets[-1] + len(data))
                progress(1)
        return cls(path, offsets)


def spool_folder(spool_dir: str | os.PathLike[str] | None) -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="prepkit-spool-", dir=spool_dir)


def check_picklable(job: Any, what: str, workers: int) -> None:
    """Spawned workers receive the dataset pickled: refuse one that cannot be, clearly."""
    try:
        pickle.dumps(job)
    except Exception as error:
        raise IngestError(
            f"{what}: Expected a picklable dataset to encode with workers={workers} (spawned worker processes "
            f"receive it pickled). Got {type(error).__name__}: {error}. Pass workers=1, or iter(dataset) to "
            "read it once in order."
        ) from None
