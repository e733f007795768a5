"""Augmentation ops with torchvision.transforms.v2 names and meaning.

Each op is a small frozen dataclass with validated fields and a dict round trip
(``op.to_dict()`` / ``op_from_dict(d)``). Ops do not touch pixels: a
:class:`~prepkit.augment.pipeline.Pipeline` compiles a list of them into one fused
kernel. To let the pipeline reject an impossible order before any data moves, every op
declares what it does to a :class:`Spec` (dtype, fixed output size) in
:meth:`Op.output_spec`, in the manner of FFCV's ``declare_state_and_memory``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, cast

import numpy as np

from prepkit.errors import PipelineError

#: Output dtypes the fused kernels can write. bfloat16 is written as its uint16 bit
#: pattern (numba has no bfloat16); torch users call ``tensor.view(torch.bfloat16)``.
DTYPES = ("uint8", "float32", "float16", "bfloat16")
FLOAT_DTYPES = ("float32", "float16", "bfloat16")


def canonical_dtype(dtype: Any) -> str:
    """Return one of :data:`DTYPES` for a numpy dtype, a string or a torch dtype.

    torch is never imported here: a torch dtype is recognised by its ``str()``
    (``"torch.float32"``), so passing one works only when the caller already has torch.
    """
    text = str(dtype)
    if text.startswith("torch."):
        text = text[len("torch.") :]
    aliases = {"float": "float32", "half": "float16", "bf16": "bfloat16", "f4": "float32"}
    text = aliases.get(text, text)
    if text not in DTYPES:
        try:
            text = np.dtype(dtype).name
        except TypeError:
            pass
    if text not in DTYPES:
        raise PipelineError(f"dtype: Expected one of {', '.join(DTYPES)}. Got {dtype!r}.")
    return text


def _size_pair(name: str, size: Any, allow_int: bool = True) -> int | tuple[int, int]:
    """Validate a torchvision-style size: an int, or a sequence of one or two ints."""
    if isinstance(size, (list, tuple)):
        if len(size) == 1:
            size = size[0]
        elif len(size) == 2:
            h, w = (int(v) for v in size)
            if h != size[0] or w != size[1] or h < 1 or w < 1:
                raise PipelineError(f"{name}.size: Expected two positive ints. Got {size!r}.")
            return (h, w)
        else:
            raise PipelineError(f"{name}.size: Expected an int or (h, w). Got {size!r}.")
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)) or size < 1:
        raise PipelineError(f"{name}.size: Expected a positive int or (h, w). Got {size!r}.")
    if not allow_int:
        return (int(size), int(size))
    return int(size)


def _float_pair(name: str, value: Any, positive: bool) -> tuple[float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise PipelineError(f"{name}: Expected a (low, high) pair. Got {value!r}.")
    lo, hi = float(value[0]), float(value[1])
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi or (positive and lo <= 0):
        raise PipelineError(f"{name}: Expected finite {'0 < ' if positive else ''}low <= high. Got {value!r}.")
    return (lo, hi)


@dataclass(frozen=True)
class Spec:
    """What the pipeline knows about a batch before any data moves.

    ``dtype`` is one of :data:`DTYPES`; ``size`` is the (h, w) every image has, or None
    when it depends on the input; ``resampled`` names the resampling op already applied.
    """

    dtype: str = "uint8"
    size: tuple[int, int] | None = None
    resampled: str | None = None
    quantized_from_float: bool = False
    #: Channels every image has after the channel ops, or None (as stored, maybe mixed).
    channels: int | None = None


@dataclass(frozen=True)
class Op:
    """Base of all ops: validation, a dict round trip and the spec transition."""

    #: Does this op resample (change the pixel grid with interpolation)?
    resamples: ClassVar[bool] = False
    #: Does this op draw random numbers (and how many per sample)?
    draws: ClassVar[int] = 0
    #: Does this op change pixel values (as opposed to geometry)?
    changes_values: ClassVar[bool] = False
    #: Does this op convert the channel count (a per-pixel pass before the resample)?
    converts_channels: ClassVar[bool] = False
    #: Is this op part of the per-sample colour stage (a pass over the resampled output)?
    colour_stage: ClassVar[bool] = False

    def output_spec(self, spec: Spec) -> Spec:
        """Return the spec after this op, or raise PipelineError if the op cannot run."""
        return spec

    def to_dict(self) -> dict[str, Any]:
        """``{"name": ..., "configuration": {...}}`` with JSON-friendly values."""
        config = {}
        for f in fields(self):
            value = getattr(self, f.name)
            config[f.name] = list(value) if isinstance(value, tuple) else value
        return {"name": type(self).__name__, "configuration": config}


def _check_resample(op: Op, spec: Spec) -> None:
    # The fused plan has one source box and one interpolation per sample, so two
    # resampling ops cannot be fused (and resampling rounded uint8 values cannot either).
    if spec.resampled is not None:
        raise PipelineError(
            f"{type(op).__name__}: Expected at most one resampling op per pipeline (prepkit fuses "
            f"all geometry into a single resampling). Got a second one after {spec.resampled}."
        )
    if spec.quantized_from_float:
        raise PipelineError(
            f"{type(op).__name__}: Expected resampling before ToDtype(uint8) of float data. Got it "
            "after (the fused kernel cannot resample rounded values)."
        )


@dataclass(frozen=True)
class RandomResizedCrop(Op):
    """Crop a random area/aspect box and resize it to ``size`` (torchvision semantics).

    The box is drawn with torchvision's 10-attempt rejection loop and its centre-crop
    fallback; see :mod:`prepkit.augment.rng` for how the numbers are drawn.
    """

    size: int | tuple[int, int]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    antialias: bool = True

    resamples: ClassVar[bool] = True
    draws: ClassVar[int] = 40  # 10 attempts x (area, log-ratio, top, left)

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", _size_pair("RandomResizedCrop", self.size, allow_int=False))
        object.__setattr__(self, "scale", _float_pair("RandomResizedCrop.scale", self.scale, positive=False))
        object.__setattr__(self, "ratio", _float_pair("RandomResizedCrop.ratio", self.ratio, positive=True))
        if self.scale[0] < 0:
            raise PipelineError(f"RandomResizedCrop.scale: Expected values >= 0. Got {self.scale!r}.")
        object.__setattr__(self, "antialias", _bool("RandomResizedCrop.antialias", self.antialias))

    @property
    def size_hw(self) -> tuple[int, int]:
        """``size`` as (h, w): __post_init__ turned any int into a pair."""
        return cast(tuple[int, int], self.size)

    def output_spec(self, spec: Spec) -> Spec:
        _check_resample(self, spec)
        return replace(spec, size=self.size_hw, resampled=type(self).__name__)


@dataclass(frozen=True)
class Resize(Op):
    """Resize to ``size``: an int resizes the shorter side (keeping aspect), (h, w) is exact."""

    size: int | tuple[int, int]
    antialias: bool = True

    resamples: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", _size_pair("Resize", self.size))
        object.__setattr__(self, "antialias", _bool("Resize.antialias", self.antialias))

    def output_spec(self, spec: Spec) -> Spec:
        _check_resample(self, spec)
        size = self.size if isinstance(self.size, tuple) else None
        return replace(spec, size=size, resampled=type(self).__name__)


@dataclass(frozen=True)
class CenterCrop(Op):
    """Crop the centre ``size`` box (top = round((H - h) / 2), as torchvision).

    torchvision pads with zeros when the crop is larger than the image; prepkit raises
    a PipelineError for such a sample instead (put a Resize first).
    """

    size: int | tuple[int, int]

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", _size_pair("CenterCrop", self.size, allow_int=False))

    @property
    def size_hw(self) -> tuple[int, int]:
        """``size`` as (h, w): __post_init__ turned any int into a pair."""
        return cast(tuple[int, int], self.size)

    def output_spec(self, spec: Spec) -> Spec:
        if spec.size is not None and (self.size_hw[0] > spec.size[0] or self.size_hw[1] > spec.size[1]):
            raise PipelineError(
                f"CenterCrop: Expected a crop no larger than the image. Got {self.size} on {spec.size} "
                "(torchvision would pad with zeros; prepkit does not)."
            )
        return replace(spec, size=self.size_hw)


@dataclass(frozen=True)
class RandomHorizontalFlip(Op):
    """Mirror left-right with probability ``p`` (flips when a uniform draw is < p)."""

    p: float = 0.5

    draws: ClassVar[int] = 1

    def __post_init__(self) -> None:
        p = float(self.p)
        if not 0.0 <= p <= 1.0:
            raise PipelineError(f"RandomHorizontalFlip.p: Expected 0 <= p <= 1. Got {self.p!r}.")
        object.__setattr__(self, "p", p)


@dataclass(frozen=True)
class Normalize(Op):
    """``(x - mean) / std`` per channel, on float data only (as torchvision)."""

    mean: tuple[float, ...]
    std: tuple[float, ...]

    changes_values: ClassVar[bool] = True

    def __post_init__(self) -> None:
        mean = tuple(float(v) for v in np.atleast_1d(np.asarray(self.mean, dtype=np.float64)))
        std = tuple(float(v) for v in np.atleast_1d(np.asarray(self.std, dtype=np.float64)))
        if not mean or not std:
            raise PipelineError(f"Normalize: Expected non-empty mean and std. Got {self.mean!r}, {self.std!r}.")
        if any(s == 0 or not math.isfinite(s) for s in std) or not all(math.isfinite(m) for m in mean):
            raise PipelineError(f"Normalize.std: Expected finite non-zero values. Got {self.std!r}.")
        if len(mean) != len(std) and 1 not in (len(mean), len(std)):
            raise PipelineError(
                f"Normalize: Expected mean and std of the same length. Got {len(mean)} and {len(std)}."
            )
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)

    def output_spec(self, spec: Spec) -> Spec:
        if spec.dtype not in FLOAT_DTYPES:
            raise PipelineError(
                f"Normalize: Expected a float image (torchvision rule). Got {spec.dtype} "
                "(add ToDtype(float32, scale=True) before Normalize)."
            )
        return spec

    def channel_arrays(self, channels: int) -> tuple[np.ndarray, np.ndarray]:
        """mean and std broadcast to ``channels`` values, or a PipelineError."""
        arrays = []
        for name, values in (("mean", self.mean), ("std", self.std)):
            if len(values) not in (1, channels):
                raise PipelineError(
                    f"Normalize.{name}: Expected 1 or {channels} values for {channels}-channel images. "
                    f"Got {len(values)}."
                )
            arrays.append(np.broadcast_to(np.asarray(values, dtype=np.float64), (channels,)).copy())
        return arrays[0], arrays[1]


@dataclass(frozen=True)
class ToDtype(Op):
    """Convert the dtype; with ``scale=True`` map value ranges (uint8 [0,255] <-> float [0,1]).

    float -> uint8 follows torchvision (``x * 255.999`` truncated when scaling, else
    truncated) but saturates to [0, 255] where torch's cast would be undefined.
    """

    dtype: Any
    scale: bool = False

    changes_values: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        object.__setattr__(self, "scale", _bool("ToDtype.scale", self.scale))

    def output_spec(self, spec: Spec) -> Spec:
        quantized = spec.quantized_from_float or (spec.dtype in FLOAT_DTYPES and self.dtype == "uint8")
        return replace(spec, dtype=self.dtype, quantized_from_float=quantized)


def _check_channel_op(op: Op, spec: Spec) -> None:
    # Channel conversion runs as a per-pixel pass over the stored uint8 pixels, before the
    # fused kernel: exact where it commutes with the geometry (crops and flips), i.e.
    # before any resample and any value op, as torchvision computes it on uint8 images.
    if spec.resampled is not None or spec.dtype != "uint8":
        after = spec.resampled or f"a conversion to {spec.dtype}"
        raise PipelineError(
            f"{type(op).__name__}: Expected channel ops before any resampling op and ToDtype "
            f"(they run on the stored uint8 pixels). Got one after {after}."
        )


@dataclass(frozen=True)
class Grayscale(Op):
    """torchvision's ``Grayscale``: L = 0.2989 R + 0.587 G + 0.114 B, truncated to uint8.

    1-channel images pass through (repeated when ``num_output_channels=3``), as in
    torchvision; 4-channel images use their RGB and drop alpha (torchvision refuses them).
    Must come before the resampling op and any ToDtype.
    """

    num_output_channels: int = 1

    converts_channels: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.num_output_channels not in (1, 3) or isinstance(self.num_output_channels, bool):
            raise PipelineError(
                f"Grayscale.num_output_channels: Expected 1 or 3. Got {self.num_output_channels!r}."
            )

    def output_spec(self, spec: Spec) -> Spec:
        _check_channel_op(self, spec)
        return replace(spec, channels=self.num_output_channels)


@dataclass(frozen=True)
class RGB(Op):
    """torchvision's ``RGB``: 1 channel is repeated to 3, 3 channels pass through.

    4-channel (RGBA) images keep their colour channels and drop alpha, as Pillow's
    ``convert("RGB")`` (torchvision's tensor kernel returns them unchanged). Lets a store
    of mixed 1/3/4-channel images (``--mode keep``) produce 3-channel batches.
    Must come before the resampling op and any ToDtype.
    """

    converts_channels: ClassVar[bool] = True

    def output_spec(self, spec: Spec) -> Spec:
        _check_channel_op(self, spec)
        return replace(spec, channels=3)


#: The name the issue and other libraries use for :class:`RGB`.
ToRGB = RGB


@dataclass(frozen=True)
class RandomErasing(Op):
    """torchvision's ``RandomErasing``: with probability ``p`` fill a random box.

    The box is drawn as torchvision does (area fraction in ``scale``, log-uniform aspect
    in ``ratio``, ``h = round(sqrt(area * aspect))``, ``w = round(sqrt(area / aspect))``,
    up to 10 attempts for a box strictly smaller than the image, else nothing is erased).
    ``value`` is a number, one number per channel, or ``"random"`` (standard normal per
    pixel, float data only). It runs on the output after the fused kernel, so it must come
    after every geometric op; value ops after it (ToDtype, Normalize) apply to the fill.
    """

    p: float = 0.5
    scale: tuple[float, float] = (0.02, 0.33)
    ratio: tuple[float, float] = (0.3, 3.3)
    value: Any = 0.0

    draws: ClassVar[int] = 41  # p, then 10 attempts x (area, log-ratio, top, left)

    def __post_init__(self) -> None:
        p = float(self.p)
        if not 0.0 <= p <= 1.0:
            raise PipelineError(f"RandomErasing.p: Expected 0 <= p <= 1. Got {self.p!r}.")
        object.__setattr__(self, "p", p)
        object.__setattr__(self, "scale", _float_pair("RandomErasing.scale", self.scale, positive=False))
        object.__setattr__(self, "ratio", _float_pair("RandomErasing.ratio", self.ratio, positive=True))
        value = self.value
        if isinstance(value, str):
            if value != "random":
                raise PipelineError(f"RandomErasing.value: Expected a number, numbers or 'random'. Got {value!r}.")
        elif isinstance(value, (list, tuple)):
            value = tuple(float(v) for v in value)
            if not value or not all(math.isfinite(v) for v in value):
                raise PipelineError(f"RandomErasing.value: Expected finite numbers. Got {self.value!r}.")
        elif isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
            value = float(value)
        else:
            raise PipelineError(f"RandomErasing.value: Expected a number, numbers or 'random'. Got {value!r}.")
        object.__setattr__(self, "value", value)

    def output_spec(self, spec: Spec) -> Spec:
        if self.value == "random" and spec.dtype not in FLOAT_DTYPES:
            raise PipelineError(
                f"RandomErasing: Expected float data for value='random' (torchvision draws normals). Got {spec.dtype}."
            )
        return spec

    def fill(self, channels: int) -> np.ndarray:
        """float64[channels] constant fill (not for 'random')."""
        values = np.atleast_1d(np.asarray(self.value, dtype=np.float64))
        if len(values) not in (1, channels):
            raise PipelineError(
                f"RandomErasing.value: Expected 1 or {channels} values for {channels}-channel images. Got {len(values)}."
            )
        return np.broadcast_to(values, (channels,)).copy()


def _jitter_range(name: str, value: Any, center: float, bound: tuple[float, float], clip_first_on_zero: bool) -> tuple[float, float] | None:
    """torchvision's ColorJitter._check_input: a number x means [center - x, center + x]."""
    if value is None:
        return None
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        if not math.isfinite(float(value)) or value < 0:
            raise PipelineError(f"ColorJitter.{name}: Expected a non-negative number. Got {value!r}.")
        lo, hi = center - float(value), center + float(value)
        if clip_first_on_zero:
            lo = max(lo, 0.0)
    elif isinstance(value, (list, tuple)) and len(value) == 2:
        lo, hi = float(value[0]), float(value[1])
    else:
        raise PipelineError(f"ColorJitter.{name}: Expected None, a number or a (low, high) pair. Got {value!r}.")
    if not bound[0] <= lo <= hi <= bound[1]:
        raise PipelineError(f"ColorJitter.{name}: Expected {bound[0]} <= low <= high <= {bound[1]}. Got {(lo, hi)!r}.")
    return None if lo == hi == center else (lo, hi)


def _check_colour_op(op: Op, spec: Spec) -> None:
    # The colour stage runs on the resampled output in float32 (uint8 values kept as whole
    # numbers); float16 / bfloat16 would need torch's arithmetic in those types.
    if spec.dtype not in ("uint8", "float32"):
        raise PipelineError(
            f"{type(op).__name__}: Expected uint8 or float32 data (the colour stage computes as torchvision "
            f"does on those). Got {spec.dtype}."
        )
    if spec.channels == 4:
        raise PipelineError(f"{type(op).__name__}: Expected 1 or 3 channels (torchvision refuses 4). Got 4.")


@dataclass(frozen=True)
class ColorJitter(Op):
    """torchvision's ``ColorJitter``: brightness, contrast, saturation and hue in a random order.

    Each argument is None (off), a number x (factor drawn uniformly in
    ``[max(0, 1 - x), 1 + x]``, hue in ``[-x, x]`` with x <= 0.5) or a (low, high) pair.
    Per sample the four adjustments run in a random permutation. Runs in the colour stage
    (:mod:`prepkit.augment.colour`) on the finished geometry, so it must come after every
    geometric op.
    """

    brightness: Any = None
    contrast: Any = None
    saturation: Any = None
    hue: Any = None

    changes_values: ClassVar[bool] = True
    colour_stage: ClassVar[bool] = True
    draws: ClassVar[int] = 8  # 4 permutation keys, then the 4 factors

    def __post_init__(self) -> None:
        for name in ("brightness", "contrast", "saturation"):
            object.__setattr__(self, name, _jitter_range(name, getattr(self, name), 1.0, (0.0, math.inf), True))
        object.__setattr__(self, "hue", _jitter_range("hue", self.hue, 0.0, (-0.5, 0.5), False))

    def output_spec(self, spec: Spec) -> Spec:
        _check_colour_op(self, spec)
        return spec


def _bins(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 2:
        raise PipelineError(f"{name}.num_magnitude_bins: Expected an int >= 2. Got {value!r}.")
    return int(value)


def _interpolation(name: str, value: Any) -> str:
    """"nearest" or "bilinear" from a string or a torchvision InterpolationMode (its ``.value``)."""
    text = getattr(value, "value", value)
    if isinstance(text, str) and text.lower() in ("nearest", "bilinear"):
        return text.lower()
    raise PipelineError(f"{name}.interpolation: Expected 'nearest' or 'bilinear' (InterpolationMode). Got {value!r}.")


def _fill(name: str, value: Any) -> tuple[float, ...] | None:
    """torchvision's fill: None (zero padding), a number, or one number per channel."""
    if value is None:
        return None
    values = value if isinstance(value, (list, tuple)) else (value,)
    if not 1 <= len(values) <= 3 or not all(
        isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(v)
        for v in values
    ):
        raise PipelineError(f"{name}.fill: Expected None, a number or 1 to 3 finite numbers. Got {value!r}.")
    return tuple(float(v) for v in values)


class _AutoAugment(Op):
    """What TrivialAugmentWide and RandAugment share: the op list, ``interpolation`` and ``fill``."""

    interpolation: Any
    fill: Any

    changes_values: ClassVar[bool] = True
    colour_stage: ClassVar[bool] = True

    def _check_geometry_args(self) -> None:
        name = type(self).__name__
        object.__setattr__(self, "interpolation", _interpolation(name, self.interpolation))
        object.__setattr__(self, "fill", _fill(name, self.fill))

    def output_spec(self, spec: Spec) -> Spec:
        _check_colour_op(self, spec)
        if self.fill is not None and spec.channels is not None and len(self.fill) not in (1, spec.channels):
            raise PipelineError(
                f"{type(self).__name__}.fill: Expected 1 or {spec.channels} values for {spec.channels}-channel "
                f"images. Got {len(self.fill)}."
            )
        return spec


@dataclass(frozen=True)
class TrivialAugmentWide(_AutoAugment):
    """torchvision's ``TrivialAugmentWide``: one op of its 14 with a random magnitude bin.

    The list is torchvision's (Identity, ShearX, ShearY, TranslateX, TranslateY, Rotate,
    Brightness, Color, Contrast, Sharpness, Posterize, Solarize, AutoContrast, Equalize),
    each drawn with probability 1/14, with its magnitudes (shear 0..0.99, translation
    0..32 px, rotation 0..135 degrees, signed). The geometric ops sample with
    ``interpolation`` ("nearest" or "bilinear") and put ``fill`` (None: zeros; a number or
    one per channel) where they uncover the image, as torchvision's affine / rotate.
    """

    num_magnitude_bins: int = 31
    interpolation: Any = "nearest"
    fill: Any = None

    draws: ClassVar[int] = 3  # op, bin, sign

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_magnitude_bins", _bins("TrivialAugmentWide", self.num_magnitude_bins))
        self._check_geometry_args()


@dataclass(frozen=True)
class RandAugment(_AutoAugment):
    """torchvision's ``RandAugment``: ``num_ops`` ops of its list at bin ``magnitude``.

    Same op list, ``interpolation`` and ``fill`` as :class:`TrivialAugmentWide`, with
    RandAugment's magnitudes (shear 0..0.3, translation 0..150/331 of the image size,
    rotation 0..30 degrees).
    """

    num_ops: int = 2
    magnitude: int = 9
    num_magnitude_bins: int = 31
    interpolation: Any = "nearest"
    fill: Any = None

    def __post_init__(self) -> None:
        bins = _bins("RandAugment", self.num_magnitude_bins)
        object.__setattr__(self, "num_magnitude_bins", bins)
        for name, value, hi in (("num_ops", self.num_ops, 64), ("magnitude", self.magnitude, bins - 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= hi:
                raise PipelineError(f"RandAugment.{name}: Expected an int in [0, {hi}]. Got {value!r}.")
            object.__setattr__(self, name, int(value))
        self._check_geometry_args()


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise PipelineError(f"{name}: Expected a bool. Got {value!r}.")
    return bool(value)


OPS: dict[str, type[Op]] = {
    cls.__name__: cls
    for cls in (
        RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, Normalize, ToDtype, Grayscale, RGB, RandomErasing,
        ColorJitter, TrivialAugmentWide, RandAugment,
    )
}
#: Ops that move, resize or re-channel pixels: none may follow RandomErasing (it fills a box of the output).
GEOMETRIC_OPS: tuple[type[Op], ...] = (RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip, Grayscale, RGB)


def op_from_dict(data: dict[str, Any]) -> Op:
    """Rebuild an op from :meth:`Op.to_dict` output."""
    if not isinstance(data, dict) or "name" not in data:
        raise PipelineError(f"op dict: Expected {{'name': ..., 'configuration': {{...}}}}. Got {data!r}.")
    name = data["name"]
    if name not in OPS:
        raise PipelineError(f"op dict: Expected a name among {sorted(OPS)}. Got {name!r}.")
    config = dict(data.get("configuration", {}))
    for key, value in config.items():
        if isinstance(value, list):
            config[key] = tuple(value)
    try:
        return OPS[name](**config)
    except TypeError as exc:
        raise PipelineError(f"op dict for {name}: {exc}") from None


__all__ = [
    "DTYPES",
    "Op",
    "Spec",
    "RandomResizedCrop",
    "Resize",
    "CenterCrop",
    "RandomHorizontalFlip",
    "Normalize",
    "ToDtype",
    "Grayscale",
    "RGB",
    "ToRGB",
    "RandomErasing",
    "ColorJitter",
    "TrivialAugmentWide",
    "RandAugment",
    "canonical_dtype",
    "op_from_dict",
]
