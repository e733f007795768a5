"""Sizes of lossless v2 (and v1) against PNG and WebP lossless, image by image.

    python -m prepkit.bench.lossless_sizes
    python -m prepkit.bench.lossless_sizes out/evalsets --sets rendered --limit 12

Without a folder: the small built-in sets below. With one: the evaluation sets of
`python -m prepkit.bench.evalsets build` (the first `--limit` images of each set, by name).

Sets: photographs (scikit-image's data photos and samples/photos PNGs), rendered/flat
content (a matplotlib plot, a text/UI-like screenshot, gradients, palette art, a retina
image with its black border) and segmentation masks (SLIC and Felzenszwalb labels of the
photos, uint8, one channel). Needs scikit-image, matplotlib and Pillow with WebP.
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np


def _png(a: np.ndarray) -> int:
    from PIL import Image

    b = io.BytesIO()
    Image.fromarray(a).save(b, "PNG")
    return len(b.getvalue())


def _webp(a: np.ndarray) -> int:
    from PIL import Image

    b = io.BytesIO()
    Image.fromarray(a).save(b, "WEBP", lossless=True, method=6)
    return len(b.getvalue())


def _rendered() -> dict[str, np.ndarray]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import skimage.data as sd
    from PIL import Image, ImageDraw

    fig = plt.figure(figsize=(6, 4), dpi=100)
    plt.plot(np.sin(np.linspace(0, 10, 100)))
    plt.title("plot")
    plt.grid()
    fig.canvas.draw()
    plot = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()  # type: ignore[attr-defined]  # the Agg canvas
    plt.close(fig)
    ui = Image.new("RGB", (640, 400), (240, 240, 240))
    draw = ImageDraw.Draw(ui)
    for i in range(12):
        draw.rectangle((10, 10 + 32 * i, 630, 36 + 32 * i), fill=(255, 255, 255), outline=(180, 180, 200))
        draw.text((20, 16 + 32 * i), f"Item {i}: settings, files and a longer line of text", fill=(20, 20, 20))
    yy, xx = np.mgrid[0:300, 0:400]
    gradient = np.stack([xx * 255 // 399, yy * 255 // 299, (xx + yy) * 255 // 698], 2).astype(np.uint8)
    palette = np.array([[30, 30, 60], [200, 40, 40], [250, 220, 90], [40, 160, 90]], np.uint8)
    art = palette[((xx // 25) ^ (yy // 25)) % 4]
    return {"plot": plot, "ui": np.asarray(ui), "gradient": gradient, "palette": art, "retina": sd.retina()}


def sets() -> dict[str, dict[str, np.ndarray]]:
    """name -> {image name -> pixels}."""
    import skimage.data as sd
    from skimage.segmentation import felzenszwalb, slic

    photos = {n: getattr(sd, n)() for n in ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field")}
    masks = {}
    for n in ("astronaut", "coffee", "chelsea"):
        masks[f"slic_{n}"] = slic(photos[n], n_segments=12, start_label=0).astype(np.uint8)
        masks[f"fz_{n}"] = (felzenszwalb(photos[n], scale=800) % 256).astype(np.uint8)
    return {"photos": photos, "rendered": _rendered(), "masks": masks}


def evaluation_sets(folder: str, names: Sequence[str] | None, limit: int | None) -> dict[str, dict[str, np.ndarray]]:
    """The evaluation sets of `folder` as name -> {file name -> pixels}, `limit` images each."""
    from prepkit.bench.evalsets import load_manifest

    found = load_manifest(folder)
    return {name: {Path(entry.file).name: pixels for entry, pixels in found[name][:limit]}
            for name in found if not names or name in names}


def main(argv: Sequence[str] | None = None) -> None:
    from prepkit import lossless

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets_dir", nargs="?", help="evaluation sets (prepkit.bench.evalsets build)")
    parser.add_argument("--sets", nargs="+", help="only these sets of the folder")
    parser.add_argument("--limit", type=int, help="the first this many images of each set")
    args = parser.parse_args(argv)
    chosen = evaluation_sets(args.sets_dir, args.sets, args.limit) if args.sets_dir else sets()

    coders: dict[str, Callable[[np.ndarray], int]] = {
        "PNG": _png,
        "WebP-m6": _webp,
        "v1": lambda a: len(lossless.encode(a, version=1)),
        "v2": lambda a: len(lossless.encode(a)),
    }
    print("| set | images | PNG bytes | WebP-m6 / PNG | v1 / PNG | v2 / PNG | v2 / WebP-m6 |")
    print("|---|---|---|---|---|---|---|")
    for name, images in chosen.items():
        totals = {k: sum(f(a) for a in images.values()) for k, f in coders.items()}
        png = totals["PNG"]
        print(f"| {name} | {len(images)} | {png} | {totals['WebP-m6'] / png:.3f} | {totals['v1'] / png:.3f} "
              f"| {totals['v2'] / png:.3f} | {totals['v2'] / totals['WebP-m6']:.3f} |")
        for image, a in images.items():
            p, w, v2 = _png(a), _webp(a), len(lossless.encode(a))
            print(f"|   {image} {a.shape} | | {p} | {w / p:.3f} | | {v2 / p:.3f} | {v2 / w:.3f} |", flush=True)


if __name__ == "__main__":
    main()
