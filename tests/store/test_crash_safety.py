"""Crash safety: SIGKILL at random moments, then resume to a byte-identical store;
a second writer is refused; incomplete stores are refused; many readers at once."""

from __future__ import annotations

import fcntl
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

import prepkit
from prepkit.errors import StoreError
from prepkit.store.writer import _marked_complete
from tests.conftest import REPO, smooth_image, store_files, write_image


def shard_command(src: Path, dest: Path) -> list[str]:
    return [sys.executable, "-m", "prepkit", "shard", str(src), str(dest), "--layout", "jpeg",
            "--samples-per-shard", "3", "--workers", "1"]


@pytest.fixture
def many_images(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    for number in range(90):
        write_image(root / f"c{number % 4}" / f"{number:03d}.png", smooth_image(160, 150, seed=number))
    return root


def test_sigkill_at_random_moments_then_resume_gives_identical_store(many_images: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.perf_counter()
    subprocess.run(shard_command(many_images, tmp_path / "reference"), check=True, env=env, capture_output=True)
    duration = time.perf_counter() - started
    dest = tmp_path / "killed"
    rng = random.Random(1)
    kills = 0
    for round_number in range(6):
        process = subprocess.Popen(shard_command(many_images, dest), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Random moments across a whole run: start-up, listing, shard writes, finishing.
        time.sleep(rng.uniform(0.1, 0.6 if round_number == 0 else 0.95) * duration)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
        process.wait()
        if _marked_complete(dest):
            break  # it finished (or was killed during its final clean-up); nothing left to resume
        with pytest.raises(StoreError):
            prepkit.open_store(dest)  # an interrupted store never looks complete
    assert kills >= 1
    result = subprocess.run(shard_command(many_images, dest), env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr  # resumed, or already complete: a no-op success
    assert store_files(dest) == store_files(tmp_path / "reference")


def test_second_writer_is_refused(many_images: Path, tmp_path: Path) -> None:
    dest = tmp_path / "s"
    dest.mkdir()
    (dest / ".prepkit").mkdir()  # looks like an unfinished prepkit store
    with open(dest / ".prepkit.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        result = subprocess.run(shard_command(many_images, dest), env=env, capture_output=True, text=True)
    assert result.returncode == 1
    assert "another prepkit process is writing" in result.stderr and "Traceback" not in result.stderr


def _checksum_all(path: str) -> int:
    store = prepkit.open_store(path, check_crc=True)
    return sum(int(store[i]["image"].sum()) for i in range(len(store)))


def test_many_processes_read_one_store(many_images: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(shard_command(many_images, tmp_path / "s"), check=True, env=env, capture_output=True)
    expected = _checksum_all(str(tmp_path / "s"))
    with ProcessPoolExecutor(3, mp_context=get_context("spawn")) as pool:
        results = list(pool.map(_checksum_all, [str(tmp_path / "s")] * 3))
    assert results == [expected] * 3


def test_killed_during_final_clean_up_leaves_a_clean_complete_store(many_images: Path, tmp_path: Path) -> None:
    import shutil

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(shard_command(many_images, tmp_path / "s"), check=True, env=env, capture_output=True)
    reference = store_files(tmp_path / "s")
    (tmp_path / "s" / ".prepkit").mkdir()  # what a kill between "complete" and the clean-up leaves
    (tmp_path / "s" / ".prepkit" / "plan.json").write_text("{}")
    (tmp_path / "s" / "image" / "zarr.json.partial").write_text("")
    assert prepkit.open_store(tmp_path / "s").attributes.complete  # readable as it is
    result = subprocess.run(shard_command(many_images, tmp_path / "s"), env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr  # the same command again succeeds without writing
    assert store_files(tmp_path / "s") == reference
    shutil.rmtree(tmp_path / "s")


def test_disk_full_names_dest_and_file_and_leaves_no_temporary(class_folder: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from prepkit.ingest.build import build_store
    from prepkit.ingest.images import ImageOptions
    from prepkit.layouts import RawLayout
    from prepkit.store import writer

    real_open = open
    calls = {"n": 0}

    class FullFile:
        def __init__(self, handle: object, name: str) -> None:
            self.handle, self.name = handle, name

        def __enter__(self) -> FullFile:
            return self

        def __exit__(self, *exc: object) -> None:
            self.handle.close()  # type: ignore[attr-defined]

        def write(self, data: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device", self.name)

    def full_open(file: object, mode: str = "r", *args: object, **kwargs: object) -> object:
        handle = real_open(file, mode, *args, **kwargs)  # type: ignore[call-overload]
        if "w" in mode and str(file).endswith("c/0.tmp"):
            calls["n"] += 1
            return FullFile(handle, str(file))
        return handle

    monkeypatch.setattr(writer, "open", full_open, raising=False)
    dest = tmp_path / "s"
    with pytest.raises(StoreError) as caught:
        build_store(str(class_folder), str(dest), layout=RawLayout(), options=ImageOptions(), samples_per_shard=3, workers=1)
    message = str(caught.value)
    assert calls["n"] >= 1
    assert str(dest) in message and "DEST" in message and "image/bytes/c/0.tmp" in message
    assert "No space left on device" in message
    assert not [p for p in dest.rglob("*.tmp")]
