"""Worker pools: each worker's numba threads (prepkit.parallel)."""

from __future__ import annotations

import numba
import pytest

from prepkit.errors import PrepkitError
from prepkit.parallel import available_cores, run_ordered, worker_threads


class NumbaThreadsJob:
    """Reports the numba threads of the process (and thread) that runs it."""

    def __call__(self, index: int) -> tuple[int, int]:
        return index, numba.get_num_threads()


@pytest.mark.parametrize(("workers", "cores", "expected"), [(1, 8, 8), (2, 8, 4), (3, 8, 2), (8, 8, 1), (16, 8, 1),
                                                            (2, 2, 1), (0, 4, 4)])
def test_worker_threads_share_the_cores(workers: int, cores: int, expected: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREPKIT_WORKER_THREADS", raising=False)
    assert worker_threads(workers, cores) == expected


def test_available_cores_is_positive_and_at_most_the_cpu_count() -> None:
    import os

    assert 1 <= available_cores() <= (os.cpu_count() or 1)


def test_pool_workers_run_numba_on_their_share() -> None:
    """Two spawned workers each limit numba to worker_threads(2) threads; before, each took
    every core and their OpenMP threads spun against each other."""
    results = list(run_ordered(NumbaThreadsJob(), range(6), workers=2))
    assert [index for index, _ in results] == list(range(6))
    assert {threads for _, threads in results} == {min(worker_threads(2), numba.config.NUMBA_NUM_THREADS)}


def test_worker_threads_setting_overrides_the_share(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREPKIT_WORKER_THREADS", "3")
    assert worker_threads(8, 8) == 3 and worker_threads(1, 2) == 3
    monkeypatch.setenv("PREPKIT_WORKER_THREADS", "")
    assert worker_threads(8, 8) == 1
    for bad in ("auto", "0", "-2", "1.5"):
        monkeypatch.setenv("PREPKIT_WORKER_THREADS", bad)
        with pytest.raises(PrepkitError, match="PREPKIT_WORKER_THREADS: expected a positive integer"):
            worker_threads(2, 2)


@pytest.mark.parametrize("numba_first", [False, True])
def test_limit_before_and_after_numba_is_imported(numba_first: bool) -> None:
    """Before numba's import the limit goes to NUMBA_NUM_THREADS (the whole process; pools
    whose jobs never use numba do not import it); after it, to this thread's setting."""
    import subprocess
    import sys

    env = {k: v for k, v in __import__("os").environ.items() if k != "NUMBA_NUM_THREADS"}
    code = ("import sys; " + ("import numba; " if numba_first else "")
            + "from prepkit.parallel import limit_numba_threads; limit_numba_threads(1); "
            + "print('numba' in sys.modules); import numba; print(numba.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    imported, threads = out.stdout.split()
    assert imported == str(numba_first) and threads == "1"
