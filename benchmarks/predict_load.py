"""The all-weights predictive at scale under load: ``python -m benchmarks.predict_load``.

N = 20,000 synthetic rows (``benchmarks.scale.make_data``), a 2×256 ReLU net (P = 81,418, 10
classes) trained 2 epochs, the all-weights Kronecker and diagonal LA; ``predict_proba`` of the
10,000 test rows (median of 3) idle, beside one CPU-bound process, beside five (a load of ~6 on
2 cores), and beside five with ``SKLAPLACE_NUM_THREADS=1``: the busy/idle ratio (target ≤ 2)
and heavy load against one thread under the same load (target ≤ 1.5).
"""

import contextlib
import os
import statistics
import subprocess
import sys
import time
import warnings

from sklearn.frozen import FrozenEstimator

from sklaplace import LaplaceClassifier

from .scale import make_data, train_net

SETTINGS = (("idle", 0, None), ("1 busy", 1, None), ("load ~6", 5, None),
            ("load ~6, 1 thread", 5, "1"))


@contextlib.contextmanager
def _hogs(k, threads):
    """``k`` CPU-bound processes beside the block, ``SKLAPLACE_NUM_THREADS`` set to ``threads``."""
    saved = os.environ.pop("SKLAPLACE_NUM_THREADS", None)
    if threads:
        os.environ["SKLAPLACE_NUM_THREADS"] = threads
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(k)]
    time.sleep(0.5 if k else 0)
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        os.environ.pop("SKLAPLACE_NUM_THREADS", None)
        if saved is not None:
            os.environ["SKLAPLACE_NUM_THREADS"] = saved


def main(repeats=3):
    warnings.simplefilter("ignore")
    X, y, X_test, _ = make_data(20_000)
    net = train_net((256, 256), X, y, "cpu", epochs=2)
    for structure in ("kron", "diag"):
        est = LaplaceClassifier(FrozenEstimator(net), subset_of_weights="all",
                                hessian_structure=structure, hyperparameter_tuning=None).fit(X, y)
        est.predict_proba(X_test[:100])  # warm-up
        seconds = {}
        for label, k, threads in SETTINGS:
            with _hogs(k, threads):
                times = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    est.predict_proba(X_test)
                    times.append(time.perf_counter() - start)
            seconds[label] = statistics.median(times)
        cells = ", ".join(f"{label} {value:.2f} s" for label, value in seconds.items())
        print(f"all/{structure}, P = {est.n_params_}: {cells}; busy / idle "
              f"{seconds['1 busy'] / seconds['idle']:.2f}, heavy / one thread heavy "
              f"{seconds['load ~6'] / seconds['load ~6, 1 thread']:.2f}", flush=True)


if __name__ == "__main__":
    main()
