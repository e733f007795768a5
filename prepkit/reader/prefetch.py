"""A background thread that produces batches ahead of the consumer.

Exceptions raised while producing reach the consumer at the batch where they happened;
closing the prefetcher (or dropping it) stops the thread promptly, also while it is
blocked on a full queue, so nothing hangs at the end of an epoch or on Ctrl-C.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_DONE = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class Prefetcher(Generic[T]):
    """Runs ``produce(number)`` for numbers in ``numbers`` in a daemon thread, ``depth`` ahead."""

    def __init__(self, produce: Callable[[int], T], numbers: range, depth: int = 2, name: str = "prepkit-reader",
                 on_start: Callable[[], None] | None = None) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._produce = produce
        self._numbers = numbers
        self._on_start = on_start  # run first in the thread (e.g. select its CUDA device)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            if self._on_start is not None:
                self._on_start()
            for number in self._numbers:
                if self._stop.is_set():
                    return
                if not self._put(self._produce(number)):
                    return
        except BaseException as error:  # handed to the consumer, never lost in the thread
            self._put(_Failure(error))
            return
        self._put(_DONE)

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        while True:
            try:
                item = self._queue.get(timeout=0.1)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise StopIteration from None
        if item is _DONE:
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            raise item.error
        return item

    def close(self) -> None:
        """Stop the thread and drop what it produced; safe to call twice."""
        self._stop.set()
        try:
            while True:
                self._queue.get_nowait()
        except queue.Empty:
            pass
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def __del__(self) -> None:
        self._stop.set()
