"""Worker processes never outlive `prepkit shard`: killed (SIGKILL) or interrupted (SIGINT),
the command leaves no process behind. Real subprocesses, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import smooth_image, write_image

REPO = Path(__file__).resolve().parent.parent.parent


def _children(parent: int) -> list[int]:
    """Pids of the live processes whose parent is ``parent`` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == parent and fields[0] != "Z":
            found.append(int(entry))
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start_shard(tmp_path: Path) -> tuple[subprocess.Popen[bytes], list[int]]:
    """Start `prepkit shard --workers 2` on enough images, return once its workers run."""
    src = tmp_path / "src"
    for number in range(400):
        write_image(src / f"{number:04d}.png", smooth_image(48, 64, seed=number))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # A suite started in the background by a script (`make test &`) runs with SIGINT ignored,
    # and an ignored signal stays ignored across exec: the command would then ignore the
    # test's Ctrl-C, as a background job should. A handled one is reset to the default.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "prepkit", "shard", str(src), str(tmp_path / "store"), "--layout", "lossless",
             "--workers", "2", "--samples-per-shard", "16"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        # The encoding pool (the probing pool before it comes and goes): the store's
        # staging folder exists once planning is over.
        encoding = (tmp_path / "store" / ".prepkit").is_dir()
        workers = [pid for pid in _children(process.pid) if b"spawn_main" in _cmdline(pid)]
        if encoding and len(workers) >= 2:
            time.sleep(0.5)  # let them import and start working
            return process, sorted(set(workers) | set(_children(process.pid)))
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    pytest.fail(f"the workers never started: {process.communicate()[1].decode()[-2000:]}")


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [pid for pid in pids if _alive(pid)]
        if not left:
            return []
        time.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_sigkill_of_the_parent_takes_its_workers_down(tmp_path: Path) -> None:
    process, children = _start_shard(tmp_path)
    assert len(children) >= 2
    process.kill()
    process.wait()
    left = _wait_gone(children, 10)
    _kill_all(left)  # never leave orphans behind, even when the assertion fails
    assert left == [], f"{len(left)} worker processes outlived their killed parent"


def test_sigint_stops_workers_with_one_line(tmp_path: Path) -> None:
    process, children = _start_shard(tmp_path)
    process.send_signal(signal.SIGINT)
    try:
        _, stderr = process.communicate(timeout=60)
    finally:
        left = _wait_gone(children, 10)
        _kill_all(left)
    text = stderr.decode()
    assert process.returncode == 130, text
    assert "Traceback" not in text, text
    errors = [line for line in text.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and "interrupted" in errors[0] and "resume" in errors[0], text
    assert left == [], f"{len(left)} worker processes outlived the interrupted command"
