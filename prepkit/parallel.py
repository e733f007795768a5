"""Run a picklable job over item indices in worker processes, results in order.

Workers are started with ``spawn``: numba's OpenMP threading layer does not survive a
``fork()`` after a parallel call. The job object is sent once to each worker (as the
pool initializer's argument), then only integers travel to the workers.

Each worker gets its share of the cores for numba's parallel loops (``worker_threads``):
the lossless encoder runs ``prange`` loops on every thread numba has, and ``workers``
processes each with a thread per core kept the cores busy with spinning OpenMP threads
(``prepkit shard --layout lossless`` of 3,000 32 x 32 images with two workers on 2 vCPUs:
53-62 s with every worker on both, 8.0-8.1 s with one thread each; ``python -m
prepkit.bench.workers``, docs/BENCHMARKS.md "Numba threads in worker processes").

Workers never outlive the process that started them: on Linux the kernel sends them
SIGKILL when their parent dies (``PR_SET_PDEATHSIG``), and a watchdog thread in every
worker exits as soon as the parent pid changes (the portable fallback, and the guard for
a parent that died before the signal was armed). Workers ignore SIGINT: Ctrl-C reaches the
parent, which stops them and reports one line.
"""

from __future__ import annotations

import ctypes
import functools
import multiprocessing
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from prepkit.errors import PrepkitError

T = TypeVar("T")
P = ParamSpec("P")

_JOB: Callable[[int], Any] | None = None
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
WATCHDOG_SECONDS = 0.5  # how often a worker checks that its parent is still alive


def _die_with_parent(parent_pid: int) -> None:
    """Arrange for this worker to end when ``parent_pid`` ends."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watchdog below still applies
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while True:
            threading.Event().wait(WATCHDOG_SECONDS)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="prepkit-parent-watchdog", daemon=True).start()


def available_cores() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


# What launchers set, in each process they start, to the number of the job's processes on
# this machine: torchrun, Open MPI and MPICH. Slurm's is SLURM_STEP_TASKS_PER_NODE (below).
LOCAL_SIZE_VARIABLES = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")


def slurm_tasks_here(step_tasks_per_node: str, node: int) -> int | None:
    """The tasks of a Slurm step on its ``node``-th node, from SLURM_STEP_TASKS_PER_NODE's
    form ("4(x2),3": four on each of the first two nodes, then three); None if unreadable."""
    counts: list[int] = []
    for entry in step_tasks_per_node.split(","):
        count, times, repeat = entry.strip().partition("(x")
        if not times:
            repeat = "1)"  # a plain count: one node
        if not (count.isdigit() and repeat.endswith(")") and repeat[:-1].isdigit()):
            return None
        counts += [int(count)] * int(repeat[:-1])
    return counts[node] if 0 <= node < len(counts) and counts[node] >= 1 else None


def local_processes() -> int:
    """How many processes of this job its launcher started on this machine: the first of
    LOCAL_SIZE_VARIABLES set, else, in a task that srun started (SLURM_LOCALID set), its step's
    tasks on this node; 1 without a launcher (a lone process inside a Slurm allocation too)."""
    for name in LOCAL_SIZE_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) >= 1:
            return int(value)
    node = os.environ.get("SLURM_NODEID", "")
    if "SLURM_LOCALID" in os.environ and node.isdigit():
        tasks = slurm_tasks_here(os.environ.get("SLURM_STEP_TASKS_PER_NODE", ""), int(node))
        if tasks is not None:
            return tasks
    return 1


def pinned_by_launcher(own: set[int], launcher: set[int]) -> bool:
    """Whether a launcher gave this process cores of its own: its affinity mask is a strict
    part of the launcher's (a container's or an allocation's limit applies to both)."""
    return own < launcher


def _pinned() -> bool:
    try:
        return pinned_by_launcher(os.sched_getaffinity(0), os.sched_getaffinity(os.getppid()))
    except (AttributeError, OSError):  # no affinity masks here, or the parent is gone
        return False


def rank_threads() -> int:
    """numba threads for this process when a launcher started ``local_processes()`` of them
    on this machine (the ranks of a torchrun job): its own cores when the launcher pinned it
    to a part of its own, else an equal share of the cores it may use, at least one. Without
    a launcher, every core this process may use."""
    cores, ranks = available_cores(), local_processes()
    if ranks == 1 or _pinned():
        return cores
    return max(1, cores // ranks)


@contextmanager
def numba_threads(threads: int) -> Iterator[None]:
    """numba's parallel loops called in this block, from this thread, run on at most
    ``threads`` threads, and never on more than the thread's own setting (numba's setting is
    per thread; a new thread starts at every thread numba has); that setting is back after."""
    import numba

    previous = numba.get_num_threads()
    numba.set_num_threads(max(1, min(threads, previous, numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        numba.set_num_threads(previous)


def keeps_numba_threads(function: Callable[P, T]) -> Callable[P, T]:
    """Decorator for benchmarks, which set numba's thread count themselves: the calling
    thread's count is back to what it was when ``function`` returns or raises, so a test, a
    notebook or a training script that calls one in-process keeps its own setting."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        import numba

        previous = numba.get_num_threads()
        try:
            return function(*args, **kwargs)
        finally:
            numba.set_num_threads(previous)

    return wrapper


def worker_threads(workers: int, cores: int | None = None) -> int:
    """numba threads for each of ``workers`` processes that share ``cores`` (this process's
    by default): an equal share, at least one. PREPKIT_WORKER_THREADS=N gives every worker N
    instead (prepkit.bench.workers sets it to compare)."""
    setting = os.environ.get("PREPKIT_WORKER_THREADS", "")
    if setting:
        if not setting.isdigit() or int(setting) < 1:
            raise PrepkitError(f"PREPKIT_WORKER_THREADS: expected a positive integer. Got {setting!r}.")
        return int(setting)
    return max(1, (available_cores() if cores is None else cores) // max(1, workers))


def limit_numba_threads(threads: int) -> None:
    """Run numba's parallel loops on at most ``threads`` threads: in the whole process when
    numba is not imported yet (NUMBA_NUM_THREADS, read at its import: a pool whose jobs never
    use numba does not import it for this), else in this thread (numba's setting is per
    thread)."""
    threads = max(1, threads)
    if "numba" not in sys.modules:
        os.environ["NUMBA_NUM_THREADS"] = str(threads)
        return
    import numba

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))


def _install(job: Callable[[int], Any], parent_pid: int, numba_threads: int) -> None:
    global _JOB
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    _die_with_parent(parent_pid)
    limit_numba_threads(numba_threads)  # the pool runs its calls on this (the main) thread
    _JOB = job


def call_job(index: int) -> Any:
    """Run the job a spawn_pool worker was started with on ``index`` (map it over a pool)."""
    assert _JOB is not None, "worker started without a job"
    return _JOB(index)


_thread_pools: dict[tuple[str, int], ThreadPoolExecutor] = {}
_thread_pools_lock = threading.Lock()


def thread_pool(name: str, threads: int) -> ThreadPoolExecutor:
    """A long-lived thread pool per (name, size): starting threads per batch costs more than
    the work, and threads can keep per-thread state (e.g. JPEG decoders) between batches."""
    with _thread_pools_lock:
        pool = _thread_pools.get((name, threads))
        if pool is None:
            pool = _thread_pools[(name, threads)] = ThreadPoolExecutor(threads, thread_name_prefix=f"prepkit-{name}")
        return pool


def spawn_pool(workers: int, job: Callable[[int], Any]) -> ProcessPoolExecutor:
    """A pool of ``workers`` spawn processes that run ``job`` and die with this process,
    each with ``worker_threads(workers)`` numba threads."""
    context = multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_install,
        initargs=(job, os.getpid(), worker_threads(workers)),
    )


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now: pending work is cancelled and running workers are terminated."""
    processes = list(getattr(pool, "_processes", {}).values())  # CPython keeps them here
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)


def run_ordered(
    job: Callable[[int], T], indices: Iterable[int], workers: int, window: int | None = None
) -> Generator[T, None, None]:
    """Yield ``job(i)`` for each ``i`` in ``indices``, in that order.

    With ``workers <= 1`` everything runs in this process (same code path, so the
    results are identical whatever the worker count). Otherwise at most ``window``
    results are in flight, so memory stays bounded on huge datasets. An exception, a
    KeyboardInterrupt or closing the generator early stops every worker before returning.
    """
    if workers <= 1:
        for index in indices:
            yield job(index)
        return
    window = window or workers * 8
    pool = spawn_pool(workers, job)
    finished = False
    try:
        pending: deque[Future[T]] = deque()
        for index in indices:
            pending.append(pool.submit(call_job, index))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
        finished = True
    finally:
        if finished:
            pool.shutdown(wait=True)
        else:
            stop_pool(pool)
