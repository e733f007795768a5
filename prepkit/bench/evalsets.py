"""Evaluation sets for the lossless codec, built from images that installable packages ship.

``python -m prepkit.bench.evalsets build OUT [--small] [--max-per-set N]`` writes PNG files into
``OUT/<set>/`` and ``OUT/manifest.json`` (one record per file: set, file, source package, kind,
shape). Nothing is downloaded: the images come from scikit-image's wheel, from Debian's wallpaper
packages where they are installed, and from figures rendered here.

Sets:

- ``photos``: scikit-image's photographs and the photographic wallpapers of ``gnome-backgrounds``,
  ``plasma-workspace-wallpapers``, ``lomiri-wallpapers`` and ``ukui-wallpapers``;
- ``rendered``: the non-photographic wallpapers (desktop art, synthetic renders) and screenshots
  rendered here (matplotlib figures, UI-like panels, a terminal);
- ``medical``: images with black borders or backgrounds (fundus photographs, microscopy, a
  tomography phantom), 1 and 3 channels, and axial slices of a real head CT (Debian's
  ``invesalius-examples``: 108 slices of 256 x 256, int16 Hounsfield units) mapped to 8 bits
  with the study's own display window, as 2-D training pipelines do;
- ``masks``: uint8 single-channel segmentation masks with at most 20 labels, among them the
  CT study's own segmentation (background, soft tissue, bone) of the same slices;
- ``screenshots``: real application screenshots, the figures of Debian's documentation packages
  ``gnome-user-docs`` (GNOME Shell), ``gimp-help-en`` (GIMP's dialogs and preferences) and
  ``gnucash-docs`` (GnuCash's windows and registers), read as RGB; where none of them is
  installed (and in small builds), the terminal and UI panel drawn here stand in.

Large images keep their native resolution: the longer side is capped by cropping the centre,
never by resizing, which would smooth the noise of a photograph and flatter every codec.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

SETS = ("photos", "rendered", "medical", "masks", "screenshots")
WALLPAPER_PACKAGES = ("gnome-backgrounds", "plasma-workspace-wallpapers", "lomiri-wallpapers", "ukui-wallpapers")
WALLPAPER_FOLDERS = ("/usr/share/backgrounds", "/usr/share/wallpapers")
# Where each documentation package keeps its English screenshots (the C locale's figures).
# GIMP's other image folders hold filter examples and tutorials (photographs): not used.
SCREENSHOT_FOLDERS = {
    "gnome-user-docs": ("/usr/share/help/C/gnome-help/figures",),
    "gimp-help-en": ("/usr/share/gimp/2.0/help/en/images/dialogs", "/usr/share/gimp/2.0/help/en/images/preferences"),
    "gnucash-docs": ("/usr/share/help/C/gnucash-guide/figures",),
}
SCREENSHOT_PACKAGES = tuple(SCREENSHOT_FOLDERS)
MIN_SCREENSHOT_PIXELS = 100_000  # smaller figures are icons, buttons and single bars
MAX_SIDE = 2560
SMALL_SIDE = 128
MAX_LABELS = 20

# scikit-image's bundled photographs (skimage/data/), each a camera picture of a real scene.
SKIMAGE_PHOTOS = (
    "astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "hubble_deep_field.jpg",
    "motorcycle_left.png", "motorcycle_right.png", "ihc.png", "camera.png", "coins.png",
    "moon.png", "brick.png", "grass.png", "gravel.png",
)
# A fundus photograph, a tomography phantom and microscopy with black surroundings, then a
# fundus close-up without border (last: the tiny sets keep the first three).
SKIMAGE_MEDICAL = ("retina.jpg", "phantom.png", "cell.png", "microaneurysms.png")
# Binary silhouettes shipped as images: masks as they are.
SKIMAGE_MASKS = ("horse.png",)
# A head CT and its two threshold masks, saved by InVesalius (a gzipped tar of plists and raw
# arrays); its slices join the medical set and its masks the masks set.
CT_PACKAGE = "invesalius-examples"
CT_STUDY = "/usr/share/doc/invesalius-examples/examples/Cranium.inv3"
CT_SLICES = 8

# The wallpapers that are photographs of real scenes, by file stem (Ubuntu/UKUI/Lomiri under
# /usr/share/backgrounds) or theme folder (Plasma under /usr/share/wallpapers). Chosen by looking
# at each one: every other wallpaper is desktop art (gradients, vector shapes, 3-D renders,
# painted illustrations such as Plasma's "Autumn") and goes to ``rendered``.
PHOTOGRAPHIC_WALLPAPERS = frozenset({
    # Ubuntu / Lomiri / UKUI photographs
    "Bridge_by_Sander_Klootwijk", "Dragonfly_by_Bolly", "Kleiber_by_Lukas_Baubkus",
    "Picture_0B_by_freespace", "Picture_1A_by_freespace", "Wine_by_Jakkub_Mede",
    "aitzgorri_by_Aitzol_Berasategi", "analogpattern_by_Peter_Nerlich", "free_by_Peter_Nerlich",
    "friends_by_Aitzol_Berasategi", "greentock_by_Peter_Nerlich", "life_by_Aitzol_Berasategi",
    "picosdeeuropa_by_Aitzol_Berasategi", "seeding_by_Clements_Engelhardt", "sunset_by_Aitzol_Berasategi",
    # Plasma themes that are photographs
    "BytheWater", "ColdRipple", "ColorfulCups", "DarkestHour", "EveningGlow", "FallenLeaf",
    "Grey", "Kite", "OneStandsOut", "Path", "summer_1am",
})
RASTER_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")  # SVG wallpapers need a rasteriser: not used


@dataclass
class Entry:
    """One file of an evaluation set, as recorded in the manifest."""

    set: str
    file: str  # relative to the output folder
    source: str  # the package the pixels come from, or "rendered (library)"
    kind: str
    height: int
    width: int
    channels: int


def crop_centre(image: np.ndarray, max_side: int) -> np.ndarray:
    """The centre of ``image`` with both sides at most ``max_side`` (no resampling)."""
    height, width = image.shape[:2]
    new_h, new_w = min(height, max_side), min(width, max_side)
    y0, x0 = (height - new_h) // 2, (width - new_w) // 2
    return np.ascontiguousarray(image[y0 : y0 + new_h, x0 : x0 + new_w])


def shrink(image: np.ndarray, max_side: int) -> np.ndarray:
    """``image`` resized (Lanczos) so that its longer side is at most ``max_side``."""
    picture = Image.fromarray(image)
    picture.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    return np.asarray(picture).copy()


def _read(path: str, mode: str) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert(mode)).copy()


def _skimage_dir() -> str:
    from prepkit.bench.photos import data_dir

    return data_dir()


# --------------------------------------------------------------------------- wallpapers


def package_owners(packages: tuple[str, ...], dpkg_info: str = "/var/lib/dpkg/info") -> tuple[dict[str, str], list[str]]:
    """(file path -> owning package, missing packages) from dpkg's file lists."""
    owners: dict[str, str] = {}
    missing = []
    for package in packages:
        lists = glob.glob(f"{dpkg_info}/{package}.list") + glob.glob(f"{dpkg_info}/{package}:*.list")
        # lomiri-wallpapers ships its images in versioned companion packages (lomiri-wallpapers-20.04)
        lists += glob.glob(f"{dpkg_info}/{package}-[0-9]*.list")
        if not lists:
            missing.append(package)
        for listing in lists:
            with open(listing) as handle:
                for line in handle:
                    owners[line.strip()] = package
    return owners, missing


def wallpapers() -> tuple[list[tuple[str, str, bool]], list[str]]:
    """([(path, package, photographic)], missing packages): one raster file per wallpaper.

    Plasma themes ship one picture at several resolutions; the largest is kept. The list takes
    the packages in turn.
    """
    owners, missing = package_owners(WALLPAPER_PACKAGES)
    chosen: dict[str, tuple[int, str]] = {}
    for folder in WALLPAPER_FOLDERS:
        for path in sorted(glob.glob(os.path.join(folder, "**", "*"), recursive=True)):
            if not path.lower().endswith(RASTER_SUFFIXES) or "screenshot" in os.path.basename(path):
                continue
            if path not in owners:
                continue
            key = path.split("/contents/")[0] if "/contents/" in path else os.path.splitext(path)[0]
            with Image.open(path) as image:
                pixels = image.width * image.height
            if key not in chosen or pixels > chosen[key][0]:
                chosen[key] = (pixels, path)
    by_package: dict[str, list[tuple[str, str, bool]]] = {}
    for key, (_, path) in sorted(chosen.items()):
        by_package.setdefault(owners[path], []).append(
            (path, owners[path], os.path.basename(key) in PHOTOGRAPHIC_WALLPAPERS))
    return _round_robin([by_package[p] for p in sorted(by_package)]), missing


def _round_robin(queues: list[list[Any]]) -> list[Any]:
    """The queues' items taken in turn, so that a cap on a set's size keeps every package in it."""
    found = []
    queues = [list(queue) for queue in queues]
    while any(queues):
        for queue in queues:
            if queue:
                found.append(queue.pop(0))
    return found


def screenshots(folders: dict[str, tuple[str, ...]] | None = None, dpkg_info: str = "/var/lib/dpkg/info",
                limit: int = 40) -> tuple[list[tuple[str, str]], list[str]]:
    """([(path, package)], missing packages): at most ``limit`` of the documentation packages'
    PNG screenshots of at least MIN_SCREENSHOT_PIXELS, the packages in turn. Each package's
    share is spread evenly over its files in name order, not the names that sort first."""
    folders = SCREENSHOT_FOLDERS if folders is None else folders
    owners, missing = package_owners(tuple(folders), dpkg_info)
    by_package = []
    for package, package_folders in sorted(folders.items()):
        paths = []
        for folder in package_folders:
            for path in sorted(glob.glob(os.path.join(folder, "*.png"))):
                if owners.get(path) != package:
                    continue
                with Image.open(path) as image:
                    if image.width * image.height >= MIN_SCREENSHOT_PIXELS:
                        paths.append((path, package))
        by_package.append(paths)
    # Each package's share of the limit: what taking them in turn would give it.
    shares = [0] * len(by_package)
    while sum(shares) < limit and any(share < len(paths) for share, paths in zip(shares, by_package, strict=True)):
        for k, paths in enumerate(by_package):
            if shares[k] < len(paths) and sum(shares) < limit:
                shares[k] += 1
    spread = [[paths[int(i)] for i in np.linspace(0, len(paths) - 1, share).round()] if share else []
              for share, paths in zip(shares, by_package, strict=True)]
    return _round_robin(spread), missing


# --------------------------------------------------------------------------- rendered images


def render_figures(width: int, height: int, seed: int = 0) -> list[tuple[str, np.ndarray]]:
    """Screenshot-like RGB images drawn with matplotlib: plots with text and a UI-like panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(seed)
    dpi = 100
    images = []

    def grab(figure: object) -> np.ndarray:
        figure.canvas.draw()  # type: ignore[attr-defined]
        pixels = np.asarray(figure.canvas.buffer_rgba())[:, :, :3].copy()  # type: ignore[attr-defined]
        plt.close(figure)  # type: ignore[arg-type]
        return pixels

    # A dashboard of line, bar, scatter plots and a table.
    figure, axes = plt.subplots(2, 2, figsize=(width / dpi, height / dpi), dpi=dpi)
    x = np.linspace(0, 10, 400)
    for k in range(4):
        axes[0, 0].plot(x, np.sin(x * (k + 1) / 2) + k * 0.3, label=f"series {k}")
    axes[0, 0].legend(fontsize=7)
    axes[0, 0].set_title("Training loss per epoch")
    axes[0, 1].bar([f"c{i}" for i in range(12)], rng.integers(5, 100, 12), color="tab:orange")
    axes[0, 1].set_title("Samples per class")
    axes[1, 0].scatter(rng.normal(size=300), rng.normal(size=300), s=6, c=rng.integers(0, 5, 300), cmap="tab10")
    axes[1, 0].grid(True)
    axes[1, 1].axis("off")
    cells = [[f"{rng.uniform(0, 1):.3f}" for _ in range(4)] for _ in range(8)]
    axes[1, 1].table(cellText=cells, colLabels=["precision", "recall", "f1", "iou"], loc="center")
    figure.suptitle("Experiment 42: validation report")
    images.append(("dashboard", grab(figure)))

    # A heat map with a colour bar and annotations.
    figure, axis = plt.subplots(figsize=(width / dpi, height / dpi), dpi=dpi)
    matrix = rng.integers(0, 50, (10, 10))
    axis.imshow(matrix, cmap="viridis")
    for (i, j), value in np.ndenumerate(matrix):
        axis.text(j, i, str(value), ha="center", va="center", color="white", fontsize=8)
    axis.set_title("Confusion matrix")
    images.append(("heatmap", grab(figure)))

    # A UI-like window: title bar, side bar, buttons and text fields on flat panels.
    figure = plt.figure(figsize=(width / dpi, height / dpi), dpi=dpi, facecolor="#ececec")
    panel = figure.add_axes((0, 0, 1, 1))
    panel.set_xlim(0, width)
    panel.set_ylim(height, 0)
    panel.axis("off")
    panel.add_patch(plt.Rectangle((0, 0), width, 36, color="#2d2d30"))
    panel.text(12, 24, "prepkit - settings", color="white", fontsize=11)
    panel.add_patch(plt.Rectangle((0, 36), 220, height - 36, color="#f6f6f6"))
    for row, name in enumerate(["General", "Storage", "Codecs", "Augment", "Reader", "About"]):
        panel.text(20, 80 + row * 34, name, fontsize=10, color="#1a1a1a" if row != 2 else "#0b62d6")
    for row in range(6):
        y = 70 + row * 60
        panel.text(250, y + 20, f"Option {row + 1}:", fontsize=10)
        panel.add_patch(plt.Rectangle((380, y), 360, 30, facecolor="white", edgecolor="#b0b0b0"))
        panel.text(390, y + 20, f"value-{int(rng.integers(1000))}", fontsize=9, color="#333333")
        panel.add_patch(plt.Rectangle((760, y), 90, 30, facecolor="#0b62d6", edgecolor="none"))
        panel.text(778, y + 20, "Apply", color="white", fontsize=9)
    images.append(("ui-panel", grab(figure)))
    return images


def render_terminal(width: int, height: int, seed: int = 0) -> np.ndarray:
    """A terminal-like RGB image: coloured monospace text on a dark background."""
    from PIL import ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    image = Image.new("RGB", (width, height), (30, 30, 30))
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    words = ["prepkit", "shard", "--layout", "lossless", "OK", "images/s", "tile", "zarr", "decode", "error:",
             "warning:", "/data/train", "epoch", "loss=0.231", "100%", "|#####|", "shards", "bytes"]
    colours = [(204, 204, 204), (106, 153, 85), (86, 156, 214), (206, 145, 120), (220, 220, 170)]
    line_height = 14
    for row in range(height // line_height):
        text = "$ " if row % 7 == 0 else ""
        text += " ".join(words[int(i)] for i in rng.integers(0, len(words), int(rng.integers(0, 12))))
        draw.text((6, 2 + row * line_height), text, fill=colours[int(rng.integers(len(colours)))], font=font)
    return np.asarray(image).copy()


# --------------------------------------------------------------------------- a CT study


@dataclass
class CtStudy:
    """An InVesalius project: the volume, its display window and its masks."""

    volume: np.ndarray  # int16 (slices, H, W), Hounsfield units
    window_level: float
    window_width: float
    masks: list[np.ndarray]  # bool (slices, H, W) each, in the project's mask order


def read_invesalius(path: str | Path) -> CtStudy:
    """Read an InVesalius 3 project (``.inv3``: a gzipped tar of plists and raw arrays). Its
    masks are stored one larger on every axis (index 0 holds no voxel): cut to the volume."""
    import plistlib
    import tarfile

    with tarfile.open(path, "r:gz") as archive:
        members = {Path(m.name).name: m for m in archive.getmembers() if m.isfile()}

        def read(name: str) -> bytes:
            handle = archive.extractfile(members[name])
            if handle is None:
                raise ValueError(f"{path}: {name} is not a file")
            return handle.read()

        main = plistlib.loads(read("main.plist"))
        matrix = main["matrix"]
        shape = tuple(int(n) for n in matrix["shape"])
        volume = np.frombuffer(read(matrix["filename"]), np.dtype(matrix["dtype"])).reshape(shape)
        masks = []
        for key in sorted(main.get("masks", {}), key=int):
            mask = plistlib.loads(read(main["masks"][key]))
            voxels = np.frombuffer(read(mask["mask_file"]), np.uint8).reshape(tuple(int(n) for n in mask["mask_shape"]))
            masks.append(voxels[1:, 1:, 1:][: shape[0], : shape[1], : shape[2]] > 127)
    return CtStudy(volume.astype(np.int16), float(main["window_level"]), float(main["window_width"]), masks)


def window(slice_hu: np.ndarray, level: float, width: float) -> np.ndarray:
    """Hounsfield units to uint8 through a display window (level +- width / 2 -> 0..255)."""
    scaled = (slice_hu.astype(np.float64) - (level - width / 2)) / width
    return (np.clip(scaled, 0.0, 1.0) * 255).round().astype(np.uint8)


def ct_labels(masks: list[np.ndarray]) -> np.ndarray:
    """One label map from nested threshold masks: 0 outside all, k where mask k - 1 is the
    last mask (in order of decreasing extent) that holds the voxel."""
    ordered = sorted(masks, key=lambda m: -int(m.sum()))
    labels = np.zeros(ordered[0].shape, np.uint8)
    for k, mask in enumerate(ordered):
        labels[mask] = k + 1
    return labels


def ct_slices(study: CtStudy, count: int = CT_SLICES) -> list[int]:
    """``count`` slice indices evenly spaced over the volume, its first and last tenth left out
    (the scanner's table and the top of the skull: mostly empty)."""
    n = study.volume.shape[0]
    return [int(k) for k in np.linspace(n // 10, n - 1 - n // 10, count).round()]


# --------------------------------------------------------------------------- masks


def slic_mask(photo: np.ndarray, segments: int = MAX_LABELS - 4) -> np.ndarray:
    """Superpixels of a photo as a label map (labels 0..<= 19)."""
    from skimage.segmentation import slic

    labels = slic(photo, n_segments=segments, compactness=10, start_label=0, channel_axis=-1)
    return _relabel(labels)


def felzenszwalb_mask(photo: np.ndarray) -> np.ndarray:
    """Felzenszwalb segments grouped into <= 20 classes by their mean brightness.

    Grouping by brightness keeps neighbouring similar segments in one class, as in semantic masks.
    """
    from skimage.segmentation import felzenszwalb

    segments = felzenszwalb(photo, scale=300, sigma=0.8, min_size=200)
    grey = photo.mean(axis=2)
    means = np.bincount(segments.ravel(), weights=grey.ravel()) / np.maximum(np.bincount(segments.ravel()), 1)
    classes = np.minimum((means * MAX_LABELS / 256).astype(np.int64), MAX_LABELS - 1)
    return _relabel(classes[segments])


def polygon_mask(width: int, height: int, seed: int) -> np.ndarray:
    """Random filled polygons and ellipses of up to 20 classes on a background of 0."""
    from PIL import ImageDraw

    rng = np.random.default_rng(seed)
    image = Image.new("L", (width, height), 0)
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(8, 30))):
        label = int(rng.integers(1, MAX_LABELS))
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        radius = rng.uniform(0.03, 0.25) * min(width, height)
        if rng.uniform() < 0.5:
            angles = np.sort(rng.uniform(0, 2 * np.pi, int(rng.integers(3, 9))))
            points = [(cx + radius * np.cos(a), cy + radius * np.sin(a)) for a in angles]
            draw.polygon(points, fill=label)
        else:
            draw.ellipse((cx - radius, cy - radius * 0.6, cx + radius, cy + radius * 0.6), fill=label)
    return np.asarray(image).copy()


def _relabel(labels: np.ndarray) -> np.ndarray:
    """Labels renumbered 0..k-1 in order of appearance value, folded into MAX_LABELS classes."""
    _, dense = np.unique(labels, return_inverse=True)
    return (dense.reshape(labels.shape) % MAX_LABELS).astype(np.uint8)


# --------------------------------------------------------------------------- the builder


def package_images(add: Callable[[str, str, np.ndarray, str, str], None], counts: dict[str, int],
                   per_set: int) -> list[str]:
    """Add the installed packages' images through ``add(set, name, pixels, source, kind)``: the
    CT study's slices and masks, the wallpapers (sets already holding ``counts[set] >=
    per_set`` images are not read) and the screenshots. Returns the packages not installed."""
    missing: list[str] = []
    if os.path.isfile(CT_STUDY):
        study = read_invesalius(CT_STUDY)
        labels = ct_labels(study.masks) if study.masks else None
        for k in ct_slices(study):
            add("medical", f"ct-{k:03d}", window(study.volume[k], study.window_level, study.window_width),
                CT_PACKAGE, "ct")
            if labels is not None:
                add("masks", f"ct-{k:03d}", labels[k], CT_PACKAGE, "mask-ct")
    else:
        missing.append(CT_PACKAGE)
    found, missing_wallpapers = wallpapers()
    missing += missing_wallpapers
    for path, package, photographic in found:
        stem = os.path.basename(path.split("/contents/")[0]) if "/contents/" in path else Path(path).stem
        set_name = "photos" if photographic else "rendered"
        if counts[set_name] >= per_set:
            continue
        add(set_name, stem, _read(path, "RGB"), package, "wallpaper-photo" if photographic else "wallpaper-art")
    shots, missing_docs = screenshots(limit=per_set)
    missing += missing_docs
    for path, package in shots:
        add("screenshots", f"{package.split('-')[0]}-{Path(path).stem}", _read(path, "RGB"), package,
            "screenshot-app")
    return missing


@dataclass
class Build:
    """What ``build`` wrote: the manifest entries and the wallpaper and documentation packages
    that were missing."""

    entries: list[Entry]
    missing_packages: list[str]


def build(out: str | Path, *, small: bool = False, max_per_set: int = 40,
          progress: bool = False) -> Build:
    """Write the five evaluation sets and ``manifest.json`` under ``out``.

    ``small`` builds tiny sets from scikit-image and rendered images only (tests, smoke runs):
    at most 128 pixels a side (scikit-image's pictures shrunk whole, rendered ones cropped),
    at most three images per set. ``max_per_set`` caps the
    number of images of each set (scikit-image and rendered images come first).
    """
    out = Path(out)
    side = SMALL_SIDE if small else MAX_SIDE
    per_set = min(max_per_set, 3) if small else max_per_set
    entries: list[Entry] = []
    counts = dict.fromkeys(SETS, 0)

    def add(set_name: str, name: str, image: np.ndarray, source: str, kind: str) -> None:
        if counts[set_name] >= per_set:
            return
        image = crop_centre(image, side)
        folder = out / set_name
        folder.mkdir(parents=True, exist_ok=True)
        relative = f"{set_name}/{counts[set_name]:03d}-{name}.png"
        Image.fromarray(image).save(out / relative, format="PNG", compress_level=1)
        channels = 1 if image.ndim == 2 else image.shape[2]
        entries.append(Entry(set_name, relative, source, kind, image.shape[0], image.shape[1], channels))
        counts[set_name] += 1
        if progress:
            print(f"  {relative} {image.shape}", file=sys.stderr)

    data = _skimage_dir()

    def read(name: str, mode: str) -> np.ndarray:
        pixels = _read(os.path.join(data, name), mode)
        # Tiny sets shrink whole pictures (only tests and smoke runs use them) so that a
        # medical image keeps its black border; full sets never resample.
        return shrink(pixels, side) if small else pixels

    grey_photos = ("camera.png", "coins.png", "moon.png", "brick.png", "grass.png", "gravel.png")
    photos = [(name, read(name, "L" if name in grey_photos else "RGB")) for name in SKIMAGE_PHOTOS]
    for name, photo in photos:
        add("photos", os.path.splitext(name)[0], photo, "scikit-image", "photo")

    for name in SKIMAGE_MEDICAL:
        mode = "RGB" if name == "retina.jpg" else "L"
        add("medical", os.path.splitext(name)[0], read(name, mode), "scikit-image",
            "fundus" if "retina" in name or "aneurysm" in name else ("phantom" if "phantom" in name else "microscopy"))
    # The fundus photograph again as one channel (green carries the vessels). cells3d,
    # human_mitosis, kidney and brain are not in the wheel (skimage fetches them): not used.
    retina = read("retina.jpg", "RGB")
    add("medical", "retina-green", retina[:, :, 1], "scikit-image", "fundus")

    width, height = (320, 200) if small else (1280, 800)
    add("rendered", "terminal", render_terminal(width, height), "rendered (Pillow)", "terminal")
    for name, figure in render_figures(width, height):
        add("rendered", name, figure, "rendered (matplotlib)", "screenshot")
    add("rendered", "colorwheel", read("color.png", "RGB"), "scikit-image", "synthetic")

    rgb_photos = [(n, p) for n, p in photos if p.ndim == 3 and n != "hubble_deep_field.jpg"]
    for index, (name, photo) in enumerate(rgb_photos):
        base = crop_centre(photo, side)
        add("masks", f"slic-{os.path.splitext(name)[0]}", slic_mask(base), "scikit-image (slic)", "mask-slic")
        add("masks", f"polygons-{index}", polygon_mask(width, height, index), "rendered (Pillow)", "mask-polygons")
        add("masks", f"felzenszwalb-{os.path.splitext(name)[0]}", felzenszwalb_mask(base),
            "scikit-image (felzenszwalb)", "mask-felzenszwalb")
    for name in SKIMAGE_MASKS:
        horse = read(name, "L")
        add("masks", os.path.splitext(name)[0], (horse < 128).astype(np.uint8), "scikit-image", "mask-binary")

    missing = [] if small else package_images(add, counts, per_set)
    if counts["screenshots"] == 0:
        # No documentation package (or a small build): drawn screenshots stand in.
        add("screenshots", "terminal", render_terminal(width, height, seed=1), "rendered (Pillow)", "terminal")
        add("screenshots", "ui-panel", dict(render_figures(width, height, seed=1))["ui-panel"],
            "rendered (matplotlib)", "screenshot")
    manifest = {
        "small": small, "max_side": side, "max_per_set": per_set, "missing_packages": missing,
        "files": [asdict(entry) for entry in entries],
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return Build(entries, missing)


def load_manifest(folder: str | Path) -> dict[str, list[tuple[Entry, np.ndarray]]]:
    """The sets written by ``build``: set name -> [(entry, pixels HxW or HxWxC uint8)]."""
    folder = Path(folder)
    path = folder / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(f"Expected an evaluation-set folder with manifest.json. Got {folder} without one.")
    manifest = json.loads(path.read_text())
    sets: dict[str, list[tuple[Entry, np.ndarray]]] = {}
    for record in manifest["files"]:
        entry = Entry(**record)
        with Image.open(folder / entry.file) as image:
            pixels = np.asarray(image).copy()
        sets.setdefault(entry.set, []).append((entry, pixels))
    return sets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m prepkit.bench.evalsets", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build_parser = commands.add_parser("build", help="write the evaluation sets into OUT")
    build_parser.add_argument("out")
    build_parser.add_argument("--small", action="store_true", help="tiny sets from scikit-image only")
    build_parser.add_argument("--max-per-set", type=int, default=40, help="at most this many images per set")
    args = parser.parse_args(argv)
    result = build(args.out, small=args.small, max_per_set=args.max_per_set, progress=True)
    for set_name in SETS:
        rows = [e for e in result.entries if e.set == set_name]
        sources = sorted({e.source for e in rows})
        print(f"{set_name:<12}{len(rows):>4} images  from {', '.join(sources)}")
    if result.missing_packages:
        print("missing packages (apt-get install -y " + " ".join(result.missing_packages) + "): "
              + ", ".join(result.missing_packages))
    print(f"manifest: {Path(args.out) / 'manifest.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
