"""Threads and random numbers of concurrent fits: what one fit may change in the process.

The estimators decorate their methods with ``sklaplace.estimators._threads.thread_policy``, which
estimates a call's work and runs it under :func:`torch_threads`; everything else lives
here, where the numerical core can use it.

Three process-wide resources are shared by every estimator of a process, and by the
fits that joblib's threading backend runs at once:

- **torch's intra-op threads.** :func:`thread_policy` (a decorator of ``fit``,
  ``partial_fit`` and the prediction methods) runs the call with one thread when
  its work per operation is small (rows per batch × weights below
  :data:`SMALL_WORK`) or when the machine has no idle core for a second one;
  otherwise with the threads the calling thread has. Oversubscribed OpenMP
  threads wait for each other at every operation: a tiny net on a 2-core machine
  beside one CPU-bound process trains several times slower with two threads than
  with one. The setting is the calling thread's own OpenMP thread count (the
  ``nthreads-var`` ICV, set through threadpoolctl), read and restored in that
  thread only, so concurrent calls cannot restore each other's values, and a
  ``threadpoolctl.threadpool_limits`` around the call lowers it further.
  ``torch.set_num_threads`` is not used: it also changes the default of threads
  started later, a process-wide value. The environment variable
  ``SKLAPLACE_NUM_THREADS`` (a positive integer) replaces the policy by that
  many threads (at most the calling thread's). :func:`single_thread` runs a block on
  one thread whatever the policy (the partition tasks of a fit on dask collections,
  whose sums must not depend on where they run).
- **The BLAS pools of numpy/scipy** (process-wide in OpenBLAS):
  :func:`single_threaded_blas` lowers them to one thread for the L-BFGS-B tuning:
  the first of overlapping sections saves, lowers and restores them, and only a
  pool still at the lowered value (another thread may have set it since).
- **torch's global random number generator**, which initialization, shuffling
  and dropout draw from: :func:`seeded` holds :data:`RNG_LOCK` while a fit draws
  from it under its own seed, so ``random_state`` gives the same fit in threads.
"""

import contextlib
import os
import threading

import torch

#: Multiply-adds of one operation (rows per batch × weights) under which one thread is used.
SMALL_WORK = 2**22

#: Held while a fit draws from torch's global generator under its own seed.
RNG_LOCK = threading.RLock()

_ENV = "SKLAPLACE_NUM_THREADS"
_local = threading.local()
_controller = []
_controller_lock = threading.Lock()
_blas = {"owner": None, "saved": []}
_blas_lock = threading.Lock()


def _threadpool_controller():
    with _controller_lock:
        if not _controller:  # a scan of the loaded libraries: once per process
            from threadpoolctl import ThreadpoolController

            _controller.append(ThreadpoolController())
        return _controller[0]


@contextlib.contextmanager
def seeded(seed):
    """Draw from torch's global generator seeded with ``seed``; restore it afterwards.

    ``torch.random.fork_rng`` under :data:`RNG_LOCK`: another thread's fork, seed or
    draws cannot interleave with this section's (or restore the state mid-way).
    """
    with RNG_LOCK, torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def single_threaded_blas():
    """Limit numpy/scipy's BLAS pools to one thread, safely when sections overlap.

    The L-BFGS-B tuning makes many tiny BLAS calls; on a busy machine OpenBLAS's
    spinning worker threads cost more than the work itself (profiled: 55 ms → 15 ms
    for a scalar δ on a loaded 2-core machine). The pools are process-wide: the
    first of overlapping sections saves and lowers them and restores them when it
    ends (sections that start meanwhile change nothing), and only a pool still at
    one thread (another thread may have set it since). The same thread lowers and
    restores: OpenBLAS (0.3.31, measured) ignores a thread's setting while the
    last thread that set it is alive.
    """
    me = threading.get_ident()
    with _blas_lock:
        owner = _blas["owner"] is None
        if owner:
            libs = _threadpool_controller().select(user_api="blas").lib_controllers
            _blas["owner"], _blas["saved"] = me, [(lib, lib.num_threads) for lib in libs]
            for lib, n in _blas["saved"]:
                if n != 1:
                    lib.set_num_threads(1)
    try:
        yield
    finally:
        if owner:
            with _blas_lock:
                for lib, n in _blas["saved"]:
                    if n != 1 and lib.num_threads == 1:  # else: set by someone else since
                        lib.set_num_threads(n)
                _blas["owner"], _blas["saved"] = None, []


def _cpus():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _busy_elsewhere():
    """Threads runnable now besides the calling one (Linux; 0 where unknown).

    The smallest of a few readings of ``/proc/loadavg``'s runnable count, which
    includes the reader: a neighbour that computes is runnable at every reading.
    """
    try:
        counts = []
        for _ in range(3):
            with open("/proc/loadavg") as fh:
                counts.append(int(fh.read().split()[3].split("/")[0]))
        return max(min(counts) - 1, 0)
    except (OSError, ValueError, IndexError):
        return 0


def choose_threads(work, current):
    """The torch threads for a call of ``work`` multiply-adds per operation (None: unknown).

    At most ``current`` (the calling thread's threads). ``SKLAPLACE_NUM_THREADS``
    set: that many. Else one for small work, and no more than the idle cores.
    """
    setting = os.environ.get(_ENV, "").strip()
    if setting:
        try:
            n = int(setting)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"{_ENV} must be a positive integer, got {setting!r}.")
        return max(1, min(n, current))
    if current <= 1:
        return max(current, 1)
    if work is not None and work < SMALL_WORK:
        return 1
    return max(1, min(current, _cpus() - _busy_elsewhere()))


@contextlib.contextmanager
def torch_threads(work):
    """Run the block with :func:`choose_threads` torch threads in the calling thread.

    Re-entrant (a nested call keeps the outer choice). The calling thread's OpenMP
    thread count is set and restored in that thread only.
    """
    if getattr(_local, "active", False):
        yield
        return
    current = torch.get_num_threads()  # also starts torch's pool in a new thread
    n = choose_threads(work, current)
    limiter = None
    if n < current:
        limiter = _threadpool_controller().select(user_api="openmp").limit(limits=n)
    _local.active = True
    try:
        yield
    finally:
        _local.active = False
        if limiter is not None:
            limiter.restore_original_limits()


@contextlib.contextmanager
def single_thread():
    """Run the block with one torch thread in the calling thread, whatever the policy.

    The per-partition tasks of a fit on dask collections run under it: the order of a
    matrix product's additions depends on its threads, so a partition's sums are then
    the same bitwise in a worker process, in a thread of dask's local scheduler and on
    the client. Torch's intra-op threads and MKL's follow the calling thread's OpenMP
    count, unless MKL's are fixed for the whole process (``MKL_NUM_THREADS``,
    ``torch.set_num_threads``). Nested
    :func:`torch_threads` sections keep the one thread.
    """
    outer = getattr(_local, "active", False)
    limiter = None
    if torch.get_num_threads() > 1:
        limiter = _threadpool_controller().select(user_api="openmp").limit(limits=1)
    _local.active = True
    try:
        yield
    finally:
        _local.active = outer
        if limiter is not None:
            limiter.restore_original_limits()
