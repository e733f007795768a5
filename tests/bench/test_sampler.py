"""bench.sampler: the stack samples name the function a thread is busy in."""

from __future__ import annotations

import json
import threading
import time

from prepkit.bench.sampler import StackSampler, format_report, frame_keys
from prepkit.reader.prefetch import Prefetcher


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_busy_thread_is_named_by_its_function() -> None:
    with StackSampler(interval=0.001, prefixes=("worker",)) as sampler:
        thread = threading.Thread(target=_spin, args=(0.3,), name="worker-spin")
        thread.start()
        thread.join()
    report = sampler.top(3)
    assert list(report) == ["worker-spin"]  # the main thread is not sampled (its name does not match)
    entry = report["worker-spin"]
    assert entry["samples"] >= 20  # at least 20 of the ~300 one-millisecond wakes on a busy VM
    first = entry["top"][0]
    # _spin lies outside prepkit: the innermost frame names it, the prepkit column says so.
    assert first["prepkit"] == "(outside prepkit)" and first["innermost"].startswith("test_sampler._spin:")
    assert first["share"] > 0.5 and first["share"] == round(first["samples"] / entry["samples"], 4)
    text = format_report(json.loads(json.dumps(report)))  # as read back from a benchmark's JSON
    assert "worker-spin" in text and "_spin" in text


def test_the_innermost_prepkit_frame_is_the_caller_of_user_code() -> None:
    # The Reader's prefetch thread runs a callable from prepkit/reader/prefetch.py: busy in
    # _spin, its innermost prepkit frame is the prefetcher's loop.
    done = threading.Event()
    idle = threading.Thread(target=done.wait, name="prepkit-idle")  # sampled as often, never in prepkit
    idle.start()
    with StackSampler(interval=0.001, prefixes=("prepkit-",)) as sampler:
        prefetcher = Prefetcher(lambda n: _spin(0.1), range(3), depth=1)
        assert list(prefetcher) == [None, None, None]
    done.set()
    idle.join()
    report = sampler.top(2)
    assert list(report)[:2] == ["prepkit-reader", "prepkit-idle"]  # the thread busy in prepkit first
    entry = report["prepkit-reader"]
    first = entry["top"][0]
    assert first["prepkit"].startswith("prefetch._run:") and first["innermost"].startswith("test_sampler._spin:")
    assert first["share"] > 0.5
    assert frame_keys(None) == ("(outside prepkit)", "")
