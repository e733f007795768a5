"""Compile prepkit's numba CPU kernels ahead of the first batch, into numba's disk cache.

numba compiles a kernel the first time it runs and keeps the machine code in its disk cache
(``__pycache__`` beside the module, or ``NUMBA_CACHE_DIR``). On a fresh install the lossless
decoders' entry points compile for minutes (123-142 s on one core of the dev VM's Xeon, 2026-11-29,
``make compile-audit``; 337 s before stop 49 stopped literal arguments from compiling kernels
twice), the encoders' for about 96 s, and every process that starts before the cache
is filled compiles again on its own. ``prepkit warmup`` fills the cache once, its parts in
parallel processes (none waits for another's compile): run it in a container image's build,
or once before a training job's ranks start.

The parts run the paths a user runs on tiny images: ``encode`` (``lossless.encode``, every
tile kind, v1 and v2), ``decode`` (``lossless.decode``, ``decode_batch`` and the Reader's
planned decode, whole images and crops, of streams written by the numpy reference encoders so
that this part does not wait for the encoder's compile), ``reader`` (a Reader over a raw
store with the usual crop, flip, cast and normalise: the fused augmentation kernels) and
``augment`` (the colour stage of ColorJitter and the policies, on uint8 and float32 pixels,
RandomErasing, 16-bit outputs, the channel ops, masks, CutMix and MixUp).
"""

from __future__ import annotations

import multiprocessing
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from prepkit.layouts import Layout


def _photo(height: int, width: int, channels: int, seed: int) -> np.ndarray:
    """Smooth gradients and noise: a tile the encoder codes with predictors."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    planes = [96 + 40 * np.sin(x / (5 + c) + seed) + 30 * np.cos(y / (7 + c)) + rng.normal(0, 3, (height, width))
              for c in range(channels)]
    return np.clip(np.stack(planes, axis=-1), 0, 255).astype(np.uint8)


def _mask(height: int, width: int) -> np.ndarray:
    """A label mask (one channel): constant tiles and runs tiles."""
    y, x = np.mgrid[0:height, 0:width]
    return (((x // 9) + (y // 13)) % 4 * ((x - 20) ** 2 + (y - 20) ** 2 < 300)).astype(np.uint8)[:, :, None]


def _images() -> list[np.ndarray]:
    """One image of each kind the encoders treat differently, each with partial edge tiles."""
    photo = _photo(41, 70, 3, 1)
    flat = np.repeat(np.repeat(_photo(5, 9, 3, 2), 8, axis=0), 8, axis=1)[:37, :67]  # runs tiles
    colours = np.array([[10, 20, 30], [200, 100, 50], [0, 255, 0], [90, 90, 90]], np.uint8)
    dithered = colours[np.random.default_rng(5).integers(0, 4, (33, 40))]  # palette tiles
    return [photo, flat, dithered, _photo(35, 34, 1, 3), _photo(19, 23, 4, 4), _mask(45, 50)]


def _encode() -> None:
    from prepkit import lossless

    for image in _images():
        for version in (1, 2):
            lossless.encode(image, tile=16, version=version)
        lossless.encode(image, tile=16, fast_decode=True)
    lossless.encode(_photo(30, 28, 3, 6), tile=32)  # one tile: the short path (small_encoder)
    # 32 tiles and more (table_sets.MIN_TILES): table sets per tile class, in the short path;
    # more than small_encoder.MAX_TILES: the general encoder, with palette tiles, and
    # mask_encoder's call from it
    colours = np.array([[10, 20, 30], [200, 100, 50], [0, 255, 0], [90, 90, 90]], np.uint8)
    dithered = colours[np.random.default_rng(6).integers(0, 4, (64, 128))]
    lossless.encode(np.concatenate([_photo(64, 128, 3, 7), dithered], axis=1), tile=16)
    lossless.encode(np.concatenate([_photo(272, 128, 3, 8), np.tile(dithered, (5, 1, 1))[:272]], axis=1), tile=16)
    lossless.encode(_mask(272, 256), tile=16)


def _decode() -> None:
    from prepkit import lossless
    from prepkit.lossless import reference, reference_v2

    images = _images()
    streams = [reference_v2.encode(image, tile=16) for image in images] + [reference.encode(images[0], tile=16)]
    lossless.decode_batch(streams, device="cpu")
    lossless.decode_batch_packed(streams, "cpu", [(1, 2, 12, 20)] * len(streams))
    lossless.decode(streams[0], roi=(3, 4, 20, 33))
    for stream in streams:  # lossless.decode's one compiled call (v2) and its batch path (v1)
        lossless.decode(stream)
    with tempfile.TemporaryDirectory(prefix="prepkit-warmup-") as folder:
        store = _store(Path(folder), images[:2], streams[:2])
        _read(store)


def _reader() -> None:
    from prepkit.layouts import RawLayout

    images = [_photo(30 + 4 * i, 40 - 3 * i, 3, i) for i in range(4)]
    layout = RawLayout()
    with tempfile.TemporaryDirectory(prefix="prepkit-warmup-") as folder:
        _read(_store(Path(folder), images, [layout.encode(image) for image in images], layout))


def _augment() -> None:
    """What the reader part's transforms do not reach: the colour stage (ColorJitter and the
    policies, on uint8 and on float32 pixels), RandomErasing, float16 / bfloat16 outputs, the
    channel ops, masks through crops and through the policies' geometric steps, and CutMix
    and MixUp."""
    from prepkit.augment import (
        RGB,
        CenterCrop,
        ColorJitter,
        CutMix,
        Grayscale,
        MixUp,
        Normalize,
        Pipeline,
        RandAugment,
        RandomErasing,
        RandomHorizontalFlip,
        RandomResizedCrop,
        ToDtype,
        TrivialAugmentWide,
    )

    def packed(images: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        shapes = np.array([image.shape for image in images], np.int32)
        offsets = np.concatenate([[0], np.cumsum([image.size for image in images])[:-1]]).astype(np.int64)
        return np.concatenate([image.ravel() for image in images]), offsets, shapes

    flat, offsets, shapes = packed([_photo(13, 12, 3, 5), _photo(9, 14, 3, 6)])
    to_float, normalize = ToDtype("float32", scale=True), Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    jitter = ColorJitter(0.4, 0.4, 0.4, 0.1)
    for ops in ([RandomResizedCrop(8), RandomHorizontalFlip(), jitter, to_float, normalize],  # uint8 stage
                [CenterCrop(8), to_float, TrivialAugmentWide(), normalize, RandomErasing(1.0)],  # float32 stage
                [RandomResizedCrop(8), jitter, RandomErasing(1.0)],  # uint8 out
                [RandomResizedCrop(8), RandomHorizontalFlip(), ToDtype("bfloat16", scale=True)]):  # 16-bit out
        pipe = Pipeline(ops)
        pipe(flat, offsets, shapes, pipe.params(shapes, np.arange(2)))
    flat, offsets, shapes = packed([_photo(13, 12, 3, 5), _photo(11, 11, 1, 7), _photo(7, 9, 4, 8)])
    for channel_op in (RGB(), Grayscale()):  # (a batch of mixed channel counts)
        pipe = Pipeline([channel_op])
        pipe.apply_packed(flat, offsets, shapes, pipe.params(shapes, np.arange(3)))
    flat, offsets, shapes = packed([_mask(12, 13), _mask(10, 9)])
    for ops in ([RandomResizedCrop(8), RandomHorizontalFlip()], [CenterCrop(8), RandAugment(num_ops=2, magnitude=25)]):
        pipe = Pipeline(ops)
        pipe.apply_mask(flat, offsets, shapes, pipe.params(shapes, np.arange(2)))
    labels = np.arange(2)
    batch = np.stack([_photo(8, 8, 3, 9), _photo(8, 8, 3, 10)]).transpose(0, 3, 1, 2)  # N, C, H, W
    MixUp(alpha=0.2, num_classes=2)(batch.astype(np.float32), labels)
    for dtype in (np.float32, np.float16, np.uint8):
        CutMix(alpha=1.0, num_classes=2)(batch.astype(dtype), labels)


def _store(folder: Path, images: list[np.ndarray], encoded: list[bytes], layout: Layout | None = None) -> Path:
    """A store of ``images`` whose stored bytes are ``encoded`` (lossless v2 by default)."""
    from prepkit.layouts import LosslessLayout
    from prepkit.store.writer import EncodedSample, plan_store, write_all

    shapes = [(int(h), int(w), int(c)) for h, w, c in (image.shape for image in images)]
    plan = plan_store({"image": layout or LosslessLayout(tile=16)}, {"image": shapes}, 2, class_names=None,
                      provenance={"command": "prepkit warmup"}, items_digest="warmup")
    dest = folder / "store"
    write_all(dest, plan, lambda i: EncodedSample(i, str(i), i % 2, {"image": (encoded[i], shapes[i])}))
    return dest


def _read(store: Path) -> None:
    """Every batch of a Reader with the usual training transforms, then of one without any."""
    import prepkit
    from prepkit.augment import Normalize, RandomHorizontalFlip, RandomResizedCrop, ToDtype

    ops = [RandomResizedCrop(8), RandomHorizontalFlip(), ToDtype("float32", scale=True),
           Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]
    for transforms in (ops, []):
        for _ in prepkit.Reader(store, batch_size=2, transforms=transforms, prefetch=0):
            pass


PARTS: dict[str, Callable[[], None]] = {"decode": _decode, "encode": _encode, "reader": _reader,
                                        "augment": _augment}


@dataclass(frozen=True)
class PartResult:
    """How one part went: its wall time, and the error that stopped it (None when it ran)."""

    name: str
    seconds: float
    error: str | None = None


def run_part(name: str) -> PartResult:
    """Run one part in this process (``warm`` runs each in its own)."""
    start = time.perf_counter()
    try:
        PARTS[name]()
    except Exception as exc:  # reported by the parent, which names the part
        return PartResult(name, time.perf_counter() - start, f"{type(exc).__name__}: {exc}")
    return PartResult(name, time.perf_counter() - start)


def warm(parts: Iterable[str] = tuple(PARTS), jobs: int | None = None,
         on_done: Callable[[PartResult], None] = lambda result: None) -> list[PartResult]:
    """Run ``parts`` (names in PARTS) in ``jobs`` spawned processes (default: one per part),
    so that later processes load their kernels from numba's disk cache. Returns one result
    per part, in the order they finished; ``on_done`` sees each as it finishes."""
    names = list(dict.fromkeys(parts))
    unknown = [name for name in names if name not in PARTS]
    if unknown or not names:
        raise ValueError(f"Expected warm-up parts among {sorted(PARTS)}. Got {unknown or names}.")
    if jobs is not None and jobs < 1:
        raise ValueError(f"Expected jobs >= 1. Got {jobs}.")
    results = []
    start = time.perf_counter()
    # spawn, not fork: a fork after numba's OpenMP threads have run kills the child.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs or len(names), mp_context=context) as pool:
        futures = {pool.submit(run_part, name): name for name in names}
        for future in as_completed(futures):
            try:
                result = future.result()
            except Exception as exc:  # the process itself died (a crash in compiled code, killed)
                result = PartResult(futures[future], time.perf_counter() - start, f"{type(exc).__name__}: {exc}")
            on_done(result)
            results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    """``python -m prepkit.warmup [PART ...]``: the CLI's warm-up without click (the GPU
    machine's image has numba but not the command line's dependencies). Exit 1 when a part
    failed, 2 for an unknown part."""
    import sys

    from prepkit import warmup  # (run as __main__, this module's functions would pickle by that name)

    names = (sys.argv[1:] if argv is None else argv) or list(PARTS)
    try:
        results = warmup.warm(names, on_done=lambda result: print(
            f"warmup {result.name}: {result.seconds:.1f} s" + (f", failed: {result.error}" if result.error else ""),
            flush=True))
    except ValueError as error:
        print(f"warmup: {error}", file=sys.stderr)
        return 2
    return 1 if any(result.error for result in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
