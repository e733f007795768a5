"""Fused image augmentation on CPU (numba) and GPU (numba CUDA) with torchvision meaning."""

from prepkit.augment.batch import CutMix, MixUp
from prepkit.augment.ops import (
    RGB,
    CenterCrop,
    Grayscale,
    Normalize,
    Op,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToDtype,
    ToRGB,
    op_from_dict,
)
from prepkit.augment.params import Params
from prepkit.augment.pipeline import Pipeline

__all__ = [
    "RGB",
    "CenterCrop",
    "CutMix",
    "Grayscale",
    "MixUp",
    "Normalize",
    "Op",
    "Params",
    "Pipeline",
    "RandomErasing",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "ToDtype",
    "ToRGB",
    "op_from_dict",
]
