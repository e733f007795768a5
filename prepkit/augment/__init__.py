"""Fused image augmentation on CPU (numba) and GPU (numba CUDA) with torchvision meaning."""

from prepkit.augment.batch import CutMix, MixUp
from prepkit.augment.ops import (
    RGB,
    CenterCrop,
    ColorJitter,
    Grayscale,
    Normalize,
    Op,
    RandAugment,
    RandomErasing,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToDtype,
    ToRGB,
    TrivialAugmentWide,
    op_from_dict,
)
from prepkit.augment.params import Params
from prepkit.augment.pipeline import Pipeline

__all__ = [
    "RGB",
    "CenterCrop",
    "ColorJitter",
    "CutMix",
    "Grayscale",
    "MixUp",
    "Normalize",
    "Op",
    "Params",
    "Pipeline",
    "RandAugment",
    "RandomErasing",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "ToDtype",
    "ToRGB",
    "TrivialAugmentWide",
    "op_from_dict",
]
