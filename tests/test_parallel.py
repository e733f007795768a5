"""Worker pools: each worker's numba threads (prepkit.parallel)."""

from __future__ import annotations

import numba
import pytest

from prepkit import parallel
from prepkit.errors import PrepkitError
from prepkit.parallel import (
    LOCAL_SIZE_VARIABLES,
    available_cores,
    keeps_numba_threads,
    local_processes,
    numba_threads,
    run_ordered,
    worker_threads,
)


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


@pytest.mark.parametrize(("variables", "expected"), [
    ({}, 1), ({"LOCAL_WORLD_SIZE": "8"}, 8), ({"OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, 2), ({"MPI_LOCALNRANKS": "3"}, 3),
    ({"LOCAL_WORLD_SIZE": "0"}, 1), ({"LOCAL_WORLD_SIZE": "many"}, 1),
    ({"SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "4(x2),3"}, 4),
    ({"SLURM_LOCALID": "0", "SLURM_NODEID": "2", "SLURM_STEP_TASKS_PER_NODE": "4(x2),3"}, 3),
    ({"SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "8"}, 1),  # not a task srun started
    ({"SLURM_NTASKS_PER_NODE": "8"}, 1),  # the allocation's request, inherited by a lone process
    ({"LOCAL_WORLD_SIZE": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "1"}, 2),
])  # fmt: skip
def test_local_processes_from_the_launchers_variables(variables: dict[str, str], expected: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*LOCAL_SIZE_VARIABLES, "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_TASKS_PER_NODE",
                 "SLURM_NTASKS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert local_processes() == expected


@pytest.mark.parametrize(("form", "node", "expected"), [
    ("8", 0, 8), ("4(x2),3", 0, 4), ("4(x2),3", 1, 4), ("4(x2),3", 2, 3), ("4(x2),3", 3, None), ("2,4(x3)", 3, 4),
    ("", 0, None), ("four", 0, None), ("4(x)", 0, None), ("0", 0, None),
])  # fmt: skip
def test_slurm_step_tasks_per_node_forms(form: str, node: int, expected: int | None) -> None:
    assert parallel.slurm_tasks_here(form, node) == expected


def test_pinned_means_a_strict_part_of_the_launchers_cores() -> None:
    assert parallel.pinned_by_launcher({0, 1}, {0, 1, 2, 3})
    assert not parallel.pinned_by_launcher({0, 1, 2, 3}, {0, 1, 2, 3})  # a container's or allocation's limit
    assert not parallel.pinned_by_launcher({4, 5}, {0, 1, 2, 3})


@pytest.mark.parametrize(("mask", "ranks", "pinned", "expected"), [
    (64, 1, False, 64),  # no launcher: every core
    (64, 8, False, 8),  # torchrun, 8 ranks, no pinning: an eighth each
    (8, 8, True, 8),  # each rank pinned to 8 cores of its own: those
    (16, 4, False, 4),  # 4 ranks in a container (or a Slurm allocation) of 16 cores: a quarter of the 16
    (2, 4, False, 1),  # more ranks than cores: one each
])  # fmt: skip
def test_rank_threads_share_the_cores_between_a_machines_ranks(mask: int, ranks: int, pinned: bool, expected: int,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "available_cores", lambda: mask)
    monkeypatch.setattr(parallel, "local_processes", lambda: ranks)
    monkeypatch.setattr(parallel, "_pinned", lambda: pinned)
    assert parallel.rank_threads() == expected


def test_numba_threads_limits_this_thread_and_restores_it() -> None:
    before = numba.get_num_threads()
    with numba_threads(1):
        assert numba.get_num_threads() == 1
        with numba_threads(10_000):  # never more than the thread's own setting
            assert numba.get_num_threads() == 1
        assert numba.get_num_threads() == 1
    assert numba.get_num_threads() == before
    with numba_threads(10_000):  # no more than numba has
        assert numba.get_num_threads() == min(before, numba.config.NUMBA_NUM_THREADS)
    assert numba.get_num_threads() == before


def test_keeps_numba_threads_gives_the_setting_back_on_return_and_on_error() -> None:
    @keeps_numba_threads
    def one_thread(fail: bool) -> int:
        numba.set_num_threads(1)
        if fail:
            raise ValueError("stop")
        return numba.get_num_threads()

    top = numba.config.NUMBA_NUM_THREADS
    with numba_threads(top):
        assert one_thread(False) == 1 and numba.get_num_threads() == top
        with pytest.raises(ValueError, match="stop"):
            one_thread(True)
        assert numba.get_num_threads() == top
    assert one_thread.__name__ == "one_thread"
