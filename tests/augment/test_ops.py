"""Op validation, dict round trips and the pipeline's order checks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from prepkit.augment import (
    CenterCrop,
    Normalize,
    Pipeline,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToDtype,
    op_from_dict,
)
from prepkit.errors import PipelineError

ALL_OPS = [
    RandomResizedCrop(224, scale=(0.3, 0.9), ratio=(0.5, 2.0), antialias=False),
    RandomResizedCrop((32, 48)),
    CenterCrop(7),
    Resize(256),
    Resize((10, 20), antialias=False),
    RandomHorizontalFlip(0.25),
    Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    ToDtype(np.float16, scale=True),
    ToDtype("bfloat16"),
]


@pytest.mark.parametrize("op", ALL_OPS, ids=lambda op: type(op).__name__)
def test_dict_round_trip_through_json(op) -> None:
    data = json.loads(json.dumps(op.to_dict()))
    assert op_from_dict(data) == op


def test_pipeline_dict_round_trip() -> None:
    pipe = Pipeline([RandomResizedCrop(8), RandomHorizontalFlip(), ToDtype("float32", scale=True)], layout="NHWC")
    again = Pipeline.from_dict(json.loads(json.dumps(pipe.to_dict())))
    assert again.ops == pipe.ops and again.layout == "NHWC"


def test_fields_are_normalised() -> None:
    assert RandomResizedCrop(5).size == (5, 5)
    assert CenterCrop([3, 4]).size == (3, 4)
    assert Resize(7).size == 7 and Resize([7]).size == 7
    assert Normalize(0.5, 0.25).mean == (0.5,)


@pytest.mark.parametrize(
    "given, expected",
    [("float32", "float32"), (np.float16, "float16"), (np.dtype("uint8"), "uint8"), ("bf16", "bfloat16"),
     ("float", "float32")],
)  # fmt: skip
def test_dtype_spellings(given, expected) -> None:
    assert ToDtype(given).dtype == expected


def test_torch_dtypes_are_accepted() -> None:
    torch = pytest.importorskip("torch")
    assert ToDtype(torch.bfloat16).dtype == "bfloat16"
    assert ToDtype(torch.float32).dtype == "float32"
    assert ToDtype(torch.uint8).dtype == "uint8"


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: RandomResizedCrop(0), "positive"),
        (lambda: RandomResizedCrop(4, scale=(0.9, 0.1)), "low <= high"),
        (lambda: RandomResizedCrop(4, ratio=(0.0, 1.0)), "0 < low"),
        (lambda: RandomResizedCrop(4, antialias=1), "bool"),
        (lambda: CenterCrop((1, 2, 3)), "(h, w)"),
        (lambda: Resize(-3), "positive"),
        (lambda: RandomHorizontalFlip(1.5), "0 <= p <= 1"),
        (lambda: Normalize((0.5, 0.5), (1.0, 0.0)), "non-zero"),
        (lambda: Normalize((0.5, 0.5), (1.0, 1.0, 1.0)), "same length"),
        (lambda: ToDtype("int32"), "Expected one of"),
        (lambda: op_from_dict({"name": "Solarize"}), "Expected a name"),
    ],
)
def test_bad_fields_say_what_was_expected(make, words) -> None:
    with pytest.raises(PipelineError, match=None) as info:
        make()
    assert words in str(info.value)
    assert isinstance(info.value, ValueError)


def test_normalize_on_uint8_is_rejected_like_torchvision() -> None:
    with pytest.raises(PipelineError, match="float image.*Got uint8.*ToDtype"):
        Pipeline([RandomResizedCrop(8), Normalize((0.5,), (0.5,))])


def test_two_resampling_ops_are_rejected() -> None:
    with pytest.raises(PipelineError, match="at most one resampling op.*single resampling.*Resize"):
        Pipeline([Resize(16), CenterCrop(8), RandomResizedCrop(4)])


def test_value_op_after_float_to_uint8_is_rejected() -> None:
    with pytest.raises(PipelineError, match="last value op"):
        Pipeline([ToDtype("float32", scale=True), ToDtype("uint8", scale=True), ToDtype("float32")])


def test_resample_after_float_to_uint8_is_rejected() -> None:
    with pytest.raises(PipelineError, match="before ToDtype\\(uint8\\)"):
        Pipeline([ToDtype("float32"), ToDtype("uint8"), Resize(4)])


def test_static_center_crop_larger_than_resize_is_rejected() -> None:
    with pytest.raises(PipelineError, match="no larger than the image"):
        Pipeline([Resize((8, 8)), CenterCrop(9)])


def test_center_crop_larger_than_an_image_names_the_sample() -> None:
    pipe = Pipeline([CenterCrop(5)])
    with pytest.raises(PipelineError, match="sample index 11 at 4x9"):
        pipe.params(np.array([[9, 9, 3], [4, 9, 3]], np.int32), [10, 11])


def test_mixed_output_sizes_need_a_crop() -> None:
    pipe = Pipeline([Resize(4)])
    params = pipe.params(np.array([[8, 8, 1], [8, 16, 1]], np.int32), [0, 1])
    with pytest.raises(PipelineError, match="same size"):
        pipe(np.zeros(192, np.uint8), np.array([0, 64]), np.array([[8, 8, 1], [8, 16, 1]], np.int32), params)


def test_normalize_channel_count_is_checked_at_run_time() -> None:
    pipe = Pipeline([ToDtype("float32"), Normalize((0.5, 0.5, 0.5), (1, 1, 1))])
    shapes = np.array([[2, 2, 4]], np.int32)
    with pytest.raises(PipelineError, match="1 or 4 values.*Got 3"):
        pipe(np.zeros(16, np.uint8), np.array([0]), shapes, pipe.params(shapes, [0]))


def test_output_dtype_is_declared_before_data_moves() -> None:
    assert Pipeline([RandomResizedCrop(4)]).dtype == "uint8"
    assert Pipeline([RandomResizedCrop(4), ToDtype("bfloat16", scale=True)]).dtype == "bfloat16"
    assert Pipeline([Resize((3, 5)), CenterCrop(2)]).spec.size == (2, 2)
