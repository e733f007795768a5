"""Run a picklable job over item indices in worker processes, results in order.

Workers are started with ``spawn``: numba's OpenMP threading layer does not survive a
``fork()`` after a parallel call. The job object is sent once to each worker (as the
pool initializer's argument), then only integers travel to the workers.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_JOB: Callable[[int], Any] | None = None


def _install(job: Callable[[int], Any]) -> None:
    global _JOB
    _JOB = job


def _call(index: int) -> Any:
    assert _JOB is not None, "worker started without a job"
    return _JOB(index)


def run_ordered(job: Callable[[int], T], indices: Iterable[int], workers: int, window: int | None = None) -> Iterator[T]:
    """Yield ``job(i)`` for each ``i`` in ``indices``, in that order.

    With ``workers <= 1`` everything runs in this process (same code path, so the
    results are identical whatever the worker count). Otherwise at most ``window``
    results are in flight, so memory stays bounded on huge datasets.
    """
    if workers <= 1:
        for index in indices:
            yield job(index)
        return
    window = window or workers * 8
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_install, initargs=(job,)) as pool:
        pending: deque[Future[T]] = deque()
        iterator = iter(indices)
        try:
            for index in iterator:
                pending.append(pool.submit(_call, index))
                if len(pending) >= window:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
