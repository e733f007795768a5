"""Rebuild samples/photos from the public-domain photographs bundled in scikit-image.

Run once by a maintainer (``python samples/make_photos.py``); the output is committed, so
``make demo`` and the tests need neither scikit-image nor a network. Each class folder
holds the original photo and a few crops of it, as JPEG (quality 92) or PNG.
"""

from __future__ import annotations

import os
from pathlib import Path

from PIL import Image

PHOTOS = {
    "cat": ["chelsea.png"],
    "coffee": ["coffee.png"],
    "motorcycle": ["motorcycle_left.png", "motorcycle_right.png"],
    "space": ["hubble_deep_field.jpg", "rocket.jpg", "astronaut.png"],
    "medical": ["retina.jpg", "ihc.png"],
}


def main() -> None:
    import skimage

    data = Path(os.path.dirname(skimage.__file__)) / "data"
    out = Path(__file__).parent / "photos"
    for label, names in PHOTOS.items():
        (out / label).mkdir(parents=True, exist_ok=True)
        for number, name in enumerate(names):
            image = Image.open(data / name).convert("RGB")
            if max(image.size) > 800:
                image.thumbnail((800, 800), Image.Resampling.LANCZOS)
            stem = Path(name).stem
            fmt = "PNG" if number % 2 else "JPEG"
            suffix = ".png" if fmt == "PNG" else ".jpg"
            image.save(out / label / f"{stem}{suffix}", fmt, quality=92)
            width, height = image.size
            crop = image.crop((width // 4, height // 4, width // 4 + width // 2, height // 4 + height // 2))
            crop.save(out / label / f"{stem}_crop.jpg", "JPEG", quality=92)


if __name__ == "__main__":
    main()
