"""Reproduce L3's decode comparison (ECCV 2022) on this machine with prepkit bench-decode.

Builds two sets of real photographs (scikit-image's bundled public-domain photos, nothing
downloaded) as PNG folders:
- Cityscapes-like: 10 images at 2048x1024 (mosaics of native-resolution photo crops);
- ImageNet-like: 17 images at about 500x375;
then runs `prepkit bench-decode` on each, writing JSON and a chart next to them:

    python recipes/l3_comparison.py [--out out/l3] [--threads N] [--repeat 5]

The headline figure for L3's claim is prepkit-lossless on cuda (host-to-device copy
included) over PNG decoding on all CPU cores (L3: 9.29x on an A100).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from PIL import Image


def write_set(images: list, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for number, image in enumerate(images):
        Image.fromarray(image).save(folder / f"{number:03d}.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="out/l3")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--device", default="all", choices=["cpu", "cuda", "all"])
    args = parser.parse_args()

    from prepkit.bench.photos import cityscapes_like, imagenet_like

    out = Path(args.out)
    for name, make in (("cityscapes", cityscapes_like), ("imagenet", imagenet_like)):
        folder = out / name
        write_set(make(), folder)
        command = [sys.executable, "-m", "prepkit", "bench-decode", str(folder), "--repeat", str(args.repeat),
                   "--device", args.device, "--json", str(out / f"{name}.json"), "--plot", str(out / f"{name}.png")]
        if args.threads:
            command += ["--threads", str(args.threads)]
        print("$", " ".join(command), flush=True)
        subprocess.run(command, check=True)


if __name__ == "__main__":
    main()
