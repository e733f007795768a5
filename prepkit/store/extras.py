"""Extra per-sample fields: scalars, numeric arrays, UTF-8 strings and raw bytes.

A store may carry, beside its image, mask and label, any number of named extra fields
(captions, bounding boxes, float or multi-label targets, ids). Their schema is the
``extras`` attribute of the store (``docs/FORMAT.md``), one :class:`FieldSpec` per name:

- ``int`` / ``float``: one number per sample (``int64`` / ``float64`` unless a dtype is given);
- ``array``: a numeric array per sample. Fixed shape (``float32[128]``): stored as one
  ``(N, 128)`` array. Ragged first axis (``float32[*,4]``, e.g. boxes): the rows of every
  sample back to back in one array plus ``(N, 2)`` row ranges, as images are stored;
- ``string``: UTF-8 text, stored as bytes back to back plus ranges;
- ``bytes``: raw bytes, likewise.

This module holds the schema (parsing declarations such as ``boxes:float32[*,4]``,
inferring it from a first value), the normalisation of one value to its stored form (a
numpy array), and the column a reader keeps in memory to answer ``store[i]`` and batches.
Values are checked here; callers add where they came from (sample, manifest line, column).

Writing extra fields from any sample source (what ``prepkit.ingest.sources`` does for
manifests, and a Python writer does for its samples): ``schema = infer_schema(first_values,
declared)``; per sample ``EncodedSample(..., extras=sample_extras(schema, values, where))``;
``plan_store(..., extras=schema)`` with an ``items_digest`` that covers the values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from prepkit.errors import StoreCorruptError, StoreError

KINDS = ("int", "float", "array", "string", "bytes")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOAT_DTYPES = ("float16", "float32", "float64")
GROUP = "extras"  # the store group holding one subgroup per extra field
# Names a sample dict or a Batch already uses, or that would shadow a store array.
RESERVED = frozenset({"image", "mask", "label", "labels", "path", "paths", "path_ranges", "index", "indices",
                      "images", "masks", "extras", "lengths", "epoch", "number"})
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_DECLARATION = re.compile(r"^(?P<dtype>[a-z0-9]+)(\[(?P<dims>[^\]]*)\])?$")
MAX_DIMS = 8


class FieldValueError(ValueError):
    """A value that does not fit its field; the message is "Expected X. Got Y."."""


@dataclass(frozen=True)
class FieldSpec:
    """The schema of one extra field.

    ``shape`` is the per-sample shape: ``()`` for scalars, ``(None,)`` for strings and bytes,
    and for arrays a tuple of sizes whose first entry may be None (a ragged first axis).
    """

    kind: str
    dtype: str
    shape: tuple[int | None, ...]

    @property
    def ragged(self) -> bool:
        return bool(self.shape) and self.shape[0] is None

    @property
    def trailing(self) -> tuple[int, ...]:
        """The fixed sizes after the ragged first axis (or the whole shape when fixed)."""
        return tuple(int(s) for s in (self.shape[1:] if self.ragged else self.shape))  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "dtype": self.dtype, "shape": list(self.shape)}

    def __str__(self) -> str:
        if self.kind in ("int", "float", "string", "bytes") and (self.kind in ("string", "bytes") or self.dtype in ("int64", "float64")):
            return self.kind
        if self.kind in ("int", "float"):
            return self.dtype
        return f"{self.dtype}[{','.join('*' if s is None else str(s) for s in self.shape)}]"

    @staticmethod
    def from_dict(values: Any, where: str) -> FieldSpec:
        """Parse and check one schema entry of a store's attributes."""
        if not isinstance(values, dict) or set(values) != {"kind", "dtype", "shape"}:
            raise StoreError(f"{where}: Expected an object with 'kind', 'dtype' and 'shape'. Got {values!r}.")
        kind, dtype, shape = values["kind"], values["dtype"], values["shape"]
        if not isinstance(shape, list) or not all(s is None or (isinstance(s, int) and not isinstance(s, bool)) for s in shape):
            raise StoreError(f"{where}: Expected 'shape' to be a list of sizes or null. Got {shape!r}.")
        spec = FieldSpec(kind=kind, dtype=dtype, shape=tuple(shape))
        problem = _spec_problem(spec)
        if problem:
            raise StoreError(f"{where}: {problem}")
        return spec


def _spec_problem(spec: FieldSpec) -> str | None:
    """Why ``spec`` is not a valid schema entry, or None."""
    if spec.kind not in KINDS:
        return f"Expected a kind among {KINDS}. Got {spec.kind!r}."
    numeric = INT_DTYPES + FLOAT_DTYPES
    if spec.kind in ("string", "bytes"):
        if spec.dtype != "uint8" or spec.shape != (None,):
            return f"Expected a {spec.kind} field to be uint8 of shape [null]. Got {spec.dtype} {list(spec.shape)}."
    elif spec.kind == "int" and (spec.dtype not in INT_DTYPES or spec.shape != ()):
        return f"Expected an int field to be a scalar of an integer dtype. Got {spec.dtype} {list(spec.shape)}."
    elif spec.kind == "float" and (spec.dtype not in FLOAT_DTYPES or spec.shape != ()):
        return f"Expected a float field to be a scalar of a float dtype. Got {spec.dtype} {list(spec.shape)}."
    elif spec.kind == "array":
        if spec.dtype not in numeric:
            return f"Expected an array dtype among {numeric}. Got {spec.dtype!r}."
        if not 1 <= len(spec.shape) <= MAX_DIMS or any(s is None or s < 0 or s > 1 << 24 for s in spec.shape[1:]):
            return f"Expected an array shape of 1 to {MAX_DIMS} sizes, only the first may be '*'. Got {list(spec.shape)}."
        if spec.shape[0] is not None and not 0 <= spec.shape[0] <= 1 << 24:
            return f"Expected array sizes in [0, 2^24]. Got {list(spec.shape)}."
    return None


def check_name(name: object) -> str:
    """An extra field's name: a letter then letters, digits or '_', not a built-in name."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise FieldValueError(f"Expected a field name of a letter then letters, digits or '_' (at most 64). Got {name!r}.")
    if name in RESERVED:
        raise FieldValueError(f"Expected a field name other than the built-in names {sorted(RESERVED)}. Got {name!r}.")
    return name


@dataclass(frozen=True)
class Declaration:
    """A field as a user declares it: ``NAME``, ``NAME:KIND``, ``NAME:DTYPE`` or ``NAME:DTYPE[DIMS]``.

    Whatever is not declared (``kind`` None, or an ``array`` without dtype) is inferred
    from the first value.
    """

    name: str
    kind: str | None = None
    spec: FieldSpec | None = None  # complete when the declaration fixes everything

    @staticmethod
    def parse(text: str) -> Declaration:
        name, _, kind = text.partition(":")
        try:
            check_name(name)
        except FieldValueError as error:
            raise FieldValueError(f"field {text!r}: {error}") from None
        kind = kind.strip()
        if not kind:
            return Declaration(name)
        if kind in ("int", "float"):
            return Declaration(name, kind, FieldSpec(kind, f"{kind}64", ()))
        if kind in ("string", "bytes"):
            return Declaration(name, kind, FieldSpec(kind, "uint8", (None,)))
        if kind == "array":
            return Declaration(name, "array")
        match = _DECLARATION.match(kind)
        if match is None or match["dtype"] not in INT_DTYPES + FLOAT_DTYPES:
            raise FieldValueError(
                f"field {text!r}: Expected a kind among {KINDS}, a dtype such as int32 or float32, or an array "
                f"such as float32[*,4] ('*': any length). Got {kind!r}."
            )
        dtype, dims = match["dtype"], match["dims"]
        if dims is None:
            scalar_kind = "int" if dtype in INT_DTYPES else "float"
            return Declaration(name, scalar_kind, FieldSpec(scalar_kind, dtype, ()))
        try:
            shape = tuple(None if d.strip() == "*" else int(d) for d in dims.split(","))
        except ValueError:
            raise FieldValueError(f"field {text!r}: Expected sizes or '*' between the brackets. Got [{dims}].") from None
        spec = FieldSpec("array", dtype, shape)
        problem = _spec_problem(spec)
        if problem:
            raise FieldValueError(f"field {text!r}: {problem}")
        return Declaration(name, "array", spec)

    def resolve(self, value: Any) -> FieldSpec:
        """The complete schema: declared, or inferred from ``value`` (the first sample's)."""
        if self.spec is not None:
            return self.spec
        inferred = infer_spec(value)
        if self.kind is not None and inferred.kind != self.kind:
            raise FieldValueError(f"Expected a value of kind {self.kind}. Got {_describe(value)}.")
        return inferred


def _describe(value: Any) -> str:
    text = repr(value)
    return (text[:60] + "...") if len(text) > 63 else text


def infer_spec(value: Any) -> FieldSpec:
    """The schema a first value implies. Arrays get a ragged first axis (declare a fixed
    shape, e.g. ``float32[128]``, to have batches stacked)."""
    if isinstance(value, (bool, np.bool_)):
        raise FieldValueError(f"Expected a number, a numeric array, a string or bytes. Got the boolean {value!r}.")
    if isinstance(value, str):
        return FieldSpec("string", "uint8", (None,))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return FieldSpec("bytes", "uint8", (None,))
    if isinstance(value, (int, np.integer)):
        return FieldSpec("int", "int64" if isinstance(value, int) else np.dtype(type(value)).name, ())
    if isinstance(value, (float, np.floating)):
        return FieldSpec("float", "float64" if isinstance(value, float) else np.dtype(type(value)).name, ())
    if isinstance(value, (list, tuple)) and is_empty(value):
        raise FieldValueError(f"Expected a non-empty first array to infer its dtype (or declare it, e.g. float32[*]). Got {value!r}.")
    if isinstance(value, (list, tuple, np.ndarray)):
        array = _numeric_array(value, None)
        if array.ndim == 0:
            return infer_spec(array[()])
        return FieldSpec("array", array.dtype.name, (None, *array.shape[1:]))
    raise FieldValueError(f"Expected a number, a numeric array, a string or bytes. Got {type(value).__name__} {_describe(value)}.")


def is_empty(value: Any) -> bool:
    """An empty list (or list of empty lists): it says nothing of its dtype."""
    return isinstance(value, (list, tuple)) and all(is_empty(v) for v in value)


def _numeric_array(value: Any, dtype: str | None) -> np.ndarray:
    """``value`` as a numeric array (lists of Python ints: int64, with a float: float64)."""
    try:
        array = np.asarray(value)
    except ValueError:
        array = np.empty(0, dtype=object)  # ragged nested lists
    if array.dtype.kind == "b" or array.dtype.kind not in "iuf" or array.dtype.name not in INT_DTYPES + FLOAT_DTYPES:
        raise FieldValueError(f"Expected a rectangular array of numbers. Got {_describe(value)}.")
    if dtype is None:
        return array
    target = np.dtype(dtype)
    if target.kind in "iu":
        if array.dtype.kind == "f":
            if not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
                raise FieldValueError(f"Expected integers ({dtype}). Got {_describe(value)}.")
        if array.size:
            info = np.iinfo(target)
            low, high = array.min(), array.max()
            if low < info.min or high > info.max:
                raise FieldValueError(f"Expected values in [{info.min}, {info.max}] ({dtype}). Got {_describe(value)}.")
    return array.astype(target)


def normalize(spec: FieldSpec, value: Any) -> np.ndarray:
    """``value`` in its stored form: an array of ``spec.dtype`` with the sample's shape
    (UTF-8 bytes for strings). Raises FieldValueError ("Expected X. Got Y.")."""
    if spec.kind == "string":
        if not isinstance(value, str):
            raise FieldValueError(f"Expected a string. Got {_describe(value)}.")
        try:
            return np.frombuffer(value.encode("utf-8"), dtype=np.uint8)
        except UnicodeEncodeError:
            raise FieldValueError(f"Expected text that UTF-8 can encode. Got {_describe(value)}.") from None
    if spec.kind == "bytes":
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise FieldValueError(f"Expected bytes. Got {_describe(value)}.")
        return np.frombuffer(bytes(value), dtype=np.uint8)
    if isinstance(value, (bool, np.bool_)):
        raise FieldValueError(f"Expected a number. Got the boolean {value!r}.")
    if spec.kind == "int" and not isinstance(value, (int, np.integer)):
        raise FieldValueError(f"Expected an integer ({spec.dtype}). Got {_describe(value)}.")
    if spec.kind == "int" and not np.iinfo(spec.dtype).min <= int(value) <= np.iinfo(spec.dtype).max:
        info = np.iinfo(spec.dtype)
        raise FieldValueError(f"Expected an integer in [{info.min}, {info.max}] ({spec.dtype}). Got {value}.")
    if spec.kind == "float" and not isinstance(value, (int, float, np.integer, np.floating)):
        raise FieldValueError(f"Expected a number ({spec.dtype}). Got {_describe(value)}.")
    if spec.kind == "array" and not isinstance(value, (list, tuple, np.ndarray)):
        raise FieldValueError(f"Expected an array {spec}. Got {_describe(value)}.")
    array = _numeric_array(value, spec.dtype)
    if spec.kind == "array":
        fixed = spec.trailing
        if spec.ragged and array.shape == (0,):  # [] is zero rows whatever the row shape
            array = array.reshape(0, *fixed)
        got = array.shape[1:] if spec.ragged else array.shape
        if (spec.ragged and array.ndim != len(spec.shape)) or got != fixed:
            raise FieldValueError(f"Expected an array of shape {spec}. Got shape {list(array.shape)}.")
    return array


def infer_schema(first: Mapping[str, Any], declared: Mapping[str, str] | None = None) -> dict[str, FieldSpec]:
    """The schema of a sample source's extra fields from its first sample's values
    (``first``: name -> value). ``declared`` maps names to a KIND (``"float32[*,4]"``, ...)
    where the first value is not enough (an empty list, a fixed array shape)."""
    declared = dict(declared or {})
    schema = {}
    for name, value in first.items():
        declaration = Declaration.parse(f"{name}:{declared.pop(name, '')}")
        try:
            schema[name] = declaration.resolve(value)
        except FieldValueError as error:
            raise FieldValueError(f"field {name!r} of the first sample: {error}") from None
    if declared:
        raise FieldValueError(f"Expected the declared fields {sorted(declared)} in the first sample. Got {sorted(first)}.")
    return schema


def sample_extras(schema: Mapping[str, FieldSpec], values: Mapping[str, Any], where: str) -> dict[str, np.ndarray]:
    """One sample's extra values in stored form; an IngestError names ``where`` (the sample)
    and the field for a missing, unexpected or ill-fitting value."""
    from prepkit.errors import IngestError

    unexpected = sorted(set(values) - set(schema))
    if unexpected:
        raise IngestError(f"{where}: Expected only the fields of the first sample {sorted(schema)}. Got also {unexpected}.")
    out = {}
    for name, spec in schema.items():
        if name not in values or values[name] is None:
            raise IngestError(f"{where}: field {name!r}: Expected a value. Got none.")
        try:
            out[name] = normalize(spec, values[name])
        except FieldValueError as error:
            raise IngestError(f"{where}: field {name!r}: {error}") from None
    return out


# -- stored form ---------------------------------------------------------------------------
def array_paths(name: str, spec: FieldSpec) -> list[str]:
    """The store arrays of one field: ``values`` (and ``ranges`` when ragged)."""
    return [f"{GROUP}/{name}/values"] + ([f"{GROUP}/{name}/ranges"] if spec.ragged else [])


def metadata_files(schema: Mapping[str, FieldSpec]) -> list[str]:
    """The ``zarr.json`` files the extra fields add to a store (covered by its checksums)."""
    if not schema:
        return []
    files = [f"{GROUP}/zarr.json"]
    for name, spec in schema.items():
        files += [f"{GROUP}/{name}/zarr.json"] + [f"{path}/zarr.json" for path in array_paths(name, spec)]
    return files


def pack(spec: FieldSpec, values: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """One shard's (or store's) values of a field: ``values`` stacked, or for a ragged field
    concatenated with their ``lengths`` (rows per sample)."""
    if not spec.ragged:
        return {"values": np.stack(values).astype(spec.dtype) if values else np.zeros((0, *spec.trailing), spec.dtype)}
    flat = np.concatenate(values).astype(spec.dtype) if values else np.zeros((0, *spec.trailing), spec.dtype)
    return {"values": flat, "lengths": np.array([len(v) for v in values], dtype=np.int64)}


def ranges_from_lengths(lengths: np.ndarray) -> np.ndarray:
    """(N, 2) uint64 [start, stop) rows from per-sample row counts."""
    stops = np.cumsum(lengths.astype(np.uint64), dtype=np.uint64)
    return np.stack([stops - lengths.astype(np.uint64), stops], axis=1) if len(lengths) else np.zeros((0, 2), np.uint64)


@dataclass
class ExtraColumn:
    """One extra field of an open store, in memory: ``values`` and (ragged) ``ranges``."""

    name: str
    spec: FieldSpec
    values: np.ndarray
    ranges: np.ndarray | None

    def check(self, count: int, where: str) -> None:
        """Shapes and ranges consistent with ``count`` samples (a damaged store is refused)."""
        spec = self.spec
        if self.values.dtype != np.dtype(spec.dtype):
            raise StoreCorruptError(f"{where}: extra field {self.name!r}: Expected dtype {spec.dtype}. Got {self.values.dtype}.")
        if not spec.ragged:
            if self.values.shape != (count, *spec.trailing):
                raise StoreCorruptError(
                    f"{where}: extra field {self.name!r}: Expected shape {(count, *spec.trailing)}. Got {self.values.shape}."
                )
            return
        assert self.ranges is not None
        if self.ranges.shape != (count, 2) or self.values.shape[1:] != spec.trailing:
            raise StoreCorruptError(f"{where}: extra field {self.name!r}: Expected ranges ({count}, 2) and rows of "
                                    f"{spec.trailing}. Got {self.ranges.shape} and {self.values.shape}.")
        starts, stops = self.ranges[:, 0], self.ranges[:, 1]
        if count and (np.any(stops < starts) or int(stops.max()) > self.values.shape[0]):
            raise StoreCorruptError(f"{where}: extra field {self.name!r}: ranges point outside its values")

    def raw(self, index: int) -> np.ndarray:
        """Sample ``index``'s stored value (a view)."""
        if self.ranges is None:
            return self.values[index]
        start, stop = self.ranges[index].tolist()
        return self.values[start:stop]

    def get(self, index: int) -> Any:
        """Sample ``index``'s value: int, float, str, bytes or a numpy array (a copy)."""
        stored = self.raw(index)
        if self.spec.kind == "string":
            return stored.tobytes().decode("utf-8")
        if self.spec.kind == "bytes":
            return stored.tobytes()
        if self.spec.kind in ("int", "float"):
            return stored.item()
        return np.array(stored)

    def lengths(self, indices: np.ndarray) -> np.ndarray:
        """Rows (arrays) or bytes (strings, bytes) of each sample of ``indices``, int64."""
        if self.ranges is None:
            return np.full(len(indices), self.spec.trailing[0] if self.spec.trailing else 1, dtype=np.int64)
        ranges = self.ranges[indices]
        return (ranges[:, 1] - ranges[:, 0]).astype(np.int64)

    def gather(self, indices: np.ndarray, pad: float | None = None) -> tuple[Any, np.ndarray | None]:
        """The batch of ``indices``: (values, lengths or None).

        Fixed fields: one stacked array, no lengths. Ragged fields: a list (arrays, str or
        bytes), or with ``pad`` one ``(B, longest, ...)`` array filled with ``pad`` after
        each sample's rows, and the rows of each sample.
        """
        if self.ranges is None:
            return self.values[indices], None
        if pad is None:
            return [self.get(i) for i in indices.tolist()], None
        lengths = self.lengths(indices)
        longest = int(lengths.max()) if len(lengths) else 0
        out = np.full((len(indices), longest, *self.spec.trailing), pad, dtype=self.spec.dtype)
        for row, index in enumerate(indices.tolist()):
            stored = self.raw(index)
            out[row, : len(stored)] = stored
        return out, lengths


def check_pad_value(spec: FieldSpec, name: str, pad: Any) -> None:
    """A padding value for a ragged numeric field: a number its dtype holds exactly."""
    if spec.kind != "array" or not spec.ragged:
        raise ValueError(f"Reader: pad_fields[{name!r}]: Expected a variable-length array field. Got a {spec} field.")
    try:
        normalize(FieldSpec("array", spec.dtype, (1,)), [pad])
    except FieldValueError as error:
        raise ValueError(f"Reader: pad_fields[{name!r}]: {error}") from None
