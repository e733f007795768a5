"""Where threads spend their time, by sampling their Python stacks (for benchmarks).

``cProfile`` sees only the thread that enables it, and the Reader's work happens in its
prefetch thread and in thread pools. A :class:`StackSampler` wakes every ``interval``
seconds, reads every thread's current frame (``sys._current_frames``) and counts, per thread
name, the innermost frame inside prepkit and the innermost frame of all (often numba, the CUDA
driver binding or a lock). A sample costs microseconds; at 1 ms the sampled program runs at
nearly full speed. A thread waiting to take the GIL back (after a nogil numba call, say) is
counted at the line it waits to run, so read shares as "time spent at", not "time computing"::

    with StackSampler() as sampler:
        for batch in reader:
            pass
    print(sampler.format())
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

PACKAGE = str(Path(__file__).resolve().parent.parent) + os.sep  # .../prepkit/
OUTSIDE = "(outside prepkit)"


def _where(frame: FrameType) -> str:
    code = frame.f_code
    return f"{Path(code.co_filename).stem}.{code.co_name}:{frame.f_lineno}"


def frame_keys(frame: FrameType | None, package: str = PACKAGE) -> tuple[str, str]:
    """(innermost frame inside ``package``, innermost frame) of a stack, as 'module.function:line'."""
    innermost = "" if frame is None else _where(frame)
    ours = ""
    while frame is not None:
        if frame.f_code.co_filename.startswith(package):
            ours = _where(frame)
            break
        frame = frame.f_back
    return ours or OUTSIDE, innermost


@dataclass
class StackSampler:
    """Samples the stacks of threads whose names start with one of ``prefixes`` (all threads
    but its own when empty) every ``interval`` seconds while in use."""

    interval: float = 0.001
    prefixes: tuple[str, ...] = ()
    counts: dict[str, collections.Counter[tuple[str, str]]] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _wanted(self, name: str) -> bool:
        return not self.prefixes or name.startswith(self.prefixes)

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.interval):
            names = {thread.ident: thread.name for thread in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                name = names.get(ident, f"thread-{ident}")
                if ident == me or not self._wanted(name):
                    continue
                self.counts.setdefault(name, collections.Counter())[frame_keys(frame)] += 1
                self.samples[name] = self.samples.get(name, 0) + 1

    def __enter__(self) -> StackSampler:
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="prepkit-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.seconds += time.perf_counter() - self._started

    def top(self, count: int = 8) -> dict[str, Any]:
        """Per thread (those seen inside prepkit most often first): its samples and its
        ``count`` most frequent (prepkit frame, innermost frame) pairs with their samples and their
        share of that thread's samples (rounded, so shares may sum to a hair over 1)."""
        report: dict[str, Any] = {}

        def busy(item: tuple[str, collections.Counter[tuple[str, str]]]) -> int:
            # Threads seen inside prepkit most often first: an idle pool thread is sampled as
            # often as a busy one, waiting outside prepkit.
            return -sum(n for (ours, _), n in item[1].items() if ours != OUTSIDE)

        for name, counter in sorted(self.counts.items(), key=busy):
            total = self.samples[name]
            report[name] = {"samples": total, "top": [
                {"prepkit": ours, "innermost": inner, "samples": n, "share": round(n / total, 4)}
                for (ours, inner), n in counter.most_common(count)]}
        return report

    def format(self, count: int = 8, threads: int = 4) -> str:
        """The top frames of the ``threads`` most sampled threads, one line each."""
        return format_report(self.top(count), threads, f"every {self.interval * 1e3:g} ms over {self.seconds:.2f} s")


def format_report(report: dict[str, Any], threads: int = 4, header: str = "") -> str:
    """``StackSampler.top``'s report (also as read back from JSON) as lines of text."""
    lines = [f"stack samples {header}".rstrip()]
    for name, entry in list(report.items())[:threads]:
        lines.append(f"  {name} ({entry['samples']} samples)")
        lines += [f"    {row['share']:6.1%}  {row['prepkit']}  <- {row['innermost']}" for row in entry["top"]]
    return "\n".join(lines)
