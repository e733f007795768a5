"""Worker processes and numba's threads: `prepkit shard`, a DataLoader and ranks over a store.

    python -m prepkit.bench.workers [--images 3000] [--side 32] [--rounds 2] [--out DIR]

Writes `images` PNG crops (side x side) of scikit-image's photographs into DIR, then times
`prepkit shard DIR/src ... --layout lossless` (and `--layout raw`, which runs no numba) in
a new process for each worker count, 1 and every core. With one worker the samples are
encoded in the command's own process (numba on every core); with more, each count runs
twice in the same round: with each worker's share of the cores for numba
(prepkit.parallel.worker_threads, the default) and with every worker running numba on all
of them (PREPKIT_WORKER_THREADS set to the core count: what every worker did before). Then
a torch DataLoader over the lossless store (prepkit.reader.torch.StoreDataset,
RandomResizedCrop(side) and a flip, persistent workers, one worker per core, epochs 2-4
timed after two to warm up) both ways, and as many Readers as cores started together as a
launcher starts a node's ranks (LOCAL_WORLD_SIZE set; the same transforms and epochs), with
the Reader's default threads under the launcher (prepkit.parallel.rank_threads) and with
every core each (what each rank took before). The stores written both ways must be identical
(checked). Rounds alternate the two ways; a figure is the best of `rounds`.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from prepkit.bench.machine import machine_line
from prepkit.parallel import available_cores, worker_threads

SHARE, ALL = "a share of the cores", "all cores each"  # the two ways


def write_crops(folder: Path, images: int, side: int, seed: int = 0) -> None:
    """`images` side x side RGB crops of scikit-image's photographs, as PNG files."""
    from PIL import Image
    from skimage import data

    photos = [p for p in (data.astronaut(), data.coffee(), data.chelsea()) if min(p.shape[:2]) > side]
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(images):
        photo = photos[number % len(photos)]
        y, x = (int(rng.integers(0, photo.shape[k] - side)) for k in (0, 1))
        Image.fromarray(np.ascontiguousarray(photo[y : y + side, x : x + side, :3])).save(folder / f"{number:06d}.png")


def _env(way: str, cores: int) -> dict[str, str]:
    """This process's environment for a run the `way` given: PREPKIT_WORKER_THREADS set to
    every core (ALL) or left out (SHARE)."""
    env = {k: v for k, v in os.environ.items() if k != "PREPKIT_WORKER_THREADS"}
    if way == ALL:
        env["PREPKIT_WORKER_THREADS"] = str(cores)
    return env


def time_shard(src: Path, dest: Path, layout: str, workers: int, way: str, cores: int) -> float:
    """Seconds of one `prepkit shard` run in a new process (the store written to dest)."""
    command = [sys.executable, "-m", "prepkit", "shard", str(src), str(dest), "--layout", layout,
               "--workers", str(workers), "--overwrite"]
    start = time.perf_counter()
    subprocess.run(command, env=_env(way, cores), check=True, capture_output=True)
    return time.perf_counter() - start


LOADER = """
import sys, time, torch
from prepkit.augment import RandomHorizontalFlip, RandomResizedCrop
from prepkit.reader.torch import StoreDataset
def main():
    store, workers, side = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    dataset = StoreDataset(store, batch_size=64, seed=0, transforms=[RandomResizedCrop(side), RandomHorizontalFlip()])
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers,
                                         multiprocessing_context="spawn", persistent_workers=True)
    count, start = 0, 0.0
    for epoch in range(5):
        dataset.set_epoch(epoch)
        if epoch == 2:
            start = time.perf_counter()
        for images, _ in loader:
            count += images.shape[0] if epoch >= 2 else 0
    print(count / (time.perf_counter() - start))
if __name__ == "__main__":
    main()
"""


def loader_rate(store: Path, workers: int, side: int, way: str, cores: int, script: Path) -> float:
    """Images per second of a DataLoader over the store (epochs 2-4), in a new process."""
    out = subprocess.run([sys.executable, str(script), str(store), str(workers), str(side)], env=_env(way, cores),
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


RANK = """
import sys, time
import prepkit
from prepkit.augment import RandomHorizontalFlip, RandomResizedCrop
store, rank, ranks, side, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
reader = prepkit.Reader(store, batch_size=64, seed=0, rank=rank, world_size=ranks, prefetch=2, threads=threads or None,
                        transforms=[RandomResizedCrop(side), RandomHorizontalFlip()])
count, start = 0, 0.0
for epoch in range(5):
    reader.set_epoch(epoch)
    if epoch == 2:
        start = time.perf_counter()
    for batch in reader:
        count += batch.images.shape[0] if epoch >= 2 else 0
print(count, time.perf_counter() - start)
"""


def ranks_rate(store: Path, ranks: int, side: int, way: str, cores: int, script: Path) -> float:
    """Images per second of ``ranks`` Reader processes started together as a launcher starts
    a node's ranks (LOCAL_WORLD_SIZE set), each reading its part of the store (epochs 2-4):
    every rank's images over the slowest rank's seconds. SHARE leaves the Reader's threads
    to their default under the launcher; ALL gives each rank every core (the old default)."""
    env = {**_env(SHARE, cores), "LOCAL_WORLD_SIZE": str(ranks)}
    threads = "0" if way == SHARE else str(cores)
    processes = [subprocess.Popen([sys.executable, str(script), str(store), str(rank), str(ranks), str(side), threads],
                                  env=env, stdout=subprocess.PIPE, text=True) for rank in range(ranks)]
    results = []
    try:
        for process in processes:
            out, _ = process.communicate()
            if process.returncode != 0:
                raise RuntimeError(f"a rank exited with {process.returncode}")
            count, seconds = out.split()[-2:]
            results.append((int(count), float(seconds)))
    finally:
        for process in processes:  # (the other ranks, when one failed)
            if process.poll() is None:
                process.kill()
                process.wait()
    return sum(count for count, _ in results) / max(seconds for _, seconds in results)


def same_files(a: Path, b: Path) -> bool:
    """Whether two folders hold the same files with the same bytes."""
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    return files_a == files_b and all((a / f).read_bytes() == (b / f).read_bytes() for f in files_a)


SHARD, LOADER_ROW = "shard --layout {}, seconds", "DataLoader over the lossless store, images/s"
RANKS_ROW = "Readers as a node's ranks (LOCAL_WORLD_SIZE), images/s"


def threads_label(workers: int, way: str, cores: int) -> str:
    """The numba threads of each process that encodes, for the table."""
    if workers == 1:
        return f"{cores} (one process: the command's own)"
    return f"{worker_threads(workers, cores)} ({SHARE})" if way == SHARE else f"{cores} ({ALL})"


def measure(folder: Path, images: int, side: int, rounds: int) -> list[tuple[str, int, str, float]]:
    """Rows (what, workers, numba threads per worker, best figure), in the table's order:
    shard seconds (lossless, then raw), then the loader's images per second."""
    cores = available_cores()
    counts = sorted({1, cores})
    write_crops(folder / "src", images, side)
    script, rank_script = folder / "loader.py", folder / "rank.py"
    script.write_text(LOADER)
    rank_script.write_text(RANK)
    best: dict[tuple[str, int, str], float] = {}
    for round_number in range(rounds):
        ways = (SHARE, ALL) if round_number % 2 == 0 else (ALL, SHARE)
        for layout in ("lossless", "raw"):
            for workers in counts:
                for way in ways[:1] if workers == 1 else ways:  # one worker: the same run both ways
                    dest = folder / f"{layout}-{workers}-{'share' if way == SHARE else 'all'}"
                    seconds = time_shard(folder / "src", dest, layout, workers, way, cores)
                    key = (SHARD.format(layout), workers, threads_label(workers, way, cores))
                    best[key] = min(best.get(key, seconds), seconds)
                if workers > 1 and not same_files(folder / f"{layout}-{workers}-share", folder / f"{layout}-{workers}-all"):
                    raise AssertionError(f"{layout}, {workers} workers: the stores differ between the two ways")
        if cores > 1:
            for way in ways:
                rate = loader_rate(folder / f"lossless-{cores}-share", cores, side, way, cores, script)
                key = (LOADER_ROW, cores, threads_label(cores, way, cores))
                best[key] = max(best.get(key, rate), rate)
            for way in ways:
                rate = ranks_rate(folder / f"lossless-{cores}-share", cores, side, way, cores, rank_script)
                key = (RANKS_ROW, cores, threads_label(cores, way, cores))
                best[key] = max(best.get(key, rate), rate)
    return [(what, workers, label, value) for (what, workers, label), value in best.items()]


def print_table(rows: list[tuple[str, int, str, float]], images: int, side: int) -> None:
    """The rows as a markdown table under the machine's line, in measure's order."""
    print(machine_line())
    print(f"{images} PNG images of {side} x {side}; best of the rounds\n")
    print("| what | workers | numba threads per process | figure |")
    print("| --- | --- | --- | --- |")
    for what, workers, label, value in rows:
        print(f"| {what} | {workers} | {label} | {value:,.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--side", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="working folder (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.out is not None:
        print_table(measure(args.out, args.images, args.side, args.rounds), args.images, args.side)
        return 0
    with tempfile.TemporaryDirectory(prefix="prepkit-workers-") as folder:
        print_table(measure(Path(folder), args.images, args.side, args.rounds), args.images, args.side)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
